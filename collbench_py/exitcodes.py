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
