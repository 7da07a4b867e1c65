"""The reachable nodes keep the inventory's order, whatever order they answer in.

Every play after preflight targets the group `collbench_reachable`, and its host order decides who
heads the launch across all hosts and how the pair plan is laid out. A group built by `group_by`
keeps its hosts in the order their results came back, which changes from run to run (node2 once
headed the launch that node1 heads in every other run). Here the first node of the inventory
answers every task a second late (a host variable that Ansible templates for each task of that
host sleeps), so arrival order differs from inventory order every time; one unreachable node
must be left out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
NODES = 6

pytestmark = pytest.mark.long  # ansible-playbook on six local hosts, about 20 s


def reach(tmp_path: Path) -> tuple[list[str], list[str]]:
    """(inventory order of the nodes that answer, the order the later plays see)."""
    result = tmp_path / "order.json"
    # Out of name order, so that neither sorting nor arrival order can pass for inventory order.
    names = [f"n{(5 * i) % NODES + 1:02d}" for i in range(NODES)]
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts = {name: dict(local) for name in names}
    # Templated by Ansible for each of this host's tasks: every answer comes a second late.
    hosts[names[0]]["ansible_become"] = "{{ lookup('pipe', 'sleep 1') | length > 0 }}"
    # Refused at once (nothing listens on port 9): recorded unreachable, not a member.
    hosts[names[3]] = {"ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_connection": "ssh"}
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "vars": {"collbench_test_result": str(result)},
                    "children": {"gpu_nodes": {"hosts": hosts}},
                }
            },
            sort_keys=False,
        )
    )
    env = {
        **os.environ,
        "ANSIBLE_HOME": str(REPO / ".ansible"),
        "ANSIBLE_LOCAL_TEMP": str(REPO / ".ansible" / "tmp"),
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_FORKS": str(NODES),
        "ANSIBLE_NOCOLOR": "1",
    }
    playbook = REPO / "tests" / "playbooks" / "reach_order.yml"
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(playbook)]
    done = subprocess.run(
        argv, capture_output=True, text=True, env=env, timeout=300, check=False, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    expected = [name for name in names if name != names[3]]
    return expected, json.loads(result.read_text())


def test_the_reachable_nodes_keep_the_inventory_order(tmp_path: Path) -> None:
    expected, seen = reach(tmp_path)
    assert seen == expected
