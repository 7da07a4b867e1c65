"""facts.json from probe outputs: real outputs of this machine's tools and the test cluster's nvidia-smi."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from collbench_py.facts.hostfacts import (
    GPU_QUERY_FIELDS,
    count_amd_gpus,
    fleet_backend,
    gpu_summary,
    host_facts,
    mpi_version,
    parse_gpu_query,
    parse_lscpu,
    parse_rocm_smi_product,
)

STAND_IN = Path(__file__).parents[1] / "cluster" / "nvidia-smi"
TOPOLOGY = Path(__file__).parents[1] / "data/corpus/topo/hgx-h100-nv18-8nics-gpu-numa-id-spaces-sglang.txt"
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


# ---------------------------------------------------------------- AMD GPUs from rocm-smi

ROCM_SMI = Path(__file__).parents[1] / "data" / "rocm-smi"
MI300X_8_TOPO = (
    Path(__file__).parents[1] / "data/corpus/topo/rocm-smi-showtopo-mi300x-8gpu-xgmi-lowpower-warning.txt"
)


@pytest.mark.parametrize(
    ("capture", "count", "name"),
    [
        (ROCM_SMI / "showproductname-mi300x-vf-4gpu.txt", 4, "AMD Instinct MI300X VF"),
        (ROCM_SMI / "showproductname-mi100-rocm4.0.txt", 1, "0x738c"),
        (ROCM_SMI / "showproductname-csv-2x-mi100.txt", 2, "Arcturus GL-XL [AMD Instinct MI100]"),
        (MI300X_8_TOPO, 8, None),  # 8 GPUs, with a low-power warning before the sections
    ],
    ids=lambda value: value.name if isinstance(value, Path) else None,
)
def test_amd_gpus_are_counted_from_real_rocm_smi_output(capture: Path, count: int, name: str | None) -> None:
    text = capture.read_text()
    assert count_amd_gpus(text) == count
    gpus = parse_rocm_smi_product(text)
    assert [g["index"] for g in gpus] == list(range(count))
    assert {g["name"] for g in gpus} == {name}
    assert all(set(g) == {"index", *(k for k in gpus[0] if k != "index")} for g in gpus)


def test_an_amd_node_has_its_gpus_in_facts_and_in_its_summary() -> None:
    text = (ROCM_SMI / "showproductname-mi300x-vf-4gpu.txt").read_text()
    facts = host_facts({"rocm_smi": text})
    assert facts["gpu_vendor"] == "amd" and len(facts["gpus"]) == 4
    assert facts["gpus"][0]["name"] == "AMD Instinct MI300X VF" and facts["gpus"][0]["uuid"] is None
    # nvidia-smi is not installed on an AMD node (127): the count comes from rocm-smi alone
    summary = gpu_summary({"rocm_smi": text}, {"gpu_query": 127, "rocm_smi": 0})
    assert (summary["vendor"], summary["count"], summary["probe"]) == ("amd", 4, "answered")
    assert fleet_backend({"mi300x-1": summary, "mi300x-2": summary}) == {
        "backend": "rccl-tests",
        "dropped": {},
    }


# ---------------------------------------------------------------- a hung or broken nvidia-smi


def nvidia_node(stand_in: str) -> dict[str, object]:
    return gpu_summary({"gpu_query": stand_in}, {"gpu_query": 0, "rocm_smi": 127})


@pytest.fixture(scope="module")
def h100_query(stand_in_config: str) -> str:
    query = f"--query-gpu={','.join(GPU_QUERY_FIELDS)}"
    return run(
        [sys.executable, str(STAND_IN), query, "--format=csv,noheader,nounits"],
        COLLBENCH_FAKE_GPU_CONFIG=stand_in_config,
    )


def test_a_hung_nvidia_smi_drops_its_node_and_the_others_keep_nccl_tests(h100_query: str) -> None:
    hung = gpu_summary({}, {"gpu_query": 124, "nvidia_smi_version": 124, "rocm_smi": 127})
    assert hung["probe"] == "unanswered" and hung["tool"] == "nvidia-smi"
    fleet = {"node1": nvidia_node(h100_query), "node2": hung, "node3": nvidia_node(h100_query)}
    decided = fleet_backend(fleet, "auto", 120)
    assert decided["backend"] == "nccl-tests"
    assert decided["dropped"] == {
        "node2": "nvidia-smi did not answer within collbench_probe_timeout_s (120 s): a GPU in a bad "
        "state; its facts.json lists the probes that did not answer"
    }
    # whatever the backend asked for: a node whose GPU tool hangs cannot be trusted to measure
    assert set(fleet_backend(fleet, "torch", 120)["dropped"]) == {"node2"}


def test_a_failing_or_missing_nvidia_smi_drops_only_its_node_in_an_nvidia_fleet(h100_query: str) -> None:
    failing = gpu_summary({}, {"gpu_query": 9, "rocm_smi": 127})  # "couldn't communicate with the driver"
    missing = gpu_summary({}, {"gpu_query": 127, "rocm_smi": 127})
    assert (failing["probe"], failing["rc"], missing["probe"]) == ("failed", 9, "none")
    decided = fleet_backend({"a": nvidia_node(h100_query), "b": failing, "c": missing}, "auto", 120)
    assert decided["backend"] == "nccl-tests"
    assert decided["dropped"]["b"].startswith(
        "nvidia-smi is installed but failed (exit 9) while the other hosts"
    )
    assert decided["dropped"]["c"].startswith("no GPU found (nvidia-smi not installed or lists none)")


def test_a_fleet_without_gpus_runs_torch_and_keeps_every_node() -> None:
    cpu = gpu_summary({}, {"gpu_query": 127, "rocm_smi": 127})
    broken = gpu_summary({}, {"gpu_query": 9, "rocm_smi": 127})  # no other node has NVIDIA GPUs
    assert fleet_backend({"a": cpu, "b": cpu, "c": broken}, "auto", 5) == {"backend": "torch", "dropped": {}}


def test_two_vendors_run_torch(h100_query: str) -> None:
    amd = gpu_summary(
        {"rocm_smi": (ROCM_SMI / "showproductname-mi100-rocm4.0.txt").read_text()}, {"rocm_smi": 0}
    )
    assert fleet_backend({"a": nvidia_node(h100_query), "b": amd}) == {"backend": "torch", "dropped": {}}
