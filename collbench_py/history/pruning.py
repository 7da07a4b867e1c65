"""The retention policy applied beside the report: a child process prunes while the report is written.

At 4,000 hosts the night that leaves the raw window takes seconds to summarise (docs/performance.md);
the report does not need it (its findings and the night's rows are committed before), so
`collbench report` starts it here and waits for it only before it exits. The child is forked: it
starts at once, with the code already loaded, and opens the database on its own connection (SQLite
in WAL mode: one writer at a time, readers never blocked).
"""

from __future__ import annotations

import multiprocessing
import os
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from collbench_py.history.retention import Pruned, Retention, prune
from collbench_py.history.store import HistoryError, open_store


@dataclass
class Pruning:
    """A pruning under way (a child process), done (`outcome`), or not needed."""

    process: Any = None  # multiprocessing.Process of the fork context
    receive: Connection | None = None
    outcome: Pruned | str | None = None  # what was pruned, or what went wrong

    @classmethod
    def start(cls, url: str | os.PathLike[str], retention: Retention, *, beside: bool = True) -> Pruning:
        """Prune `url` with `retention`: in a child process when `beside` (and fork works), else here."""
        if beside and "fork" in multiprocessing.get_all_start_methods():
            context = multiprocessing.get_context("fork")
            receive, send = context.Pipe(duplex=False)
            process = context.Process(target=_child, args=(str(url), retention, send), name="collbench-prune")
            try:
                process.start()
            except OSError:  # no process to spare: prune here, as before
                receive.close()
                send.close()
            else:
                send.close()  # the child's end: EOF here if the child dies without answering
                return cls(process, receive)
        return cls(outcome=_prune(str(url), retention))

    def wait(self) -> str | None:
        """Wait for the child; None when the pruning was done, else what went wrong, said once."""
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


def _child(url: str, retention: Retention, send: Connection) -> None:
    try:
        send.send(_prune(url, retention))
    except BaseException as exc:  # whatever it is, the parent says it once
        send.send(f"the pruning failed: {exc}")
    finally:
        send.close()
