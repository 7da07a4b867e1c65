"""The fan-out of a round's commands (collbench_py/launch/fanout.py), on real processes.

Each job runs a real command (`sh -c`), as the controller runs the node wrapper over a connection:
the bound on how many run at once, a hung command given up at its deadline while the others end,
a failing call answered with its error, and every answer kept in the jobs' order.
"""

from __future__ import annotations

import resource
import subprocess
import threading
import time

import pytest

from collbench_py.launch.fanout import (
    FILES_PER_COMMAND,
    FILES_RESERVED,
    Job,
    concurrency_within,
    fan_out,
    files_limit_for,
)


class Runner:
    """Runs `sh -c <script>` per job and counts how many ran at once."""

    def __init__(self, scripts: dict[str, str], uncounted: frozenset[str] = frozenset()) -> None:
        self.scripts = scripts
        self.uncounted = uncounted  # jobs left out of the count (one given up, still running)
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0
        self.procs: list[subprocess.Popen] = []

    def __call__(self, job: Job) -> str:
        counted = job.key not in self.uncounted
        with self.lock:
            self.running += counted
            self.most = max(self.most, self.running)
        try:
            proc = subprocess.Popen(["sh", "-c", self.scripts[job.key]], stdout=subprocess.PIPE, text=True)
            self.procs.append(proc)
            out, _ = proc.communicate()
            if proc.returncode == 255:
                raise ConnectionError(f"{job.key}: unreachable")
            return out.strip()
        finally:
            with self.lock:
                self.running -= counted

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()


def test_at_most_concurrency_run_at_once_and_every_answer_comes_in_order() -> None:
    scripts = {f"j{i}": f"sleep 0.3; echo {i}" for i in range(7)}
    runner = Runner(scripts)
    answers = fan_out([Job(key, 30) for key in scripts], runner, concurrency=3, poll_s=0.05)
    assert [a.value for a in answers] == [str(i) for i in range(7)]
    assert [a.job.key for a in answers] == list(scripts)
    assert runner.most == 3
    assert all(a.error is None and not a.unanswered for a in answers)


def test_jobs_run_together_not_one_after_the_other() -> None:
    scripts = {f"j{i}": "sleep 1" for i in range(6)}
    started = time.monotonic()
    answers = fan_out([Job(key, 30) for key in scripts], Runner(scripts), concurrency=6, poll_s=0.05)
    took = time.monotonic() - started
    assert len(answers) == 6
    assert took < 4, took  # six 1 s commands at once, not 6 s one after the other


def test_a_hung_job_is_given_up_at_its_deadline_and_the_others_end() -> None:
    scripts = {"hung": "sleep 30", "a": "sleep 0.2; echo a", "b": "echo b", "c": "sleep 0.5; echo c"}
    runner = Runner(scripts)
    jobs = [Job("hung", 1.0), Job("a", 10), Job("b", 10), Job("c", 10)]
    seen = []
    started = time.monotonic()
    try:
        answers = fan_out(
            jobs, runner, concurrency=2, on_answer=lambda a: seen.append(a.job.key), poll_s=0.05
        )
    finally:
        runner.kill_all()
    took = time.monotonic() - started
    hung, *rest = answers
    assert hung.unanswered and hung.value is None and 1.0 <= hung.seconds < 3
    assert [a.value for a in rest] == ["a", "b", "c"]
    assert not any(a.unanswered for a in rest)
    # Its slot was freed when it was given up: the round did not wait the 30 s out.
    assert took < 5, took
    assert sorted(seen) == sorted(scripts)


def test_a_failing_call_is_answered_with_its_error_and_the_others_go_on() -> None:
    scripts = {"a": "echo a", "down": "exit 255", "b": "echo b"}
    answers = fan_out([Job(key, 10) for key in scripts], Runner(scripts), concurrency=2, poll_s=0.05)
    by_key = {a.job.key: a for a in answers}
    assert isinstance(by_key["down"].error, ConnectionError)
    assert "unreachable" in str(by_key["down"].error)
    assert by_key["a"].value == "a" and by_key["b"].value == "b"
    assert by_key["a"].error is None


def test_a_late_answer_of_a_given_up_job_frees_no_second_slot() -> None:
    # The given-up job ends (late) while others still wait: had its end freed its slot a second
    # time, three of the others would run at once under a bound of two.
    scripts = {"late": "sleep 1.2", **{f"j{i}": "sleep 0.6" for i in range(8)}}
    runner = Runner(scripts, uncounted=frozenset({"late"}))
    jobs = [Job("late", 0.5), *(Job(f"j{i}", 10) for i in range(8))]
    answers = fan_out(jobs, runner, concurrency=2, poll_s=0.05)
    assert answers[0].unanswered
    assert runner.most == 2
    assert all(a.value == "" for a in answers[1:])


def test_concurrency_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        fan_out([Job("a", 1)], Runner({"a": "true"}), concurrency=0)


def test_the_files_limit_is_raised_for_the_round_within_the_hard_limit() -> None:
    # 1,024 commands want 1,024 x 8 + 64 open files: raised to that under a high hard limit.
    assert files_limit_for(1024, 1024, 524288) == 1024 * FILES_PER_COMMAND + FILES_RESERVED
    # Only as far as the hard limit goes; never lowered; no limit stays none.
    assert files_limit_for(1024, 1024, 4096) == 4096
    assert files_limit_for(4, 65536, 65536) == 65536
    assert files_limit_for(1024, -1, -1) == -1
    assert files_limit_for(1024, 1024, -1) == 1024 * FILES_PER_COMMAND + FILES_RESERVED


def test_the_commands_at_once_fit_the_files_the_controller_may_open() -> None:
    assert concurrency_within(1024, 1024 * FILES_PER_COMMAND + FILES_RESERVED) == 1024
    assert concurrency_within(1024, 4096) == (4096 - FILES_RESERVED) // FILES_PER_COMMAND
    assert concurrency_within(1024, -1) == 1024
    # Never below a torchrun pair's two commands, however low the limit.
    assert concurrency_within(1024, 16) == 2


def test_a_round_runs_under_the_real_limit_of_this_process() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    asked = files_limit_for(4096, soft, hard)
    assert soft <= asked and (hard == resource.RLIM_INFINITY or asked <= hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (asked, hard))  # allowed: at most the hard limit
    try:
        assert concurrency_within(4096, asked) >= min(4096, (soft - FILES_RESERVED) // FILES_PER_COMMAND)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
