"""Whether each node builds nvbandwidth or perftest, decided for every node by one controller task
(action_plugins/collbench_build_check.py) instead of five tasks on each node.

Per node, over its own connection: its CUDA toolkits and GPUs (toolchain_probe.py, its text on
standard input), the files the decision depends on (nvbandwidth: nvml.h; perftest: the verbs
header and the RDMA devices) and, where it would build, whether each build tool answers
`--version`. The decision is check_tools' (nvbandwidth_build, perftest_build), as the per-node
tasks made it; the role's own tasks then fetch, build, verify and publish on each node as before.

A node's settings are its own (inventory or extra vars), else the task's: play vars and role
defaults are not per node.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from collbench_py.facts.check_tools import cuda_probe_request, nvbandwidth_build, nvml_include, perftest_build
from collbench_py.launch.node_settings import own_or_task

TOOLS = ("nvbandwidth", "perftest")

# check_tools' settings key -> the role variable that holds it (each tool's own prefix).
_SETTINGS = {
    "nvbandwidth": (
        "cuda_home",
        "cuda_home_candidates",
        "cuda_architectures",
        "nvml_include",
        "cmake_extra_args",
    ),
    "perftest": ("cuda_home", "cuda_home_candidates", "build_without_device", "configure_extra_args"),
}
# What each node's build needs besides its settings: the source mode and the build tools.
_MORE = ("source", "build_tools", "verbs_header")

# Said where a build tool does not answer `--version` (as the per-node tasks said it).
_INSTALL = {
    "nvbandwidth": (
        "install it (with libboost-program-options-dev), or use collbench_nvbandwidth_source prebuilt"
    ),
    "perftest": (
        "install autoconf, automake, libtool and make (with librdmacm-dev, libibumad-dev, libpci-dev), "
        "or use collbench_perftest_source prebuilt or distribution"
    ),
}
RDMA_CLASS = "/sys/class/infiniband"  # where a node lists its RDMA devices

# A node command: argv and the bytes for its standard input -> (rc, stdout).
Run = Callable[[list[str], bytes | None], tuple[int, str]]


def node_settings(tool: str, known: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The tool's settings on one node (`known`: its hostvars; `defaults`: the task's values, keyed
    by role variable), keyed as check_tools reads them, plus source, build_tools, verbs_header and
    probe_timeout_s."""
    prefix = f"collbench_{tool}_"
    names = (*_SETTINGS[tool], *(m for m in _MORE if tool == "perftest" or m != "verbs_header"))
    settings = {key: own_or_task(known, defaults, prefix + key) for key in names}
    settings["probe_timeout_s"] = own_or_task(known, defaults, "collbench_probe_timeout_s")
    return settings


def decide(
    tool: str, host: str, settings: Mapping[str, Any], *, probe_program: bytes, python: str, run: Run
) -> dict[str, Any]:
    """The node's decision (check_tools' fact: build, and how or why not), from what `run` finds on
    it; `python` is the node's Python, `probe_program` the text of toolchain_probe.py."""
    request = cuda_probe_request(settings, want_gpus=tool == "nvbandwidth")
    rc, out = run([python, "-", json.dumps(request)], probe_program)
    probe = {"rc": rc, "stdout": out}  # a probe that did not run finds nothing: the decision says so
    if tool == "nvbandwidth":
        nvml_found = run(["test", "-e", f"{nvml_include(settings, probe)}/nvml.h"], None)[0] == 0
        decision = nvbandwidth_build(settings, probe, nvml_found)
    else:
        verbs = run(["test", "-e", str(settings.get("verbs_header") or "")], None)[0] == 0
        rc, listed = run(["ls", "-1", RDMA_CLASS], None)
        decision = perftest_build(settings, probe, verbs, listed.split() if rc == 0 else [])
    if not decision["build"]:
        return decision
    tools = [str(t) for t in settings.get("build_tools") or ()]
    if settings.get("source") == "git":
        tools.append("git")
    missing = [t for t in tools if run([t, "--version"], None)[0] != 0]
    if missing:  # the node is measured all the same: only this check is skipped there, with the note
        note = f"{' and '.join(missing)} not found on {host}: {_INSTALL[tool]}"
        return {**decision, "build": False, "note": note}
    return decision


def deadline_s(settings: Mapping[str, Any], tools: int) -> int:
    """How long a node's commands may take in all: the probe's programs (two, each under the probe
    bound), the file checks and each build tool's `--version`, with room for the connection."""
    try:
        bound = max(1, int(str(settings.get("probe_timeout_s") or 120)))
    except ValueError:
        bound = 120
    return 2 * bound + 10 * (tools + 3) + 120
