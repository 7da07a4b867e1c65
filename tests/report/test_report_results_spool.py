"""results.json's rows spooled by the parse workers (rundir/results_rows.py): the same bytes as
written from the parsed logs, a failure one line in the report, nothing left behind."""

from __future__ import annotations

import json
import os
import re
from functools import partial
from pathlib import Path

import pytest

from collbench_py.cli import main
from collbench_py.report import machine, make
from collbench_py.report.machine import write_results_json
from collbench_py.rundir.load import load_run_dir_with
from collbench_py.rundir.results_rows import spool_log_rows
from collbench_py.verdicts import judge
from tests.rundir_factory import GH200_WRONG, RunSpec, build_run_dir

HOSTS = [f"node{i}" for i in range(1, 5)]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = RunSpec(
        hosts=HOSTS,
        host_scale={"node3": 0.5},
        intra_override={"node2": {"all_reduce": GH200_WRONG}},
        pairs="all",
        all_logs={"all_reduce": GH200_WRONG},
    )
    return build_run_dir(tmp_path_factory.mktemp("alongside"), spec)


def _without_stamp(data: bytes) -> bytes:
    return re.sub(rb'"generated_at": "[^"]*"', b'"generated_at": ""', data, count=1)


@pytest.mark.parametrize(("workers", "small_head"), [(1, False), (2, False), (2, True)])
def test_results_json_from_rows_the_parse_workers_spooled_is_the_same_bytes(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int, small_head: bool
) -> None:
    if small_head:  # a head shorter than the text buffer is still waiting there when the rows are copied
        monkeypatch.setattr(machine, "head", lambda report, code: {"schema": machine.RESULTS_SCHEMA})
    spool = tmp_path / "spool"
    spool.mkdir()
    run, rows = load_run_dir_with(run_dir, partial(spool_log_rows, str(spool)), workers=workers)
    assert len(rows) == len(run.logs)
    by_this_process = {s.path.endswith(f"rows.{os.getpid()}") for s in rows if s}
    assert by_this_process == {workers == 1}  # with a pool, its workers wrote them
    report = judge(run)
    write_results_json(report, tmp_path / "inline.json", 1)
    write_results_json(report, tmp_path / "copied.json", 1, rows=rows)
    inline = (tmp_path / "inline.json").read_bytes()
    assert b'"results": [\n  {"log":' in inline  # rows were written at all
    assert _without_stamp((tmp_path / "copied.json").read_bytes()) == _without_stamp(inline)
    assert len(json.loads(inline)["results"]) == sum(len(r.rows) for log in run.logs for r in log.runs)


def no_space(spool: str, log: object) -> None:
    Path(spool, "rows.0").write_text("part of the rows", encoding="utf-8")
    raise OSError(28, "No space left on device")


def test_a_failed_rows_spool_is_one_line_and_leaves_nothing(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(make, "spool_log_rows", no_space)
    out = tmp_path / "out"
    out.mkdir()  # made beforehand: kept, and empty again
    assert main(["report", str(run_dir), "--out", str(out), "--no-history"]) == 2
    err = capsys.readouterr().err
    assert err == f"collbench report: cannot write {out}: No space left on device\n"
    assert list(out.iterdir()) == []


def test_bad_input_leaves_no_report_directory(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert not (run_dir / "report").exists()
    assert main(["report", str(run_dir), "--profile", "h999", "--no-history"]) == 2
    assert "no profile named 'h999'" in capsys.readouterr().err
    assert not (run_dir / "report").exists()


def test_the_head_is_the_document_with_each_host_and_pair_on_a_line(run_dir: Path, tmp_path: Path) -> None:
    report = judge(load_run_dir_with(run_dir, None)[0])
    doc = machine.with_not_measured(machine.head(report, 1), report)
    text = machine.head_json(doc)
    assert json.loads(text) == doc
    lines = text.splitlines()
    for key in machine.ONE_PER_LINE:
        assert doc[key]  # the run has hosts and pairs
        for element in doc[key]:
            assert f"  {json.dumps(element)}" in (line.rstrip(",") for line in lines)
    # the rest indented as before
    assert json.dumps(doc["summary"], indent=1).replace("\n", "\n ") in text
    path = tmp_path / "results.json"
    write_results_json(report, path, 1)
    written = json.loads(path.read_text(encoding="utf-8"))
    assert {key: written[key] for key in doc if key != "generated_at"} == {
        key: value for key, value in doc.items() if key != "generated_at"
    }
