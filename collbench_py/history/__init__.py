"""Memory across runs: a history database of every reported run, and regressions against it.

    with open_store("results/history.sqlite", create=True) as store:
        findings = find_regressions(store, report)   # against the runs stored before this one
        report = merge_findings(report, findings)    # findings become checks, verdicts recomputed
        ingest(store, report)                        # once per run id

`record(report, ...)` does exactly that for `collbench report`. See docs/history.md.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from collbench_py.history.baselines import BaselineInfo, freeze, resolve_run
from collbench_py.history.pruning import Pruning
from collbench_py.history.records import forget_measurements
from collbench_py.history.regressions import (
    ROLLING,
    Finding,
    HistoryOptions,
    find_regressions,
    merge_findings,
)
from collbench_py.history.retention import Pruned, Retention, prune
from collbench_py.history.store import (
    DB_FILENAME,
    HistoryError,
    Store,
    created_line,
    database_to_create,
    db_path,
    open_store,
)
from collbench_py.history.writer import Ingested, ingest
from collbench_py.verdicts import Check, Report

__all__ = [
    "ROLLING",
    "BaselineInfo",
    "Finding",
    "HistoryError",
    "HistoryOptions",
    "Ingested",
    "Pruned",
    "Pruning",
    "Retention",
    "Store",
    "created_line",
    "database_to_create",
    "db_path",
    "find_regressions",
    "freeze",
    "ingest",
    "merge_findings",
    "open_store",
    "prune",
    "ready_pruning",
    "record",
    "record_then_prune_beside",
    "resolve_run",
]


def default_db(run_dir: Path) -> Path:
    """`history.sqlite` next to the run directories (results/history.sqlite for results/<run_id>/)."""
    return run_dir.resolve().parent / DB_FILENAME


def record(
    report: Report, db: str | None = None, options: HistoryOptions | None = None, node_checks: Any = None
) -> Report:
    """Judge the run against its history, add the findings to the report, and store the run.
    `node_checks`: the run's node checks section (results.json `node_checks`); None: the one the
    report carries, if any (its components are then judged and stored too).

    Then the retention policy (`options.raw_nights`, history/retention.py) summarises the runs
    that fell out of the raw window.

    Never raises for a database problem: the report matters more than its history, so the
    problem becomes a fleet warning in the report instead.
    """
    merged, pruning = record_then_prune_beside(report, db, options, node_checks, beside=False)
    problem = pruning.wait()
    if problem is not None:
        said = f"the nights older than the raw window were not summarised: {problem}"
        warning = Check("history", "warn", said)
        return replace(merged, fleet_checks=(*merged.fleet_checks, warning))
    return merged


def record_then_prune_beside(
    report: Report,
    db: str | None = None,
    options: HistoryOptions | None = None,
    node_checks: Any = None,
    *,
    beside: bool = True,
    pruning: Pruning | None = None,
) -> tuple[Report, Pruning]:
    """`record`, its pruning left to a child process (`beside`) that runs while the caller goes on
    (`collbench report` writes its files meanwhile): the caller waits for it with `Pruning.wait()`
    before it exits. The night's findings and rows are in the database when this returns; the
    pruning only summarises the nights that left the raw window, and one that does not happen is
    done by the next run's (nothing is lost). A `pruning` made ready before (`ready_pruning`) is
    let go instead of a child forked now."""
    try:
        url = _db_url(db, report.run.path)
        with open_store(url, create=True) as store:
            merged = merge_findings(report, find_regressions(store, report, options, node_checks))
            ingest(store, merged, node_checks)
    except HistoryError as exc:
        forget_measurements()
        if pruning is None:
            pruning = Pruning()
        pruning.stop()
        warning = Check("history", "warn", f"history not used: {exc}")
        return replace(report, fleet_checks=(*report.fleet_checks, warning)), pruning
    forget_measurements()
    if pruning is not None and pruning.is_ready:
        return merged, pruning.go()
    return merged, Pruning.start(url, retention_of(options or HistoryOptions()), beside=beside)


def ready_pruning(run_dir: Path, db: str | None, options: HistoryOptions) -> Pruning:
    """The pruning child of a report of `run_dir`, forked now, while the caller is small
    (history/pruning.py); record_then_prune_beside lets it go. None ready where the database
    cannot be named: record_then_prune_beside says why."""
    try:
        url = _db_url(db, run_dir)
    except HistoryError:
        return Pruning()
    return Pruning.ready(url, retention_of(options))


def _db_url(db: str | None, run_dir: Path) -> str | Path:
    """The database a report of `run_dir` records into: `db`, else COLLBENCH_DB or the default."""
    return db if db is not None else db_path(None, default=default_db(run_dir))


def retention_of(options: HistoryOptions) -> Retention:
    """The retention the report's history options ask for: summaries keep the judged sizes."""
    return Retention(raw_nights=options.raw_nights, summary_min_bytes=options.reference_min_bytes)
