"""`collbench report RUN_DIR`: judge a run directory and write the report files."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from collbench_py import history
from collbench_py.exitcodes import ExitCode
from collbench_py.history import HistoryError
from collbench_py.history.cliutil import add_new_db_argument, created_line, database_to_create, parse_size
from collbench_py.profiles import ProfileError, shipped_names
from collbench_py.report import write_report
from collbench_py.report.console import summary_lines
from collbench_py.rundir.load import RunDirError, load_run_dir
from collbench_py.rundir.private_files import make_private_dirs
from collbench_py.verdicts import Options, Report, judge


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
    history.add_arguments(parser)
    add_new_db_argument(parser)
    return parser


@dataclass(frozen=True)
class MadeReport:
    """A judged run whose report files are written: what `collbench report` prints and exits with."""

    report: Report
    exit_code: int
    out_dir: Path
    summary: tuple[str, ...]


def make_report(
    run_dir: Path,
    out_dir: Path | None = None,
    *,
    profile: str | None = None,
    strict: bool = False,
    options: Options | None = None,
    history_args: argparse.Namespace | None = None,
    links_to: Path | None = None,
) -> MadeReport:
    """Judge `run_dir`, record it in the history (its options as `history.add_arguments` gives them;
    None: no history), and write the report files to `out_dir` (default RUN_DIR/report), their links
    to logs pointing into `links_to` (default RUN_DIR; the bundle's copy of the run). Raises
    RunDirError or ProfileError for bad input, OSError when the files cannot be written."""
    out_dir = out_dir or run_dir / "report"
    report = judge(load_run_dir(run_dir), profile_arg=profile, options=options or Options())
    if history_args is not None:
        # Ingest into the history database and add regressions against each host's own past.
        report = history.record_from_args(report, history_args)
    code = report.exit_code(strict=strict)
    make_private_dirs(out_dir)  # a directory it makes is 0700, as the run directory is
    write_report(
        replace(report, run=replace(report.run, path=links_to)) if links_to else report, out_dir, code
    )
    return MadeReport(report, int(code), out_dir, tuple(summary_lines(report, str(out_dir))))


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
            history_args=args,
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
