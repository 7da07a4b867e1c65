"""The night's rows written beside its regressions (history/ingesting.py): the database ends as the
plain ingest leaves it, and nothing is committed unless the report's process says so."""

from __future__ import annotations

import multiprocessing
import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from collbench_py import history
from collbench_py.history import HistoryOptions, ingesting
from collbench_py.history.ingesting import Ingesting
from collbench_py.history.records import forget_measurements
from collbench_py.history.store import RUN_TABLES, HistoryError
from collbench_py.verdicts import Report
from tests.history.test_history import HOSTS, counts, judged, make_run
from tests.rundir_factory import RunSpec

# Every column but ingested_at, which says when.
STORED = {
    "runs": "run_id, started_at, finished_at, status, backend, launcher, collbench_version, parameters, "
    "fleet_status, exit_code, source_path, content_hash, revision",
    "hosts": "*",
    "measurements": "*",
    "verdicts": "*",
    "facts": "*",
    "component_measurements": "*",
}


def stored(db: Path) -> dict[str, list[tuple]]:
    with sqlite3.connect(db) as connection:
        return {
            table: sorted(connection.execute(f"SELECT {STORED[table]} FROM {table}").fetchall(), key=repr)
            for table in RUN_TABLES
        }


def two_healthy_nights_then(results: Path, third: RunSpec) -> tuple[Path, Path]:
    for night in (1, 2):
        history.record(judged(make_run(results, night, RunSpec(hosts=HOSTS, pairs="all"))))
    return results / "history.sqlite", make_run(results, 3, third)


def test_the_rows_written_beside_are_the_rows_the_plain_ingest_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every host 15 % slower on the third night: alike to each other, so the night's own verdicts
    pass them, but each is slower than its history, and that finding keeps its rows out of later
    baselines (healthy 0), which the writer learns only after it inserted them. Reported again
    with wider history thresholds, the stored run is replaced (rows healthy again), both ways."""
    slower = RunSpec(hosts=HOSTS, pairs="all", host_scale=dict.fromkeys(HOSTS, 0.85))
    db, third = two_healthy_nights_then(tmp_path / "results", slower)
    plain_db = tmp_path / "plain.sqlite"
    shutil.copy(db, plain_db)
    started: list[Ingesting | None] = []
    start = Ingesting.start

    def beside(url: str, report: Report) -> Ingesting | None:
        started.append(start(url, report))
        return started[-1]

    def plain(url: str, report: Report) -> None:
        return None

    report = judged(third)
    assert {host.verdict for host in report.hosts.values()} == {"passed"}
    for options in (HistoryOptions(), HistoryOptions(min_drop=0.3, fail_drop=0.4)):
        monkeypatch.setattr(Ingesting, "start", staticmethod(beside))
        recorded = history.record(report, db=str(db), options=options)
        monkeypatch.setattr(Ingesting, "start", staticmethod(plain))
        assert history.record(report, db=str(plain_db), options=options).hosts == recorded.hosts
        assert stored(db) == stored(plain_db)
        ours = [row for row in stored(db)["measurements"] if row[0] == report.run.run_id]
        unhealthy = {row[2] for row in ours if not row[-1]}
        assert unhealthy == (set(HOSTS) if options == HistoryOptions() else set())
    assert len(started) == 2 and None not in started  # both written beside
    assert [row[-1] for row in stored(db)["runs"] if row[0] == report.run.run_id] == [2]  # replaced


def test_a_report_that_gives_up_before_the_commit_leaves_the_database_as_it_was(tmp_path: Path) -> None:
    """The writer inserted the night's rows and wrote the rest; the report's process never said
    commit (it failed, or was killed, in between): nothing of the run is in the database."""
    db, third = two_healthy_nights_then(tmp_path / "results", RunSpec(hosts=HOSTS, pairs="all"))
    before = stored(db)
    report = judged(third)
    writing = Ingesting.start(str(db), report)
    assert writing is not None
    assert writing.pipe.recv()[0] is None  # a new run: its measurement rows are in, uncommitted
    with history.open_store(db) as store:
        merged = history.merge_findings(report, history.find_regressions(store, report))
    records = ingesting.redacted(ingesting.records_of(merged))
    writing.pipe.send(
        (replace(records, measurements=(), earlier_digest=None, facts=()), records.measurements.unhealthy)
    )
    outcome = writing.pipe.recv()
    assert outcome.outcome == "added"  # written, waiting for the word
    writing.abandon()
    assert writing.process.exitcode == 0
    assert stored(db) == before
    forget_measurements()


def test_regressions_that_fail_leave_no_writer_and_nothing_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, third = two_healthy_nights_then(tmp_path / "results", RunSpec(hosts=HOSTS, pairs="all"))
    before = counts(db)

    def broken(*args: object, **kwargs: object) -> None:
        raise HistoryError(f"{db}: disk I/O error")

    monkeypatch.setattr(history, "find_regressions", broken)
    report = history.record(judged(third), db=str(db))
    warning = [c.reason for c in report.fleet_checks if c.name == "history"]
    assert warning == [f"history not used: {db}: disk I/O error"]
    assert counts(db) == before
    assert not multiprocessing.active_children()


def test_a_writer_that_cannot_write_is_one_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer's error comes back to the report as the plain ingest's would."""
    db, third = two_healthy_nights_then(tmp_path / "results", RunSpec(hosts=HOSTS, pairs="all"))
    before = counts(db)

    def full(cursor: sqlite3.Cursor, rows: object) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(ingesting, "insert_measurements", full)
    report = history.record(judged(third), db=str(db))
    warning = [c.reason for c in report.fleet_checks if c.name == "history"]
    assert len(warning) == 1 and warning[0].endswith("(database or disk is full)"), warning
    assert f"cannot record run {report.run.run_id}" in warning[0]
    assert counts(db) == before


def test_without_fork_the_run_is_ingested_in_the_report_s_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, third = two_healthy_nights_then(tmp_path / "results", RunSpec(hosts=HOSTS, pairs="all"))
    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    assert Ingesting.start(str(db), judged(third)) is None
    history.record(judged(third), db=str(db))
    assert counts(db)["runs"] == 3
