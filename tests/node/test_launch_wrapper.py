"""collbench_py/node/launch_wrapper.py with real processes: the bound, the cleanup, the exit codes,
the output and the GPU link sampling.

Each case runs the wrapper as the caller (Ansible's command module) does: its stdout and stderr are
pipes read to their end. A process of the launch left holding them would hang the case, which is
why every run has a limit. Timing checks are generous bounds: the machine is shared and loaded.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from collbench_py.node import launch_wrapper

WRAPPER = Path(__file__).resolve().parents[2] / "collbench_py" / "node" / "launch_wrapper.py"
PY = sys.executable
STATUS = re.compile(
    r"^collbench-launch: status=(?P<status>\w+) rc=(?P<rc>-?\d+) started=(?P<started>\S+Z) "
    r"ended=(?P<ended>\S+Z) killed=(?P<killed>\d+)$"
)
# What a run may take beyond its timeout and kill-after: python start-up on a loaded machine.
SLACK_S = 6.0

# A process that names its argument in its command line, says its pid, ignores TERM, and waits.
# One write per line: two ranks share the pipe, and print's pieces can interleave.
STUBBORN = (
    "import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "os.write(1, b'stubborn %d\\n' % os.getpid()); time.sleep(120)"
)


@dataclass(frozen=True)
class Launched:
    rc: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def status(self) -> dict[str, str]:
        last = self.stderr.rstrip("\n").splitlines()[-1]
        match = STATUS.match(last)
        assert match, f"no status line last on stderr: {self.stderr!r}"
        return match.groupdict()

    def pids(self, word: str) -> list[int]:
        return [int(pid) for pid in re.findall(rf"^{word} (\d+)$", self.stdout, re.M)]


@pytest.fixture
def launch_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "runs" / "node1" / "pair-a--b"
    directory.mkdir(parents=True)
    return directory


@pytest.fixture
def private_tmp(tmp_path: Path) -> Path:
    directory = tmp_path / "tmp"
    directory.mkdir()
    return directory


def wrapper_argv(
    command: list[str], match: Path, timeout_s: float = 30, kill_after_s: float = 1, extra: tuple = ()
) -> list[str]:
    options = ["--timeout-s", str(timeout_s), "--kill-after-s", str(kill_after_s), "--match", str(match)]
    return [PY, str(WRAPPER), *options, *extra, "--", *command]


def run_wrapper(argv: list[str], *, env: dict[str, str] | None = None, limit: float = 90) -> Launched:
    started = time.monotonic()
    done = subprocess.run(
        argv,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=limit,
        env={**os.environ, **(env or {})},
        check=False,
    )
    return Launched(done.returncode, done.stdout, done.stderr, time.monotonic() - started)


def _state(pid: int) -> str:
    """The process's state letter ("Z": ended, not reaped), or "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return ""


def alive(pid: int) -> bool:
    """Whether `pid` runs (a stopped process does; a zombie does not)."""
    return _state(pid) not in ("", "Z", "X")


def wait_dead(pid: int, seconds: float = 5) -> bool:
    """Gone within `seconds` (reaped by whoever adopted it)."""
    deadline = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def utc(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


@pytest.fixture
def bystanders() -> Iterator[list[subprocess.Popen]]:
    """Processes a test starts outside the wrapper; killed at the end whatever happened."""
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


# ---------------------------------------------------------------- a launch that ends by itself


def test_output_and_exit_code_pass_through(launch_dir: Path, private_tmp: Path) -> None:
    command = ["sh", "-c", "echo out-line; echo err-line >&2; exit 3"]
    done = run_wrapper(wrapper_argv(command, launch_dir), env={"TMPDIR": str(private_tmp)})
    assert done.rc == 3
    assert done.stdout == "out-line\n"
    assert done.stderr.splitlines()[0] == "err-line"
    status = done.status
    assert status["status"] == "failed" and status["rc"] == "3" and status["killed"] == "0"
    # The output files lived in the temporary directory and are gone.
    assert not list(private_tmp.iterdir())


def test_a_clean_launch_is_ok_with_its_true_times(launch_dir: Path) -> None:
    before = time.time()
    done = run_wrapper(wrapper_argv([PY, "-c", "import time; time.sleep(1.5)"], launch_dir))
    after = time.time()
    assert done.rc == 0
    status = done.status
    assert status["status"] == "ok"
    started, ended = utc(status["started"]), utc(status["ended"])
    assert before <= started <= ended <= after
    assert 1.4 <= ended - started <= done.seconds


def test_death_by_signal_is_128_plus_the_signal(launch_dir: Path) -> None:
    done = run_wrapper(wrapper_argv(["sh", "-c", "kill -KILL $$"], launch_dir))
    assert done.rc == 128 + signal.SIGKILL
    assert done.status["status"] == "failed"


def test_the_launch_runs_with_umask_077(launch_dir: Path) -> None:
    made = launch_dir / "made.log"
    done = run_wrapper(wrapper_argv(["sh", "-c", f"umask; : > {made}"], launch_dir))
    assert done.stdout.strip() == "0077"
    assert stat.S_IMODE(made.stat().st_mode) == 0o600


def test_a_leftover_in_a_session_of_its_own_is_ended_and_holds_no_pipe(
    launch_dir: Path,
) -> None:
    """torchrun's workers: setsid, stdout inherited. The child ends at once; what it left would hold
    the caller's pipes for two minutes if it held them at all."""
    command = ["sh", "-c", f'setsid {PY} -c "{STUBBORN}" {launch_dir}/worker & sleep 1; exit 0']
    done = run_wrapper(wrapper_argv(command, launch_dir, kill_after_s=1), limit=60)
    assert done.rc == 0
    assert done.seconds < 1 + 1 + SLACK_S
    (pid,) = done.pids("stubborn")
    assert wait_dead(pid)
    assert done.status["status"] == "ok"
    assert done.status["killed"] == "1"


@pytest.mark.parametrize(
    ("command", "timeout_s"), [(["true"], 30), (["sleep", "60"], 1)], ids=["ended", "timed-out"]
)
def test_the_child_is_reaped_only_after_its_group_is_signalled(
    launch_dir: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], timeout_s: int
) -> None:
    """Its pid is its process group's id, which the cleanup signals: reaped before, that pid could
    be another process's by then, and the cleanup would signal that one."""
    seen: list[tuple[int, str]] = []
    signal_launch = launch_wrapper.Launch.signal

    def signalled(launch: launch_wrapper.Launch, signum: int) -> None:
        seen.append((launch.leader, _state(launch.leader)))
        signal_launch(launch, signum)

    monkeypatch.setattr(launch_wrapper.Launch, "signal", signalled)
    bound = launch_wrapper.Bound(timeout_s, 1, str(launch_dir), "")
    ran = launch_wrapper.bounded_run(command, bound, SimpleNamespace(received=None))
    assert ran.status == ("ok" if timeout_s == 30 else "timeout")
    leader, state = seen[0]
    # Ended by itself: a zombie when its group is signalled; timed out: still running then.
    assert state == ("Z" if timeout_s == 30 else "S"), seen
    assert _state(leader) == ""  # and reaped once the cleanup is done


# ---------------------------------------------------------------- the bound


def test_a_child_that_ignores_term_is_killed_at_the_bound(launch_dir: Path) -> None:
    """The partial output of a killed launch is kept, and the status says timeout with exit 124."""
    done = run_wrapper(wrapper_argv([PY, "-c", STUBBORN, str(launch_dir)], launch_dir, 2, 2))
    assert done.rc == 124
    (pid,) = done.pids("stubborn")
    assert not alive(pid)
    status = done.status
    assert status["status"] == "timeout" and status["rc"] == "124" and status["killed"] == "1"
    took = utc(status["ended"]) - utc(status["started"])
    # TERM at 2 s is ignored; KILL 2 s later.
    assert 3.8 <= took <= 4 + SLACK_S, took
    assert done.seconds <= 4 + SLACK_S


def test_a_term_that_works_ends_the_launch_without_waiting_for_kill_after(launch_dir: Path) -> None:
    done = run_wrapper(wrapper_argv(["sleep", "60"], launch_dir, timeout_s=1, kill_after_s=30))
    assert done.rc == 124
    assert done.seconds < 1 + SLACK_S  # far below the 30 s of kill-after
    assert done.status["status"] == "timeout"


def test_setsid_grandchild_holding_the_pipe_and_a_stopped_rank_are_killed(launch_dir: Path) -> None:
    """The torchrun shape: the child waits on workers in sessions of their own, one of them frozen
    (SIGSTOP: it dies of SIGKILL only), one ignoring TERM, both holding the child's stdout."""
    frozen = (
        "import os, signal; os.write(1, b'frozen %d\\n' % os.getpid()); os.kill(os.getpid(), signal.SIGSTOP)"
    )
    command = [
        "sh",
        "-c",
        f'setsid {PY} -c "{STUBBORN}" {launch_dir}/rank0 & '
        f'setsid {PY} -c "{frozen}" {launch_dir}/rank1 & wait',
    ]
    done = run_wrapper(wrapper_argv(command, launch_dir, timeout_s=3, kill_after_s=2), limit=60)
    assert done.rc == 124, done.stderr
    assert done.seconds <= 3 + 2 + SLACK_S
    pids = done.pids("stubborn") + done.pids("frozen")
    assert len(pids) == 2, done.stdout
    for pid in pids:
        assert wait_dead(pid), pid
    # sh, rank0 and rank1.
    assert done.status["killed"] == "3"


def test_a_descendant_that_does_not_name_the_directory_is_ended_too(launch_dir: Path) -> None:
    """A worker in a session of its own whose command line says nothing of the launch: it is the
    child's descendant while the child lives."""
    command = ["sh", "-c", f'setsid {PY} -c "{STUBBORN}" & wait']
    done = run_wrapper(wrapper_argv(command, launch_dir, timeout_s=2, kill_after_s=1), limit=60)
    assert done.rc == 124
    (pid,) = done.pids("stubborn")
    assert wait_dead(pid)


def test_processes_naming_the_directory_are_ended_and_no_others(
    launch_dir: Path, bystanders: list[subprocess.Popen]
) -> None:
    """An mpirun rank started by a daemon (not our descendant) names the launch directory; a process
    of a sibling directory (`pair-a--b-2`) or of the directory's parent does not."""
    rank = subprocess.Popen([PY, "-c", STUBBORN, f"{launch_dir}/all_reduce_perf"], stdout=subprocess.DEVNULL)
    sibling = subprocess.Popen([PY, "-c", STUBBORN, f"{launch_dir}-2"], stdout=subprocess.DEVNULL)
    parent = subprocess.Popen([PY, "-c", STUBBORN, f"--out={launch_dir.parent}"], stdout=subprocess.DEVNULL)
    bystanders.extend([rank, sibling, parent])
    time.sleep(0.5)
    done = run_wrapper(wrapper_argv(["sleep", "60"], launch_dir, timeout_s=1, kill_after_s=1))
    assert done.rc == 124
    assert rank.wait(timeout=10) == -signal.SIGKILL
    assert sibling.poll() is None
    assert parent.poll() is None
    assert done.status["killed"] == "2"  # sleep and the rank


def test_the_wrapper_and_its_parents_are_spared(launch_dir: Path) -> None:
    """The wrapper's own command line names the directory, and so may its caller's."""
    inner = " ".join(wrapper_argv(["sleep", "60"], launch_dir, timeout_s=1, kill_after_s=1))
    script = f'{inner}; echo "caller rc $?"'
    done = run_wrapper(["sh", "-c", script, f"{launch_dir}/caller"])
    assert done.rc == 0
    assert "caller rc 124" in done.stdout
    assert done.status["status"] == "timeout"


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"]
)
def test_a_signal_to_the_wrapper_ends_the_launch(launch_dir: Path, signum: int, code: int) -> None:
    """Ansible's own backstop (TERM) or a user's Ctrl-C: the launch is cleaned up before the wrapper
    exits, the frozen rank included."""
    marker = launch_dir / "running"
    command = [
        "sh",
        "-c",
        f'setsid {PY} -c "{STUBBORN}" {launch_dir}/rank0 & : > {marker}; wait',
    ]
    wrapper = subprocess.Popen(
        wrapper_argv(command, launch_dir, timeout_s=60, kill_after_s=2),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert time.monotonic() < deadline and wrapper.poll() is None
            time.sleep(0.05)
        time.sleep(0.5)
        signalled = time.monotonic()
        wrapper.send_signal(signum)
        stdout, stderr = wrapper.communicate(timeout=30)
        took = time.monotonic() - signalled
    finally:
        wrapper.kill()
    done = Launched(wrapper.returncode, stdout, stderr, took)
    assert done.rc == code
    assert done.status["status"] == "interrupted"
    assert took <= 2 + SLACK_S  # kill-after, not the 60 s timeout
    (pid,) = done.pids("stubborn")
    assert wait_dead(pid)


# ---------------------------------------------------------------- errors


def test_a_missing_program_is_127_in_one_line(launch_dir: Path) -> None:
    done = run_wrapper(wrapper_argv(["no-such-program-xyz", "-x"], launch_dir))
    assert done.rc == 127
    assert done.stderr == "collbench-launch: no-such-program-xyz: command not found\n"
    assert done.stdout == ""


def test_a_program_that_cannot_run_is_126(launch_dir: Path) -> None:
    script = launch_dir / "not-executable"
    script.write_text("#!/bin/sh\n", encoding="utf-8")
    done = run_wrapper(wrapper_argv([str(script)], launch_dir))
    assert done.rc == 126
    assert done.stderr.startswith("collbench-launch: ") and done.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (["--timeout-s", "10", "--kill-after-s", "1", "--match", "/a/b", "TOUCH"], "after `--`"),
        (["--timeout-s", "10", "--kill-after-s", "1", "--match", "/a/b", "--"], "no command"),
        (["--timeout-s", "ten", "--kill-after-s", "1", "--match", "/a/b", "--", "TOUCH"], "--timeout-s"),
        (["--timeout-s", "0", "--kill-after-s", "1", "--match", "/a/b", "--", "TOUCH"], "above 0"),
        (["--timeout-s", "5", "--kill-after-s", "-1", "--match", "/a/b", "--", "TOUCH"], "--kill-after-s"),
        (["--timeout-s", "5", "--kill-after-s", "1", "--", "TOUCH"], "--match"),
        (["--timeout-s", "5", "--kill-after-s", "1", "--match", "/", "--", "TOUCH"], "--match"),
        (["--timeout-s", "5", "--kill-after-s", "1", "--match", "/tmp/", "--", "TOUCH"], "--match"),
        (["--timeout-s", "5", "--kill-after-s", "1", "--match", "runs/x", "--", "TOUCH"], "--match"),
        (["--timeout-s", "5", "--kill-after-s", "1", "--match", "/a/b", "--bogus", "--", "TOUCH"], "--bogus"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(arguments: list[str], says: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    touch = ["touch", str(marker)]  # would show that the command ran
    argv = [part for argument in arguments for part in (touch if argument == "TOUCH" else [argument])]
    done = run_wrapper([PY, str(WRAPPER), *argv])
    assert done.rc == 2, done.stderr
    assert done.stderr.startswith("collbench-launch: ") and done.stderr.count("\n") == 1, done.stderr
    assert says in done.stderr
    assert "Traceback" not in done.stderr
    assert not marker.exists()


# ---------------------------------------------------------------- PCIe links under load

# Real output of the query, 2 GPUs: idle at first (the link drops to gen 1 and, on some boards, to a
# narrower width), at gen 5 x16 under load, idle again after.
IDLE = "00000000:18:00.0, 1, 5, 8, 16\n00000000:2A:00.0, 1, 5, 16, 16\n"
LOADED = "00000000:18:00.0, 5, 5, 16, 16\n00000000:2A:00.0, 4, 5, 16, 16\n"
NVIDIA_SMI = """#!/bin/sh
calls={calls}
echo "$@" >> "$calls"
n=$(wc -l < "$calls")
{hang}
if [ "$n" -eq 2 ]; then printf '%s' '{loaded}'; else printf '%s' '{idle}'; fi
"""


def stand_in_nvidia_smi(tmp_path: Path, *, hang: bool = False) -> tuple[dict[str, str], Path]:
    """PATH with an `nvidia-smi` that answers the link query (gen 5 on its second call only) and
    logs each call; the log's path."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    script = bin_dir / "nvidia-smi"
    script.write_text(
        NVIDIA_SMI.format(calls=calls, hang="exec sleep 300" if hang else "", loaded=LOADED, idle=IDLE),
        encoding="utf-8",
    )
    script.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}, calls


def child_until_calls(calls: Path, count: int, cap_s: float = 40) -> list[str]:
    """A child that runs until nvidia-smi was called `count` times (or `cap_s` passed)."""
    code = (
        "import os, time\n"
        f"end = time.monotonic() + {cap_s}\n"
        f"while time.monotonic() < end and (not os.path.exists({str(calls)!r}) or "
        f"len(open({str(calls)!r}).read().splitlines()) < {count}):\n"
        "    time.sleep(0.1)\n"
    )
    return [PY, "-c", code]


def test_gpu_links_keep_the_highest_generation_seen(launch_dir: Path, tmp_path: Path) -> None:
    env, calls = stand_in_nvidia_smi(tmp_path)
    csv = tmp_path / "links.csv"
    argv = wrapper_argv(child_until_calls(calls, 3), launch_dir, extra=("--gpu-link-csv", str(csv)))
    done = run_wrapper(argv, env=env)
    assert done.rc == 0, done.stderr
    assert csv.read_text(encoding="utf-8") == LOADED  # gen 5 (and x16) kept, not the idle gen 1
    assert stat.S_IMODE(csv.stat().st_mode) == 0o600
    queries = calls.read_text(encoding="utf-8").splitlines()
    assert queries[0] == (
        "--query-gpu=pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,"
        "pcie.link.width.max --format=csv,noheader,nounits"
    )
    # One sample every 2 s, the first at 2 s: three samples take 6 s at least.
    took = utc(done.status["ended"]) - utc(done.status["started"])
    assert took >= 5.8, took


def test_no_gpu_link_file_without_a_sample(launch_dir: Path, tmp_path: Path) -> None:
    env, calls = stand_in_nvidia_smi(tmp_path)
    csv = tmp_path / "links.csv"
    argv = wrapper_argv(["true"], launch_dir, extra=("--gpu-link-csv", str(csv)))
    done = run_wrapper(argv, env=env)
    assert done.rc == 0
    assert not calls.exists()  # ended before the first sample at 2 s
    assert not csv.exists()


def test_a_hanging_nvidia_smi_neither_delays_nor_writes(launch_dir: Path, tmp_path: Path) -> None:
    env, calls = stand_in_nvidia_smi(tmp_path, hang=True)
    csv = tmp_path / "links.csv"
    argv = wrapper_argv(child_until_calls(calls, 1), launch_dir, extra=("--gpu-link-csv", str(csv)))
    done = run_wrapper(argv, env=env, limit=60)
    assert done.rc == 0
    assert not csv.exists()
    # The child ends once the first (hanging) sample started; the wrapper does not wait for it.
    assert done.seconds < 2 + SLACK_S
