"""A round's commands started from one place, at once, each under its own bound.

A round of pairs is many small launches on disjoint hosts. Started by one controller task
(action_plugins/collbench_round.py) instead of one task per host of the play, a round costs the
controller what its launches cost: one command per host that runs one (the node wrapper, with its
plan on stdin), no module and no Ansible worker per host.

`fan_out` runs the jobs on daemon threads, at most `concurrency` at once, in the order given. Each
job has its own deadline, counted from its start: a job that has not answered by then is given up
(`Answer.unanswered`), the round goes on, and its thread is left to end with its ssh (which the
connection's keep-alive ends on a dead node). A job whose call raises (the host could not be
reached) answers with the error (`Answer.error`): the caller decides (that host leaves the run, the
others do not).
The caller's `execute` does the work: on the real controller it runs the command over the host's
Ansible connection.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# Open files the controller's process holds per command in flight: the ssh client's three pipes,
# the selector, a file being fetched, with room to spare.
FILES_PER_COMMAND = 8
FILES_RESERVED = 64  # what the process holds besides (its own pipes, the plugin files)


def files_limit_for(concurrency: int, soft: int, hard: int) -> int:
    """The soft limit on open files the round asks for: enough for `concurrency` commands, never
    above the hard limit (-1: none), never below what it is."""
    wanted = concurrency * FILES_PER_COMMAND + FILES_RESERVED
    if soft < 0 or wanted <= soft:
        return soft
    return wanted if hard < 0 else max(soft, min(hard, wanted))


def concurrency_within(concurrency: int, files: int) -> int:
    """How many commands can run at once under a limit of `files` open files (-1: none); at least 2,
    a torchrun pair's two commands."""
    if files < 0:
        return concurrency
    return max(2, min(concurrency, (files - FILES_RESERVED) // FILES_PER_COMMAND))


@dataclass(frozen=True)
class Job:
    key: Any  # whatever the caller tells its answers apart by
    deadline_s: float  # how long the job may run before it is given up


@dataclass(frozen=True)
class Answer:
    job: Job
    value: Any = None  # what `execute` returned
    error: BaseException | None = None  # what `execute` raised (the host could not be reached...)
    unanswered: bool = False  # no answer within the job's deadline
    seconds: float = 0.0


class _Slot:
    """One job's state, written by its thread, read by the round once it is done or given up."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.given_up = False
        self.started = 0.0
        self.value: Any = None
        self.error: BaseException | None = None


def fan_out(
    jobs: Sequence[Job],
    execute: Callable[[Job], Any],
    *,
    concurrency: int,
    on_answer: Callable[[Answer], None] | None = None,
    poll_s: float = 0.2,
) -> list[Answer]:
    """Every job's answer, in the jobs' order. `on_answer` is called as each one ends (progress)."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, not {concurrency}")
    slots = [_Slot(job) for job in jobs]
    free = threading.Semaphore(concurrency)
    answers: dict[int, Answer] = {}

    def work(slot: _Slot) -> None:
        value, error = None, None
        try:
            value = execute(slot.job)
        except Exception as exc:  # answered, never raised: the other jobs go on
            error = exc
        with slot.lock:
            if slot.given_up:  # its slot was freed when it was given up
                return
            slot.value, slot.error = value, error
            slot.done.set()
        free.release()

    def collect(pending: list[int]) -> list[int]:
        """The jobs still running; those that ended or ran past their deadline are answered."""
        still = []
        for index in pending:
            slot = slots[index]
            took = time.monotonic() - slot.started
            with slot.lock:
                if slot.done.is_set():
                    answer = Answer(slot.job, value=slot.value, error=slot.error, seconds=took)
                elif took > slot.job.deadline_s:
                    # Its thread may run on (a dead host's ssh): the round goes on without it.
                    slot.given_up = True
                    free.release()
                    answer = Answer(slot.job, unanswered=True, seconds=took)
                else:
                    still.append(index)
                    continue
            answers[index] = answer
            if on_answer is not None:
                on_answer(answer)
        return still

    pending: list[int] = []
    for index, slot in enumerate(slots):
        # Wait for a free slot, meanwhile answering what ended and giving up what ran too long.
        while not free.acquire(timeout=poll_s):
            pending = collect(pending)
        slot.started = time.monotonic()
        threading.Thread(target=work, args=(slot,), daemon=True, name=f"fan-out {index}").start()
        pending.append(index)
    while pending:
        pending = collect(pending)
        if pending:
            slots[pending[0]].done.wait(poll_s)
    return [answers[index] for index in range(len(slots))]
