"""The wrapper every phase on the nodes runs in is written once (roles/collbench_phase): every play
of playbooks/ that works on the nodes still in the run goes through it, and no playbook spells out
its parts again (leave out the nodes that left, rescue, record the node failed, end it). A flat
phase (FLAT: one controller task for every node, which leaves out the nodes that left itself and
records the nodes it drops on them) runs its role's tasks once, for the play's first node, and
needs no wrapper; so does a decision made for every node before the wrapper (the builds' check).
What it does in a run is tested on real runs in tests/roles/test_playbook_validation.py (a run
where every node fails is finalised; a node that fails under --tags still fails the run)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = sorted((REPO / "playbooks").glob("*.yml"))
WRAPPER = REPO / "roles" / "collbench_phase" / "tasks" / "main.yml"
# Roles whose phase is one controller task (action_plugins/collbench_topology.py, collbench_facts.py,
# collbench_node_checks.py)
FLAT = {"topology", "facts", "node_checks"}


def plays() -> list[tuple[str, dict]]:
    return [(path.name, play) for path in PLAYBOOKS for play in yaml.safe_load(path.read_text())]


def walk(tasks: list[dict]):
    for task in tasks or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from walk(task.get(key))


def flat_tasks(role: str, tasks_from: str):
    """The tasks a flat role's entry point runs, with those it imports (its own, or another
    role's, as the wrapper's record of the nodes it dropped)."""
    for task in walk(yaml.safe_load((REPO / "roles" / role / "tasks" / f"{tasks_from}.yml").read_text())):
        if "ansible.builtin.import_tasks" in task:
            yield from flat_tasks(role, task["ansible.builtin.import_tasks"].removesuffix(".yml"))
        elif "ansible.builtin.import_role" in task:
            imported = task["ansible.builtin.import_role"]
            yield from flat_tasks(imported["name"], imported.get("tasks_from", "main"))
        else:
            yield task


@pytest.mark.parametrize(("name", "play"), plays(), ids=lambda v: v if isinstance(v, str) else v["name"])
def test_every_phase_on_the_nodes_goes_through_the_wrapper(name: str, play: dict) -> None:
    tasks = list(walk(play.get("tasks")))
    for task in tasks:
        assert "rescue" not in task, f"{name}: {play['name']} rescues on its own"
        assert task.get("ansible.builtin.meta") != "end_host", f"{name}: {play['name']} ends hosts on its own"
    if play["hosts"] == "collbench_reachable" and name != "report.yml":
        imported = [t["ansible.builtin.import_role"] for t in tasks if "ansible.builtin.import_role" in t]
        roles = [role["name"] for role in imported]
        if len(roles) == 1 and roles[0] in FLAT:
            ran = list(flat_tasks(roles[0], imported[0].get("tasks_from", "main")))
            assert ran and all(task.get("run_once") is True for task in ran), f"{roles[0]} runs per node"
            return
        # Before the wrapper, a decision made for every node at once (the builds' check.yml): run once.
        *before, wrapper = imported
        for role in before:
            ran = list(flat_tasks(role["name"], role.get("tasks_from", "main")))
            assert ran and all(task.get("run_once") is True for task in ran), f"{role['name']} runs per node"
        assert wrapper["name"] == "collbench_phase", f"{name}: {play['name']} runs {roles}"
        for task in tasks:
            if task["ansible.builtin.import_role"]["name"] == "collbench_phase":
                assert task["vars"]["collbench_phase_role"], task


def test_the_wrapper_leaves_out_rescues_records_and_ends() -> None:
    tasks = yaml.safe_load(WRAPPER.read_text())
    leave_out, phase = tasks
    assert leave_out["ansible.builtin.meta"] == "end_host" and "collbench_host_status" in leave_out["when"]
    (run,) = phase["block"]
    assert run["ansible.builtin.include_role"]["name"] == "{{ collbench_phase_role }}"
    record, end = phase["rescue"]
    assert record["ansible.builtin.import_tasks"] == "drop.yml"
    assert end["ansible.builtin.meta"] == "end_host"
    # Tagged always: the phase's own tags decide what runs, never the wrapper's.
    assert all("always" in task["tags"] for task in (leave_out, run, record, end))
