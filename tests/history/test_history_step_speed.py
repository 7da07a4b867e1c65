"""The shortcuts that keep the report's history step fast at fleet scale give the same answers as
the plain rules: the baseline's statistics computed for every series at once, the redaction
screen that lets most verdict reasons through untouched, and a late run's night summary found by
series, not by reading the whole summaries table."""

from __future__ import annotations

import json
import random
import re
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collbench_py import history, redact
from collbench_py.history import Retention, open_store, prune, regressions
from collbench_py.history import records as records_module
from collbench_py.history.columns import columns_of, read_columns, write_columns
from collbench_py.history.query import check_subject, collectives_of, newest_size, series, sizes_of
from collbench_py.history.records import RunRecords, size_summary
from collbench_py.history.regressions import (
    ROLLING,
    HistoryOptions,
    _judge,
    _Pool,
    judged_sizes,
    rolling_baseline,
    stat_of,
)
from collbench_py.history.store import HistoryError, Store
from collbench_py.history.writer import redacted
from collbench_py.parsers import parse_text
from collbench_py.redact import REDACTED, is_secret_name, redact_text
from collbench_py.rundir.load import PackedRows
from tests.history.test_history import HOSTS, history_checks, judged, make_run
from tests.history.test_retention import GIB, add_run, summaries
from tests.rundir_factory import CORPUS, H100_LOG, RunSpec, make_facts

# ---- the baseline's statistics, all series at once ----------------------------------------------------

samples = st.lists(
    st.tuples(
        st.sampled_from(["all_reduce", "alltoall"]),
        st.sampled_from(["node1", "node2", "node1--node2"]),
        st.sampled_from([256 * 1024**2, GIB, 16 * GIB]),
        # few distinct values, so ties and equal deviations come up
        st.sampled_from([0.5, 1.0, 1.5, 2.0, 97.25, 98.0, 123.456, 1e-3]),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(samples)
def test_every_series_gets_the_median_mad_count_and_low_stat_of_gives_it(rows: list[tuple]) -> None:
    pool = _Pool()
    half = len(rows) // 2
    pool.extend(rows[:half])  # as a run's rows
    for row in rows[half:]:  # as older runs' and summaries' samples
        pool.add(*row)
    expected: dict[tuple, list[float]] = {}
    for *key, value in rows:
        expected.setdefault(tuple(key), []).append(value)
    got = dict(pool.stats())
    assert got == {key: stat_of(values) for key, values in expected.items()}


def test_series_of_even_and_odd_counts_take_their_middle_values() -> None:
    """Written out: medians of 1, 2, 3 and 4 samples, MAD of each, the lowest, in any order."""
    pool = _Pool()
    pool.extend([("c", "a", 1, 5.0), ("c", "b", 1, 4.0), ("c", "b", 1, 2.0), ("c", "d", 1, 9.0)])
    for value in (1.0, 7.0):
        pool.add("c", "d", 1, value)
    for value in (8.0, 1.0, 2.0, 4.0):
        pool.add("c", "e", 1, value)
    stats = {key[1]: (s.median, s.mad, s.n, s.low) for key, s in pool.stats()}
    assert stats == {
        "a": (5.0, 0.0, 1, 5.0),
        "b": (3.0, 1.0, 2, 2.0),
        "d": (7.0, 2.0, 3, 1.0),  # 1 7 9: deviations 6 0 2
        "e": (3.0, 1.5, 4, 1.0),  # 1 2 4 8: deviations 2 1 1 5
    }


# ---- the redaction screen -------------------------------------------------------------------------------

# One name for each alternative of the secret-name rule (redact._SECRET_NAME), in upper and lower case.
SECRET_NAMES = (
    "GH_TOKEN",
    "CLIENT_SECRET",
    "DB_PASSWORD",
    "DB_PASSWD",
    "GPG_PASSPHRASE",
    "MYPWD",
    "GIT_CREDENTIALS",
    "PRIVATE_THING",
    "PROXY_AUTH",
    "COOKIE_JAR",
    "SESSION_ID",
    "SSH_KEY",
    "KEYS",
    "MYAPIKEY",
    "S3ACCESSKEY",
    "AWS_REGION",
    "AZURE_TENANT",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "GCP_PROJECT",
    "HF_HOME",
    "WANDB_MODE",
    "DATABASE_URL",
)


def test_the_examples_cover_every_alternative_of_the_secret_name_rule() -> None:
    """A new alternative in the rule needs an example here, which the screen test below then checks."""
    alternatives = re.split(r"\|(?![^(]*\))", redact._SECRET_NAME.pattern)
    for alternative in alternatives:
        assert any(re.search(alternative, name, re.IGNORECASE) for name in SECRET_NAMES), alternative
    assert all(is_secret_name(name) for name in SECRET_NAMES)


@pytest.mark.parametrize("name", [*SECRET_NAMES, *(n.lower() for n in SECRET_NAMES)])
def test_every_secret_name_passes_the_screen_and_is_redacted(name: str) -> None:
    for text in (
        f"launch failed: {name}=hunter2 in the environment",
        f'{{"{name}": "hunter2"}}',
        f"  {name.replace('_', '-')}: hunter2",
        f"{name} set by environment to hunter2",
    ):
        assert "hunter2" not in redact_text(text), text
        assert REDACTED in redact_text(text)


def _unscreened(text: str, monkeypatch: pytest.MonkeyPatch) -> str:
    with monkeypatch.context() as patch:
        patch.setattr(redact, "_may_hold_secret", lambda text: True)
        return redact_text(text)


def test_the_screen_changes_no_text_of_the_corpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every line of every real log, and those lines with secrets planted in them: redacted the same
    with the screen as without it."""
    lines: list[str] = []
    for path in sorted(CORPUS.rglob("*.txt"))[:40]:
        lines += path.read_text(encoding="utf-8", errors="replace").splitlines()
    rng = random.Random(7)
    planted = [f"{line} {rng.choice(SECRET_NAMES)}=x{i}" for i, line in enumerate(rng.sample(lines, 200))]
    screened = 0
    odd = ["\u017fECRET=hunter2", "TO\u212aEN=hunter2", "PR\u0130VATE_X=hunter2", "gh_token=hunter2"]
    for text in (*lines, *planted, *odd, "\n".join(lines[:500])):
        assert redact_text(text) == _unscreened(text, monkeypatch), text
        screened += not redact._may_hold_secret(text)
    assert screened > len(lines) // 2  # the screen lets most lines through untouched


# ---- a late run's night summary --------------------------------------------------------------------------


def test_a_run_reported_late_merges_into_its_nights_summary(tmp_path: Path) -> None:
    """Night 1 Nov summarised (10, 12, 20); then a fourth run of 1 Nov (30) arrives after it and is
    pruned in turn: one summary of four samples, the old ones standing in as their median."""
    db = tmp_path / "history.sqlite"
    with open_store(db, create=True):
        pass
    for number, value in enumerate((10.0, 12.0, 20.0)):
        add_run(db, f"r{number}", f"2026-11-01T0{number}:00:00Z", {("node1", 8 * GIB): value})
    add_run(db, "newest", "2026-11-10T01:00:00Z", {("node1", 8 * GIB): 11.0})
    with open_store(db) as store:
        assert prune(store, Retention(raw_nights=3)).summaries == 1
    add_run(db, "late", "2026-11-01T05:00:00Z", {("node1", 8 * GIB): 30.0})
    with open_store(db) as store:
        assert prune(store, Retention(raw_nights=3)).summaries == 1
    (summary,) = summaries(db).values()
    assert summary == (12.0, 2.0, 10.0, 4)


# ---- a log's per-size summary, read from its packed rows ------------------------------------------------


def test_packed_rows_printed_twice_or_out_of_order_are_summarised_as_their_rows() -> None:
    """Whole rows (every value) but a size printed twice, or sizes out of order: not the one-row-a-
    size shortcut, the median of the size's rows, as from the rows themselves."""
    run = max(parse_text(H100_LOG.read_text(encoding="utf-8")).runs, key=lambda r: len(r.rows))
    last = run.rows[-1]
    again = replace(last, oop=replace(last.oop, busbw=last.oop.busbw / 2), ip=replace(last.ip, busbw=1.0))
    for rows in ((*run.rows, again), (*run.rows[1:], run.rows[0])):
        packed = PackedRows.of(rows)
        assert isinstance(packed, PackedRows)
        assert packed.size_summary() == size_summary(rows)
    summary = PackedRows.of((*run.rows, again)).size_summary()
    assert [s for s, *_ in summary] == sorted({r.size for r in run.rows})
    mean_half = (last.oop.busbw + last.ip.busbw) / 2
    assert summary[-1][1] == (mean_half + (last.oop.busbw / 2 + 1.0) / 2) / 2


# ---- the newest runs read through the primary key -------------------------------------------------------


UNSPIED_QUERY = Store.query


def queries_asked(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple]]:
    """Every (sql, params) the store is asked from now on, in order."""
    asked: list[tuple[str, tuple]] = []

    def recorded(self: Store, sql: str, params: tuple | list = ()) -> list[tuple]:
        asked.append((sql, tuple(params)))
        return UNSPIED_QUERY(self, sql, params)

    monkeypatch.setattr(Store, "query", recorded)
    return asked


def query_plan(store: Store, sql: str, params: tuple) -> str:
    return " ".join(str(row[-1]) for row in UNSPIED_QUERY(store, f"EXPLAIN QUERY PLAN {sql}", params))


def test_the_newest_runs_are_read_by_run_not_through_the_subject_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kind with one collective (the pairs) read with `collective = ?` made SQLite walk the
    (kind, collective, subject) index over every stored run; each newest run's rows are one range of
    the primary key."""
    db = tmp_path / "history.sqlite"
    with open_store(db, create=True):
        pass
    for day in range(1, 5):
        add_run(db, f"r{day}", f"2026-11-0{day}T01:00:00Z", {("node1", 8 * GIB): 10.0, ("node2", GIB): 9.0})
    asked = queries_asked(monkeypatch)
    group = ("intra", "all_reduce")
    with open_store(db) as store:
        base = rolling_baseline(
            store, {group}, ("2026-11-09T00:00:00Z", "z"), 3, {group: {"node1"}}, min_size={group: 0}
        )
        reads = [(sql, p) for sql, p in asked if "FROM measurements WHERE run_id = ?" in sql]
        assert len(reads) == 3
        for sql, params in reads:
            plan = query_plan(store, sql, params)
            assert "measurements_by_subject" not in plan and "run_id=?" in plan, plan
    assert base[("intra", "node1", "all_reduce")][8 * GIB].n == 3


# ---- a subject's rows found run by run, without an index by subject ------------------------------------


def test_a_subjects_history_is_read_run_by_run_through_the_primary_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The measurements have no index by subject (it doubled the cost of every night's insert and
    pruned delete): `collbench history`'s questions about one subject, and the older raw runs of a
    subject the newest runs left short, read one primary-key range per run, never the whole table,
    and answer as before."""
    db = tmp_path / "history.sqlite"
    with open_store(db, create=True):
        pass
    for day in range(1, 7):
        values = {("node1", GIB): 10.0 + day, ("node1", 8 * GIB): 20.0 + day, ("node2", GIB): 5.0}
        if day >= 4:  # node3 joins late; node2 is unhealthy on the newest night
            values[("node3", GIB)] = 7.0
        if day == 6:
            values[("node2", GIB)] = -1.0
        add_run(db, f"r{day}", f"2026-11-0{day}T01:00:00Z", values)
    with sqlite3.connect(db) as connection:  # node1 measured 512 MiB instead of 1 GiB in r2
        connection.execute(
            "UPDATE measurements SET size = ? WHERE run_id = 'r2' AND subject = 'node1' AND size = ?",
            (GIB // 2, GIB),
        )
    asked = queries_asked(monkeypatch)
    with open_store(db) as store:
        check_subject(store, "intra", "node3")
        with pytest.raises(HistoryError, match="no host 'node4'"):
            check_subject(store, "intra", "node4")
        assert collectives_of(store, "intra", "node1") == ["all_reduce"]
        assert sizes_of(store, "intra", "node1", "all_reduce") == [GIB // 2, GIB, 8 * GIB]
        assert newest_size(store, "intra", "node3", "all_reduce") == GIB
        points = series(store, "intra", "node1", "all_reduce", size=GIB, last=4)
        assert [(p.run_id, p.busbw) for p in points] == [
            ("r3", 13.0),
            ("r4", 14.0),
            ("r5", 15.0),
            ("r6", 16.0),
        ]
        node2 = series(store, "intra", "node2", "all_reduce", size=GIB, last=2)
        assert [(p.run_id, p.healthy) for p in node2] == [("r5", True), ("r6", False)]
        # The newest 5 runs leave node2 (unhealthy in r6) short: it reads its older raw runs.
        group = ("intra", "all_reduce")
        wanted = {group: {"node1", "node2", "node3"}}
        base = rolling_baseline(store, {group}, ("2026-11-07T00:00:00Z", "z"), 5, wanted, min_size={group: 0})
        for sql, params in asked:
            if "measurements" in sql and "subject" in sql:
                plan = query_plan(store, sql, params)
                assert "SCAN m" not in plan and "SCAN measurements" not in plan, plan
    assert base[("intra", "node2", "all_reduce")][GIB].n == 5  # r1..r5: r6 was unhealthy
    # node1 has samples in each of the newest 5 runs (r2: 512 MiB and 8 GiB), so 1 GiB has 4.
    assert base[("intra", "node1", "all_reduce")][GIB].n == 4
    assert base[("intra", "node1", "all_reduce")][GIB].median == 14.5  # 16 15 14 13
    assert base[("intra", "node3", "all_reduce")][GIB].n == 3
    assert any("CROSS JOIN measurements" in sql and "IN (" in sql for sql, _ in asked)  # older raw runs read


# ---- the newest runs read at the judged sizes alone ------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_reading_the_judged_sizes_alone_judges_every_subject_as_the_full_read_does(
    tmp_path: Path, seed: int
) -> None:
    """Random histories with the irregular parts a fleet has (a host down some nights, a size missing
    from a run, an unhealthy sample, a subject with nothing from 256 MiB up, older raw runs and night
    summaries to top up from): the baseline read at each subject's judged sizes, with the full read
    for a subject that lacks one of them, gives every subject the finding the full read gives."""
    rng = random.Random(seed)
    db = tmp_path / "history.sqlite"
    with open_store(db, create=True):
        pass
    mib = 1024**2
    sizes = [64 * mib, 128 * mib, 256 * mib, 512 * mib, GIB, 2 * GIB, 4 * GIB]
    subjects = {f"node{i}": sizes if i % 4 else sizes[:2] for i in range(8)}  # node0, node4: small only
    runs = [f"r{day:02d}" for day in range(1, 16)]
    for day, run_id in enumerate(runs, start=1):
        values = {}
        for subject, measured in subjects.items():
            if rng.random() < 0.15:
                continue  # not in that night's run
            for size in measured:
                if rng.random() < 0.1:
                    continue  # this size missing from the run
                value = 100.0 * (1 + 0.02 * rng.gauss(0, 1)) * (0.8 if rng.random() < 0.05 else 1)
                values[(subject, size)] = -value if rng.random() < 0.05 else value
        add_run(db, run_id, f"2026-11-{day:02d}T01:00:00Z", values)
    with open_store(db) as store:
        prune(store, Retention(raw_nights=8))  # nights 1-7: summaries alone
    options = HistoryOptions(runs=5)
    current = {
        ("intra", subject, "all_reduce"): {size: 95.0 + rng.random() * 10 for size in measured}
        for subject, measured in subjects.items()
    }
    group = ("intra", "all_reduce")
    names = {group: {subject for _, subject, _ in current}}
    judged = {group: {key[1]: judged_sizes(points, options) for key, points in current.items()}}
    args = ({group}, ("2026-11-20T00:00:00Z", "z"), options.runs, names)
    with open_store(db) as store:
        full = rolling_baseline(store, *args, min_size={group: 0})
        fast = rolling_baseline(store, *args, min_size={group: 0}, judged=judged)
    for key, points in current.items():
        assert _judge(key, points, fast.get(key, {}), ROLLING, options) == _judge(
            key, points, full.get(key, {}), ROLLING, options
        ), key


def test_a_regular_nightly_history_is_read_at_the_judged_sizes_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every host in every run at every size, as a nightly fleet: 3 sizes of each read, not 5."""
    db = tmp_path / "history.sqlite"
    with open_store(db, create=True):
        pass
    sizes = [128 * 1024**2, 256 * 1024**2, GIB, 2 * GIB, 4 * GIB]
    for day in range(1, 7):
        values = {(f"node{i}", size): 100.0 + day for i in range(4) for size in sizes}
        add_run(db, f"r{day}", f"2026-11-0{day}T01:00:00Z", values)
    read: list[int] = []
    query = Store.query

    def counted(self: Store, sql: str, params: tuple | list = ()) -> list[tuple]:
        rows = query(self, sql, params)
        read.append(len(rows) if "FROM measurements" in sql else 0)
        return rows

    monkeypatch.setattr(Store, "query", counted)
    options = HistoryOptions(runs=5)
    group = ("intra", "all_reduce")
    judged = {group: {f"node{i}": judged_sizes(sizes, options) for i in range(4)}}
    with open_store(db) as store:
        base = rolling_baseline(
            store,
            {group},
            ("2026-11-09T00:00:00Z", "z"),
            5,
            {group: set(judged[group])},
            min_size={group: 256 * 1024**2},
            judged=judged,
        )
    assert sum(read) == 5 * 4 * 3
    assert sorted(base[("intra", "node2", "all_reduce")]) == [GIB, 2 * GIB, 4 * GIB]
    assert base[("intra", "node2", "all_reduce")][GIB].median == 104.0  # r2..r6: 102..106


def test_verdict_reasons_are_redacted_once_each_and_every_row_gets_its_own() -> None:
    """The writer redacts each distinct reason once (a fleet repeats them): every row still gets the
    redacted text of its own reason, and a reason with nothing secret is stored as it was."""
    secret = "launch failed: NCCL_IB_HCA=mlx5 GH_TOKEN=hunter2 exited 1"
    plain = "all_reduce: 12 link(s) within their own history"
    rows = tuple(
        ("run", "host", f"node{i}", seq, "check", "fail", reason)
        for i in range(3)
        for seq, reason in enumerate((secret, plain, f"node{i} {secret}"))
    )
    records = RunRecords(
        ("run", "2026-11-01T00:00:00Z", None, "ok", *[None] * 3, "{}"), (), (), rows, (), "d"
    )
    stored = redacted(records).verdicts
    assert [row[:6] for row in stored] == [row[:6] for row in rows]
    for row, before in zip(stored, rows, strict=True):
        assert "hunter2" not in row[6]
        assert row[6] == redact_text(before[6])
    assert stored[1][6] == plain
    assert stored[2][6] == f"node0 launch failed: NCCL_IB_HCA=mlx5 GH_TOKEN={REDACTED} exited 1"


# ---- facts drift found run by run, newest first --------------------------------------------------------


def test_facts_drift_is_against_each_hosts_latest_earlier_run_with_its_facts(tmp_path: Path) -> None:
    """A host absent from the night before is compared with the last run it was in; a run started
    later than the one judged (reported before it) is no baseline, whoever it measured."""
    results = tmp_path / "results"
    history.record(judged(make_run(results, 1, RunSpec(hosts=HOSTS))))  # driver 570.86.15
    history.record(judged(make_run(results, 2, RunSpec(hosts=["node1", "node3", "node4"]))))
    later = {"node2": make_facts("node2", driver="580.1.1"), "node1": make_facts("node1", driver="580.1.1")}
    history.record(judged(make_run(results, 4, RunSpec(hosts=HOSTS, facts=later))))
    changed = {"node2": make_facts("node2", driver="575.51.03")}
    report = history.record(judged(make_run(results, 3, RunSpec(hosts=HOSTS, facts=changed))))
    first = next(run.name for run in results.iterdir() if run.is_dir() and run.name.endswith("01"))
    drift = history_checks(report, "node2")["history/facts"]
    assert "driver_version: 570.86.15 -> 575.51.03" in drift.evidence
    assert f"since run {first}" in drift.reason
    assert "history/facts" not in history_checks(report, "node1")  # as on night 2; night 4 is later


def test_facts_drift_passes_over_a_run_where_the_host_has_no_facts(tmp_path: Path) -> None:
    """A host measured on a night whose facts.json is missing: its baseline is the run before, the
    last one that holds its facts, not the night it took part in without them."""
    results = tmp_path / "results"
    history.record(judged(make_run(results, 1, RunSpec(hosts=HOSTS))))  # driver 570.86.15
    second = make_run(results, 2, RunSpec(hosts=HOSTS))
    [missing] = [path for path in second.glob("hosts/*/facts.json") if path.parent.name.startswith("node2")]
    missing.unlink()
    history.record(judged(second))
    changed = {"node2": make_facts("node2", driver="575.51.03")}
    report = history.record(judged(make_run(results, 3, RunSpec(hosts=HOSTS, facts=changed))))
    drift = history_checks(report, "node2")["history/facts"]
    assert "driver_version: 570.86.15 -> 575.51.03" in drift.evidence


# ---- the newest runs pooled a run at a time where they hold the same series --------------------------

MIB = 1024**2


@pytest.mark.parametrize("stored", ["rows", "columns", "some_columns", "broken_columns"])
@pytest.mark.parametrize(
    "odd",
    ["none", "host_missing", "unhealthy", "not_above_zero", "size_missing", "own_sizes", "host_swapped"],
)
def test_runs_of_the_same_series_pooled_a_run_at_a_time_give_the_row_by_row_baseline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, odd: str, stored: str
) -> None:
    """A nightly fleet's newest runs hold the same series in the same order, and are counted and
    pooled column against column; one run that differs (a host missing, a sample unhealthy, a busbw
    of 0 or none, a size missing, a host in the place of another that is not measured now, as many
    rows) is taken row by row, and a subject judged at sizes of its own is filtered first. Every
    judged size of every subject gets the statistics the full read gives, and a subject that lacks a
    judged size in one run is the only one read again. The same whether the newest runs are read
    from their rows, from their busbw columns (history/columns.py), some from each, or from columns
    two of which do not decode (a truncated array, a layout that names too few subjects): those
    two are read from their rows."""
    rng = random.Random(odd)
    db = tmp_path / "history.sqlite"
    with open_store(db, create=True):
        pass
    sizes = [128 * MIB, 256 * MIB, 512 * MIB, GIB, 2 * GIB, 4 * GIB]
    collectives = ["all_gather", "all_reduce"]
    subjects = [f"node{i}" for i in range(6)]
    for day in range(1, 8):
        rows = []
        for subject in [*subjects, "node6"]:
            if odd in ("host_missing", "host_swapped") and (day, subject) == (5, "node2"):
                continue
            if subject == "node6" and (odd, day) != ("host_swapped", 5):
                continue  # node6 took part on one night before this one, and is not measured now
            for collective in collectives:
                for size in sizes:
                    if odd == "size_missing" and (day, subject, collective, size) == (
                        6,
                        "node1",
                        "all_gather",
                        2 * GIB,
                    ):
                        continue
                    healthy = not (odd == "unhealthy" and (day, subject, size) == (4, "node3", GIB))
                    busbw: float | None = 100.0 * (1 + 0.02 * rng.gauss(0, 1))
                    if odd == "not_above_zero" and collective == "all_reduce":
                        busbw = {(3, "node4", 2 * GIB): 0.0, (6, "node1", GIB): None}.get(
                            (day, subject, size), busbw
                        )
                    rows.append((subject, collective, size, busbw, int(healthy)))
        with sqlite3.connect(db) as connection:
            connection.execute(
                "INSERT INTO runs (run_id, started_at, status, parameters, content_hash, ingested_at, "
                "revision) VALUES (?, ?, 'ok', '{}', 'x', 'x', 1)",
                (f"r{day}", f"2026-11-0{day}T01:00:00Z"),
            )
            connection.executemany(
                "INSERT INTO measurements (run_id, kind, subject, collective, size, busbw, healthy) "
                "VALUES (?, 'intra', ?, ?, ?, ?, ?)",
                [(f"r{day}", *row) for row in rows],
            )
            if stored == "columns" or (stored == "some_columns" and day % 2) or stored == "broken_columns":
                # What the writer stores; a sample that may not feed a baseline given as none.
                measured = [
                    ("intra", s, c, z, b if ok else None, None, None, None) for s, c, z, b, ok in rows
                ]
                write_columns(connection.cursor(), f"r{day}", columns_of(measured, set()))
    if stored == "broken_columns":
        with sqlite3.connect(db) as connection:
            connection.execute("UPDATE busbw_columns SET busbw = substr(busbw, 9) WHERE run_id = 'r6'")
            layout = connection.execute("SELECT layout FROM busbw_columns WHERE run_id = 'r5'").fetchone()[0]
            connection.execute("UPDATE busbw_columns SET layout = 'other' WHERE run_id = 'r5'")
            names = connection.execute(
                "SELECT names FROM busbw_layouts WHERE layout = ?", (layout,)
            ).fetchone()[0]
            short = json.dumps({**json.loads(names), "subjects": ["node0"]})
            connection.execute(
                "INSERT INTO busbw_layouts SELECT 'other', ?, positions FROM busbw_layouts WHERE layout = ?",
                (short, layout),
            )
    with open_store(db) as store:
        from_columns = set(read_columns(store, "intra", [f"r{day}" for day in range(1, 8)]))
    assert (
        from_columns
        == {
            "rows": set(),
            "columns": {f"r{day}" for day in range(1, 8)},
            "some_columns": {"r1", "r3", "r5", "r7"},
            "broken_columns": {"r1", "r2", "r3", "r4", "r7"},
        }[stored]
    )
    options = HistoryOptions(runs=5)
    groups = {("intra", collective) for collective in collectives}
    judged = {
        group: {
            s: (256 * MIB, 512 * MIB, GIB) if odd == "own_sizes" and s == "node5" else (GIB, 2 * GIB, 4 * GIB)
            for s in subjects
        }
        for group in groups
    }
    assert judged_sizes(dict.fromkeys(sizes, 1.0), options) == (GIB, 2 * GIB, 4 * GIB)
    completes: list[set] = []
    alike_runs: list[int] = []
    read = regressions._read_judged_sizes
    extend_alike = _Pool.extend_alike

    def spied_read(*args):  # type: ignore[no-untyped-def]
        completes.append(read(*args))
        return completes[-1]

    def spied_alike(self, keys, runs):  # type: ignore[no-untyped-def]
        alike_runs.append(len(runs))
        return extend_alike(self, keys, runs)

    monkeypatch.setattr(regressions, "_read_judged_sizes", spied_read)
    monkeypatch.setattr(_Pool, "extend_alike", spied_alike)
    args = (groups, ("2026-11-09T00:00:00Z", "z"), options.runs, {g: set(subjects) for g in groups})
    min_size = dict.fromkeys(groups, 256 * MIB)
    with open_store(db) as store:
        fast = rolling_baseline(store, *args, min_size=min_size, judged=judged)
        full = rolling_baseline(store, *args, min_size=min_size)
    for (kind, collective), names in judged.items():
        for subject, at in names.items():
            key = (kind, subject, collective)
            assert {size: fast[key][size] for size in at} == {size: full[key][size] for size in at}, key
    left_out = {
        "host_missing": {(c, "node2") for c in collectives},
        "host_swapped": {(c, "node2") for c in collectives},
        "unhealthy": {(c, "node3") for c in collectives},
        "not_above_zero": {("all_reduce", "node4"), ("all_reduce", "node1")},
        "size_missing": {("all_gather", "node1")},
    }.get(odd, set())
    assert completes == [{(c, s) for c in collectives for s in subjects} - left_out]
    # Read from columns or rows, a run's series come in the same order here (rows inserted in key order).
    assert alike_runs == [{"none": 5, "own_sizes": 5, "not_above_zero": 3}.get(odd, 4)]
    assert ("intra", "node6", "all_reduce") not in fast


def test_each_host_s_facts_are_flattened_once_per_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The facts drift and the facts rows both need every host's facts flattened (4,000 hosts: 0.5 s
    each time): made once per run."""
    results = tmp_path / "results"
    history.record(judged(make_run(results, 1, RunSpec(hosts=HOSTS))))
    flattened: list[str] = []
    flatten = records_module.flatten_facts

    def counted(facts: dict, prefix: str = "") -> dict:
        if not prefix:
            flattened.append(facts.get("hostname", "?"))
        return flatten(facts, prefix)

    monkeypatch.setattr(records_module, "flatten_facts", counted)
    changed = {"node2": make_facts("node2", ib_rate=200)}
    report = history.record(judged(make_run(results, 2, RunSpec(hosts=HOSTS, facts=changed))))
    assert history_checks(report, "node2")["history/facts"].status == "warn"  # the drift was read
    assert sorted(flattened) == sorted(HOSTS)
