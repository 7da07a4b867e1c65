"""The node checks (one controller task, action_plugins/collbench_node_checks.py) in a real playbook
on six local nodes, before and after the benchmarks: each node in the run runs the real node
program with its Python (no GPU or RDMA tool here: every check skipped with its note) and its
files come back unchanged; a node switched off or already out of the run is not checked; a node
whose program fails, or whose setting cannot work, leaves the run with the reason, and only it.
(Over real SSH, with stand-in tools that measure: tests/cluster/test_node_checks_e2e.py.)"""

from __future__ import annotations

import json
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.roles.local_playbook import PLAYBOOK_BIN, local_inventory, run_playbook

pytestmark = pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="ansible-playbook is not in this venv")
NODES = ("node1", "node2", "node3", "node4", "node5", "node6")


def playbook(tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path, Path]:
    broken = tmp_path / "broken-python"
    broken.write_text(
        "#!/bin/sh\n"
        "echo 'Traceback (most recent call last):' >&2\n"
        "echo 'OSError: the disk is gone' >&2\n"
        "exit 1\n"
    )
    broken.chmod(0o755)
    hosts = {name: {} for name in NODES} | {
        "node2": {"collbench_node_checks": False},
        "node3": {"ansible_python_interpreter": str(broken)},
        "node4": {"collbench_node_checks_timeout_s": 0},
        "node6": {"collbench_node_checks_nvlink": False},
    }
    inventory = local_inventory(tmp_path / "hosts.yml", hosts, localhost=True)
    run_dir, work_dir = tmp_path / "run", tmp_path / "work"
    run_dir.mkdir(mode=0o700)
    extra = {"run_dir": str(run_dir), "run_id": "night-1", "work_dir": str(work_dir)}
    # Only the venv's Python and the base system on PATH: no GPU or RDMA tool is found.
    done = run_playbook(
        "node_checks.yml", inventory, extra, path=f"{Path(sys.executable).parent}:/usr/bin:/bin"
    )
    return done, run_dir, work_dir


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path, Path]:
    return playbook(tmp_path_factory.mktemp("node-checks"))


def checks(path: Path) -> dict[str, dict]:
    return {entry["name"]: entry for entry in json.loads(path.read_text())["checks"]}


def test_each_node_in_the_run_is_checked_and_its_files_come_back_unchanged(ran) -> None:
    done, run_dir, work_dir = ran
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    fetched = sorted(p.parent.parent.name for p in run_dir.glob("hosts/*/node/checks.json"))
    assert fetched == ["node1", "node6"]
    for host in fetched:
        on_node = work_dir / host / "runs" / "night-1" / host / "node"
        here = run_dir / "hosts" / host / "node"
        assert sorted(p.name for p in on_node.iterdir()) == sorted(p.name for p in here.iterdir())
        assert all((here / p.name).read_bytes() == p.read_bytes() for p in on_node.iterdir())
        assert {stat.S_IMODE(p.stat().st_mode) for p in here.iterdir()} == {0o600}
    node1 = checks(run_dir / "hosts" / "node1" / "node" / "checks.json")
    # Before and after: the after-read added to the same checks.json.
    assert list(node1) == ["gpu_matrix", "nvlink", "nic_ports", "loopback", "nvlink_after"]
    assert {entry["status"] for entry in node1.values()} == {"skipped"}
    assert "no nvbandwidth" in node1["gpu_matrix"]["note"]
    # node6 switched its NVLink reads off in its own inventory; node1 took the play's value.
    node6 = checks(run_dir / "hosts" / "node6" / "node" / "checks.json")
    assert (
        node6["nvlink"]["note"]
        == node6["nvlink_after"]["note"]
        == "switched off (collbench_node_checks_nvlink: false)"
    )
    assert "switched off" not in node1["nvlink"]["note"]


def test_a_failing_program_or_a_setting_that_cannot_work_drops_that_node_alone(ran) -> None:
    done, run_dir, _ = ran
    standing = json.loads((run_dir / "standing.json").read_text())
    assert standing == {
        "node1": "in the run",
        "node2": "in the run",
        "node3": "Run the node checks failed: rc 1: OSError: the disk is gone",
        "node4": "Run the node checks failed: collbench_node_checks_timeout_s must be at least 1 (is 0)",
        "node5": "an earlier phase",
        "node6": "in the run",
    }
    assert "node3 leaves the run: Run the node checks failed: rc 1" in done.stdout
    assert not (run_dir / "hosts" / "node3").exists() and not (run_dir / "hosts" / "node4").exists()
    # Not checked at all: switched off, or already out of the run.
    assert not (run_dir / "hosts" / "node2").exists() and not (run_dir / "hosts" / "node5").exists()


def test_one_task_for_every_node_with_a_line_for_each_as_it_ends(ran) -> None:
    done, _, _ = ran
    task = done.stdout[done.stdout.find("TASK [node_checks : Check every node's") :].split("\nTASK [")[0]
    assert re.findall(r"^(changed|ok): \[(\S+)\]", task, re.MULTILINE) == [("changed", "node1")]
    assert sorted(re.findall(r"^node checks \(before\): (\S+): ", done.stdout, re.MULTILINE)) == [
        "node1",
        "node3",
        "node6",
    ]
    # After the benchmarks only the nodes still in the run are read again.
    assert sorted(re.findall(r"^node checks \(after\): (\S+): ", done.stdout, re.MULTILINE)) == [
        "node1",
        "node6",
    ]
