"""Thin filters over collbench_py: the logic lives in the package, where it is tested."""

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


def collbench_host_dir(host: str) -> str:
    """The host's directory name in the run (hosts/<name>/), as fetch names it too."""
    from collbench_py.fetch import safe_name

    return safe_name(str(host))


def collbench_pair_hop_targets(host: str, hosts: list[str], schedule: str | None) -> list[str]:
    """The hosts `host` heads a pair launch to, as far as known before the pairs phase."""
    from collbench_py.pairs.schedule import pair_hop_targets

    return pair_hop_targets(host, list(hosts), schedule)


def collbench_mpi_files(probe: dict[str, Any], home: str | None = None) -> list[str]:
    """The header and library paths the node must say exist, for the MPI probe's mpiruns."""
    from collbench_py.facts.mpi import files_to_check

    return files_to_check(probe.get("mpiruns") or {}, home or None)


def collbench_mpi_detect(probe: dict[str, Any], existing: list[str], home: str | None = None) -> dict | None:
    """collbench_mpi: {mpirun, prefix, home, include, lib} of the node's MPI, or None."""
    from collbench_py.facts.mpi import detect_mpi

    found = detect_mpi(probe.get("path_mpirun"), probe.get("mpiruns") or {}, set(existing), home or None)
    return found.as_fact() if found else None


def collbench_pair_problems(settings: dict[str, Any], collectives: list[str]) -> list[str]:
    """One sentence per bad collbench_pairs* or collbench_topology_group value (pairrun.settings_problems)."""
    from collbench_py.pairs.controller import settings_problems

    return settings_problems(
        settings.get("pairs"),
        collective=settings.get("collective"),
        collectives=list(collectives or []),
        k=settings.get("k"),
        localisation_rounds=settings.get("localisation_rounds"),
        groups=dict(settings.get("groups") or {}),
        min_drop=settings.get("min_drop", 0.05),
    )


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "collbench_host_dir": collbench_host_dir,
            "collbench_pair_problems": collbench_pair_problems,
            "collbench_pair_hop_targets": collbench_pair_hop_targets,
            "collbench_mpi_files": collbench_mpi_files,
            "collbench_mpi_detect": collbench_mpi_detect,
        }
