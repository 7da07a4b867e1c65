"""collbench_py/node/ssh_hops.py, the hop check the node_ssh role ships to each node, run as the
role runs it (one JSON request, one JSON list back) with the real ssh client against local ports."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOPS = REPO / "collbench_py" / "node" / "ssh_hops.py"
SSH_OPTIONS = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=3", "-o", "StrictHostKeyChecking=yes"]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when the block ends: connections are refused


def hops_program(request: dict) -> subprocess.CompletedProcess[str]:
    """The program run as the role runs it: its text given to `python -c`, the request in argv."""
    return subprocess.run(
        [sys.executable, "-c", HOPS.read_text(), json.dumps(request)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def run_hops(request: dict) -> list[dict]:
    done = hops_program(request)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def request(ssh: list[str], to: list[str], addresses: list[str], timeout_s: int = 5) -> dict:
    return {
        "ssh": ssh,
        "timeout_s": timeout_s,
        "parallel": 4,
        "from": "node 1",
        "from_dir": "node_1",
        "to": to,
        "to_dirs": [name.replace(" ", "_") for name in to],
        "addresses": addresses,
    }


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no ssh client")
def test_a_refused_connection_is_named_with_both_hosts() -> None:
    ssh = ["ssh", "-p", str(closed_port()), *SSH_OPTIONS]
    (result,) = run_hops(request(ssh, ["node 2"], ["127.0.0.1"]))
    assert result["ok"] is False and result["rc"] == 255
    assert "Connection refused" in result["error"], result
    assert result["record"] == {"from": "node_1", "to": "node_2", "error": result["error"]}


def test_a_hop_that_does_not_answer_is_bounded() -> None:
    # `sleep` stands for an ssh that never answers: the hop ends at its bound, and is tried again.
    (result,) = run_hops(request(["sh", "-c", "sleep 30"], ["node2"], ["ignored"], timeout_s=1))
    assert result["ok"] is False and result["rc"] is None
    assert result["error"] == "no answer within 1 s"


def test_a_hop_that_works_is_ok_and_every_target_is_answered() -> None:
    results = run_hops(request(["sh", "-c", "exit 0"], ["node2", "node3"], ["10.0.0.2", "10.0.0.3"]))
    assert [(r["to"], r["ok"], r["error"]) for r in results] == [("node2", True, ""), ("node3", True, "")]


def test_the_role_ships_the_file_from_the_package() -> None:
    defaults = (REPO / "roles" / "node_ssh" / "defaults" / "main.yml").read_text()
    assert "/collbench_py/node/ssh_hops.py" in defaults
    assert not (REPO / "roles" / "node_ssh" / "files").exists()


def test_the_run_s_known_hosts_is_written_private_before_the_hops(tmp_path: Path) -> None:
    """Run as the role runs it (`python -c` its text): known_hosts lands in the run's ssh directory,
    0600, exactly as given; with no hop to try the answer is an empty list."""
    folder = tmp_path / "runs" / "r1" / "node1" / "ssh"
    folder.mkdir(parents=True, mode=0o700)
    known = folder / "known_hosts"
    text = "10.99.0.12,node2 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHOSTKEY\n"
    req = {**request(["ssh"], [], []), "known_hosts": {"path": str(known), "text": text}}
    assert run_hops(req) == []
    assert known.read_text() == text and known.stat().st_mode & 0o777 == 0o600
    # No run directory (the key was never installed): one line, no traceback, no hop tried
    req["known_hosts"]["path"] = str(tmp_path / "missing" / "known_hosts")
    done = hops_program(req)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"cannot write {tmp_path / 'missing' / 'known_hosts'}:"), done.stderr
