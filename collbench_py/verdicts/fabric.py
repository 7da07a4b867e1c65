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

A bar taken from `NCCL_IB_HCA` is only as good as the setting: one that leaves out active
GPU-attached ports makes NCCL run on fewer rails, and the bar drops with it, so a fabric at half
speed would pass. `hca_check` says so (a `warn` naming the ports), as it says when a name without
`=` selects more devices than written (`mlx5_1` also selects `mlx5_10` and `mlx5_11`). The bar
stays the one of the ports NCCL was told to use: the pairs measured that configuration, and the
hardware is not at fault for it; the warning, and the bar the GPU-attached ports would give,
stand next to it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from collbench_py.parsers.models import Topology
from collbench_py.profiles import InterExpectation, Profile
from collbench_py.rundir.load import Host, LogData
from collbench_py.verdicts.model import Check

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


@dataclass(frozen=True)
class HcaSpec:
    """`NCCL_IB_HCA` as NCCL parses it."""

    exclude: bool  # `^`: every device but these
    exact: bool  # `=`: whole names, else each name is a prefix
    entries: tuple[tuple[str, int | None], ...]  # (device name or prefix, port or None)


def parse_hca(spec: str) -> HcaSpec:
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
    return HcaSpec(exclude, exact, tuple(entries))


def hca_matcher(spec: str) -> Callable[[str, int | None], bool]:
    """NCCL's reading of `NCCL_IB_HCA`: whether a device (and port) is one NCCL uses."""
    parsed = parse_hca(spec)

    def listed(device: str, port: int | None) -> bool:
        return any(
            (device == name if parsed.exact else device.startswith(name)) and (want is None or want == port)
            for name, want in parsed.entries
        )

    return lambda device, port: listed(device, port) != parsed.exclude


def gpu_attached_nics(topology: Topology | None) -> set[str]:
    """Device names of the NICs that are PIX or PXB to at least one GPU."""
    return set(_nic_gpus(topology))


def _nic_gpus(topology: Topology | None) -> dict[str, list[str]]:
    """Device name of each NIC PIX or PXB to a GPU -> those GPUs, in topo -m's order."""
    out: dict[str, list[str]] = {}
    if topology is None:
        return out
    for gpu in topology.gpus:
        for label, cell in (topology.links.get(gpu) or {}).items():
            if cell in GPU_ATTACHED and not label.startswith("GPU"):
                out.setdefault(topology.nics.get(label, label), []).append(gpu)
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
    hosts = list(hosts)
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
    return PairBar(
        expectation, threshold, text + _left_out_clause(hosts, hca[0], expectation.fraction * pass_at)
    )


def _left_out_clause(hosts: Iterable[Host], spec: str | None, share: float) -> str:
    """What the bar would be with the GPU-attached ports `NCCL_IB_HCA` leaves out (empty: none)."""
    if not spec:
        return ""
    short = [c for h in hosts if (c := hca_coverage(h, spec)) is not None and c.left_out]
    if not short:
        return ""
    attached = statistics.median(c.attached_gbs for c in short)
    return (
        f"; NCCL_IB_HCA leaves out {len(short[0].left_out)} active GPU-attached port(s) on {len(short)} "
        f"host(s): with them the bar would be {attached * share:.3g} GB/s (fabric/nccl_ib_hca)"
    )


@dataclass(frozen=True)
class HcaCoverage:
    """What `NCCL_IB_HCA` does on one host, against its active GPU-attached RDMA ports."""

    host: str
    left_out: tuple[str, ...]  # "mlx5_4:1 (GPU4)": active, PIX/PXB to a GPU, not selected
    beyond: tuple[str, ...]  # "mlx5_10 (by mlx5_1)": a device a name without `=` matches by prefix
    selected_gbs: float  # line rate of the active RDMA ports selected, GB/s
    attached_gbs: float  # line rate of the active GPU-attached RDMA ports, GB/s
    attached: int  # how many active GPU-attached RDMA ports (0 also when topo -m names none)


def hca_coverage(host: Host, spec: str) -> HcaCoverage | None:
    """None when the host reports no active RDMA port."""
    ports = _active_rdma_ports(host)
    if not ports:
        return None
    matches = hca_matcher(spec)
    nic_gpus = _nic_gpus(host.topology)
    attached = [p for p in ports if p["device"] in nic_gpus]
    left_out = tuple(
        f"{_label(p)} ({', '.join(nic_gpus[p['device']])})"
        for p in attached
        if not matches(str(p["device"]), p.get("port"))
    )
    parsed = parse_hca(spec)
    devices = {str(p.get("device")) for p in (host.facts or {}).get("ib") or [] if isinstance(p, dict)}
    devices |= set((host.topology.nics if host.topology else {}).values())
    # A name that is a whole device here (`mlx5_1`) but also the prefix of others (`mlx5_10`) was
    # meant as that device; a name that is no device (`mlx5`) is a prefix on purpose.
    beyond: list[str] = []
    if not parsed.exact:
        whole = {name for name, _ in parsed.entries if name in devices}
        for device in sorted(devices - whole, key=_natural):
            prefix = next((n for n in sorted(whole) if device.startswith(n)), None)
            if prefix is not None:
                beyond.append(f"{device} (by {prefix})")
    selected = [p for p in ports if matches(str(p["device"]), p.get("port"))]
    return HcaCoverage(
        host.name,
        left_out,
        tuple(beyond),
        sum(float(p["rate_gbps"]) for p in selected) / 8,
        sum(float(p["rate_gbps"]) for p in attached) / 8,
        len(attached),
    )


def _natural(name: str) -> tuple[str, int]:
    """mlx5_2 before mlx5_10."""
    head = name.rstrip("0123456789")
    tail = name[len(head) :]
    return head, int(tail) if tail else -1


def hca_check(hosts: Iterable[Host], logs: Iterable[LogData], parameters: Mapping[str, Any]) -> Check | None:
    """Whether `NCCL_IB_HCA` of the launches across hosts selects every active GPU-attached RDMA
    port and nothing beyond what it names; None when it is unset or no launch crossed hosts."""
    logs = list(logs)
    if not logs:
        return None
    spec, source = nccl_ib_hca(logs, parameters)
    if not spec:
        return None
    coverage = [c for h in hosts if (c := hca_coverage(h, spec)) is not None]
    if not coverage:
        return None
    name = "fabric/nccl_ib_hca"
    problems: list[str] = []
    evidence: list[str] = []
    parsed = parse_hca(spec)
    for (left_out, beyond), group in _grouped(coverage).items():
        on = _on_hosts(group, len(coverage))
        if left_out:
            first = group[0]
            problems.append(
                f"leaves out {len(left_out)} of the {first.attached} active GPU-attached RDMA ports "
                f"(PIX/PXB to a GPU in topo -m) {on}: {', '.join(left_out)}. NCCL moves inter-node traffic "
                f"over the ports it is given only ({first.selected_gbs:g} GB/s of line rate per host where "
                f"the GPU-attached ports give {first.attached_gbs:g} GB/s), and the pair bar, taken from the "
                "same ports, drops with it: pairs measured at this share of the fabric pass it"
            )
        if beyond:
            verb = "excludes" if parsed.exclude else "selects"
            problems.append(
                f"{verb} more devices than it names {on}: {', '.join(beyond)}, since NCCL reads a name "
                "without a leading `=` as a prefix"
            )
        evidence += [
            f"{c.host}: left out {', '.join(c.left_out) or 'none'}; "
            f"beyond its names {', '.join(c.beyond) or 'none'}"
            for c in group[:3]
        ]
    if not problems:
        known = [c for c in coverage if c.attached]
        if not known:
            return None  # no topo -m names a GPU-attached port: nothing to hold the setting against
        reason = (
            f"{source} selects every active GPU-attached RDMA port on {len(known)} host(s), "
            "and no device beyond the names it gives"
        )
        return Check(name, "pass", reason)
    fix = (
        "name every compute port exactly (`=mlx5_0,mlx5_1,...`, `=` for whole names), or leave NCCL_IB_HCA "
        "unset so NCCL and the report take the ports next to the GPUs"
    )
    return Check(name, "warn", f"{source} " + "; ".join(problems) + f". Fix: {fix}", None, tuple(evidence))


def _grouped(coverage: list[HcaCoverage]) -> dict[tuple[tuple[str, ...], tuple[str, ...]], list[HcaCoverage]]:
    groups: dict[tuple[tuple[str, ...], tuple[str, ...]], list[HcaCoverage]] = {}
    for c in coverage:
        if c.left_out or c.beyond:
            groups.setdefault((c.left_out, c.beyond), []).append(c)
    return groups


def _on_hosts(group: list[HcaCoverage], of: int) -> str:
    names = ", ".join(c.host for c in group[:4]) + (f" and {len(group) - 4} more" if len(group) > 4 else "")
    return f"on {len(group)} of {of} host(s) ({names})"
