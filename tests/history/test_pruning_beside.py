"""The retention policy runs beside the report: `collbench report` (make_report) starts the pruning
in a child process once the night's findings and rows are stored, writes its files meanwhile, and
waits for the child before it returns. A pruning that fails or dies costs the report nothing: it
says so in one line, and the nights stay raw for the next report's pruning."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import time
from pathlib import Path

import pytest

from collbench_py import history
from collbench_py.history import HistoryError, HistoryOptions, pruning
from collbench_py.profiles import ProfileError
from collbench_py.report import make
from collbench_py.report.make import make_report
from tests.history.test_history import HOSTS, judged, make_run
from tests.rundir_factory import RunSpec

NIGHTS = 4
RAW_NIGHTS = 2


@pytest.fixture(autouse=True)
def _no_database_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLLBENCH_DB", raising=False)


def raw_runs(db: Path) -> list[str]:
    with sqlite3.connect(db) as connection:
        return [r for (r,) in connection.execute("SELECT DISTINCT run_id FROM measurements ORDER BY run_id")]


def nights(tmp_path: Path) -> tuple[list[Path], Path]:
    """NIGHTS run directories, the first NIGHTS - 1 reported with pruning as usual."""
    results = tmp_path / "results"
    runs = [make_run(results, day, RunSpec(hosts=HOSTS)) for day in range(1, NIGHTS + 1)]
    db = results / "history.sqlite"
    for run in runs[:-1]:
        make_report(run, db=str(db), history_options=HistoryOptions(raw_nights=RAW_NIGHTS))
    return runs, db


def test_the_pruning_runs_in_another_process_while_the_report_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs, db = nights(tmp_path)
    last = runs[-1]
    seen = tmp_path / "seen-by-the-pruning"
    real_prune = pruning.prune

    def prune_once_the_report_is_there(store, retention):
        # Inline, before the files, this would wait the whole bound and fail the pruning.
        deadline = time.monotonic() + 30
        while not (last / "report" / "results.json").exists():
            if time.monotonic() > deadline:
                raise HistoryError("the report's files never appeared while pruning")
            time.sleep(0.05)
        seen.write_text(str(os.getpid()))
        return real_prune(store, retention)

    monkeypatch.setattr(pruning, "prune", prune_once_the_report_is_there)
    made = make_report(last, db=str(db), history_options=HistoryOptions(raw_nights=RAW_NIGHTS))
    assert int(seen.read_text()) != os.getpid()
    assert not any(line.startswith("history:") for line in made.summary), made.summary
    # Waited for before make_report returned: only the newest RAW_NIGHTS nights keep raw rows.
    assert raw_runs(db) == [run.name for run in runs[-RAW_NIGHTS:]]


def test_a_failed_pruning_is_said_once_and_the_night_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs, db = nights(tmp_path)

    def locked(store, retention):
        raise HistoryError("database is locked")

    monkeypatch.setattr(pruning, "prune", locked)
    made = make_report(runs[-1], db=str(db), history_options=HistoryOptions(raw_nights=RAW_NIGHTS))
    said = [line for line in made.summary if line.startswith("history:")]
    assert said == ["history: the nights older than the raw window were not summarised: database is locked"]
    assert (runs[-1] / "report" / "results.json").is_file()
    # The night is stored; the night that should have left the window is still raw, for next time.
    assert raw_runs(db) == [run.name for run in runs[-RAW_NIGHTS - 1 :]]


def test_a_pruning_process_that_dies_is_named_with_its_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs, db = nights(tmp_path)
    monkeypatch.setattr(pruning, "prune", lambda store, retention: os._exit(9))
    made = make_report(runs[-1], db=str(db), history_options=HistoryOptions(raw_nights=RAW_NIGHTS))
    assert made.summary[-1] == (
        "history: the nights older than the raw window were not summarised: "
        "the pruning process ended with code 9 before it was done"
    )
    assert raw_runs(db) == [run.name for run in runs[-RAW_NIGHTS - 1 :]]


def test_history_record_prunes_in_place_and_a_failure_is_a_fleet_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Python API's `history.record` prunes before it returns; a pruning that fails becomes a
    fleet warning of the report it returns, which keeps the night's findings and rows."""
    runs, db = nights(tmp_path)
    pid = os.getpid()
    pruned_in: list[int] = []
    real_prune = pruning.prune

    def prune_here(store, retention):
        pruned_in.append(os.getpid())
        return real_prune(store, retention)

    monkeypatch.setattr(pruning, "prune", prune_here)
    report = history.record(judged(runs[-1]), str(db), HistoryOptions(raw_nights=RAW_NIGHTS))
    assert pruned_in == [pid] and raw_runs(db) == [run.name for run in runs[-RAW_NIGHTS:]]
    assert not [c for c in report.fleet_checks if c.name == "history"]

    def locked(store, retention):
        raise HistoryError("database is locked")

    monkeypatch.setattr(pruning, "prune", locked)
    again = history.record(judged(runs[-1]), str(db), HistoryOptions(raw_nights=RAW_NIGHTS))
    (warning,) = [c for c in again.fleet_checks if c.name == "history"]
    assert warning.status == "warn"
    assert warning.reason == "the nights older than the raw window were not summarised: database is locked"
    assert any(c.name.startswith("history/") for host in again.hosts.values() for c in host.checks)


def _pruning_children() -> list[multiprocessing.Process]:
    return [p for p in multiprocessing.active_children() if p.name == "collbench-prune"]


def test_the_pruning_process_is_forked_before_the_run_is_loaded_and_prunes_after_the_night_is_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forked while the report is small (a fork of a process holding a parsed fleet has each page
    the report then writes copied), it waits for the night to be stored before it prunes."""
    runs, db = nights(tmp_path)
    at_load: list[int] = []
    real_load = make.load_run_dir_with

    def load(*args, **kwargs):
        at_load.extend(p.pid for p in _pruning_children())
        assert raw_runs(db) == [run.name for run in runs[-RAW_NIGHTS - 1 : -1]]  # nothing pruned yet
        return real_load(*args, **kwargs)

    monkeypatch.setattr(make, "load_run_dir_with", load)
    made = make_report(runs[-1], db=str(db), history_options=HistoryOptions(raw_nights=RAW_NIGHTS))
    assert len(at_load) == 1 and at_load[0] != os.getpid()
    assert not any(line.startswith("history:") for line in made.summary), made.summary
    assert raw_runs(db) == [run.name for run in runs[-RAW_NIGHTS:]]
    assert _pruning_children() == []


def test_a_report_that_fails_lets_its_ready_pruning_process_end_without_pruning(tmp_path: Path) -> None:
    runs, db = nights(tmp_path)
    before = raw_runs(db)
    with pytest.raises(ProfileError):
        make_report(
            runs[-1],
            db=str(db),
            history_options=HistoryOptions(raw_nights=RAW_NIGHTS),
            profile=str(tmp_path / "no-such-profile.yml"),
        )
    assert _pruning_children() == []
    assert raw_runs(db) == before


def test_an_unusable_history_lets_its_ready_pruning_process_end(tmp_path: Path) -> None:
    runs, _ = nights(tmp_path)
    not_a_database = tmp_path / "not-a-database.sqlite"
    not_a_database.write_text("not SQLite")
    made = make_report(
        runs[-1], db=str(not_a_database), history_options=HistoryOptions(raw_nights=RAW_NIGHTS)
    )
    assert any(c.reason.startswith("history not used:") for c in made.report.fleet_checks)
    assert _pruning_children() == []
    assert not_a_database.read_text() == "not SQLite"


def test_record_then_prune_beside_without_a_ready_process_forks_one_once_the_night_is_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Python API without make_report's ready process: the pruning starts in a child forked
    when the night is stored, and `wait` has it done."""
    runs, db = nights(tmp_path)
    seen = tmp_path / "pruned-in"
    real_prune = pruning.prune

    def prune_and_say_where(store, retention):
        seen.write_text(str(os.getpid()))
        return real_prune(store, retention)

    monkeypatch.setattr(pruning, "prune", prune_and_say_where)
    options = HistoryOptions(raw_nights=RAW_NIGHTS)
    _, started = history.record_then_prune_beside(judged(runs[-1]), str(db), options)
    assert started.wait() is None
    assert int(seen.read_text()) != os.getpid()
    assert raw_runs(db) == [run.name for run in runs[-RAW_NIGHTS:]]
    assert _pruning_children() == []
