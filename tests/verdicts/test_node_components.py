"""The node checks judged across a run: 4 nodes made from the real 8x H100 captures
(tests/nodecheck_factory.py), one fault at a time. Each fault names exactly its host and
component; a healthy fleet gives no finding and no warning; a skipped check is said, not passed."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from collbench_py.profiles import load_profile
from collbench_py.rundir.load import load_run_dir
from collbench_py.verdicts import judge
from collbench_py.verdicts.node_components import judge_components
from tests.nodecheck_factory import IBSTAT, NodeSpec, add_node_checks, degrade_gpu, degrade_pair
from tests.rundir_factory import RunSpec, build_run_dir

HOSTS = ["node1", "node2", "node3", "node4"]


def _judged(tmp_path: Path, specs: dict[str, NodeSpec], **run: object):
    root = build_run_dir(tmp_path, RunSpec(hosts=HOSTS, **run))
    return judge(load_run_dir(add_node_checks(root, specs)))


def _named(report) -> list[tuple[str, str, str]]:
    components = getattr(report, "components", report)  # a run's verdict, or its ComponentReport
    return [(f.host, f.kind, f.id) for f in components.findings]


def _node_checks(report, host: str):
    return [c for c in report.hosts[host].checks if c.name.startswith("node/")]


def test_a_healthy_fleet_has_no_finding_and_no_warning(tmp_path: Path) -> None:
    report = _judged(tmp_path, {})
    assert report.profile is not None and report.profile.name == "h100-sxm"
    assert report.components is not None and report.components.findings == ()
    for host in HOSTS:
        checks = _node_checks(report, host)
        assert checks and {c.status for c in checks} == {"pass"}, checks
        assert report.hosts[host].verdict == "passed"
    # every GPU pair, GPU, link, port and HCA measured: 56 + 56 pairs, 8 + 8 GPUs, 144 links ...
    measured = {(m.kind, m.metric) for m in report.components.measurements if m.host == "node1"}
    assert {
        ("gpu_pair", "d2d_read_ce"),
        ("gpu", "h2d_ce"),
        ("hca", "loopback"),
        ("port", "port_rate"),
    } <= measured


def test_one_link_degraded_on_node2_names_exactly_that_link(tmp_path: Path) -> None:
    report = _judged(tmp_path, {"node2": NodeSpec(cells=degrade_pair("3", "5"))}, pairs="all")
    assert _named(report) == [("node2", "nvlink", "gpu3--gpu5")]
    finding = report.components.findings[0]
    assert finding.severity == "fail" and finding.action == "ticket"
    assert finding.against is not None and finding.against.value == 335  # the H100 P2P line
    # the host's verdict says which component, and no pair fails for it
    assert report.hosts["node2"].verdict == "failed"
    assert report.hosts["node2"].problems[0].name == "node/nvlink gpu3--gpu5"
    assert {p.status for p in report.pairs} == {"ok"}
    assert report.links_failed == [] and report.conclusion.of("bad node") == []


def test_one_gpu_degraded_names_that_gpu_with_its_bus_id(tmp_path: Path) -> None:
    report = _judged(tmp_path, {"node2": NodeSpec(cells=degrade_gpu("3"))})
    assert _named(report) == [("node2", "gpu", "gpu3")]
    finding = report.components.findings[0]
    assert finding.action == "reseat"
    assert finding.bus_id == "00000000:49:00.0"  # facts.json's GPU 3
    assert finding.serial == "GPU-node2-3"


def test_a_link_down_on_node4_is_named_with_gpu_and_link_number(tmp_path: Path) -> None:
    report = _judged(tmp_path, {"node4": NodeSpec(links_down=((1, 7),))})
    assert _named(report) == [("node4", "nvlink", "gpu1:link7")]
    assert "GPU 1 NVLink 7 is down" in report.components.findings[0].reason


def test_a_low_hca_loopback_on_node3_names_node3_mlx5_2(tmp_path: Path) -> None:
    report = _judged(tmp_path, {"node3": NodeSpec(loopback={"mlx5_2": 300.0})}, pairs="all")
    assert _named(report) == [("node3", "hca", "mlx5_2")]
    assert report.components.findings[0].against.value == 380  # the 400G H100 line
    assert {p.status for p in report.pairs} == {"ok"}


def test_a_loopback_within_five_percent_above_the_line_warns(tmp_path: Path) -> None:
    report = _judged(tmp_path, {"node3": NodeSpec(loopback={"mlx5_2": 390.0})})
    assert [(f.id, f.severity) for f in report.components.findings] == [("mlx5_2", "warn")]
    assert report.hosts["node3"].verdict == "warned"


def test_a_port_below_the_others_rate_is_named(tmp_path: Path) -> None:
    report = _judged(tmp_path, {"node3": NodeSpec(port_rate={"mlx5_5": 200})})
    assert _named(report) == [("node3", "port", "mlx5_5:1")]
    assert report.components.findings[0].action == "swap"


def test_an_error_counter_grown_during_the_run_is_named(tmp_path: Path) -> None:
    report = _judged(tmp_path, {"node1": NodeSpec(crc_growth={(2, 4): 3})})
    assert _named(report) == [("node1", "nvlink", "gpu2:link4")]
    grown = [m for m in report.components.measurements if m.metric == "crc_growth" and m.value]
    assert [(m.host, m.id, m.value) for m in grown] == [("node1", "gpu2:link4", 3)]


def test_a_cell_low_against_the_fleet_but_above_the_line_is_found_fleet_relative(tmp_path: Path) -> None:
    # 395 GB/s * 0.9 = 356: above 335 and its 5 % band, 10 % below the same cell on the other nodes
    report = _judged(tmp_path, {"node2": NodeSpec(cells=degrade_pair("0", "6", factor=0.9))})
    assert _named(report) == [("node2", "nvlink", "gpu0--gpu6")]
    assert report.components.findings[0].against.basis == "fleet"
    assert report.components.findings[0].against.nodes == 4


def test_the_expected_link_count_comes_from_the_profile(tmp_path: Path) -> None:
    """A GPU with 12 links by design passes a profile that expects 12, and fails one expecting 18."""
    root = build_run_dir(tmp_path, RunSpec(hosts=HOSTS))
    add_node_checks(root, {})
    for host in HOSTS:  # keep links 0-11 of each GPU, as on a 12-link system
        status = root / "hosts" / host / "node" / "nvlink-status.txt"
        kept = [line for line in status.read_text().splitlines() if not _link_above(line, 11)]
        status.write_text("\n".join(kept) + "\n")
    run = load_run_dir(root)
    h100 = load_profile("h100-sxm")
    twelve = dataclasses.replace(h100, node=dataclasses.replace(h100.node, nvlinks_per_gpu=12))
    assert judge_components(run.hosts, twelve).findings == ()
    short = judge_components(run.hosts, h100).findings
    assert {(f.kind, f.id) for f in short if f.host == "node1"} == {("gpu", f"gpu{i}") for i in range(8)}


def _link_above(line: str, last: int) -> bool:
    words = line.split()
    return len(words) > 1 and words[0] == "Link" and int(words[1].rstrip(":")) > last


@pytest.mark.parametrize("skipped", [{"gpu_matrix": "no nvbandwidth binary"}, {"nic": "no RDMA device"}])
def test_a_skipped_check_is_said_and_never_passed(tmp_path: Path, skipped: dict[str, str]) -> None:
    report = _judged(tmp_path, {"node2": NodeSpec(skipped=skipped)})
    assert report.components.findings == ()
    checks = _node_checks(report, "node2")
    said = [c for c in checks if c.status == "skip"]
    note = next(iter(skipped.values()))
    assert said and all(note in c.reason and "not passed" in c.reason for c in said)
    passed_names = {c.name for c in checks if c.status == "pass"}
    assert not passed_names & {c.name for c in said}
    if "gpu_matrix" in skipped:  # nothing measured, nothing judged against the fleet for it
        assert not [m for m in report.components.measurements if m.host == "node2" and m.kind == "gpu_pair"]


def test_a_check_reported_ok_whose_output_is_missing_is_no_pass(tmp_path: Path) -> None:
    root = build_run_dir(tmp_path, RunSpec(hosts=HOSTS))
    add_node_checks(root, {})
    (root / "hosts" / "node1" / "node" / "loopback-mlx5_4.txt").unlink()
    report = judge(load_run_dir(root))
    check = next(c for c in _node_checks(report, "node1") if c.name == "node/loopback:mlx5_4")
    assert check.status == "warn" and "no readable result" in check.reason


def test_only_the_compute_hcas_are_judged(tmp_path: Path) -> None:
    """A port down on an HCA NCCL does not use (storage, management) is no finding; with no
    compute HCAs named, every port is judged and that one is named."""
    root = build_run_dir(tmp_path, RunSpec(hosts=HOSTS))
    add_node_checks(root, {})
    real = IBSTAT.read_text(encoding="utf-8")
    down = real[real.index("CA 'mlx5_0'") : real.index("..")].replace(
        "mlx5_0", "mlx5_8"
    )  # the real port down
    node = root / "hosts" / "node1" / "node"
    with (node / "ibstat.txt").open("a", encoding="utf-8") as out:
        out.write(down)
    assert judge(load_run_dir(root)).components.findings == ()
    checks = json.loads((node / "checks.json").read_text())
    checks["hcas"] = []
    (node / "checks.json").write_text(json.dumps(checks))
    assert _named(judge(load_run_dir(root))) == [("node1", "port", "mlx5_8:1")]


# The real p2pBandwidthLatencyTest capture (2x RTX 5090, no P2P: ~38 GB/s between the GPUs).
P2P_TEST = (
    Path(__file__).parents[1] / "data" / "corpus" / "other" / "p2pBandwidthLatencyTest-2x-rtx5090-no-p2p.txt"
)
P2P_NOTE = (
    "p2pBandwidthLatencyTest (prebuilt) instead of nvbandwidth: "
    "its copy-engine figures read higher than NCCL gets"
)


def _p2p_test_output(factor: float = 1.0) -> str:
    """The capture (less its shell prompt) with the 0 -> 1 cell of its unidirectional P2P=Enabled
    matrix multiplied: what a node whose copy from GPU 0 to GPU 1 runs slow prints."""
    lines = P2P_TEST.read_text(encoding="utf-8").splitlines()[1:]
    title = next(i for i, line in enumerate(lines) if line.startswith("Unidirectional P2P=Enabled"))
    row = title + 2  # the title, the `D\D 0 1` header, then GPU 0's row
    label, local, peer = lines[row].split()
    assert label == "0"
    lines[row] = f"     0 {local} {float(peer) * factor:6.2f} "
    return "\n".join(lines) + "\n"


def _p2p_test_run(tmp_path: Path, factors: dict[str, float], keep_nvbandwidth: bool = False) -> Path:
    """HOSTS whose GPU matrix came from the prebuilt p2pBandwidthLatencyTest (no nvbandwidth)."""
    root = build_run_dir(tmp_path, RunSpec(hosts=HOSTS))
    add_node_checks(root, {})
    for host in HOSTS:
        node = root / "hosts" / host / "node"
        (node / "p2p-bandwidth-latency.txt").write_text(_p2p_test_output(factors.get(host, 1.0)))
        if keep_nvbandwidth:
            continue
        (node / "nvbandwidth.txt").unlink()
        checks = json.loads((node / "checks.json").read_text())
        matrix = next(c for c in checks["checks"] if c["name"] == "gpu_matrix")
        matrix.update(argv=["/opt/cuda-samples/p2pBandwidthLatencyTest"], files=["p2p-bandwidth-latency.txt"])
        matrix["note"] = P2P_NOTE
        (node / "checks.json").write_text(json.dumps(checks))
    return root


def test_a_p2p_test_pair_low_against_the_fleet_names_that_link(tmp_path: Path) -> None:
    run = load_run_dir(_p2p_test_run(tmp_path, {"node2": 0.6}))
    # No profile: the capture's PCIe-only figures are far below any NVLink line.
    report = judge_components(run.hosts, None)
    assert _named(report) == [("node2", "nvlink", "gpu0--gpu1")]
    finding = report.findings[0]
    assert finding.against.basis == "fleet" and finding.against.nodes == 4
    assert finding.measured == pytest.approx(38.20 * 0.6, abs=0.01)
    measured = {(m.host, m.id, m.metric): m.value for m in report.measurements}
    assert measured[("node1", "gpu0--gpu1", "d2d_write_ce")] == 38.20
    assert measured[("node1", "gpu0--gpu1", "d2d_write_ce_rev")] == 38.66
    assert measured[("node1", "gpu0--gpu1", "p2p_bidir_enabled")] == 43.19
    assert measured[("node1", "gpu0--gpu1", "p2p_unidir_disabled")] == 38.24
    assert measured[("node1", "gpu0--gpu1", "p2p_latency_disabled_gpu")] == 12.83
    latency = next(m for m in report.measurements if m.metric == "p2p_latency_enabled_cpu")
    assert latency.unit == "us"
    assert run.hosts["node1"].node_checks.devices[1]["bus_id"] == "0000:61:00"


def test_a_p2p_test_pair_below_the_profile_line_names_that_link(tmp_path: Path) -> None:
    run = load_run_dir(_p2p_test_run(tmp_path, {"node3": 0.6}))
    h100 = load_profile("h100-sxm")
    # a line just below what the real capture reads, the fleet rule out of play (min_fleet)
    line = dataclasses.replace(h100, node=dataclasses.replace(h100.node, p2p_gbps=36))
    report = judge_components(run.hosts, line, min_fleet=10)
    assert _named(report) == [("node3", "nvlink", "gpu0--gpu1")]
    assert report.findings[0].against.basis == "profile" and report.findings[0].against.value == 36


def test_the_p2p_test_is_a_check_that_ran_with_its_note(tmp_path: Path) -> None:
    run = load_run_dir(_p2p_test_run(tmp_path, {}))
    check = next(c for c in _node_checks(judge(run), "node1") if c.name == "node/gpu_matrix")
    assert check.status == "pass"
    assert run.hosts["node1"].node_checks.check("gpu_matrix").note == P2P_NOTE


def test_nvbandwidth_output_is_read_over_a_p2p_test_output_beside_it(tmp_path: Path) -> None:
    run = load_run_dir(_p2p_test_run(tmp_path, {"node2": 0.1}, keep_nvbandwidth=True))
    record = run.hosts["node2"].node_checks
    assert record.matrix("device_to_device_memcpy_write_ce").row_labels == tuple(str(i) for i in range(8))
    assert record.matrix("p2p_bidir_enabled") is None
    assert judge_components(run.hosts, None).findings == ()
