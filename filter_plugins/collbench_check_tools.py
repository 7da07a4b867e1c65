"""A thin filter over collbench_py.facts.check_tools (roles nvbandwidth and perftest): the build
arguments that are not well formed. The decision whether to build is the task
collbench_build_check's (action_plugins/)."""

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


def collbench_bad_build_args(args: list[Any], kind: str) -> list[str]:
    """The items of a CMake (`cmake`) or configure (`configure`) argument list that are not well formed."""
    from collbench_py.facts.check_tools import CMAKE_DEFINE, CONFIGURE_ARG

    rule = CMAKE_DEFINE if kind == "cmake" else CONFIGURE_ARG
    return [str(a) for a in args or [] if not rule.match(str(a))]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "collbench_bad_build_args": collbench_bad_build_args,
        }
