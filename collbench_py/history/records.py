"""What a judged run puts into the history: its rows, table by table, and a digest of them.

Measurements are one row per (launch kind, subject, collective, size): the subject is the host
of an intra-node launch, `a--b` for a pair (sorted), `all` for the all-hosts launch. busbw,
algbw and time are the mean of the out-of-place and in-place halves, a size printed twice
keeps its median: the same numbers the verdicts score.

Facts are flattened to key/value text: nested objects become `os.kernel`, lists of objects
(`gpus`, `ib`) become `gpus.count` plus one key per field holding the value all items share,
the distinct values, or counts (`7x Active, 1x Down`) when they differ.
"""

from __future__ import annotations

import hashlib
import json
import marshal
import statistics
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import chain
from typing import Any

from collbench_py.history.node_parts import rail_rows, rows_of, section_of
from collbench_py.rundir.load import PackedRows
from collbench_py.verdicts import Check, Report
from collbench_py.verdicts.stats import row_busbw

HISTORY_CHECK = "history/"  # prefix of the checks regressions add
FLEET = "fleet"
# Per-item identities and stamps: they differ on every host or every run, so they are no drift.
_SKIPPED_FACTS = {"collected_at", "hostname", "inventory_hostname", "uuid", "pci_bus_id", "index"}
_UNHEALTHY_HOST = {"failed", "unreachable"}
_PAIR_STATUS = {"ok": "pass", "suspect": "warn", "slow": "fail", "failed": "fail", "launcher": "skip"}


@dataclass(frozen=True)
class RunRecords:
    """Every row one run puts into the database, as tuples in each table's column order."""

    run: tuple
    hosts: tuple[tuple, ...]
    measurements: Sequence[tuple]  # MeasurementRows: made as they are read
    verdicts: tuple[tuple, ...]
    facts: tuple[tuple, ...]
    digest: str
    components: tuple[tuple, ...] = ()  # component_measurements rows (history/node_parts.py)
    # The digest in the form databases written before DIGEST_FORM hold, worked out only for a run
    # stored with one (it costs ten times the digest).
    earlier_digest: Callable[[], str] | None = field(default=None, compare=False, repr=False)

    def matches(self, stored: str) -> bool:
        """Whether `stored`, a digest from the runs table, is this run's, in either form."""
        if stored.startswith(DIGEST_FORM) or self.earlier_digest is None:
            return stored == self.digest
        return stored == self.earlier_digest()


def records_of(report: Report, node_checks: Any = None) -> RunRecords:
    """`node_checks`: the report's node checks section (results.json); None: the one the report
    carries, if any."""
    run = report.run
    unhealthy = _unhealthy(report)
    measurements = MeasurementRows(run.run_id, _measurements(report), unhealthy)
    hosts = tuple(
        (
            run.run_id,
            name,
            host.inventory_hostname,
            host.status,
            report.hosts[name].verdict if name in report.hosts else None,
        )
        for name, host in sorted(run.hosts.items())
    )
    verdicts = tuple(_verdict_rows(report))
    flat = flattened_facts(run)
    facts = tuple(
        (run.run_id, name, key, value)
        for name in sorted(run.hosts)
        for key, value in sorted(flat[name].items())
    )
    body = (
        run.run_id,
        started_at(run.started_at, run.run_id),
        run.finished_at,
        run.status,
        run.backend,
        run.launcher,
        run.collbench_version,
        json.dumps(run.parameters, sort_keys=True, default=str),
        report.fleet_status,
        int(report.exit_code(strict=False)),
        str(run.path),
    )
    parts = component_rows(report, node_checks)
    digest = _with_parts(_digest(body, hosts, measurements, verdicts, facts), parts)

    def earlier_digest() -> str:
        return _with_parts(_json_digest(body, hosts, measurements, verdicts, facts), parts)

    return RunRecords(body, hosts, measurements, verdicts, facts, digest, parts, earlier_digest)


def measurement_rows(report: Report) -> MeasurementRows:
    """The run's measurements table rows alone (records_of without the rest, or the digest)."""
    return MeasurementRows(report.run.run_id, _measurements(report), _unhealthy(report))


def component_rows(report: Report, node_checks: Any = None) -> tuple[tuple, ...]:
    """The run's component_measurements rows (`node_checks` None: the section the report carries),
    the node checks' parts and the host rails."""
    section = node_checks if node_checks is not None else section_of(report)
    return rows_of(report.run.run_id, report, section) + rail_rows(report.run.run_id, report)


class MeasurementRows(Sequence[tuple]):
    """The measurements table's rows of a run, made from its measurements as they are read: a
    4,000-host run has about a million, and a second copy of them was most of the report's memory."""

    def __init__(self, run_id: str, measured: list[tuple], unhealthy: set) -> None:
        self.run_id, self.measured, self.unhealthy = run_id, measured, unhealthy

    def __len__(self) -> int:
        return len(self.measured)

    def __getitem__(self, index):  # type: ignore[no-untyped-def, override]
        if isinstance(index, slice):
            return tuple(self._row(m) for m in self.measured[index])
        return self._row(self.measured[index])

    def __iter__(self) -> Iterator[tuple]:
        return map(self._row, self.measured)

    def _row(self, measured: tuple) -> tuple:
        kind, subject, collective = measured[:3]
        healthy = (kind, subject, collective) not in self.unhealthy and subject not in self.unhealthy
        return (self.run_id, *measured, int(healthy))


_DIGEST_CHUNK = 4096  # measurement rows encoded at once (the JSON digest)
# A digest of this form is sha256 over marshal's version 2 bytes of the measurement rows, 4,096 at
# a time: a JSON text of a 4,000-host night's 672,000 rows cost 3 s, marshal's 0.3. Version 2 has
# no back references, so equal rows give equal bytes.
DIGEST_FORM = "m2:"
_MARSHAL_CHUNK = 4096  # measured rows marshalled at once: part of the form, never to change


def _digest(body: tuple, hosts: tuple, measurements: MeasurementRows, verdicts: tuple, facts: tuple) -> str:
    """DIGEST_FORM and the sha256 of the run's rows: the small tables' JSON, then the measurement
    rows as marshal writes them; the JSON digest (_json_digest) where a value is not one marshal
    writes (a run of such values hashes as databases before this form held it)."""
    digest = hashlib.sha256(json.dumps([body[:10], hosts, verdicts, facts], default=str).encode())
    measured = measurements.measured
    try:
        for start in range(0, len(measured), _MARSHAL_CHUNK):  # 72 MB at once for a 4,000-host night
            digest.update(marshal.dumps(measured[start : start + _MARSHAL_CHUNK], 2))
    except ValueError:
        return _json_digest(body, hosts, measurements, verdicts, facts)
    # The rows' healthy column: which of them the run's unhealthy subjects cover, in a fixed order.
    digest.update(json.dumps(sorted(map(repr, measurements.unhealthy))).encode())
    return f"{DIGEST_FORM}{digest.hexdigest()}"


def _json_digest(
    body: tuple, hosts: tuple, measurements: MeasurementRows, verdicts: tuple, facts: tuple
) -> str:
    """sha256 of json.dumps([body[:10], hosts, measurements, verdicts, facts], default=str), the
    measurements encoded a chunk at a time: the same bytes without the whole text in memory. The
    digest databases written before DIGEST_FORM hold."""
    digest = hashlib.sha256()
    digest.update(f"[{json.dumps(body[:10], default=str)}, {json.dumps(hosts, default=str)}, [".encode())
    for start in range(0, len(measurements), _DIGEST_CHUNK):
        chunk = json.dumps(measurements[start : start + _DIGEST_CHUNK], default=str)[1:-1]
        digest.update((", " if start else "").encode() + chunk.encode())
    digest.update(f"], {json.dumps(verdicts, default=str)}, {json.dumps(facts, default=str)}]".encode())
    return digest.hexdigest()


def _with_parts(digest: str, parts: tuple) -> str:
    """The digest of a run with its component rows, in the form of `digest`: only runs with some
    hash them, so a run stored before they were kept, reported again, is still "unchanged"."""
    if not parts:
        return digest
    form = DIGEST_FORM if digest.startswith(DIGEST_FORM) else ""
    return f"{form}{hashlib.sha256(f'{digest}{json.dumps(parts, default=str)}'.encode()).hexdigest()}"


def _measurements(report: Report) -> list[tuple]:
    """The run's measurement rows (kind, subject, collective, size, busbw, algbw, time_us, wrong);
    the run's, whatever verdicts the report holds: made once per run (ingest and the regressions
    both ask, for reports that differ only in their findings)."""
    run = report.run
    if _MEASURED and _MEASURED[0] is run:
        return _MEASURED[1]
    # A row per (kind, subject, collective, size), in the order each was first measured: a subject
    # measured again (a pair in a later round) has its sizes replaced where they are, and the sizes
    # new to it added after everything so far. Built a log's rows at a time: a dict keyed by row cost
    # most of the history's step at 4,000 hosts (672,000 rows).
    blocks: list[list[tuple]] = []
    seen: dict[tuple[str, str, str], list[list[tuple]]] = {}
    for log in run.logs:
        launch, parsed = log.launch, log.run
        if parsed is None or not launch.collective:
            continue
        if launch.kind == "intra" and launch.hosts:
            subject = launch.hosts[0]
        elif launch.kind == "pair" and len(launch.hosts) == 2:
            subject = "--".join(sorted(launch.hosts))
        elif launch.kind == "all":
            subject = "all"
        else:
            continue
        kind, collective = launch.kind, launch.collective
        rows = parsed.rows
        summary = rows.size_summary() if isinstance(rows, PackedRows) else size_summary(rows)
        block = [(kind, subject, collective, *numbers) for numbers in summary]
        earlier = seen.get((kind, subject, collective))
        if earlier is None:
            seen[(kind, subject, collective)] = [block]
            blocks.append(block)
            continue
        at = {row[3]: (rows_of, i) for rows_of in earlier for i, row in enumerate(rows_of)}
        new = []
        for row in block:
            if row[3] in at:
                rows_of, i = at[row[3]]
                rows_of[i] = row
            else:
                new.append(row)
        if new:
            earlier.append(new)
            blocks.append(new)
    _MEASURED[:] = [run, list(chain.from_iterable(blocks))]
    return _MEASURED[1]


_MEASURED: list[Any] = []  # [run, its measurements]: the last run asked for
_FLATTENED: list[Any] = []  # [run, each host's flattened facts]: the last run asked for


def forget_measurements() -> None:
    """Let the last run's measurement rows and flattened facts go (the report written after needs
    the memory)."""
    _MEASURED.clear()
    _FLATTENED.clear()


def flattened_facts(run: Any) -> dict[str, dict[str, str | None]]:
    """Each host of the run (rundir.load.RunDir) with its facts flattened (flatten_facts), made once
    per run: the facts drift and the facts rows both ask (4,000 hosts: 0.5 s each time)."""
    if _FLATTENED and _FLATTENED[0] is run:
        return _FLATTENED[1]
    flat = {name: flatten_facts(host.facts or {}) for name, host in run.hosts.items()}
    _FLATTENED[:] = [run, flat]
    return flat


def size_summary(rows: Any) -> list[tuple[int, float | None, float | None, float | None, int | None]]:
    """Per size, in size order: median busbw, algbw and time_us (each row the mean of its halves)
    and the sum of #wrong; PackedRows.size_summary reads the same from its arrays."""
    by_size: dict[int, list] = {}
    for row in rows:
        by_size.setdefault(row.size, []).append(row)
    return [
        (
            size,
            _median(row_busbw(r) for r in group),
            _median(_mean_half(r, "algbw") for r in group),
            _median(_mean_half(r, "time_us") for r in group),
            _wrong(group),
        )
        for size, group in sorted(by_size.items())
    ]


def _median(values: Any) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _mean_half(row: Any, field: str) -> float | None:
    values = [getattr(h, field) for h in (row.oop, row.ip) if h is not None and getattr(h, field) is not None]
    return sum(values) / len(values) if values else None


def _wrong(rows: list) -> int | None:
    counts = [h.wrong for r in rows for h in (r.oop, r.ip) if h is not None and h.wrong is not None]
    return sum(counts) if counts else None


def _unhealthy(report: Report) -> set:
    """Subjects (hosts, pairs) and (kind, subject, collective) whose numbers must not feed a baseline."""
    bad: set = {h for h, v in report.hosts.items() if v.verdict in _UNHEALTHY_HOST}
    bad |= {name for name, host in report.run.hosts.items() if host.status != "ok"}
    bad |= {("pair", p.label, p.collective) for p in report.pairs if p.status in ("slow", "failed")}
    if report.fleet_status == "fail":
        bad |= {("all", "all", log.launch.collective) for log in report.run.logs_of("all")}
    for verdict in report.hosts.values():
        for check in verdict.checks:
            parts = check.name.split("/")
            # history/<kind>/<collective>[/<subject>]: a regression found in this run.
            if parts[0] + "/" == HISTORY_CHECK and len(parts) >= 3 and check.status in ("warn", "fail"):
                subject = parts[3] if len(parts) > 3 else verdict.host
                bad.add((parts[1], subject, parts[2]))
    return bad


def _verdict_rows(report: Report) -> list[tuple]:
    run_id = report.run.run_id
    rows: list[tuple] = []
    for name, verdict in report.hosts.items():
        rows.append((run_id, "host", name, 0, "verdict", verdict.verdict, _reasons(verdict.problems)))
        rows += [
            (run_id, "host", name, seq, c.name, c.status, c.reason)
            for seq, c in enumerate(verdict.checks, start=1)
        ]
    # The cause the pairs conclusion gave each bad pair: `link` only for a bad link, so what is read
    # back (history/query.py) is the report's own conclusion, not the pair's first attribution.
    causes = {"bad link": "link", "unresolved": "unresolved"}
    concluded = {
        (p.label, f.collective): causes.get(f.kind, f"node {f.subject}")
        for f in report.conclusion.findings
        for p in f.pairs
    }
    for seq, pair in enumerate(report.pairs):
        busbw = "no busbw" if pair.busbw is None else f"{pair.busbw:.4g} GB/s"
        cause = concluded.get((pair.label, pair.collective), pair.cause)
        cause = f", cause: {cause}" if cause else ""
        reason = f"{pair.collective} {pair.status}: {busbw}{cause}"
        rows.append(
            (run_id, "pair", pair.label, seq, f"pairs/{pair.collective}", _PAIR_STATUS[pair.status], reason)
        )
    rows += [
        (run_id, FLEET, FLEET, seq, c.name, c.status, c.reason) for seq, c in enumerate(report.fleet_checks)
    ]
    return rows


def _reasons(problems: list[Check]) -> str:
    return " | ".join(c.reason for c in problems)


def flatten_facts(facts: dict[str, Any], prefix: str = "") -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for key, value in facts.items():
        if key in _SKIPPED_FACTS:
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten_facts(value, f"{name}."))
        elif isinstance(value, list) and all(isinstance(item, dict) for item in value):
            out[f"{name}.count"] = str(len(value))
            fields = sorted({k for item in value for k in item} - _SKIPPED_FACTS)
            for field in fields:
                out[f"{name}.{field}"] = _summarise([item.get(field) for item in value])
        elif isinstance(value, list):
            out[name] = ",".join(str(v) for v in value)
        else:
            out[name] = None if value is None else str(value)
    return out


def _summarise(values: list[Any]) -> str | None:
    present = [str(v) for v in values if v is not None]
    if not present:
        return None
    counts = Counter(present)
    if len(counts) == 1:
        return present[0]
    if len(counts) == len(present):
        return ",".join(sorted(counts))
    return ", ".join(f"{n}x {value}" for value, n in sorted(counts.items()))


def started_at(stamp: str | None, run_id: str) -> str:
    """The run's start as `YYYY-mm-ddTHH:MM:SSZ` (sorts as text); from the run id if the manifest lacks it."""
    for text, form in ((stamp, None), (run_id[:16], "%Y%m%dT%H%M%SZ")):
        if not text:
            continue
        try:
            moment = (
                datetime.strptime(text, form).replace(tzinfo=UTC)
                if form
                else datetime.fromisoformat(text.replace("Z", "+00:00"))
            )
        except ValueError:
            continue
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return now()


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
