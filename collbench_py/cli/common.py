"""What several commands share on the command line: the history options, sizes, tables, one-line errors,
the acceptance bundle's options and its printing."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from collbench_py import history
from collbench_py.bundle import Bundle, BundleError, build_bundle
from collbench_py.exitcodes import ExitCode
from collbench_py.history import HistoryError, database_to_create
from collbench_py.history.regressions import ROLLING, HistoryOptions
from collbench_py.history.store import DEFAULT_DB, ENV_DB
from collbench_py.profiles import load_profile, shipped_names

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


def non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("at least 0")
    return value


def add_raw_nights_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument(
        "--history-raw-nights",
        metavar="N",
        type=non_negative,
        default=HistoryOptions.raw_nights,
        help=f"retention: keep every measurement row of the newest N nights; older nights are kept as "
        f"per-size summaries per host and link (default {HistoryOptions.raw_nights}; 0 keeps every row)",
    )


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


def add_history_arguments(parser: argparse.ArgumentParser) -> None:
    """The history options of `collbench report`."""
    group = parser.add_argument_group("history")
    group.add_argument(
        "--db",
        metavar="URL",
        help=f"history database: a path or sqlite:///PATH (default ${ENV_DB}, else history.sqlite "
        "next to the run directory)",
    )
    group.add_argument("--no-history", action="store_true", help="neither read nor write the history")
    group.add_argument(
        "--history-runs",
        metavar="N",
        type=positive,
        default=HistoryOptions.runs,
        help=f"rolling baseline: the last N healthy runs (default {HistoryOptions.runs})",
    )
    group.add_argument(
        "--baseline",
        metavar="NAME",
        help=f"judge against this frozen baseline, or '{ROLLING}' (default: the newest frozen baseline, "
        "else rolling)",
    )
    add_raw_nights_argument(group)


def history_options(args: argparse.Namespace) -> HistoryOptions | None:
    """The history options `add_history_arguments` parsed; None with --no-history."""
    if getattr(args, "no_history", False):
        return None
    return HistoryOptions(
        runs=args.history_runs,
        baseline=args.baseline,
        reference_min_bytes=getattr(args, "reference_min_bytes", HistoryOptions.reference_min_bytes),
        raw_nights=getattr(args, "history_raw_nights", HistoryOptions.raw_nights),
    )


def add_bundle_options(parser: argparse.ArgumentParser, *, with_profile: bool = True) -> None:
    if with_profile:
        parser.add_argument(
            "--profile",
            metavar="NAME|FILE",
            help=f"acceptance profile: a shipped name ({', '.join(shipped_names())}) or a YAML file; "
            "default: chosen from the facts",
        )
    parser.add_argument(
        "--bundle-out",
        metavar="FILE",
        type=Path,
        help="where to write the archive (default RUN_DIR/acceptance/collbench-acceptance-<run_id>.tar.gz)",
    )
    parser.add_argument("--force", action="store_true", help="replace an existing archive of that name")
    parser.add_argument("--strict", action="store_true", help="exit 3 when there are warnings but no failure")


def check_profile(profile: str | None) -> str | None:
    """The profile as the report will read it (a file made absolute); ProfileError when unusable."""
    if profile is None:
        return None
    load_profile(profile)
    return str(Path(profile).resolve()) if Path(profile).is_file() else profile


def bundle_lines(bundle: Bundle) -> list[str]:
    summary = [line for line in bundle.summary.splitlines() if not line.startswith("report: ")]
    lines = [*summary, f"acceptance bundle: {bundle.path} ({bundle.files} files, verdict {bundle.verdict})"]
    if bundle.redactions:
        lines.append(f"redacted before packing: {len(bundle.redactions)} item(s), listed in bundle.json")
    return lines


def bundle_history(args: argparse.Namespace) -> tuple[str | None, HistoryOptions | None]:
    """The history database and options of the report the bundle carries: the command's own
    (`collbench bundle` has those of `collbench report`), else the defaults `collbench report` uses,
    as the report of `collbench run` did."""
    if not hasattr(args, "history_runs"):
        return None, HistoryOptions()
    return args.db, history_options(args)


def make_bundle(run_dir: Path, args: argparse.Namespace, profile: str | None) -> int:
    db, options = bundle_history(args)
    try:
        # The report it carries reads the history: a misspelt database is refused as `report` does.
        if options is not None:
            database_to_create(db, False, history.default_db(run_dir))
    except HistoryError as exc:
        print(f"collbench bundle: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    try:
        bundle = build_bundle(
            run_dir,
            profile,
            args.bundle_out,
            strict=args.strict,
            force=args.force,
            db=db,
            history_options=options,
        )
    except BundleError as exc:
        print(f"collbench bundle: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except OSError as exc:
        print(f"collbench bundle: cannot write the bundle: {exc.strerror or exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    print("\n".join(bundle_lines(bundle)))
    return bundle.exit_code
