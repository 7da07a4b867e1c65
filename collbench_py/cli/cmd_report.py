"""`collbench report RUN_DIR`: judge a run directory and write the report files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from collbench_py import history
from collbench_py.cli.common import add_history_arguments, add_new_db_argument, history_options, parse_size
from collbench_py.exitcodes import ExitCode
from collbench_py.history import HistoryError, created_line, database_to_create
from collbench_py.profiles import ProfileError, shipped_names
from collbench_py.report.make import make_report
from collbench_py.rundir.load import RunDirError
from collbench_py.verdicts import Options


def _fraction(text: str) -> float:
    try:
        value = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a fraction: {text!r} (e.g. 0.05 or 5%)") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError("a fraction in [0, 1)")
    return value


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "report",
        help="judge a run directory: per-host verdicts and the report files",
        description=(
            "Read a run directory (results/<run_id>/), judge every host and link, write index.html, "
            "report.md, hosts.csv, results.json, junit.xml and metrics.prom, and print a per-host summary. "
            "Exit 0 all passed, 1 a host or link failed, 2 bad input, 3 warnings only (with --strict)."
        ),
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="a run directory written by bench.yml")
    parser.add_argument(
        "--profile",
        metavar="NAME|FILE",
        help=f"acceptance profile: a shipped name ({', '.join(shipped_names())}) or a YAML file; "
        "default: chosen from the facts",
    )
    parser.add_argument("--out", metavar="DIR", type=Path, help="where to write (default RUN_DIR/report)")
    parser.add_argument("--strict", action="store_true", help="exit 3 when there are warnings but no failure")
    parser.add_argument(
        "--reference-min-bytes",
        metavar="SIZE",
        type=parse_size,
        default=Options.reference_min_bytes,
        help="score bandwidth at the largest sizes from this size up (default 256M)",
    )
    parser.add_argument(
        "--min-drop",
        metavar="FRACTION",
        type=_fraction,
        help="smallest drop below the fleet median that can fail a host (default: the profile's, else 0.05)",
    )
    add_history_arguments(parser)
    add_new_db_argument(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    out_dir: Path = args.out or args.run_dir / "report"
    options = Options(reference_min_bytes=args.reference_min_bytes, min_drop=args.min_drop)
    try:
        default_db = history.default_db(args.run_dir)
        new_db = None if args.no_history else database_to_create(args.db, args.new_db, default_db)
    except HistoryError as exc:
        print(f"collbench report: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    try:
        made = make_report(
            args.run_dir,
            out_dir,
            profile=args.profile,
            strict=args.strict,
            options=options,
            db=args.db,
            history_options=history_options(args),
        )
    except (RunDirError, ProfileError) as exc:
        print(f"collbench report: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except OSError as exc:
        print(f"collbench report: cannot write {out_dir}: {exc.strerror or exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    print("\n".join(made.summary))
    if new_db is not None and new_db.exists():
        print(created_line(new_db))
    return made.exit_code
