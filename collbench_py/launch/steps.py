"""One launch as one task per host: what each host runs, and what the manifest makes of it.

The role runs a launch with one task, the `collbench_launch` action (action_plugins/), on every host
of the launch. For its host the action asks `node_plan` what to do: nothing (a host that mpirun
reaches from the head), or one command, the node wrapper (collbench_py/node/launch_wrapper.py) given
a plan on stdin: the directories, links and hostfile to prepare (on the other hosts too, over
mpirun's own ssh), then the launch's steps one after another, each under its own bound (torch: one
step, every collective; nccl-tests and rccl-tests: one step per collective, each its own launch as
before), a sweep of the other hosts after a failed mpirun step. The wrapper answers one JSON object:
per step its status, exit code, true times, output and the small files it wrote. The action writes
the logs into the run directory (`run_outputs`), and the launch's first host turns every host's
answer into the manifest's entries (`launch_entries`).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from collbench_py.exitcodes import LAUNCH_TIMEOUT_RCS
from collbench_py.launch.spec import LaunchCommand, LaunchSpec, host_named, launch_command, rank_zero_host
from collbench_py.rundir.private_files import receive_private, write_private
from collbench_py.slurm.job import step_outcome_dict

# Time beyond the steps' bounds for the wrapper's ssh to the other hosts and Ansible's round trip.
BACKSTOP_MARGIN_S = 60
REMOTE_MARGIN_S = 120  # the wrapper's two ssh calls per host at most (prepare, sweep), 60 s each


@dataclass(frozen=True)
class Step:
    label: str  # names the step's launch directory
    collectives: tuple[str, ...]
    command: LaunchCommand


def launch_steps(spec: LaunchSpec) -> tuple[Step, ...]:
    """torch runs every collective in one launch; nccl-tests one launch per collective."""
    if spec.backend == "torch":
        return (Step(spec.label, spec.collectives, launch_command(spec)),)
    steps = []
    for collective in spec.collectives:
        one = replace(spec, label=f"{spec.label}-{collective}", collectives=(collective,))
        steps.append(Step(one.label, (collective,), launch_command(one)))
    return tuple(steps)


def log_suffix(spec: LaunchSpec) -> str:
    return ".log" if spec.backend == "torch" else ".json"


def is_head(spec: LaunchSpec) -> bool:
    """Whether rank 0 runs on this host, which then brings the logs back: the launch's first host, or
    under srun the first of its nodes in the allocation's order."""
    first = rank_zero_host(spec) if spec.launcher == "srun" else spec.hosts[0]
    return spec.this_host == first.name


def node_plan(spec: LaunchSpec, steps: Sequence[Step]) -> dict[str, Any] | None:
    """The wrapper's plan for this host, or None when it runs nothing (mpirun reaches it)."""
    first = steps[0].command
    if spec.this_host not in first.runners:
        return None
    this = host_named(spec, spec.this_host)
    # srun's rank 0 writes its log into the launch directory of the node that runs srun.
    dirs = [
        s.command.launch_dir
        for s in steps
        if s.command.binary_link or s.command.hostfile or s.command.launcher == "srun"
    ]
    links = [list(s.command.binary_link) for s in steps if s.command.binary_link]
    hostfiles = [s.command for s in steps if s.command.hostfile]
    remote = None
    if first.launcher == "mpirun" and len(spec.hosts) > 1:
        # mpirun starts the same binary path on every host: the links are needed there too.
        remote = {
            "rsh": ["ssh", *this.rsh_args],
            "hosts": [host.address for host in spec.hosts[1:]],
            "dirs": [s.command.launch_dir for s in steps if s.command.binary_link],
            "links": links,
        }
    return {
        "prepare": {
            "dirs": dirs,
            "links": links,
            "hostfiles": [[f"{c.launch_dir}/hostfile", c.hostfile] for c in hostfiles],
        },
        "remote": remote,
        "steps": [plan_step(spec, step) for step in steps],
    }


def plan_step(spec: LaunchSpec, step: Step) -> dict[str, Any]:
    command = step.command
    csv = f"{command.launch_dir}/{command.gpu_link_csv}" if command.gpu_link_csv else ""
    # Rank 0 writes the logs, on the head: only the head brings them back.
    files = [f"{command.launch_dir}/{c}{log_suffix(spec)}" for c in step.collectives] if is_head(spec) else []
    return {
        "name": step.label,
        "argv": list(command.argv),
        "env": dict(command.env),
        "timeout_s": spec.params.timeout_s,
        "kill_after_s": spec.kill_after_s,
        "match": command.launch_dir,
        "gpu_link_csv": csv,
        "files": files + ([csv] if csv else []),
    }


def plan_argv(spec: LaunchSpec) -> list[str]:
    this = host_named(spec, spec.this_host)
    return [this.node_python, this.wrapper, "--plan", "-"]


def backstop_s(spec: LaunchSpec, steps: Sequence[Step]) -> int:
    """How long the wrapper may take at most: every step's bound, the ssh calls, a margin."""
    bounds = len(steps) * (spec.params.timeout_s + spec.kill_after_s)
    remote = REMOTE_MARGIN_S if steps[0].command.launcher == "mpirun" and len(spec.hosts) > 1 else 0
    return bounds + remote + BACKSTOP_MARGIN_S


def answered_step(launcher: str, answer: Mapping[str, Any]) -> dict[str, Any]:
    """What the action keeps of the wrapper's answer for one step; under srun also the job step's id
    and Slurm state, read from srun's own lines (collbench_py.slurm.job)."""
    kept = {"label": answer.get("name")} | {
        key: answer.get(key) for key in ("status", "rc", "started", "ended", "killed")
    }
    if launcher == "srun":
        said = f"{answer.get('stdout', '')}\n{answer.get('stderr', '')}"
        kept |= step_outcome_dict(said, answer.get("rc"))
    return kept


def step_warnings(host: str, answered: Sequence[Mapping[str, Any]]) -> list[str]:
    """A line per step the wrapper answered as not ok: its status, exit code and last words."""
    return [
        f"{host}: {s['name']}: {s['status']} (rc {s['rc']}): "
        + " / ".join(s.get("stderr", "").strip().splitlines()[-3:])
        for s in answered
        if s.get("status") != "ok"
    ]


def unfinished_slurm_steps(steps: Sequence[Mapping[str, Any]]) -> list[str]:
    """Job steps that did not complete: scancel ends whatever of them Slurm still runs."""
    return [
        str(step["slurm_step"])
        for step in steps
        if step.get("slurm_step") and step.get("slurm_state") != "COMPLETED"
    ]


def manifest_launcher(spec: LaunchSpec, command: LaunchCommand) -> str:
    if command.launcher != "local":
        return command.launcher
    return "torchrun" if spec.backend == "torch" else "direct"


def launch_record(
    spec: LaunchSpec, steps: Sequence[Step], launch: Mapping[str, Any], dirs: Sequence[str]
) -> dict[str, Any]:
    """What every entry of the launch shares, worked out once on each host (no module run)."""
    return {
        "kind": spec.kind,
        "hosts": list(dirs),
        "dest": str(launch["dest"]),
        "round": launch.get("round"),
        "backend": spec.backend,
        "launcher": manifest_launcher(spec, steps[0].command),
        "ranks": sum(host.ranks for host in spec.hosts),
        "runners": list(steps[0].command.runners),
        "steps": [{"label": s.label, "collectives": list(s.collectives)} for s in steps],
    }


# ---------------------------------------------------------------- the run directory's files


def run_outputs(record: Mapping[str, Any], host_dir: str, answer: Mapping[str, Any]) -> dict[str, str]:
    """Name -> text of what the launch printed, for the run directory: nccl-tests print their log
    (`<collective>.log`); the torch benchmark writes its own, its launcher's output is kept beside
    them (`launcher-<host>.out`)."""
    outputs: dict[str, str] = {}
    for step in answer.get("steps") or ():
        printed = f"{step.get('stdout', '').rstrip(chr(10))}\n{step.get('stderr', '').rstrip(chr(10))}\n"
        if record["backend"] == "torch":
            outputs[f"launcher-{host_dir}.out"] = outputs.get(f"launcher-{host_dir}.out", "") + printed
        else:
            outputs[f"{step_collectives(record, step)[0]}.log"] = printed
    return outputs


def write_back(
    dest: Path,
    answer: Mapping[str, Any],
    outputs: Mapping[str, str],
    fetch: Callable[[str, str], Any],
) -> list[str]:
    """The launch's files (inside the wrapper's answer; a large one brought with `fetch(remote,
    local)`, over the host's connection) and its printed output, written into the launch's
    directory of the run; the names written. Raises what writing or fetching raised."""
    written = []
    for step in answer["steps"]:
        for name, data in sorted((step.get("files") or {}).items()):
            write_private(dest / Path(name).name, base64.b64decode(data))
            written.append(Path(name).name)
        for remote in step.get("large") or ():
            name = Path(remote).name
            receive_private(dest / name, lambda local, r=remote: fetch(r, local))
            written.append(name)
    for name, text in outputs.items():
        write_private(dest / name, text.encode("utf-8", "surrogateescape"))
        written.append(name)
    return written


def step_collectives(record: Mapping[str, Any], step: Mapping[str, Any]) -> list[str]:
    for planned in record["steps"]:
        if planned["label"] == step.get("name"):
            return list(planned["collectives"])
    raise ValueError(f"the wrapper answered for a step not planned: {step.get('name')!r}")


# ---------------------------------------------------------------- the manifest's entries


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def to_second(stamp: str) -> str:
    """The wrapper's 2026-05-01T10:00:00.125Z as the manifest keeps it, 2026-05-01T10:00:00Z."""
    return stamp.split(".", maxsplit=1)[0].rstrip("Z") + "Z"


def runner_steps(result: Mapping[str, Any], label: str) -> dict[str, Any] | None:
    """What one host answered for a step; None when it never answered (backstop, lost host)."""
    for step in result.get("steps") or ():
        if step.get("label") == label:
            return step
    return None


def launch_entries(
    head: Mapping[str, Any], runners: Sequence[Mapping[str, Any]], now: str | None = None
) -> list[dict[str, Any]]:
    """The manifest's entries of one launch (docs/run-directory.md), from the head's result (which
    carries the launch's record) and every runner's (the head's among them)."""
    now = now or utc_now()
    record = head["launch"]
    # The logs come back with rank 0's host: the head, or under srun the node that ran srun.
    files = sorted({name for result in [head, *runners] for name in result.get("files") or ()})
    head = {**head, "files": files}
    entries = []
    for planned in record["steps"]:
        outcome = step_outcome(head, runners, planned["label"], now)
        for collective in planned["collectives"]:
            entries.append(entry(record, head, collective, outcome))
    return entries


@dataclass(frozen=True)
class Outcome:
    status: str  # ok, failed, timeout, skipped
    rc: int | None
    started_at: str | None
    finished_at: str | None
    reason: str = ""
    slurm: Mapping[str, Any] | None = None  # srun: slurm_step and slurm_state


def step_outcome(
    head: Mapping[str, Any], runners: Sequence[Mapping[str, Any]], label: str, now: str
) -> Outcome:
    if head.get("check_mode"):
        return Outcome("skipped", None, None, None)
    if head.get("refused"):
        reason = f"not started: the ssh hop {head['refused']} failed its check"
        return Outcome("failed", None, now, now, reason)
    answers = [runner_steps(result, label) for result in runners]
    if head["launch"]["launcher"] == "srun":
        return srun_outcome(answers[0] if answers else None, runners, now)
    rcs = [answer["rc"] if answer else -1 for answer in answers]
    # A host whose wrapper never answered (the action's backstop) was running until now.
    unanswered = any(result.get("unanswered") or result.get("timedout") for result in runners)
    answered = [answer for answer in answers if answer]
    if unanswered or any(rc in LAUNCH_TIMEOUT_RCS for rc in rcs):
        status = "timeout"
    elif all(rc == 0 for rc in rcs):
        status = "ok"
    else:
        status = "failed"
    started = min((to_second(a["started"]) for a in answered), default=None)
    ended = max((to_second(a["ended"]) for a in answered), default=None)
    finished = now if unanswered and answered else ended
    return Outcome(status, next((rc for rc in rcs if rc != 0), 0), started, finished)


def srun_outcome(answer: Mapping[str, Any] | None, runners: Sequence[Mapping[str, Any]], now: str) -> Outcome:
    """The one runner's step under srun: its status is what Slurm ended the step as."""
    unanswered = answer is None or any(
        result.get("unanswered") or result.get("timedout") for result in runners
    )
    slurm = {"slurm_step": (answer or {}).get("slurm_step"), "slurm_state": (answer or {}).get("slurm_state")}
    if answer is None:
        return Outcome("timeout" if unanswered else "failed", -1, None, None, slurm=slurm)
    status = "timeout" if unanswered else str(answer.get("status") or "failed")
    started, ended = to_second(answer["started"]), to_second(answer["ended"])
    return Outcome(status, answer["rc"], started, now if unanswered else ended, slurm=slurm)


def entry(
    record: Mapping[str, Any], head: Mapping[str, Any], collective: str, outcome: Outcome
) -> dict[str, Any]:
    status = outcome.status
    if status == "ok":
        # The torch benchmark's sendrecv writes no log on one rank (it has no partner).
        if record["backend"] == "torch" and collective == "sendrecv" and int(record["ranks"]) < 2:
            status = "skipped"
        elif f"{collective}.log" not in (head.get("files") or ()):
            status = "failed"
    found = {
        "kind": record["kind"],
        "hosts": list(record["hosts"]),
        "collective": collective,
        "log": f"{record['dest']}/{collective}.log",
        "status": status,
        "rc": None if outcome.status == "skipped" else outcome.rc,
        "started_at": outcome.started_at,
        "finished_at": outcome.finished_at,
        "round": record["round"],
        "launcher": record["launcher"],
    }
    if outcome.reason:
        found["reason"] = outcome.reason
    if record["launcher"] == "srun":
        found |= dict(outcome.slurm or {"slurm_step": None, "slurm_state": None})
    return found
