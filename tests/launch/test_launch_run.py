"""collbench_py.launch.steps: what each host of a launch runs (the wrapper's plan) and what the
manifest makes of every host's answer (docs/run-directory.md). The plan runs for real in
tests/launch/test_launch_plan_wrapper.py and on the SSH test cluster (tests/cluster/test_launch_bound.py,
test_nccl_e2e.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleFilterError

from collbench_py.launch.steps import (
    answered_step,
    backstop_s,
    launch_entries,
    launch_record,
    launch_steps,
    node_plan,
    run_outputs,
    unfinished_slurm_steps,
)
from filter_plugins.collbench_launch_entries import collbench_launch_entries
from tests.launch.test_launch import SLURM, host, spec

NOW = "2026-05-01T10:09:00Z"
PAIR = (host(1), host(2))


def nccl_pair(this: str = "node1", collectives: tuple[str, ...] = ("all_reduce", "all_gather")) -> Any:
    return spec(
        "nccl-tests",
        "mpirun",
        "pair",
        PAIR,
        label="pair-node1--node2",
        collectives=collectives,
        this_host=this,
    )


def torch_pair(this: str = "node1") -> Any:
    return spec("torch", "torchrun", "pair", PAIR, this_host=this)


def record_of(launch_spec: Any) -> dict[str, Any]:
    steps = launch_steps(launch_spec)
    launch = {"kind": launch_spec.kind, "dest": "inter/pairs/node1--node2", "round": 2}
    return launch_record(launch_spec, steps, launch, ["node1", "node2"])


def answer(label: str, rc: int, started: str = "10:00:00.400", ended: str = "10:00:05.600") -> dict[str, Any]:
    status = "ok" if rc == 0 else "timeout" if rc == 124 else "failed"
    return {
        "label": label,
        "status": status,
        "rc": rc,
        "started": f"2026-05-01T{started}Z",
        "ended": f"2026-05-01T{ended}Z",
    }


# ---------------------------------------------------------------- the plan


def test_nccl_tests_run_every_collective_in_turn_from_the_head_and_prepare_the_peer_over_ssh() -> None:
    head = replace(host(1), rsh_args=("-i", "/k", "-o", "UserKnownHostsFile=/kh"))
    launch_spec = replace(nccl_pair(), hosts=(head, host(2)))
    steps = launch_steps(launch_spec)
    assert [s.label for s in steps] == ["pair-node1--node2-all_reduce", "pair-node1--node2-all_gather"]
    plan = node_plan(launch_spec, steps)
    assert plan is not None
    root = head.run_root
    dirs = [f"{root}/pair-node1--node2-all_reduce", f"{root}/pair-node1--node2-all_gather"]
    links = [["/w/nccl-tests/build/all_reduce_perf", f"{dirs[0]}/all_reduce_perf"]]
    links += [["/w/nccl-tests/build/all_gather_perf", f"{dirs[1]}/all_gather_perf"]]
    assert plan["prepare"]["dirs"] == dirs and plan["prepare"]["links"] == links
    assert [path for path, _ in plan["prepare"]["hostfiles"]] == [f"{d}/hostfile" for d in dirs]
    assert plan["prepare"]["hostfiles"][0][1] == "10.0.0.11 slots=8\n10.0.0.12 slots=8\n"
    # mpirun starts the same link on the peer: made there first, over mpirun's own ssh.
    assert plan["remote"] == {
        "rsh": ["ssh", "-i", "/k", "-o", "UserKnownHostsFile=/kh"],
        "hosts": ["10.0.0.12"],
        "dirs": dirs,
        "links": links,
    }
    first, second = plan["steps"]
    assert first["argv"] == list(steps[0].command.argv) and first["argv"][0].endswith("/mpirun")
    assert (first["timeout_s"], first["kill_after_s"], first["match"]) == (100, 10, dirs[0])
    assert first["files"] == [f"{dirs[0]}/all_reduce.json"]
    assert second["files"] == [f"{dirs[1]}/all_gather.json"]
    assert first["env"]["TZ"] == "UTC"
    # Two bounds one after another, the ssh calls and a margin.
    assert backstop_s(launch_spec, steps) == 2 * (100 + 10) + 120 + 60


def test_the_peer_that_mpirun_reaches_runs_no_command() -> None:
    launch_spec = nccl_pair(this="node2")
    assert node_plan(launch_spec, launch_steps(launch_spec)) is None


def test_torch_runs_one_step_on_every_host_under_torchrun_and_only_the_head_brings_logs_back() -> None:
    head_plan = node_plan(torch_pair(), launch_steps(torch_pair()))
    peer_plan = node_plan(torch_pair("node2"), launch_steps(torch_pair("node2")))
    assert head_plan and peer_plan
    assert len(head_plan["steps"]) == 1 and head_plan["remote"] is None
    out = f"{host(1).run_root}/pair-node1--node2"
    assert head_plan["steps"][0]["files"] == [f"{out}/all_reduce.log", f"{out}/all_gather.log"]
    assert peer_plan["steps"][0]["files"] == []
    # The torch benchmark makes its own directory: nothing to prepare.
    assert head_plan["prepare"] == {"dirs": [], "links": [], "hostfiles": []}


def test_an_intra_launch_on_nvidia_samples_the_links_and_brings_the_samples_back() -> None:
    one = spec("nccl-tests", "mpirun", "intra", (host(1),), label="intra", collectives=("all_reduce",))
    plan = node_plan(one, launch_steps(one))
    assert plan and plan["remote"] is None
    step = plan["steps"][0]
    assert step["gpu_link_csv"] == f"{host(1).run_root}/intra-all_reduce/gpu-link-all_reduce.csv"
    assert step["files"][-1] == step["gpu_link_csv"]


# ---------------------------------------------------------------- the run directory's files


def test_nccl_tests_output_is_each_collectives_log_and_torchs_is_the_launchers() -> None:
    record = record_of(nccl_pair())
    said = {
        "steps": [
            {"name": "pair-node1--node2-all_reduce", "stdout": "table\n", "stderr": "bound line\n"},
            {"name": "pair-node1--node2-all_gather", "stdout": "other", "stderr": ""},
        ]
    }
    assert run_outputs(record, "node1", said) == {
        "all_reduce.log": "table\nbound line\n",
        "all_gather.log": "other\n\n",
    }
    torch_record = record_of(torch_pair())
    torch_said = {"steps": [{"name": "pair-node1--node2", "stdout": "", "stderr": "rendezvous\n"}]}
    assert run_outputs(torch_record, "node2", torch_said) == {"launcher-node2.out": "\nrendezvous\n"}


# ---------------------------------------------------------------- the manifest's entries


def head_result(record: dict[str, Any], steps: list[dict[str, Any]], files: list[str], **extra: Any) -> dict:
    return {"launch": record, "steps": steps, "files": files, "refused": "", "check_mode": False, **extra}


def test_an_ok_launch_gives_one_entry_per_collective_with_its_own_times() -> None:
    record = record_of(nccl_pair())
    steps = [
        answer("pair-node1--node2-all_reduce", 0, "10:00:00.400", "10:00:05.600"),
        answer("pair-node1--node2-all_gather", 0, "10:00:05.700", "10:00:09.100"),
    ]
    head = head_result(record, steps, ["all_reduce.log", "all_reduce.json", "all_gather.log"])
    entries = launch_entries(head, [head], NOW)
    assert entries == [
        {
            "kind": "pair",
            "hosts": ["node1", "node2"],
            "collective": "all_reduce",
            "log": "inter/pairs/node1--node2/all_reduce.log",
            "status": "ok",
            "rc": 0,
            "started_at": "2026-05-01T10:00:00Z",
            "finished_at": "2026-05-01T10:00:05Z",
            "round": 2,
            "launcher": "mpirun",
        },
        {
            "kind": "pair",
            "hosts": ["node1", "node2"],
            "collective": "all_gather",
            "log": "inter/pairs/node1--node2/all_gather.log",
            "status": "ok",
            "rc": 0,
            "started_at": "2026-05-01T10:00:05Z",
            "finished_at": "2026-05-01T10:00:09Z",
            "round": 2,
            "launcher": "mpirun",
        },
    ]


def test_a_failed_or_bounded_host_decides_the_launch_and_the_later_end_counts() -> None:
    record = record_of(torch_pair())
    logs = ["all_reduce.log", "all_gather.log"]
    ok = head_result(record, [answer("pair-node1--node2", 0)], logs)
    failed = head_result(record, [answer("pair-node1--node2", 1, ended="10:00:02.000")], [])
    bounded = head_result(record, [answer("pair-node1--node2", 124, ended="10:00:40.900")], [])
    assert {e["status"] for e in launch_entries(ok, [ok, ok], NOW)} == {"ok"}
    assert [(e["status"], e["rc"]) for e in launch_entries(ok, [ok, failed], NOW)] == [("failed", 1)] * 2
    both = launch_entries(ok, [failed, bounded], NOW)
    assert [(e["status"], e["rc"]) for e in both] == [("timeout", 1)] * 2
    assert both[0]["finished_at"] == "2026-05-01T10:00:40Z"
    assert both[0]["launcher"] == "torchrun"


def test_a_host_that_never_answered_makes_a_timeout_that_ends_when_recorded() -> None:
    record = record_of(torch_pair())
    ok = head_result(record, [answer("pair-node1--node2", 1)], [])
    # The backstop: no steps, `unanswered` (the action's) or Ansible's `timedout`.
    for silent in ({"unanswered": True, "steps": []}, {"failed": True, "timedout": {"period": 5}}):
        entries = launch_entries(ok, [ok, silent], NOW)
        assert [(e["status"], e["finished_at"]) for e in entries] == [("timeout", NOW)] * 2, silent
        assert entries[0]["started_at"] == "2026-05-01T10:00:00Z"


def test_a_host_lost_mid_launch_is_a_failure() -> None:
    record = record_of(torch_pair())
    ok = head_result(record, [answer("pair-node1--node2", 0)], ["all_reduce.log", "all_gather.log"])
    entries = launch_entries(ok, [ok, {"unreachable": True}], NOW)
    assert [(e["status"], e["rc"]) for e in entries] == [("failed", -1)] * 2


def test_an_ok_launch_without_its_log_failed_and_sendrecv_on_one_rank_is_skipped() -> None:
    record = record_of(torch_pair())
    ok = head_result(record, [answer("pair-node1--node2", 0)], ["all_reduce.log"])
    assert [e["status"] for e in launch_entries(ok, [ok], NOW)] == ["ok", "failed"]
    one = spec("torch", "torchrun", "intra", (host(1, ranks=1),), collectives=("sendrecv",))
    steps = launch_steps(one)
    single = launch_record(
        one, steps, {"kind": "intra", "dest": "hosts/node1/intra", "round": None}, ["node1"]
    )
    alone = head_result(single, [answer("intra", 0)], [])
    assert [(e["status"], e["rc"]) for e in launch_entries(alone, [alone], NOW)] == [("skipped", 0)]


def test_a_refused_launch_is_failed_with_its_reason_and_check_mode_skips() -> None:
    record = record_of(nccl_pair())
    refused = head_result(record, [], [], refused="node1 -> node2: Permission denied")
    entries = launch_entries(refused, [refused], NOW)
    assert {(e["status"], e["rc"], e["started_at"], e["finished_at"]) for e in entries} == {
        ("failed", None, NOW, NOW)
    }
    assert (
        entries[0]["reason"] == "not started: the ssh hop node1 -> node2: Permission denied failed its check"
    )
    checked = head_result(record, [], [], check_mode=True)
    entries = launch_entries(checked, [checked], NOW)
    assert {(e["status"], e["rc"], e["started_at"]) for e in entries} == {("skipped", None, None)}
    assert "reason" not in entries[0]


def test_the_filter_says_when_the_head_has_no_result() -> None:
    with pytest.raises(AnsibleFilterError, match="no launch result"):
        collbench_launch_entries({"failed": True}, [])


# ---------------------------------------------------------------- srun

SLURM_DATA = Path(__file__).parents[1] / "data" / "slurm"


def srun_pair(backend: str = "torch", this: str = "node1") -> Any:
    # The launch lists node3 first; Slurm's order (node1 before node3) puts rank 0 on node1.
    return spec(
        backend, "srun", "pair", (host(3), host(1)), slurm=SLURM, this_host=this, label="pair-node3--node1"
    )


def srun_answer(label: str, capture: str) -> dict[str, Any]:
    """The wrapper's answer for a step whose srun printed a real capture (tests/data/slurm/)."""
    text = (SLURM_DATA / capture).read_text()
    rc = int(text.rsplit("rc=", 1)[1]) if "\nrc=" in text else 0
    return {
        "name": label,
        "status": "ok" if rc == 0 else "failed",
        "rc": rc,
        "started": "2026-05-01T10:00:00.400Z",
        "ended": "2026-05-01T10:00:05.600Z",
        "stdout": "",
        "stderr": text,
    }


def test_under_srun_the_rank_zero_node_runs_srun_prepares_its_own_directory_and_brings_the_logs() -> None:
    steps = launch_steps(srun_pair("nccl-tests"))
    plan = node_plan(srun_pair("nccl-tests"), steps)
    assert plan is not None
    launch_dir = f"{host(1).run_root}/pair-node3--node1-all_reduce"
    # No link, no hostfile, no ssh to the other node: srun starts the build's binary there itself.
    assert plan["prepare"] == {"dirs": [launch_dir], "links": [], "hostfiles": []}
    assert plan["remote"] is None
    assert plan["steps"][0]["argv"][0] == "srun"
    assert plan["steps"][0]["files"] == [f"{launch_dir}/all_reduce.json"]
    # The launch's first host (node3) runs nothing: its tasks are srun's.
    assert (
        node_plan(srun_pair("nccl-tests", this="node3"), launch_steps(srun_pair("nccl-tests", "node3")))
        is None
    )
    assert record_of(srun_pair())["runners"] == ["node1"]


@pytest.mark.parametrize(
    ("capture", "state", "status"),
    [
        ("srun-v-completed.txt", "COMPLETED", "ok"),
        ("srun-v-time-limit.txt", "TIMEOUT", "timeout"),
        ("srun-v-node-failure.txt", "NODE_FAIL", "failed"),
        ("srun-v-task-failed.txt", "FAILED", "failed"),
    ],
)
def test_a_steps_slurm_state_from_srun_decides_its_entries(capture: str, state: str, status: str) -> None:
    launch_spec = srun_pair()
    record = record_of(launch_spec)
    kept = answered_step("srun", srun_answer("pair-node3--node1", capture))
    assert kept["slurm_state"] == state and kept["slurm_step"]
    runner = head_result(record, [kept], ["all_reduce.log", "all_gather.log"])
    # The launch's first host (node3) ran nothing: its result has no step and no file.
    first = head_result(record, [], [])
    entries = launch_entries(first, [runner], NOW)
    assert [(e["status"], e["slurm_state"], e["slurm_step"]) for e in entries] == [
        (status, state, kept["slurm_step"])
    ] * 2
    assert entries[0]["launcher"] == "srun" and entries[0]["started_at"] == "2026-05-01T10:00:00Z"
    assert unfinished_slurm_steps([kept]) == ([] if state == "COMPLETED" else [kept["slurm_step"]])


def test_a_step_ended_by_the_projects_bound_is_a_timeout_and_a_silent_runner_too() -> None:
    record = record_of(srun_pair())
    bounded = answered_step(
        "srun", srun_answer("pair-node3--node1", "srun-v-cancelled-by-bound.txt") | {"rc": 124}
    )
    assert (bounded["slurm_state"], bounded["slurm_step"]) == ("CANCELLED", bounded["slurm_step"])
    runner = head_result(record, [bounded], [])
    entries = launch_entries(head_result(record, [], []), [runner], NOW)
    assert {(e["status"], e["slurm_state"]) for e in entries} == {("timeout", "CANCELLED")}
    silent = {"unanswered": True, "steps": []}
    entries = launch_entries(head_result(record, [], []), [silent], NOW)
    # As under the other launchers, a launch nothing answered for has no times.
    assert {(e["status"], e["slurm_step"], e["finished_at"]) for e in entries} == {("timeout", None, None)}


def test_other_launchers_keep_no_slurm_fields() -> None:
    kept = answered_step("mpirun", srun_answer("pair-node1--node2-all_reduce", "srun-v-completed.txt"))
    assert "slurm_state" not in kept
    record = record_of(nccl_pair())
    head = head_result(record, [answer("pair-node1--node2-all_reduce", 0)], ["all_reduce.log"])
    assert "slurm_step" not in launch_entries(head, [head], NOW)[0]
