"""`collbench baseline`: freeze a baseline from chosen runs; later reports judge regressions against it."""

from __future__ import annotations

import argparse

from collbench_py.cli.common import add_db_argument, fail, positive, stamp, table
from collbench_py.exitcodes import ExitCode
from collbench_py.history import HistoryError, freeze, open_store, resolve_run
from collbench_py.history.baselines import BaselineInfo, all_baselines, baseline_info, drop, last_runs
from collbench_py.verdicts.bandwidth import human_size

COMMAND = "baseline"
DEFAULT_NAME = "default"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        COMMAND,
        help="freeze a baseline from chosen runs, or show the frozen ones",
        description=(
            "Freeze the per-host and per-link median busbw of chosen runs (healthy samples only) as a "
            "baseline. Later reports judge regressions against the newest frozen baseline instead of the "
            "rolling one (`collbench report --baseline rolling` ignores it). Freezing a name again "
            "replaces it. Exit 0, or 2 for bad input."
        ),
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument(
        "--runs", metavar="ID", nargs="+", help="freeze from these run ids (unique prefixes do)"
    )
    action.add_argument("--last", metavar="N", type=positive, help="freeze from the newest N stored runs")
    action.add_argument("--show", action="store_true", help="list frozen baselines (with --name: its values)")
    action.add_argument("--drop", action="store_true", help="delete the baseline named by --name")
    parser.add_argument("--name", metavar="NAME", help=f"baseline name (default {DEFAULT_NAME!r})")
    add_db_argument(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    name = args.name or DEFAULT_NAME
    if name == "rolling":
        return fail(COMMAND, "'rolling' names the rolling baseline; choose another name")
    try:
        with open_store(args.db) as store:
            if args.show:
                lines = _show_one(store, args.name) if args.name else _show_all(store)
            elif args.drop:
                drop(store, name)
                lines = [f"baseline {name!r} dropped from {store.path}"]
            else:
                runs = (
                    [resolve_run(store, ref) for ref in args.runs]
                    if args.runs
                    else last_runs(store, args.last)
                )
                info = freeze(store, name, sorted(set(runs)))
                lines = [
                    f"baseline {info.name!r} frozen in {store.path}: {info.description}, "
                    f"{info.subjects} hosts and links, {info.values} values",
                    "later reports judge regressions against it (unless run with `--baseline rolling`)",
                ]
    except HistoryError as exc:
        return fail(COMMAND, exc)
    print("\n".join(lines))
    return ExitCode.OK


def _show_all(store) -> list[str]:
    baselines = all_baselines(store)
    if not baselines:
        return [f"no frozen baseline in {store.path}: reports use the rolling baseline"]
    rows = [
        [
            ("* " if i == 0 else "  ") + b.name,
            stamp(b.created_at),
            str(len(b.runs)),
            str(b.subjects),
            b.description,
        ]
        for i, b in enumerate(baselines)
    ]
    return [*table(["name", "frozen", "runs", "hosts/links", "runs from .. to"], rows), "* used by reports"]


def _show_one(store, name: str) -> list[str]:
    info: BaselineInfo = baseline_info(store, name)
    rows = store.query(
        "SELECT v.kind, v.subject, v.collective, v.size, v.median, v.mad, v.n FROM baseline_values v "
        "WHERE v.name = ? AND v.size = (SELECT MAX(w.size) FROM baseline_values w WHERE w.name = v.name "
        "AND w.kind = v.kind AND w.subject = v.subject AND w.collective = v.collective) "
        "ORDER BY v.kind, v.subject, v.collective",
        (name,),
    )
    body = [
        [kind, subject, collective, human_size(size), f"{median:.4g}", f"{mad:.3g}", str(n)]
        for kind, subject, collective, size, median, mad, n in rows
    ]
    head = [f"baseline {info.name!r}, frozen {stamp(info.created_at)}: runs {', '.join(info.runs)}", ""]
    return head + table(
        ["kind", "host or link", "collective", "largest size", "median GB/s", "MAD", "n"], body
    )
