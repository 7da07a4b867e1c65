"""The fabric bar of host pairs: which NICs NCCL uses on a host, their line rate, and per collective
what a pair should reach.

A node often has more RDMA ports than NCCL uses: storage ports, a second card for the management
network, or `NCCL_IB_HCA` naming only some HCAs. Summing every active port gives a bar a healthy
ring cannot reach. The ports counted are, in this order of authority:

1. those `NCCL_IB_HCA` selects (NCCL's syntax: `^` excludes, `=` matches names exactly, otherwise
   by prefix, `dev:port` names one port), read from the pair logs (`NCCL_IB_HCA set by environment
   to ...`) or the run's launch environment recorded in the manifest;
2. otherwise the NICs `nvidia-smi topo -m` places next to a GPU (PIX or PXB): NCCL takes the NIC
   closest to each GPU, so a NIC no GPU is near carries no ring traffic;
3. otherwise every active port with an RDMA link layer (InfiniBand, or Ethernet for RoCE); where
   both are present and nothing else tells, the InfiniBand ones (storage rides Ethernet).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from collbench_py.models import Topology
from collbench_py.profiles import InterExpectation, Profile
from collbench_py.rundir import Host, LogData

GPU_ATTACHED = frozenset({"PIX", "PXB"})
RDMA_LINK_LAYERS = frozenset({"infiniband", "ethernet"})  # Ethernet on an RDMA device is RoCE


@dataclass(frozen=True)
class NicLine:
    gbs: float  # summed one-way line rate of the ports counted, GB/s
    ports: tuple[str, ...]  # "mlx5_0:1"
    source: str  # why these ports


@dataclass(frozen=True)
class PairBar:
    """What the pairs of one collective must reach, or why nothing absolute applies."""

    expectation: InterExpectation
    threshold: float | None  # GB/s; None: fleet-relative only
    text: str  # how the threshold was made, with its sources


def nccl_ib_hca(logs: Iterable[LogData], parameters: Mapping[str, Any]) -> tuple[str | None, str]:
    """`NCCL_IB_HCA` of the pair launches, and where it was read."""
    for log in logs:
        for run in log.runs:
            value = run.settings.get("NCCL_IB_HCA")
            if value:
                return value.strip(), f"NCCL_IB_HCA={value.strip()} (printed in {log.launch.log})"
    env = parameters.get("launch_env")
    if isinstance(env, Mapping) and isinstance(env.get("NCCL_IB_HCA"), str) and env["NCCL_IB_HCA"].strip():
        value = env["NCCL_IB_HCA"].strip()
        return value, f"NCCL_IB_HCA={value} (the run's launch environment in manifest.json)"
    return None, ""


def hca_matcher(spec: str) -> Callable[[str, int | None], bool]:
    """NCCL's reading of `NCCL_IB_HCA`: whether a device (and port) is one NCCL uses."""
    spec = spec.strip()
    exclude = spec.startswith("^")
    spec = spec.removeprefix("^")
    exact = spec.startswith("=")
    spec = spec.removeprefix("=")
    entries = []
    for item in (part.strip() for part in spec.split(",")):
        if item:
            name, _, port = item.partition(":")
            entries.append((name, int(port) if port.isdigit() else None))

    def listed(device: str, port: int | None) -> bool:
        return any(
            (device == name if exact else device.startswith(name)) and (want is None or want == port)
            for name, want in entries
        )

    return lambda device, port: listed(device, port) != exclude


def gpu_attached_nics(topology: Topology | None) -> set[str]:
    """Device names of the NICs that are PIX or PXB to at least one GPU."""
    if topology is None:
        return set()
    out: set[str] = set()
    for gpu in topology.gpus:
        for label, cell in (topology.links.get(gpu) or {}).items():
            if cell in GPU_ATTACHED and not label.startswith("GPU"):
                out.add(topology.nics.get(label, label))
    return out


def _active_rdma_ports(host: Host) -> list[dict[str, Any]]:
    ports = []
    for port in (host.facts or {}).get("ib") or []:
        if not isinstance(port, dict) or not port.get("rate_gbps") or not port.get("device"):
            continue
        if not str(port.get("state") or "").lower().endswith("active"):
            continue
        layer = port.get("link_layer")
        if layer is None or str(layer).lower() in RDMA_LINK_LAYERS:
            ports.append(port)
    return ports


def _label(port: Mapping[str, Any]) -> str:
    return f"{port['device']}:{port.get('port') or 1}"


def nccl_nic_line(host: Host, hca: str | None = None, hca_source: str = "") -> NicLine | None:
    """The line rate of the ports NCCL would use on this host; None when no port is known."""
    ports = _active_rdma_ports(host)
    if not ports:
        return None
    if hca:
        matches = hca_matcher(hca)
        chosen = [p for p in ports if matches(str(p["device"]), p.get("port"))]
        source = hca_source
    else:
        attached = gpu_attached_nics(host.topology)
        near = [p for p in ports if p["device"] in attached]
        layers = {str(p.get("link_layer") or "").lower() for p in ports}
        if near:
            chosen = near
            source = f"the NICs PIX/PXB to a GPU in topo -m ({len(near)} of {len(ports)} active RDMA ports)"
        elif {"infiniband", "ethernet"} <= layers:
            chosen = [p for p in ports if str(p.get("link_layer") or "").lower() == "infiniband"]
            source = (
                f"the InfiniBand ports ({len(chosen)} of {len(ports)}; Ethernet taken for storage: "
                "no topo -m names the GPU-attached NICs)"
            )
        else:
            chosen = ports
            source = f"every active RDMA port ({len(ports)}; no topo -m names the GPU-attached NICs)"
    if not chosen:
        return None
    return NicLine(sum(float(p["rate_gbps"]) for p in chosen) / 8, tuple(_label(p) for p in chosen), source)


def pair_bar(
    collective: str,
    profile: Profile | None,
    hosts: Iterable[Host],
    hca: tuple[str | None, str] = (None, ""),
) -> PairBar | None:
    """The bar for the pairs of one collective, from the profile and the hosts' NCCL NIC lines."""
    if profile is None:
        return None
    expectation = profile.inter_expectation(collective)
    pass_at = profile.pass_fraction
    if expectation.basis == "busbw" and expectation.busbw is not None:
        threshold = expectation.busbw * pass_at
        text = (
            f"{threshold:.3g} GB/s needed ({pass_at:.0%} of the {expectation.busbw:g} GB/s profile "
            f"{profile.name} gives {collective}; source: {expectation.source})"
        )
        return PairBar(expectation, threshold, text)
    if expectation.basis == "fleet" or expectation.fraction is None:
        return PairBar(expectation, None, f"no absolute bar for {collective}: {expectation.source}")
    lines = [line for h in hosts if (line := nccl_nic_line(h, *hca)) is not None]
    if not lines:
        missing = f"no absolute bar for {collective}: no host reports an active RDMA port"
        return PairBar(expectation, None, missing)
    gbs = statistics.median(line.gbs for line in lines)
    typical = min(lines, key=lambda line: abs(line.gbs - gbs))
    threshold = gbs * expectation.fraction * pass_at
    text = (
        f"{threshold:.3g} GB/s needed ({pass_at:.0%} of {expectation.fraction:.0%} of the {gbs:g} GB/s "
        f"line rate per host of {len(typical.ports)} port(s) NCCL uses: {typical.source}; "
        f"source of the fraction: {expectation.source})"
    )
    return PairBar(expectation, threshold, text)
