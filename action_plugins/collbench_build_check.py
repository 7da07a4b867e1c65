"""collbench_build_check: whether each node builds nvbandwidth or perftest, decided for every node
from this one controller task (collbench_py/facts/build_check.py).

Each node the role's tasks marked (`mark`: a host variable, true where the node decides here) runs
over its own Ansible connection (collbench_py/launch/connections.py), at most `concurrency` at once:
toolchain_probe.py (its text on the node Python's standard input), the file checks, and each build
tool's `--version` where it would build. The decision is published on the node by the role, as
`__collbench_<tool>_build`; the role's own tasks go on from there on each node.

    - name: Decide on every node whether to build nvbandwidth
      collbench_build_check:
        tool: nvbandwidth
        hosts: "{{ ansible_play_hosts }}"
        mark: __collbench_nvbandwidth_decide
        probe: /path/to/collbench_py/node/toolchain_probe.py
        concurrency: 1024
        settings: {collbench_nvbandwidth_cuda_home: "", ...}  # build_check.node_settings
      run_once: true

Returns `decisions` ({host: check_tools' fact}) and `dropped` ({host: {status, reason}}): a node
that does not answer in time is `failed`, one that cannot be reached `unreachable`. A probe that
fails is data (no toolkit found), not a failure.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

# From a checkout the package sits next to this directory; an installed one is found anyway.
_REPO = str(Path(__file__).resolve().parent.parent)
if _REPO not in sys.path:
    sys.path.append(_REPO)

from collbench_py.facts import build_check  # noqa: E402
from collbench_py.launch.connections import left_the_run, node_python, open_connections, said, shell_command  # noqa: E402
from collbench_py.launch.fanout import Answer, Job, fan_out  # noqa: E402
from collbench_py.launch.node_settings import play_values  # noqa: E402

_ARGS = ("tool", "hosts", "mark", "probe", "concurrency", "settings")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(_ARGS)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = {name: self._task.args.get(name) for name in _ARGS}
        hostvars = task_vars["hostvars"]
        try:
            tool = str(args["tool"])
            if tool not in build_check.TOOLS:
                raise ValueError(f"tool must be one of {', '.join(build_check.TOOLS)}, not {tool!r}")
            program = Path(str(args["probe"])).read_bytes()
            concurrency = max(1, int(args["concurrency"] or 1))
            hosts = [str(h) for h in args["hosts"] or ()]
            mark = str(args["mark"])
        except (OSError, TypeError, ValueError) as err:
            raise AnsibleActionFail(f"cannot start the build check: {err}") from None
        defaults = play_values(self, dict(args["settings"] or {}))
        nodes = {
            host: build_check.node_settings(tool, hostvars[host], defaults)
            for host in hosts
            if _marked(hostvars[host], mark) and "collbench_host_status" not in hostvars[host]
        }
        result.update(changed=False, decisions={}, dropped={})
        if not nodes:
            return result
        try:
            connections = open_connections(self, hostvars, set(nodes))
        except AnsibleError as err:
            raise AnsibleActionFail(f"cannot set up the connection to a node: {err}") from None
        pythons = {host: node_python(hostvars[host]) for host in nodes}

        def execute(job: Job) -> dict[str, Any]:
            connection = connections[job.key]

            def run(argv: list[str], stdin: bytes | None) -> tuple[int, str]:
                rc, out, _ = connection.exec_command(shell_command(argv), in_data=stdin, sudoable=False)
                return rc, out.decode("utf-8", "replace")

            return build_check.decide(
                tool, job.key, nodes[job.key], probe_program=program, python=pythons[job.key], run=run
            )

        def show(answer: Answer) -> None:
            self._display.display(f"{tool} build check: {answer.job.key}: {self._said(answer)}")

        jobs = [
            Job(host, build_check.deadline_s(settings, len(settings.get("build_tools") or ()) + 1))
            for host, settings in sorted(nodes.items())
        ]
        for answer in fan_out(jobs, execute, concurrency=min(concurrency, len(jobs)), on_answer=show):
            left = left_the_run(answer, f"Decide whether to build {tool} here")
            if left is not None:
                result["dropped"][answer.job.key] = left
            else:
                result["decisions"][answer.job.key] = answer.value
        return result

    @staticmethod
    def _said(answer: Answer) -> str:
        if answer.unanswered:
            return f"no answer after {answer.seconds:.0f} s"
        if answer.error is not None:
            return f"failed: {said(answer.error)[:200]}"
        return "builds here" if answer.value["build"] else "nothing to build here"


def _marked(known: Any, mark: str) -> bool:
    """Whether the role's tasks marked the node for the decision (a boolean as Ansible reads one)."""
    return boolean(known.get(mark, False), strict=False)
