"""Thin filters over collbench_py.facts.check_tools (roles nvbandwidth and perftest)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

_REPO = str(Path(__file__).resolve().parent.parent)
if _REPO not in sys.path:
    sys.path.append(_REPO)

# collbench_py is imported inside each filter, not here: Ansible loads every filter file in each
# worker process that templates any filter (every task, every host), and importing the package
# there cost ~0.3 s of controller CPU per task and host.


def collbench_cuda_probe_request(settings: dict[str, Any], want_gpus: bool = True) -> dict[str, Any]:
    """The toolchain probe's request for the CUDA toolkits (and the GPUs' compute capabilities)."""
    from collbench_py.facts.check_tools import cuda_probe_request

    return cuda_probe_request(settings, bool(want_gpus))


def collbench_nvml_include(probe_result: dict[str, Any] | None, settings: dict[str, Any]) -> str:
    """Where nvbandwidth's nvml.h is looked for: the directory given, else the CUDA toolkit's include/."""
    from collbench_py.facts.check_tools import nvml_include

    return nvml_include(settings, probe_result)


def collbench_nvbandwidth_build(
    probe_result: dict[str, Any] | None, settings: dict[str, Any], nvml_found: bool = True
) -> dict:
    """Whether nvbandwidth is built here, with which CUDA, architectures and CMake arguments."""
    from collbench_py.facts.check_tools import nvbandwidth_build

    return nvbandwidth_build(settings, probe_result, bool(nvml_found))


def collbench_perftest_build(
    probe_result: dict[str, Any] | None, settings: dict[str, Any], verbs_header: bool, rdma_devices: list
) -> dict:
    """Whether perftest is built here, and its configure arguments."""
    from collbench_py.facts.check_tools import perftest_build

    return perftest_build(settings, probe_result, bool(verbs_header), list(rdma_devices or []))


def collbench_bad_build_args(args: list[Any], kind: str) -> list[str]:
    """The items of a CMake (`cmake`) or configure (`configure`) argument list that are not well formed."""
    from collbench_py.facts.check_tools import CMAKE_DEFINE, CONFIGURE_ARG

    rule = CMAKE_DEFINE if kind == "cmake" else CONFIGURE_ARG
    return [str(a) for a in args or [] if not rule.match(str(a))]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "collbench_cuda_probe_request": collbench_cuda_probe_request,
            "collbench_nvbandwidth_build": collbench_nvbandwidth_build,
            "collbench_nvml_include": collbench_nvml_include,
            "collbench_perftest_build": collbench_perftest_build,
            "collbench_bad_build_args": collbench_bad_build_args,
        }
