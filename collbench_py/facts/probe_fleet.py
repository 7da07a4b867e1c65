"""The facts phase for every node from one controller task (action_plugins/collbench_facts.py).

Per node: its MPI found where the provision role has not found it for this MPI home (mpi_probe.py,
then which of the headers and libraries the choice depends on exist), its read-only probes
(facts_probe.py, each under its bound), its facts.json from them, and what it has (collbench_gpu).
Then, once for the run, the backend from every node's GPUs (hostfacts.fleet_backend), and per node
its ranks, or why it cannot run that backend. A node's settings are its own (inventory or extra
vars), else the task's: play vars and role defaults are not per node.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from collbench_py.facts.hostfacts import TOOL_TIMED_OUT_RC, gpu_summary, host_facts
from collbench_py.facts.mpi import detect_mpi, files_to_check
from collbench_py.launch.node_settings import as_int, own_or_task

SETTINGS = (
    "collbench_probe_timeout_s",
    "collbench_mpi_home",
    "collbench_gpus_per_host",
    "collbench_cpu_procs_per_host",
)
GPU_BACKENDS = ("nccl-tests", "rccl-tests")

# The read-only probes: name -> argv (the torch and mpi ones are the node's own). A missing tool is
# data ("this host cannot tell").
_FIXED_PROBES = {
    "gpu_query": [
        "nvidia-smi",
        "--query-gpu=name,uuid,memory.total,pci.bus_id,driver_version,pcie.link.gen.current,"
        "pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max",
        "--format=csv,noheader,nounits",
    ],
    "nvidia_smi_version": ["nvidia-smi", "--version"],
    "rocm_smi": ["rocm-smi", "--showproductname"],
}
_LATER_PROBES = {
    "ibstat": ["ibstat"],
    "ibv_devinfo": ["ibv_devinfo", "-v"],
    "lscpu": ["lscpu"],
    "hostname": ["hostname"],
}


def node_settings(known: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Each setting the node sets itself, else the task's; SettingError naming a bad one."""
    raw = {name: own_or_task(known, defaults, name) for name in SETTINGS}
    settings: dict[str, Any] = {"collbench_mpi_home": str(raw["collbench_mpi_home"] or "")}
    settings["collbench_probe_timeout_s"] = as_int(
        "collbench_probe_timeout_s", raw["collbench_probe_timeout_s"], 1
    )
    for name in ("collbench_gpus_per_host", "collbench_cpu_procs_per_host"):
        value = raw[name]  # collbench_gpus_per_host unset (null): what each node has
        settings[name] = None if value is None or str(value).strip() == "" else as_int(name, value)
    return settings


def mpi_wanted(known: Mapping[str, Any], home: str) -> bool:
    """Whether the node's MPI is still to be found for `home` (the provision role finds it after
    installing the packages, and nothing between it and here changes it)."""
    return "__facts_mpi_probed_home" not in known or known["__facts_mpi_probed_home"] != home


def mpi_probe_args(candidates: list[str], home: str, timeout_s: int) -> list[str]:
    """mpi_probe.py's arguments (after the program)."""
    return [json.dumps(candidates), home, str(timeout_s)]


def mpi_files(found: Mapping[str, Any], home: str) -> list[str]:
    """The header and library paths whose existence the choice depends on."""
    return files_to_check(found.get("mpiruns") or {}, home or None)


def mpi_fact(found: Mapping[str, Any], existing: list[str], home: str) -> dict[str, Any] | None:
    """collbench_mpi: {mpirun, prefix, home, include, lib}, or None where no mpirun was found."""
    install = detect_mpi(found.get("path_mpirun"), found.get("mpiruns") or {}, set(existing), home or None)
    return install.as_fact() if install else None


def probe_list(python: str, mpi: Mapping[str, Any] | None, torch_probe: str) -> list[list[Any]]:
    """facts_probe.py's [name, argv] list for a node: `python` its collbench_node.python, `mpi`
    its collbench_mpi, `torch_probe` the text of torch_probe.py."""
    mpirun = (mpi or {}).get("mpirun") or "mpirun"
    probes = {
        **_FIXED_PROBES,
        "torch": [python, "-c", torch_probe],
        "mpi": [mpirun, "--version"],
        **_LATER_PROBES,
    }
    return [[name, argv] for name, argv in probes.items()]


def probes_deadline_s(count: int, timeout_s: int) -> int:
    """How long a node's probes may take in all before the node counts as not answering: each
    probe is bounded on the node, one after the other."""
    return count * timeout_s + 120


def kept(results: Mapping[str, Any]) -> tuple[dict[str, str], dict[str, int], list[str]]:
    """From facts_probe.py's {name: {rc, stdout}}: the output of the probes that worked, every
    probe's exit status (127 not installed, 124 hung), and the names of those that hung."""
    outputs = {name: str(r.get("stdout") or "") for name, r in results.items() if r.get("rc") == 0}
    rcs = {name: int(r.get("rc")) for name, r in results.items()}
    unanswered = [name for name, rc in rcs.items() if rc == TOOL_TIMED_OUT_RC]
    return outputs, rcs, unanswered


def facts_document(
    host: str, ansible_facts: Mapping[str, Any], outputs: Mapping[str, str], unanswered: list[str], at: str
) -> dict[str, Any]:
    """facts.json of a node (collbench_py.facts.hostfacts.host_facts) from its probes and the facts
    Ansible gathered there; `at` the UTC time it was probed."""
    hostname = outputs["hostname"] if "hostname" in outputs else ansible_facts.get("nodename")
    return host_facts(
        {
            "hostname": str(hostname or "").strip(),
            "inventory_hostname": host,
            "collected_at": at,
            **{
                name: outputs.get(name)
                for name in (*_FIXED_PROBES, "torch", "mpi", "ibstat", "ibv_devinfo", "lscpu")
            },
            "memory_mib": ansible_facts.get("memtotal_mb"),
            "unanswered": unanswered,
            "os": {
                "distribution": ansible_facts.get("distribution"),
                "version": ansible_facts.get("distribution_version"),
                "kernel": ansible_facts.get("kernel"),
            },
        }
    )


def facts_text(document: Mapping[str, Any]) -> str:
    """facts.json as written: sorted keys, two spaces, one final newline."""
    return json.dumps(document, indent=2, sort_keys=True, separators=(",", ": "), ensure_ascii=False) + "\n"


def gpu_fact(outputs: Mapping[str, str], rcs: Mapping[str, int]) -> dict[str, Any]:
    """collbench_gpu: the GPU summary of the probes, and how many devices torch sees."""
    lines = (outputs.get("torch") or "{}").splitlines()
    try:
        torch = json.loads(lines[-1] if lines else "{}")
    except ValueError:
        torch = {}
    devices = torch.get("devices", 0) if isinstance(torch, dict) else 0
    try:
        devices = int(devices or 0)
    except (TypeError, ValueError):
        devices = 0
    return {**gpu_summary(outputs, rcs), "torch_devices": devices}


def launcher_for(requested: str, backend: str) -> str:
    """The launcher: the one asked for, else torchrun for torch and mpirun for nccl-tests."""
    if requested != "auto":
        return requested
    return "torchrun" if backend == "torch" else "mpirun"


def ranks_for(
    settings: Mapping[str, Any],
    gpu: Mapping[str, Any],
    backend: str,
    *,
    has_torch: bool,
    python: str,
    host: str,
) -> tuple[int, str | None]:
    """A node's ranks for `backend`, and why it cannot run it (None when it can)."""
    pinned = settings["collbench_gpus_per_host"]
    if pinned is not None:
        ranks = pinned
    elif backend in GPU_BACKENDS:
        ranks = int(gpu.get("count") or 0)
    elif int(gpu.get("torch_devices") or 0) > 0:
        ranks = int(gpu["torch_devices"])
    else:
        ranks = int(settings["collbench_cpu_procs_per_host"] or 0)
    if ranks < 1:
        return ranks, (
            f"{host} cannot run the {backend} backend: it has no GPU (set collbench_gpus_per_host, or use "
            "collbench_backend: torch)"
        )
    if backend == "torch" and not has_torch:
        return ranks, (
            f"{host} cannot run the {backend} backend: {python} cannot import torch (set collbench_python, "
            "or let the provision role build its venv)"
        )
    return ranks, None


def dest_of(run_dir: str | Path, known: Mapping[str, Any]) -> Path:
    """Where a node's facts.json goes in the run directory."""
    return Path(run_dir) / "hosts" / str(known["collbench_node"]["dir_name"]) / "facts.json"
