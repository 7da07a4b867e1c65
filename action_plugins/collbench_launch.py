"""collbench_launch: one launch on this host, in one task (collbench_py/launch/steps.py).

Builds what this host runs from the launch's description (collbench_py.launch.spec), runs it as one
command, the node wrapper with its plan on stdin (prepare, every step under its own bound, a sweep
of the other hosts after a failed mpirun step), and writes what came back into the run directory:
the logs the launch wrote (inside the wrapper's answer; a big one over the connection), and what it
printed. A host that mpirun reaches from the head runs nothing.

    - name: Launch
      collbench_launch:
        spec: {backend: torch, launcher: torchrun, kind: pair, label: pair-a--b, hosts: [...], ...}
        launch: "{{ __benchmark_launch }}"     # kind, hosts, label, dest, round
        host_dirs: [a, b]                      # the hosts' directory names, in the launch's order
        run_dir: /results/<run>
        refused: ""                            # "a -> b: <ssh's words>": the launch is not started

Returns `launch` (what the manifest entries share), `steps` (per step: label, status, rc, started,
ended), `files` (names written into the launch's directory of the run), `refused`, `check_mode`
and `unanswered` (Ansible's backstop ended the wrapper). The launch's first host turns the
results into manifest entries with the `collbench_launch_entries` filter.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase

# From a checkout the package sits next to this directory; an installed one is found anyway.
_REPO = str(Path(__file__).resolve().parent.parent)
if _REPO not in sys.path:
    sys.path.append(_REPO)

from collbench_py.launch.spec import LaunchError, spec_from_dict  # noqa: E402
from collbench_py.launch.steps import (  # noqa: E402
    answered_step,
    launch_record,
    launch_steps,
    node_plan,
    plan_argv,
    run_outputs,
    step_warnings,
    unfinished_slurm_steps,
    write_back,
)


def is_backstop(exc: BaseException) -> bool:
    """Ansible's task timeout (a BaseException raised from its alarm in the middle of the call)."""
    return any(cls.__name__ in ("TaskTimeoutError", "AnsibleTimeoutError") for cls in type(exc).__mro__)


class ActionModule(ActionBase):
    TRANSFERS_FILES = True
    _VALID_ARGS = frozenset(("spec", "launch", "host_dirs", "run_dir", "refused"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        try:
            spec = spec_from_dict(args["spec"])
            steps = launch_steps(spec)
            record = launch_record(spec, steps, args["launch"], list(args["host_dirs"]))
        except (LaunchError, KeyError, TypeError) as err:
            raise AnsibleActionFail(f"cannot build the launch: {err}") from None
        refused = str(args.get("refused") or "")
        result.update(launch=record, steps=[], files=[], refused=refused, changed=False)
        result["check_mode"] = self._task.check_mode
        if refused:
            if spec.this_host == spec.hosts[0].name:
                result["warnings"] = [f"{spec.label} is not started: the ssh hop {refused} failed its check"]
            return result
        plan = node_plan(spec, steps)
        if plan is None or self._task.check_mode:
            return result
        dest = Path(str(args["run_dir"])) / record["dest"]
        this_dir = record["hosts"][[h.name for h in spec.hosts].index(spec.this_host)]
        answer = self._run_plan(plan_argv(spec), plan, task_vars, result)
        if answer is None:
            return result
        result["changed"] = True
        result["steps"] = [answered_step(spec.launcher, s) for s in answer["steps"]]
        result["files"] = self._write_back(dest, answer, run_outputs(record, this_dir, answer))
        result["warnings"] = step_warnings(spec.this_host, answer["steps"])
        self._cancel_steps(unfinished_slurm_steps(result["steps"]), task_vars, result)
        return result

    def _cancel_steps(self, steps, task_vars, result) -> None:
        """srun: a job step that did not complete is cancelled (what srun left of it, on any node)."""
        if not steps:
            return
        done = self._execute_module(
            module_name="ansible.legacy.command",
            module_args={"argv": ["scancel", *steps]},
            task_vars=task_vars,
        )
        if done.get("rc") != 0:
            said = str(done.get("stderr") or done.get("msg") or "").strip()
            result["warnings"].append(f"scancel {' '.join(steps)} answered rc {done.get('rc')}: {said}")

    def _run_plan(self, argv, plan, task_vars, result) -> dict[str, Any] | None:
        """The wrapper's answer; None (and `unanswered` or `msg` set) when there is none."""
        # The plan holds the launch's environment (collbench_launch_env may hold secrets): no_log
        # keeps the module's arguments out of the node's syslog; its answer comes back all the same.
        no_log, self._task.no_log = self._task.no_log, True
        try:
            done = self._execute_module(
                module_name="ansible.legacy.command",
                module_args={"argv": argv, "stdin": json.dumps(plan), "stdin_add_newline": False},
                task_vars=task_vars,
            )
        except BaseException as exc:
            if not is_backstop(exc):
                raise
            # The node stopped answering: the launch ran until now (recorded so by its first host).
            result.update(unanswered=True, msg=f"no answer from the launch within the task's timeout: {exc}")
            return None
        finally:
            self._task.no_log = no_log
        try:
            return json.loads(done.get("stdout") or "")
        except ValueError:
            said = str(done.get("stderr") or done.get("msg") or "")[-2000:]
            result["msg"] = f"the launch wrapper gave no answer (rc {done.get('rc')}): {said}"
            result["warnings"] = [result["msg"]]
            return None

    def _write_back(self, dest: Path, answer: dict[str, Any], outputs: dict[str, str]) -> list[str]:
        """The launch's files and printed output into the run directory; the names written."""
        try:
            return write_back(dest, answer, outputs, self._connection.fetch_file)
        except (AnsibleError, OSError) as exc:
            raise AnsibleActionFail(f"cannot write the launch's logs into {dest}: {exc}") from None
