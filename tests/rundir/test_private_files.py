"""Run-directory files written by the playbook's action plugins: private, whole, never through a link."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from collbench_py.rundir.private_files import receive_private, write_private


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_missing_directories_and_the_file_are_private_even_under_an_open_umask(tmp_path: Path) -> None:
    old = os.umask(0o002)
    try:
        target = tmp_path / "run" / "inter" / "pairs" / "node1--node2" / "launcher-node1.out"
        assert write_private(target, b"torchrun said this\n")
    finally:
        os.umask(old)
    assert target.read_bytes() == b"torchrun said this\n"
    assert mode(target) == 0o600
    for level in (target.parent, target.parent.parent, tmp_path / "run"):
        assert mode(level) == 0o700, level
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no temporary left behind


def test_the_same_content_again_is_not_a_change_and_new_content_replaces_it(tmp_path: Path) -> None:
    target = tmp_path / "manifest.json"
    assert write_private(target, b'{"status": "running"}\n')
    inode = target.stat().st_ino
    assert not write_private(target, b'{"status": "running"}\n')
    assert target.stat().st_ino == inode  # untouched
    assert write_private(target, b'{"status": "complete"}\n')
    assert target.read_bytes() == b'{"status": "complete"}\n'


def test_a_planted_link_is_replaced_not_written_through(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("keep me\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "topo.txt").symlink_to(elsewhere)
    assert write_private(run / "topo.txt", b"GPU0\tX\n")
    assert elsewhere.read_text() == "keep me\n"
    assert not (run / "topo.txt").is_symlink()
    assert (run / "topo.txt").read_bytes() == b"GPU0\tX\n"


def test_a_transfer_that_fails_leaves_no_file_and_no_temporary(tmp_path: Path) -> None:
    def broken(local: str) -> None:
        Path(local).write_bytes(b"half a lo")
        raise OSError("connection lost")

    with pytest.raises(OSError, match="connection lost"):
        receive_private(tmp_path / "pairs" / "all_reduce.log", broken)
    assert list((tmp_path / "pairs").iterdir()) == []
    log = tmp_path / "pairs" / "all_reduce.log"
    assert receive_private(log, lambda local: Path(local).write_bytes(b"ok\n"))
    assert (log.read_bytes(), mode(log)) == (b"ok\n", 0o600)
