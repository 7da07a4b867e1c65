"""The retention policy applied beside the report: a child process prunes while the report is written.

At 4,000 hosts the night that leaves the raw window takes seconds to summarise (docs/performance.md);
the report does not need it (its findings and the night's rows are committed before), so
`collbench report` starts it here and waits for it only before it exits. The child is forked: it
starts at once, with the code already loaded, and opens the database on its own connection (SQLite
in WAL mode: one writer at a time, readers never blocked).

`collbench report` forks it before it loads the run (`Pruning.ready`) and lets it go once the night
is stored (`go`): a fork of a process holding a parsed fleet shares all its pages, and each page the
report then writes while the child lives is copied (4,000 hosts: the report's memory past 1 GB).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from collbench_py.child_processes import end_with_parent
from collbench_py.history.retention import Pruned, Retention, prune
from collbench_py.history.store import HistoryError, open_store


@dataclass
class Pruning:
    """A pruning under way (a child process), done (`outcome`), or not needed."""

    process: Any = None  # multiprocessing.Process of the fork context
    receive: Connection | None = None
    outcome: Pruned | str | None = None  # what was pruned, or what went wrong
    release: Connection | None = None  # a ready child's word to start (True) or not (False)

    @classmethod
    def ready(cls, url: str | os.PathLike[str], retention: Retention) -> Pruning:
        """A child forked now that prunes `url` once `go()` is called, or ends at `stop()`; none
        where fork is not available or no process is to spare (then `go` prunes nothing)."""
        if "fork" not in multiprocessing.get_all_start_methods():
            return cls()
        context = multiprocessing.get_context("fork")
        receive, send = context.Pipe(duplex=False)
        wait_for, release = context.Pipe(duplex=False)
        process = context.Process(
            target=_ready_child,
            args=(str(url), retention, wait_for, send, os.getpid()),
            name="collbench-prune",
        )
        try:
            process.start()
        except OSError:
            for end in (receive, send, wait_for, release):
                end.close()
            return cls()
        send.close()  # the child's end: EOF here if the child dies without answering
        wait_for.close()
        return cls(process, receive, release=release)

    @property
    def is_ready(self) -> bool:
        return self.release is not None

    def go(self) -> Pruning:
        """The night is stored: the ready child prunes now."""
        self._release(True)
        return self

    def stop(self) -> None:
        """Nothing to prune after all (the history was not used, the report failed)."""
        self._release(False)

    def _release(self, start: bool) -> None:
        if self.release is not None:
            with contextlib.suppress(OSError):  # the child is gone already: `wait` says how it ended
                self.release.send(start)
            self.release.close()
            self.release = None

    @classmethod
    def start(cls, url: str | os.PathLike[str], retention: Retention, *, beside: bool = True) -> Pruning:
        """Prune `url` with `retention`: in a child process when `beside` (and fork works), else here."""
        child = cls.ready(url, retention) if beside else cls()
        if child.is_ready:
            return child.go()
        return cls(outcome=_prune(str(url), retention))  # no process to spare: here, as before

    def wait(self) -> str | None:
        """Wait for the child; None when the pruning was done (or never let go), else what went
        wrong, said once."""
        self.stop()  # a ready child never let go ends without pruning
        if self.process is not None and self.receive is not None:
            try:
                self.outcome = self.receive.recv()
            except EOFError:  # the child died before it answered (killed, out of memory)
                self.process.join()
                code = self.process.exitcode
                self.outcome = f"the pruning process ended with code {code} before it was done"
            finally:
                self.receive.close()
                self.process.join()
                self.process = self.receive = None
        return self.outcome if isinstance(self.outcome, str) else None


def _prune(url: str, retention: Retention) -> Pruned | str:
    try:
        with open_store(url) as store:
            return prune(store, retention)
    except HistoryError as exc:
        return str(exc)


def _ready_child(url: str, retention: Retention, wait_for: Connection, send: Connection, parent: int) -> None:
    end_with_parent(parent)  # a report killed outright: this process goes with it, not waits for good
    try:
        start = wait_for.recv()
    except EOFError:  # the report ended without a word
        start = False
    try:
        send.send(_prune(url, retention) if start else None)
    except BaseException as exc:  # whatever it is, the parent says it once
        send.send(f"the pruning failed: {exc}")
    finally:
        send.close()
