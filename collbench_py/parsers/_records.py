"""Shared helpers of the node-check parsers (perftest, NVLink, IB ports, dcgmi diag).

Their records are frozen dataclasses that also say how they print: `CSV_FIELDS` and
`csv_rows()` for `--format csv`, `table_lines()` for the text table (collbench_py/parsers/formats.py
asks the record, so a new kind needs no change there).
"""

from __future__ import annotations

import re
from typing import Any

# A shell prompt copied with the command: `$ `, `$> `, `user@host:~$ `, `(venv) user@host:[dir]$ `.
PROMPT = re.compile(r"^(?:\([^)]*\)\s*)?(?:[\w.@~:/\[\]-]*)?[$#>]+\s+")


def strip_prompt(line: str) -> str | None:
    """The command after a shell prompt, or None when the line has no prompt."""
    match = PROMPT.match(line)
    return line[match.end() :] if match else None


def number(token: str) -> int | float | None:
    """`12` -> 12, `1.5` -> 1.5, `N/A` and anything else -> None."""
    try:
        return int(token)
    except ValueError:
        pass
    try:
        return float(token)
    except ValueError:
        return None


def snake(name: str) -> str:
    """`Replay Errors` -> `replay_errors`, `FEC Errors - 0` -> `fec_errors_0`."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)
