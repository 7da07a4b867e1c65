"""The HCAs a node's loopbacks test (collbench_py/nodechecks/hcas.py): the pair bar's ports, each
with its nearest GPU and NUMA node, read from a real 8x H100 topo -m."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collbench_py.nodechecks.hcas import host_dir_hcas, loopback_hcas

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"
if not CORPUS.is_dir():
    CORPUS = Path("/work/shared/corpus")
HGX_TOPO = CORPUS / "topo" / "hgx-h100-nv18-8nics-gpu-numa-id-spaces-sglang.txt"

pytestmark = pytest.mark.skipif(not HGX_TOPO.is_file(), reason="the shared corpus is not here")


def port(device: str, state: str = "Active", layer: str = "InfiniBand", rate: float | None = 400) -> dict:
    return {
        "device": device,
        "port": 1,
        "state": state,
        "rate_gbps": rate if state == "Active" else None,
        "link_layer": layer,
    }


def facts(ports: list[dict], gpus: int = 8) -> dict:
    return {"ib": ports, "gpus": [{"index": i} for i in range(gpus)]}


# mlx5_0..7 are PIX to GPU0..7 in the capture; mlx5_8 is a ninth (storage) port no GPU is near.
NINE = [port(f"mlx5_{i}") for i in range(9)]


def names(plan) -> list[str]:
    return [hca.name for hca in plan.hcas]


def test_nccl_ib_hca_of_the_launch_environment_decides_first() -> None:
    plan = loopback_hcas(facts(NINE), HGX_TOPO.read_text(), {"NCCL_IB_HCA": "=mlx5_1,mlx5_5,mlx5_8"})
    assert names(plan) == ["mlx5_1", "mlx5_5", "mlx5_8"]
    assert plan.source.startswith("NCCL_IB_HCA==mlx5_1,mlx5_5,mlx5_8")
    assert [(h.gpu, h.numa_node) for h in plan.hcas] == [(1, 0), (5, 1), (None, None)]


def test_without_nccl_ib_hca_the_nics_pix_to_a_gpu_are_tested_with_that_gpu_and_its_numa_node() -> None:
    plan = loopback_hcas(facts(NINE), HGX_TOPO.read_text(), {})
    assert names(plan) == [f"mlx5_{i}" for i in range(8)]
    assert [hca.gpu for hca in plan.hcas] == list(range(8))
    assert [hca.numa_node for hca in plan.hcas] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert "PIX/PXB" in plan.source


def test_without_topology_every_active_rdma_port_with_gpus_in_index_order() -> None:
    ports = [port("mlx5_0"), port("mlx5_1", state="Down"), port("mlx5_2"), port("mlx5_3")]
    plan = loopback_hcas(facts(ports, gpus=2), None, {})
    assert names(plan) == ["mlx5_0", "mlx5_2", "mlx5_3"]
    assert [hca.gpu for hca in plan.hcas] == [0, 1, 0]
    assert {hca.numa_node for hca in plan.hcas} == {None}  # the node reads it from sysfs
    assert "every active RDMA port" in plan.source


def test_no_rdma_port_gives_no_hca_and_says_why() -> None:
    plan = loopback_hcas(facts([port("mlx5_0", state="Down")]), HGX_TOPO.read_text(), {})
    assert plan.hcas == ()
    assert "no active RDMA port" in plan.source


def test_the_plan_is_read_from_the_host_directory(tmp_path: Path) -> None:
    (tmp_path / "facts.json").write_text(json.dumps(facts(NINE)), encoding="utf-8")
    (tmp_path / "topo.txt").write_text(HGX_TOPO.read_text(), encoding="utf-8")
    hcas = host_dir_hcas(str(tmp_path), {"NCCL_IB_HCA": "=mlx5_6"}).as_config()
    assert hcas == [{"name": "mlx5_6", "port": 1, "gpu": 6, "numa_node": 1}]
    assert host_dir_hcas(str(tmp_path / "missing"), None).as_config() == []
