"""The history store and regressions, on run directories built from real logs.

Three nightly runs of one fleet (healthy, healthy, one node slower) must flag that node against
its own history; the store must survive re-ingests, concurrent writers and crashes.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from fractions import Fraction
from pathlib import Path

import pytest

import collbench_py.history.records as records_module
from collbench_py import history
from collbench_py.cli.common import add_history_arguments, history_options
from collbench_py.history import HistoryOptions, writer
from collbench_py.history.records import (
    _DIGEST_CHUNK,
    DIGEST_FORM,
    MeasurementRows,
    flatten_facts,
    records_of,
)
from collbench_py.profiles import ProfileError, load_profile
from collbench_py.rundir.load import load_run_dir
from collbench_py.verdicts import Options, Report, judge
from tests.collbench_cli import collbench
from tests.rundir_factory import RunSpec, build_run_dir, make_facts, set_logged_nccl

REPO = Path(__file__).resolve().parents[2]
HOSTS = ["node1", "node2", "node3", "node4"]
TABLES = ("runs", "hosts", "measurements", "verdicts", "facts")


@pytest.fixture(autouse=True)
def _no_database_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLLBENCH_DB", raising=False)


def make_run(results: Path, night: int, spec: RunSpec) -> Path:
    """A run directory under results/, started on night `night` (1-based) with its own run id."""
    build = results.parent / f"build-{night}"
    made = build_run_dir(build, spec)
    run_id = f"202611{night:02d}T215100Z-{night:06x}"
    manifest = json.loads((made / "manifest.json").read_text())
    manifest.update(run_id=run_id, started_at=f"2026-11-{night:02d}T21:51:00Z")
    (made / "manifest.json").write_text(json.dumps(manifest))
    results.mkdir(parents=True, exist_ok=True)
    target = results / run_id
    shutil.move(made, target)
    shutil.rmtree(build)
    return target


def judged(run_dir: Path, **kwargs) -> Report:
    return judge(load_run_dir(run_dir), **kwargs)


def counts(db: Path) -> dict[str, int]:
    with sqlite3.connect(db) as connection:
        return {t: connection.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in TABLES}


def history_checks(report: Report, host: str) -> dict[str, object]:
    return {c.name: c for c in report.hosts[host].checks if c.name.startswith("history/")}


def three_nights(results: Path, third: RunSpec | None = None, hosts: list[str] = HOSTS) -> list[Report]:
    """Two healthy nights, then `third` (default: node3 at 85 %), each reported with history."""
    specs = [
        RunSpec(hosts=hosts, pairs="all"),
        RunSpec(hosts=hosts, pairs="all"),
        third or RunSpec(hosts=hosts, pairs="all", host_scale={"node3": 0.85}),
    ]
    return [history.record(judged(make_run(results, i, spec))) for i, spec in enumerate(specs, start=1)]


def test_third_night_flags_the_slower_node_against_its_own_history(tmp_path: Path) -> None:
    results = tmp_path / "results"
    first, _, third = three_nights(results)
    assert not any(history_checks(first, h) for h in HOSTS)  # nothing to compare with yet
    node3 = history_checks(third, "node3")["history/intra/all_reduce"]
    assert node3.status == "fail"
    assert "node3 all_reduce busbw at 4 GiB, 8 GiB, 16 GiB is 15% below its baseline median (2 runs)" in (
        node3.reason
    )
    assert third.hosts["node3"].verdict == "failed"
    for host in ("node1", "node2", "node4"):
        assert history_checks(third, host)["history/intra/all_reduce"].status == "pass"
    db = results / "history.sqlite"
    assert counts(db)["runs"] == 3
    with sqlite3.connect(db) as connection:
        healthy = connection.execute(
            "SELECT DISTINCT healthy FROM measurements WHERE run_id = ? AND subject = 'node3'",
            (third.run.run_id,),
        ).fetchall()
    assert healthy == [(0,)]  # the slow night never becomes node3's own baseline


def test_regression_is_found_while_the_node_stays_inside_the_fleet_band(tmp_path: Path) -> None:
    # node1 used to be the fastest of a fleet with spread; at 85 % it sits in the middle of it.
    hosts = [*HOSTS, "node5"]
    spread = {"node2": 0.85, "node3": 0.86, "node4": 0.87, "node5": 0.85}
    normal = RunSpec(hosts=hosts, host_scale=spread)
    results = tmp_path / "results"
    for night in (1, 2):
        history.record(judged(make_run(results, night, normal)))
    third = history.record(
        judged(make_run(results, 3, RunSpec(hosts=hosts, host_scale={**spread, "node1": 0.85})))
    )
    fleet = next(c for c in third.hosts["node1"].checks if c.name == "intra/all_reduce/fleet")
    assert fleet.status == "pass", fleet.reason
    own = history_checks(third, "node1")["history/intra/all_reduce"]
    assert own.status == "fail"
    assert "15% below its baseline median" in own.reason


def test_run_to_run_jitter_fires_nothing(tmp_path: Path) -> None:
    results = tmp_path / "results"
    for night, scale in enumerate((1.0, 0.99, 1.01, 0.98), start=1):
        report = history.record(
            judged(make_run(results, night, RunSpec(hosts=HOSTS, host_scale={"node2": scale})))
        )
    node2 = history_checks(report, "node2")["history/intra/all_reduce"]
    assert node2.status == "pass", node2.reason
    assert "(3 runs)" in node2.reason


def test_ingesting_the_same_run_again_changes_nothing(tmp_path: Path) -> None:
    results = tmp_path / "results"
    three_nights(results)
    db = results / "history.sqlite"
    before = counts(db)
    with sqlite3.connect(db) as connection:
        stamps = connection.execute(
            "SELECT run_id, ingested_at, revision FROM runs ORDER BY run_id"
        ).fetchall()
    for run_dir in sorted(p for p in results.iterdir() if p.is_dir()):
        history.record(judged(run_dir))
    with history.open_store(db) as store:
        outcome = history.ingest(store, judged(results / stamps[0][0]))
    assert outcome.outcome == "unchanged"
    assert counts(db) == before
    with sqlite3.connect(db) as connection:
        assert (
            connection.execute("SELECT run_id, ingested_at, revision FROM runs ORDER BY run_id").fetchall()
            == stamps
        )


def test_a_run_judged_differently_replaces_what_was_stored(tmp_path: Path) -> None:
    results = tmp_path / "results"
    run_dir = make_run(results, 1, RunSpec(hosts=HOSTS, host_scale={"node2": 0.9}))
    db = results / "history.sqlite"
    history.record(judged(run_dir), db=str(db))
    before = counts(db)
    # The same run, reported again with a looser threshold: node2's verdict changes.
    loose = history.record(judged(run_dir, options=Options(min_drop=0.2)), db=str(db))
    assert loose.hosts["node2"].verdict == "passed"
    with sqlite3.connect(db) as connection:
        verdict, revision = connection.execute(
            "SELECT h.verdict, r.revision FROM hosts h JOIN runs r ON r.run_id = h.run_id "
            "WHERE h.host = 'node2'"
        ).fetchone()
    assert (verdict, revision) == ("passed", 2)
    assert counts(db) == before


def test_facts_drift_between_runs_is_a_finding(tmp_path: Path) -> None:
    results = tmp_path / "results"
    first = make_run(results, 1, RunSpec(hosts=HOSTS))
    set_logged_nccl(first, "2.26.2")  # the NCCL the logs say they loaded is the host's
    history.record(judged(first))
    changed = {"node2": make_facts("node2", driver="575.51.03", nccl="2.27.3", gpus=7)}
    second = make_run(results, 2, RunSpec(hosts=HOSTS, facts=changed))
    set_logged_nccl(second, "2.26.2")
    set_logged_nccl(second, "2.27.3", host="node2")
    report = history.record(judged(second))
    drift = history_checks(report, "node2")["history/facts"]
    assert drift.status == "warn"  # a GPU went missing: hardware, not a software update
    assert "driver_version: 570.86.15 -> 575.51.03" in drift.evidence
    assert "nccl_version: 2.26.2 -> 2.27.3" in drift.evidence
    assert "gpus.count: 8 -> 7" in drift.evidence
    assert "history/facts" not in history_checks(report, "node1")


def test_software_only_drift_is_a_note() -> None:
    old = flatten_facts(make_facts("n", driver="570.86.15"))
    new = flatten_facts(make_facts("n", driver="575.51.03"))
    assert {k for k in old if old[k] != new[k]} == {"driver_version", "gpus.driver_version"}
    assert "gpus.uuid" not in old and "collected_at" not in old  # identities and stamps are no drift
    mixed = make_facts("n")
    mixed["ib"][3]["state"] = "Down"
    assert flatten_facts(mixed)["ib.state"] == "7x Active, 1x Down"


def test_a_frozen_baseline_is_used_instead_of_the_rolling_one(tmp_path: Path) -> None:
    results = tmp_path / "results"
    db = results / "history.sqlite"
    first, second, _ = three_nights(results, third=RunSpec(hosts=HOSTS, pairs="all"))
    with history.open_store(db) as store:
        info = history.freeze(store, "acceptance", [first.run.run_id, second.run.run_id])
    assert info.runs == (first.run.run_id, second.run.run_id)
    slow = RunSpec(hosts=HOSTS, pairs="all", host_scale={"node3": 0.85})
    fourth = history.record(judged(make_run(results, 4, slow)))
    node3 = history_checks(fourth, "node3")["history/intra/all_reduce"]
    assert "below baseline 'acceptance' median (2 runs)" in node3.reason
    again = history.record(judged(results / fourth.run.run_id), options=HistoryOptions(baseline="rolling"))
    assert (
        "below its baseline median (3 runs)"
        in history_checks(again, "node3")["history/intra/all_reduce"].reason
    )


def test_a_slower_link_is_told_against_its_own_history(tmp_path: Path) -> None:
    results = tmp_path / "results"
    third = RunSpec(hosts=HOSTS, pairs="all", pair_scale={("node2", "node4"): 0.88})
    *_, report = three_nights(results, third=third)
    for host in ("node2", "node4"):
        link = history_checks(report, host)["history/pair/all_reduce/node2--node4"]
        assert link.status == "fail"
        assert link.reason.startswith("link node2--node4 all_reduce busbw at")
        assert "12% below its baseline median (2 runs)" in link.reason
    assert history_checks(report, "node1")["history/pair/all_reduce"].status == "pass"


def test_a_collapse_fails_even_against_a_baseline_too_spread_for_any_z_score(tmp_path: Path) -> None:
    # Two healthy nights far apart (a noisy fleet): the MAD is as wide as a third of the median,
    # so a link that all but stopped never reaches z -5; it is still under half its lowest night.
    results = tmp_path / "results"
    slow_night = dict.fromkeys(itertools.combinations(HOSTS, 2), 0.45)  # the whole fleet alike
    nights = [slow_night, {}, {("node1", "node3"): 0.02}]
    for night, scale in enumerate(nights, start=1):
        report = history.record(
            judged(make_run(results, night, RunSpec(hosts=HOSTS, pairs="all", pair_scale=scale)))
        )
    link = history_checks(report, "node3")["history/pair/all_reduce/node1--node3"]
    assert link.status == "fail", link.reason
    assert "under half of its lowest healthy run" in link.reason
    z = float(re.search(r"robust z ([-+]\d+\.\d)", link.reason)[1])
    assert z > -5  # the z-score alone would have passed it
    # The same spread with a drop that stays above half of the lowest night is left to the z-score.
    nights[2] = {("node1", "node3"): 0.3}
    results = tmp_path / "second"
    for night, scale in enumerate(nights, start=1):
        report = history.record(
            judged(make_run(results, night, RunSpec(hosts=HOSTS, pairs="all", pair_scale=scale)))
        )
    assert "history/pair/all_reduce/node1--node3" not in history_checks(report, "node3")


def test_a_node_whose_every_link_dropped_takes_the_blame_alone(tmp_path: Path) -> None:
    # One bad NIC drops node3's link to every other host; its partners did nothing wrong.
    slow = {("node1", "node3"): 0.8, ("node2", "node3"): 0.8, ("node3", "node4"): 0.8}
    *_, report = three_nights(tmp_path / "results", third=RunSpec(hosts=HOSTS, pairs="all", pair_scale=slow))
    for pair in ("node1--node3", "node2--node3", "node3--node4"):
        own = history_checks(report, "node3")[f"history/pair/all_reduce/{pair}"]
        assert own.status == "fail", own.reason
        assert own.reason.endswith("every judged link of node3 dropped: the node, not this link")
        partner = next(h for h in pair.split("--") if h != "node3")
        told = history_checks(report, partner)[f"history/pair/all_reduce/{pair}"]
        assert told.status == "note", told.reason
        assert "20% below its baseline median (2 runs)" in told.reason
        assert told.reason.endswith("blamed on node3, every judged link of which dropped")
    assert report.hosts["node3"].verdict == "failed"
    assert {report.hosts[h].verdict for h in ("node1", "node2", "node4")} == {"passed"}


def test_when_every_link_of_three_hosts_dropped_the_worst_node_is_blamed(tmp_path: Path) -> None:
    # Every host has two bad links; node3's dropped by half, the link between the others by 15 %.
    hosts = HOSTS[:3]
    slow = {("node1", "node3"): 0.5, ("node2", "node3"): 0.5, ("node1", "node2"): 0.85}
    *_, report = three_nights(tmp_path / "results", RunSpec(hosts=hosts, pairs="all", pair_scale=slow), hosts)
    for pair in ("node1--node3", "node2--node3"):
        assert history_checks(report, "node3")[f"history/pair/all_reduce/{pair}"].status == "fail"
        partner = next(h for h in pair.split("--") if h != "node3")
        assert history_checks(report, partner)[f"history/pair/all_reduce/{pair}"].status == "note"
    for host in ("node1", "node2"):  # what is left is the link's own
        link = history_checks(report, host)["history/pair/all_reduce/node1--node2"]
        assert link.status == "fail", link.reason
        assert "blamed" not in link.reason and "the node" not in link.reason


def test_a_broken_database_does_not_lose_the_report(tmp_path: Path) -> None:
    not_a_db = tmp_path / "history.sqlite"
    not_a_db.write_text("nightly notes, not a database\n" * 100)
    report = judged(make_run(tmp_path / "results", 1, RunSpec(hosts=HOSTS)))
    recorded = history.record(report, db=str(not_a_db))
    warning = [c for c in recorded.fleet_checks if c.name == "history"]
    assert warning and warning[0].status == "warn"
    assert "is not a usable history database" in warning[0].reason
    assert recorded.hosts == report.hosts
    assert not_a_db.read_text().startswith("nightly notes")


# A child process that records one run; INSERT_HOOK runs inside the write transaction,
# after every row is inserted and before the commit.
CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from collbench_py import history
    from collbench_py.history import writer
    from collbench_py.rundir.load import load_run_dir
    from collbench_py.verdicts import judge

    run_dir, db, go, mode = sys.argv[1:5]
    original = writer._insert_rows

    def hooked(cursor, records):
        original(cursor, records)
        print("inserted", flush=True)
        time.sleep(60 if mode == "hang" else 0.5)

    writer._insert_rows = hooked
    report = judge(load_run_dir(run_dir))
    while not Path(go).exists():
        time.sleep(0.01)
    recorded = history.record(report, db=db)
    assert not [c for c in recorded.fleet_checks if c.name == "history"], recorded.fleet_checks
    print("done", flush=True)
    """
)


def child(run_dir: Path, db: Path, go: Path, mode: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(run_dir), str(db), str(go), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_two_writers_at_the_same_time_both_land(tmp_path: Path) -> None:
    results = tmp_path / "results"
    runs = [make_run(results, night, RunSpec(hosts=HOSTS, pairs="all")) for night in (1, 2)]
    db, go = results / "history.sqlite", tmp_path / "go"  # neither writer finds a database
    writers = [child(run, db, go, "slow") for run in runs]
    time.sleep(0.5)
    started = time.monotonic()
    go.touch()
    outputs = [w.communicate(timeout=120) for w in writers]
    for proc, (out, err) in zip(writers, outputs, strict=True):
        assert proc.returncode == 0, err
        assert out.split() == ["inserted", "done"]
    # Each writer holds the lock for 0.5 s inside its transaction: the second waited for the first.
    assert time.monotonic() - started >= 1.0
    assert counts(db)["runs"] == 2
    with sqlite3.connect(db) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert connection.execute("SELECT COUNT(DISTINCT run_id) FROM measurements").fetchone() == (2,)


def test_a_writer_killed_mid_ingest_leaves_the_previous_state(tmp_path: Path) -> None:
    results = tmp_path / "results"
    for night in (1, 2):
        history.record(judged(make_run(results, night, RunSpec(hosts=HOSTS, pairs="all"))))
    third = make_run(results, 3, RunSpec(hosts=HOSTS, pairs="all", host_scale={"node3": 0.85}))
    db = results / "history.sqlite"
    before = counts(db)
    go = tmp_path / "go"
    go.touch()
    proc = child(third, db, go, "hang")
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "inserted"  # every row written, nothing committed
    proc.kill()
    proc.communicate(timeout=30)
    assert counts(db) == before
    with sqlite3.connect(db) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    # The lock died with the writer: the next report records the run, and still finds node3 slower.
    report = history.record(judged(third))
    assert counts(db)["runs"] == 3
    assert history_checks(report, "node3")["history/intra/all_reduce"].status == "fail"


def test_an_error_mid_transaction_rolls_everything_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = tmp_path / "results"
    run_dir = make_run(results, 1, RunSpec(hosts=HOSTS, host_scale={"node2": 0.9}))
    db = results / "history.sqlite"
    history.record(judged(run_dir))
    before = counts(db)
    original = writer._insert_rows

    def failing(cursor, records):
        original(cursor, records)
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(writer, "_insert_rows", failing)
    # A second run, and a changed version of the first (a replacement deletes before it inserts).
    second = judged(make_run(results, 2, RunSpec(hosts=HOSTS)))
    changed = judged(run_dir, options=Options(min_drop=0.3))
    with history.open_store(db) as store:
        for report in (second, changed):
            with pytest.raises(history.HistoryError, match="disk I/O error"):
                history.ingest(store, report)
    assert changed.hosts["node2"].verdict != judged(run_dir).hosts["node2"].verdict
    assert counts(db) == before
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT revision FROM runs").fetchall() == [(1,)]


def test_database_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert history.db_path(f"sqlite:///{tmp_path}/h.sqlite") == tmp_path / "h.sqlite"  # 4 slashes: absolute
    assert history.db_path("sqlite:///results/h.sqlite") == Path("results/h.sqlite")
    assert history.db_path("relative/h.sqlite") == Path("relative/h.sqlite")
    assert history.db_path(None) == Path("results/history.sqlite")
    monkeypatch.setenv("COLLBENCH_DB", str(tmp_path / "env.sqlite"))
    assert history.db_path(None) == tmp_path / "env.sqlite"
    with pytest.raises(history.HistoryError, match="only sqlite"):
        history.db_path("postgresql://db.example/collbench")
    with pytest.raises(history.HistoryError, match="only sqlite"):
        history.db_path("sqlite://host/h.sqlite")


def test_a_foreign_sqlite_database_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE notes (text TEXT)")
    with (
        pytest.raises(history.HistoryError, match="not a collbench history"),
        history.open_store(other, create=True),
    ):
        pass


def test_report_options_for_history(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference-min-bytes", type=int, default=256 * 1024**2)
    add_history_arguments(parser)
    report = judged(make_run(tmp_path / "results", 1, RunSpec(hosts=HOSTS)))
    off = parser.parse_args(["--no-history"])
    assert history_options(off) is None
    assert not (tmp_path / "results" / "history.sqlite").exists()
    db = tmp_path / "elsewhere.sqlite"
    args = parser.parse_args(["--db", str(db), "--history-runs", "3", "--baseline", "rolling"])
    assert history_options(args) == HistoryOptions(runs=3, baseline="rolling")
    history.record(report, args.db, history_options(args))
    assert counts(db)["runs"] == 1
    with pytest.raises(SystemExit):
        parser.parse_args(["--history-runs", "0"])


# ---- rules of the history, each held by one test ------------------------------------------------------


# The fleet check is given a 20 % minimum drop so that a host a few percent slow passes it: what is
# judged below is its history alone.
LENIENT_FLEET = Options(min_drop=0.2)


def nights(results: Path, scales: list[float], host: str = "node3") -> list[Report]:
    """One run per night, `host` at each scale (the others at 1.0), each recorded with history."""
    return [
        history.record(
            judged(make_run(results, i, RunSpec(hosts=HOSTS, host_scale={host: s})), options=LENIENT_FLEET)
        )
        for i, s in enumerate(scales, start=1)
    ]


def test_a_drop_between_the_lines_is_a_warning(tmp_path: Path) -> None:
    """7 % below a tight baseline: over min_drop (5 %), under fail_drop (10 %): warn, not pass, not fail."""
    *_, third = nights(tmp_path / "results", [1.0, 1.0, 0.93])
    node3 = history_checks(third, "node3")["history/intra/all_reduce"]
    assert node3.status == "warn", node3.reason
    assert "7% below its baseline median (2 runs)" in node3.reason
    assert third.hosts["node3"].verdict == "warned"  # the fleet check passed it


def cpu_nights(results: Path, scales: list[float]) -> list[Report]:
    """`nights` on hosts without GPUs, judged under the shipped cpu-gloo profile."""
    cpu = {"hosts": HOSTS, "facts": {h: make_facts(h, gpus=0) for h in HOSTS}, "topo": None}
    return [
        history.record(
            judged(
                make_run(results, i, RunSpec(**cpu, host_scale={"node3": s})),
                profile_arg="cpu-gloo",
                options=LENIENT_FLEET,
            )
        )
        for i, s in enumerate(scales, start=1)
    ]


def test_the_cpu_gloo_profile_widens_the_history_lines_to_its_jitter(tmp_path: Path) -> None:
    """gloo on shared CPU cores moves +-30 % run to run (cpu-gloo's `history` section): 27 % below a
    tight baseline passes there, 35 % warns, 55 % fails; under the default lines 27 % fails."""
    for scale, status in ((0.73, "pass"), (0.65, "warn"), (0.45, "fail")):
        *_, last = cpu_nights(tmp_path / f"cpu-{scale}", [1.0, 1.0, scale])
        node3 = history_checks(last, "node3")["history/intra/all_reduce"]
        assert node3.status == status, (scale, node3.reason)
    *_, last = nights(tmp_path / "gpu", [1.0, 1.0, 0.73])
    assert last.profile is None or last.profile.history_fail_drop is None
    node3 = history_checks(last, "node3")["history/intra/all_reduce"]
    assert node3.status == "fail", node3.reason


def test_a_profile_s_history_lines_are_checked(tmp_path: Path) -> None:
    base = "name: p\nintra: {}\n"
    for history_section, said in (
        ("history: {fail_drop: 1.5}\n", "must be in (0, 1)"),
        ("history: {warn_drop: 0.6, fail_drop: 0.5}\n", "must not be above"),
    ):
        path = tmp_path / "p.yml"
        path.write_text(base + history_section)
        with pytest.raises(ProfileError, match=re.escape(said)):
            load_profile(str(path))


def test_a_warned_night_never_feeds_the_baseline(tmp_path: Path) -> None:
    """Three nights at 93 % after two at 100 %: had the warned nights joined the baseline, its median
    would sink to 96.5 % and the fifth night pass."""
    results = tmp_path / "results"
    reports = nights(results, [1.0, 1.0, 0.93, 0.93, 0.93])
    node3 = history_checks(reports[-1], "node3")["history/intra/all_reduce"]
    assert node3.status == "warn", node3.reason
    assert "(2 runs)" in node3.reason
    with sqlite3.connect(results / "history.sqlite") as connection:
        healthy = connection.execute(
            "SELECT DISTINCT healthy FROM measurements WHERE run_id = ? AND subject = 'node3'",
            (reports[2].run.run_id,),
        ).fetchall()
    assert healthy == [(0,)]


def test_history_runs_bounds_the_rolling_window(tmp_path: Path) -> None:
    """Two nights at 100 %, two at 104 % (faster, healthy), then 97.5 %. With `--history-runs 2` the
    baseline is the two 104 % nights: 6 % below, a warning. Over all four it would be 102 %: 4 %, a pass."""
    results = tmp_path / "results"
    nights(results, [1.0, 1.0, 1.04, 1.04])
    last = make_run(results, 5, RunSpec(hosts=HOSTS, host_scale={"node3": 0.975}))
    database = results / "history.sqlite"
    bounded = collbench(
        "report", str(last), "--db", str(database), "--history-runs", "2", "--min-drop", "0.2"
    )
    assert bounded.returncode == 0, bounded.stderr
    hosts = json.loads((last / "report" / "results.json").read_text())["hosts"]
    checks = next(h["checks"] for h in hosts if h["host"] == "node3")
    node3 = next(c for c in checks if c["name"] == "history/intra/all_reduce")
    assert node3["status"] == "warn", node3["reason"]
    assert "(2 runs)" in node3["reason"]
    wide = history.record(judged(last, options=LENIENT_FLEET), options=HistoryOptions(runs=10))
    assert history_checks(wide, "node3")["history/intra/all_reduce"].status == "pass"


def test_too_few_past_runs_judge_nothing(tmp_path: Path) -> None:
    """One healthy night is not a baseline (min_runs 2): a halved node3 the night after gets no history
    finding, only the fleet's verdict."""
    _, second = nights(tmp_path / "results", [1.0, 0.5])
    assert "history/intra/all_reduce" not in history_checks(second, "node3")
    # The same night against one past run, when one is allowed to be enough: the halving is found.
    alone = history.record(judged(second.run.path, options=LENIENT_FLEET), options=HistoryOptions(min_runs=1))
    assert history_checks(alone, "node3")["history/intra/all_reduce"].status == "fail"


def test_an_infiniband_change_is_hardware_drift(tmp_path: Path) -> None:
    """Only the InfiniBand rate changed: a warning (a degraded link), not a software note."""
    results = tmp_path / "results"
    history.record(judged(make_run(results, 1, RunSpec(hosts=HOSTS))))
    slower = {"node2": make_facts("node2", ib_rate=200)}
    report = history.record(judged(make_run(results, 2, RunSpec(hosts=HOSTS, facts=slower))))
    drift = history_checks(report, "node2")["history/facts"]
    assert drift.status == "warn", drift.reason
    assert [e.split(":")[0] for e in drift.evidence] == ["ib.rate_gbps"]


def test_the_earlier_run_digest_is_sha256_of_the_rows_json(tmp_path: Path) -> None:
    """The digest databases written before DIGEST_FORM hold is computed a chunk of measurements at a
    time: it must be the hash of the whole rows' JSON, as those databases hold it."""
    report = judged(build_run_dir(tmp_path, RunSpec(hosts=[f"node{i}" for i in range(12)])))
    records = records_of(report)
    assert len(records.measurements) > 2 * _DIGEST_CHUNK // 100  # several chunks at a chunk of 100
    whole = [records.run[:10], records.hosts, list(records.measurements), records.verdicts, records.facts]
    expected = hashlib.sha256(json.dumps(whole, default=str).encode()).hexdigest()
    assert records.earlier_digest is not None
    assert records.earlier_digest() == expected
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(records_module, "_DIGEST_CHUNK", 100)
        assert records_of(report).earlier_digest() == expected  # type: ignore[misc]
    assert records.digest.startswith(DIGEST_FORM) and records.digest != expected
    assert list(records.measurements[:3]) == list(records.measurements)[:3]


def test_the_digest_follows_the_rows_and_not_how_python_holds_them() -> None:
    """Equal rows give one digest whether their texts are one object or copies (marshal's version 2
    writes no back references; a later version would make the same run "replaced" on a second
    report); any other value, or another health, gives another."""
    body, hosts, verdicts, facts = ("r1",) * 10, (("r1", "node1"),), (), ()
    subject = "".join(["node", "1"])
    measured = [("intra", subject, "all_reduce", size, 100.0 + size, 50.0, 9.5, 0) for size in (1, 2)]
    copies = [("intra", "".join(["node", "1"]), *row[2:]) for row in measured]

    def digest(rows: list[tuple], unhealthy: set) -> str:
        return records_module._digest(body, hosts, MeasurementRows("r1", rows, unhealthy), verdicts, facts)

    assert digest(measured, set()) == digest(copies, set())
    assert measured[0][1] is measured[1][1] and copies[0][1] is not copies[1][1]
    slower = [measured[0], (*measured[1][:4], 101.5, *measured[1][5:])]
    assert len({digest(measured, set()), digest(slower, set()), digest(measured, {"node1"})}) == 3


def test_rows_marshal_cannot_write_are_hashed_as_their_json() -> None:
    """A value that is not one marshal writes (a Fraction, a numpy number) falls back to the earlier JSON
    digest instead of failing the ingest."""
    body, hosts = ("r1",) * 10, (("r1", "node1"),)
    odd = MeasurementRows("r1", [("intra", "node1", "all_reduce", 1, Fraction(1, 3), 50.0, 9.5, 0)], set())
    digest = records_module._digest(body, hosts, odd, (), ())
    assert not digest.startswith(DIGEST_FORM)
    assert digest == records_module._json_digest(body, hosts, odd, (), ())


def test_a_run_stored_with_the_earlier_digest_is_unchanged_when_reported_again(tmp_path: Path) -> None:
    """A database written before DIGEST_FORM holds the JSON digest: the same run reported again
    changes nothing (not its stamps, not its digest), and a run judged differently replaces it."""
    results = tmp_path / "results"
    run_dir = make_run(results, 1, RunSpec(hosts=HOSTS, host_scale={"node2": 0.9}))
    report = judged(run_dir)
    db = results / "history.sqlite"
    history.record(report, str(db))
    earlier = records_of(report).earlier_digest()  # type: ignore[misc]
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE runs SET content_hash = ?", (earlier,))
        stamps = connection.execute("SELECT content_hash, ingested_at, revision FROM runs").fetchall()
    with history.open_store(db) as store:
        assert history.ingest(store, report).outcome == "unchanged"
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT content_hash, ingested_at, revision FROM runs").fetchall() == stamps
    loose = judged(run_dir, options=Options(min_drop=0.2))  # node2 passes
    with history.open_store(db) as store:
        replaced = history.ingest(store, loose)
    assert (replaced.outcome, replaced.revision) == ("replaced", 2)
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT content_hash FROM runs").fetchone()[0].startswith(DIGEST_FORM)
