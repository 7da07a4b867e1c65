"""Thin filter over collbench_py.nodechecks: the logic lives in the package, where it is tested."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# From a checkout the package sits next to this directory; an installed one is found anyway.
_REPO = str(Path(__file__).resolve().parent.parent)
if _REPO not in sys.path:
    sys.path.append(_REPO)

# collbench_py is imported inside each filter, not here: Ansible loads every filter file in each
# worker process that templates any filter (every task, every host), and importing the package
# there cost ~0.3 s of controller CPU per task and host.


def collbench_node_hcas(host_dir: str, launch_env: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """[{name, port, gpu, numa_node}] of the HCAs a node's loopbacks test, from its run directory."""
    from collbench_py.nodechecks.hcas import host_dir_hcas

    return host_dir_hcas(host_dir, launch_env or {}).as_config()


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"collbench_node_hcas": collbench_node_hcas}
