"""`collbench bundle RUN_DIR [--profile P]`: the acceptance bundle for the provider; exit code = verdict."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from collbench_py.cli.common import add_bundle_options, add_history_arguments, check_profile, make_bundle
from collbench_py.exitcodes import ExitCode
from collbench_py.profiles import ProfileError


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
    add_history_arguments(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    try:
        profile = check_profile(args.profile)
    except ProfileError as exc:
        print(f"collbench bundle: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    return make_bundle(args.run_dir, args, profile)
