"""End to end: three nightly runs of `bench.yml` on a real 3-host SSH test cluster, one history database.

Runs 1 and 2 are healthy; before run 3 one node's link is shaped to 100mbit. Run 3's report must
flag that node against its own history (the two runs before) and against the fleet, `collbench
compare` must show the drop, the database must hold the three runs, and reporting run 3 again must
add nothing. Pairs phase only, one collective, two sizes: the history judges pairs and intra-node
launches alike, and pairs are what a shaped link slows down.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from collbench_py.history.store import SCHEMA
from tests.cluster.test_bench_e2e import GROUP_VARS, TEST_PROFILE, PlaybookRun, bench
from tests.cluster.vcluster import Cluster
from tests.collbench_cli import collbench

SLOW_HOST = "node3"
MiB = 1024 * 1024
# Bandwidth, not latency, dominates from 4 MiB up: the sizes the fleet and the history score.
REPORT_ARGS = ["--reference-min-bytes", "4M"]
AGAIN = ("--skip-tags", "provision,topology")
TABLES = [re.search(r"CREATE TABLE IF NOT EXISTS (\w+)", sql)[1] for sql in SCHEMA if "CREATE TABLE" in sql]


@dataclass(frozen=True)
class History:
    cluster: Cluster
    db: Path
    report_args: list[str]
    runs: tuple[PlaybookRun, PlaybookRun, PlaybookRun]


@pytest.fixture(scope="module")
def history(cluster_factory, tmp_path_factory: pytest.TempPathFactory) -> Iterator[History]:
    cluster = cluster_factory(nodes=3, name=f"hi{os.getpid() % 10**7}")
    scratch = tmp_path_factory.mktemp("history-e2e")
    profile = scratch / "test-cluster-cpu.yml"
    profile.write_text(TEST_PROFILE)
    db = scratch / "nightly.sqlite"  # not next to the run directories: --db is what is tested
    report_args = ["--profile", str(profile), *REPORT_ARGS, "--db", str(db)]
    group_vars = {
        **GROUP_VARS,
        "collbench_phases": ["pairs"],
        "collbench_collectives": ["all_reduce"],
        "collbench_min_bytes": 4 * MiB,
        "collbench_max_bytes": 8 * MiB,
        "collbench_iters": 2,
        # Provisioning is tested in test_bench_e2e.py; three nightly runs of it would cost minutes.
        "collbench_provision": False,
        # The node checks' history has tests of its own; here their builds and phase cost ~45 s a night.
        "collbench_node_checks": False,
        "collbench_results_dir": str(scratch / "results"),
        "collbench_workdir": str(scratch / "work"),
        "collbench_report_args": report_args,
    }
    (cluster.inventory_path.parent / "group_vars").mkdir(exist_ok=True)
    (cluster.inventory_path.parent / "group_vars" / "all.yml").write_text(yaml.safe_dump(group_vars))
    control = scratch / "cp"
    control.mkdir()
    # The first night starts the named database on purpose (a name that does not exist is refused).
    first = bench(cluster, control, "-e", json.dumps({"collbench_report_args": [*report_args, "--new-db"]}))
    # The first night made the work directory and read the topology; the next nights on the same
    # nodes skip those plays (nothing of them is what the history judges).
    second = bench(cluster, control, *AGAIN)
    cluster.shape(SLOW_HOST, "100mbit")
    try:
        third = bench(cluster, control, *AGAIN)
    finally:
        cluster.unshape(SLOW_HOST)
    yield History(cluster, db, report_args, (first, second, third))


def table_rows(db: Path) -> dict[str, list[tuple]]:
    """Every row of every table, sorted: equal before and after means nothing was added or changed."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
        return {table: sorted(connection.execute(f"SELECT * FROM {table}").fetchall()) for table in TABLES}


def slow_pairs(cluster: Cluster) -> list[str]:
    return [f"{h}--{SLOW_HOST}" for h in cluster.hosts if h != SLOW_HOST]


def test_healthy_runs_pass_and_the_shaped_run_fails(history: History) -> None:
    first, second, third = history.runs
    for run in (first, second):
        assert run.rc == 0, run.output[-5000:]
        assert run.run_dir is not None
    assert third.rc == 2, third.output[-5000:]
    assert len({run.run_dir for run in history.runs}) == 3


def test_the_third_report_flags_the_node_against_its_own_history(history: History) -> None:
    third = history.runs[2].run_dir
    report = json.loads((third / "report" / "results.json").read_text())
    hosts = {h["host"]: h for h in report["hosts"]}
    checks = {c["name"]: c for c in hosts[SLOW_HOST]["checks"]}
    for pair in slow_pairs(history.cluster):
        check = checks[f"history/pair/all_reduce/{pair}"]
        assert check["status"] in ("fail", "warn"), check
        # Against the link's own past: the two healthy runs before this one.
        assert f"link {pair} all_reduce busbw" in check["reason"], check
        assert "below its baseline median (2 runs)" in check["reason"], check
        # Its partner's link dropped too, but every link of node3 did: node3 alone is blamed.
        partner = next(h for h in pair.split("--") if h != SLOW_HOST)
        told = {c["name"]: c for c in hosts[partner]["checks"]}[f"history/pair/all_reduce/{pair}"]
        assert told["status"] == "note", told
        assert f"blamed on {SLOW_HOST}" in told["reason"], told
    # Against the fleet: both of node3's pairs slow, blamed on the node itself.
    assert hosts[SLOW_HOST]["verdict"] == "failed"
    pairs = {"--".join(p["hosts"]): p for p in report["pairs"] if p["collective"] == "all_reduce"}
    for pair in slow_pairs(history.cluster):
        assert (pairs[pair]["status"], pairs[pair]["cause"]) == ("slow", f"node {SLOW_HOST}"), pairs[pair]
    assert pairs["node1--node2"]["status"] == "ok", pairs["node1--node2"]

    # junit.xml, as CI reads it: node3's history testcases fail or warn, naming its own history.
    said = []
    for case in ET.parse(third / "report" / "junit.xml").getroot().iter("testcase"):
        if case.get("classname") == SLOW_HOST and case.get("name", "").startswith("history/pair/"):
            said += [f.get("message", "") + (f.text or "") for f in case.iter("failure")]
            said += [out.text or "" for out in case.iter("system-out")]
    text = "\n".join(said)
    assert all(pair in text for pair in slow_pairs(history.cluster)), text
    assert "its baseline median (2 runs)" in text, text

    # The healthy runs had no history to flag: run 2 had one run before it, fewer than two.
    second = json.loads((history.runs[1].run_dir / "report" / "results.json").read_text())
    flagged = [
        c
        for h in second["hosts"]
        for c in h["checks"]
        if c["name"].startswith("history/") and c["status"] != "pass"
    ]
    assert flagged == [], flagged


def test_compare_shows_the_drop_of_the_node(history: History) -> None:
    run2, run3 = (run.run_dir.name for run in history.runs[1:])
    # gloo over a veth on a shared machine moves a link up to 2x from run to run (0.26 -> 0.59 GB/s
    # seen); the shaped link loses more than 95 %.
    result = collbench("compare", run2, run3, "--db", str(history.db), "--min-drop", "0.8", *REPORT_ARGS)
    assert result.returncode == 1, result.stdout + result.stderr  # something got worse
    worse = [line for line in result.stdout.splitlines() if line.startswith("WORSE")]
    for pair in slow_pairs(history.cluster):
        (line,) = [line for line in worse if f" {pair} " in line]
        drop = float(re.search(r"([-+]\d+\.\d)%", line)[1])
        assert drop <= -50, line  # 100mbit against gloo over a veth: far more than half lost
    assert not any(" node1--node2 " in line for line in worse), result.stdout


def test_the_database_holds_three_runs_and_a_second_ingest_adds_nothing(history: History) -> None:
    before = table_rows(history.db)
    assert sorted(row[0] for row in before["runs"]) == sorted(run.run_dir.name for run in history.runs)
    third = history.runs[2].run_dir
    again = collbench("report", str(third), *history.report_args, "--out", str(third.parent / "again"))
    assert again.returncode == 1, again.stdout + again.stderr  # the same verdict: node3 failed
    assert SLOW_HOST in again.stdout
    after = table_rows(history.db)
    assert {t: len(rows) for t, rows in after.items()} == {t: len(rows) for t, rows in before.items()}
    assert after == before  # not even ingested_at or the revision moved
