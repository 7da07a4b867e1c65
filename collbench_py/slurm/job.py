"""One Slurm allocation per run, and what its job steps ended as (collbench_launcher: srun).

The run asks for one allocation with `salloc --no-shell` (its argv: `allocation_argv`) on the submit
host (a login node, or the controller), runs every launch as a job step inside it (collbench_py.launch.spec)
and cancels it at the end (`scancel <job>`). `--no-kill`: a node that fails mid-run ends its own steps,
not the allocation, so the launches on the other nodes go on.

The clusters this runs on need not keep accounting (sacct), so a step's id and end state are read from
what srun itself prints with `-v` (captured in tests/data/slurm/): `launching StepId=J.S on host ...`,
then for a step Slurm ended, `*** STEP J.S ON node CANCELLED AT ... DUE TO TIME LIMIT ***` (a step past
its --time), `Node failure on node2` (srun exits 0 then: its exit code alone does not tell).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from collbench_py.exitcodes import LAUNCH_TIMEOUT_RCS

# Slurm's job step states that a launch can end in (sacct's names).
STEP_STATES = ("COMPLETED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "FAILED", "OUT_OF_MEMORY")

# The step srun launched; srun may name other steps of the job too (`Complete StepId=2.0+0 received`).
_STEP_ID = re.compile(r"\blaunching StepId=(\d+\.\d+)")
_STEP_BANNER = re.compile(r"\*\*\* STEP (\d+\.\d+) ON \S+ CANCELLED AT \S+(?: DUE TO ([A-Z ]+?))? \*\*\*")
_NODE_FAILURE = re.compile(r"srun: error: Node failure on (\S+)")
_OUT_OF_MEMORY = re.compile(r"oom[-_ ]kill|OUT_OF_MEMORY|Out Of Memory", re.IGNORECASE)
_GRANTED = re.compile(r"Granted job allocation (\d+)")
_PENDING = re.compile(r"Pending job allocation (\d+)")


class SlurmJobError(ValueError):
    """An allocation that cannot be asked for as described: one message for the user."""


@dataclass(frozen=True)
class Allocation:
    """What the run asks Slurm for (the collbench_slurm_* variables)."""

    run_id: str
    nodes: tuple[str, ...]  # Slurm node names, the run's reachable nodes
    tasks_per_node: int  # the most ranks a launch starts on one node
    time: str = "01:00:00"
    wait_s: int = 60
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    extra_args: tuple[str, ...] = ()


def allocation_argv(alloc: Allocation) -> list[str]:
    """salloc's argv: one allocation for the whole run, no shell, given up after `wait_s` seconds."""
    if not alloc.nodes:
        raise SlurmJobError("no node left in the run to ask Slurm for")
    if alloc.tasks_per_node < 1:
        raise SlurmJobError(f"a launch needs at least one task per node, not {alloc.tasks_per_node}")
    if alloc.wait_s < 1:
        raise SlurmJobError(f"collbench_slurm_allocation_wait_s must be 1 or more, not {alloc.wait_s}")
    for name in alloc.nodes:
        # -w takes a comma-separated list: a name with a comma or a blank would name other nodes.
        if not name or any(c in name for c in ", \t\n"):
            raise SlurmJobError(f"{name!r} cannot be given to Slurm as a node name")
    argv = ["salloc", "--no-shell", "--no-kill", "--job-name", f"collbench-{alloc.run_id}"]
    argv += ["-N", str(len(alloc.nodes)), "-w", ",".join(alloc.nodes)]
    argv += ["--ntasks-per-node", str(alloc.tasks_per_node)]
    for flag, value in (
        ("-p", alloc.partition),
        ("-A", alloc.account),
        ("--qos", alloc.qos),
        ("--reservation", alloc.reservation),
    ):
        if value:
            argv += [flag, str(value)]
    argv += ["--time", alloc.time, f"--immediate={alloc.wait_s}"]
    return argv + list(alloc.extra_args)


def granted_job_id(salloc_output: str) -> str | None:
    """The job id salloc printed once the allocation was granted, or None."""
    found = _GRANTED.search(salloc_output)
    return found.group(1) if found else None


def refusal_message(salloc_output: str, rc: int, alloc: Allocation) -> str:
    """Why the allocation was not granted, in one line for the user and the manifest."""
    said = [line.strip() for line in salloc_output.splitlines() if "error" in line.lower()]
    detail = said[-1] if said else (salloc_output.strip().splitlines() or [f"salloc exited with {rc}"])[-1]
    where = f"partition {alloc.partition}" if alloc.partition else "the default partition"
    pending = _PENDING.search(salloc_output)
    job = f" (job {pending.group(1)})" if pending else ""
    return (
        f"Slurm did not grant the allocation of {len(alloc.nodes)} nodes in {where} within "
        f"{alloc.wait_s} s (collbench_slurm_allocation_wait_s){job}: {detail}; no launch was started"
    )


@dataclass(frozen=True)
class StepOutcome:
    step_id: str | None  # "123.4"; None when srun never launched it
    state: str  # one of STEP_STATES
    status: str  # the launch's status in the manifest: ok, timeout or failed


def step_outcome(srun_output: str, rc: int | None) -> StepOutcome:
    """What a step ended as, from srun -v's own lines (stderr) and the launch wrapper's exit code."""
    ids = _STEP_ID.findall(srun_output)
    banner = _STEP_BANNER.search(srun_output)
    step_id = ids[0] if ids else (banner.group(1) if banner else None)
    reason = (banner.group(2) or "") if banner else ""
    if "TIME LIMIT" in reason:
        return StepOutcome(step_id, "TIMEOUT", "timeout")
    if _NODE_FAILURE.search(srun_output) or "NODE FAIL" in reason:
        return StepOutcome(step_id, "NODE_FAIL", "failed")
    if rc in LAUNCH_TIMEOUT_RCS:
        # The project's own bound ended srun, which cancelled the step.
        return StepOutcome(step_id, "CANCELLED", "timeout")
    if rc == 0:
        return StepOutcome(step_id, "COMPLETED", "ok")
    if banner:
        return StepOutcome(step_id, "CANCELLED", "failed")
    if _OUT_OF_MEMORY.search(srun_output):
        return StepOutcome(step_id, "OUT_OF_MEMORY", "failed")
    return StepOutcome(step_id, "FAILED", "failed")


def step_outcome_dict(srun_output: str, rc: object) -> dict[str, str | None]:
    """step_outcome for Jinja: the manifest's slurm_step, slurm_state and the launch status."""
    try:
        code = int(rc) if rc is not None and rc != "" else None
    except (TypeError, ValueError):
        code = None
    outcome = step_outcome(srun_output or "", code)
    return {"slurm_step": outcome.step_id, "slurm_state": outcome.state, "status": outcome.status}


def allocation_from_dict(data: dict) -> Allocation:
    """An Allocation from the plain dict playbooks/slurm.yml builds."""
    extra = data.get("extra_args") or ()
    if isinstance(extra, (str, bytes)) or not isinstance(extra, Sequence):
        raise SlurmJobError(f"collbench_slurm_extra_args must be a list, not {extra!r}")
    try:
        return Allocation(
            run_id=str(data["run_id"]),
            nodes=tuple(str(n) for n in data["nodes"]),
            tasks_per_node=int(data["tasks_per_node"]),
            time=str(data.get("time") or "01:00:00"),
            wait_s=int(data.get("wait_s") or 60),
            partition=data.get("partition") or None,
            account=data.get("account") or None,
            qos=data.get("qos") or None,
            reservation=data.get("reservation") or None,
            extra_args=tuple(str(a) for a in extra),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise SlurmJobError(f"the allocation's description is incomplete or malformed: {err!r}") from None
