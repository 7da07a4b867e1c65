"""facts.json from probe outputs: real outputs of this machine's tools and the test cluster's nvidia-smi."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from collbench_py.hostfacts import GPU_QUERY_FIELDS, host_facts, mpi_version, parse_gpu_query, parse_lscpu

STAND_IN = Path(__file__).parent / "cluster" / "nvidia-smi"
TOPOLOGY = Path(__file__).parent / "data/corpus/topo/hgx-h100-nv18-8nics-gpu-numa-id-spaces-sglang.txt"
SCHEMA_KEYS = {
    "hostname", "inventory_hostname", "collected_at", "gpus", "gpu_vendor", "driver_version",
    "cuda_version", "nccl_version", "mpi_version", "torch_version", "ib", "cpu", "numa_nodes",
    "memory_mib", "os", "unanswered",
}  # fmt: skip


def run(argv: list[str], **env: str) -> str:
    return subprocess.run(
        argv, capture_output=True, text=True, check=True, env={**os.environ, "LC_ALL": "C", **env}
    ).stdout


@pytest.fixture(scope="module")
def stand_in_config(tmp_path_factory: pytest.TempPathFactory) -> str:
    config = tmp_path_factory.mktemp("gpu") / "nvidia-smi.json"
    config.write_text(
        json.dumps(
            {
                "topology": str(TOPOLOGY),
                "name": "NVIDIA H100 80GB HBM3",
                "memory_mib": 81559,
                "compute_cap": "9.0",
                "power_limit_w": 700,
                "max_sm_clock_mhz": 1980,
                "pcie_gen": 5,
                "pcie_width": 16,
                "driver_version": "580.95.05",
                "cuda_version": "13.0",
            }
        )
    )
    return str(config)


def test_gpu_query_of_the_cluster_nvidia_smi(stand_in_config: str) -> None:
    query = f"--query-gpu={','.join(GPU_QUERY_FIELDS)}"
    text = run(
        [sys.executable, str(STAND_IN), query, "--format=csv,noheader,nounits"],
        COLLBENCH_FAKE_GPU_CONFIG=stand_in_config,
    )
    gpus = parse_gpu_query(text)
    assert len(gpus) == 8
    assert [g["index"] for g in gpus] == list(range(8))
    first = gpus[0]
    assert first["name"] == "NVIDIA H100 80GB HBM3"
    assert first["memory_total_mib"] == 81559
    assert first["uuid"].startswith("GPU-")
    assert first["pci_bus_id"] == "00000000:18:00.0"
    assert (first["pcie_gen_current"], first["pcie_width_max"]) == (5, 16)
    assert first["driver_version"] == "580.95.05"


def test_not_available_cells_become_none() -> None:
    # nvidia-smi prints `[N/A]` / `[Not Supported]` for values a GPU cannot tell.
    line = "NVIDIA A100-SXM4-40GB, GPU-1, 40960, 00000000:07:00.0, 535.54.03, [N/A], 4, [Not Supported], 16"
    (gpu,) = parse_gpu_query(line)
    assert gpu["pcie_gen_current"] is None and gpu["pcie_width_current"] is None
    assert gpu["pcie_gen_max"] == 4


@pytest.mark.skipif(not shutil.which("lscpu"), reason="no lscpu")
def test_lscpu_of_this_machine() -> None:
    cpu, numa = parse_lscpu(run(["lscpu"]))
    assert cpu["threads"] == os.cpu_count()
    assert cpu["model"]
    assert cpu["sockets"] >= 1 and cpu["cores"] >= 1
    assert numa is None or numa >= 1


@pytest.mark.skipif(not shutil.which("mpirun"), reason="no mpirun")
def test_mpirun_version_of_this_machine() -> None:
    version = mpi_version(run(["mpirun", "--version"]))
    assert version is not None and version.split()[-1][0].isdigit()


def test_every_schema_key_is_present_when_nothing_could_be_probed() -> None:
    facts = host_facts({"hostname": "n1", "inventory_hostname": "n1"})
    assert set(facts) == SCHEMA_KEYS
    assert facts["gpus"] == [] and facts["ib"] == []
    assert facts["gpu_vendor"] is None and facts["cuda_version"] is None
    assert facts["unanswered"] == []
    hung = host_facts({"hostname": "n1", "unanswered": ["nvidia_smi_version", "gpu_query"]})
    assert hung["unanswered"] == ["gpu_query", "nvidia_smi_version"] and hung["gpus"] == []
