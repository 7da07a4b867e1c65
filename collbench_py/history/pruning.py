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

import os
from dataclasses import dataclass

from collbench_py.child_processes import ReadyChild
from collbench_py.history.retention import Pruned, Retention, prune
from collbench_py.history.store import HistoryError, open_store


@dataclass
class Pruning(ReadyChild):
    """A pruning under way (a child process), done (`outcome`), or not needed."""

    outcome: Pruned | str | None = None  # what was pruned, or what went wrong

    @classmethod
    def ready(cls, url: str | os.PathLike[str], retention: Retention) -> Pruning:
        """A child forked now that prunes `url` once `go()` is called, or ends at `stop()`; none
        where fork is not available or no process is to spare (then `go` prunes nothing)."""
        forked = cls._fork(_prune_if_told, (str(url), retention), "collbench-prune")
        return cls() if forked is None else cls(*forked)

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
        if self.process is not None:
            answered, answer, code = self._answer()
            # the child died before it answered (killed, out of memory)
            self.outcome = (
                answer if answered else f"the pruning process ended with code {code} before it was done"
            )
        return self.outcome if isinstance(self.outcome, str) else None


def _prune(url: str, retention: Retention) -> Pruned | str:
    try:
        with open_store(url) as store:
            return prune(store, retention)
    except HistoryError as exc:
        return str(exc)


def _prune_if_told(start: bool | None, url: str, retention: Retention) -> Pruned | str | None:
    try:
        return _prune(url, retention) if start else None
    except BaseException as exc:  # whatever it is, the parent says it once
        return f"the pruning failed: {exc}"
