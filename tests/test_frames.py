"""The DataFrame face (collbench_py.frames) on runs built from real corpus logs: each frame holds
what the report read and wrote (results.json read back with json, the history database)."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

import collbench_py as cb
from collbench_py import history
from collbench_py.history import HistoryError
from collbench_py.report.make import make_report
from collbench_py.rundir.load import RunDirError, load_run_dir
from collbench_py.verdicts import judge
from tests.rundir_factory import H100_LOG, RUN_ID, RunSpec, build_run_dir

REPO = Path(__file__).resolve().parent.parent
HOSTS = ["node1", "node2", "node3", "node4"]
EXPECTED = REPO / "tests" / "data" / "expected" / "nccl-tests" / f"{H100_LOG.stem}.json"


@pytest.fixture(autouse=True)
def _no_database_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLLBENCH_DB", raising=False)


def night(results: Path, number: int, spec: RunSpec, run_id: str | None = None) -> Path:
    """A run directory under results/ started on 2026-11-<number>, with its own run id."""
    made = build_run_dir(results.parent / f"build-{number}", spec)
    run_id = run_id or f"202611{number:02d}T215100Z-{number:06x}"
    manifest = json.loads((made / "manifest.json").read_text())
    manifest.update(run_id=run_id, started_at=f"2026-11-{number:02d}T21:51:00Z")
    (made / "manifest.json").write_text(json.dumps(manifest))
    results.mkdir(parents=True, exist_ok=True)
    shutil.move(made, results / run_id)
    shutil.rmtree(results.parent / f"build-{number}")
    return results / run_id


def cells(frame: pd.DataFrame, *columns: str) -> list[tuple]:
    """The frame's rows as tuples, a missing value (NaN in a text column) as None, as json has it."""
    return [
        tuple(None if pd.isna(v) else v for v in row) for row in frame[list(columns)].itertuples(index=False)
    ]


def results_json(run_dir: Path) -> dict:
    made = make_report(run_dir)
    return json.loads((made.out_dir / "results.json").read_text())


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four hosts, every pair, a pair measured again in a second round, node3 slower, all hosts."""
    rounds = [[("node1", "node2"), ("node3", "node4")], [("node1", "node3"), ("node2", "node4")]]
    rounds.append([("node1", "node2")])  # measured again: its own log under round3/
    spec = RunSpec(
        hosts=HOSTS, pair_rounds=rounds, host_scale={"node3": 0.8}, all_logs={"all_reduce": H100_LOG}
    )
    return build_run_dir(tmp_path_factory.mktemp("fleet"), spec)


def test_read_run_holds_every_measurement_results_json_lists(fleet_run: Path) -> None:
    frame = cb.read_run(fleet_run)
    listed = results_json(fleet_run)["results"]
    halves = [(r, ip, r[half]) for r in listed for ip, half in ((False, "oop"), (True, "ip")) if r[half]]
    assert len(frame) == len(halves) > 0
    mine = Counter(
        zip(
            frame["log"],
            frame["size"],
            frame["in_place"],
            frame["busbw"].round(6),
            frame["wrong"],
            strict=True,
        )
    )
    theirs = Counter((r["log"], r["size"], ip, h["busbw"], h["wrong"]) for r, ip, h in halves)
    assert mine == theirs
    # Every launch of the manifest that measured something is there, with its kind and hosts.
    launches = {(log.launch.log, log.launch.kind) for log in load_run_dir(fleet_run).logs if log.run}
    assert set(zip(frame["log"], frame["kind"], strict=True)) == launches


def test_read_run_names_hosts_links_and_rounds(fleet_run: Path) -> None:
    frame = cb.read_run(fleet_run)
    intra = frame[frame.kind == "intra"]
    assert (intra["hosts"] == intra["host_a"]).all() and intra["host_b"].isna().all()
    assert set(intra["hosts"]) == set(HOSTS)
    pairs = frame[frame.kind == "pair"]
    assert set(pairs["hosts"]) == {"node1--node2", "node3--node4", "node1--node3", "node2--node4"}
    assert (pairs["hosts"] == pairs["host_a"] + "--" + pairs["host_b"]).all()
    again = pairs[pairs["hosts"] == "node1--node2"].groupby("round")["log"].unique()
    assert {r: list(logs) for r, logs in again.items()} == {
        1: ["inter/pairs/node1--node2/all_reduce.log"],
        3: ["inter/pairs/node1--node2/round3/all_reduce.log"],
    }
    everyone = frame[frame.kind == "all"]
    assert set(everyone["hosts"]) == {"all"} and everyone["host_a"].isna().all()
    assert frame["round"].dtype == "Int64" and intra["round"].isna().all()
    assert frame["size"].dtype == "int64" and frame["in_place"].dtype == bool


def test_read_run_busbw_equals_the_corpus_expectations(fleet_run: Path) -> None:
    """node1's intra log is the H100 corpus log unchanged: its frame rows hold the values the
    hand-written expectations give, both halves, with dtype and redop."""
    expected = json.loads(EXPECTED.read_text())["runs"][0]
    frame = cb.read_run(fleet_run)
    node1 = frame[(frame.kind == "intra") & (frame.hosts == "node1")]
    assert len(node1) == 2 * expected["len:rows"]
    for size, want in expected["rows_by_size"].items():
        at = node1[node1["size"] == int(size)].set_index("in_place")
        for in_place, half in ((False, "oop"), (True, "ip")):
            for column in ("busbw", "algbw", "time_us", "wrong"):
                assert at.loc[in_place, column] == pytest.approx(want[half][column]), (size, half, column)
        if "dtype" in want:
            assert set(at["dtype"]) == {want["dtype"]} and set(at["redop"]) == {want["redop"]}
    # node3 printed 80 % of it: the frame shows the scaled numbers, not node1's.
    node3 = frame[(frame.kind == "intra") & (frame.hosts == "node3") & (frame["size"] == 17179869184)]
    assert node3["busbw"].tolist() == pytest.approx([469.21 * 0.8, 469.1 * 0.8], abs=0.01)


def test_read_verdicts_statuses_equal_results_json(fleet_run: Path) -> None:
    frame = cb.read_verdicts(fleet_run)
    doc = results_json(fleet_run)
    expected = Counter(
        [("host", h["host"], c["name"], c["status"], c["log"]) for h in doc["hosts"] for c in h["checks"]]
        + [
            ("pair", "--".join(p["hosts"]), f"pairs/{p['collective']}", p["status"], p["log"])
            for p in doc["pairs"]
        ]
        + [("fleet", "fleet", c["name"], c["status"], c["log"]) for c in doc["fleet"]["checks"]]
    )
    got = Counter(cells(frame, "scope", "subject", "check", "status", "log"))
    assert got == expected
    verdicts = frame[frame.scope == "host"].groupby("subject")["verdict"].first().to_dict()
    assert verdicts == {h["host"]: h["verdict"] for h in doc["hosts"]}
    assert verdicts["node3"] == "failed"  # a rule the frame must carry: node3 is 20 % slow
    pairs = frame[frame.scope == "pair"].set_index("subject")["busbw"]
    assert pairs.to_dict() == pytest.approx({"--".join(p["hosts"]): p["busbw"] for p in doc["pairs"]})


def test_read_history_returns_both_reported_runs(tmp_path: Path) -> None:
    results = tmp_path / "results"
    runs = [
        night(results, 20, RunSpec(hosts=HOSTS, pairs="all")),
        night(results, 21, RunSpec(hosts=HOSTS, pairs="all", host_scale={"node3": 0.85})),
    ]
    for run_dir in runs:
        history.record(judge(load_run_dir(run_dir)))
    db = results / "history.sqlite"
    frame = cb.read_history(db)
    with sqlite3.connect(db) as connection:
        stored = connection.execute("SELECT run_id, kind, subject, collective, size, busbw FROM measurements")
        stored = Counter(stored.fetchall())
    assert (
        Counter(
            frame[["run_id", "kind", "subject", "collective", "size", "busbw"]].itertuples(
                index=False, name=None
            )
        )
        == stored
    )
    assert list(frame["run_id"].unique()) == [r.name for r in runs]  # oldest first
    assert str(frame["started_at"].dtype) == "datetime64[ns, UTC]" or "UTC" in str(frame["started_at"].dtype)

    node3 = cb.read_history(db, host="node3", collective="all_reduce")
    largest = node3[node3["size"] == node3["size"].max()].set_index("run_id")
    assert list(largest["verdict"]) == ["passed", "failed"]
    assert list(largest["healthy"]) == [True, False]
    assert largest["busbw"].iloc[1] / largest["busbw"].iloc[0] == pytest.approx(0.85, abs=0.01)
    assert set(node3["subject"]) == {"node3"} and set(node3["kind"]) == {"intra"}
    assert set(node3["host_a"]) == {"node3"} and node3["host_b"].isna().all()

    link = cb.read_history(db, host="node4--node2")
    assert set(link["subject"]) == {"node2--node4"}
    assert set(link["host_a"]) == {"node2"} and set(link["host_b"]) == {"node4"}
    assert set(link["verdict"]) <= {"pass", "warn", "fail", "skip"} and link["verdict"].notna().all()

    since = cb.read_history(db, since="2026-11-21")
    assert set(since["run_id"]) == {runs[1].name}
    assert set(cb.read_history(db, since=pd.Timestamp("2026-11-21T21:51:00Z"))["run_id"]) == {runs[1].name}
    assert cb.read_history(db, collective="all_gather").empty

    with pytest.raises(HistoryError, match="did you mean node3"):
        cb.read_history(db, host="node33")
    with pytest.raises(HistoryError, match="no history database"):
        cb.read_history(tmp_path / "missing.sqlite")


def test_bad_input_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RunDirError):
        cb.read_run(tmp_path)
    with pytest.raises(RunDirError):
        cb.read_verdicts(tmp_path / "nothing")


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", markdown, flags=re.MULTILINE | re.DOTALL)


def test_the_worked_analysis_in_the_docs_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every python block of docs/python-api.md, in order, in a directory laid out as the docs
    say (results/<run>/ and results/history.sqlite), so the docs cannot rot."""
    results = tmp_path / "results"
    first = night(results, 20, RunSpec(hosts=HOSTS, pairs="all"))
    slow = RunSpec(hosts=HOSTS, pairs="all", host_scale={"node3": 0.85}, pair_scale={("node2", "node4"): 0.6})
    second = night(results, 21, slow, RUN_ID)
    for run_dir in (first, second):
        history.record(judge(load_run_dir(run_dir)))
    blocks = python_blocks((REPO / "docs" / "python-api.md").read_text())
    assert len(blocks) >= 4
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    for block in blocks:
        exec(compile(block, "docs/python-api.md", "exec"), scope)
    assert sorted(scope["by_size"].columns) == HOSTS
    assert scope["by_size"].index.max() == 17179869184
    assert list(scope["trend"]["verdict"]) == ["passed", "failed"]
    assert scope["trend"]["change"].iloc[-1] == pytest.approx(-0.15, abs=0.01)
    assert scope["links"]["busbw"].is_monotonic_increasing and len(scope["links"]) == 6
    assert scope["links"].iloc[0][["subject", "status"]].tolist() == ["node2--node4", "slow"]
    assert {"node3", "node2--node4"} <= set(scope["problems"]["subject"])


def test_the_command_line_never_imports_pandas() -> None:
    code = (
        "import sys, runpy; sys.argv = ['collbench', '--version']\n"
        "try:\n    runpy.run_module('collbench_py', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "import collbench_py.node.launch_wrapper, collbench_py.cli\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas'))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
    assert "read_run" in dir(cb)
