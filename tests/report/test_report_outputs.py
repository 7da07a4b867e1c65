"""`collbench report` end to end on a built run directory; every output read by a real consumer."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from collbench_py.cli import main
from collbench_py.report.render import _href
from tests.rundir_factory import GH200_WRONG, H100_TOPO_12NICS, RunSpec, build_run_dir

HOSTS = [f"node{i}" for i in range(1, 7)]
HOSTILE_REASON = 'ssh: connect to host node6: <img src=x onerror="alert(1)"> | `rm` **x**'


@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    """A fleet with a slow node, a bad node on the pairs, corrupted data, a topology deviation
    and an unreachable host."""
    root = tmp_path_factory.mktemp("outputs")
    slow_pairs = {tuple(sorted(("node4", h))): 0.25 for h in HOSTS[:5] if h != "node4"}
    spec = RunSpec(
        hosts=HOSTS,
        host_scale={"node3": 0.5},
        intra_override={"node2": {"all_reduce": GH200_WRONG}},
        topo_override={"node5": H100_TOPO_12NICS},
        pairs="all",
        pair_scale=slow_pairs,
        all_logs={"all_reduce": GH200_WRONG},
        unreachable={"node6": HOSTILE_REASON},
    )
    run = build_run_dir(root, spec)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["report", str(run)])
    return run, code, out.getvalue()


def test_exit_code_and_stdout_single_out_the_bad_hosts(reported: tuple[Path, int, str]) -> None:
    _, code, stdout = reported
    assert code == 1
    lines = stdout.splitlines()
    assert "3 failed, 1 unreachable, 1 warned, 1 passed of 6 hosts" in lines[0]
    table = [line for line in lines if line.startswith("node")]
    verdicts = {line.split()[0]: line.split()[1] for line in table}
    assert verdicts == {
        "node2": "FAILED",
        "node3": "FAILED",
        "node4": "FAILED",
        "node6": "UNREACHABLE",
        "node5": "warned",
        "node1": "passed",
    }
    assert [line.split()[1] for line in table][:3] == ["FAILED"] * 3  # bad hosts first
    node4 = next(line for line in table if line.startswith("node4"))
    assert "bad node" in node4 and "node1--node4" in node4


def test_junit_has_one_testcase_per_host_and_check(reported: tuple[Path, int, str]) -> None:
    run, _, _ = reported
    results = json.loads((run / "report" / "results.json").read_text())
    root = ET.parse(run / "report" / "junit.xml").getroot()
    suite = root.find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    expected = sum(len(h["checks"]) for h in results["hosts"]) + len(results["fleet"]["checks"])
    assert len(cases) == expected == int(suite.get("tests", "0"))
    failures = [c for c in cases if c.find("failure") is not None]
    assert len(failures) == int(suite.get("failures", "0")) > 0
    failed = {(c.get("classname"), c.get("name")) for c in failures}
    assert ("node3", "intra/all_reduce/fleet") in failed
    assert ("node2", "intra/all_reduce/data") in failed
    assert ("node4", "pairs/all_reduce") in failed
    assert ("node6", "reachable") in failed
    assert ("fleet", "all/all_reduce/data") in failed
    assert not any(c.get("classname") == "node1" for c in failures)
    data = next(
        c for c in failures if c.get("name") == "intra/all_reduce/data" and c.get("classname") == "node2"
    )
    assert "Out of bounds values : 4 FAILED" in (data.find("failure").text or "")


def test_metrics_parse_with_prometheus_client(reported: tuple[Path, int, str]) -> None:
    run, _, _ = reported
    families = {
        f.name: f for f in text_string_to_metric_families((run / "report" / "metrics.prom").read_text())
    }
    busbw = {
        (s.labels["host"], s.labels["collective"]): s.value
        for s in families["collbench_busbw_gbytes_per_second"].samples
    }
    assert busbw[("node3", "all_reduce")] == pytest.approx(busbw[("node1", "all_reduce")] / 2, rel=0.02)
    assert {s.labels["size_bytes"] for s in families["collbench_busbw_gbytes_per_second"].samples} == {
        "17179869184"
    }
    verdicts = {
        s.labels["host"]: (s.labels["verdict"], s.value) for s in families["collbench_host_verdict"].samples
    }
    assert verdicts["node3"] == ("failed", 2) and verdicts["node1"] == ("passed", 0)
    assert verdicts["node6"] == ("unreachable", 3)
    stamp = families["collbench_run_timestamp_seconds"].samples[0]
    assert stamp.value == datetime(2026, 11, 21, 21, 51, tzinfo=UTC).timestamp()
    pairs = families["collbench_pair_busbw_gbytes_per_second"].samples
    assert len(pairs) == 10


def test_results_json_follows_the_documented_schema(reported: tuple[Path, int, str]) -> None:
    run, _, _ = reported
    doc = json.loads((run / "report" / "results.json").read_text())
    assert doc["schema"] == 1
    assert set(doc) == {
        "schema",
        "generator",
        "generated_at",
        "run",
        "profile",
        "profile_reason",
        "criteria",
        "summary",
        "plan",
        "links",
        "rails",
        "tickets",
        "fleet",
        "hosts",
        "pairs",
        "node_checks",
        "results",
    }
    assert doc["node_checks"] == {"hosts": {}, "measurements": [], "findings": []}  # no node phase ran
    assert doc["summary"] == {
        "hosts": 6,
        "passed": 1,
        "warned": 1,
        "failed": 3,
        "unreachable": 1,
        "links_failed": 0,
        "unresolved": 0,
        "fleet_status": "fail",
        "exit_code": 1,
    }
    assert doc["profile"]["name"] == "h100-sxm"
    assert doc["criteria"]["reference_min_bytes"] == 256 * 1024**2
    for host in doc["hosts"]:
        assert set(host) == {
            "host",
            "inventory_hostname",
            "verdict",
            "reasons",
            "busbw",
            "z",
            "facts",
            "checks",
        }
        assert host["verdict"] in ("passed", "warned", "failed", "unreachable")
        for check in host["checks"]:
            assert set(check) == {"name", "status", "reason", "evidence", "log"}
            assert check["status"] in ("pass", "warn", "fail", "skip", "note")
    for pair in doc["pairs"]:
        assert set(pair) == {"hosts", "collective", "busbw", "status", "z", "cause", "log"}
    # Every parsed row: 5 intra logs (32 rows, one of 25), 10 pairs of 32 and the all-hosts log of 25.
    rows = doc["results"]
    assert len(rows) == 4 * 32 + 25 + 10 * 32 + 25
    assert {r["launch"] for r in rows} == {"intra", "pair", "all"}
    first = rows[0]
    assert set(first) == {
        "log",
        "launch",
        "hosts",
        "host",
        "collective",
        "run",
        "nranks",
        "size",
        "count",
        "dtype",
        "redop",
        "root",
        "oop",
        "ip",
    }
    assert set(first["oop"]) == {"time_us", "algbw", "busbw", "wrong"}
    wrong = [r for r in rows if r["host"] == "node2" and r["oop"]["wrong"]]
    assert [(r["size"], r["oop"]["wrong"], r["ip"]["wrong"]) for r in wrong] == [(1048576, 96, 32)]


def test_hosts_csv_reads_back(reported: tuple[Path, int, str]) -> None:
    run, _, _ = reported
    with (run / "report" / "hosts.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["host"] for r in rows][:3] == ["node3", "node4", "node2"] or {r["host"] for r in rows[:3]} == {
        "node2",
        "node3",
        "node4",
    }
    by_host = {r["host"]: r for r in rows}
    assert by_host["node3"]["verdict"] == "failed"
    assert float(by_host["node3"]["busbw_all_reduce"]) < float(by_host["node1"]["busbw_all_reduce"]) * 0.6
    assert float(by_host["node3"]["z_all_reduce"]) < -5
    assert by_host["node6"]["verdict"] == "unreachable"
    assert "bad node" in by_host["node4"]["reasons"]


def test_untrusted_text_is_escaped(reported: tuple[Path, int, str]) -> None:
    run, _, _ = reported
    html = (run / "report" / "index.html").read_text()
    assert "<img src=x" not in html
    assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in html
    markdown = (run / "report" / "report.md").read_text()
    assert not re.search(r"(?<!\\)<img", markdown) and r"\<img src=x" in markdown
    assert r"\| \`rm\` \*\*x\*\*" in markdown


def test_markdown_names_the_bad_hosts_first(reported: tuple[Path, int, str]) -> None:
    run, _, _ = reported
    markdown = (run / "report" / "report.md").read_text()
    attention = markdown.split("## Needs attention", 1)[1].split("##", 1)[0]
    assert "**node3** (failed)" in attention and "**node4** (failed)" in attention
    assert "**node1**" not in attention
    assert "| node3 | FAILED |" in markdown


def test_out_dir_strict_and_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = build_run_dir(tmp_path, RunSpec(hosts=HOSTS[:4], topo_override={"node4": H100_TOPO_12NICS}))
    out = tmp_path / "elsewhere"
    assert main(["report", str(run), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["index.html", "report.md", "hosts.csv", "results.json", "junit.xml", "metrics.prom", "tickets.md"]
    )
    html = (out / "index.html").read_text()
    assert f'href="../{run.name}/hosts/node4/intra/all_reduce.log"' in html  # raw logs, relative to --out
    assert main(["report", str(run), "--out", str(out), "--strict"]) == 3
    capsys.readouterr()
    assert main(["report", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such directory" in err
    assert main(["report", str(run), "--profile", "h999"]) == 2
    assert "no profile named 'h999'" in capsys.readouterr().err
    assert main(["report", str(run), "--min-drop", "2"]) == 2


@pytest.mark.parametrize("out_dir", ["/r/run/report", "/r/run", "/elsewhere/out", "rel/out", "."])
@pytest.mark.parametrize("run_dir", ["/r/run", "run", "."])
def test_a_log_s_link_is_its_path_relative_to_the_page(out_dir: str, run_dir: str) -> None:
    """The links are worked out from the run directory's path once, not per log: the same paths
    os.path.relpath gives each log, odd ones included."""
    odd = ("./pairs/a--b.log", "a/../b.log", "../out.log", "/abs.log", "x//y")
    for rel in ("hosts/n1/intra/all_reduce.log", *odd):
        expected = Path(os.path.relpath(Path(run_dir) / rel, out_dir)).as_posix()
        assert _href(Path(out_dir), Path(run_dir), rel) == expected, rel
    assert _href(Path(out_dir), Path(run_dir), None) is None
