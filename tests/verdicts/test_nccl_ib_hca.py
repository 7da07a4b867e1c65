"""`NCCL_IB_HCA` against the active GPU-attached RDMA ports: real `nvidia-smi topo -m` captures and
real `ibstat` port records (tests/data/facts-real), on run directories built from real logs."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from collbench_py.exitcodes import ExitCode
from collbench_py.facts.hostfacts import host_facts
from collbench_py.rundir.load import load_run_dir
from collbench_py.verdicts import Check, Report, judge
from tests.rundir_factory import H100_TOPO, H100_TOPO_12NICS, RunSpec, build_run_dir, make_facts

REPO = Path(__file__).resolve().parents[2]
IBSTAT_NDR = REPO / "tests" / "data" / "facts-real" / "ibstat-connectx7-ndr-400.txt"
# A real 2-node 16-rank ring all_reduce on H100 (331 GB/s at the reference sizes).
A3MEGA_LOG = (
    REPO
    / "tests"
    / "data"
    / "extra"
    / "nccl-tests-issues"
    / "gcp-a3mega-2node-16rank-header-lost-hash-first-device-line.txt"
)
HOSTS = ["node1", "node2", "node3", "node4"]
EXAMPLE_HCA = "mlx5_0,mlx5_1,mlx5_2,mlx5_3"  # what inventory/example-cluster.yml once set


def ibstat_of(devices: list[str]) -> str:
    """The real ConnectX-7 NDR ibstat, its first CA repeated under each name: a longer ibstat of the
    same card, as an 8- or 12-port node prints it."""
    text = IBSTAT_NDR.read_text(encoding="utf-8")
    block = re.search(r"^CA 'mlx5_0'.*?(?=^CA |\Z)", text, re.S | re.M)
    assert block is not None
    return "".join(block[0].replace("'mlx5_0'", f"'{d}'") for d in devices)


def fleet(devices: list[str], topo: Path, hca: str | None, pair_scale: float = 1.0) -> RunSpec:
    facts = {}
    for host in HOSTS:
        ib = host_facts({"hostname": host, "ibstat": ibstat_of(devices)})["ib"]
        assert len(ib) == len(devices) and {p["rate_gbps"] for p in ib} == {400}
        facts[host] = make_facts(host, ib=ib)
    pairs = [(a, b) for i, a in enumerate(HOSTS) for b in HOSTS[i + 1 :]]
    return RunSpec(
        hosts=HOSTS,
        topo=topo,
        facts=facts,
        pairs="all",
        pair_log=A3MEGA_LOG,
        pair_scale=dict.fromkeys(pairs, pair_scale),
        parameters={"launch_env": {"NCCL_IB_HCA": hca}} if hca else {},
    )


def judged(tmp_path: Path, spec: RunSpec) -> Report:
    return judge(load_run_dir(build_run_dir(tmp_path, spec)))


def hca_check(report: Report) -> Check | None:
    found = [c for c in report.fleet_checks if c.name == "fabric/nccl_ib_hca"]
    assert len(found) <= 1
    return found[0] if found else None


def fabric(report: Report) -> Check:
    return next(c for c in report.fleet_checks if c.name == "pairs/all_reduce")


EIGHT = [f"mlx5_{i}" for i in range(8)]
TWELVE = [f"mlx5_{i}" for i in range(12)]


def test_four_of_eight_rails_is_said_and_a_half_speed_fabric_no_longer_passes_silently(
    tmp_path: Path,
) -> None:
    # 8-rail HGX H100 (every NIC PIX to one GPU), 8 active NDR ports, NCCL told to use 4 of them;
    # every pair at 55 % of the real 331 GB/s ring: 182 GB/s, half of what 8 x 400G carry.
    report = judged(tmp_path, fleet(EIGHT, H100_TOPO, EXAMPLE_HCA, pair_scale=0.55))
    check = hca_check(report)
    assert check is not None and check.status == "warn", check
    for left_out in ("mlx5_4:1 (GPU4)", "mlx5_5:1 (GPU5)", "mlx5_6:1 (GPU6)", "mlx5_7:1 (GPU7)"):
        assert left_out in check.reason
    assert "leaves out 4 of the 8 active GPU-attached RDMA ports" in check.reason
    assert "on 4 of 4 host(s)" in check.reason and "200 GB/s" in check.reason and "400 GB/s" in check.reason
    assert "mlx5_0:1" not in check.reason  # selected, not left out
    # The bar stays the one of the 4 ports NCCL was given (the pairs pass it), and says what the
    # GPU-attached ports would need: 0.9 x 0.8 x 400 = 288 GB/s.
    bar = fabric(report)
    assert bar.status == "pass" and "144 GB/s needed" in bar.reason
    assert "with them the bar would be 288 GB/s" in bar.reason
    assert report.fleet_status == "warn"
    assert report.exit_code(strict=True) == ExitCode.WARNINGS
    assert report.count("failed") == 0


def test_a_name_without_equals_selecting_mlx5_10_and_11_is_said(tmp_path: Path) -> None:
    # The 12-NIC HGX H100 capture: GPU-attached are mlx5_0,1,2,5,6,7,8,11 (mlx5_3/4 and 9/10 are
    # two dual-port cards next to no GPU). `mlx5_1` is a prefix: NCCL also takes mlx5_10, mlx5_11.
    report = judged(tmp_path, fleet(TWELVE, H100_TOPO_12NICS, EXAMPLE_HCA))
    check = hca_check(report)
    assert check is not None and check.status == "warn"
    assert "selects more devices than it names" in check.reason
    assert "mlx5_10 (by mlx5_1), mlx5_11 (by mlx5_1)" in check.reason
    for left_out in ("mlx5_5:1 (GPU3)", "mlx5_6:1 (GPU4)", "mlx5_7:1 (GPU5)", "mlx5_8:1 (GPU6)"):
        assert left_out in check.reason
    assert "mlx5_11:1" not in check.reason  # GPU7's port, selected through the prefix
    # `^` with a prefix excludes more than it names.
    excluded = judged(tmp_path / "x", fleet(TWELVE, H100_TOPO_12NICS, "^mlx5_3,mlx5_4,mlx5_9,mlx5_1"))
    check = hca_check(excluded)
    assert check is not None and "excludes more devices than it names" in check.reason
    assert "mlx5_10 (by mlx5_1), mlx5_11 (by mlx5_1)" in check.reason
    assert "mlx5_1:1 (GPU1)" in check.reason and "mlx5_11:1 (GPU7)" in check.reason


def test_a_correct_setting_gives_no_warning(tmp_path: Path) -> None:
    exact_twelve = "=mlx5_0,mlx5_1,mlx5_2,mlx5_5,mlx5_6,mlx5_7,mlx5_8,mlx5_11"
    for index, (devices, topo, hca) in enumerate(
        (
            (TWELVE, H100_TOPO_12NICS, exact_twelve),
            (EIGHT, H100_TOPO, "=" + ",".join(EIGHT)),
            (EIGHT, H100_TOPO, "mlx5"),  # a prefix of every port, all of them compute ports
        )
    ):
        report = judged(tmp_path / str(index), fleet(devices, topo, hca))
        check = hca_check(report)
        assert check is not None and check.status == "pass", (hca, check)
        assert "with them the bar" not in fabric(report).reason
        assert report.exit_code(strict=True) == ExitCode.OK, [c.reason for c in report.fleet_checks]
    # Without topo -m nothing tells which ports are the GPUs': no verdict on the setting either way.
    blind = fleet(EIGHT, H100_TOPO, "=" + ",".join(EIGHT))
    blind.topo = None
    assert hca_check(judged(tmp_path / "blind", blind)) is None
    unset = judged(tmp_path / "unset", fleet(EIGHT, H100_TOPO, None))
    assert hca_check(unset) is None  # unset: NCCL and the bar take the GPU-attached ports
    assert "288 GB/s needed" in fabric(unset).reason


def test_the_example_inventory_s_setting_gives_no_warning_on_8_rail_h100(tmp_path: Path) -> None:
    inventory = yaml.safe_load((REPO / "inventory" / "example-cluster.yml").read_text(encoding="utf-8"))
    env = inventory["all"]["vars"].get("collbench_launch_env") or {}
    report = judged(tmp_path, fleet(EIGHT, H100_TOPO, env.get("NCCL_IB_HCA")))
    check = hca_check(report)
    assert check is None or check.status == "pass", check.reason
    assert "288 GB/s needed" in fabric(report).reason
