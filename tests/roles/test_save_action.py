"""collbench_save (action_plugins/) in a real playbook: it writes text on the controller with the
directories 0700 and the files 0600, saving the same text again is no change, and check mode
writes nothing."""

from __future__ import annotations

import json
import re
import stat
import subprocess
from pathlib import Path

import pytest

from tests.roles.local_playbook import PLAYBOOK_BIN, local_inventory, run_playbook

HOSTS = ("node1", "node2")

pytestmark = pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="ansible-playbook is not in this venv")


def playbook(tmp_path: Path, out_dir: Path, *args: str) -> subprocess.CompletedProcess:
    inventory = local_inventory(tmp_path / "hosts.yml", {host: {} for host in HOSTS})
    return run_playbook("save.yml", inventory, {"out_dir": str(out_dir)}, *args)


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
