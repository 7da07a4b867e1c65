"""Thin filters over collbench_py.facts.toolchain (the nccl_tests role): the logic lives in the package."""

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


def collbench_toolchain_request(settings: dict[str, Any]) -> dict[str, Any]:
    """What the node's toolchain probe looks at (collbench_py/node/toolchain_probe.py's argument)."""
    from collbench_py.facts.toolchain import Settings, probe_request

    return probe_request(Settings.from_dict(settings))


def collbench_toolchain(
    probe_result: dict[str, Any] | None, settings: dict[str, Any], mpi: Any = None
) -> dict:
    """The toolchain decided from the probe task's result: homes, NCCL, flags, make args, problems."""
    from collbench_py.facts.toolchain import decide_fact

    return decide_fact(settings, probe_result, mpi)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "collbench_toolchain_request": collbench_toolchain_request,
            "collbench_toolchain": collbench_toolchain,
        }
