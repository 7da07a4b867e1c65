"""collbench_py/node/ssh_setup.py, run as the node_ssh role runs it: its text given to `python -c`,
one JSON request in argv, the private key on standard input, one JSON object back. The real
ssh-keyscan is asked for a name that does not resolve: no host key, and why."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROGRAM = (REPO / "collbench_py" / "node" / "ssh_setup.py").read_text()
COMMENT = "collbench-run-20261128T000000Z-abc123"
PUBLIC = f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIRUNKEY {COMMENT}"
PRIVATE = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"


def run(action: str, request: dict, stdin: str = "") -> tuple[dict, subprocess.CompletedProcess]:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, action, json.dumps(request)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def install_request(tmp_path: Path, home: Path) -> dict:
    run_dir = tmp_path / "work" / "runs" / "r1" / "node1" / "ssh"
    return {
        "dir": str(run_dir),
        "key": str(run_dir / "id_ed25519"),
        "ssh_home": str(home / ".ssh"),
        "authorized_keys": str(home / ".ssh" / "authorized_keys"),
        "public_key": PUBLIC,
        "address": "127.0.0.1",
        "scan_timeout_s": 2,
    }


def test_install_writes_the_key_private_and_authorises_it_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o755)
    keys = home / ".ssh" / "authorized_keys"
    keys.write_text("ssh-ed25519 AAAAother user@laptop")  # the user's own line, no final newline
    request = install_request(tmp_path, home)
    said, done = run("install", request, PRIVATE)
    assert said["error"] is None and said["changed"] is True, said
    key = Path(request["key"])
    assert key.read_text() == PRIVATE and mode(key) == 0o600
    assert mode(key.parent) == 0o700 and mode(home / ".ssh") == 0o700  # sshd refuses a looser ~/.ssh
    # Every directory it made above the key too (the run's directory on the node)
    assert {mode(d) for d in (key.parent.parent, key.parent.parent.parent)} == {0o700}
    assert keys.read_text().splitlines() == ["ssh-ed25519 AAAAother user@laptop", PUBLIC]
    assert mode(keys) == 0o600
    # The private key goes nowhere else: not in what the program prints
    assert "PRIVATE KEY" not in done.stdout + done.stderr
    # Installed again (a rerun of the same run): still one line
    run("install", request, PRIVATE)
    assert keys.read_text().splitlines().count(PUBLIC) == 1


def test_a_linked_authorized_keys_stays_a_link(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    real = tmp_path / "managed" / "authorized_keys"
    real.parent.mkdir()
    real.write_text("ssh-ed25519 AAAAother user@laptop\n")
    (home / ".ssh" / "authorized_keys").symlink_to(real)
    run("install", install_request(tmp_path, home), PRIVATE)
    assert (home / ".ssh" / "authorized_keys").is_symlink()
    assert real.read_text().splitlines()[-1] == PUBLIC


def test_an_address_no_sshd_answers_on_gives_no_host_key_and_says_why(tmp_path: Path) -> None:
    request = {**install_request(tmp_path, tmp_path / "home"), "address": "no-such-node.invalid"}
    said, _ = run("install", request, PRIVATE)
    assert said["error"] is None and said["host_keys"] == [], said
    assert "no-such-node.invalid" in said["scan_error"], said


def test_remove_takes_the_run_s_line_and_directory_and_nothing_else(tmp_path: Path) -> None:
    home = tmp_path / "home"
    request = install_request(tmp_path, home)
    run("install", request, PRIVATE)
    keys = Path(request["authorized_keys"])
    other_run = f"ssh-ed25519 AAAAkept {COMMENT}0"  # another run's comment that starts like this one's
    keys.write_text(keys.read_text() + other_run + "\n")
    removal = {"dir": request["dir"], "authorized_keys": str(keys), "comment": COMMENT, "keyed": True}
    said, _ = run("remove", removal)
    assert said == {"changed": True, "error": None}
    assert keys.read_text().splitlines() == [other_run]
    assert not Path(request["dir"]).exists()
    said, _ = run("remove", removal)  # nothing left to remove
    assert said == {"changed": False, "error": None}


def test_a_directory_that_cannot_be_made_is_one_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    request = {**install_request(tmp_path, tmp_path / "home"), "dir": str(blocker / "ssh")}
    said, done = run("install", request, PRIVATE)
    assert said["changed"] is False and str(blocker) in said["error"], said
    assert "Traceback" not in done.stderr
