"""collbench_py.slurm.job: the run's allocation (salloc's argv) and what a job step ended as, read from
what srun and salloc really printed on the Slurm test cluster (tests/data/slurm/STEPS.md)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from collbench_py.slurm.job import (
    Allocation,
    SlurmJobError,
    allocation_argv,
    allocation_from_dict,
    granted_job_id,
    refusal_message,
    step_outcome,
    step_outcome_dict,
)

DATA = Path(__file__).parents[1] / "data" / "slurm"
ALLOC = Allocation(run_id="20260101T000000Z-abcd", nodes=("node1", "node2"), tasks_per_node=8)


def captured(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def srun_rc(text: str) -> int:
    """The exit code the capture recorded on its last line (`rc=N`)."""
    return int(text.rstrip().splitlines()[-1].removeprefix("rc="))


# ---------------------------------------------------------------- the allocation


def test_allocation_argv_minimal() -> None:
    assert allocation_argv(ALLOC) == [
        *("salloc", "--no-shell", "--no-kill", "--job-name", "collbench-20260101T000000Z-abcd"),
        *("-N", "2", "-w", "node1,node2", "--ntasks-per-node", "8"),
        *("--time", "01:00:00", "--immediate=60"),
    ]


def test_allocation_argv_every_option_in_order_extra_args_last() -> None:
    alloc = replace(
        ALLOC,
        partition="gpu",
        account="proj1",
        qos="high",
        reservation="maint",
        time="00:30:00",
        wait_s=5,
        extra_args=("--exclusive", "--constraint=h100"),
    )
    argv = allocation_argv(alloc)
    assert argv[argv.index("--ntasks-per-node") + 2 :] == [
        *("-p", "gpu", "-A", "proj1", "--qos", "high", "--reservation", "maint"),
        *("--time", "00:30:00", "--immediate=5", "--exclusive", "--constraint=h100"),
    ]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"nodes": ()}, "no node left"),
        ({"nodes": ("node1,node9",)}, "cannot be given to Slurm"),
        ({"nodes": ("node 1",)}, "cannot be given to Slurm"),
        ({"tasks_per_node": 0}, "at least one task"),
        ({"wait_s": 0}, "allocation_wait_s"),
    ],
)
def test_allocation_refuses_what_salloc_would_misread(change: dict, said: str) -> None:
    with pytest.raises(SlurmJobError, match=said):
        allocation_argv(replace(ALLOC, **change))


def test_allocation_from_jinja_values() -> None:
    data = {"run_id": "r1", "nodes": ["node1"], "tasks_per_node": "2", "partition": None, "extra_args": []}
    assert allocation_from_dict(data) == Allocation(run_id="r1", nodes=("node1",), tasks_per_node=2)
    with pytest.raises(SlurmJobError, match="must be a list"):
        allocation_from_dict({**data, "extra_args": "--exclusive"})
    with pytest.raises(SlurmJobError, match="incomplete"):
        allocation_from_dict({"nodes": ["node1"]})


def test_granted_job_id_from_salloc() -> None:
    assert granted_job_id("salloc: Granted job allocation 1234\n") == "1234"
    assert granted_job_id(captured("salloc-immediate-busy.txt")) is None


def test_a_busy_partition_is_one_clear_message() -> None:
    text = captured("salloc-immediate-busy.txt")
    message = refusal_message(text, srun_rc(text), replace(ALLOC, partition="gpu", wait_s=2))
    assert message == (
        "Slurm did not grant the allocation of 2 nodes in partition gpu within 2 s "
        "(collbench_slurm_allocation_wait_s) (job 3): salloc: error: Unable to allocate resources: "
        "Connection timed out; no launch was started"
    )


# ---------------------------------------------------------------- job steps


def test_completed_step() -> None:
    text = captured("srun-v-completed.txt")
    outcome = step_outcome(text, 0)
    assert (outcome.step_id, outcome.state, outcome.status) == ("1.1", "COMPLETED", "ok")


def test_step_past_its_time_limit_is_timeout() -> None:
    text = captured("srun-v-time-limit.txt")
    outcome = step_outcome(text, srun_rc(text))
    assert (outcome.step_id, outcome.state, outcome.status) == ("2.0", "TIMEOUT", "timeout")


def test_node_failure_is_failed_even_though_srun_exits_0() -> None:
    text = captured("srun-v-node-failure.txt")
    assert srun_rc(text) == 0
    outcome = step_outcome(text, 0)
    assert (outcome.step_id, outcome.state, outcome.status) == ("2.1", "NODE_FAIL", "failed")


def test_step_cancelled_by_the_projects_bound_is_timeout() -> None:
    text = captured("srun-v-cancelled-by-bound.txt")
    outcome = step_outcome(text, 124)
    # srun also names another step of the job (`Complete StepId=2.0+0 received`): the launched one counts.
    assert "StepId=2.0" in text
    assert (outcome.step_id, outcome.state, outcome.status) == ("2.2", "CANCELLED", "timeout")


def test_failed_task_is_failed() -> None:
    text = captured("srun-v-task-failed.txt")
    outcome = step_outcome(text, srun_rc(text))
    assert (outcome.step_id, outcome.state, outcome.status) == ("1.1", "FAILED", "failed")


def test_a_step_srun_never_launched_has_no_id() -> None:
    # What srun says when the step cannot be created (no StepId line follows).
    never = "srun: error: Unable to create step for job 5: Requested node configuration is not available\n"
    outcome = step_outcome(never, 1)
    assert (outcome.step_id, outcome.state, outcome.status) == (None, "FAILED", "failed")


def test_outcome_for_jinja_takes_odd_exit_codes() -> None:
    text = captured("srun-v-completed.txt")
    assert step_outcome_dict(text, "0") == {"slurm_step": "1.1", "slurm_state": "COMPLETED", "status": "ok"}
    assert step_outcome_dict("", None)["slurm_state"] == "FAILED"
