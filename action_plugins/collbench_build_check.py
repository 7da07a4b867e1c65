"""collbench_build_check: whether each node builds nvbandwidth or perftest, decided for every node
from this one controller task (collbench_py/facts/build_check.py).

For each node still in the run that needs the tool (its node checks, and for perftest its rail
launches): its inputs are checked here, and where the source is built on the node (git, tarball)
it runs, over its own Ansible connection (collbench_py/launch/connections.py), at most
`concurrency` at once: toolchain_probe.py (its text on the node Python's standard input), the file
checks, and each build tool's `--version` where it would build.

    - name: Decide on every node whether to build nvbandwidth
      collbench_build_check:
        tool: nvbandwidth
        hosts: "{{ ansible_play_hosts }}"
        probe: /path/to/collbench_py/node/toolchain_probe.py
        playbook_dir: "{{ playbook_dir }}"     # where a relative tarball path starts
        concurrency: 1024
        settings: {collbench_nvbandwidth_source: git, ...}  # build_check.node_settings
      run_once: true

Returns `steps` ({host: {build, problem}}: the nodes where the role's own tasks run: a build
(check_tools' fact), binaries given to verify (build none), or an input to refuse (problem)),
`nothing` ({host: why nothing is built there}) and `dropped` ({host: {status, reason}}): a node
that does not answer in time is `failed`, one that cannot be reached `unreachable`. A probe that
fails is data (no toolkit found), not a failure.
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

from collbench_py.facts import build_check  # noqa: E402
from collbench_py.launch.connections import left_the_run, node_python, open_connections, said, shell_command  # noqa: E402
from collbench_py.launch.fanout import Answer, Job, fan_out  # noqa: E402
from collbench_py.launch.node_settings import play_values  # noqa: E402

_ARGS = ("tool", "hosts", "probe", "playbook_dir", "concurrency", "settings")


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
        except (OSError, TypeError, ValueError) as err:
            raise AnsibleActionFail(f"cannot start the build check: {err}") from None
        defaults = play_values(self, dict(args["settings"] or {}), hostvars[task_vars["inventory_hostname"]])
        result.update(changed=False, steps={}, nothing={}, dropped={})
        nodes = {}
        for host in hosts:
            known = hostvars[host]
            if "collbench_host_status" in known:
                continue  # it has left the run
            settings = build_check.node_settings(tool, known, defaults)
            if not build_check.needed(tool, settings):
                continue
            problem = build_check.input_problem(tool, settings, str(args["playbook_dir"] or "."))
            if problem is not None or settings["source"] not in build_check.BUILT_HERE:
                result["steps"][host] = {"build": None, "problem": problem}
            else:
                nodes[host] = settings
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

        jobs = [Job(host, build_check.deadline_s(settings)) for host, settings in sorted(nodes.items())]
        for answer in fan_out(jobs, execute, concurrency=min(concurrency, len(jobs)), on_answer=show):
            host = answer.job.key
            left = left_the_run(answer, f"Decide whether to build {tool} here")
            if left is not None:
                result["dropped"][host] = left
            elif answer.value["build"]:
                result["steps"][host] = {"build": answer.value, "problem": None}
            else:
                result["nothing"][host] = answer.value["note"]
        return result

    @staticmethod
    def _said(answer: Answer) -> str:
        if answer.unanswered:
            return f"no answer after {answer.seconds:.0f} s"
        if answer.error is not None:
            return f"failed: {said(answer.error)[:200]}"
        return "builds here" if answer.value["build"] else "nothing to build here"
