"""`collbench bundle RUN_DIR [--profile P]`: the acceptance bundle for the provider; exit code = verdict."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from collbench_py import history
from collbench_py.bundle import Bundle, BundleError, build_bundle
from collbench_py.exitcodes import ExitCode
from collbench_py.history import HistoryError
from collbench_py.history.cliutil import database_to_create
from collbench_py.profiles import ProfileError, load_profile, shipped_names


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "bundle",
        help="pack a run's report and evidence into one archive with checksums (acceptance)",
        description=(
            "Judge RUN_DIR as `collbench report` does (same profile, same history) and write one tar.gz "
            "for the provider: that report (HTML, Markdown, JUnit, results.json), every file it read (logs, "
            "facts, topology, PCIe links, the pair plan), the profile, tool versions and a SHA256SUMS "
            "manifest (`sha256sum -c SHA256SUMS` verifies it). Secrets are left out. "
            "Exit 0 passed, 1 a host or link failed, 2 no bundle, 3 warnings only (with --strict)."
        ),
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path, help="a run directory (results/<run_id>)")
    add_bundle_options(parser)
    history.add_arguments(parser)
    return parser


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


def history_args(args: argparse.Namespace) -> argparse.Namespace:
    """The history options of the report the bundle carries: the command's own (`collbench bundle`
    has those of `collbench report`), else the defaults `collbench report` uses, as the report of
    `collbench run` did."""
    defaults = argparse.ArgumentParser()
    history.add_arguments(defaults)
    merged = vars(defaults.parse_args([]))
    merged.update({key: value for key, value in vars(args).items() if key in merged})
    return argparse.Namespace(**merged)


def make_bundle(run_dir: Path, args: argparse.Namespace, profile: str | None) -> int:
    hist = history_args(args)
    try:
        # The report it carries reads the history: a misspelt database is refused as `report` does.
        if not hist.no_history:
            database_to_create(hist.db, False, history.default_db(run_dir))
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
            history_args=hist,
        )
    except BundleError as exc:
        print(f"collbench bundle: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except OSError as exc:
        print(f"collbench bundle: cannot write the bundle: {exc.strerror or exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    print("\n".join(bundle_lines(bundle)))
    return bundle.exit_code


def run(args: argparse.Namespace) -> int:
    try:
        profile = check_profile(args.profile)
    except ProfileError as exc:
        print(f"collbench bundle: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    return make_bundle(args.run_dir, args, profile)
