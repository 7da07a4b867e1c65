"""Regressions: each host and each link against its own history, and facts that drifted.

The baseline of a subject (a host's intra-node busbw, a pair's busbw) is, per message size, the
median and MAD of its last N healthy runs before this one (rolling), or the values a frozen
baseline stored (`collbench baseline`). A subject is judged at the reference sizes (the
largest sizes from `reference_min_bytes` up that both the run and the baseline have): the
median over those sizes of the relative drop and of the robust z-score. Both must cross the
line, so run-to-run jitter (a tight MAD gives big z-scores for tiny drops) never fires:

    warn: drop >= min_drop  and z <= z_suspect
    fail: drop >= fail_drop and z <= z_fail
    fail: drop >= fail_drop and busbw under half the lowest healthy run of the baseline

The last line is for a baseline of few, widely spread runs (a noisy fleet, or two runs): its MAD
is then so wide that no z-score reaches the line, yet a value under half of every healthy run
before it is no jitter. A profile with a `history` section (cpu-gloo: gloo on shared CPU cores)
widens min_drop and fail_drop to its own figures; it never narrows them.

A sample is healthy when its host did not fail and was reachable (for a pair: the pair was
not slow or failed) and no regression was found on it in its own run, so a degraded node
does not become its own baseline. All-hosts launches are stored but not judged here: their
number depends on which hosts took part.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from itertools import compress
from typing import Any, Literal

from collbench_py.history.columns import JudgedReader, read_columns
from collbench_py.history.node_parts import CHECK_PREFIX as COMPONENT_CHECK
from collbench_py.history.node_parts import JUDGED_UNITS
from collbench_py.history.node_parts import TABLE as COMPONENT_TABLE
from collbench_py.history.records import component_rows, flattened_facts, measurement_rows, started_at
from collbench_py.history.retention import RAW_NIGHTS, night_of, summary_samples
from collbench_py.history.store import HistoryError, Store, has_table
from collbench_py.profiles import Profile
from collbench_py.verdicts import Check, HostVerdict, Report
from collbench_py.verdicts.bandwidth import sizes_text
from collbench_py.verdicts.model import VERDICT_ORDER, verdict_of
from collbench_py.verdicts.pairs import blame_nodes
from collbench_py.verdicts.stats import MAD_TO_SIGMA

ROLLING = "rolling"
COMPONENT = "component"  # Finding.kind of a GPU, GPU pair, NVLink or HCA judged against its history
# A value under this fraction of the lowest healthy run of its baseline fails however wide the
# baseline's spread.
UNDER_EVERY_RUN = 0.5
# Facts whose change means different hardware or a degraded link, not a software update.
HARDWARE_FACTS = (
    "gpus.count",
    "gpus.name",
    "gpus.memory_total_mib",
    "gpus.pcie_gen_current",
    "gpus.pcie_width_current",
    "ib.",
    "cpu.",
    "numa_nodes",
)

FindingStatus = Literal["pass", "warn", "fail", "note"]


@dataclass(frozen=True)
class HistoryOptions:
    runs: int = 10  # rolling baseline: the last N healthy runs
    min_runs: int = 2  # fewer healthy runs than this: no judgement
    min_drop: float = 0.05
    fail_drop: float = 0.10
    z_suspect: float = -3.0
    z_fail: float = -5.0
    mad_floor: float = 0.01  # the spread never counts as less than 1 % of the median
    reference_min_bytes: int = 256 * 1024**2
    reference_sizes: int = 3
    baseline: str | None = None  # None: the newest frozen baseline if any, else rolling; or a name
    raw_nights: int = RAW_NIGHTS  # retention: raw rows for this many nights, summaries beyond; 0: all raw


@dataclass(frozen=True)
class Finding:
    """One judgement of a subject against its history, ready to become a report check."""

    # history/intra/<collective>, history/pair/<collective>/<a--b>, history/facts,
    # history/component/<kind>/<component>/<metric>
    name: str
    status: FindingStatus
    subject: str  # host, `a--b`, or `host:component`
    hosts: tuple[str, ...]  # the hosts it is about (a pair: both)
    reason: str
    kind: str  # intra, pair, facts, component
    collective: str | None = None  # a component's metric
    sizes: tuple[int, ...] = ()
    value: float | None = None  # busbw now, GB/s
    baseline: float | None = None  # baseline median, GB/s
    drop: float | None = None  # relative, positive when lower
    z: float | None = None
    runs: int = 0  # history samples the baseline rests on
    baseline_name: str = ROLLING
    evidence: tuple[str, ...] = field(default=())

    def check(self, host: str) -> Check:
        return Check(self.name, self.status, self.reason, host, self.evidence)


@dataclass(frozen=True, slots=True)
class _Stat:
    median: float
    mad: float
    n: int
    low: float | None = None  # the lowest healthy sample (rolling baselines; frozen ones keep none)


Baseline = dict[tuple[str, str, str], dict[int, _Stat]]  # (kind, subject, collective) -> size -> stat


def for_profile(options: HistoryOptions, profile: Profile | None) -> HistoryOptions:
    """The drops that warn and fail, widened where the run's profile says its numbers jitter more
    (cpu-gloo: gloo on shared CPU cores moves +-30 % run to run); never narrowed."""
    if profile is None:
        return options
    warn = max(options.min_drop, profile.history_warn_drop or 0.0)
    fail = max(options.fail_drop, profile.history_fail_drop or 0.0, warn)
    return replace(options, min_drop=warn, fail_drop=fail)


def find_regressions(
    store: Store, report: Report, options: HistoryOptions | None = None, node_checks: Any = None
) -> tuple[Finding, ...]:
    """Findings for `report`'s run against the runs stored before it (never against itself or later
    runs); `node_checks` is the run's node checks section (None: the one the report carries)."""
    options = for_profile(options or HistoryOptions(), report.profile)
    # The rows alone: the digest records_of adds is the writer's business (a second pass over them).
    measurements = measurement_rows(report).measured
    run_id = report.run.run_id
    before = (started_at(report.run.started_at, run_id), run_id)
    # This run's busbw per subject and size: a plain number each (a million at 4,000 hosts).
    current: dict[tuple[str, str, str], dict[int, float]] = defaultdict(dict)
    for kind, subject, collective, size, busbw, *_ in measurements:
        if kind in ("intra", "pair") and busbw is not None and busbw > 0:
            current[(kind, subject, collective)][size] = busbw
    drift = facts_drift(store, report, before)
    frozen_name = _baseline_name(store, options)
    frozen = load_frozen(store, frozen_name) if frozen_name != ROLLING else {}
    subjects: dict[tuple[str, str], set[str]] = defaultdict(set)
    for kind, subject, collective in current:
        subjects[(kind, collective)].add(subject)
    # Only the sizes a subject can be judged at: from reference_min_bytes up, or, in a group where some
    # subject measured nothing that large, every size (it is judged at its largest common size).
    large = {
        group: all(
            any(size >= options.reference_min_bytes for size in current[(group[0], s, group[1])])
            for s in names
        )
        for group, names in subjects.items()
    }
    min_size = {group: options.reference_min_bytes if large[group] else 0 for group in subjects}
    judged: dict[tuple[str, str], dict[str, tuple[int, ...]]] = defaultdict(dict)
    for (kind, subject, collective), points in current.items():
        judged[(kind, collective)][subject] = judged_sizes(points, options)
    rolling = rolling_baseline(
        store, set(subjects), before, options.runs, subjects, min_size=min_size, judged=judged
    )
    findings = list(drift.values())
    for key, points in sorted(current.items()):
        name, base = (frozen_name, frozen[key]) if key in frozen else (ROLLING, rolling.get(key, {}))
        finding = _judge(key, points, base, name, options)
        if finding is None:
            continue
        changed = [d for d in drift.values() if d.subject in finding.hosts]
        if changed and finding.status in ("warn", "fail"):
            keys = ", ".join(e.split(":")[0] for d in changed for e in d.evidence)
            finding = replace(finding, reason=f"{finding.reason}; facts changed since the last run: {keys}")
        findings.append(finding)
    findings += component_findings(store, component_rows(report, node_checks), before, options)
    return tuple(findings)


def component_findings(
    store: Store, rows: Sequence[tuple], before: tuple[str, str], options: HistoryOptions
) -> list[Finding]:
    """Each bandwidth of each component (a GPU's H2D, a GPU pair's read, an HCA's loopback) against
    its own rolling baseline: the same rule, options and lines as a host's busbw at one size."""
    current = {
        (host, kind, component, metric): (value, unit)
        for _, host, kind, component, metric, value, unit, _ in rows
        if unit in JUDGED_UNITS and value is not None and value > 0
    }
    if not current or not has_table(store, COMPONENT_TABLE):
        return []
    samples: dict[tuple[str, str, str, str], list[float]] = defaultdict(list)
    for host, kind, component, metric, value in store.query(
        "SELECT host, kind, component, metric, value FROM ("
        " SELECT c.host, c.kind, c.component, c.metric, c.value, DENSE_RANK() OVER ("
        "  PARTITION BY c.host, c.kind, c.component, c.metric"
        "  ORDER BY r.started_at DESC, r.run_id DESC) AS recency"
        f" FROM {COMPONENT_TABLE} c JOIN runs r ON r.run_id = c.run_id"
        " WHERE c.healthy = 1 AND c.value > 0"
        "  AND (r.started_at < ? OR (r.started_at = ? AND r.run_id < ?))"
        ") ranked WHERE recency <= ?",
        (before[0], before[0], before[1], options.runs),
    ):
        key = (host, kind, component, metric)
        if key in current:
            samples[key].append(value)
    findings = []
    for key, (value, unit) in sorted(current.items()):
        values = samples.get(key, [])
        if len(values) >= options.min_runs:
            findings.append(_judge_component(key, value, unit or "", stat_of(values), options))
    return findings


# What to do about a component that dropped against its own past.
_COMPONENT_ACTIONS = {
    "gpu": "reseat the GPU if it stays low",
    "gpu_pair": "open a ticket for the NVLink between them if it stays low",
    "nvlink": "open a ticket for the NVLink if it stays low",
    "hca": "check the HCA's cable and transceiver, swap them if it stays low",
    "port": "check the port's cable and transceiver, swap them if it stays low",
}


def _judge_component(
    key: tuple[str, str, str, str], value: float, unit: str, stat: _Stat, options: HistoryOptions
) -> Finding:
    host, kind, component, metric = key
    scale = max(MAD_TO_SIGMA * stat.mad, options.mad_floor * stat.median)
    drop = (stat.median - value) / stat.median
    z = (value - stat.median) / scale
    under_every_run = stat.low is not None and value < UNDER_EVERY_RUN * stat.low
    status: FindingStatus = "pass"
    if drop >= options.fail_drop and (z <= options.z_fail or under_every_run):
        status = "fail"
    elif drop >= options.min_drop and z <= options.z_suspect:
        status = "warn"
    what = f"{host} {kind.replace('_', ' ')} {component} {metric}"
    if status == "pass":
        reason = (
            f"{what} {value:.4g} {unit}, its baseline median ({stat.n} runs): {stat.median:.4g} {unit} "
            f"({round(-drop, 3) + 0.0:+.0%})"
        )
    else:
        reason = (
            f"{what} is {drop:.0%} below its baseline median ({stat.n} runs): {value:.4g} {unit} against "
            f"{stat.median:.4g} {unit}, robust z {z:+.1f}"
        )
        if status == "fail" and z > options.z_fail:
            reason += f", under half of its lowest healthy run ({stat.low:.4g} {unit})"
        reason += f"; {_COMPONENT_ACTIONS.get(kind, 'check the component')}"
    return Finding(
        name=f"{COMPONENT_CHECK}{kind}/{component}/{metric}",
        status=status,
        subject=f"{host}:{component}",
        hosts=(host,),
        reason=reason,
        kind=COMPONENT,
        collective=metric,
        value=value,
        baseline=stat.median,
        drop=drop,
        z=z,
        runs=stat.n,
    )


def _baseline_name(store: Store, options: HistoryOptions) -> str:
    if options.baseline == ROLLING:
        return ROLLING
    if options.baseline is not None:
        if not store.query("SELECT 1 FROM baselines WHERE name = ?", (options.baseline,)):
            raise HistoryError(f"no frozen baseline named {options.baseline!r} in {store.path}")
        return options.baseline
    newest = store.query("SELECT name FROM baselines ORDER BY created_at DESC, name DESC LIMIT 1")
    return newest[0][0] if newest else ROLLING


def judged_sizes(points: dict[int, float] | list[int], options: HistoryOptions) -> tuple[int, ...]:
    """The sizes a subject measured now that it is judged at when its baseline has them all (_judge):
    its largest `reference_sizes` from `reference_min_bytes` up, else its largest."""
    ordered = sorted(points)
    large = [size for size in ordered if size >= options.reference_min_bytes]
    return tuple(large[-options.reference_sizes :] if large else ordered[-1:])


def rolling_baseline(
    store: Store,
    groups: set[tuple[str, str]],
    before: tuple[str, str],
    runs: int,
    subjects: dict[tuple[str, str], set[str]] | None = None,
    *,
    min_size: dict[tuple[str, str], int] | None = None,
    judged: dict[tuple[str, str], dict[str, tuple[int, ...]]] | None = None,
) -> Baseline:
    """Per subject and size: median and MAD of busbw over its last `runs` healthy runs before `before`.

    Read in three steps, each only for the subjects the step before left short: the newest `runs`
    runs (a nightly fleet: every subject, read by run id without sorting the whole history), then
    the subject's older raw runs, then its night summaries of the nights before them
    (history/retention.py), one night one sample: its raw rows may have aged out of the retention
    window. `subjects` are the ones to top up from the summaries (None: none). `min_size`: per
    (kind, collective), the smallest size worth reading (the reference sizes start there: a
    4,000-host fleet has 670,000 sizes a run, 150,000 of them from 256 MiB up); a collective whose
    subjects measure nothing that large does not make the others of its kind read every size.

    `judged`: per (kind, collective), subject -> the sizes it is judged at (judged_sizes). Then the
    newest runs are read at those sizes alone (a 4,000-host fleet: 3 of the 4-7 sizes from 256 MiB
    up), and only a subject that lacks one of them in one of those runs is read again in full and
    goes on through the steps as before. A subject that has them all in every one of the newest
    runs is judged at them whatever else it measured, on the same samples, so the findings are
    the same as from the full read."""
    out: Baseline = {}
    before_night = night_of(before[0])
    recent = [
        r[0]
        for r in store.query(
            "SELECT run_id FROM runs WHERE started_at < ? OR (started_at = ? AND run_id < ?) "
            "ORDER BY started_at DESC, run_id DESC LIMIT ?",
            (before[0], before[0], before[1], runs),
        )
    ]
    oldest = (
        store.query("SELECT started_at FROM runs WHERE run_id = ?", (recent[-1],))[0][0] if recent else None
    )
    sizes_from = {group: (min_size or {}).get(group, 0) for group in groups}
    for kind in sorted({k for k, _ in groups}):
        floors = {c: size for (k, c), size in sizes_from.items() if k == kind}
        pool = _Pool()
        # subject -> the newest runs it has healthy samples in, per collective
        depth: dict[str, dict[str, int]] = {c: defaultdict(int) for c in floors}
        # Each collective from its own smallest size: one query per run and kind (its rows lie
        # together in the primary key), the sizes below each floor never leave SQLite. A CASE, not
        # `collective = ?`: that would make SQLite walk the (kind, collective) index of every run.
        floor_of = " ".join("WHEN ? THEN ?" for _ in floors)
        floor_params = tuple(value for item in sorted(floors.items()) for value in item)
        sql = (
            "SELECT collective, subject, size, busbw FROM measurements WHERE run_id = ? AND kind = ?"
            f" AND healthy = 1 AND busbw > 0 AND size >= CASE collective {floor_of} END"
        )
        by_subject = {c: (judged or {}).get((kind, c)) for c in floors}
        if judged is not None and len(recent) == runs and all(by_subject.values()):
            complete = _read_judged_sizes(store, pool, kind, recent, by_subject)  # type: ignore[arg-type]
            for collective, subject in complete:
                depth[collective][subject] = runs
            rest = sorted({(c, s) for c, names in by_subject.items() for s in names or ()} - complete)
            names = sorted({subject for _, subject in rest})
            rest_set = set(rest)
            for start in range(0, len(names), 500):
                chunk = names[start : start + 500]
                for run_id in recent:
                    rows = store.query(
                        f"{sql} AND subject IN ({', '.join('?' for _ in chunk)})",
                        (run_id, kind, *floor_params, *chunk),
                    )
                    _pool_run(pool, depth, [row for row in rows if row[:2] in rest_set])
        else:
            for run_id in recent:
                _pool_run(pool, depth, store.query(sql, (run_id, kind, *floor_params)))
        lows: dict[tuple[str, str, int], float] = {}
        for collective, smallest in sorted(floors.items()):
            have = depth[collective]
            wanted = (subjects or {}).get((kind, collective), set())
            short = {s: runs - have[s] for s in wanted if have[s] < runs}
            if short and len(recent) == runs:
                # Older raw runs, only for the subjects still short.
                older: dict[str, set[int]] = defaultdict(set)
                last = {"last_run": recent[-1], "last_started": oldest}
                for subject, size, busbw, recency in _older_raw(
                    store, kind, collective, short, smallest=smallest, **last
                ):
                    if recency <= short[subject]:
                        pool.add(collective, subject, size, busbw)
                        older[subject].add(recency)
                short = {s: need - len(older[s]) for s, need in short.items() if len(older[s]) < need}
            for subject, by_size in summary_samples(store, kind, collective, short, before_night).items():
                for size, nights in by_size.items():
                    for night in nights:
                        pool.add(collective, subject, size, night.median)
                    lows[(collective, subject, size)] = min(night.low for night in nights)
        for (collective, subject, size), stat in pool.stats():
            low = lows.get((collective, subject, size))
            out.setdefault((kind, subject, collective), {})[size] = _with_low(stat, low)
    return out


def _pool_run(pool: _Pool, depth: dict[str, dict[str, int]], rows: list[tuple]) -> None:
    """One run's samples pooled; each (collective, subject) in them is one run deeper."""
    pool.extend(rows)
    for collective, subject in {row[:2] for row in rows}:
        depth[collective][subject] += 1


def _read_judged_sizes(
    store: Store, pool: _Pool, kind: str, recent: list[str], by_subject: dict[str, dict[str, tuple[int, ...]]]
) -> set[tuple[str, str]]:
    """Read the newest runs at each subject's judged sizes; pool the samples of the (collective,
    subject) that have every one of them in every run, and return those.

    A run with its busbw column (history/columns.py) is read from it; another from its rows."""
    wanted = sorted(
        {(c, size) for c, names in by_subject.items() for sizes in names.values() for size in sizes}
    )
    pairs = ", ".join("(?, ?)" for _ in wanted)
    stored = read_columns(store, kind, recent)
    reader = JudgedReader(wanted)
    runs = [
        reader.columns(stored[run_id])
        if run_id in stored
        else _columns(
            store.query(
                "SELECT collective, subject, size, busbw FROM measurements WHERE run_id = ? AND kind = ?"
                f" AND (collective, size) IN (VALUES {pairs}) AND healthy = 1 AND busbw > 0",
                (run_id, kind, *(value for item in wanted for value in item)),
            )
        )
        for run_id in recent
    ]
    if not _judged_alike(by_subject, wanted):  # some rows read are not their subject's judged sizes
        runs = [
            _columns([row for row in zip(*columns, strict=True) if _own(row, by_subject)]) for columns in runs
        ]
    # A run whose rows are the series of the longest run, in its order (no host of it missing or
    # unhealthy that night: a nightly fleet's usual run), is counted and pooled a run at a time,
    # column against column, not row by row (a 4,000-host fleet: 78,000 rows a run).
    collectives, subjects, sizes, _ = max(runs, key=lambda columns: len(columns[0]), default=_columns([]))
    alike: list[tuple[float, ...]] = []
    found: dict[tuple[str, str], int] = defaultdict(int)
    others: list[tuple] = []
    for columns in runs:
        if columns[1] == subjects and columns[2] == sizes and columns[0] == collectives:
            alike.append(columns[3])
            continue
        rows = list(zip(*columns, strict=True))
        others += rows
        for row in rows:
            found[row[:2]] += 1
    for key, count in Counter(zip(collectives, subjects, strict=True)).items():
        found[key] += count * len(alike)
    # A subject this run did not measure (a host down tonight) may still be in the rows: never complete.
    complete = {
        key for key, count in found.items() if count == len(recent) * len(by_subject[key[0]].get(key[1], ()))
    }
    keep = [key in complete for key in zip(collectives, subjects, strict=True)]
    pool.extend_alike(
        list(compress(zip(collectives, subjects, sizes, strict=True), keep)),
        [list(compress(v, keep)) for v in alike],
    )
    pool.extend([row for row in others if row[:2] in complete])
    return complete


def _own(row: tuple, by_subject: dict[str, dict[str, tuple[int, ...]]]) -> bool:
    """Whether a (collective, subject, size, ...) row is at one of its subject's judged sizes."""
    return row[2] in by_subject[row[0]].get(row[1], ())


def _columns(rows: list[tuple]) -> list[tuple]:
    """Rows of (collective, subject, size, busbw) as their four columns."""
    return list(zip(*rows, strict=True)) if rows else [(), (), (), ()]


def _judged_alike(by_subject: dict[str, dict[str, tuple[int, ...]]], wanted: list[tuple[str, int]]) -> bool:
    """Whether every subject of a collective is judged at each size wanted of that collective (one
    set of launch parameters fleet-wide): then every row read is one of its subject's judged sizes."""
    of_collective: dict[str, set[int]] = defaultdict(set)
    for collective, size in wanted:
        of_collective[collective].add(size)
    return all(
        len(sizes) == len(of_collective[collective]) and set(sizes) == of_collective[collective]
        for collective, names in by_subject.items()
        for sizes in set(names.values())
    )


class _Pool:
    """The busbw samples of many (collective, subject, size) series, and their median, MAD, count
    and lowest value computed for all series at once (numpy): a 4,000-host fleet has some 180,000
    series of 10 samples each, a million and a half values."""

    __slots__ = ("index", "series", "values")

    def __init__(self) -> None:
        self.index: dict[tuple[str, str, int], int] = {}
        self.series: list[int] = []
        self.values: list[float] = []

    def extend(self, rows: list[tuple]) -> None:
        """Rows of (collective, subject, size, busbw)."""
        index = self.index
        self.series += [index.setdefault(row[:3], len(index)) for row in rows]
        self.values += [row[3] for row in rows]

    def extend_alike(self, keys: list[tuple[str, str, int]], runs: list[list[float]]) -> None:
        """Runs of the same series in the same order: `keys` the (collective, subject, size) of each
        value, `runs` each run's busbw values."""
        index = self.index
        series = [index.setdefault(key, len(index)) for key in keys]
        for values in runs:
            self.series += series
            self.values += values

    def add(self, collective: str, subject: str, size: int, value: float) -> None:
        self.series.append(self.index.setdefault((collective, subject, size), len(self.index)))
        self.values.append(value)

    def stats(self) -> Iterator[tuple[tuple[str, str, int], _Stat]]:
        if not self.index:
            return
        import numpy as np  # noqa: PLC0415  (only a report with a history pays for it)

        series = np.asarray(self.series, dtype=np.int64)
        values = np.asarray(self.values, dtype=np.float64)
        counts = np.bincount(series, minlength=len(self.index))
        order = np.lexsort((values, series))
        series, values = series[order], values[order]
        medians = _grouped_median(values, counts)
        deviations = np.abs(values - medians[series])
        mads = _grouped_median(deviations[np.lexsort((deviations, series))], counts)
        lows = values[counts.cumsum() - counts]
        for key, median, mad, n, low in zip(
            self.index, medians.tolist(), mads.tolist(), counts.tolist(), lows.tolist(), strict=True
        ):
            yield key, _Stat(median, mad, n, low)


def _grouped_median(ordered, counts):  # type: ignore[no-untyped-def]
    """Per group, the median of `ordered` (sorted within each group, groups in order, `counts` long
    each): the middle value, or the mean of the two middle ones, as _median takes it."""
    starts = counts.cumsum() - counts
    return (ordered[starts + (counts - 1) // 2] + ordered[starts + counts // 2]) / 2


def _older_raw(
    store: Store,
    kind: str,
    collective: str,
    short: dict[str, int],
    *,
    smallest: int,
    last_run: str,
    last_started: str,
) -> list[tuple[str, int, float, int]]:
    """(subject, size, busbw, recency) of the subjects' healthy runs older than the newest ones read."""
    rows: list[tuple[str, int, float, int]] = []
    names = sorted(short)
    for start in range(0, len(names), 500):
        chunk = names[start : start + 500]
        rows += store.query(
            "SELECT subject, size, busbw, recency FROM ("
            " SELECT m.subject, m.size, m.busbw, DENSE_RANK() OVER ("
            "  PARTITION BY m.subject ORDER BY r.started_at DESC, r.run_id DESC) AS recency"
            # Run by run through the primary key (run_id, kind, subject, ...): no index by subject.
            " FROM runs r CROSS JOIN measurements m WHERE m.run_id = r.run_id"
            f" AND m.kind = ? AND m.collective = ? AND m.subject IN ({', '.join('?' for _ in chunk)})"
            "  AND m.size >= ? AND m.healthy = 1 AND m.busbw > 0"
            "  AND (r.started_at < ? OR (r.started_at = ? AND r.run_id < ?))"
            ") ranked WHERE recency <= ?",
            (
                kind,
                collective,
                *chunk,
                smallest,
                last_started,
                last_started,
                last_run,
                max(short[s] for s in chunk),
            ),
        )
    return rows


def _with_low(stat: _Stat, low: float | None) -> _Stat:
    """A summarised night's lowest sample may lie below its median: the baseline's low is the lowest."""
    return stat if low is None or stat.low is None or low >= stat.low else replace(stat, low=low)


def load_frozen(store: Store, name: str) -> Baseline:
    out: Baseline = defaultdict(dict)
    for kind, subject, collective, size, median, mad, n in store.query(
        "SELECT kind, subject, collective, size, median, mad, n FROM baseline_values WHERE name = ?", (name,)
    ):
        out[(kind, subject, collective)][size] = _Stat(median, mad, n)
    return dict(out)


def stat_of(values: list[float]) -> _Stat:
    median = _median(values)
    return _Stat(median, _median([abs(v - median) for v in values]), len(values), min(values))


def _median(values: list[float]) -> float:
    """statistics.median, without its overhead: a 4,000-host baseline takes a million of them."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _judge(
    key: tuple[str, str, str],
    points: dict[int, float],
    base: dict[int, _Stat],
    name: str,
    options: HistoryOptions,
) -> Finding | None:
    kind, subject, collective = key
    usable = sorted(s for s in points if s in base and base[s].n >= options.min_runs and base[s].median > 0)
    if not usable:
        return None
    large = [s for s in usable if s >= options.reference_min_bytes]
    sizes = tuple(large[-options.reference_sizes :] if large else usable[-1:])
    drops, zs = [], []
    for size in sizes:
        stat, value = base[size], points[size]
        scale = max(MAD_TO_SIGMA * stat.mad, options.mad_floor * stat.median)
        drops.append((stat.median - value) / stat.median)
        zs.append((value - stat.median) / scale)
    drop, z = _median(drops), _median(zs)
    value = _median([points[s] for s in sizes])
    median = _median([base[s].median for s in sizes])
    n = min(base[s].n for s in sizes)
    lows = [base[s].low for s in sizes]
    lowest = _median(lows) if None not in lows else None
    under_every_run = lowest is not None and value < UNDER_EVERY_RUN * lowest
    status: FindingStatus = "pass"
    if drop >= options.fail_drop and (z <= options.z_fail or under_every_run):
        status = "fail"
    elif drop >= options.min_drop and z <= options.z_suspect:
        status = "warn"
    who = f"link {subject}" if kind == "pair" else subject
    against = f"its baseline median ({n} runs)" if name == ROLLING else f"baseline {name!r} median ({n} runs)"
    at = f"at {sizes_text(sizes)}"
    if status == "pass":
        change = round(-drop, 3) + 0.0  # no "-0%"
        where = f"link {subject} " if kind == "pair" else ""
        reason = (
            f"{where}{collective} busbw {value:.3g} GB/s {at}, {against}: {median:.3g} GB/s ({change:+.0%})"
        )
    else:
        reason = (
            f"{who} {collective} busbw {at} is {drop:.0%} below {against}: "
            f"{value:.3g} GB/s against {median:.3g} GB/s, robust z {z:+.1f}"
        )
        if status == "fail" and z > options.z_fail:
            reason += f", under half of its lowest healthy run ({lowest:.3g} GB/s)"
    if not large:
        reason += (
            " (no size from the reference minimum up: small messages measure latency more than bandwidth)"
        )
    return Finding(
        name=f"history/{kind}/{collective}" + (f"/{subject}" if kind == "pair" else ""),
        status=status,
        subject=subject,
        hosts=tuple(subject.split("--")) if kind == "pair" else (subject,),
        reason=reason,
        kind=kind,
        collective=collective,
        sizes=sizes,
        value=value,
        baseline=median,
        drop=drop,
        z=z,
        runs=n,
        baseline_name=name,
    )


def facts_drift(store: Store, report: Report, before: tuple[str, str]) -> dict[str, Finding]:
    """Per host: the facts that differ from its latest earlier run with facts."""
    by_run: dict[str, list[str]] = defaultdict(list)
    wanted = {name for name, host in report.run.hosts.items() if host.facts}
    # Run by run, newest first, until every host has its latest facts: a nightly fleet finds them
    # all in the night before, where ranking every host of every stored run read a year of a
    # 4,000-host fleet's 1.46 million host rows.
    for (run_id,) in store.query(
        "SELECT run_id FROM runs WHERE started_at < ? OR (started_at = ? AND run_id < ?) "
        "ORDER BY started_at DESC, run_id DESC",
        (before[0], before[0], before[1]),
    ):
        if not wanted:
            break
        found = wanted & {
            h for (h,) in store.query("SELECT DISTINCT host FROM facts WHERE run_id = ?", (run_id,))
        }
        if found:
            found &= {h for (h,) in store.query("SELECT host FROM hosts WHERE run_id = ?", (run_id,))}
            by_run[run_id] = sorted(found)
            wanted -= found
    out: dict[str, Finding] = {}
    for run_id, hosts in sorted(by_run.items()):
        old: dict[str, dict[str, str | None]] = defaultdict(dict)
        for host, key, value in store.query("SELECT host, key, value FROM facts WHERE run_id = ?", (run_id,)):
            old[host][key] = value
        for host in hosts:
            now = flattened_facts(report.run)[host]
            changes = [
                (key, old[host][key], value)
                for key, value in sorted(now.items())
                if value is not None and old[host].get(key) is not None and old[host][key] != value
            ]
            if changes:
                out[host] = _drift_finding(host, run_id, changes)
    return out


def _drift_finding(host: str, run_id: str, changes: list[tuple[str, str | None, str]]) -> Finding:
    hardware = any(key.startswith(HARDWARE_FACTS) for key, _, _ in changes)
    evidence = tuple(f"{key}: {old} -> {new}" for key, old, new in changes)
    return Finding(
        name="history/facts",
        status="warn" if hardware else "note",
        subject=host,
        hosts=(host,),
        reason=f"facts changed since run {run_id}: " + "; ".join(evidence),
        kind="facts",
        evidence=evidence,
    )


def merge_findings(report: Report, findings: tuple[Finding, ...] | list[Finding]) -> Report:
    """The report with each finding added as a check of the hosts it names, verdicts recomputed."""
    added: dict[str, list[Check]] = defaultdict(list)
    links_ok: dict[tuple[str, str], int] = defaultdict(int)  # (host, collective) -> links within history
    components_ok: dict[str, int] = defaultdict(int)  # host -> component metrics within history
    blamed = _blame(findings)
    for finding in findings:
        node = blamed.get(finding.name)
        for host in finding.hosts:
            if host not in report.hosts:
                continue
            if finding.kind == "pair" and finding.status == "pass":
                # One line per host, not one per link: a large fleet has hundreds of links per host.
                links_ok[(host, finding.collective or "")] += 1
            elif finding.kind == COMPONENT and finding.status == "pass":
                components_ok[host] += 1  # one line per host: an 8-GPU node has about 130
            elif node is None:
                added[host].append(finding.check(host))
            elif host == node:
                reason = f"{finding.reason}; every judged link of {node} dropped: the node, not this link"
                added[host].append(replace(finding, reason=reason).check(host))
            else:
                # One bad node drops its link to every other host: only the node is to blame.
                reason = f"{finding.reason}; blamed on {node}, every judged link of which dropped"
                added[host].append(replace(finding, status="note", reason=reason).check(host))
    for (host, collective), count in sorted(links_ok.items()):
        if not any(c.name.startswith(f"history/pair/{collective}/") for c in added[host]):
            reason = f"{collective}: {count} link(s) within their own history"
            added[host].append(Check(f"history/pair/{collective}", "pass", reason, host))
    for host, count in sorted(components_ok.items()):
        reason = f"{count} component measurement(s) within their own history"
        added[host].append(Check(COMPONENT_CHECK.rstrip("/"), "pass", reason, host))
    if not added:
        return report
    hosts: dict[str, HostVerdict] = {}
    for name, verdict in report.hosts.items():
        checks = [*verdict.checks, *added.get(name, [])]
        reachable = verdict.verdict != "unreachable"
        hosts[name] = replace(verdict, checks=tuple(checks), verdict=verdict_of(checks, reachable))
    ordered = dict(
        sorted(
            hosts.items(),
            key=lambda kv: (VERDICT_ORDER[kv[1].verdict], min(kv[1].z.values(), default=0.0), kv[0]),
        )
    )
    return replace(report, hosts=ordered)


def _blame(findings: tuple[Finding, ...] | list[Finding]) -> dict[str, str]:
    """Pair finding name -> the node blamed for it, per collective, as the fleet's pair check does."""
    by_collective: dict[str, dict[tuple[str, str], Finding]] = defaultdict(dict)
    for finding in findings:
        if finding.kind == "pair" and len(finding.hosts) == 2:
            by_collective[finding.collective or ""][(finding.hosts[0], finding.hosts[1])] = finding
    blamed: dict[str, str] = {}
    for pairs in by_collective.values():
        bad = {hosts for hosts, f in pairs.items() if f.status in ("warn", "fail")}
        drops = {hosts: f.drop or 0.0 for hosts, f in pairs.items()}
        for hosts, node in blame_nodes(pairs, bad, drops).items():
            blamed[pairs[hosts].name] = node
    return blamed
