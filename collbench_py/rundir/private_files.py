"""Files of the run directory on the controller: private (dirs 0700, files 0600), written whole.

The playbook's action plugins (action_plugins/collbench_save.py, collbench_collect.py) write
logs, facts and the manifest through these, inside the Ansible process. A file is written to a
fresh temporary name in its directory (created exclusively: a planted link is never followed)
and renamed into place, so a reader never sees half of it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


def make_private_dirs(directory: Path) -> None:
    """`directory` and its missing parents, each created 0700 (existing ones are left as they are)."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for level in reversed(missing):
        level.mkdir(mode=PRIVATE_DIR, exist_ok=True)
        os.chmod(level, PRIVATE_DIR)  # mkdir's mode goes through the umask


def write_private(path: Path, data: bytes) -> bool:
    """Write `data` to `path` (0600); False, and nothing written, when it already holds exactly that."""
    try:
        if path.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    make_private_dirs(path.parent)
    replace_file(path, lambda temporary: Path(temporary).write_bytes(data))
    return True


def receive_private(path: Path, fill: Callable[[str], None]) -> bool:
    """`path` (0600) as `fill(temporary_path)` writes it, e.g. a transfer from a node."""
    make_private_dirs(path.parent)
    replace_file(path, fill)
    return True


def replace_file(path: Path, fill: Callable[[str], None], mode: int = PRIVATE_FILE) -> None:
    """`path` replaced whole by what `fill(temporary_path)` writes, with `mode`: the temporary file
    is created exclusively beside it and renamed over it, or removed if anything fails."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        fill(temporary)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    finally:
        Path(temporary).unlink(missing_ok=True)
