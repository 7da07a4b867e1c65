"""collbench_topology: every node's GPU topology matrix read from this one controller task.

Each node in the run runs one command over its own Ansible connection (collbench_py/launch/
connections.py), at most `concurrency` at once (collbench_py/launch/fanout.py), under `timeout`
(nvidia-smi hangs on a GPU that fell off the bus): `nvidia-smi topo -m` on an NVIDIA node,
`rocm-smi --showtopo` on an AMD one, nothing elsewhere. The matrix is written as printed to
RUN_DIR/hosts/<dir>/topo.txt. The controller's cost is one command per node, not the five tasks
per node of a per-host read.

    - name: Read every node's topology matrix
      collbench_topology:
        hosts: "{{ ansible_play_hosts }}"    # a node that has left the run is not read
        run_dir: /results/<run>
        timeout_s: 120
        concurrency: 1024
        topology: true                       # collbench_topology where a node does not set its own
      run_once: true

A node is read where its `collbench_topology` is true (its inventory or extra vars; else `topology`,
the task's own: play vars and role defaults are not per node); its `collbench_gpu` (role facts) names the
vendor and its `collbench_node.dir_name` the folder. A matrix that is not read is no failure (the
report judges the node without it): a tool that failed or did not answer, or a connection that
failed, is a line in `unread` ({host: why}), and a warning for a connection (the next phase on
that node finds it too). Returns `written` (the hosts whose topo.txt was written) and `unread`.
The role runs it in check mode as in a real run (`check_mode: false`): it only reads on the
nodes, and the run directory is the controller's output.
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

from collbench_py.launch.connections import open_connections, said, shell_command  # noqa: E402
from collbench_py.launch.fanout import Job, fan_out  # noqa: E402
from collbench_py.launch.node_settings import play_values  # noqa: E402
from collbench_py.rundir.private_files import write_private  # noqa: E402

_ARGS = ("hosts", "run_dir", "timeout_s", "concurrency", "topology")
_TOOLS = {"nvidia": ["nvidia-smi", "topo", "-m"], "amd": ["rocm-smi", "--showtopo"]}
_KILL_AFTER_S = 5  # after timeout_s, SIGKILL for a tool that ignored SIGTERM


def topology_argv(vendor: str, timeout_s: int) -> list[str] | None:
    """The command that prints the matrix on a node of `vendor`, under its bound; None: no tool."""
    tool = _TOOLS.get(vendor)
    return None if tool is None else ["timeout", f"--kill-after={_KILL_AFTER_S}", str(timeout_s), *tool]


def printed(stdout: bytes) -> str:
    """The matrix as topo.txt holds it: the output with one final newline (as a per-host command
    task's stdout, which loses its final newlines, was written with one put back)."""
    return stdout.decode("utf-8", "surrogateescape").rstrip("\r\n") + "\n"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(_ARGS)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = {name: self._task.args.get(name) for name in _ARGS}
        hostvars = task_vars["hostvars"]
        try:
            run_dir = Path(str(args["run_dir"]))
            timeout_s = int(args["timeout_s"])
            concurrency = max(1, int(args["concurrency"] or 1))
            given = play_values(
                self, {"collbench_topology": args["topology"]}, hostvars[task_vars["inventory_hostname"]]
            )["collbench_topology"]
            default = boolean(given if given is not None else True, strict=True)
            reads = self._reads([str(h) for h in args["hosts"] or ()], hostvars, run_dir, timeout_s, default)
        except (KeyError, TypeError, ValueError) as err:  # boolean() raises TypeError
            raise AnsibleActionFail(f"cannot list the topology reads: {err}") from None
        result.update(changed=False, written=[], unread={})
        if not reads:
            return result
        try:
            connections = open_connections(self, hostvars, set(reads))
        except AnsibleError as err:
            raise AnsibleActionFail(f"cannot set up the connection to a node: {err}") from None

        def execute(job: Job) -> tuple[int, bytes, bytes]:
            argv = reads[job.key]["argv"]
            return connections[job.key].exec_command(shell_command(argv), sudoable=False)

        jobs = [Job(host, timeout_s + _KILL_AFTER_S + 30) for host in sorted(reads)]
        answers = fan_out(jobs, execute, concurrency=min(concurrency, len(jobs)))
        written, unread, warnings = [], {}, []
        for answer in answers:
            host, read = answer.job.key, reads[answer.job.key]
            if answer.unanswered:
                unread[host] = f"no answer within {answer.job.deadline_s} s"
                continue
            if answer.error is not None:
                unread[host] = said(answer.error)
                warnings.append(f"{host}: the topology was not read: {unread[host]}")
                continue
            rc, out, err = answer.value
            if rc != 0 or not out.strip():
                words = (err.strip() or out.strip()).decode("utf-8", "replace")[-300:]  # nvidia-smi: stdout
                unread[host] = f"{read['argv'][3]} answered rc {rc}: {words}"
                continue
            data = printed(out).encode("utf-8", "surrogateescape")
            try:
                changed = write_private(read["dest"], data)
            except OSError as exc:
                unread[host] = f"cannot write {read['dest']}: {exc.strerror or exc}"
                warnings.append(f"{host}: {unread[host]}")
                continue
            written.append(host)
            result["changed"] = result["changed"] or changed
        result.update(written=written, unread=unread)
        if warnings:
            result["warnings"] = warnings
        return result

    def _reads(
        self, hosts: list[str], hostvars: Any, run_dir: Path, timeout_s: int, default: bool
    ) -> dict[str, dict]:
        """{host: its command and topo.txt} for each host in the run that reads one."""
        reads = {}
        for host in hosts:
            known = hostvars[host]
            if "collbench_host_status" in known:
                continue  # it has left the run
            try:
                wanted = boolean(known.get("collbench_topology", default), strict=True)
            except TypeError:
                raise ValueError(f"{host}: collbench_topology must be true or false") from None
            if not wanted:
                continue
            argv = topology_argv(str((known.get("collbench_gpu") or {}).get("vendor") or ""), timeout_s)
            if argv is not None:
                dest = run_dir / "hosts" / str(known["collbench_node"]["dir_name"]) / "topo.txt"
                reads[host] = {"argv": argv, "dest": dest}
        return reads
