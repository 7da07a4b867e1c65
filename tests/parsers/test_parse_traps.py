"""`collbench parse` on the files a user points it at by mistake or without knowing what they hold:
a run directory's own facts.json, and the log of an nccl-tests build without MPI=1 launched by
mpirun (every process `Rank 0`, busbw 0)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collbench_py.exitcodes import ExitCode
from collbench_py.parsers import parse_text
from collbench_py.parsers._nccl_infer import NON_MPI_WARNING
from collbench_py.rundir.load import load_run_dir
from collbench_py.verdicts import judge
from tests.collbench_cli import collbench
from tests.rundir_factory import RunSpec, build_run_dir

DATA = Path(__file__).parents[1] / "data"
ONE_GPU_LOG = DATA / "gpu-captures" / "nccl-tests-2.19.6-h100-1gpu-all_gather.txt"
INTERLEAVED = DATA / "corpus" / "nccl-tests" / "non-mpi-build-16-independent-1rank-runs-interleaved-rows.txt"


def non_mpi_log(processes: int = 2) -> str:
    """What `mpirun -np N all_gather_perf` of a build without MPI=1 prints when the processes'
    output is not interleaved: N complete one-rank tables, each its own `Rank 0` (the real one-H100
    run, once per process, each with its own pid)."""
    text = ONE_GPU_LOG.read_text()
    assert "Pid   3518 on" in text
    return "".join(text.replace("Pid   3518 on", f"Pid {3518 + n:>6} on") for n in range(processes))


def test_a_facts_json_is_not_taken_for_an_nccl_tests_json_file(tmp_path: Path) -> None:
    run = build_run_dir(tmp_path, RunSpec(hosts=["node1"]))
    facts = run / "hosts" / "node1" / "facts.json"
    assert '"nccl_version"' in facts.read_text()[:4096]  # what made it look like a -J file
    result = collbench("parse", str(facts))
    assert result.returncode == ExitCode.BAD_INPUT and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"collbench: {facts}: not a recognised benchmark or topology output (a host's facts.json, "
        "written by the facts role: `collbench report RUN_DIR` reads it)"
    ]


def test_a_real_nccl_tests_json_file_is_still_recognised() -> None:
    for path in sorted((DATA / "gpu-captures").glob("nccl-tests-*.json")):
        parsed = parse_text(path.read_text(), str(path))
        assert parsed.kind == "nccl-tests" and parsed.runs[0].rows, path


@pytest.mark.parametrize("processes", [2, 8])
def test_complete_one_rank_tables_of_one_collective_are_a_non_mpi_build(processes: int) -> None:
    parsed = parse_text(non_mpi_log(processes), "all_gather.log")
    assert len(parsed.runs) == processes
    for run in parsed.runs:
        assert run.status == "ok" and run.nranks == 1  # what was measured stays as it was
        assert NON_MPI_WARNING in run.warnings


def test_one_process_per_collective_is_not_flagged() -> None:
    """A one-GPU script that runs each collective once: one `Rank 0` per collective, nothing wrong."""
    text = ONE_GPU_LOG.read_text()
    other = text.replace("all_gather_perf", "all_reduce_perf").replace("Pid   3518 on", "Pid   3600 on")
    for run in parse_text(text + other, "one-gpu.log").runs:
        assert NON_MPI_WARNING not in run.warnings


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_the_non_mpi_warning_is_in_every_output_of_parse(tmp_path: Path, fmt: str) -> None:
    for text in (non_mpi_log(), INTERLEAVED.read_text()):
        log = tmp_path / "all_gather.log"
        log.write_text(text)
        result = collbench("parse", "--format", fmt, str(log))
        assert result.returncode == ExitCode.OK
        if fmt == "json":
            (parsed,) = json.loads(result.stdout)
            assert all(NON_MPI_WARNING in run["warnings"] for run in parsed["runs"])
        else:
            assert f"  warning: {NON_MPI_WARNING}" in result.stdout.splitlines()


def test_the_report_fails_a_host_whose_log_is_a_non_mpi_build(tmp_path: Path) -> None:
    log = tmp_path / "all_gather.log"
    log.write_text(non_mpi_log())
    spec = RunSpec(hosts=["node1", "node2"], intra_override={"node2": {"all_gather": log}})
    report = judge(load_run_dir(build_run_dir(tmp_path / "results", spec)))
    node2 = report.hosts["node2"]
    assert node2.verdict == "failed"
    reasons = [c.reason for c in node2.checks if c.status == "fail"]
    assert any("built without MPI=1: 2 processes each say `Rank 0`" in r for r in reasons), reasons
