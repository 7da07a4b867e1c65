"""Exit codes of every `collbench` command: what a nightly job or a CI step branches on."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    # Everything ran and every host passed (for `parse`: every file was read).
    OK = 0
    # The command worked, and what it judged failed: some host or link is below its threshold,
    # or a benchmark reported wrong results. This is the code that should page someone.
    FAILED = 1
    # The command could not do its job: bad usage, a missing, unreadable or unrecognised file,
    # an unexpected internal error. Same code as argparse uses for usage errors.
    BAD_INPUT = 2
    # Nothing failed, but there are warnings (a noisy log, a skipped check). Only returned when
    # the user opts in with `--strict`; without it, warnings exit with OK.
    WARNINGS = 3


# What a bounded launch answers when it ran past its time: the launch wrapper's own code after its
# timeout (124, as coreutils `timeout`), and a command killed with SIGKILL as a shell (128 + 9) or
# Python's subprocess (-9) reports it. A launch or a Slurm job step ending so is a timeout.
LAUNCH_TIMEOUT_RCS = (124, 128 + 9, -9)
