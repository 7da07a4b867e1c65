"""Rails between nodes: what the pair plan measured rail by rail, and what it decided, as verdicts.

On a rail-optimised fabric NIC k of every node sits on leaf switch k. The pair plan measures a
suspect pair again rail by rail (one ib_write_bw per rail, NIC k <-> NIC k) and decides:

- "bad nic" (subject "node3:rail2"): that host's NIC of rail k, its cable or transceiver, or its
  switch port on leaf k. It fails that host, naming the port, never "bad node"; the slow pairs it
  explains blame neither that host as a node nor any partner.
- "bad rail" (subject "rail1"): rail k's leaf switch, slow for pairs spread over many hosts.
  Fabric-wide: it fails no host and no NIC, and the run fails (exit 1).
- "unresolved" with a rail: a slow rail that fits neither; the host, when named, is not cleared.

The data comes from plan.json (its rail fields: `rails`, `rail_min_drop`, the rounds' `rail_pairs`
and `rails`, the decisions' `host`/`rail`/`hca`, the witnesses' `rail`/`gbits`) and from
inter/pairs/rails.json (each host's HCA and GPU per rail). `rail_plan` is the one place that reads
those fields, from the parsed JSON, so a plan without them (an older plan, or no rail checks)
simply has no rail data.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collbench_py.redact import redact_text
from collbench_py.verdicts.model import Check

PLAN_FILE = "inter/pairs/plan.json"
RAILS_FILE = "inter/pairs/rails.json"
MAX_FILE_BYTES = 256 << 20
RAIL_KINDS = ("bad nic", "bad rail", "unresolved")
DEFAULT_MIN_DROP = 0.1  # a port passes at 90 % of its line, as NVIDIA's certification does
CHECK = "pairs/rails"


@dataclass(frozen=True)
class HostRail:
    """Rail k of one host: its GPU and the HCA nearest to it."""

    index: int
    hca: str | None
    gpu: int | None
    port: int | None = None


@dataclass(frozen=True)
class RailMeasured:
    """One rail of one pair in one round: ib_write_bw NIC k <-> NIC k, in Gb/s (None: failed)."""

    round: int
    pair: tuple[str, str]
    rail: int
    gbits: float | None
    status: str  # ok | slow | failed, against the night's reference

    @property
    def label(self) -> str:
        return f"{self.pair[0]}--{self.pair[1]}"


@dataclass(frozen=True)
class RailFinding:
    """A decision of the plan about a rail: a host's NIC, a leaf, or unresolved."""

    kind: str  # bad nic | bad rail | unresolved
    subject: str  # "node3:rail2" or "rail1"
    host: str | None
    rail: int
    hca: str | None
    reason: str
    pairs: tuple[tuple[str, str], ...] = ()  # the slow pairs it explains
    witnesses: tuple[str, ...] = ()  # "round 3: node1--node3 rail 2 101 Gb/s (slow)"

    @property
    def repair(self) -> str:
        if self.kind == "bad nic":
            return (
                f"replace or reseat the NIC{' ' + self.hca if self.hca else ''}, its cable or transceiver, "
                f"or its switch port on the leaf of rail {self.rail}"
            )
        if self.kind == "bad rail":
            return f"check the leaf switch of rail {self.rail} (its uplinks, its spine ports)"
        return "re-test the rail with known-good partners"


@dataclass(frozen=True)
class RailPlan:
    """The rail part of a run's pair plan, judged."""

    hosts: dict[str, tuple[HostRail, ...]] = field(default_factory=dict)
    measurements: tuple[RailMeasured, ...] = ()
    findings: tuple[RailFinding, ...] = ()
    reference: float | None = None  # the night's reference, Gb/s: the median of every rail measured
    min_drop: float = DEFAULT_MIN_DROP
    error: str | None = None  # why the rail data could not be read

    @property
    def slow_below(self) -> float | None:
        return None if self.reference is None else self.reference * (1 - self.min_drop)

    def of(self, kind: str) -> list[RailFinding]:
        return [f for f in self.findings if f.kind == kind]

    def lowest(self) -> dict[tuple[str, int], tuple[float | None, str]]:
        """(host, rail) -> its lowest measurement (None when every measurement failed) and the peer
        it was measured with."""
        out: dict[tuple[str, int], tuple[float | None, str]] = {}
        for m in self.measurements:
            for host, peer in ((m.pair[0], m.pair[1]), (m.pair[1], m.pair[0])):
                key = (host, m.rail)
                if key not in out:
                    out[key] = (m.gbits, peer)
                    continue
                old = out[key][0]
                if old is not None and (m.gbits is None or m.gbits < old):
                    out[key] = (m.gbits, peer)
        return out


def read_rail_plan(run_dir: Path) -> RailPlan | None:
    """The rail data of a run directory, or None when its plan measured no rail."""
    root = Path(run_dir)
    try:
        plan = _json_file(root / PLAN_FILE)
        rails = _json_file(root / RAILS_FILE)
    except ValueError as error:
        return RailPlan(error=redact_text(str(error)))
    if not isinstance(plan, dict):
        return None
    try:
        found = rail_plan(plan, rails if isinstance(rails, dict) else None)
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as error:
        return RailPlan(error=f"{PLAN_FILE}: rail data not readable ({redact_text(str(error))})")
    return found if found.hosts or found.measurements or found.findings else None


def _json_file(path: Path) -> Any:
    if not path.is_file():
        return None
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ValueError(f"{path.name} is larger than any plan; not read")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        # RecursionError: nesting deeper than any file this tool writes.
        raise ValueError(f"{path.name}: not readable JSON ({type(error).__name__})") from None


def rail_plan(plan: Mapping[str, Any], rails: Mapping[str, Any] | None = None) -> RailPlan:
    """The rail fields of a parsed plan.json (schema 2) and rails.json, judged; a schema 1 plan has
    none, and gives an empty RailPlan."""
    indices = {str(h): [int(k) for k in ks] for h, ks in dict(plan.get("rails") or {}).items()}
    mapped = dict((rails or {}).get("hosts") or {})
    hosts: dict[str, tuple[HostRail, ...]] = {}
    for host in sorted(set(indices) | set(mapped)):
        listed = (mapped.get(host) or {}).get("rails") or []
        known = {int(r["index"]): r for r in listed}
        order = indices.get(host) or sorted(known)
        hosts[host] = tuple(
            HostRail(
                k,
                _text_or_none(known.get(k, {}).get("hca")),
                _int_or_none(known.get(k, {}).get("gpu")),
                _int_or_none(known.get(k, {}).get("port")),
            )
            for k in order
        )
    raw: list[tuple[int, tuple[str, str], int, float | None]] = []
    for rnd in plan.get("rounds") or []:
        number = int(rnd["number"])
        for label, by_rail in dict(rnd.get("rails") or {}).items():
            a, _, b = str(label).partition("--")
            for k, value in dict(by_rail or {}).items():
                raw.append((number, (a, b), int(k), _gbits(value)))
    drop = plan.get("rail_min_drop")
    min_drop = float(drop) if isinstance(drop, int | float) and 0 <= drop < 1 else DEFAULT_MIN_DROP
    values = [v for *_, v in raw if v is not None]
    reference = statistics.median(values) if values else None
    slow_below = None if reference is None else reference * (1 - min_drop)
    measured = tuple(
        RailMeasured(n, pair, k, v, _status(v, slow_below)) for n, pair, k, v in sorted(raw, key=_order)
    )
    findings = tuple(
        _finding(d, hosts)
        for d in plan.get("decisions") or []
        if d.get("kind") in ("bad nic", "bad rail")
        or (d.get("kind") == "unresolved" and d.get("rail") is not None)
    )
    order = {kind: i for i, kind in enumerate(RAIL_KINDS)}
    return RailPlan(
        hosts=hosts,
        measurements=measured,
        findings=tuple(sorted(findings, key=lambda f: (order[f.kind], f.subject))),
        reference=reference,
        min_drop=min_drop,
    )


def _order(item: tuple[int, tuple[str, str], int, float | None]) -> tuple:
    return item[:3]


def _status(value: float | None, slow_below: float | None) -> str:
    if value is None:
        return "failed"
    return "slow" if slow_below is not None and value < slow_below else "ok"


def _gbits(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ValueError(f"rail value {value!r}")
    return float(value)


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _finding(d: Mapping[str, Any], hosts: Mapping[str, tuple[HostRail, ...]]) -> RailFinding:
    subject = str(d["subject"])
    host = d.get("host")
    rail = d.get("rail")
    if rail is None or (host is None and ":" in subject):
        # The subject says both: "node3:rail2" or "rail1".
        head, _, tail = subject.rpartition(":")
        host = host if host is not None else (head or None)
        rail = rail if rail is not None else int(tail.removeprefix("rail"))
    rail = int(rail)
    hca = d.get("hca") or next((r.hca for r in hosts.get(str(host), ()) if r.index == rail), None)
    return RailFinding(
        kind=str(d["kind"]),
        subject=subject,
        host=str(host) if host is not None else None,
        rail=rail,
        hca=_text_or_none(hca),
        reason=redact_text(str(d.get("reason") or "")),
        pairs=tuple(tuple(sorted(p)) for p in d.get("pairs") or []),  # type: ignore[misc]
        witnesses=tuple(_witness_line(w) for w in d.get("witnesses") or []),
    )


def _witness_line(w: Mapping[str, Any]) -> str:
    pair = "--".join(w["pair"])
    if w.get("rail") is not None:
        gbits = w.get("gbits")
        value = "failed" if gbits is None else f"{gbits:.3g} Gb/s"
        return f"round {w['round']}: {pair} rail {w['rail']} {value} ({w.get('status')})"
    busbw = w.get("busbw")
    value = "failed" if busbw is None else f"{busbw:.3g} GB/s"
    return f"round {w['round']}: {pair} {value} ({w.get('status')})"


def nic_name(f: RailFinding) -> str:
    """ "NIC mlx5_2 of rail 2", or "NIC of rail 2" without a map."""
    return f"NIC {f.hca} of rail {f.rail}" if f.hca else f"NIC of rail {f.rail}"


def pair_causes(rails: RailPlan | None) -> dict[tuple[str, str], str]:
    """The cause a rail finding gives each slow pair it explains: "nic <host>:rail<k>" or
    "rail <k>". Such a pair blames neither end as a node, and is no bad link."""
    causes: dict[tuple[str, str], str] = {}
    for f in rails.findings if rails is not None else ():
        if f.kind == "unresolved":
            continue
        cause = f"nic {f.subject}" if f.kind == "bad nic" else f"rail {f.rail}"
        for pair in f.pairs:
            causes.setdefault(pair, cause)
    return causes


def explained_by(cause: str | None, rails: RailPlan | None) -> RailFinding | None:
    """The rail finding behind a pair cause from `pair_causes`."""
    if rails is None or not cause:
        return None
    for f in rails.findings:
        if (f.kind == "bad nic" and cause == f"nic {f.subject}") or (
            f.kind == "bad rail" and cause == f"rail {f.rail}"
        ):
            return f
    return None


def host_checks(rails: RailPlan, known: set[str]) -> dict[str, list[Check]]:
    """A `pairs/rails` check per host the rails measured or named: a bad NIC fails its host with
    the port named; its partners pass (the slow rail is the NIC's); a bad rail fails no host."""
    checks: dict[str, list[Check]] = defaultdict(list)
    lowest = rails.lowest()
    measured_hosts = {h for (h, _k) in lowest}
    nic_of = {f.host: f for f in rails.of("bad nic") if f.host}
    leaves = rails.of("bad rail")
    for host in sorted((measured_hosts | set(nic_of)) & known):
        own = nic_of.get(host)
        if own is not None:
            checks[host].append(
                Check(
                    CHECK,
                    "fail",
                    f"{nic_name(own)}{_gpu_of(rails, host, own.rail)}: {without_name(own)}; not the node: "
                    f"{own.repair}",
                    host,
                    own.witnesses,
                )
            )
            continue
        unresolved = [f for f in rails.of("unresolved") if f.host == host]
        if unresolved:
            listed = "; ".join(f"rail {f.rail}: {f.reason}" for f in unresolved)
            checks[host].append(
                Check(CHECK, "warn", f"slow rail not pinned on a NIC or a leaf, not cleared: {listed}", host)
            )
            continue
        mine = sorted(k for (h, k) in lowest if h == host)
        parts = [f"{len(mine)} rail(s) measured ({', '.join(f'rail {k}' for k in mine)})"]
        theirs = sorted(
            {f.subject for f in nic_of.values() if any(host in p for p in _pairs_with(rails, f.host))}
        )
        if theirs:
            parts.append("slow rails with " + ", ".join(theirs) + " are that NIC's, not this host's")
        for leaf in leaves:
            if any(h == host and k == leaf.rail for (h, k) in lowest):
                parts.append(f"rail {leaf.rail} slow: the leaf of rail {leaf.rail}, not this host's")
        slow = [
            k
            for k in mine
            if _slow(lowest[(host, k)][0], rails)
            and not any(leaf.rail == k for leaf in leaves)
            and not theirs
        ]
        status = "pass" if not slow else "warn"
        if slow:
            parts.append("slow on " + ", ".join(f"rail {k}" for k in slow) + " with no decision about it")
        checks[host].append(Check(CHECK, status, "; ".join(parts), host))
    return dict(checks)


def without_name(f: RailFinding) -> str:
    """The plan's reason without the NIC's name in front, where it starts with it (said once)."""
    for lead in (f"{f.host} {nic_name(f)}: ", f"{nic_name(f)}: "):
        if f.reason.startswith(lead):
            return f.reason[len(lead) :]
    return f.reason


def _pairs_with(rails: RailPlan, host: str | None) -> set[tuple[str, str]]:
    return {m.pair for m in rails.measurements if host in m.pair}


def _slow(value: float | None, rails: RailPlan) -> bool:
    below = rails.slow_below
    return value is None or (below is not None and value < below)


def _gpu_of(rails: RailPlan, host: str, rail: int) -> str:
    gpu = next((r.gpu for r in rails.hosts.get(host, ()) if r.index == rail), None)
    return f" (GPU {gpu})" if gpu is not None else ""


def fleet_checks(rails: RailPlan) -> list[Check]:
    """Fabric-wide: a bad rail (its leaf) fails the run, blaming no host; an unresolved rail with no
    host fails it too (something measured is wrong); otherwise a note of what was measured."""
    out: list[Check] = []
    if rails.error is not None:
        out.append(Check(CHECK, "warn", f"rail measurements not used: {rails.error}"))
        return out
    for f in rails.of("bad rail"):
        out.append(
            Check(
                f"{CHECK}/rail{f.rail}",
                "fail",
                f"rail {f.rail}'s leaf switch: {f.reason}; fabric-wide, no host and no NIC blamed: "
                + f.repair,
                None,
                f.witnesses,
            )
        )
    for f in rails.of("unresolved"):
        if f.host is None:
            out.append(Check(f"{CHECK}/rail{f.rail}", "fail", f"rail {f.rail} unresolved: {f.reason}"))
    if rails.measurements:
        pairs = len({m.pair for m in rails.measurements})
        reference = f"{rails.reference:.4g} Gb/s" if rails.reference is not None else "none"
        out.append(
            Check(
                CHECK,
                "note",
                f"{len(rails.measurements)} rail measurement(s) of {pairs} pair(s); reference (median) "
                f"{reference}, slow below {100 * (1 - rails.min_drop):.0f} % of it",
            )
        )
    return out
