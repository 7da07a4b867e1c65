"""Thin filters over collbench_py.slurm.job (launcher srun): the logic lives in the package."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

_REPO = str(Path(__file__).resolve().parent.parent)
if _REPO not in sys.path:
    sys.path.append(_REPO)

# collbench_py is imported inside each filter, not here: Ansible loads every filter file in each
# worker process that templates any filter (every task, every host), and importing the package
# there cost ~0.3 s of controller CPU per task and host.


def collbench_slurm_allocation_argv(data: dict[str, Any]) -> list[str]:
    """salloc's argv for the run's allocation."""
    from collbench_py.slurm.job import SlurmJobError, allocation_argv, allocation_from_dict

    try:
        return allocation_argv(allocation_from_dict(data))
    except SlurmJobError as err:
        raise AnsibleFilterError(f"cannot ask Slurm for the allocation: {err}") from None


def collbench_slurm_granted_job(salloc_output: str) -> str | None:
    """The job id of a granted allocation, or None."""
    from collbench_py.slurm.job import granted_job_id

    return granted_job_id(salloc_output or "")


def collbench_slurm_refusal(salloc_output: str, rc: object, data: dict[str, Any]) -> str:
    """Why the allocation was not granted, in one line."""
    from collbench_py.slurm.job import allocation_from_dict, refusal_message

    return refusal_message(salloc_output or "", int(rc or 0), allocation_from_dict(data))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "collbench_slurm_allocation_argv": collbench_slurm_allocation_argv,
            "collbench_slurm_granted_job": collbench_slurm_granted_job,
            "collbench_slurm_refusal": collbench_slurm_refusal,
        }
