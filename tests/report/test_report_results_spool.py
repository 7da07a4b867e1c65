"""results.json's rows made beside the report from the runs the parse workers spooled
(rundir/results_rows.py): the same bytes as written from the parsed logs, whether the child process
made them or failed, a failed spool one line in the report, nothing left behind."""

from __future__ import annotations

import io
import json
import os
import re
import signal
from functools import partial
from pathlib import Path

import pytest

from collbench_py.cli import main
from collbench_py.report import machine, make
from collbench_py.report.machine import write_results_json
from collbench_py.rundir.load import RunDir, load_run_dir_with
from collbench_py.rundir.results_rows import RowsBeside, spool_log_runs, write_rows
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
def test_results_json_from_rows_made_beside_is_the_same_bytes(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int, small_head: bool
) -> None:
    if small_head:  # a head shorter than the text buffer is still waiting there when the rows are copied
        monkeypatch.setattr(machine, "head", lambda report, code: {"schema": machine.RESULTS_SCHEMA})
    spool = tmp_path / "spool"
    spool.mkdir()
    rows = RowsBeside.ready(str(spool))
    assert rows is not None
    run, segments = load_run_dir_with(run_dir, partial(spool_log_runs, str(spool)), workers=workers)
    assert len(segments) == len(run.logs)
    by_this_process = {s.path.endswith(f"runs.{os.getpid()}") for s in segments if s}
    assert by_this_process == {workers == 1}  # with a pool, its workers wrote them
    rows.go(segments)
    report = judge(run)
    write_results_json(report, tmp_path / "inline.json", 1)
    made = (spool / "records.json").read_bytes()  # the child's records, there before they are copied
    write_results_json(report, tmp_path / "copied.json", 1, rows=rows)
    inline = (tmp_path / "inline.json").read_bytes()
    assert b'"results": [\n  {"log":' in inline  # rows were written at all
    assert made and made in inline
    assert _without_stamp((tmp_path / "copied.json").read_bytes()) == _without_stamp(inline)
    assert len(json.loads(inline)["results"]) == sum(len(r.rows) for log in run.logs for r in log.runs)


def _spooled(run_dir: Path, spool: Path) -> tuple[RowsBeside, RunDir, list]:
    rows = RowsBeside.ready(str(spool))
    assert rows is not None
    run, segments = load_run_dir_with(run_dir, partial(spool_log_runs, str(spool)), workers=2)
    return rows, run, segments


def _records(run) -> bytes:
    text = io.StringIO()
    write_rows(run.logs, text)
    return text.getvalue().encode()


def test_the_child_makes_the_records_write_rows_writes(run_dir: Path, tmp_path: Path) -> None:
    rows, run, segments = _spooled(run_dir, tmp_path)
    rows.go(segments)
    out = io.BytesIO()
    assert rows.copy_into(out) is True
    assert out.getvalue() == _records(run)
    assert rows.process is None  # waited for


def test_a_child_that_dies_leaves_the_records_to_the_report(run_dir: Path, tmp_path: Path) -> None:
    rows, run, segments = _spooled(run_dir, tmp_path)
    os.kill(rows.process.pid, signal.SIGKILL)
    rows.go(segments)
    assert rows.copy_into(io.BytesIO()) is False
    report = judge(run)
    write_results_json(report, tmp_path / "after-death.json", 1, rows=rows)
    write_results_json(report, tmp_path / "inline.json", 1)
    assert _without_stamp((tmp_path / "after-death.json").read_bytes()) == _without_stamp(
        (tmp_path / "inline.json").read_bytes()
    )


def test_a_report_that_fails_after_the_parse_does_not_wait_for_the_records(
    run_dir: Path, tmp_path: Path
) -> None:
    rows, _, segments = _spooled(run_dir, tmp_path)
    child = rows.process
    rows.go(segments * 2000)  # records for seconds
    rows.stop()  # as make_report does when the verdicts raise
    assert child.exitcode == -signal.SIGTERM  # ended, not waited for
    assert rows.process is None and rows.copy_into(io.BytesIO()) is False


def test_a_spool_cut_short_is_not_copied_half(run_dir: Path, tmp_path: Path) -> None:
    rows, _, segments = _spooled(run_dir, tmp_path)
    last = next(s for s in reversed(segments) if s)
    os.truncate(last.path, last.offset + last.length - 1)  # the last log's runs lose a byte
    rows.go(segments)
    out = io.BytesIO()
    assert rows.copy_into(out) is False
    assert out.getvalue() == b""


def no_space(spool: str, log: object) -> None:
    Path(spool, "runs.0").write_bytes(b"part of the runs")
    raise OSError(28, "No space left on device")


def test_a_failed_rows_spool_is_one_line_and_leaves_nothing(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(make, "spool_log_runs", no_space)
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
