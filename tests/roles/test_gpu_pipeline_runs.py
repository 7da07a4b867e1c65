"""The whole pipeline as it ran on a real H100 (tests/data/gpu-captures/README.md): what the run
directory holds and what the report makes of it.

Both runs are `ansible-playbook bench.yml` with a local connection on one H100, phase intra: one
with nccl-tests (built by the role from the upstream archive, NCCL from the pip wheel), one with
the torch benchmark over NCCL. Every launch ran under the launch wrapper, which sampled the PCIe
link while the GPU was busy.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from collbench_py.rundir.load import load_run_dir
from collbench_py.verdicts import judge

CAPTURES = Path(__file__).parents[1] / "data" / "gpu-captures"
NCCL_RUN = CAPTURES / "run-merged-nccl-tests"
TORCH_RUN = CAPTURES / "run-merged-torch"
COLLECTIVES = {"all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "sendrecv"}


def checks_of(report, host="gpu1"):
    return {check.name: check for check in report.hosts[host].checks}


def test_intra_node_nccl_tests_ran_one_process_per_gpu_under_a_local_mpirun() -> None:
    run = load_run_dir(NCCL_RUN)
    intra = [log for log in run.logs if log.launch.kind == "intra"]
    assert {log.launch.collective for log in intra} == COLLECTIVES
    assert {log.launch.launcher for log in intra} == {"mpirun"}
    # sendrecv was recorded `skipped` by the rule of that day (one rank, no log), although nccl-tests'
    # sendrecv sends to itself and wrote its log; the role now records it like the others.
    assert {log.launch.status for log in intra if log.launch.collective != "sendrecv"} == {"ok"}
    assert (NCCL_RUN / "hosts" / "gpu1" / "intra" / "sendrecv.log").stat().st_size > 0
    # The -J JSON beside each log is what was read; nccl-tests' own header names the library.
    assert {log.source for log in intra} == {"json"}
    assert run.hosts["gpu1"].facts["nccl_version"].startswith("2.28.9")


@pytest.mark.parametrize(("run_dir", "sampled"), [(NCCL_RUN, "all_reduce"), (TORCH_RUN, "all")])
def test_the_pcie_link_sampled_under_load_is_what_is_judged(run_dir: Path, sampled: str) -> None:
    """The wrapper's samples taken while the GPU was busy: gen 5 x16 of gen 5 x16."""
    run = load_run_dir(run_dir)
    (link,) = run.hosts["gpu1"].gpu_links[sampled]
    assert (link.gen, link.gen_max, link.width, link.width_max) == (5, 5, 16, 16)
    pcie = checks_of(judge(run))["facts/pcie"]
    assert pcie.status == "pass" and "under load" in pcie.reason


@pytest.mark.parametrize("run_dir", [NCCL_RUN, TORCH_RUN], ids=["nccl-tests", "torch"])
def test_a_healthy_single_gpu_host_passes_with_a_note_and_no_bandwidth_verdict(run_dir: Path) -> None:
    report = judge(load_run_dir(run_dir))
    verdict = report.hosts["gpu1"]
    assert verdict.verdict == "passed"
    assert checks_of(report)["intra/one-rank"].status == "note"
    assert report.stats == {} and verdict.busbw == {}
    assert not [c for c in verdict.checks if c.status in ("warn", "fail")]
