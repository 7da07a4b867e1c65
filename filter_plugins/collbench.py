"""Thin filters over collbench_py: the logic lives in the package, where it is tested."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

# From a checkout the package sits next to this directory; an installed one is found anyway.
_REPO = str(Path(__file__).resolve().parent.parent)
if _REPO not in sys.path:
    sys.path.append(_REPO)

from collbench_py.hostfacts import host_facts  # noqa: E402
from collbench_py.launch import LaunchError, launch_command_dict  # noqa: E402
from collbench_py.schedule import round_robin_pairs  # noqa: E402


def collbench_round_robin_pairs(hosts: list[str]) -> list[list[list[str]]]:
    """Rounds of disjoint host pairs covering every pair once (lists, as Jinja likes them)."""
    return [[list(pair) for pair in round_] for round_ in round_robin_pairs(list(hosts))]


def collbench_host_facts(probes: dict[str, Any]) -> dict[str, Any]:
    """facts.json of one host from its probes' output."""
    return host_facts(probes)


def collbench_launch_command(spec: dict[str, Any]) -> dict[str, Any]:
    """What one host of a launch runs (collbench_py.launch.launch_command), as plain values."""
    try:
        return launch_command_dict(spec)
    except LaunchError as err:
        raise AnsibleFilterError(f"cannot build the launch: {err}") from None


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "collbench_round_robin_pairs": collbench_round_robin_pairs,
            "collbench_host_facts": collbench_host_facts,
            "collbench_launch_command": collbench_launch_command,
        }
