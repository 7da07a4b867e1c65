"""The topology role (one controller task, action_plugins/collbench_topology.py) in a real
playbook on six local nodes: each NVIDIA or AMD node's matrix written as the tool printed it (real
captures, tests/data/corpus/topo/), private; no read on a node without GPU tools, one that has
left the run or one whose collbench_topology is false; a tool that fails costs its matrix alone,
said in the output, and the play goes on. (A tool that hangs: tests/cluster/test_faults.py.)"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from tests.roles.local_playbook import PLAYBOOK_BIN, REPO, local_inventory, run_playbook

TOPO = REPO / "tests" / "data" / "corpus" / "topo"
NVIDIA = TOPO / "hgx-h100-nv18-8nics-gpu-numa-id-spaces-sglang.txt"
AMD = TOPO / "rocm-smi-showtopo-mi300x-8gpu-xgmi-lowpower-warning.txt"
VENDORS = {
    "node1": "nvidia",
    "node2": "nvidia",
    "node3": "amd",
    "node4": "none",
    "node5": "nvidia",
    "node6": "nvidia",
}

pytestmark = pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="ansible-playbook is not in this venv")


def tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def playbook(tmp_path: Path, nvidia: str, **more: object) -> tuple[subprocess.CompletedProcess, Path]:
    """The playbook with stand-ins on PATH: rocm-smi prints AMD; nvidia-smi runs `nvidia`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool(bin_dir, "nvidia-smi", nvidia)
    tool(bin_dir, "rocm-smi", f'[ "$1" = --showtopo ] && exec cat {AMD}\nexit 2')
    hosts = {name: {} for name in VENDORS} | {
        "node3": {"collbench_topology": True},
        "node6": {"collbench_topology": False},
    }
    inventory = local_inventory(tmp_path / "hosts.yml", hosts, localhost=True)
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    extra = {"run_dir": str(run_dir), "vendors": VENDORS, **more}
    done = run_playbook("topology.yml", inventory, extra, path=f"{bin_dir}:{os.environ['PATH']}")
    return done, run_dir


def written(run_dir: Path) -> dict[str, str]:
    return {p.parent.name: p.read_text() for p in sorted(run_dir.glob("hosts/*/topo.txt"))}


def test_every_node_s_matrix_is_read_by_one_task(tmp_path: Path) -> None:
    done, run_dir = playbook(tmp_path, f'[ "$1 $2" = "topo -m" ] && exec cat {NVIDIA}\nexit 2')
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    as_printed = {path: path.read_text().rstrip("\r\n") + "\n" for path in (NVIDIA, AMD)}
    assert written(run_dir) == {
        "node1": as_printed[NVIDIA],
        "node2": as_printed[NVIDIA],
        "node3": as_printed[AMD],
    }
    assert {stat.S_IMODE(p.stat().st_mode) for p in run_dir.glob("hosts/*/topo.txt")} == {0o600}
    # One task for all of them, run for the play's first node.
    task = done.stdout[done.stdout.find("TASK [topology : Read every node") :]
    assert re.findall(r"^(changed|ok): \[(\S+)\]", task.split("\nTASK [")[0], re.MULTILINE) == [
        ("changed", "node1")
    ]
    assert "topology not read" not in done.stdout


# What nvidia-smi prints, on stdout, with rc 9, where the driver is not loaded.
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)


def test_a_tool_that_fails_costs_its_matrix_alone(tmp_path: Path) -> None:
    done, run_dir = playbook(tmp_path, f'echo "{NO_DRIVER}"\nexit 9')
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert list(written(run_dir)) == ["node3"]  # what it printed is no matrix
    for host in ("node1", "node2"):
        said = f"{host}: topology not read: nvidia-smi answered rc 9: {NO_DRIVER}"
        assert said in done.stdout, done.stdout[-3000:]
    assert "node5: topology not read" not in done.stdout  # it left the run: not read at all


def test_a_node_s_own_collbench_topology_wins_over_the_play_s(tmp_path: Path) -> None:
    """The play turns the topology off: only node3, whose inventory turns it on, is read."""
    done, run_dir = playbook(tmp_path, f"exec cat {NVIDIA}", play_topology=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert list(written(run_dir)) == ["node3"]
