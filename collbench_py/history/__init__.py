"""Memory across runs: a history database of every reported run, and regressions against it.

    with open_store("results/history.sqlite", create=True) as store:
        findings = find_regressions(store, report)   # against the runs stored before this one
        report = merge_findings(report, findings)    # findings become checks, verdicts recomputed
        ingest(store, report)                        # once per run id

`record(report, ...)` does exactly that for `collbench report`. See docs/history.md.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from collbench_py.history.baselines import BaselineInfo, freeze, resolve_run
from collbench_py.history.cliutil import positive
from collbench_py.history.records import forget_measurements
from collbench_py.history.regressions import (
    ROLLING,
    Finding,
    HistoryOptions,
    find_regressions,
    merge_findings,
)
from collbench_py.history.store import DB_FILENAME, ENV_DB, HistoryError, Store, db_path, open_store
from collbench_py.history.writer import Ingested, ingest
from collbench_py.verdicts import Check, Report

__all__ = [
    "ROLLING",
    "BaselineInfo",
    "Finding",
    "HistoryError",
    "HistoryOptions",
    "Ingested",
    "Store",
    "add_arguments",
    "db_path",
    "find_regressions",
    "freeze",
    "ingest",
    "merge_findings",
    "open_store",
    "options_from_args",
    "record",
    "record_from_args",
    "resolve_run",
]


def default_db(run_dir: Path) -> Path:
    """`history.sqlite` next to the run directories (results/history.sqlite for results/<run_id>/)."""
    return run_dir.resolve().parent / DB_FILENAME


def record(report: Report, db: str | None = None, options: HistoryOptions | None = None) -> Report:
    """Judge the run against its history, add the findings to the report, and store the run.

    Never raises for a database problem: the report matters more than its history, so the
    problem becomes a fleet warning in the report instead.
    """
    try:
        url = db if db is not None else db_path(None, default=default_db(report.run.path))
        with open_store(url, create=True) as store:
            merged = merge_findings(report, find_regressions(store, report, options))
            ingest(store, merged)
    except HistoryError as exc:
        forget_measurements()
        warning = Check("history", "warn", f"history not used: {exc}")
        return replace(report, fleet_checks=(*report.fleet_checks, warning))
    forget_measurements()
    return merged


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The history options of `collbench report`."""
    group = parser.add_argument_group("history")
    group.add_argument(
        "--db",
        metavar="URL",
        help=f"history database: a path or sqlite:///PATH (default ${ENV_DB}, else history.sqlite "
        "next to the run directory)",
    )
    group.add_argument("--no-history", action="store_true", help="neither read nor write the history")
    group.add_argument(
        "--history-runs",
        metavar="N",
        type=positive,
        default=HistoryOptions.runs,
        help=f"rolling baseline: the last N healthy runs (default {HistoryOptions.runs})",
    )
    group.add_argument(
        "--baseline",
        metavar="NAME",
        help=f"judge against this frozen baseline, or '{ROLLING}' (default: the newest frozen baseline, "
        "else rolling)",
    )


def options_from_args(args: argparse.Namespace) -> HistoryOptions:
    return HistoryOptions(
        runs=args.history_runs,
        baseline=args.baseline,
        reference_min_bytes=getattr(args, "reference_min_bytes", HistoryOptions.reference_min_bytes),
    )


def record_from_args(report: Report, args: argparse.Namespace) -> Report:
    """`record` as `collbench report` calls it; with --no-history, the report unchanged."""
    if getattr(args, "no_history", False):
        return report
    return record(report, getattr(args, "db", None), options_from_args(args))
