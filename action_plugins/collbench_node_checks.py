"""collbench_node_checks: every node's component checks run from this one controller task.

Each node in the run whose collbench_node_checks is true runs collbench_py/node/node_checks.py over
its own Ansible connection (collbench_py/launch/connections.py), at most `concurrency` at once
(collbench_py/launch/fanout.py): the program's text on the node Python's standard input, its config
(collbench_py/nodechecks/check_fleet.py) as its argument. Then one more command lists every file it
wrote, and they are written unchanged into RUN_DIR/hosts/<dir>/node/. The controller's cost is two
commands per node, not a dozen tasks per node.

    - name: Check every node's components
      collbench_node_checks:
        hosts: "{{ ansible_play_hosts }}"    # a node that has left the run is not checked
        run_dir: /results/<run>
        run_id: <run>
        phase: before                        # or after: the NVLink error counters again
        program: /path/to/collbench_py/node/node_checks.py
        concurrency: 1024
        settings:                            # where a node does not set its own
          collbench_node_checks: true
          collbench_node_checks_timeout_s: 120
          ...                                # every variable of check_fleet.SETTINGS
      run_once: true

Returns `checked` ({host: the files written}) and `dropped` ({host: {status, reason}}): a node
whose setting cannot work, whose program failed or did not answer within its bound, or whose
outputs could not be brought back is `failed`; one that cannot be reached is `unreachable`. The
role records them on those nodes (they leave the run); the others go on.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase

# From a checkout the package sits next to this directory; an installed one is found anyway.
_REPO = str(Path(__file__).resolve().parent.parent)
if _REPO not in sys.path:
    sys.path.append(_REPO)

from collbench_py.launch.connections import (  # noqa: E402
    left_the_run,
    node_python,
    open_connections,
    said,
    shell_command,
)
from collbench_py.launch.fanout import Answer, Job, fan_out  # noqa: E402
from collbench_py.launch.node_settings import play_values  # noqa: E402
from collbench_py.nodechecks import check_fleet  # noqa: E402
from collbench_py.nodechecks.hcas import host_dir_hcas  # noqa: E402
from collbench_py.rundir.private_files import write_private  # noqa: E402

_ARGS = ("hosts", "run_dir", "run_id", "phase", "program", "concurrency", "settings")
_TASK = "Run the node checks"  # the reasons name it as a per-node task would


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(_ARGS)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = {name: self._task.args.get(name) for name in _ARGS}
        hostvars = task_vars["hostvars"]
        try:
            run_dir = Path(str(args["run_dir"]))
            phase = str(args["phase"] or "before")
            if phase not in check_fleet.PHASES:
                raise ValueError(f"phase must be one of {', '.join(check_fleet.PHASES)}, not {phase!r}")
            program = Path(str(args["program"])).read_bytes()
            concurrency = max(1, int(args["concurrency"] or 1))
            hosts = [str(h) for h in args["hosts"] or ()]
        except (OSError, TypeError, ValueError) as err:
            raise AnsibleActionFail(f"cannot start the node checks: {err}") from None
        where = {"run_dir": run_dir, "run_id": str(args["run_id"]), "phase": phase}
        runs, dropped = self._runs(
            hosts,
            hostvars,
            where,
            play_values(self, dict(args["settings"] or {}), hostvars[task_vars["inventory_hostname"]]),
        )
        result.update(changed=False, checked={}, dropped=dropped)
        if not runs:
            return result
        try:
            connections = open_connections(self, hostvars, set(runs))
        except AnsibleError as err:
            raise AnsibleActionFail(f"cannot set up the connection to a node: {err}") from None

        def execute(job: Job) -> dict[str, Any]:
            run, connection = runs[job.key], connections[job.key]
            rc, _, err = connection.exec_command(shell_command(run["argv"]), in_data=program, sudoable=False)
            if rc != 0:
                return {"failed": f"{_TASK} failed: rc {rc}: {check_fleet.last_line(err)}"}
            rc, out, err = connection.exec_command(shell_command(run["pack"]), sudoable=False)
            if rc != 0:
                return {
                    "failed": f"Fetch the node checks' outputs failed: rc {rc}: {check_fleet.last_line(err)}"
                }
            try:
                files = check_fleet.unpacked(out)
            except ValueError as exc:
                return {"failed": f"Fetch the node checks' outputs failed: {exc}"}
            changed = False
            for name, data in sorted(files.items()):
                try:
                    changed = write_private(run["dest"] / name, data) or changed
                except OSError as exc:
                    return {"failed": f"cannot write {run['dest'] / name}: {exc.strerror or exc}"}
            return {"files": sorted(files), "changed": changed}

        def show(answer: Answer) -> None:
            self._display.display(f"node checks ({phase}): {answer.job.key}: {self._said(answer)}")

        jobs = [Job(host, runs[host]["deadline_s"]) for host in sorted(runs)]
        for answer in fan_out(jobs, execute, concurrency=min(concurrency, len(jobs)), on_answer=show):
            host = answer.job.key
            left = left_the_run(answer, _TASK)
            if left is not None:
                dropped[host] = left
            elif "failed" in answer.value:
                dropped[host] = {"status": "failed", "reason": answer.value["failed"]}
            else:
                result["checked"][host] = answer.value["files"]
                result["changed"] = result["changed"] or answer.value["changed"]
        return result

    @staticmethod
    def _said(answer: Answer) -> str:
        if answer.unanswered:
            return f"no answer after {answer.seconds:.0f} s"
        if answer.error is not None:
            return f"failed: {said(answer.error)[:200]}"
        if "failed" in answer.value:
            return answer.value["failed"]
        count = len(answer.value["files"])
        return f"done in {answer.seconds:.0f} s, {count} file{'s' * (count != 1)}"

    def _runs(
        self, hosts: list[str], hostvars: Any, where: dict[str, Any], defaults: dict[str, Any]
    ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, str]]]:
        """{host: its commands, bound and destination} for each host in the run that checks, and
        {host: {status, reason}} for each whose settings cannot work."""
        run_dir, phase = where["run_dir"], where["phase"]
        runs, dropped = {}, {}
        for host in hosts:
            known = hostvars[host]
            if "collbench_host_status" in known:
                continue  # it has left the run
            try:
                settings = check_fleet.node_settings(known, defaults)
            except check_fleet.SettingError as err:
                dropped[host] = {"status": "failed", "reason": f"{_TASK} failed: {err}"}
                continue
            if not settings["enabled"]:
                continue
            host_dir = run_dir / "hosts" / str(known["collbench_node"]["dir_name"])
            python, out_dir = node_python(known), check_fleet.node_out_dir(known, where["run_id"])
            hcas = host_dir_hcas(host_dir, settings["launch_env"]).as_config()
            config = check_fleet.node_config(host, known, settings, out_dir, hcas=hcas, phase=phase)
            runs[host] = {
                "argv": check_fleet.run_argv(python, config),
                "pack": check_fleet.pack_argv(python, out_dir),
                "dest": host_dir / "node",
                "deadline_s": check_fleet.deadline_s(phase, settings["timeout_s"]),
            }
        return runs, dropped
