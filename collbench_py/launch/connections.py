"""Each host's Ansible connection, opened by one controller task for commands fanned out to many
hosts (action_plugins/collbench_round.py, collbench_topology.py, collbench_node_checks.py,
collbench_facts.py), and the Python Ansible runs there.

The connection is set up as a task on that host would set it up: its address, port, user, key,
ssh args, jump host, host key checking, and the control socket earlier tasks opened. Call it
before the threads start: templating is not shared across threads.
"""

from __future__ import annotations

import shlex
from typing import Any

from ansible import constants as C
from ansible.errors import AnsibleConnectionFailure, AnsibleError


def open_connections(action: Any, hostvars: Any, hosts: set[str]) -> dict[str, Any]:
    """{host: its connection}, for an action plugin (`action`, an ActionBase in its run)."""
    names = {"ansible_connection", "inventory_hostname"}
    for var_names in C.MAGIC_VARIABLE_MAPPING.values():
        names.update(var_names)
    loader = action._shared_loader_obj.connection_loader
    connections = {}
    for host in sorted(hosts):
        known = hostvars[host]
        variables = {name: known[name] for name in names if name in known}
        variables["inventory_hostname"] = host
        conn_type = str(variables.get("ansible_connection") or C.DEFAULT_TRANSPORT)
        if conn_type == "smart":
            conn_type = "ssh"
        variables.update(
            {name: known[name] for name in C.config.get_plugin_vars("connection", conn_type) if name in known}
        )
        context = action._play_context.set_task_and_variable_override(
            task=action._task, variables=variables, templar=action._templar
        )
        context.connection = conn_type
        connection = loader.get(conn_type, context, new_stdin=None)
        if connection is None:
            raise AnsibleError(f"{host}: the connection plugin {conn_type!r} was not found")
        task_keys = action._task.dump_attrs()
        task_keys["timeout"] = context.timeout
        task_keys.pop("retries", None)
        if context.password:
            task_keys["password"] = context.password
        connection.set_options(
            task_keys=task_keys,
            var_options=connection._resolve_option_variables(variables, action._templar),
        )
        connections[host] = connection
    return connections


def shell_command(argv: list[str]) -> str:
    """The argv as the one command line a connection runs: each word quoted, run by /bin/sh as
    Ansible runs its own commands (the remote login shell may be any)."""
    return f"/bin/sh -c {shlex.quote(shlex.join(argv))}"


def node_python(known: Any) -> str:
    """The Python Ansible runs on a node (its hostvars `known`): the inventory's interpreter, else
    the one Ansible found there."""
    given = str(known.get("ansible_python_interpreter") or "")
    if given and not given.startswith("auto"):
        return given
    facts = known.get("ansible_facts") or {}
    return str(facts.get("discovered_interpreter_python") or "/usr/bin/python3")


def said(error: BaseException) -> str:
    """The error on one line (ssh's own words come on the lines after Ansible's)."""
    return " ".join(str(error).split()) or type(error).__name__


def left_the_run(answer: Any, task: str) -> dict[str, str] | None:
    """How a node leaves the run when its command in a phase run for every node (collbench_py/
    launch/fanout.py's Answer) did not answer in time or raised: {status, reason}, as the phase
    wrapper records a node whose `task` failed; `unreachable` where its connection failed. None
    when it answered."""
    if answer.unanswered:
        return {"status": "failed", "reason": f"{task} failed: no answer within {answer.job.deadline_s} s"}
    if answer.error is None:
        return None
    reached = not isinstance(answer.error, AnsibleConnectionFailure)
    return {"status": "failed" if reached else "unreachable", "reason": said(answer.error)}
