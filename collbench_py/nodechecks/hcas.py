"""Which HCAs a node's loopback tests cover, each with its nearest GPU and its NUMA node.

The HCAs are those the pair bar counts (collbench_py/verdicts/fabric.py, `nccl_nic_line`): the
ones `NCCL_IB_HCA` of the launch environment selects, else the NICs `nvidia-smi topo -m` puts PIX
or PXB to a GPU, else the active RDMA ports of facts.json. A loopback then measures the same ports
the pairs ran over, so a slow HCA and a slow pair point at the same component.

Each HCA is paired with the GPU closest to it in topo -m (PIX, then PXB, PHB, NODE, SYS; the lower
index on a tie) and takes that GPU's NUMA affinity. Without topo -m the GPUs are paired in index
order and the NUMA node is left to the node (its sysfs); an HCA topo -m does not place near any
GPU gets none (its loopback uses host memory).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from collbench_py.parsers import parse_text
from collbench_py.parsers.models import ParseError, Topology
from collbench_py.rundir.load import Host
from collbench_py.verdicts.fabric import nccl_nic_line

# Closer first: the cells of topo -m between a GPU and a NIC.
CLOSENESS = ("PIX", "PXB", "PHB", "NODE", "SYS")


@dataclass(frozen=True)
class LoopbackHca:
    name: str
    port: int
    gpu: int | None
    numa_node: int | None


@dataclass(frozen=True)
class HcaPlan:
    hcas: tuple[LoopbackHca, ...]
    source: str  # why these HCAs (the pair bar's words), or why none

    def as_config(self) -> list[dict[str, Any]]:
        return [asdict(hca) for hca in self.hcas]


def topology_of(text: str | None) -> Topology | None:
    """The topo -m matrix of a host, or None when it printed none."""
    if not text or not text.strip():
        return None
    try:
        return parse_text(text, file="topo.txt").topology
    except ParseError:
        return None


def gpu_index(gpu_label: str) -> int | None:
    """3 for "GPU3"; None for a label that is not a numbered GPU."""
    digits = gpu_label.removeprefix("GPU")
    return int(digits) if digits.isdigit() else None


def closeness(topology: Topology, gpu: str, device: str) -> int | None:
    """How close NIC `device` (an HCA name, or topo -m's own NIC label) is to GPU `gpu`: the
    position of its closest topo -m cell in CLOSENESS (0 is PIX), None when topo -m places none."""
    labels = [label for label, name in topology.nics.items() if name == device] or [device]
    cells = [(topology.links.get(gpu) or {}).get(label) for label in labels]
    ranks = [CLOSENESS.index(cell) for cell in cells if cell in CLOSENESS]
    return min(ranks) if ranks else None


def _nearest_gpu(topology: Topology, device: str) -> str | None:
    best: tuple[int, int, str] | None = None
    for gpu in topology.gpus:
        rank = closeness(topology, gpu, device)
        if rank is not None:
            candidate = (rank, gpu_index(gpu) or 0, gpu)
            best = candidate if best is None or candidate < best else best
    return best[2] if best else None


def _numa(topology: Topology, gpu: str | None) -> int | None:
    value = topology.numa_affinity.get(gpu) if gpu else None
    return int(value) if value is not None and str(value).isdigit() else None


def loopback_hcas(
    facts: Mapping[str, Any] | None, topo_text: str | None, launch_env: Mapping[str, Any] | None
) -> HcaPlan:
    """The HCAs of one host's loopback tests (empty: the node lists its active ports itself)."""
    topology = topology_of(topo_text)
    host = Host(
        name="node", inventory_hostname="node", status="ok", facts=dict(facts or {}), topology=topology
    )
    hca = str((launch_env or {}).get("NCCL_IB_HCA") or "").strip() or None
    line = nccl_nic_line(host, hca, f"NCCL_IB_HCA={hca} (collbench_launch_env)" if hca else "")
    if line is None:
        selected = f" selected by NCCL_IB_HCA={hca}" if hca else ""
        return HcaPlan((), f"no active RDMA port in facts.json{selected}")
    gpu_count = len((facts or {}).get("gpus") or [])
    chosen = []
    for position, label in enumerate(line.ports):
        device, _, port = label.rpartition(":")
        gpu_label = _nearest_gpu(topology, device) if topology else None
        if gpu_label is not None:
            gpu, numa = gpu_index(gpu_label), _numa(topology, gpu_label)
        elif topology is None and gpu_count:
            gpu, numa = position % gpu_count, None
        else:  # topo -m does not place it near any GPU: the loopback uses host memory
            gpu, numa = None, None
        chosen.append(LoopbackHca(device, int(port), gpu, numa))
    return HcaPlan(tuple(chosen), line.source)


def read_host_dir(host_dir: str | Path) -> tuple[dict[str, Any] | None, str | None]:
    """A run directory host's facts.json (None when missing or not an object) and topo.txt text."""
    root = Path(host_dir)
    try:
        facts = json.loads((root / "facts.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        facts = None
    try:
        topo_text = (root / "topo.txt").read_text(encoding="utf-8")
    except OSError:
        topo_text = None
    return (facts if isinstance(facts, dict) else None), topo_text


def host_dir_hcas(host_dir: str | Path, launch_env: Mapping[str, Any] | None) -> HcaPlan:
    """The plan of the host whose run directory is `host_dir` (its facts.json and topo.txt)."""
    facts, topo_text = read_host_dir(host_dir)
    return loopback_hcas(facts, topo_text, launch_env)
