"""A playbook of tests/playbooks/ run on local nodes (ansible_connection local), as the role tests
run it: the repository's ansible.cfg, no colour, no standard input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"


def local_inventory(path: Path, hosts: dict[str, dict[str, Any]], *, localhost: bool = False) -> Path:
    """An inventory at `path`: `hosts` (each with its host vars) in group gpu_nodes, every host local."""
    listed = "".join(f"        {name}: {json.dumps(host_vars)}\n" for name, host_vars in hosts.items())
    path.write_text(
        "all:\n  vars:\n    ansible_connection: local\n"
        f"    ansible_python_interpreter: {sys.executable}\n"
        + ("  hosts:\n    localhost: {}\n" if localhost else "")
        + "  children:\n    gpu_nodes:\n      hosts:\n"
        + listed
    )
    return path


def run_playbook(
    playbook: str, inventory: Path, extra: dict[str, Any], *args: str, path: str | None = None
) -> subprocess.CompletedProcess:
    """`ansible-playbook -i inventory tests/playbooks/<playbook> -e <extra> args...`; `path`: its PATH."""
    env = {
        **os.environ,
        "ANSIBLE_HOME": str(REPO / ".ansible"),
        "ANSIBLE_LOCAL_TEMP": str(REPO / ".ansible" / "tmp"),
        "ANSIBLE_NOCOLOR": "1",
    }
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [
            str(PLAYBOOK_BIN),
            "-i",
            str(inventory),
            f"tests/playbooks/{playbook}",
            "-e",
            json.dumps(extra),
            *args,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        check=False,
    )
