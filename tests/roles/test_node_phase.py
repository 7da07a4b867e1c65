"""The node phase run by bench.yml on this machine (local connection, no GPU, no RDMA device):
every check is skipped with its note, and checks.json comes back to hosts/<host>/node/; with
collbench_node_checks false nothing is run on the node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"

pytestmark = [
    pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="ansible-playbook is not in this venv"),
    pytest.mark.long,  # two real playbook runs, about a minute in all
]


def run_node_phase(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        # Only the Python and Ansible of the venv and the base system: no GPU or RDMA tool is found.
        "PATH": f"{PLAYBOOK_BIN.parent}:/usr/bin:/bin",
        "ANSIBLE_HOME": str(REPO / ".ansible"),
        "ANSIBLE_LOCAL_TEMP": str(REPO / ".ansible" / "tmp"),
        "XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME", "/tmp/xdg"),
        "ANSIBLE_NOCOLOR": "1",
    }
    return subprocess.run(
        [
            str(PLAYBOOK_BIN),
            "bench.yml",
            "--tags",
            "node",
            "-e",
            f"collbench_results_dir={tmp_path / 'results'}",
            "-e",
            f"collbench_workdir={tmp_path / 'work'}",
            *args,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def test_without_gpu_or_rdma_every_check_is_skipped_with_its_note_and_fetched(tmp_path: Path) -> None:
    result = run_node_phase(tmp_path)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    fetched = list((tmp_path / "results").glob("*/hosts/localhost/node/checks.json"))
    assert len(fetched) == 1, result.stdout[-3000:]
    document = json.loads(fetched[0].read_text(encoding="utf-8"))
    assert document["host"] == "localhost"
    assert document["perftest"] == {"gpudirect": False, "source": "none"}
    checks = {entry["name"]: entry for entry in document["checks"]}
    assert list(checks) == ["gpu_matrix", "nvlink", "nic_ports", "loopback", "nvlink_after"]
    assert {entry["status"] for entry in checks.values()} == {"skipped"}
    assert all(entry["note"] for entry in checks.values())
    assert "no nvbandwidth" in checks["gpu_matrix"]["note"]
    # What the node wrote is what the controller holds.
    on_node = list((tmp_path / "work" / "runs").glob("*/localhost/node/checks.json"))
    assert [path.read_bytes() for path in on_node] == [fetched[0].read_bytes()]


def test_switched_off_nothing_is_run_on_the_node(tmp_path: Path) -> None:
    result = run_node_phase(tmp_path, "-e", "collbench_node_checks=false")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    # The one task of each phase (before and after the benchmarks) runs, and checks no node.
    assert result.stdout.count("TASK [node_checks : ") == 2
    assert "node checks (before)" not in result.stdout and "node checks (after)" not in result.stdout
    assert not list((tmp_path / "results").glob("*/hosts/localhost/node"))
    assert not list((tmp_path / "work").glob("runs/*/localhost/node"))
