"""A healthy multi-node H100 fleet passes with no warning; one host degraded fails that host alone.

The run directory is built from real logs and captures (tests/data/fleet/README.md names each):
pairs ran a real 2-node H100 ring all_reduce and a real 2-node alltoall, every host has the HGX H100
topology with 8 GPU NICs and 4 storage NICs, and its facts were read at idle, when nvidia-smi shows
the PCIe link at gen 1. Each of these once failed or warned a healthy fleet.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from collbench_py.exitcodes import ExitCode
from collbench_py.report.machine import head
from collbench_py.rundir import load_run_dir, parse_gpu_links
from collbench_py.verdicts import Report, judge
from tests.rundir_factory import (
    CORPUS,
    H100_LOG,
    H100_TOPO_12NICS,
    RunSpec,
    build_run_dir,
    gpu_link_csv,
    make_facts,
)

DATA = Path(__file__).parent / "data"
A3MEGA_ALL_REDUCE = (
    DATA / "extra" / "nccl-tests-issues" / "gcp-a3mega-2node-16rank-header-lost-hash-first-device-line.txt"
)
ALLTOALL_2NODE = CORPUS / "nccl-tests" / "alltoall-v2.18.3-2node-16rank-inplace-NA-mpi-noise-in-table.txt"
IDLE_PCIE = DATA / "fleet" / "l40s-8gpu-idle-pcie-query.csv"
UNDER_LOAD = DATA / "fleet" / "h100-pcie-under-load-gpu-link.csv"
HOSTS = ["node01", "node02", "node03", "node04"]


def idle_pcie() -> tuple[int, int]:
    """(gen, width) every GPU of the real idle capture shows: gen 1, full width."""
    with IDLE_PCIE.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f, skipinitialspace=True))
    gens = {int(r["pcie.link.gen.current"]) for r in rows}
    widths = {int(r["pcie.link.width.current"]) for r in rows}
    assert len(gens) == 1 and len(widths) == 1
    return gens.pop(), widths.pop()


def h100_facts(name: str) -> dict:
    """An HGX H100 read at idle: PCIe gen 5 x16 links showing the idle gen, 12 InfiniBand ports
    named as the topology's NIC legend (mlx5_0..mlx5_11), of which 8 are next to a GPU."""
    gen, width = idle_pcie()
    return make_facts(name, pcie=(gen, 5, width, 16), ib_ports=12, ib_rate=400)


def fleet(**changes) -> RunSpec:
    spec = RunSpec(
        hosts=HOSTS,
        intra={"all_reduce": H100_LOG},
        topo=H100_TOPO_12NICS,
        facts={h: h100_facts(h) for h in HOSTS},
        pairs="all",
        pair_log=A3MEGA_ALL_REDUCE,
        pair_collectives=("all_reduce", "alltoall"),
        pair_log_override={"alltoall": ALLTOALL_2NODE},
        rename_hosts=True,
    )
    for key, value in changes.items():
        setattr(spec, key, value)
    return spec


def judged(tmp_path: Path, spec: RunSpec) -> Report:
    return judge(load_run_dir(build_run_dir(tmp_path, spec)))


def _problems(report: Report) -> list[tuple[str, str, str]]:
    return [(h.host, c.name, c.reason) for h in report.hosts.values() for c in h.problems] + [
        ("fleet", c.name, c.reason) for c in report.fleet_checks if c.status in ("warn", "fail")
    ]


def test_a_healthy_h100_fleet_passes_with_no_warning(tmp_path: Path) -> None:
    report = judged(tmp_path, fleet())
    assert report.profile is not None and report.profile.name == "h100-sxm"
    assert _problems(report) == []
    assert report.exit_code(strict=True) == ExitCode.OK
    # The fabric bar comes from the 8 NICs next to a GPU, not the 12 ports: 0.9 x 0.8 x 400 GB/s.
    fabric = next(c for c in report.fleet_checks if c.name == "pairs/all_reduce")
    assert fabric.status == "pass" and "288 GB/s needed" in fabric.reason
    assert "PIX/PXB to a GPU in topo -m (8 of 12" in fabric.reason
    # alltoall has no NIC-line bar, and the report says why.
    alltoall = next(c for c in report.fleet_checks if c.name == "pairs/alltoall/bar")
    assert alltoall.status == "note" and "judged against the other pairs only" in alltoall.reason
    # results.json states each pair bar with its source.
    bars = head(report, 0)["profile"]["inter"]["collectives"]
    assert bars["all_reduce"]["basis"] == "nic_line" and bars["all_reduce"]["fraction"] == 0.8
    assert bars["alltoall"]["basis"] == bars["sendrecv"]["basis"] == "fleet"
    # Idle PCIe is a note, not a verdict.
    pcie = next(c for c in report.hosts["node01"].checks if c.name == "facts/pcie")
    assert pcie.status == "note" and "gen 1 of 5" in pcie.reason and "at idle" in pcie.reason


def test_the_same_fleet_under_load_at_full_pcie_passes(tmp_path: Path) -> None:
    # What a real H100 showed under load (tests/data/fleet), for each GPU of each host.
    (real,), _ = parse_gpu_links(UNDER_LOAD.read_text(encoding="utf-8"))
    assert (real.gen, real.gen_max, real.width, real.width_max) == (5, 5, 16, 16)
    links = {h: {"all_reduce": gpu_link_csv(h100_facts(h), gen=real.gen, width=real.width)} for h in HOSTS}
    report = judged(tmp_path, fleet(gpu_links=links))
    assert _problems(report) == []
    pcie = next(c for c in report.hosts["node02"].checks if c.name == "facts/pcie")
    assert pcie.status == "pass" and "under load" in pcie.reason


@pytest.mark.parametrize("collective", ["all_reduce", "alltoall"])
def test_one_host_at_80_percent_fails_that_host_alone(tmp_path: Path, collective: str) -> None:
    slow = "node03"
    others = [h for h in HOSTS if h != slow]
    scale = {tuple(sorted((slow, h))): 0.8 for h in others}
    spec = fleet(pair_scale=scale, pair_collectives=(collective,))
    report = judged(tmp_path, spec)
    assert [h.host for h in report.hosts.values() if h.verdict != "passed"] == [slow]
    failed = [c for c in report.hosts[slow].checks if c.status == "fail"]
    assert [c.name for c in failed] == [f"pairs/{collective}"]
    reason = failed[0].reason
    assert "bad node" in reason and f"{collective} pair median" in reason and "slow below" in reason
    assert report.exit_code(strict=False) == ExitCode.FAILED
    for host in others:
        assert report.hosts[host].verdict == "passed", _problems(report)
