"""Write output files atomically: a reader (node_exporter, a CI step) never sees half a file.

The temporary file gets a fresh random name, created exclusively: a name planted in the output
directory beforehand (a link to a file elsewhere) is never opened, so nothing is written through it.
A file is no more open than its directory: in a private run directory (0700) the report is 0600.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


@contextmanager
def atomic_writer(path: Path, newline: str | None = None) -> Iterator[IO[str]]:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp makes the file 0600; the output gets what an ordinary open would give it, within
        # what its directory allows.
        os.fchmod(fd, 0o666 & ~_umask() & os.stat(path.parent).st_mode)
        with os.fdopen(fd, "w", encoding="utf-8", newline=newline) as handle:
            yield handle
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0o077)
    os.umask(mask)
    return mask
