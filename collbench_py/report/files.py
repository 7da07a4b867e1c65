"""Write output files atomically: a reader (node_exporter, a CI step) never sees half a file.

The temporary file gets a fresh random name, created exclusively: a name planted in the output
directory beforehand (a link to a file elsewhere) is never opened, so nothing is written through it.
Every file is private (0600), wherever it is written: a report names hosts, addresses and facts, as
the run directory the playbook keeps private does. To publish one (a web server, node_exporter's
textfile directory), copy it with the mode it needs there (`install -m 0644`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from collbench_py.rundir.private_files import PRIVATE_FILE


@contextmanager
def atomic_writer(path: Path, newline: str | None = None) -> Iterator[IO[str]]:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, PRIVATE_FILE)  # mkstemp's own mode; said here so that no change loosens it
        with os.fdopen(fd, "w", encoding="utf-8", newline=newline) as handle:
            yield handle
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
