"""`collbench` as a user runs it: this Python's `python -m collbench_py`, in a process of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def collbench(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run `collbench ARGS...` from the checkout, no standard input, output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "collbench_py", *args],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
