"""What the history commands share on the command line: the --db option, sizes, one-line errors."""

from __future__ import annotations

import argparse
import sys

from collbench_py.exitcodes import ExitCode
from collbench_py.history.store import DEFAULT_DB, ENV_DB

_UNITS = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def add_db_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        metavar="URL",
        help=f"history database: a path or sqlite:///PATH (default ${ENV_DB}, else {DEFAULT_DB})",
    )


def parse_size(text: str) -> int:
    """`1G`, `256M`, `1GiB`, `1048576`: powers of 2, as nccl-tests reads -b/-e."""
    clean = text.strip().lower().removesuffix("b").removesuffix("i")
    try:
        if clean and clean[-1] in _UNITS:
            return int(float(clean[:-1]) * _UNITS[clean[-1]])
        return int(clean)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 256M, 1G, 1048576)") from None


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("at least 1")
    return value


def fail(command: str, message: object) -> int:
    one_line = " ".join(str(message).split())
    print(f"collbench {command}: {one_line}", file=sys.stderr)
    return ExitCode.BAD_INPUT


def stamp(iso: str) -> str:
    """`2026-11-21T21:51:00Z` -> `2026-11-21 21:51Z`: short enough for a table column."""
    return iso[:16].replace("T", " ") + "Z" if len(iso) >= 16 else iso


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Left-aligned text columns; numbers are formatted by the caller."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    return [
        "  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in [header, *rows]
    ]
