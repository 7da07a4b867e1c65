"""How the node checks' tools are built: nvbandwidth (CMake) and perftest (autotools).

The roles roles/nvbandwidth and roles/perftest ask the node what it has (the same read-only
probe as the nccl_tests role, collbench_py/node/toolchain_probe.py: CUDA toolkits and the GPUs'
compute capabilities; perftest's role adds the verbs header and /sys/class/infiniband), and
decide here:

- whether to build at all. A node without what a build needs (no CUDA toolkit for nvbandwidth,
  no libibverbs headers for perftest) or without anything the tool could measure (no GPU seen,
  no RDMA device) gets no build and a note: the check is then skipped on that node, the run goes
  on. An explicit CUDA architecture list (nvbandwidth) or `build_without_device` (perftest)
  builds anyway, for an image made on a machine without the hardware.
- the flags: CMAKE_CUDA_ARCHITECTURES from the compute capabilities nvidia-smi reports (the
  nccl_tests role's NVCC_GENCODE rule: each capability present), and CUDA_H_PATH for perftest's
  configure, which turns GPUDirect (`--use_cuda`) on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from collbench_py.facts.toolchain import CUDA_GLOB, MARKER

# A CMake cache entry given on the command line: -DNAME=value or -DNAME:TYPE=value.
CMAKE_DEFINE = re.compile(r"^-D[A-Za-z_][A-Za-z0-9_]*(:[A-Z]+)?=")
# A configure argument: --option[=value] or NAME=value (an influential variable).
CONFIGURE_ARG = re.compile(r"^(--[a-z][a-z0-9_-]*(=.*)?|[A-Za-z_][A-Za-z0-9_]*=.*)$")
ARCHITECTURES = re.compile(r"^[0-9]+[af]?(-(real|virtual))?(;[0-9]+[af]?(-(real|virtual))?)*$")
_COMPUTE_CAP = re.compile(r"^[0-9]+\.[0-9]+$")


def _text(settings: Mapping[str, Any], key: str) -> str:
    value = settings.get(key)
    return "" if value is None else str(value).strip()


def _texts(settings: Mapping[str, Any], key: str) -> list[str]:
    value = settings.get(key) or []
    return [str(v).rstrip("/") for v in value if str(v).strip()] if isinstance(value, list) else []


def _truthy(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def cuda_probe_request(settings: Mapping[str, Any], want_gpus: bool) -> dict[str, Any]:
    """The toolchain probe's REQUEST_JSON: the CUDA toolkits, and nvidia-smi when `want_gpus`."""
    given = _text(settings, "cuda_home").rstrip("/")
    return {
        "dirs": [given] if given else _texts(settings, "cuda_home_candidates"),
        "globs": [] if given else [CUDA_GLOB],
        "pythons": [],
        "nvidia_smi": want_gpus,
        "rocm_agents": False,
        "timeout": settings.get("probe_timeout_s") or 120,
    }


def probe_report(probe_result: Mapping[str, Any] | None) -> dict[str, Any]:
    """The probe task's JSON stdout; empty when the probe did not run or said nothing readable."""
    if not probe_result or probe_result.get("rc") != 0:
        return {}
    try:
        loaded = json.loads(probe_result.get("stdout") or "{}")
    except ValueError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


def cuda_home(settings: Mapping[str, Any], report: Mapping[str, Any]) -> tuple[str, list[str]]:
    """The CUDA toolkit (a directory with bin/nvcc) and the places looked in, in order."""
    given = _text(settings, "cuda_home").rstrip("/")
    globbed = sorted((report.get("globbed") or {}).get(CUDA_GLOB) or (), reverse=True)
    looked = [given] if given else list(dict.fromkeys([*_texts(settings, "cuda_home_candidates"), *globbed]))
    files = set(report.get("files") or ())
    found = [home for home in looked if f"{home}/{MARKER['cuda']}" in files]
    return (found[0] if found else ""), looked


def cuda_architectures(nvidia_smi_output: str) -> str:
    """CMAKE_CUDA_ARCHITECTURES for the compute capabilities listed ("9.0" -> "90"), lowest first."""
    caps = sorted(
        {
            int(line.strip().replace(".", ""))
            for line in nvidia_smi_output.splitlines()
            if _COMPUTE_CAP.match(line.strip())
        }
    )
    return ";".join(str(cc) for cc in caps)


@dataclass(frozen=True)
class NvbandwidthBuild:
    build: bool
    cuda_home: str
    architectures: str
    cmake_args: tuple[str, ...]
    note: str | None

    def as_fact(self) -> dict[str, Any]:
        return asdict(self)


def nvml_include(settings: Mapping[str, Any], probe_result: Mapping[str, Any] | None) -> str:
    """The directory whose nvml.h nvbandwidth includes: the one given, else the toolkit's include/."""
    given = _text(settings, "nvml_include").rstrip("/")
    if given:
        return given
    home, _ = cuda_home(settings, probe_report(probe_result))
    return f"{home}/include" if home else ""


def nvbandwidth_build(
    settings: Mapping[str, Any], probe_result: Mapping[str, Any] | None, nvml_found: bool = True
) -> dict[str, Any]:
    """Whether and how nvbandwidth is built on this node (the role's settings, the probe's result,
    whether nvml.h is in nvml_include())."""
    report = probe_report(probe_result)
    home, looked = cuda_home(settings, report)
    given = _text(settings, "cuda_architectures")
    if not home:
        places = ", ".join(h + "/" for h in looked) or "(no candidate)"
        note = (
            f"no CUDA toolkit ({MARKER['cuda']}) in {places}: nvbandwidth is not built and the GPU "
            "matrix check is skipped (set collbench_nvbandwidth_cuda_home)"
        )
        return NvbandwidthBuild(False, "", "", (), note).as_fact()
    smi = report.get("nvidia_smi") or {}
    architectures = given or cuda_architectures(str(smi.get("stdout") or ""))
    if not architectures:
        note = (
            "no NVIDIA GPU seen (nvidia-smi): nothing for nvbandwidth to measure, not built "
            "(set collbench_nvbandwidth_cuda_architectures to build anyway)"
        )
        return NvbandwidthBuild(False, home, "", (), note).as_fact()
    include = nvml_include(settings, probe_result)
    if not nvml_found:
        # A toolkit assembled from pip wheels has no nvml.h (the cuda-nvml-dev part of a full one).
        note = (
            f"no nvml.h in {include}/: nvbandwidth is not built and the GPU matrix check is skipped "
            "(install the toolkit's cuda-nvml-dev, or set collbench_nvbandwidth_nvml_include)"
        )
        return NvbandwidthBuild(False, home, architectures, (), note).as_fact()
    flags = (
        (f"-DCMAKE_CXX_FLAGS=-I{include}", f"-DCMAKE_CUDA_FLAGS=-I{include}")
        if _text(settings, "nvml_include")
        else ()
    )
    args = (
        f"-DCMAKE_CUDA_COMPILER={home}/bin/nvcc",
        f"-DCMAKE_CUDA_ARCHITECTURES={architectures}",
        "-DCMAKE_BUILD_TYPE=Release",
        *flags,
        *(str(a) for a in settings.get("cmake_extra_args") or ()),
    )
    return NvbandwidthBuild(True, home, architectures, args, None).as_fact()


@dataclass(frozen=True)
class PerftestBuild:
    build: bool
    cuda_home: str
    configure_args: tuple[str, ...]
    note: str | None

    def as_fact(self) -> dict[str, Any]:
        return asdict(self)


def perftest_build(
    settings: Mapping[str, Any],
    probe_result: Mapping[str, Any] | None,
    verbs_header: bool,
    rdma_devices: Sequence[str],
) -> dict[str, Any]:
    """Whether and how perftest is built on this node. `verbs_header`: infiniband/verbs.h is
    there; `rdma_devices`: the names under /sys/class/infiniband."""
    if not verbs_header:
        note = (
            "no libibverbs headers (infiniband/verbs.h): perftest is not built and the loopback "
            "check is skipped (install libibverbs-dev / rdma-core-devel)"
        )
        return PerftestBuild(False, "", (), note).as_fact()
    if not rdma_devices and not _truthy(settings.get("build_without_device")):
        note = (
            "no RDMA device (/sys/class/infiniband is empty): nothing for perftest to measure, not "
            "built (set collbench_perftest_build_without_device to build anyway)"
        )
        return PerftestBuild(False, "", (), note).as_fact()
    # GPUDirect (--use_cuda) is built in where configure finds cuda.h: the toolkit found here,
    # else its own default, /usr/local/cuda/include/cuda.h. The role reads the result from
    # ib_write_bw --help, not from this.
    home, _ = cuda_home(settings, probe_report(probe_result))
    args = (
        *([f"CUDA_H_PATH={home}/include/cuda.h"] if home else []),
        *(str(a) for a in settings.get("configure_extra_args") or ()),
    )
    return PerftestBuild(True, home, args, None).as_fact()
