"""Whether each node builds nvbandwidth or perftest, decided for every node by one controller task
(action_plugins/collbench_build_check.py) instead of a dozen tasks on each node.

Per node: whether it needs the tool at all (its node checks, and for perftest its rail launches),
whether its inputs can work (the checks the role's per-node assertions made, with their messages),
and, for a source built here (git, tarball), over its own connection: its CUDA toolkits and GPUs
(toolchain_probe.py, its text on standard input), the files the decision depends on (nvbandwidth:
nvml.h; perftest: the verbs header and the RDMA devices) and, where it would build, whether each
build tool answers `--version`. The decision is check_tools' (nvbandwidth_build, perftest_build).
Only a node that builds, verifies binaries given to it, or has an input to refuse runs the role's
own tasks.

A node's settings are its own (inventory or extra vars), else the play's (play vars and role
defaults, read by launch/node_settings.play_values).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean

from collbench_py.facts.check_tools import (
    CMAKE_DEFINE,
    CONFIGURE_ARG,
    cuda_probe_request,
    nvbandwidth_build,
    nvml_include,
    perftest_build,
)
from collbench_py.launch.node_settings import own_or_task
from collbench_py.pairs.railmap import rails_on

TOOLS = ("nvbandwidth", "perftest")
BUILT_HERE = ("git", "tarball")  # the sources decided per node; the others are verified as given
SOURCES = {
    "nvbandwidth": ("git", "tarball", "prebuilt"),
    "perftest": ("git", "tarball", "prebuilt", "distribution"),
}

# Each tool's settings, by their names after `collbench_<tool>_`.
_SETTINGS = {
    "nvbandwidth": (
        "source",
        "git_repo",
        "version",
        "tarball",
        "prebuilt_dir",
        "build_tools",
        "build_jobs",
        "cuda_home",
        "cuda_home_candidates",
        "cuda_architectures",
        "nvml_include",
        "cmake_extra_args",
    ),
    "perftest": (
        "source",
        "git_repo",
        "version",
        "tarball",
        "prebuilt_dir",
        "distribution_dir",
        "build_tools",
        "make_jobs",
        "verbs_header",
        "cuda_home",
        "cuda_home_candidates",
        "build_without_device",
        "configure_extra_args",
    ),
}
# The run's settings that say whether a node needs the tool.
NEEDS = (
    "collbench_node_checks",
    "collbench_node_checks_gpu_matrix",
    "collbench_node_checks_nic",
    "collbench_rails",
    "collbench_phases",
    "collbench_pairs",
    "collbench_probe_timeout_s",
)

_VERSION = {
    "nvbandwidth": (re.compile(r"^(v[0-9]+\.[0-9]+(\.[0-9]+)?|[0-9a-f]{40})$"), "v0.8"),
    "perftest": (re.compile(r"^([0-9]+(\.[0-9]+)+(-[0-9]+(\.[0-9]+)*)?|[0-9a-f]{40})$"), "26.04.17"),
}
_ARCHITECTURES = re.compile(r"^([0-9]+[af]?(-real|-virtual)?(;|$))*$")
# What each source mode needs set, as the message names it.
_SOURCE_NEEDS = {
    "nvbandwidth": {
        "git": ("git_repo", "collbench_nvbandwidth_git_repo (a repository)"),
        "tarball": ("tarball", "collbench_nvbandwidth_tarball (the archive on the controller)"),
        "prebuilt": ("prebuilt_dir", "collbench_nvbandwidth_prebuilt_dir (the binary on the node)"),
    },
    "perftest": {
        "git": ("git_repo", "collbench_perftest_git_repo (a repository)"),
        "tarball": ("tarball", "collbench_perftest_tarball (the archive on the controller)"),
        "prebuilt": ("prebuilt_dir", "collbench_perftest_prebuilt_dir (the binaries on the node)"),
        "distribution": (
            "distribution_dir",
            "collbench_perftest_distribution_dir (where the package put them)",
        ),
    },
}

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
    by variable name), keyed as check_tools reads them (the names after `collbench_<tool>_`), and
    the run's settings of NEEDS under their own names."""
    prefix = f"collbench_{tool}_"
    settings = {key: own_or_task(known, defaults, prefix + key) for key in _SETTINGS[tool]}
    settings.update({name: own_or_task(known, defaults, name) for name in NEEDS})
    settings["probe_timeout_s"] = settings["collbench_probe_timeout_s"]
    return settings


def _on(value: Any, default: bool = True) -> bool:
    """A switch as the roles' `| bool` reads it."""
    return default if value is None else boolean(value, strict=False)


def needed(tool: str, settings: Mapping[str, Any]) -> bool:
    """Whether the node needs the tool: nvbandwidth for the node checks' GPU matrix; perftest for
    their NIC loopback or for the rail launches of the pairs phase."""
    checks = _on(settings.get("collbench_node_checks"))
    if tool == "nvbandwidth":
        return checks and _on(settings.get("collbench_node_checks_gpu_matrix"))
    nic = checks and _on(settings.get("collbench_node_checks_nic"))
    return nic or rails_on(
        settings.get("collbench_rails"), settings.get("collbench_phases"), settings.get("collbench_pairs")
    )


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _jobs(value: Any) -> int:
    """A number as Jinja's `| int` reads it (0 where it is not one)."""
    try:
        return int(str(value).strip())
    except ValueError:
        return 0


def tarball_path(tarball: str, playbook_dir: str) -> str:
    """The archive on the controller; a relative path is relative to the playbook's directory."""
    path = os.path.expanduser(tarball)
    return path if os.path.isabs(path) else f"{playbook_dir}/{tarball}"


def input_problem(tool: str, settings: Mapping[str, Any], playbook_dir: str) -> str | None:
    """Why the node's inputs for the tool cannot work (the first reason), or None."""
    source = _text(settings.get("source"))
    if source not in SOURCES[tool]:
        return f"collbench_{tool}_source must be one of {', '.join(SOURCES[tool])} (got '{source}')"
    key, what = _SOURCE_NEEDS[tool][source]
    if not _text(settings.get(key)):
        return f"collbench_{tool}_source is {source}: set {what}"
    pattern, example = _VERSION[tool]
    version = _text(settings.get("version"))
    if not pattern.match(version):
        return (
            f"collbench_{tool}_version must be a tag like {example} or a full commit hash (got '{version}')"
        )
    if tool == "nvbandwidth":
        extra = [str(a) for a in settings.get("cmake_extra_args") or [] if not CMAKE_DEFINE.match(str(a))]
        architectures, jobs = _text(settings.get("cuda_architectures")), _jobs(settings.get("build_jobs"))
        if extra or not _ARCHITECTURES.match(architectures) or jobs < 1:
            return (
                f"collbench_nvbandwidth_cmake_extra_args must be -DNAME=value items (got {extra}), "
                f"collbench_nvbandwidth_cuda_architectures a list like 80;90 (got '{architectures}') "
                f"and collbench_nvbandwidth_build_jobs >= 1 (got {settings.get('build_jobs')})"
            )
    else:
        extra = [
            str(a) for a in settings.get("configure_extra_args") or [] if not CONFIGURE_ARG.match(str(a))
        ]
        if extra or _jobs(settings.get("make_jobs")) < 1:
            return (
                f"collbench_perftest_configure_extra_args must be --option[=value] or NAME=value items "
                f"(got {extra}) and collbench_perftest_make_jobs >= 1 (got {settings.get('make_jobs')})"
            )
    if source == "tarball":
        path = tarball_path(_text(settings.get("tarball")), playbook_dir)
        if not os.path.isfile(path):
            return f"collbench_{tool}_tarball: {path} is not a file on the controller"
    return None


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


def deadline_s(settings: Mapping[str, Any]) -> int:
    """How long a node's commands may take in all: the probe's programs (two, each under the probe
    bound), the file checks and each build tool's `--version`, with room for the connection."""
    try:
        bound = max(1, int(str(settings.get("probe_timeout_s") or 120)))
    except ValueError:
        bound = 120
    return 2 * bound + 10 * (len(settings.get("build_tools") or ()) + 4) + 120
