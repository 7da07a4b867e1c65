"""collbench_round: one round of pairs, every launch of it started from this one controller task.

The round's pair launches (the plan's `pairs`) and rail launches (`rail_pairs`) are fanned out
from here (collbench_py/launch/fanout.py): for each host that runs a command, the command goes over
that host's own Ansible connection (its address, port, user, key, ssh args, jump host, host key
checking, and the control socket earlier tasks opened), at most `concurrency` at once, each under
its own bound. What runs on the node is what a per-host launch runs: the launch wrapper with its
plan on stdin (collbench_py/launch/steps.py), or rail_bw.py with its config. The logs come back into
the run directory and the manifest entries are made by the same code as the per-host launches
(`launch_entries`, `rail_entry`). The controller's cost is per command started, not per host in the
play: a localisation round of three pairs costs three launches.

    - name: Run the round
      collbench_round:
        plan: "{{ __benchmark_plan }}"           # collbench_pair_plan's answer: round, pairs, rail_pairs
        hosts: "{{ ansible_play_hosts }}"        # the hosts still in the run
        lost: []                                 # hosts lost in earlier rounds: their pairs are not started
        run_dir: /results/<run>
        concurrency: 128                         # commands running at once
        slurm: null                              # launcher srun: the run's allocation
        ssh_hops: null                           # role node_ssh's summary: a failed hop refuses its launch
        rails: {seconds: 10, size: 1048576}
      run_once: true

Every host's launch settings are its `__benchmark_launch_settings` and `__benchmark_host` facts
(roles/benchmark/tasks/prepare.yml). Returns `launches` (the manifest entries of the round, in
the plan's order), `lost` (hosts whose connection failed this round: {host: why}) and `commands`
(per command: label, host, seconds, and its steps' status and times), and `cpu_s`, the CPU this
task's own process spent (its threads; the ssh clients are processes of their own). A line is
shown as each command ends.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail, AnsibleConnectionFailure, AnsibleError
from ansible.plugins.action import ActionBase

# From a checkout the package sits next to this directory; an installed one is found anyway.
_REPO = str(Path(__file__).resolve().parent.parent)
if _REPO not in sys.path:
    sys.path.append(_REPO)

from collbench_py.launch.connections import open_connections, said, shell_command  # noqa: E402
from collbench_py.launch.fanout import Answer, Job, concurrency_within, fan_out, files_limit_for  # noqa: E402
from collbench_py.launch.rail_launch import backstop_s as rail_backstop_s  # noqa: E402
from collbench_py.launch.rail_launch import pair_rail_config, rail_entry  # noqa: E402
from collbench_py.launch.spec import LaunchError, spec_from_dict  # noqa: E402
from collbench_py.launch.steps import (  # noqa: E402
    answered_step,
    backstop_s,
    launch_entries,
    launch_record,
    launch_steps,
    node_plan,
    plan_argv,
    run_outputs,
    step_warnings,
    unfinished_slurm_steps,
    write_back,
)
from collbench_py.rundir.private_files import receive_private  # noqa: E402

_ARGS = ("plan", "hosts", "lost", "run_dir", "concurrency", "slurm", "ssh_hops", "rails")
# The spec's fields a host's launch settings give (the rest is the launch's own).
_SPEC_SETTINGS = (
    "backend",
    "launcher",
    "collectives",
    "params",
    "rdzv_port",
    "env",
    "script",
    "bindir",
    "nccl_tests_json",
    "mpirun_mca",
    "mpirun_extra_args",
    "kill_after_s",
)


def refused_hop(ssh_hops: dict | None, dirs: list[str], launcher: str) -> str:
    """mpirun on the head logs into the other hosts: a hop from it that failed its check (role
    node_ssh) refuses the launch, "node1 -> node3: <ssh's words>"; "" when none did."""
    if launcher != "mpirun":
        return ""
    for hop in (ssh_hops or {}).get("failed") or ():
        if hop.get("from") == dirs[0] and hop.get("to") in dirs[1:]:
            return f"{hop['from']} -> {hop['to']}: {hop.get('error', '')}"
    return ""


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(_ARGS)

    def run(self, tmp=None, task_vars=None):
        cpu_started = time.process_time()
        result = super().run(tmp, task_vars)
        args = {name: self._task.args.get(name) for name in _ARGS}
        plan = dict(args["plan"] or {})
        hostvars = task_vars["hostvars"]
        self._hostvars = hostvars
        in_run = {str(h) for h in args["hosts"] or ()} - {str(h) for h in args["lost"] or ()}
        self._run_dir = Path(str(args["run_dir"]))
        self._round = plan.get("round")
        self._connections: dict[str, Any] = {}
        try:
            concurrency = int(args["concurrency"] or 1)
            pairs = [p for p in plan.get("pairs") or () if set(p["hosts"]) <= in_run]
            rail_pairs = [p for p in plan.get("rail_pairs") or () if set(p["hosts"]) <= in_run]
            launches = [self._pair_launch(p, args) for p in pairs]
            rails = [self._rail_launch(p, dict(args["rails"] or {})) for p in rail_pairs]
        except (LaunchError, KeyError, TypeError, ValueError) as err:
            raise AnsibleActionFail(f"cannot build the round's launches: {err}") from None
        result.update(changed=False, launches=[], lost={})
        if self._task.check_mode:
            result["launches"] = [e for launch in launches for e in self._entries(launch, {})]
            result["launches"] += [
                rail_entry(r["launch"], {"check_mode": True}, (), hosts=r["dirs"], round_=self._round)
                for r in rails
            ]
            return result
        jobs = [
            Job(("pair", i, host), job["deadline_s"])
            for i, launch in enumerate(launches)
            for host, job in launch["jobs"].items()
        ]
        jobs += [Job(("rails", i, rail["host"]), rail["deadline_s"]) for i, rail in enumerate(rails)]
        try:
            self._open_connections({job.key[2] for job in jobs})
        except AnsibleError as err:
            raise AnsibleActionFail(f"cannot set up the connection to a host of the round: {err}") from None
        concurrency, limited = self._open_files_for(min(max(2, concurrency), len(jobs) or 2))
        labels = {("pair", i): launch["label"] for i, launch in enumerate(launches)}
        labels |= {("rails", i): rail["launch"]["label"] for i, rail in enumerate(rails)}
        answers = fan_out(
            jobs,
            lambda job: self._execute(job, launches, rails),
            concurrency=concurrency,
            on_answer=lambda answer: self._show(answer, labels),
        )
        by_key = {answer.job.key: answer for answer in answers}
        # A host whose connection failed leaves the run (its pairs in later rounds are not started).
        # Anything else that went wrong (the run directory could not be written) is the
        # controller's: said, and its launch recorded as failed with it, never lost from the
        # manifest by a failed task.
        lost: dict[str, str] = {}
        broken = []
        for key, answer in by_key.items():
            if isinstance(answer.error, AnsibleConnectionFailure):
                lost.setdefault(key[2], f"round {self._round}: {said(answer.error)}")
            elif answer.error is not None:
                broken.append(f"{key[2]}: {said(answer.error)}")
        entries = []
        for i, launch in enumerate(launches):
            ran = {
                host: self._runner_result(launch, host, by_key[("pair", i, host)]) for host in launch["jobs"]
            }
            entries += self._entries(launch, ran)
        for i, rail in enumerate(rails):
            entries.append(self._rail_result(rail, by_key[("rails", i, rail["host"])]))
        warnings = [
            w
            for answer in answers
            if isinstance(answer.value, dict)
            for w in answer.value.get("warnings") or ()
        ]
        warnings += [f"{host}: the connection failed in {why}" for host, why in sorted(lost.items())]
        warnings += limited
        warnings += [
            f"{launch['label']} is not started: the ssh hop {launch['refused']} failed its check"
            for launch in launches
            if launch["refused"]
        ]
        warnings += [f"the round's launch on {what}" for what in broken]
        # Each command's own times (the wrapper's), for whoever measures the round.
        commands = [
            {
                "label": labels[key[:2]],
                "host": key[2],
                "seconds": round(answer.seconds, 3),
                "steps": list(answer.value.get("steps") or ()) if isinstance(answer.value, dict) else [],
            }
            for key, answer in by_key.items()
        ]
        # This process's own CPU (its threads, not the ssh clients): the serial part of a round.
        cpu_s = round(time.process_time() - cpu_started, 3)
        result.update(changed=bool(jobs), launches=entries, lost=lost, commands=commands, cpu_s=cpu_s)
        if warnings:
            result["warnings"] = warnings
        return result

    # ------------------------------------------------------------------ the launches, described

    def _settings(self, host: str) -> dict[str, Any]:
        return dict(self._hostvars[host]["__benchmark_launch_settings"])

    def _pair_launch(self, pair: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
        """One pair: what each of its hosts runs (a job where it runs a command), its record."""
        hosts = [str(h) for h in pair["hosts"]]
        settings = {h: self._settings(h) for h in hosts}
        described = [self._hostvars[h]["__benchmark_host"] for h in hosts]
        dirs = [str(settings[h]["dir_name"]) for h in hosts]
        launch = {
            "kind": "pair",
            "hosts": hosts,
            "label": pair["label"],
            "dest": pair["dest"],
            "round": self._round,
        }
        refused = refused_hop(args["ssh_hops"], dirs, str(settings[hosts[0]]["launcher"]))
        jobs, records = {}, {}
        for host in hosts:
            spec = spec_from_dict(
                {name: settings[host].get(name) for name in _SPEC_SETTINGS}
                | {
                    "kind": "pair",
                    "label": pair["label"],
                    "hosts": described,
                    "this_host": host,
                    "round": self._round,
                    "slurm": args["slurm"],
                }
            )
            steps = launch_steps(spec)
            records[host] = launch_record(spec, steps, launch, dirs)
            node = None if refused else node_plan(spec, steps)
            if node is not None:
                this_dir = dirs[hosts.index(host)]
                jobs[host] = {
                    "argv": plan_argv(spec),
                    "plan": node,
                    "launcher": spec.launcher,
                    "record": records[host],
                    "this_dir": this_dir,
                    "deadline_s": backstop_s(spec, steps),
                }
        return {
            "hosts": hosts,
            "label": pair["label"],
            "dest": pair["dest"],
            "records": records,
            "jobs": jobs,
            "refused": refused,
        }

    def _rail_launch(self, pair: dict[str, Any], rails: dict[str, Any]) -> dict[str, Any]:
        """One pair measured rail by rail: rail_bw.py on its first host, its logs fetched from its out_dir."""
        first, peer = (str(h) for h in pair["hosts"])
        mine, theirs = self._settings(first), self._settings(peer)
        seconds, size = int(rails.get("seconds") or 10), int(rails.get("size") or 0)
        config = pair_rail_config(pair, self._hostvars, seconds=seconds, size=size)
        return {
            "launch": dict(pair),
            "host": first,
            "dirs": [str(mine["dir_name"]), str(theirs["dir_name"])],
            "argv": [
                str(self._hostvars[first]["__benchmark_host"]["node_python"]),
                str(mine["rail_bw"]),
                json.dumps(config),
            ],
            "out_dir": config["out_dir"],
            "deadline_s": rail_backstop_s(seconds),
        }

    # ------------------------------------------------------------------ the connections

    def _open_files_for(self, concurrency: int) -> tuple[int, list[str]]:
        """The commands that may run at once: each holds a few open files in this process, whose
        soft limit is raised for them as far as the hard limit allows (a torchrun pair needs 2)."""
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        asked = files_limit_for(concurrency, soft, hard)
        if asked != soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (asked, hard))
                soft = asked
            except (ValueError, OSError):
                pass
        usable = concurrency_within(concurrency, soft)
        if usable < concurrency:
            return usable, [
                f"round {self._round}: {usable} commands at once, not {concurrency}: the controller may open"
                f" {soft} files (ulimit -n; hard limit {hard}); the round runs in batches"
            ]
        return usable, []

    def _open_connections(self, hosts: set[str]) -> None:
        self._connections = open_connections(self, self._hostvars, hosts)

    # ------------------------------------------------------------------ running

    def _execute(self, job: Job, launches: list[dict], rails: list[dict]) -> dict[str, Any]:
        """One command on its host (in a thread of the fan-out); what came back, written."""
        kind, index, host = job.key
        connection = self._connections[host]
        if kind == "rails":
            rail = rails[index]
            rc, out, err = connection.exec_command(shell_command(rail["argv"]), sudoable=False)
            fetched = self._fetch_rail_logs(connection, rail)
            return {
                "rc": rc,
                "stdout": out.decode("utf-8", "replace"),
                "stderr": err.decode("utf-8", "replace"),
                "fetched": fetched,
            }
        launch = launches[index]
        run = launch["jobs"][host]
        plan = json.dumps(run["plan"]).encode()
        rc, out, err = connection.exec_command(shell_command(run["argv"]), in_data=plan, sudoable=False)
        try:
            answer = json.loads(out or b"")
        except ValueError:
            stderr = err.decode("utf-8", "replace")[-2000:]
            msg = f"{host}: the launch wrapper gave no answer (rc {rc}): {stderr}"
            return {"msg": msg, "warnings": [msg]}
        steps = [answered_step(run["launcher"], s) for s in answer["steps"]]
        dest = self._run_dir / launch["dest"]
        files = self._write_back(
            connection, dest, answer, run_outputs(run["record"], run["this_dir"], answer)
        )
        warnings = step_warnings(host, answer["steps"])
        unfinished = unfinished_slurm_steps(steps)
        if unfinished:
            rc, _, err = connection.exec_command(shell_command(["scancel", *unfinished]), sudoable=False)
            if rc != 0:
                text = err.decode("utf-8", "replace").strip()
                warnings.append(f"scancel {' '.join(unfinished)} answered rc {rc}: {text}")
        return {"changed": True, "steps": steps, "files": files, "warnings": warnings}

    def _write_back(
        self, connection, dest: Path, answer: dict[str, Any], outputs: dict[str, str]
    ) -> list[str]:
        """The launch's files and printed output into the run directory; the names written."""
        try:
            return write_back(dest, answer, outputs, connection.fetch_file)
        except (AnsibleError, OSError) as exc:
            raise AnsibleActionFail(f"cannot write the launch's logs into {dest}: {exc}") from None

    def _fetch_rail_logs(self, connection, rail: dict[str, Any]) -> list[str]:
        """rail<k>.log and rail<k>.server.log of each rail, those the program wrote."""
        listed = shell_command(
            ["find", rail["out_dir"], "-maxdepth", "1", "-type", "f", "-name", "rail*.log"]
        )
        rc, out, _ = connection.exec_command(listed, sudoable=False)
        fetched = []
        for remote in sorted(out.decode("utf-8", "replace").split()) if rc == 0 else ():
            name = Path(remote).name
            dest = self._run_dir / rail["launch"]["dest"] / name
            receive_private(dest, lambda local, r=remote: connection.fetch_file(r, local))
            fetched.append(remote)
        return fetched

    # ------------------------------------------------------------------ what the round recorded

    def _runner_result(self, launch: dict, host: str, answer: Answer) -> dict[str, Any]:
        """One runner's result, as the per-host launch task would have registered it."""
        found: dict[str, Any] = {
            "launch": launch["records"][host],
            "refused": launch["refused"],
            "check_mode": False,
        }
        if answer.unanswered:
            return found | {
                "unanswered": True,
                "msg": f"no answer from the launch within {answer.job.deadline_s} s",
            }
        if answer.error is not None:
            return {"msg": said(answer.error)}  # nothing it ran answered
        return found | {"steps": [], "files": []} | dict(answer.value or {})

    def _entries(self, launch: dict, ran: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        """The launch's manifest entries; the head's result carries its record."""
        first = launch["hosts"][0]
        base = {"launch": launch["records"][first], "refused": launch["refused"], "steps": [], "files": []}
        head = {**base, **ran.get(first, {}), "check_mode": self._task.check_mode}
        runners = [ran.get(host, {}) for host in launch["records"][first]["runners"]]
        return launch_entries(head, runners)

    def _rail_result(self, rail: dict[str, Any], answer: Answer) -> dict[str, Any]:
        if answer.unanswered:
            done = {"rc": None, "timedout": True, "msg": f"no answer within {answer.job.deadline_s} s"}
        elif answer.error is not None:
            done = {"rc": None, "msg": said(answer.error)}
        else:
            done = dict(answer.value or {})
        fetched = [Path(p).name for p in done.get("fetched") or ()]
        return rail_entry(rail["launch"], done, fetched, hosts=rail["dirs"], round_=self._round)

    def _show(self, answer: Answer, labels: dict) -> None:
        """One progress line as each command ends."""
        kind, index, host = answer.job.key
        if answer.unanswered:
            text = f"no answer after {answer.seconds:.0f} s"
        elif answer.error is not None:
            text = f"failed: {(said(answer.error).splitlines() or [''])[0][:200]}"
        else:
            text = f"answered in {answer.seconds:.0f} s"
        self._display.display(f"round {self._round}: {labels[(kind, index)]} on {host}: {text}")
