"""Thin filter over collbench_py.launch.steps: a launch's manifest entries from its hosts' results."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

# From a checkout the package sits next to this directory; an installed one is found anyway.
_REPO = str(Path(__file__).resolve().parent.parent)
if _REPO not in sys.path:
    sys.path.append(_REPO)

# collbench_py is imported inside each filter, not here: Ansible loads every filter file in each
# worker process that templates any filter (every task, every host), and importing the package
# there cost ~0.3 s of controller CPU per task and host.


def collbench_launch_entries(head: dict[str, Any], runners: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The manifest entries of one launch: `head` is its first host's collbench_launch result,
    `runners` the results of the hosts that ran a command (the head's among them)."""
    from collbench_py.launch.steps import launch_entries

    if not isinstance(head, dict) or "launch" not in head:
        raise AnsibleFilterError(f"the launch's first host has no launch result: {str(head)[:500]}")
    return launch_entries(head, [r if isinstance(r, dict) else {} for r in runners])


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"collbench_launch_entries": collbench_launch_entries}
