"""The processes a report forks (the parse workers, the figures' helper, the pruning) end with it.

A report killed outright (a nightly job's time limit, the out-of-memory killer) would leave them
behind for good: parse workers holding the logs they parsed, a helper waiting for figures, a pruning
process waiting for its word. Each asks Linux, first thing, to be killed when its parent goes
(prctl PR_SET_PDEATHSIG). SIGKILL, not SIGTERM: a fork inherits the parent's Python signal handlers
(`collbench run` has one for SIGTERM), and a pruning killed mid-way loses nothing (SQLite rolls its
transaction back; the next report prunes again).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def end_with_parent(parent: int) -> None:
    """Have this (forked) process killed when `parent`, the process that forked it, ends; ended now
    if it has already (its parent is then another process, which no signal would come from)."""
    if sys.platform.startswith("linux"):
        # No prctl in this C library: the process lives on alone, as it did.
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)
