"""`collbench compare RUN_A RUN_B`: what changed between two runs, per host, link and collective."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

from collbench_py.cli.common import add_db_argument, fail, parse_size, stamp, table
from collbench_py.exitcodes import ExitCode
from collbench_py.history import HistoryError, Store, open_store, resolve_run
from collbench_py.history.compare import Change, Comparison, compare
from collbench_py.history.query import Snapshot, snapshot_from_db, snapshot_from_records
from collbench_py.history.records import records_of
from collbench_py.profiles import ProfileError
from collbench_py.rundir.load import RunDirError, load_run_dir
from collbench_py.verdicts import judge
from collbench_py.verdicts.bandwidth import sizes_text

COMMAND = "compare"
UNCHANGED_WITHIN = 0.01  # rows whose busbw moved less than this and kept their verdict are hidden


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        COMMAND,
        help="what changed between two runs: busbw and verdict per host, link and collective",
        description=(
            "Compare two runs, each a run directory (judged now) or a run id in the history database "
            "(as it was reported; a unique prefix will do). Exit 0 nothing got worse, 1 some busbw dropped "
            "by --min-drop or more or some verdict got worse, 2 bad input (also when the runs share no "
            "host). An intra row carries the host's intra-node checks; a host row, its verdict and the "
            "checks that changed it; a link that became bad or recovered is a link row, not a change of "
            "its ends."
        ),
    )
    parser.add_argument(
        "run_a",
        metavar="RUN_A",
        help="the earlier run: a run directory or a run id (a warning when it started after RUN_B)",
    )
    parser.add_argument("run_b", metavar="RUN_B", help="the later run: a run directory or a run id")
    parser.add_argument(
        "--min-drop",
        metavar="FRACTION",
        type=float,
        default=0.05,
        help="a busbw drop this large counts as worse (default 0.05)",
    )
    parser.add_argument(
        "--reference-min-bytes",
        metavar="SIZE",
        type=parse_size,
        default=256 * 1024**2,
        help="compare at the largest sizes from this size up (default 256M)",
    )
    parser.add_argument("--all", action="store_true", help="also list what did not change")
    add_db_argument(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    try:
        with ExitStack() as stack:
            store: list[Store] = []  # opened only when a run id needs it

            def database() -> Store:
                if not store:
                    store.append(stack.enter_context(open_store(args.db)))
                return store[0]

            a = _snapshot(args.run_a, database)
            b = _snapshot(args.run_b, database)
    except (HistoryError, RunDirError, ProfileError) as exc:
        return fail(COMMAND, exc)
    if a.run_id == b.run_id and a.source == b.source:
        return fail(COMMAND, f"RUN_A and RUN_B are the same run ({a.run_id})")
    if not set(a.host_verdicts) & set(b.host_verdicts):
        return fail(
            COMMAND,
            f"RUN_A ({a.run_id}: {_hosts_text(a)}) and RUN_B ({b.run_id}: {_hosts_text(b)}) share no host: "
            "nothing to compare",
        )
    if a.started_at > b.started_at:
        # Reversed, every drop reads as a gain and every fix as a regression: say so, then compare as asked.
        print(
            f"collbench {COMMAND}: warning: RUN_A {a.run_id} started {stamp(a.started_at)}, after RUN_B "
            f"{b.run_id} ({stamp(b.started_at)}): the changes below read from the newer run back to the "
            "older; give the earlier run first",
            file=sys.stderr,
        )
    result = compare(a, b, min_drop=args.min_drop, reference_min_bytes=args.reference_min_bytes)
    print("\n".join(_lines(result, args.all)))
    return ExitCode.FAILED if result.worse else ExitCode.OK


def _hosts_text(snapshot: Snapshot) -> str:
    hosts = sorted(snapshot.host_verdicts)
    shown = ", ".join(hosts[:3]) + (f" and {len(hosts) - 3} more" if len(hosts) > 3 else "")
    return shown or "no host"


def _snapshot(ref: str, database) -> Snapshot:
    path = Path(ref)
    if path.is_dir():
        report = judge(load_run_dir(path))
        return snapshot_from_records(records_of(report), str(path))
    if "/" in ref or ref in (".", ".."):
        raise HistoryError(f"{ref}: no such run directory")
    store = database()
    return snapshot_from_db(store, resolve_run(store, ref))


def _lines(result: Comparison, show_all: bool) -> Iterator[str]:
    a, b = result.a, result.b
    yield f"A: {a.run_id} (started {stamp(a.started_at)}) from {a.source}"
    yield f"B: {b.run_id} (started {stamp(b.started_at)}) from {b.source}"
    shown = [c for c in result.changes if show_all or _changed(c)]
    if shown:
        rows = [_row(c) for c in sorted(shown, key=lambda c: (not c.worse, c.kind, c.subject, c.collective))]
        header = [
            "",
            "kind",
            "host or link",
            "collective",
            "at",
            "busbw A",
            "busbw B",
            "change",
            "verdict A -> B",
        ]
        yield ""
        yield from table(header, rows)
    hidden = len(result.changes) - len(shown)
    if hidden:
        yield f"({hidden} unchanged within {UNCHANGED_WITHIN:.0%}, same verdict; --all lists them)"
    if result.only_a:
        yield f"hosts only in A: {', '.join(result.only_a)}"
    if result.only_b:
        yield f"hosts only in B: {', '.join(result.only_b)}"
    if result.facts:
        yield ""
        yield "facts changed:"
        yield from (f"  {host} {key}: {old} -> {new}" for host, key, old, new in result.facts)
    worse = len(result.worse)
    yield ""
    yield f"{worse} worse" if worse else "nothing got worse"


def _changed(change: Change) -> bool:
    moved = change.relative is None or abs(change.relative) >= UNCHANGED_WITHIN
    return change.worse or moved or change.verdict_before != change.verdict_after


def _row(change: Change) -> list[str]:
    relative = change.relative
    verdict = f"{change.verdict_before or '-'} -> {change.verdict_after or '-'}"
    if change.checks:
        verdict += f" ({', '.join(change.checks)})"
    return [
        "WORSE" if change.worse else "",
        change.kind,
        change.subject,
        change.collective or "-",
        sizes_text(change.sizes) if change.sizes else "-",
        _number(change.before),
        _number(change.after),
        "-" if relative is None else f"{relative + 0.0:+.1%}",
        verdict,
    ]


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
