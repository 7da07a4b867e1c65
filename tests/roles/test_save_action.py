"""collbench_save (action_plugins/) in a real playbook: it writes text on the controller with the
directories 0700 and the files 0600, saving the same text again is no change, and check mode
writes nothing."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"
HOSTS = ("node1", "node2")

pytestmark = pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="ansible-playbook is not in this venv")


def playbook(tmp_path: Path, out_dir: Path, *args: str) -> subprocess.CompletedProcess:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  vars:\n    ansible_connection: local\n"
        f"    ansible_python_interpreter: {sys.executable}\n"
        "  children:\n    gpu_nodes:\n      hosts:\n" + "".join(f"        {h}: {{}}\n" for h in HOSTS)
    )
    env = {
        **os.environ,
        "ANSIBLE_HOME": str(REPO / ".ansible"),
        "ANSIBLE_LOCAL_TEMP": str(REPO / ".ansible" / "tmp"),
        "ANSIBLE_NOCOLOR": "1",
    }
    argv = [str(PLAYBOOK_BIN), "-i", str(inventory), "tests/playbooks/save.yml", "-e", f"out_dir={out_dir}"]
    return subprocess.run(
        [*argv, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def changed(output: str) -> dict[str, int]:
    return {host: int(n) for host, n in re.findall(r"^(\S+)\s+:.*\bchanged=(\d+)", output, re.MULTILINE)}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_save_writes_privately_once_and_not_in_check_mode(tmp_path: Path) -> None:
    out = tmp_path / "run" / "hosts"
    first = playbook(tmp_path, out)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    for host in HOSTS:
        assert json.loads((out / host / "saved.json").read_text()) == {"host": host}
    assert changed(first.stdout) == dict.fromkeys(HOSTS, 1), first.stdout[-2000:]
    written = list((tmp_path / "run").rglob("*"))
    assert {mode(p) for p in written if p.is_dir()} == {0o700}
    assert {mode(p) for p in written if p.is_file()} == {0o600}

    again = playbook(tmp_path, out)  # the same text: no change
    assert again.returncode == 0, again.stdout[-3000:]
    assert changed(again.stdout) == dict.fromkeys(HOSTS, 0), again.stdout[-2000:]

    dry = tmp_path / "dry"
    checked = playbook(tmp_path, dry, "--check")
    assert checked.returncode == 0, checked.stdout[-3000:]
    assert changed(checked.stdout) == dict.fromkeys(HOSTS, 1), checked.stdout[-2000:]  # would change
    assert not dry.exists()
