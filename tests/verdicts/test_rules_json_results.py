"""The report reads the nccl-tests `-J` file beside a log; the text log stays the fallback and the evidence.

Run directories are built from a real corpus log (tests/rundir_factory.py); each host's JSON is what
nccl-tests writes for the same run (tests/parsers/test_parse_nccl_json.py's writer). Where the JSON
and the log disagree the JSON's numbers are judged, which is how these tests see it is read at all.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from collbench_py.rundir.load import load_run_dir
from collbench_py.verdicts import Check, Report, judge
from tests.rundir_factory import H100_LOG, RunSpec, build_run_dir, nccl_tests_json

HOSTS = ["node1", "node2", "node3", "node4"]
SECRET = "sekrit-env-block-4711"


def _write_json(run: Path, host: str, factor: float = 1.0, text: str | None = None) -> Path:
    path = run / "hosts" / host / "intra" / "all_reduce.json"
    env = (f"HF_TOKEN={SECRET}", f"MY_PASSWORD={SECRET}")
    path.write_text(text if text is not None else nccl_tests_json(H100_LOG, factor, env), encoding="utf-8")
    return path


def _bandwidth(report: Report, host: str) -> Check:
    return next(c for c in report.hosts[host].checks if c.name.startswith("intra/all_reduce/fleet"))


def test_the_json_numbers_are_judged_when_present(tmp_path: Path) -> None:
    """node3's log is healthy but its JSON says half the bandwidth: the JSON is what is judged."""
    run = build_run_dir(tmp_path, RunSpec(hosts=HOSTS))
    for host in HOSTS:
        _write_json(run, host, 0.5 if host == "node3" else 1.0)
    loaded = load_run_dir(run)
    assert {log.source for log in loaded.logs} == {"json"}
    node3 = next(log for log in loaded.logs if log.launch.hosts == ("node3",))
    document = json.loads(_write_json(run, "node3", 0.5).read_text(encoding="utf-8"))
    assert [row.oop.busbw for row in node3.run.rows] == [
        r["out_of_place"]["bus_bw"] for r in document["results"]
    ]
    report = judge(loaded)
    assert report.hosts["node3"].verdict == "failed"
    assert _bandwidth(report, "node3").status == "fail"
    assert {report.hosts[h].verdict for h in ("node1", "node2", "node4")} == {"passed"}


def test_without_json_the_log_is_read(tmp_path: Path) -> None:
    run = build_run_dir(tmp_path, RunSpec(hosts=HOSTS, host_scale={"node3": 0.5}))
    loaded = load_run_dir(run)
    assert {log.source for log in loaded.logs} == {"log"}
    assert judge(loaded).hosts["node3"].verdict == "failed"


def test_a_healthy_json_gives_the_numbers_of_its_log(tmp_path: Path) -> None:
    """Same run, both files: the rows judged from the JSON are those of the log (no value changed by
    the merge), and the log's NCCL lines and tail are still what is quoted."""
    run = build_run_dir(tmp_path / "text", RunSpec(hosts=HOSTS))
    from_text = load_run_dir(run).logs[0]
    _write_json(run, "node1")
    from_json = next(log for log in load_run_dir(run).logs if log.launch.hosts == ("node1",))
    assert from_json.source == "json"
    by_size = {row.size: row for row in from_text.run.rows}
    assert len(from_json.run.rows) == len(by_size) == 32
    for row in from_json.run.rows:
        assert (row.oop.busbw, row.oop.algbw, row.oop.wrong) == (
            by_size[row.size].oop.busbw,
            by_size[row.size].oop.algbw,
            by_size[row.size].oop.wrong,
        )
    assert from_json.tail == from_text.tail
    assert from_json.run.devices == from_text.run.devices


def test_an_unreadable_json_falls_back_to_the_log_with_a_note(tmp_path: Path) -> None:
    """node3's log is degraded; its JSON is garbage: the log is judged (node3 fails), the JSON named."""
    run = build_run_dir(tmp_path, RunSpec(hosts=HOSTS, host_scale={"node3": 0.5}))
    _write_json(run, "node3", text='{"version": 2, "start_time": "x", "results": [[[[')
    _write_json(run, "node2", text="\x00\x01 not json at all")
    loaded = load_run_dir(run)
    node3 = next(log for log in loaded.logs if log.launch.hosts == ("node3",))
    assert node3.source == "log"
    assert judge(loaded).hosts["node3"].verdict == "failed"
    assert any("node2/intra/all_reduce.json is not an nccl-tests JSON file" in n for n in loaded.notes)


def test_a_log_the_parser_cannot_read_is_judged_from_its_json(tmp_path: Path) -> None:
    """The launch printed nothing usable (an empty log) but rank 0 wrote its JSON: the results count."""
    run = build_run_dir(tmp_path, RunSpec(hosts=HOSTS))
    (run / "hosts" / "node2" / "intra" / "all_reduce.log").write_text("", encoding="utf-8")
    _write_json(run, "node2")
    loaded = load_run_dir(run)
    node2 = next(log for log in loaded.logs if log.launch.hosts == ("node2",))
    assert (node2.source, node2.parse_error, len(node2.run.rows)) == ("json", None, 32)
    assert "results read from all_reduce.json" in (node2.note or "")
    assert judge(loaded).hosts["node2"].verdict == "passed"


def test_the_env_block_reaches_no_record(tmp_path: Path) -> None:
    run = build_run_dir(tmp_path, RunSpec(hosts=HOSTS))
    for host in HOSTS:
        _write_json(run, host)
    loaded = load_run_dir(run)
    dumped = json.dumps([dataclasses.asdict(log) for log in loaded.logs], default=str)
    assert SECRET not in dumped
    assert "HF_TOKEN" not in dumped
