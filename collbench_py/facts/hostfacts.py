"""A host's facts.json (docs/run-directory.md) from the raw output of read-only probes.

The probes run on the node (nvidia-smi, mpirun --version, ibstat, lscpu, ...); their text
comes back to the controller and is turned into the facts schema here, so the nodes never
need this package. Every key of the schema is present; what a host could not tell is None
(or an empty list).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

# The order of `nvidia-smi --query-gpu=...` as the facts role asks for it.
GPU_QUERY_FIELDS = (
    "name",
    "uuid",
    "memory.total",
    "pci.bus_id",
    "driver_version",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
)
_GPU_KEYS = (
    "name",
    "uuid",
    "memory_total_mib",
    "pci_bus_id",
    "driver_version",
    "pcie_gen_current",
    "pcie_gen_max",
    "pcie_width_current",
    "pcie_width_max",
)
_INT_KEYS = {"memory_total_mib", "pcie_gen_current", "pcie_gen_max", "pcie_width_current", "pcie_width_max"}


def _int(text: str | None) -> int | None:
    try:
        return int(float(text)) if text is not None else None
    except ValueError:
        return None


def _cell(text: str) -> str | None:
    """A CSV cell, None where nvidia-smi prints `[N/A]`, `[Not Supported]` and the like."""
    text = text.strip()
    return None if not text or (text.startswith("[") and text.endswith("]")) or text == "N/A" else text


def parse_gpu_query(text: str | None) -> list[dict[str, Any]]:
    """`nvidia-smi --query-gpu=<GPU_QUERY_FIELDS> --format=csv,noheader,nounits` as a list of GPUs."""
    gpus: list[dict[str, Any]] = []
    for line in (text or "").splitlines():
        cells = [_cell(c) for c in line.split(",")]
        if len(cells) != len(_GPU_KEYS):
            continue
        gpu: dict[str, Any] = {"index": len(gpus)}
        for key, value in zip(_GPU_KEYS, cells, strict=True):
            gpu[key] = _int(value) if key in _INT_KEYS else value
        gpus.append(gpu)
    return gpus


_ROCM_SMI_GPU = re.compile(r"^GPU\[(\d+)\]\s*:\s*(.*)$")
_ROCM_SMI_CSV_GPU = re.compile(r"^card(\d+),([^,]*)")


def parse_rocm_smi_product(text: str | None) -> list[dict[str, Any]]:
    """`rocm-smi --showproductname` (plain or `--csv`): one GPU per index, named by its card series.

    Plain output has several `GPU[N] : Field: value` lines per GPU (ROCm 4 to 6 layouts); `--csv` has
    one `cardN,<series>,...` line. Warnings and banners around them are ignored. Fields nvidia-smi
    reports and rocm-smi does not are None.
    """
    names: dict[int, str | None] = {}
    for raw in (text or "").splitlines():
        line = raw.strip()
        if match := _ROCM_SMI_GPU.match(line):
            index = int(match[1])
            names.setdefault(index, None)
            field, _, value = (part.strip() for part in match[2].partition(":"))
            if field.lower() == "card series" and value:
                names[index] = value
        elif match := _ROCM_SMI_CSV_GPU.match(line):
            names[int(match[1])] = match[2].strip() or None
    return [
        {"index": position, **dict.fromkeys(_GPU_KEYS), "name": names[index]}
        for position, index in enumerate(sorted(names))
    ]


def count_amd_gpus(text: str | None) -> int:
    """How many GPUs `rocm-smi --showproductname` lists (0 for no output)."""
    return len(parse_rocm_smi_product(text))


def cuda_version(nvidia_smi_version: str | None) -> str | None:
    """The CUDA version the driver supports, from `nvidia-smi --version` (or its banner); R610 drivers
    print it as `CUDA UMD Version`."""
    match = re.search(r"CUDA (?:UMD )?Version\s*:?\s*([\d.]+)", nvidia_smi_version or "")
    return match[1] if match else None


def mpi_version(text: str | None) -> str | None:
    """`mpirun --version`: `mpirun (Open MPI) 4.1.4` -> `Open MPI 4.1.4`; other MPIs: the first line."""
    text = (text or "").strip()
    if not text:
        return None
    match = re.search(r"\((Open MPI|MPICH|Intel\(R\) MPI Library[^)]*)\)\s+([\w.]+)", text)
    if match:
        return f"{match[1]} {match[2]}"
    match = re.search(r"HYDRA build details:.*?Version:\s*([\w.]+)", text, re.DOTALL)
    if match:
        return f"MPICH {match[1]}"
    return text.splitlines()[0].strip()


def _port(device: str, number: int) -> dict[str, Any]:
    return {"device": device, "port": number, "state": None, "rate_gbps": None, "link_layer": None}


def parse_ibstat(text: str | None) -> list[dict[str, Any]]:
    """`ibstat`: one entry per port of every CA."""
    ports: list[dict[str, Any]] = []
    device = None
    port: dict[str, Any] | None = None
    for raw in (text or "").splitlines():
        line = raw.strip()
        if match := re.match(r"CA '([^']+)'", line):
            device, port = match[1], None
        elif (match := re.match(r"Port (\d+):$", line)) and device:
            port = _port(device, int(match[1]))
            ports.append(port)
        elif port is not None and ":" in line:
            key, value = (part.strip() for part in line.split(":", 1))
            if key == "State":
                port["state"] = value
            elif key == "Rate":
                port["rate_gbps"] = _int(value)
            elif key == "Link layer":
                port["link_layer"] = value
    return ports


_IBV_WIDTH = {"1X": 1, "2X": 2, "4X": 4, "8X": 8, "12X": 12}


def parse_ibv_devinfo(text: str | None) -> list[dict[str, Any]]:
    """`ibv_devinfo -v`: one entry per port; the rate is active_width x active_speed."""
    ports: list[dict[str, Any]] = []
    device = None
    port: dict[str, Any] | None = None
    width = speed = None

    def close() -> None:
        if port is not None and width and speed:
            port["rate_gbps"] = _int(str(width * speed))

    for raw in (text or "").splitlines():
        line = raw.strip()
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "hca_id":
            close()
            device, port = value, None
        elif key == "port" and device and value.isdigit():
            close()
            width = speed = None
            port = _port(device, int(value))
            ports.append(port)
        elif port is not None and key == "state":
            # PORT_ACTIVE (4) -> Active, as ibstat says it
            state = value.split()[0].removeprefix("PORT_")
            port["state"] = state.capitalize() if state.isupper() else state
        elif port is not None and key == "link_layer":
            port["link_layer"] = value
        elif port is not None and key == "active_width":
            width = _IBV_WIDTH.get(value.split()[0])
        elif port is not None and key == "active_speed":
            speed = _float(value.split()[0])
    close()
    return ports


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_lscpu(text: str | None) -> tuple[dict[str, Any], int | None]:
    """`lscpu` (plain, C locale): the cpu block of the schema, and the NUMA node count."""
    fields: dict[str, str] = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    sockets = _int(fields.get("Socket(s)"))
    per_socket = _int(fields.get("Core(s) per socket"))
    cpu = {
        "model": fields.get("Model name"),
        "sockets": sockets,
        "cores": sockets * per_socket if sockets and per_socket else None,
        "threads": _int(fields.get("CPU(s)")),
    }
    return cpu, _int(fields.get("NUMA node(s)"))


def parse_torch_probe(text: str | None) -> dict[str, Any]:
    """The one JSON line the facts role's torch probe prints (version, cuda, nccl, device count)."""
    for line in reversed((text or "").splitlines()):
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return {}


def host_facts(probes: Mapping[str, Any]) -> dict[str, Any]:
    """The facts.json of one host from its probes (each a string of output, or None when not run).

    Keys of `probes`: hostname, inventory_hostname, collected_at, gpu_query, nvidia_smi_version,
    rocm_smi, torch, mpi, ibstat, ibv_devinfo, lscpu, memory_mib, os (a dict), and unanswered:
    the names of the probes that ran past their time limit (a hung tool, not a missing one).
    """
    gpus = parse_gpu_query(probes.get("gpu_query")) or parse_rocm_smi_product(probes.get("rocm_smi"))
    torch = parse_torch_probe(probes.get("torch"))
    cpu, numa_nodes = parse_lscpu(probes.get("lscpu"))
    ib = parse_ibstat(probes.get("ibstat")) or parse_ibv_devinfo(probes.get("ibv_devinfo"))
    if parse_gpu_query(probes.get("gpu_query")):
        vendor = "nvidia"
    elif (probes.get("rocm_smi") or "").strip():
        vendor = "amd"
    else:
        vendor = None
    drivers = sorted({g["driver_version"] for g in gpus if g.get("driver_version")})
    os_facts = probes.get("os") or {}
    return {
        "hostname": probes.get("hostname"),
        "inventory_hostname": probes.get("inventory_hostname"),
        "collected_at": probes.get("collected_at"),
        "gpus": gpus,
        "gpu_vendor": vendor,
        "driver_version": drivers[0] if drivers else None,
        "cuda_version": cuda_version(probes.get("nvidia_smi_version")) or torch.get("cuda"),
        "nccl_version": torch.get("nccl"),
        "mpi_version": mpi_version(probes.get("mpi")),
        "torch_version": torch.get("torch"),
        "ib": ib,
        "cpu": cpu,
        "numa_nodes": numa_nodes,
        "memory_mib": _int(str(probes["memory_mib"])) if probes.get("memory_mib") is not None else None,
        "os": {
            "distribution": os_facts.get("distribution"),
            "version": os_facts.get("version"),
            "kernel": os_facts.get("kernel"),
        },
        "unanswered": sorted({str(name) for name in probes.get("unanswered") or []}),
    }


# ---------------------------------------------------------------- the backend of a fleet

# Exit status of the facts role's probe runner for a tool that is not installed, and for one that
# ran past collbench_probe_timeout_s.
TOOL_MISSING_RC = 127
TOOL_TIMED_OUT_RC = 124
_VENDOR_TOOLS = (("nvidia", "gpu_query", "nvidia-smi"), ("amd", "rocm_smi", "rocm-smi"))
_VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD"}
_BACKENDS = {"nvidia": "nccl-tests", "amd": "rccl-tests"}


def gpu_summary(outputs: Mapping[str, str], rcs: Mapping[str, int]) -> dict[str, Any]:
    """What one host's GPU probes tell: its vendor and GPU count, or why they cannot tell.

    `outputs` and `rcs`: per probe name, its stdout and exit status (127 not installed, 124 timed
    out). `probe` is `answered` (a tool listed GPUs), `none` (no GPU tool installed, or it listed
    none), `failed` (a tool is installed but exits non-zero: a driver in a bad state) or
    `unanswered` (a tool hung); `tool` and `rc` name the tool that failed or hung.
    """
    summary: dict[str, Any] = {"vendor": None, "count": 0, "probe": "none", "tool": None, "rc": None}
    for vendor, probe, tool in _VENDOR_TOOLS:
        rc = rcs.get(probe, TOOL_MISSING_RC)
        if rc == TOOL_TIMED_OUT_RC:
            return {**summary, "vendor": vendor, "probe": "unanswered", "tool": tool, "rc": rc}
        if rc == 0:
            gpus = (parse_gpu_query if vendor == "nvidia" else parse_rocm_smi_product)(outputs.get(probe))
            if gpus:
                return {**summary, "vendor": vendor, "count": len(gpus), "probe": "answered", "tool": tool}
        elif rc != TOOL_MISSING_RC and summary["probe"] == "none":
            summary = {**summary, "vendor": vendor, "probe": "failed", "tool": tool, "rc": rc}
    return summary


def _problem(summary: Mapping[str, Any], fleet_vendor: str | None, timeout_s: object) -> str | None:
    """Why a host leaves the run before the backend is decided, or None."""
    probe, tool = summary.get("probe"), summary.get("tool")
    if probe == "unanswered":
        return (
            f"{tool} did not answer within collbench_probe_timeout_s ({timeout_s} s): a GPU in a bad "
            "state; its facts.json lists the probes that did not answer"
        )
    if fleet_vendor is None:
        return None
    others = f"the other hosts have {_VENDOR_NAMES[fleet_vendor]} GPUs"
    if probe == "failed" and summary.get("vendor") == fleet_vendor:
        return (
            f"{tool} is installed but failed (exit {summary.get('rc')}) while {others}: is the driver loaded?"
        )
    if probe in ("none", "failed"):
        wanted = {v: t for v, _, t in _VENDOR_TOOLS}[fleet_vendor]
        return f"no GPU found ({wanted} not installed or lists none) while {others}"
    return None


def fleet_backend(
    summaries: Mapping[str, Mapping[str, Any]], requested: str = "auto", timeout_s: object = None
) -> dict[str, Any]:
    """The backend of a run from the hosts whose GPU tools answered, and the hosts that leave it.

    A host whose GPU tool hung leaves the run, whatever the backend: it cannot be trusted to
    measure anything. Under `auto` the backend is that of the GPUs the answering hosts have when
    they are all of one vendor (nccl-tests or rccl-tests); the hosts without a working GPU tool then
    leave the run, each with its reason, rather than turning every host to torch (which the GPU hosts
    were not provisioned for). Hosts of two vendors, or none with GPUs: torch. `timeout_s`, the
    probes' bound the reasons name: one for every host, or each host's own ({host: seconds}).
    """
    answered = {h: s for h, s in summaries.items() if s.get("probe") != "unanswered"}
    vendors = {s.get("vendor") for s in answered.values() if s.get("probe") == "answered"}
    fleet_vendor = next(iter(vendors)) if len(vendors) == 1 else None
    if requested == "auto":
        backend = _BACKENDS[fleet_vendor] if fleet_vendor else "torch"
    else:
        backend = requested
        # An explicit GPU backend names the fleet's vendor; torch asks nothing of the GPUs.
        fleet_vendor = {b: v for v, b in _BACKENDS.items()}.get(requested) if fleet_vendor else None
    dropped = {}
    for host, summary in summaries.items():
        bound = timeout_s.get(host) if isinstance(timeout_s, Mapping) else timeout_s
        reason = _problem(summary, fleet_vendor, bound)
        if reason:
            dropped[host] = reason
    return {"backend": backend, "dropped": dropped}
