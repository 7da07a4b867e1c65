"""Mark the run `interrupted` in its manifest when ansible-playbook is stopped by SIGINT or SIGTERM.

After Ctrl-C no task runs, so the playbook cannot say it itself: this callback remembers the run
directory preflight opened (the `collbench_run` fact) and, on the signal and again at exit, rewrites
a manifest still saying `running` (collbench_py.rundir.load.mark_interrupted). Ansible's own handling of
the signal follows unchanged. It sits next to bench.yml and needs no enabling in ansible.cfg.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
from pathlib import Path
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: collbench_interrupt
type: notification
short_description: mark an interrupted collbench run in its manifest
description:
  - On SIGINT or SIGTERM, rewrites the run directory's manifest.json from C(running) to
    C(interrupted), with C(finished_at), so that reports and schedulers can tell an interrupted
    run from a complete one.
"""

# From a checkout the package sits next to this directory; an installed one is found anyway.
_REPO = str(Path(__file__).resolve().parent.parent)
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "notification"
    CALLBACK_NAME = "collbench_interrupt"
    CALLBACK_NEEDS_ENABLED = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.run_dir: str | None = None
        self.interrupted = False
        self.marked = False
        self.failure: str | None = None
        self._previous: dict[int, Any] = {}
        self._mark_interrupted: Any = None

    def v2_playbook_on_start(self, playbook: Any) -> None:
        # Ansible's handlers (which stop the workers) are in place by now: ours run first, then theirs.
        if self._previous:
            return
        try:
            if _REPO not in sys.path:
                sys.path.append(_REPO)
            from collbench_py.rundir.load import mark_interrupted  # noqa: PLC0415 - not at plugin load

            self._mark_interrupted = mark_interrupted
        except ImportError as exc:
            self._display.warning(f"collbench: an interrupted run will not be marked ({exc})")
            return
        for signum in _SIGNALS:
            self._previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._on_signal)
        atexit.register(self._at_exit)

    def v2_runner_on_ok(self, result: Any) -> None:
        if self.run_dir is not None:
            return
        task = getattr(result, "task", None) or getattr(result, "_task", None)
        if getattr(task, "action", "") not in ("set_fact", "ansible.builtin.set_fact"):
            return
        data = getattr(result, "result", None) or getattr(result, "_result", {})
        run = (data.get("ansible_facts") or {}).get("collbench_run")
        if isinstance(run, dict) and isinstance(run.get("run_dir"), str):
            self.run_dir = run["run_dir"]

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.interrupted = True
        self._mark()
        previous = self._previous.get(signum)
        if callable(previous):
            previous(signum, frame)
            return
        if previous != signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def _at_exit(self) -> None:
        # Again at exit: a worker stopped mid-write may have put `running` back. Only here is it
        # safe to print (a signal may arrive while the display holds its lock).
        if not self.interrupted or self.run_dir is None:
            return
        self._mark()
        if self.failure:
            self._display.warning(f"collbench: could not mark {self.run_dir} interrupted: {self.failure}")
        elif self.marked:
            self._display.display(f"collbench: run {self.run_dir} marked interrupted", stderr=True)

    def _mark(self) -> None:
        if self.run_dir is None or self._mark_interrupted is None:
            return
        try:
            self.marked = self._mark_interrupted(self.run_dir) or self.marked
            self.failure = None
        except Exception as exc:  # never in the way of Ansible's own stop
            self.failure = str(exc) or type(exc).__name__
