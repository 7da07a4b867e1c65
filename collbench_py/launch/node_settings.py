"""A node's settings, as read by a task run once for every node (action_plugins/collbench_facts.py,
collbench_node_checks.py, collbench_topology.py, collbench_build_check.py): the node's own value
(its inventory or extra vars, which hostvars holds), else the play's (play vars and role defaults
are not per node: `play_values` reads them, not the task's values templated for the host it runs
for). A value that cannot work is that node's failure, with the variable named."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.module_utils.parsing.convert_bool import boolean


class SettingError(ValueError):
    """A node's setting that cannot work: the node leaves the run with this message."""


def own_or_task(known: Mapping[str, Any], defaults: Mapping[str, Any], name: str) -> Any:
    """The node's own value of `name`, else the task's."""
    return known[name] if name in known else defaults.get(name)


def as_bool(name: str, value: Any) -> bool:
    """`value` read as Ansible reads a boolean (true, yes, on, 1 ...)."""
    try:
        return boolean(value, strict=True)
    except TypeError:
        raise SettingError(f"{name} must be true or false (is {value!r})") from None


def as_int(name: str, value: Any, least: int | None = None) -> int:
    """`value` as a whole number, of at least `least` where given."""
    try:
        number = int(str(value).strip())
    except ValueError:
        raise SettingError(f"{name} must be a whole number (is {value!r})") from None
    if least is not None and number < least:
        raise SettingError(f"{name} must be at least {least} (is {number})")
    return number


def play_values(action: Any, names: Mapping[str, Any], here: Mapping[str, Any]) -> dict[str, Any]:
    """The values a node without its own would have (play vars, role defaults, extra vars), for an
    action plugin run once (`action`) that was given `names` templated for the host it runs for
    (`here`: that host's hostvars): that host's own inventory value of a name would otherwise stand
    in for every node's default. A name with none of those and a value of that host's own: None."""
    manager = getattr(action._task, "_variable_manager", None)
    if manager is None:  # not loaded by a playbook: what the task was given
        return dict(names)
    available = manager.get_vars(play=action._task.get_play(), task=action._task, include_hostvars=False)
    templar = action._templar.copy_with_new_env(available_variables=available)
    return {
        name: templar.template(available[name]) if name in available else None if name in here else value
        for name, value in names.items()
    }
