"""The processes a report forks (the parse workers, the figures' helper, the pruning, the records of
results.json) end with it.

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
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

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


@dataclass
class ReadyChild:
    """A child forked now, while the caller is small, that waits for one word from it (`_release`)
    and answers once (`_answer`): a fork of a process holding a parsed fleet copies each page
    either process then writes. None started (`process` None) where fork is not available or no
    process is to spare."""

    process: Any = None  # multiprocessing.Process of the fork context
    receive: Connection | None = None  # the child's answer
    release: Connection | None = None  # the word the child waits for

    @staticmethod
    def _fork(work: Callable[..., Any], args: tuple, name: str) -> tuple[Any, Connection, Connection] | None:
        """A child that runs `work(word, *args)` once the word comes (None: the parent ended without
        one) and answers with what it returns; (process, receive, release), or None."""
        if "fork" not in multiprocessing.get_all_start_methods():
            return None
        context = multiprocessing.get_context("fork")
        receive, send = context.Pipe(duplex=False)
        wait_for, release = context.Pipe(duplex=False)
        process = context.Process(
            target=_wait_then, args=(work, args, wait_for, send, os.getpid()), name=name
        )
        try:
            process.start()
        except OSError:
            for end in (receive, send, wait_for, release):
                end.close()
            return None
        send.close()  # the child's ends: EOF here if the child dies without answering
        wait_for.close()
        return process, receive, release

    def _release(self, word: Any) -> None:
        """The child's word, once; later words are not sent."""
        if self.release is not None:
            with contextlib.suppress(OSError):  # the child is gone already: its answer says so
                self.release.send(word)
            self.release.close()
            self.release = None

    def _answer(self) -> tuple[bool, Any, int | None]:
        """Wait for the child: whether it answered, its answer, and its exit code."""
        answered, answer, code = False, None, None
        if self.receive is not None:
            with contextlib.suppress(EOFError):  # the child died without a word
                answer, answered = self.receive.recv(), True
            self.receive.close()
            self.receive = None
        if self.process is not None:
            self.process.join()
            code = self.process.exitcode
            self.process = None
        return answered, answer, code


def _wait_then(
    work: Callable[..., Any], args: tuple, wait_for: Connection, send: Connection, parent: int
) -> None:
    end_with_parent(parent)  # a report killed outright: this process goes with it, not waits for good
    try:
        word = wait_for.recv()
    except EOFError:  # the parent ended without a word
        word = None
    send.send(work(word, *args))
    send.close()
