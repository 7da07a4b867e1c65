"""collbench_facts: every node probed, and the run's backend and each node's ranks decided, from
this one controller task.

Each node in the run runs over its own Ansible connection (collbench_py/launch/connections.py), at
most `concurrency` at once (collbench_py/launch/fanout.py): where its MPI is still to be found,
mpi_probe.py and one `ls` of the files the choice depends on; then facts_probe.py, every read-only
probe under its bound. Each program's text goes on the node Python's standard input. The rest is
decided here, by collbench_py/facts/probe_fleet.py: each node's facts.json, its collbench_gpu, the
backend from every node's GPUs, and each node's ranks or why it cannot run that backend.

    - name: Probe every node, decide the backend and the ranks per host
      collbench_facts:
        hosts: "{{ ansible_play_hosts }}"    # a node that has left the run is not probed
        programs: /path/to/collbench_py/node
        mpirun_candidates: [/opt/hpcx/ompi/bin/mpirun]
        backend: auto                        # the run's, as asked
        launcher: auto
        concurrency: 1024
        settings: {collbench_probe_timeout_s: 120, collbench_mpi_home: "", ...}  # probe_fleet.SETTINGS
      run_once: true

Returns `facts_json` ({host: facts.json's text}), `published` ({host: {gpu, mpi, mpi_home,
ranks}}), `run` ({backend, launcher, ranks_per_host}) and `dropped` ({host: {status, reason}}): a
node whose GPU tool hung or failed while the others answered, that cannot run the backend, whose
MPI files could not be listed, whose settings cannot work or whose probes did not answer is
`failed`; one that cannot be reached is `unreachable`. A probe that fails is data, not a failure.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase

# From a checkout the package sits next to this directory; an installed one is found anyway.
_REPO = str(Path(__file__).resolve().parent.parent)
if _REPO not in sys.path:
    sys.path.append(_REPO)

from collbench_py.facts import probe_fleet  # noqa: E402
from collbench_py.facts.hostfacts import fleet_backend  # noqa: E402
from collbench_py.launch.connections import left_the_run, node_python, open_connections, shell_command  # noqa: E402
from collbench_py.launch.fanout import Job, fan_out  # noqa: E402
from collbench_py.launch.node_settings import play_values  # noqa: E402

_ARGS = (
    "hosts",
    "programs",
    "mpirun_candidates",
    "backend",
    "launcher",
    "concurrency",
    "settings",
)


class _Failed(Exception):
    """The node leaves the run with this reason (a task of the per-node phase would have failed)."""


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(_ARGS)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = {name: self._task.args.get(name) for name in _ARGS}
        hostvars = task_vars["hostvars"]
        try:
            programs = Path(str(args["programs"]))
            texts = {name: (programs / f"{name}.py").read_bytes() for name in ("mpi_probe", "facts_probe")}
            torch_probe = (programs / "torch_probe.py").read_text(encoding="utf-8")
            candidates = [str(c) for c in args["mpirun_candidates"] or ()]
            defaults = play_values(
                self, dict(args["settings"] or {}), hostvars[task_vars["inventory_hostname"]]
            )
            probe_fleet.node_settings({}, defaults)  # the play's own values must work too
            concurrency = max(1, int(args["concurrency"] or 1))
            hosts = [str(h) for h in args["hosts"] or ()]
        except (OSError, TypeError, ValueError) as err:
            raise AnsibleActionFail(f"cannot start the probes: {err}") from None
        dropped: dict[str, dict[str, str]] = {}
        nodes = {}
        for host in hosts:
            known = hostvars[host]
            if "collbench_host_status" in known:
                continue  # it has left the run
            try:
                settings = probe_fleet.node_settings(known, defaults)
            except ValueError as err:
                dropped[host] = {"status": "failed", "reason": f"Probe the node failed: {err}"}
                continue
            node_py = str(known["collbench_node"]["python"])
            home = settings["collbench_mpi_home"]
            nodes[host] = {
                "python": node_python(known),
                "settings": settings,
                "find_mpi": probe_fleet.mpi_wanted(known, home),
                "mpi": known.get("collbench_mpi"),
                "node_python": node_py,
                "ansible_facts": dict(known.get("ansible_facts") or {}),
            }
        result.update(changed=False, facts_json={}, published={}, dropped=dropped, run={})
        if nodes:
            try:
                connections = open_connections(self, hostvars, set(nodes))
            except AnsibleError as err:
                raise AnsibleActionFail(f"cannot set up the connection to a node: {err}") from None

            def execute(job: Job) -> dict[str, Any]:
                return self._probe(connections[job.key], nodes[job.key], texts, candidates, torch_probe)

            jobs = [
                Job(host, probe_fleet.probes_deadline_s(12, node["settings"]["collbench_probe_timeout_s"]))
                for host, node in sorted(nodes.items())
            ]
            for answer in fan_out(jobs, execute, concurrency=min(concurrency, len(jobs))):
                left = left_the_run(answer, "Probe the node")  # a _Failed one: failed, with its reason
                if left is not None:
                    dropped[answer.job.key] = left
                else:
                    nodes[answer.job.key].update(answer.value)
        probed = {host: node for host, node in nodes.items() if host not in dropped}
        for host, node in probed.items():
            document = probe_fleet.facts_document(
                host, node["ansible_facts"], node["outputs"], node["unanswered"], node["at"]
            )
            result["facts_json"][host] = probe_fleet.facts_text(document)
            node["gpu"] = probe_fleet.gpu_fact(node["outputs"], node["rcs"])
        self._decide(probed, args, result)
        return result

    @staticmethod
    def _probe(
        connection, node: dict, texts: dict, candidates: list[str], torch_probe: str
    ) -> dict[str, Any]:
        """One node's MPI (where still to be found) and probes, over its connection."""

        def run(argv: list[str], program: bytes | None = None) -> tuple[int, bytes, bytes]:
            return connection.exec_command(shell_command(argv), in_data=program, sudoable=False)

        python, settings = node["python"], node["settings"]
        timeout_s, home = settings["collbench_probe_timeout_s"], settings["collbench_mpi_home"]
        mpi = node["mpi"]
        found_mpi = {}
        if node["find_mpi"]:
            rc, out, _ = run(
                [python, "-", *probe_fleet.mpi_probe_args(candidates, home, timeout_s)], texts["mpi_probe"]
            )
            try:
                found = json.loads(out) if rc == 0 else {}  # no Python run on the node: no MPI found
            except ValueError:
                found = {}
            files = probe_fleet.mpi_files(found, home)
            existing: list[str] = []
            if files:
                rc, out, err = run(["ls", "-1d", "--", *files])
                if rc not in (0, 2):  # 2: some do not exist
                    words = (err.decode("utf-8", "replace").strip().splitlines() or [f"rc {rc}"])[0][:300]
                    raise _Failed(f"MPI | Look for their headers and libraries failed: {words}")
                existing = out.decode("utf-8", "replace").splitlines()
            mpi = probe_fleet.mpi_fact(found, existing, home)
            found_mpi = {"mpi": mpi, "mpi_home": home}
        probes = probe_fleet.probe_list(node["node_python"], mpi, torch_probe)
        rc, out, _ = run([python, "-", json.dumps(probes), str(timeout_s)], texts["facts_probe"])
        try:
            results = json.loads(out) if rc == 0 else {}
        except ValueError:
            results = {}
        outputs, rcs, unanswered = probe_fleet.kept(results if isinstance(results, dict) else {})
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return {"outputs": outputs, "rcs": rcs, "unanswered": unanswered, "at": at, **found_mpi}

    @staticmethod
    def _decide(probed: dict[str, dict], args: dict, result: dict) -> None:
        """The backend from every probed node's GPUs; each node's ranks, or why it leaves."""
        requested = str(args["backend"] or "auto")
        fleet = fleet_backend(
            {host: node["gpu"] for host, node in probed.items()},
            requested,
            {host: node["settings"]["collbench_probe_timeout_s"] for host, node in probed.items()},
        )
        backend = fleet["backend"]
        staying = []
        for host, node in sorted(probed.items()):
            ranks, problem = probe_fleet.ranks_for(
                node["settings"],
                node["gpu"],
                backend,
                has_torch="torch" in node["outputs"],
                python=node["node_python"],
                host=host,
            )
            published = {"gpu": node["gpu"], "ranks": ranks}
            published["mpi"] = node.get("mpi")
            published["mpi_home"] = node.get("mpi_home", node["settings"]["collbench_mpi_home"])
            result["published"][host] = published
            if host in fleet["dropped"]:
                why = f"Check that the GPU tools answered failed: {fleet['dropped'][host]}"
            elif problem is not None:
                why = f"Check that every host can run the backend failed: {problem}"
            else:
                staying.append(ranks)
                continue
            result["dropped"][host] = {"status": "failed", "reason": why[:400]}
        result["run"] = {
            "backend": backend,
            "launcher": probe_fleet.launcher_for(str(args["launcher"] or "auto"), backend),
            "ranks_per_host": min(staying) if staying else 0,
        }
