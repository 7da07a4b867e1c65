"""Benchmark the history database over a year of nightly fleet runs: its size, and the report's
history step on the last night.

The last night is a real run directory (benchmarks/report_bench.py's adaptive shape: six intra-node
logs per host from real logs, the pair rounds a real planner chose, 3 hosts at half speed
intra-node, 3 bad nodes and 1 bad link on the pairs), loaded and judged as `collbench report` does.
Its measurement rows (records_of) are the template of every earlier night: the same subjects,
collectives and sizes, busbw with 1 % noise per night and the planted faults healthy, so the last
night's faults are new. The earlier nights are written at the row level, not through the report
(4,000 hosts take minutes to parse, a year of them days):

- the nights of the raw window (the newest `--raw-nights` before the last) as whole runs through the
  writer's own insert statements (runs, hosts, measurements, verdicts, facts, busbw columns);
- the nights before it as the retention policy leaves them: a `runs` and `hosts` row each, and
  per series and night the summary rows `prune` writes (one sample a night: median, spread 0), at
  the sizes it keeps, inserted night by night as nightly pruning does.

Then the history step of the last night runs as `collbench report` runs it
(`history.record_then_prune_beside`): the regressions against the rolling baseline and the ingest,
timed with their phases, which the report waits for before it writes its files; and the pruning of
the night that leaves the window, in a child process the report starts then and waits for only
before it exits (its wall and CPU said apart). Then the database's size (file + WAL).

    .venv/bin/python benchmarks/history_bench.py                       # 4,000 hosts, 365 nights
    .venv/bin/python benchmarks/history_bench.py --hosts 20 --nights 40 --raw-nights 5

Targets (a year of a 4,000-host fleet): database <= 5 GB, history step on the last night <= 15 s.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import resource
import sqlite3
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from report_bench import build_adaptive  # noqa: E402

from collbench_py import history  # noqa: E402
from collbench_py.history import HistoryOptions, open_store  # noqa: E402
from collbench_py.history import pruning as pruning_module  # noqa: E402
from collbench_py.history.records import RunRecords, forget_measurements, records_of  # noqa: E402
from collbench_py.history.retention import RAW_NIGHTS, SERIES, SUMMARIES, kept_sizes, night_of  # noqa: E402
from collbench_py.history.writer import _insert_columns, _insert_rows, _insert_run  # noqa: E402
from collbench_py.pairs.planner import initial_rounds  # noqa: E402
from collbench_py.rundir.load import load_run_dir  # noqa: E402
from collbench_py.verdicts import Report, judge  # noqa: E402

NOISE_CV = 0.01
FIRST_NIGHT = datetime(2026, 1, 1, 21, 51, tzinfo=UTC)


@dataclass(frozen=True)
class Planted:
    intra: frozenset[str]  # hosts at half speed intra-node on the last night
    pair_scale: dict[str, float]  # pair subject -> its scale on the last night


def planted(hosts: int) -> Planted:
    """The faults report_bench.build_adaptive plants (the same expressions)."""
    names = [f"gpu{i:04d}" for i in range(hosts)]
    bad_nodes = {names[hosts // 7], names[hosts // 3], names[(2 * hosts) // 3]}
    first = initial_rounds(names, seed=hosts)[0]
    bad_link = next(pair for pair in first[len(first) // 2 :] if not set(pair) & bad_nodes)
    scale = defaultdict(lambda: 1.0)
    for a in names:
        for b in bad_nodes:
            scale["--".join(sorted((a, b)))] = 0.5
    scale["--".join(sorted(bad_link))] = 0.6
    return Planted(frozenset(names[5 : hosts : hosts // 3][:3]), scale)


def last_night(root: Path, hosts: int) -> tuple[Report, float]:
    start = time.perf_counter()
    run = build_adaptive(root, hosts)
    report = judge(load_run_dir(run))
    return report, time.perf_counter() - start


def healthy_value(row: tuple, faults: Planted) -> float:
    _, kind, subject, _, _, busbw, *_ = row
    if kind == "intra" and subject in faults.intra:
        return busbw * 2
    if kind == "pair":
        return busbw / faults.pair_scale.get(subject, 1.0)
    return busbw


@contextlib.contextmanager
def timed(phases: dict[str, float], name: str, target: object, attribute: str) -> Iterator[None]:
    """Time every call of target.attribute into phases[name] while inside."""
    original = getattr(target, attribute)

    def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            phases[name] = phases.get(name, 0.0) + time.perf_counter() - start

    setattr(target, attribute, wrapper)
    try:
        yield
    finally:
        setattr(target, attribute, original)


def children_cpu_s() -> float:
    """CPU seconds of this process's finished children (the pruning's, once it is waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def build_history(db: Path, report: Report, nights: int, raw_nights: int, floor: int) -> dict[str, float]:
    """Nights 1 .. nights-1 at the row level; returns the seconds each part took."""
    records = records_of(report)
    faults = planted(len(report.run.hosts))
    template = list(records.measurements)
    base = np.array([healthy_value(row, faults) or 0.0 for row in template])
    rng = np.random.default_rng(nights)
    # Summary series and kept sizes, as prune keeps them.
    sizes: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    index: dict[tuple[str, str, str, int], int] = {}
    for position, (_, kind, subject, collective, size, *_rest) in enumerate(template):
        sizes[(kind, subject, collective)].append(size)
        index[(kind, subject, collective, size)] = position
    series = {key: number for number, key in enumerate(sorted(sizes), start=1)}
    kept = sorted(
        (series[key], size, index[(*key, size)])
        for key, known in sizes.items()
        for size in kept_sizes(known, floor)
    )
    kept_series = [s for s, _, _ in kept]
    kept_sizes_ = [size for _, size, _ in kept]
    kept_base = base[[p for _, _, p in kept]]
    summarised = nights - 1 - raw_nights
    nights_of: list[int] = []
    times = {"summary nights": 0.0, "raw nights": 0.0}
    with open_store(db, create=True) as store:
        with store.write() as cursor:
            cursor.executemany(
                f"INSERT INTO {SERIES} (series, kind, subject, collective) VALUES (?, ?, ?, ?)",
                [(number, *key) for key, number in series.items()],
            )
        for number in range(1, nights):
            start = time.perf_counter()
            started = FIRST_NIGHT + timedelta(days=number - 1)
            run_id = started.strftime("%Y%m%dT%H%M%SZ") + f"-{number:06x}"
            body = (run_id, started.strftime("%Y-%m-%dT%H:%M:%SZ"), *records.run[2:])
            hosts = tuple((run_id, *row[1:]) for row in records.hosts)
            if number <= summarised:
                with store.write() as cursor:
                    _insert_run(cursor, RunRecords(body, (), (), (), (), run_id), 1)
                    cursor.executemany(
                        "INSERT INTO hosts (run_id, host, inventory_hostname, status, verdict) "
                        "VALUES (?, ?, ?, ?, ?)",
                        hosts,
                    )
                nights_of.append(night_of(body[1]))
                times["summary nights"] += time.perf_counter() - start
                continue
            values = (base * (1 + NOISE_CV * rng.standard_normal(len(base)))).tolist()
            rows = [
                (run_id, *row[1:5], value, *row[6:9], 1) for row, value in zip(template, values, strict=True)
            ]
            night_records = RunRecords(
                body,
                hosts,
                rows,
                tuple((run_id, *row[1:]) for row in records.verdicts),
                tuple((run_id, *row[1:]) for row in records.facts),
                run_id,
            )
            with store.write() as cursor:
                _insert_run(cursor, night_records, 1)
                _insert_rows(cursor, night_records)
                _insert_columns(cursor, night_records)
            times["raw nights"] += time.perf_counter() - start
        start = time.perf_counter()
        _write_summaries(store, kept_series, kept_sizes_, kept_base, nights_of, rng=rng)
        times["summary nights"] += time.perf_counter() - start
    return times


def _write_summaries(
    store: history.Store, series: list[int], sizes: list[int], base: np.ndarray, nights: list[int], *, rng
) -> None:
    """The summarised nights' rows, in key order (series, night, size): a table grown night by night
    takes the same bytes per row (31.6 against 32.1 B, measured on 2.5 million rows), and sorted
    inserts take a quarter of the time."""
    positions = defaultdict(list)
    for position, number in enumerate(series):
        positions[number].append(position)
    numbers = sorted(positions)
    for start in range(0, len(numbers), 200):
        rows = []
        for number in numbers[start : start + 200]:
            where = positions[number]
            values = base[where] * (1 + NOISE_CV * rng.standard_normal((len(nights), len(where))))
            for night, row in zip(nights, values.tolist(), strict=True):
                rows += [(number, night, sizes[p], value) for p, value in zip(where, row, strict=True)]
        with store.write() as cursor:
            cursor.executemany(
                f"INSERT INTO {SUMMARIES} (series, night, size, median, spread, low, n) "
                "VALUES (?, ?, ?, ?, 0.0, NULL, 1)",
                rows,
            )


def database_bytes(db: Path) -> tuple[int, int]:
    wal = db.with_name(db.name + "-wal")
    return db.stat().st_size, wal.stat().st_size if wal.exists() else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=4000)
    parser.add_argument("--nights", type=int, default=365, help="the last one is reported (default 365)")
    parser.add_argument("--raw-nights", type=int, default=RAW_NIGHTS, help=f"default {RAW_NIGHTS}")
    parser.add_argument("--history-runs", type=int, default=HistoryOptions.runs)
    parser.add_argument("--keep", type=Path, help="build under this directory and keep it")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--cprofile", type=Path, help="profile the history step into this pstats file")
    parser.add_argument(
        "--prune-inline",
        action="store_true",
        help="prune inside the step, as the report did before it pruned beside its files (to compare)",
    )
    args = parser.parse_args()
    if args.nights < args.raw_nights + 2:
        parser.error("--nights must exceed --raw-nights by 2 or more (a summarised night, then the last)")
    options = HistoryOptions(runs=args.history_runs, raw_nights=args.raw_nights)
    with tempfile.TemporaryDirectory(prefix="collbench-history-bench-") as tmp:
        where = args.keep or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        db = where / "history.sqlite"
        if db.exists():
            raise SystemExit(f"{db} exists: give another --keep directory")
        report, judged_s = last_night(where / "run", args.hosts)
        report = replace(
            report,
            run=replace(
                report.run,
                run_id=f"last-night-{args.nights:06x}",
                started_at=(FIRST_NIGHT + timedelta(days=args.nights - 1)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            ),
        )
        built = build_history(db, report, args.nights, args.raw_nights, options.reference_min_bytes)
        # Building the history made the last night's measurement rows; `collbench report` makes
        # them inside its history step, so the step timed below does too.
        forget_measurements()
        before = sum(database_bytes(db))
        phases: dict[str, float] = {}
        children_cpu = children_cpu_s()
        start, cpu = time.perf_counter(), time.process_time()
        with (
            timed(phases, "regressions", history, "find_regressions"),
            timed(phases, "ingest", history, "ingest"),
            timed(phases, "prune", pruning_module, "prune"),  # inline only: a child's calls are its own
        ):
            profiler = cProfile.Profile() if args.cprofile else None
            if profiler:
                profiler.enable()
            # As `collbench report` runs it: the pruning starts in a child process, beside the
            # report's files (not written here); the report waits for it before it exits.
            # --prune-inline: the pruning inside the step, as before (history.record's way).
            recorded, pruning = history.record_then_prune_beside(
                report, str(db), options, beside=not args.prune_inline
            )
            if profiler:
                profiler.disable()
                profiler.dump_stats(args.cprofile)
        step_s, step_cpu = time.perf_counter() - start, time.process_time() - cpu
        problem = pruning.wait()
        if not args.prune_inline:
            phases["prune"] = time.perf_counter() - start - step_s
        prune_cpu = children_cpu_s() - children_cpu
        if problem is not None:
            raise SystemExit(f"the pruning failed: {problem}")
        main_bytes, wal_bytes = database_bytes(db)
        with sqlite3.connect(db) as connection:
            count = {
                table: connection.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
                for table in ("runs", "measurements", SUMMARIES, "facts", "verdicts")
            }
            raw_runs = connection.execute("SELECT COUNT(DISTINCT run_id) FROM measurements").fetchone()[0]
    faults = planted(args.hosts)
    flagged = sorted(
        host
        for host, verdict in recorded.hosts.items()
        for check in verdict.checks
        if check.name.startswith("history/intra/") and check.status == "fail"
    )
    warnings = [c.reason for c in recorded.fleet_checks if c.name == "history"]
    figures = {
        "hosts": args.hosts,
        "nights": args.nights,
        "raw_nights": args.raw_nights,
        "measurement_rows_last_night": len(records_of(report).measurements),
        "judge_last_night_s": round(judged_s, 1),
        "build_s": {k: round(v, 1) for k, v in built.items()},
        "db_bytes_before_last_night": before,
        "db_bytes": main_bytes,
        "wal_bytes": wal_bytes,
        "history_step_s": round(step_s, 2),
        "history_step_cpu_s": round(step_cpu, 2),
        "prune_beside_s": None if args.prune_inline else round(phases["prune"], 2),
        "prune_beside_cpu_s": None if args.prune_inline else round(prune_cpu, 2),
        "phases_s": {k: round(v, 2) for k, v in phases.items()},
        "rows": count,
        "runs_with_raw_rows": raw_runs,
        "planted_slow_hosts": sorted(faults.intra),
        "flagged_slow_hosts": sorted(set(flagged)),
        "history_warnings": warnings,
    }
    print(json.dumps(figures, indent=1))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1), encoding="utf-8")
    if warnings or not faults.intra <= set(flagged):
        print("the last night's planted slow hosts were not all flagged", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
