"""Work done in a forked child process while this one goes on: the report's second core.

A report spends most of its time after the logs are parsed on one core (the verdicts, the history,
the outputs) while the parse itself used every core. Parts that need nothing the other parts make
(results.json's rows need only the parsed logs; index.html and report.md only the finished report)
run in a child forked from this process: it sees the same objects without copying or pickling
them, and writes its files itself. Where fork does not exist the work runs in this process.

The child writes nothing to stdout or stderr: a failure comes back through a pipe as one line and
is raised here as OSError by `wait`, so the report fails as it would have had it done the work.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
from collections.abc import Callable

_MESSAGE_BYTES = 2000


class Alongside:
    """`work()` run in a forked child (or at once, where fork does not exist); `wait()` joins it."""

    def __init__(self, work: Callable[[], None]) -> None:
        self._pid: int | None = None
        self._read: int | None = None
        self._error: BaseException | None = None
        if not hasattr(os, "fork"):
            self._run_here(work)
            return
        sys.stdout.flush()
        sys.stderr.flush()
        read, write = os.pipe()
        # Objects moved out of the collector's reach: a collection in the child would otherwise
        # write to every object's header and so copy most of the parent's memory.
        gc.freeze()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(read)
            _child(work, write)
        gc.unfreeze()
        os.close(write)
        self._pid, self._read = pid, read

    def _run_here(self, work: Callable[[], None]) -> None:
        try:
            work()
        except Exception as exc:  # raised by wait(), as the forked child's would be
            self._error = exc

    def wait(self) -> None:
        """Block until the work is done; OSError with the child's message if it failed."""
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if self._pid is None or self._read is None:
            return
        with os.fdopen(self._read, "rb") as pipe:
            message = pipe.read(_MESSAGE_BYTES).decode("utf-8", "replace")
        _, status = os.waitpid(self._pid, 0)
        self._pid = self._read = None
        if os.waitstatus_to_exitcode(status) != 0:
            raise OSError(message or f"a report writer stopped ({_status_text(status)})")

    def cancel(self) -> None:
        """Stop the child if it still runs (this process failed and will not use its work)."""
        if self._pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._pid, signal.SIGTERM)
        os.waitpid(self._pid, 0)
        if self._read is not None:
            os.close(self._read)
        self._pid = self._read = None


def _child(work: Callable[[], None], write: int) -> None:
    code = 0
    # Stopped by `cancel`: the files it was writing are removed on the way out (atomic_writer).
    signal.signal(signal.SIGTERM, _stop)
    try:
        work()
    except BaseException as exc:  # every failure goes back to the parent as one line
        said = (exc.strerror if isinstance(exc, OSError) else None) or str(exc) or type(exc).__name__
        os.write(write, said.encode("utf-8", "replace")[:_MESSAGE_BYTES])
        code = 1
    finally:
        os.close(write)
        # os._exit: no atexit handlers, no flush of buffers the parent also holds.
        os._exit(code)


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(f"stopped by signal {signum}")


def _status_text(status: int) -> str:
    code = os.waitstatus_to_exitcode(status)
    return f"signal {-code}" if code < 0 else f"exit {code}"
