"""A report killed outright (a time limit's SIGKILL, the out-of-memory killer) leaves no process of
its own behind: the parse workers, the figures' helper and the pruning process each end with it.
Each is started here by the package's own code in a separate Python process, which is then killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.rundir_factory import RunSpec, build_run_dir

ROOT = Path(__file__).resolve().parents[1]

PARSE = """
    import functools, os, sys, time
    from collbench_py.rundir.load import load_run_dir_with

    def mark(folder, log):  # runs in the parse worker that parsed `log`
        open(os.path.join(folder, str(os.getpid())), "w").close()
        time.sleep(300)

    load_run_dir_with(sys.argv[1], functools.partial(mark, sys.argv[2]), workers=2)
"""

HELPER = """
    import os, time
    from collbench_py.report import plots

    with plots.drawn_beside():
        print(plots._HELPER[-1].submit(os.getpid).result(), flush=True)
        time.sleep(300)
"""

# The report's later children (its parse workers) inherit the pipe that lets the pruning go: a
# pruning process never hears its parent end from that pipe while one of them lives. Here a sleep.
PRUNING = """
    import subprocess, sys, time
    from collbench_py.history.pruning import Pruning
    from collbench_py.history.retention import Retention

    pruning = Pruning.ready(sys.argv[1], Retention())
    later = subprocess.Popen(["sleep", "300"], pass_fds=[pruning.release.fileno()])
    print(pruning.process.pid, later.pid, flush=True)
    time.sleep(300)
"""


_STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _nothing_left_behind() -> Iterator[None]:
    """A test that fails before it kills its process kills it here, children first."""
    yield
    while _STARTED:
        parent = _STARTED.pop()
        if parent.poll() is None:
            for pid in _children(parent.pid):
                os.kill(pid, signal.SIGKILL)
            parent.kill()
            parent.wait()


def _start(script: str, *args: str) -> subprocess.Popen[str]:
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    _STARTED.append(parent)
    return parent


def _alive(pid: int) -> bool:
    """Running, not a zombie that a container's init may never reap."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def _children(pid: int) -> list[int]:
    return [
        int(child)
        for task in Path(f"/proc/{pid}/task").iterdir()
        for child in (task / "children").read_text().split()
    ]


def _killed_then_gone(parent: subprocess.Popen[str], children: list[int]) -> list[int]:
    """Kill `parent` outright; the children still alive 10 s later."""
    assert children and all(map(_alive, children))
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(map(_alive, children)):
        time.sleep(0.1)
    left = [pid for pid in children if _alive(pid)]
    for pid in left:  # not left behind by the test either
        os.kill(pid, signal.SIGKILL)
    return left


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")


def test_parse_workers_end_with_the_report(tmp_path: Path) -> None:
    run = build_run_dir(tmp_path / "run", RunSpec(hosts=[f"node{i}" for i in range(4)]))
    marks = tmp_path / "marks"
    marks.mkdir()
    parent = _start(PARSE, str(run), str(marks))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(marks.iterdir()):
        time.sleep(0.1)
    parsing = [int(p.name) for p in marks.iterdir()]
    workers = _children(parent.pid)
    assert parsing, "a parse worker was parsing"
    assert set(parsing) <= set(workers)
    assert _killed_then_gone(parent, workers) == []


def test_the_figures_helper_ends_with_the_report() -> None:
    parent = _start(HELPER)
    assert parent.stdout is not None
    helper = int(parent.stdout.readline())
    assert helper != parent.pid
    assert _killed_then_gone(parent, [helper]) == []


def test_the_pruning_process_ends_with_the_report(tmp_path: Path) -> None:
    parent = _start(PRUNING, str(tmp_path / "history.sqlite"))
    assert parent.stdout is not None
    pruning, later = map(int, parent.stdout.readline().split())
    try:
        assert _killed_then_gone(parent, [pruning]) == []
    finally:
        os.kill(later, signal.SIGKILL)
