"""What the history commands share on the command line: the --db option, sizes, one-line errors."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from collbench_py.exitcodes import ExitCode
from collbench_py.history.store import DEFAULT_DB, ENV_DB, HistoryError, db_path

_UNITS = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def add_db_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        metavar="URL",
        help=f"history database: a path or sqlite:///PATH (default ${ENV_DB}, else {DEFAULT_DB})",
    )


def add_new_db_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--new-db",
        action="store_true",
        help=f"start a new history database at the path --db or ${ENV_DB} names (without it, a named "
        "database that does not exist is an error: a typo would start an empty history)",
    )


def database_to_create(db: str | None, new_db: bool, default: Path) -> Path | None:
    """The history database `collbench report` will write, when it does not exist yet (None when it
    does). One named by --db or $COLLBENCH_DB that does not exist is refused (HistoryError) unless
    --new-db asks for it: a typo there would start an empty history, and every regression against
    the old one would go unseen from then on. The default one, next to the run directories, is
    simply made."""
    source, named = ("--db", db) if db is not None else (f"${ENV_DB}", os.environ.get(ENV_DB) or None)
    path = db_path(named, default=default)
    if path.exists():
        return None
    if named is not None and not new_db:
        raise HistoryError(
            f"{source} {named}: no history database there; check the path, or pass --new-db to start "
            "a new history there"
        )
    return path


def created_line(path: Path) -> str:
    """Said once, when a run is the first one in a history database."""
    return (
        f"history: new database {path}: this run is its first; regressions against a host's own "
        "history are found from the next run on"
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
