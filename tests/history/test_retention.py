"""Retention: raw rows for the newest nights, per-night summaries beyond them, and regressions still
found against those summaries. Nights from real run directories where the rule is about runs; rows
written straight into the store where the rule is arithmetic on rows."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from collbench_py import history
from collbench_py.history import HistoryOptions, Retention, open_store, prune
from collbench_py.history.retention import SUMMARIES, kept_sizes, merged, night_of, summarise
from collbench_py.history.store import SCHEMA_VERSION, SUMMARY_SCHEMA
from tests.history.test_compare import collbench, one_line_error
from tests.history.test_history import HOSTS, history_checks, judged, make_run
from tests.rundir_factory import CORPUS, H100_LOG, RunSpec

REPO = Path(__file__).resolve().parents[2]
GIB = 1024**3
MIB = 1024**2


@pytest.fixture(autouse=True)
def _no_database_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLLBENCH_DB", raising=False)


def rows(db: Path, sql: str, params: tuple = ()) -> list[tuple]:
    with sqlite3.connect(db) as connection:
        return connection.execute(sql, params).fetchall()


def night(day: int) -> int:
    """The summary night of make_run's night `day` (2026-11-<day>)."""
    return night_of(f"2026-11-{day:02d}T21:51:00Z")


# ---- the window ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("at_once", [False, True], ids=["each-night", "at-once"])
def test_nights_past_the_window_keep_summaries_and_lose_their_raw_rows(tmp_path: Path, at_once: bool) -> None:
    """Pruned after each night as `collbench report` does, or all at once as `collbench history --prune`
    does to a database written before retention: the same rows remain."""
    results = tmp_path / "results"
    options = HistoryOptions(raw_nights=0 if at_once else 2)
    reports = []
    for day in range(1, 6):
        # node5 only took part on the first two nights: its night-2 facts are the newest it has, so
        # they stay; its night-1 facts go.
        hosts = [*HOSTS, "node5"] if day <= 2 else HOSTS
        reports.append(history.record(judged(make_run(results, day, RunSpec(hosts=hosts))), options=options))
    db = results / "history.sqlite"
    if at_once:
        with open_store(db) as store:
            assert prune(store, Retention(raw_nights=2)).runs == 3
    run_ids = [r.run.run_id for r in reports]
    raw = dict(rows(db, "SELECT run_id, COUNT(*) FROM measurements GROUP BY run_id"))
    assert sorted(raw) == run_ids[3:]  # nights 4 and 5: the newest two
    assert rows(db, "SELECT COUNT(*) FROM runs") == [(5,)]  # every run is still listed
    assert {r for (r,) in rows(db, "SELECT DISTINCT run_id FROM verdicts")} == set(run_ids[3:])
    assert rows(db, "SELECT DISTINCT host FROM facts WHERE run_id = ?", (run_ids[1],)) == [("node5",)]
    assert not rows(db, "SELECT 1 FROM facts WHERE run_id IN (?, ?)", (run_ids[0], run_ids[2]))
    nights = rows(
        db,
        f"SELECT DISTINCT night FROM {SUMMARIES} JOIN summary_series USING (series) "
        "WHERE kind = 'intra' AND subject = 'node1' AND collective = 'all_reduce' ORDER BY night",
    )
    assert nights == [(night(1),), (night(2),), (night(3),)]
    # A summary keeps only the sizes a regression is judged at: from 256 MiB up, and the largest.
    sizes = rows(
        db,
        f"SELECT DISTINCT size FROM {SUMMARIES} JOIN summary_series USING (series) "
        "WHERE kind = 'intra' AND subject = 'node1' AND collective = 'all_reduce' ORDER BY size",
    )
    raw_sizes = rows(
        db,
        "SELECT DISTINCT size FROM measurements WHERE kind = 'intra' AND subject = 'node1' ORDER BY size",
    )
    assert [s for (s,) in sizes] == [s for (s,) in raw_sizes if s >= 256 * MIB]
    # The night's one sample, exactly: the raw value of node1 on night 5 equals its summary shape.
    assert rows(db, f"SELECT DISTINCT n, spread, low FROM {SUMMARIES}") == [(1, 0.0, None)]


def test_raw_nights_zero_keeps_every_row(tmp_path: Path) -> None:
    results = tmp_path / "results"
    for day in (1, 5, 9):
        history.record(
            judged(make_run(results, day, RunSpec(hosts=HOSTS))), options=HistoryOptions(raw_nights=0)
        )
    db = results / "history.sqlite"
    assert rows(db, "SELECT COUNT(DISTINCT run_id) FROM measurements") == [(3,)]
    assert rows(db, f"SELECT COUNT(*) FROM {SUMMARIES}") == [(0,)]


# ---- the summary's arithmetic -------------------------------------------------------------------------


def add_run(db: Path, run_id: str, started_at: str, values: dict[tuple[str, int], float]) -> None:
    """One run written as rows: (subject, size) -> intra all_reduce busbw; a negative value is unhealthy."""
    with sqlite3.connect(db) as connection:
        connection.execute(
            "INSERT INTO runs (run_id, started_at, status, parameters, content_hash, ingested_at, revision) "
            "VALUES (?, ?, 'ok', '{}', ?, ?, 1)",
            (run_id, started_at, run_id, started_at),
        )
        connection.executemany(
            "INSERT INTO measurements (run_id, kind, subject, collective, size, busbw, healthy) "
            "VALUES (?, 'intra', ?, 'all_reduce', ?, ?, ?)",
            [(run_id, subject, size, abs(v), int(v > 0)) for (subject, size), v in values.items()],
        )


def summaries(db: Path) -> dict[tuple[str, int, int], tuple]:
    return {
        (subject, night, size): (median, spread, low, n)
        for subject, night, size, median, spread, low, n in rows(
            db,
            f"SELECT subject, night, size, median, spread, low, n FROM {SUMMARIES} "
            "JOIN summary_series USING (series)",
        )
    }


def test_a_night_of_several_runs_is_summarised_as_median_spread_low_and_count(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite"
    with open_store(db, create=True):
        pass
    # Three runs on the night of 1 Nov at 8 GiB: 10, 12, 20 (and an unhealthy 1, left out), then 64 MiB
    # (below the summary floor, not the largest: left out) and one run on 10 Nov that keeps 1 Nov out
    # of a 3-night window.
    for number, value in enumerate((10.0, 12.0, 20.0, -1.0)):
        add_run(
            db,
            f"r{number}",
            f"2026-11-01T0{number}:00:00Z",
            {("node1", 8 * GIB): value, ("node1", 64 * MIB): 5.0, ("node2", 64 * MIB): 7.0 + number},
        )
    add_run(db, "late", "2026-11-10T01:00:00Z", {("node1", 8 * GIB): 11.0})
    with open_store(db, create=True) as store:
        pruned = prune(store, Retention(raw_nights=3))
    assert (pruned.runs, pruned.rows) == (4, 12)
    day = night_of("2026-11-01T00:00:00Z")
    # median 12, MAD median(|10-12|, 0, |20-12|) = 2, low 10, three healthy runs;
    # node2 has only 64 MiB (7, 8, 9, 10, all healthy): its largest size is kept (a series always
    # keeps one size): median 8.5, MAD median(1.5, 0.5, 0.5, 1.5) = 1.
    assert summaries(db) == {
        ("node1", day, 8 * GIB): (12.0, 2.0, 10.0, 3),
        ("node2", day, 64 * MIB): (8.5, 1.0, 7.0, 4),
    }
    assert rows(db, "SELECT DISTINCT run_id FROM measurements") == [("late",)]


def test_a_run_reported_after_its_night_was_summarised_joins_that_summary() -> None:
    old = summarise([10.0, 12.0, 20.0])
    assert merged(old, [30.0]) == type(old)(12.0, 2.0, 10.0, 4)
    assert merged(old, [2.0, 3.0]).low == 2.0
    assert kept_sizes([1, 2, 3], floor=10) == {3}
    assert kept_sizes([1, 20, 30], floor=10) == {20, 30}


# ---- regressions against summaries --------------------------------------------------------------------


def test_a_slow_night_is_flagged_against_nights_kept_only_as_summaries(tmp_path: Path) -> None:
    results = tmp_path / "results"
    options = HistoryOptions(raw_nights=1)
    pairs = [("node1", "node2")]
    for day in (1, 2, 3):
        history.record(judged(make_run(results, day, RunSpec(hosts=HOSTS, pairs=pairs))), options=options)
    db = results / "history.sqlite"
    # Nights 1 and 2 are summaries now; night 3 alone is raw: one run is not a baseline (min_runs 2).
    assert len(rows(db, "SELECT DISTINCT run_id FROM measurements")) == 1
    slow = judged(make_run(results, 4, RunSpec(hosts=HOSTS, pairs=pairs, host_scale={"node3": 0.85})))
    fourth = history.record(slow, options=options)
    node3 = history_checks(fourth, "node3")["history/intra/all_reduce"]
    assert node3.status == "fail", node3.reason
    assert "15% below its baseline median (3 runs)" in node3.reason
    for host in ("node1", "node2", "node4"):
        check = history_checks(fourth, host)["history/intra/all_reduce"]
        assert check.status == "pass" and "(3 runs)" in check.reason, check.reason
    # The links too: each pair's baseline rests on its summaries.
    link = history_checks(fourth, "node1")["history/pair/all_reduce"]
    assert (link.status, link.reason) == ("pass", "all_reduce: 1 link(s) within their own history")


def test_the_rolling_window_takes_the_newest_summarised_nights(tmp_path: Path) -> None:
    """Four summarised nights (100, 100, 104, 104 %), history runs 2: the baseline is the two 104 % nights,
    so 97.5 % is 6 % below (a warning); over all four it would be 4 % (a pass)."""
    results = tmp_path / "results"
    options = HistoryOptions(raw_nights=1, runs=2)
    for day, scale in enumerate((1.0, 1.0, 1.04, 1.04), start=1):
        history.record(
            judged(make_run(results, day, RunSpec(hosts=HOSTS, host_scale={"node3": scale}))), options=options
        )
    # Night 5 a week later: every earlier night is a summary when night 6 is judged.
    history.record(judged(make_run(results, 12, RunSpec(hosts=HOSTS))), options=HistoryOptions(raw_nights=1))
    db = results / "history.sqlite"
    with sqlite3.connect(db) as connection:
        connection.execute("DELETE FROM measurements")  # night 12's raw rows out: summaries alone
    last = judged(make_run(results, 13, RunSpec(hosts=HOSTS, host_scale={"node3": 0.975})))
    judged_last = history.record(last, options=HistoryOptions(raw_nights=0, runs=3, min_drop=0.05))
    node3 = history_checks(judged_last, "node3")["history/intra/all_reduce"]
    # runs 3: night 12 (100 %), 4 and 3 (104 %): median 104 % -> 6 % below: warn.
    assert node3.status == "warn", node3.reason
    assert "(3 runs)" in node3.reason


# ---- the database and the command ---------------------------------------------------------------------


def test_a_schema_2_database_upgrades_in_place(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite"
    with open_store(db, create=True):
        pass
    add_run(db, "r0", "2026-11-01T00:00:00Z", {("node1", GIB): 10.0})
    with sqlite3.connect(db) as connection:
        connection.execute(f"DROP TABLE {SUMMARIES}")
        connection.execute("DROP TABLE summary_series")
        connection.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    with open_store(db, create=True) as store:
        tables = {r[0] for r in store.query("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {SUMMARIES, "summary_series"} <= tables
    assert len(SUMMARY_SCHEMA) == 3
    assert rows(db, "SELECT value FROM meta") == [(str(SCHEMA_VERSION),)] == [("5",)]
    assert rows(db, "SELECT run_id, busbw FROM measurements") == [("r0", 10.0)]


def test_a_schema_3_database_loses_its_subject_index_and_keeps_its_rows(tmp_path: Path) -> None:
    """The (kind, collective, subject) index doubled the cost of every night's insert and pruned
    delete: a database written before goes without it from the first time it is opened for writing."""
    db = tmp_path / "history.sqlite"
    with open_store(db, create=True):
        pass
    add_run(db, "r0", "2026-11-01T00:00:00Z", {("node1", GIB): 10.0, ("node2", GIB): 9.0})
    with sqlite3.connect(db) as connection:
        connection.execute("CREATE INDEX measurements_by_subject ON measurements (kind, collective, subject)")
        connection.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    with open_store(db, create=True):
        pass
    assert rows(db, "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'measurements'") == [
        ("sqlite_autoindex_measurements_1",)  # the primary key's
    ]
    assert rows(db, "SELECT value FROM meta") == [("5",)]
    assert rows(db, "SELECT subject, busbw FROM measurements ORDER BY 1") == [("node1", 10.0), ("node2", 9.0)]


def test_history_prune_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "history.sqlite"
    with open_store(db, create=True):
        pass
    add_run(db, "r0", "2026-11-01T00:00:00Z", {("node1", GIB): 10.0})
    add_run(db, "r1", "2026-11-20T00:00:00Z", {("node1", GIB): 11.0})
    code, out, _ = collbench(capsys, "history", "--prune", "--history-raw-nights", "5", "--db", db)
    assert code == 0
    assert (
        "1 run(s) older than the newest 5 night(s) summarised (1 measurement rows into 1 summary rows)" in out
    )
    assert rows(db, "SELECT DISTINCT run_id FROM measurements") == [("r1",)]
    code, _, err = collbench(capsys, "history", "node1", "--prune", "--db", db)
    assert code == 2 and "either a subject" in one_line_error(err, "history")
    code, _, err = collbench(capsys, "history", "--prune", "--db", tmp_path / "missing.sqlite")
    assert code == 2 and "no history database" in one_line_error(err, "history")


# ---- the year benchmark, small -------------------------------------------------------------------------


def test_history_bench_runs_small_and_finds_the_planted_hosts(tmp_path: Path) -> None:
    """benchmarks/history_bench.py at 20 hosts and 40 nights: the last night is judged against 5 raw
    nights and 5 summarised ones (history runs 10), and its planted slow hosts are flagged."""
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "history_bench.py"),
            *("--hosts", "20", "--nights", "40", "--raw-nights", "5", "--keep", str(tmp_path / "b")),
            *("--json", str(out)),
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(out.read_text())
    assert figures["flagged_slow_hosts"] == figures["planted_slow_hosts"] == ["gpu0005", "gpu0011", "gpu0017"]
    assert figures["runs_with_raw_rows"] == 5
    assert figures["rows"]["runs"] == 40
    assert figures["rows"]["measurements"] == 5 * figures["measurement_rows_last_night"]
    assert set(figures["phases_s"]) == {"regressions", "ingest", "prune"}
    # The nights written as summaries are those prune would leave: compare one night it pruned
    # itself (night 35, out of the window when night 40 was recorded) with one the bench wrote.
    with sqlite3.connect(tmp_path / "b" / "history.sqlite") as connection:
        shape = connection.execute(
            f"SELECT night, COUNT(*), COUNT(DISTINCT series), SUM(n) FROM {SUMMARIES} GROUP BY night "
            "ORDER BY night DESC LIMIT 2"
        ).fetchall()
    (pruned_night, *pruned_shape), (written_night, *written_shape) = shape
    assert pruned_night == written_night + 1
    assert pruned_shape == written_shape


def test_a_collective_measured_only_below_the_reference_sizes_is_still_judged(tmp_path: Path) -> None:
    """The baseline reads only sizes from 256 MiB up, except for a collective where some host measured
    nothing that large: reduce_scatter up to 128 MiB here, judged at its largest size."""
    small = CORPUS / "nccl-tests" / "cscs-gh200-2node-v2.18.2-version-header.txt"
    results = tmp_path / "results"
    intra = {"all_reduce": H100_LOG, "reduce_scatter": small}
    for day in (1, 2):
        history.record(judged(make_run(results, day, RunSpec(hosts=HOSTS, intra=intra))))
    third = history.record(
        judged(make_run(results, 3, RunSpec(hosts=HOSTS, intra=intra, host_scale={"node3": 0.85})))
    )
    checks = history_checks(third, "node3")
    assert checks["history/intra/all_reduce"].status == "fail"
    scatter = checks["history/intra/reduce_scatter"]
    assert scatter.status == "fail", scatter.reason
    assert "at 128 MiB" in scatter.reason and "small messages measure latency" in scatter.reason


def test_collbench_history_shows_summarised_nights_before_the_raw_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    reports = [
        history.record(
            judged(make_run(results, day, RunSpec(hosts=[*HOSTS, "node5"] if day <= 2 else HOSTS))),
            options=HistoryOptions(raw_nights=2),
        )
        for day in range(1, 6)
    ]
    db = results / "history.sqlite"
    code, out, _ = collbench(capsys, "history", "node1", "--db", db)
    assert code == 0, out
    assert "node1 all_reduce (intra-node) busbw at 16 GiB, 5 runs in" in out
    lines = [line for line in out.splitlines() if line.startswith("2026")]
    assert [line.split()[0] for line in lines] == [r.run.run_id for r in reports]
    assert [("night summary of 1 run(s)" in line) for line in lines] == [True, True, True, False, False]
    # node5's raw rows are all gone: its history is its summaries.
    code, out, _ = collbench(capsys, "history", "node5", "--db", db, "--last", "1")
    assert code == 0, out
    assert "1 runs in" in out and reports[1].run.run_id in out
