"""Per-component verdicts on the real node-check samples and on degraded copies made from them (one
cell, one GPU's row and column, one link down, one port narrowed): each rule names exactly the
component that was degraded, and a healthy real sample gives no finding."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from collbench_py.parsers import ibports, nvbandwidth, nvlink, perftest
from collbench_py.parsers.models import Matrix
from collbench_py.profiles import load_profile
from collbench_py.verdicts.components import (
    fleet_matrix_findings,
    gpu_matrix_findings,
    loopback_findings,
    nvlink_findings,
    port_findings,
)

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"
H100_D2D = CORPUS / "nvbandwidth" / "azure-nhc-h100-8gpu-d2d-read-ce-v0.4.txt"
H800_ALL = CORPUS / "nvbandwidth" / "h800-8gpu-all-testcases-v0.2.txt"
H100_LINKS = CORPUS / "nvlink" / "gke-a3-h100-1gpu-pod-nvlink-status-tab-indent.txt"
B300_LINKS = CORPUS / "nvlink" / "dell-b300-7-of-8-gpus-nvlink-status-18x53.125.txt"
CX5_PORTS = CORPUS / "ib" / "cx5-rdma-link-show-and-ibdev2netdev-2-ports-up.txt"
CX7_PORTS = CORPUS / "ib" / "cx7-roce-ibstat-port-down-disabled-rate40-elided-plus-ibdev2netdev.txt"
ROCM_LOOPBACK = CORPUS / "perftest" / "rocm-docs-write-bw-bidir-all-sizes-roce-gid3-use-rocm.txt"
NO_DEVICE = CORPUS / "perftest" / "no-rdma-device-in-container-unable-to-find-device.txt"

H100 = load_profile("h100-sxm").node


def _parse(module, path: Path):
    return module.parse(path.read_text(encoding="utf-8"), str(path))


def _matrix(path: Path, name: str) -> Matrix:
    return next(m for m in _parse(nvbandwidth, path).matrices if m.name == name)


def _d2d() -> Matrix:
    return _matrix(H100_D2D, "device_to_device_memcpy_read_ce")


def _scaled(matrix: Matrix, factor: float, cells: set[tuple[str, str]]) -> Matrix:
    """A copy with the given (row, column) cells multiplied by `factor`."""
    values = tuple(
        tuple(
            value * factor if value is not None and (row, col) in cells else value
            for col, value in zip(matrix.col_labels, values, strict=True)
        )
        for row, values in zip(matrix.row_labels, matrix.values, strict=True)
    )
    return dataclasses.replace(matrix, values=values)


def _row_and_column(matrix: Matrix, gpu: str) -> set[tuple[str, str]]:
    return {(r, c) for r in matrix.row_labels for c in matrix.col_labels if gpu in (r, c) and r != c}


def _ids(findings) -> list[tuple[str, str, str]]:
    return sorted((f.kind, f.id, f.severity) for f in findings)


# --- the GPU matrix against the profile line ---


def test_healthy_h100_matrix_has_no_finding() -> None:
    matrix = _d2d()
    # the real capture reads 370-373 GB/s: above the 335 line and its 5 % warning band
    assert min(v for row in matrix.values for v in row if v is not None) > H100.p2p_gbps * 1.05
    assert gpu_matrix_findings("node1", matrix, H100.p2p_gbps) == []


def test_one_gpu_slow_in_its_row_and_column_names_that_gpu_only() -> None:
    matrix = _d2d()
    slow = _scaled(matrix, 0.5, _row_and_column(matrix, "3"))
    findings = gpu_matrix_findings("node1", slow, H100.p2p_gbps, source=H100.source or "")
    assert _ids(findings) == [("gpu", "3", "fail")]
    (finding,) = findings
    assert finding.action == "reseat"
    assert finding.against is not None and finding.against.value == 335
    assert finding.measured is not None and finding.measured < 335
    assert "Azure" in finding.reason


def test_one_pair_slow_names_the_link_not_the_gpus() -> None:
    matrix = _d2d()
    slow = _scaled(matrix, 0.5, {("3", "5"), ("5", "3")})
    findings = gpu_matrix_findings("node2", slow, H100.p2p_gbps)
    assert _ids(findings) == [("nvlink", "3--5", "fail")]
    assert findings[0].action == "ticket"
    assert findings[0].host == "node2"


def test_every_gpu_low_is_one_finding_for_the_board_not_eight_reseats() -> None:
    matrix = _d2d()
    everything = {(r, c) for r in matrix.row_labels for c in matrix.col_labels}
    findings = gpu_matrix_findings("node1", _scaled(matrix, 0.5, everything), H100.p2p_gbps)
    assert _ids(findings) == [("gpu", "all", "fail")]
    assert findings[0].action == "ticket"


def test_a_pair_within_five_percent_above_the_line_warns() -> None:
    matrix = _d2d()
    # 370.9 * 0.92 = 341.2 GB/s: above 335, below 335 * 1.05 = 351.75
    near = _scaled(matrix, 0.92, {("1", "2")})
    assert _ids(gpu_matrix_findings("node1", near, H100.p2p_gbps)) == [("nvlink", "1--2", "warn")]


def test_host_to_device_names_the_gpu_of_the_low_cell() -> None:
    h2d = _matrix(H800_ALL, "host_to_device_memcpy_ce")
    assert gpu_matrix_findings("node1", h2d, H100.h2d_gbps) == []  # real: 55.3 GB/s per GPU
    slow = _scaled(h2d, 0.5, {("0", "6")})
    findings = gpu_matrix_findings("node1", slow, H100.h2d_gbps)
    assert _ids(findings) == [("gpu", "6", "fail")]


# --- fleet-relative: the same cell on nodes of the same SKU ---


def _fleet(**degraded: Matrix) -> dict[str, Matrix]:
    fleet = {f"node{i}": _d2d() for i in range(1, 5)}
    return fleet | degraded


def test_healthy_fleet_has_no_finding() -> None:
    assert fleet_matrix_findings(_fleet(), min_drop=0.05) == []


def test_a_cell_low_against_the_fleet_is_a_finding_even_above_the_line() -> None:
    matrix = _d2d()
    # 0.9 of 370.9 = 333.8: a 10 % drop against the fleet; scaled 0.93 = 345 is above the 335 line
    slow = _scaled(matrix, 0.93, {("3", "5"), ("5", "3")})
    assert all(v > H100.p2p_gbps for row in slow.values for v in row if v is not None)
    findings = fleet_matrix_findings(_fleet(node2=slow), min_drop=0.05)
    assert _ids(findings) == [("nvlink", "3--5", "warn")]
    assert findings[0].host == "node2"
    assert findings[0].against is not None and findings[0].against.basis == "fleet"
    assert findings[0].against.nodes == 4


def test_a_gpu_half_the_fleet_median_fails() -> None:
    matrix = _d2d()
    slow = _scaled(matrix, 0.4, _row_and_column(matrix, "6"))
    assert _ids(fleet_matrix_findings(_fleet(node3=slow), min_drop=0.05)) == [("gpu", "6", "fail")]


def test_a_drop_below_min_drop_is_no_finding_and_too_few_nodes_no_verdict() -> None:
    matrix = _d2d()
    slight = _scaled(matrix, 0.97, {("3", "5"), ("5", "3")})
    assert fleet_matrix_findings(_fleet(node2=slight), min_drop=0.05) == []
    slow = _scaled(matrix, 0.5, {("3", "5"), ("5", "3")})
    assert fleet_matrix_findings({"node1": matrix, "node2": slow}, min_drop=0.05) == []


# --- NVLink state and counters ---


def test_healthy_links_have_no_finding() -> None:
    gpus = _parse(nvlink, H100_LINKS).records
    assert nvlink_findings("node1", gpus, H100.nvlinks_per_gpu) == []
    b300 = _parse(nvlink, B300_LINKS).records
    assert nvlink_findings("node1", b300, 18) == []


def _link_down(gpus, gpu: int, link: int):
    out = []
    for g in gpus:
        links = tuple(
            dataclasses.replace(x, state="down", speed_gbs=None) if (g.index, x.link) == (gpu, link) else x
            for x in g.links
        )
        out.append(dataclasses.replace(g, links=links))
    return out


def test_a_link_down_names_gpu_and_link_and_the_missing_count() -> None:
    gpus = _link_down(_parse(nvlink, B300_LINKS).records, gpu=4, link=7)
    findings = nvlink_findings("node4", gpus, 18)
    assert _ids(findings) == [("gpu", "4", "fail"), ("nvlink", "4/link7", "fail")]
    count = next(f for f in findings if f.kind == "gpu")
    assert count.measured == 17
    assert count.serial == gpus[4].uuid


def test_fewer_links_by_design_are_judged_against_the_profile_not_18() -> None:
    # a system with 12 links per GPU by design: the real 18 links with 6 removed
    gpus = [dataclasses.replace(g, links=g.links[:12]) for g in _parse(nvlink, H100_LINKS).records]
    assert nvlink_findings("node1", gpus, 12) == []
    assert _ids(nvlink_findings("node1", gpus, 18)) == [("gpu", "0", "fail")]


def test_a_slower_link_is_named() -> None:
    gpus = _parse(nvlink, B300_LINKS).records
    slow = [
        dataclasses.replace(
            g,
            links=tuple(
                dataclasses.replace(x, speed_gbs=x.speed_gbs / 2) if (g.index, x.link) == (2, 9) else x
                for x in g.links
            ),
        )
        for g in gpus
    ]
    assert _ids(nvlink_findings("node1", slow, 18)) == [("nvlink", "2/link9", "fail")]


def _with_counters(gpus, values: dict[tuple[int, int], int]):
    """The real `-s` sample with `-e` counters: 0 everywhere but the given (gpu, link)."""
    return [
        dataclasses.replace(
            g,
            links=tuple(
                dataclasses.replace(
                    x,
                    counters={
                        "replay_errors": 0,
                        "recovery_errors": 0,
                        "crc_errors": values.get((g.index, x.link), 0),
                    },
                )
                for x in g.links
            ),
        )
        for g in gpus
    ]


def test_an_error_counter_that_grew_during_the_run_is_named() -> None:
    gpus = _parse(nvlink, B300_LINKS).records
    before = _with_counters(gpus, {(5, 3): 2})
    assert nvlink_findings("node1", gpus, 18, before, before) == []  # not zero but did not grow
    after = _with_counters(gpus, {(5, 3): 3})
    findings = nvlink_findings("node1", gpus, 18, before, after)
    assert _ids(findings) == [("nvlink", "5/link3", "fail")]
    assert findings[0].measured == 1


# --- NIC ports ---


def test_healthy_ports_have_no_finding() -> None:
    assert port_findings("node1", _parse(ibports, CX5_PORTS).records) == []


def test_a_port_down_is_named() -> None:
    findings = port_findings("node1", _parse(ibports, CX7_PORTS).records)
    assert _ids(findings) == [("port", "mlx5_0/1", "fail")]
    assert findings[0].action == "swap"


def _ib_ports(width: str = "4X", rate: float = 400.0):
    """The real cx5 ports with the width and rate an `ibstat`/`ibv_devinfo -v` would add."""
    return [dataclasses.replace(p, width=width, rate_gbps=rate) for p in _parse(ibports, CX5_PORTS).records]


def test_a_narrowed_port_is_named() -> None:
    ports = _ib_ports()
    assert port_findings("node1", ports) == []
    ports[1] = dataclasses.replace(ports[1], width="1X")
    assert _ids(port_findings("node1", ports)) == [("port", "mlx5_1/1", "fail")]


def test_a_port_below_the_others_or_the_profile_rate_is_named() -> None:
    ports = _ib_ports()
    ports[0] = dataclasses.replace(ports[0], rate_gbps=200.0)
    assert _ids(port_findings("node1", ports)) == [("port", "mlx5_0/1", "fail")]
    # all alike but below the profile's rate: each is named against the profile
    findings = port_findings("node1", _ib_ports(rate=200.0), rate_gbps=400.0)
    assert _ids(findings) == [("port", "mlx5_0/1", "fail"), ("port", "mlx5_1/1", "fail")]
    assert findings[0].against is not None and findings[0].against.basis == "profile"


# --- per-HCA loopback ---


def test_loopback_against_the_line() -> None:
    (run,) = _parse(perftest, ROCM_LOOPBACK).records  # real: 204.59 Gb/s at 8 MiB
    assert loopback_findings("node1", {"mlx5_0": run}, 180) == []
    findings = loopback_findings("node1", {"mlx5_0": run, "mlx5_2": run}, H100.hca_loopback_gbits)
    assert _ids(findings) == [("hca", "mlx5_0", "fail"), ("hca", "mlx5_2", "fail")]
    assert findings[0].measured == pytest.approx(204.59)
    # 204.59 is within 5 % above a 200 line: a warning
    assert _ids(loopback_findings("node1", {"mlx5_2": run}, 200)) == [("hca", "mlx5_2", "warn")]


def test_a_loopback_that_never_ran_is_a_finding_not_a_pass() -> None:
    (failed,) = _parse(perftest, NO_DEVICE).records
    findings = loopback_findings("node1", {"mlx5_3": failed}, 380)
    assert _ids(findings) == [("hca", "mlx5_3", "fail")]
    assert "Unable to find" in findings[0].reason


def test_shipped_profiles_carry_the_anchor_lines() -> None:
    lines = {name: load_profile(name).node for name in ("h100-sxm", "h200", "a100-sxm", "b200-8gpu")}
    assert (lines["h100-sxm"].p2p_gbps, lines["h100-sxm"].h2d_gbps, lines["h100-sxm"].hca_loopback_gbits) == (
        335,
        48,
        380,
    )
    assert (lines["h200"].p2p_gbps, lines["h200"].hca_loopback_gbits) == (335, 360)
    assert (lines["a100-sxm"].p2p_gbps, lines["a100-sxm"].d2h_gbps, lines["a100-sxm"].nvlinks_per_gpu) == (
        235,
        21,
        12,
    )
    assert lines["b200-8gpu"].p2p_gbps is None and lines["b200-8gpu"].nvlinks_per_gpu == 18
    assert load_profile("pcie-gen5").node.p2p_gbps is None  # an old profile stays valid
