"""GPUDirect RDMA on the launches across hosts, read from NCCL's channel lines.

With `NCCL_DEBUG=INFO` each rank prints the NET channels it set up: `... [send] via NET/IB/0/GDRDMA`
when the NIC reads and writes GPU memory itself, `via NET/IB/0` when NCCL stages every byte through
host memory. Without `nvidia-peermem` (or a usable DMA-BUF) NCCL drops GPUDirect silently: no
warning, no error, the pair just runs at about half its speed. The channel lines name the host that
printed them, so the node missing the module is named, not only the pair.

- every NET channel of a host without GDRDMA in a launch: `warn`, the node lacks GPUDirect RDMA;
- some of its NET devices without GDRDMA, others with it: `note`, a NIC farther from its GPU than
  NCCL_NET_GDR_LEVEL allows (topology), not a missing module;
- NET channels seen and all with GDRDMA: `pass`;
- no NET channel line (no INFO lines, one node, NET/Socket only): nothing is said. NET/Socket over
  hosts with InfiniBand ports is the `transport` warning's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from collbench_py.rundir.load import Host, LogData
from collbench_py.verdicts.model import Check

NAME = "gpudirect"
LISTED = 4  # launches named per host; the rest are counted


def gpudirect_checks(hosts: Mapping[str, Host], logs: Iterable[LogData]) -> list[Check]:
    """One check per host whose NET channels ran without GPUDirect RDMA, or one pass."""
    without: dict[str, list[tuple[LogData, tuple[str, ...]]]] = defaultdict(list)
    partial: dict[str, list[tuple[LogData, tuple[str, ...]]]] = defaultdict(list)
    launches = 0
    for log in logs:
        if log.launch.kind not in ("pair", "all") or log.launch.status == "skipped":
            continue
        devices_of = _net_devices(log)
        if not devices_of:
            continue
        launches += 1
        for printed_by, devices in devices_of.items():
            missing = tuple(device for device, gdr in devices.items() if not gdr)
            if not missing:
                continue
            host = _host_named(hosts, printed_by)
            (without if len(missing) == len(devices) else partial)[host].append((log, missing))
    checks = [_without_check(host, found) for host, found in sorted(without.items())]
    checks += [_partial_check(host, found) for host, found in sorted(partial.items())]
    if not checks and launches:
        reason = f"every NET channel of {launches} launch(es) across hosts ran with GPUDirect RDMA"
        checks.append(Check(NAME, "pass", reason))
    return checks


def _net_devices(log: LogData) -> dict[str, dict[str, bool]]:
    """Printing host -> NET device -> GDRDMA on every channel of it, over the log's runs."""
    merged: dict[str, dict[str, bool]] = defaultdict(dict)
    for run in log.runs:
        for host, devices in run.net_devices.items():
            for device, gdr in devices.items():
                merged[host][device] = merged[host].get(device, True) and gdr
    return merged


def _without_check(host: str, found: list[tuple[LogData, tuple[str, ...]]]) -> Check:
    nets = sorted({device.rsplit("/", 1)[0] for _, missing in found for device in missing})
    reason = (
        f"{host} ran over {', '.join(nets)} without GPUDirect RDMA (no GDRDMA on its channels) in "
        f"{_launches(found)}: nvidia-peermem or DMA-BUF missing on {host}; expect about half the bandwidth"
    )
    return Check(NAME, "warn", reason, None, _evidence(host, found), found[0][0].launch.log)


def _partial_check(host: str, found: list[tuple[LogData, tuple[str, ...]]]) -> Check:
    devices = sorted({device for _, missing in found for device in missing})
    reason = (
        f"{host} ran {', '.join(devices)} without GPUDirect RDMA while its other NET devices had it, in "
        f"{_launches(found)}: a NIC farther from its GPU than NCCL_NET_GDR_LEVEL allows "
        "(see `nvidia-smi topo -m`); those channels go through host memory"
    )
    return Check(NAME, "note", reason, None, _evidence(host, found), found[0][0].launch.log)


def _launches(found: list[tuple[LogData, tuple[str, ...]]]) -> str:
    named = [f"{_label(log)} ({log.launch.log})" for log, _ in found[:LISTED]]
    more = f" and {len(found) - LISTED} more" if len(found) > LISTED else ""
    return f"{len(found)} launch(es): {', '.join(named)}{more}"


def _label(log: LogData) -> str:
    what = log.launch.collective or "launch"
    if log.launch.kind == "pair":
        return f"pair {'--'.join(log.launch.hosts)} {what}"
    return f"all-hosts {what}"


def _evidence(host: str, found: list[tuple[LogData, tuple[str, ...]]]) -> tuple[str, ...]:
    """The log's own channel lines without GDRDMA where it kept some, else what was read."""
    lines = [
        line
        for log, _ in found
        for line in log.evidence
        if " via NET/" in line and "GDRDMA" not in line and "NET/Socket" not in line
    ]
    if lines:
        return tuple(dict.fromkeys(lines))[:LISTED]
    return tuple(
        f"{log.launch.log}: {host}'s channels via {', '.join(missing)} have no /GDRDMA"
        for log, missing in found[:LISTED]
    )


def _host_named(hosts: Mapping[str, Host], name: str) -> str:
    """The run's name of the host an INFO line names: NCCL prints the hostname up to its first dot."""
    for host in hosts.values():
        names = (host.name, host.inventory_hostname, str((host.facts or {}).get("hostname") or ""))
        if name in names or name in (n.split(".", 1)[0] for n in names if n):
            return host.name
    return name
