"""Nodes Slurm listed as unusable (manifest `slurm.unusable`) in the report: not measured, with Slurm's
reason, in every output; neither passed nor failed; the exit code unchanged (a warning under --strict
only for nodes the user named)."""

from __future__ import annotations

import contextlib
import io
import json
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from collbench_py.cli import main
from collbench_py.rundir.load import load_run_dir
from tests.rundir_factory import RunSpec, build_run_dir

HOSTS = ["node1", "node2", "node3"]
# The reasons of tests/data/slurm/sinfo-gpu.txt (a real capture): one holds sinfo's field separator.
UNUSABLE = [
    {"host": "node4", "state": "down", "reason": "bad-gpu | GPU 3 fell off the bus (Xid 79)"},
    {"host": "node6", "state": "drained", "reason": "maintenance"},
    {"host": "node7", "state": "down*", "reason": "Not responding"},
]


def with_slurm(run: Path, slurm: Any) -> Path:
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["slurm"] = slurm
    (run / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return run


def report(run: Path, *extra: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["report", str(run), *extra])
    return code, out.getvalue()


@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    run = build_run_dir(tmp_path_factory.mktemp("slurm"), RunSpec(hosts=HOSTS))
    with_slurm(run, {"job_id": "4242", "partition": "gpu", "unusable": UNUSABLE})
    code, stdout = report(run)
    return run, code, stdout


def test_console_lists_each_node_with_slurms_reason(reported: tuple[Path, int, str]) -> None:
    _, code, stdout = reported
    assert code == 0
    lines = stdout.splitlines()
    assert "0 failed, 0 unreachable, 0 warned, 3 passed of 3 hosts" in lines[0]
    listed = [line for line in lines if line.startswith("not measured")]
    assert listed == [
        "not measured  node4 (down): bad-gpu | GPU 3 fell off the bus (Xid 79)",
        "not measured  node6 (drained): maintenance",
        "not measured  node7 (down*): Not responding",
    ]
    # Not in the verdict table: neither passed nor failed.
    assert not any(line.split()[0] in ("node4", "node6", "node7") for line in lines if line.strip())


def test_results_json_keeps_them_out_of_the_hosts(reported: tuple[Path, int, str]) -> None:
    run, _, _ = reported
    results = json.loads((run / "report" / "results.json").read_text())
    assert [h["host"] for h in results["hosts"]] == HOSTS
    assert results["summary"]["not_measured"] == 3
    assert results["summary"]["hosts"] == 3 and results["summary"]["passed"] == 3
    assert [(n["host"], n["state"], n["reason"]) for n in results["not_measured"]] == [
        (u["host"], u["state"], u["reason"]) for u in UNUSABLE
    ]
    check = next(c for c in results["fleet"]["checks"] if c["name"] == "slurm/not-measured")
    assert check["status"] == "note" and "bad-gpu" in check["reason"]


def test_junit_has_a_skipped_testcase_per_node(reported: tuple[Path, int, str]) -> None:
    run, _, _ = reported
    suite = ET.parse(run / "report" / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    cases = {c.get("classname"): c for c in suite.findall("testcase") if c.get("name") == "not-measured"}
    assert sorted(cases) == ["node4", "node6", "node7"]
    skipped = cases["node6"].find("skipped")
    assert skipped is not None and skipped.get("message") == "not measured: node6 (drained): maintenance"
    assert all(c.find("failure") is None for c in cases.values())
    assert int(suite.get("skipped", "0")) >= 3 and suite.get("failures") == "0"
    assert int(suite.get("tests", "0")) == len(suite.findall("testcase"))


def test_metrics_say_not_measured_and_give_no_verdict(reported: tuple[Path, int, str]) -> None:
    run, _, _ = reported
    families = {
        f.name: f for f in text_string_to_metric_families((run / "report" / "metrics.prom").read_text())
    }
    samples = families["collbench_host_not_measured"].samples
    assert {(s.labels["host"], s.labels["state"], s.labels["reason"], s.value) for s in samples} == {
        (u["host"], u["state"], u["reason"], 1.0) for u in UNUSABLE
    }
    verdict_hosts = {s.labels["host"] for s in families["collbench_host_verdict"].samples}
    assert verdict_hosts == set(HOSTS)


class _Rows(HTMLParser):
    """The rows of one table of index.html, as lists of cell texts."""

    def __init__(self, table_id: str) -> None:
        super().__init__()
        self.table_id, self.inside, self.rows, self.cell = table_id, False, [], None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table" and ("id", self.table_id) in attrs:
            self.inside = True
        elif self.inside and tag == "tr":
            self.rows.append([])
        elif self.inside and tag == "td":
            self.cell = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.inside = False
        elif tag == "td" and self.cell is not None:
            self.rows[-1].append(self.cell.strip())
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cell += data


def test_html_and_markdown_list_them(reported: tuple[Path, int, str]) -> None:
    run, _, _ = reported
    parser = _Rows("not-measured")
    parser.feed((run / "report" / "index.html").read_text())
    assert [r for r in parser.rows if r] == [[u["host"], u["state"], u["reason"]] for u in UNUSABLE]
    hosts = _Rows("hosts")
    hosts.feed((run / "report" / "index.html").read_text())
    assert {r[0] for r in hosts.rows if r} == set(HOSTS)
    markdown = (run / "report" / "report.md").read_text()
    assert "| node4 | down | bad-gpu \\| GPU 3 fell off the bus (Xid 79) |" in markdown


def test_exit_code_is_the_same_without_them_even_strict(tmp_path: Path) -> None:
    spec = RunSpec(hosts=HOSTS, host_scale={"node3": 0.5})  # node3 fails: exit 1 either way
    plain = build_run_dir(tmp_path / "plain", spec)
    slurm = with_slurm(build_run_dir(tmp_path / "slurm", spec), {"unusable": UNUSABLE})
    assert report(plain)[0] == report(slurm)[0] == 1
    healthy = with_slurm(build_run_dir(tmp_path / "healthy", RunSpec(hosts=HOSTS)), {"unusable": UNUSABLE})
    assert report(healthy, "--strict")[0] == 0


def test_a_named_node_that_is_unusable_is_a_warning(tmp_path: Path) -> None:
    named = [dict(UNUSABLE[1], named=True)]
    run = with_slurm(build_run_dir(tmp_path, RunSpec(hosts=HOSTS)), {"unusable": named})
    code, stdout = report(run)
    assert code == 0
    assert "fleet warn: 1 node(s) not measured" in stdout and "named in the node list" in stdout
    assert report(run, "--strict")[0] == 3


def test_a_host_that_was_measured_is_not_listed(tmp_path: Path) -> None:
    run = with_slurm(
        build_run_dir(tmp_path, RunSpec(hosts=HOSTS)),
        {"unusable": [{"host": "node2", "state": "draining", "reason": "busbw low, recheck"}, UNUSABLE[0]]},
    )
    assert [n.host for n in load_run_dir(run).not_measured] == ["node4"]


def test_no_reason_says_the_state(tmp_path: Path) -> None:
    run = with_slurm(
        build_run_dir(tmp_path, RunSpec(hosts=HOSTS)), {"unusable": [{"host": "node9", "state": "fail"}]}
    )
    assert [n.reason for n in load_run_dir(run).not_measured] == ["Slurm state fail"]


@pytest.mark.parametrize(
    "slurm",
    [["node4"], {"unusable": "node4"}, {"unusable": [7, {"host": 3}, {"host": "node4", "reason": ["x"]}]}],
)
def test_malformed_slurm_values_are_named_not_fatal(tmp_path: Path, slurm: Any) -> None:
    run = with_slurm(build_run_dir(tmp_path, RunSpec(hosts=HOSTS)), slurm)
    loaded = load_run_dir(run)
    assert any("manifest values of the wrong type ignored: " in n and "slurm" in n for n in loaded.notes)
    assert report(run)[0] == 0


def test_a_run_without_slurm_says_nothing_of_it(tmp_path: Path) -> None:
    run = build_run_dir(tmp_path, RunSpec(hosts=HOSTS))
    code, stdout = report(run)
    results = json.loads((run / "report" / "results.json").read_text())
    assert code == 0 and "not measured" not in stdout
    assert "not_measured" not in results and "not_measured" not in results["summary"]
    assert "collbench_host_not_measured{" not in (run / "report" / "metrics.prom").read_text()


def test_a_hostile_reason_is_escaped_everywhere_and_a_secret_redacted(tmp_path: Path) -> None:
    """Slurm's reason is an admin's free text: quotes, a newline, markup and a secret reach no output raw."""
    reason = 'GPU "3" <script>alert(1)</script>\nAPI_TOKEN=hunter2'
    run = with_slurm(
        build_run_dir(tmp_path, RunSpec(hosts=HOSTS)),
        {"unusable": [{"host": "node4", "state": "drained", "reason": reason}]},
    )
    assert report(run)[0] == 0
    out = run / "report"
    every = "".join(
        (out / name).read_text() for name in ("index.html", "report.md", "metrics.prom", "junit.xml")
    )
    assert "hunter2" not in every + (out / "results.json").read_text()
    assert "<script>" not in (out / "index.html").read_text()
    (sample,) = next(
        f
        for f in text_string_to_metric_families((out / "metrics.prom").read_text())
        if f.name == "collbench_host_not_measured"
    ).samples
    assert sample.labels["reason"].startswith('GPU "3" <script>alert(1)</script>\nAPI_TOKEN=')
    suite = ET.parse(out / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    (case,) = (c for c in suite.findall("testcase") if c.get("name") == "not-measured")
    assert (
        case.find("skipped").get("message", "").startswith('not measured: node4 (drained): GPU "3" <script>')
    )
