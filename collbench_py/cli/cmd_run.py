"""`collbench run -i INVENTORY [ansible options]`: bench.yml through ansible-runner, with progress,
Ansible's own errors, the report, and the report's exit code. `--slurm-partition P` / `--slurm-nodes
EXPR` instead of `-i`: the nodes from Slurm (inventory/slurm_inventory.py, docs/slurm.md).

Exit codes: the report's (0 passed, 1 a host or link failed, 3 warnings with --strict); 2 when the
pipeline could not do its job (bad inventory, a playbook error before any report, a report error);
130 when interrupted. With --acceptance PROFILE the exit code is the acceptance bundle's verdict.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from collbench_py.ansible_run import (
    PlaybookOutcome,
    PlaybookRequest,
    RunnerError,
    Tracker,
    find_project_dir,
    make_display,
    run_playbook,
)
from collbench_py.cli import main
from collbench_py.cli.common import add_bundle_options, check_profile, make_bundle
from collbench_py.exitcodes import ExitCode
from collbench_py.profiles import ProfileError, shipped_names

PROG = "collbench run"
INTERRUPTED = 130
SLURM_INVENTORY = Path("inventory") / "slurm_inventory.py"
SLURM_INVENTORY_TIMEOUT_S = 120  # the script's own sinfo bound is 60 s
# Options that make ansible-playbook prompt: there is no terminal to answer them under ansible-runner.
PROMPTING = ("-k", "--ask-pass", "-K", "--ask-become-pass", "--ask-vault-pass", "-J", "--ask-vault-password")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "run",
        help="run the whole benchmark (bench.yml) with live progress, then the report",
        description=(
            "Run bench.yml through ansible-runner, as `ansible-playbook bench.yml` would, with a live "
            "progress line (plain lines when not on a terminal), every failed task and unreachable host "
            "as Ansible reports it, and the report at the end. Exit code: the report's (0 passed, "
            "1 failed, 3 warnings with --strict), 2 when the pipeline could not do its job. "
            "Ansible options this command does not name go after `--`."
        ),
    )
    parser.add_argument(
        "-i",
        "--inventory",
        action="append",
        default=[],
        metavar="INVENTORY",
        help="inventory file or host list",
    )
    parser.add_argument(
        "-e",
        "--extra-vars",
        action="append",
        default=[],
        metavar="VARS",
        help="key=value, YAML/JSON or @file, as for ansible-playbook (visible to other users in the "
        "process list: put secrets in a vault or a file, never here)",
    )
    parser.add_argument(
        "--slurm-partition",
        metavar="PARTITION",
        help="take the nodes from Slurm: the partition's nodes (inventory/slurm_inventory.py, on a login "
        "node); down or drained ones are reported as not measured, with Slurm's reason. Not with -i",
    )
    parser.add_argument(
        "--slurm-nodes",
        metavar="EXPR",
        help="take the nodes from Slurm: a hostlist (gpu[001-016]); with --slurm-partition, those of the "
        "list in the partition. A named node Slurm cannot give is a warning in the report. Not with -i",
    )
    parser.add_argument("-l", "--limit", metavar="PATTERN", help="run on these hosts only")
    parser.add_argument("-t", "--tags", metavar="TAGS", help="run these phases only (e.g. intra,report)")
    parser.add_argument("--skip-tags", metavar="TAGS", help="skip these phases")
    parser.add_argument("-C", "--check", action="store_true", help="Ansible check mode: change nothing")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more Ansible output (repeatable)")
    parser.add_argument(
        "--acceptance",
        metavar="PROFILE",
        help=f"acceptance mode: judge against PROFILE (a shipped name: {', '.join(shipped_names())}, or a "
        "YAML file) and write the bundle for the provider; the exit code is its verdict",
    )
    add_bundle_options(parser, with_profile=False)
    parser.add_argument(
        "--progress",
        choices=("auto", "live", "lines"),
        default="auto",
        help="live: one line redrawn in place; lines: plain lines for logs; auto: live on a terminal",
    )
    parser.add_argument(
        "--new-db",
        action="store_true",
        help="start the history database named by $COLLBENCH_DB (first night only: a name that does not "
        "exist is refused otherwise, so a typo cannot start an empty history)",
    )
    parser.add_argument("--project-dir", metavar="DIR", help="the collbench checkout holding bench.yml")
    parser.add_argument(
        "--keep-artifacts", metavar="DIR", type=Path, help="copy ansible-runner's event artifacts here"
    )
    parser.add_argument(
        "ansible_args", nargs=argparse.REMAINDER, metavar="-- ANSIBLE_ARGS", help="passed to ansible-playbook"
    )
    return parser


def _fail(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return ExitCode.BAD_INPUT


def request_from_args(args: argparse.Namespace, profile: str | None) -> PlaybookRequest:
    passthrough = tuple(a for a in args.ansible_args if a != "--")
    report_args = (
        (["--profile", profile] if profile else [])
        + (["--strict"] if args.strict else [])
        + (["--new-db"] if args.new_db else [])
    )
    # Our variables go through a file (-e @file), and only when there is something to say.
    collbench_vars: dict[str, object] = {"collbench_report_args": report_args} if report_args else {}
    if args.slurm_partition:
        # The allocation asks for the partition the nodes were taken from.
        collbench_vars["collbench_slurm_partition"] = args.slurm_partition
    return PlaybookRequest(
        inventories=tuple(args.inventory),
        extra_vars=tuple(args.extra_vars),
        limit=args.limit,
        tags=args.tags,
        skip_tags=args.skip_tags,
        check=args.check,
        verbosity=args.verbose,
        passthrough=passthrough,
        collbench_vars=collbench_vars,
    )


def run(args: argparse.Namespace) -> int:
    prompting = sorted(set(args.ansible_args) & set(PROMPTING))
    if prompting:
        return _fail(
            f"{', '.join(prompting)}: no prompt can be answered here; use an ssh key or a vault file"
        )
    slurm = bool(args.slurm_partition or args.slurm_nodes)
    if slurm and args.inventory:
        return _fail(
            "-i and --slurm-partition/--slurm-nodes both name the nodes: give one (connection settings "
            "for Slurm's nodes go in group_vars/all.yml beside bench.yml, or -e)"
        )
    try:
        profile = check_profile(args.acceptance)
        project_dir = find_project_dir(args.project_dir)
        if slurm:
            args.inventory = [use_slurm_inventory(project_dir, args.slurm_partition, args.slurm_nodes)]
        request = request_from_args(args, profile)
        live = {"auto": None, "live": True, "lines": False}[args.progress]
        display = make_display(Tracker(echo_verbose=args.verbose > 0), sys.stdout, live=live)
        outcome = run_playbook(request, project_dir, display, keep_artifacts=args.keep_artifacts)
    except (RunnerError, ProfileError) as exc:
        return _fail(str(exc))
    code = finish(outcome, args, profile)
    if args.acceptance and code != ExitCode.BAD_INPUT and outcome.run_dir is not None:
        return make_bundle(outcome.run_dir, args, profile)
    return code


def use_slurm_inventory(project_dir: Path, partition: str | None, nodes: str | None) -> str:
    """The Slurm inventory script, its variables set in this process's environment (Ansible inherits
    it), after one run of it here: a partition sinfo does not know, or no sinfo, is the script's one
    line, before Ansible starts."""
    script = project_dir / SLURM_INVENTORY
    os.environ["COLLBENCH_SLURM_PARTITION"] = partition or ""
    os.environ["COLLBENCH_SLURM_NODES"] = nodes or ""
    try:
        result = subprocess.run(
            [sys.executable, str(script), "--list"],
            check=False,
            capture_output=True,
            text=True,
            timeout=SLURM_INVENTORY_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RunnerError(f"{script}: {exc}") from None
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines() or [f"exit code {result.returncode}"]
        raise RunnerError(lines[-1])
    return str(script)


def finish(outcome: PlaybookOutcome, args: argparse.Namespace, profile: str | None) -> int:
    """Print the end of the run (problems, the report's summary) and return the exit code."""
    out = sys.stdout
    failed = [p for p in outcome.problems if not p.ignored]
    if outcome.interrupted or outcome.status == "canceled":
        print(f"{PROG}: interrupted after {outcome.elapsed_s:.0f} s", file=sys.stderr)
        if outcome.run_dir is not None:
            print(
                f"{PROG}: what run {outcome.run_id} measured stays in {outcome.run_dir}; "
                f"`collbench report {outcome.run_dir}` judges it",
                file=sys.stderr,
            )
        return INTERRUPTED
    if outcome.inventory_trouble and outcome.run_dir is None:
        inventory = ", ".join(args.inventory) or "the default inventory"
        return _fail(f"bad inventory ({inventory}): {inventory_reason(outcome)}")
    if outcome.run_dir is None:
        if outcome.ansible_rc == 0:
            print(f"{PROG}: no run directory was opened (only provision or build ran); nothing to report")
            return ExitCode.OK
        return _fail(
            f"the playbook stopped (ansible-playbook rc {outcome.ansible_rc}) before opening a run "
            f"directory; {len(failed)} failed task(s) above"
        )
    report_rc = outcome.report_rc
    if outcome.report_lines:
        out.write("\n".join(outcome.report_lines) + "\n")
    if report_rc is None and (outcome.run_dir / "manifest.json").is_file() and outcome.ansible_rc != 0:
        print(f"{PROG}: the playbook stopped before its report; the report of what was measured:")
        report_rc = _report_now(outcome.run_dir, profile, args.strict)
    if report_rc is None:
        print(f"{PROG}: run {outcome.run_id} in {outcome.run_dir}; the report step did not run")
        return ExitCode.OK if outcome.ansible_rc == 0 else ExitCode.BAD_INPUT
    print(f"{PROG}: run {outcome.run_id} finished in {outcome.elapsed_s:.0f} s: {outcome.run_dir}")
    if report_rc in (ExitCode.OK, ExitCode.WARNINGS) and outcome.ansible_rc != 0:
        print(
            f"{PROG}: the report passed but Ansible failed (rc {outcome.ansible_rc}): see the failed "
            "tasks above",
            file=sys.stderr,
        )
        return ExitCode.BAD_INPUT
    return report_rc


def _report_now(run_dir: Path, profile: str | None, strict: bool) -> int:
    return main(
        [
            "report",
            str(run_dir),
            *(["--profile", profile] if profile else []),
            *(["--strict"] if strict else []),
        ]
    )


def inventory_reason(outcome: PlaybookOutcome) -> str:
    """The most specific thing Ansible said about the inventory: a parser's reason and where, else
    its summary line."""
    for message in outcome.inventory_trouble:
        lines = [line.strip() for line in message.splitlines()]
        for line in lines:
            if "Failed to parse" in line and "plugin:" in line:
                origins = [x.removeprefix("Origin:").strip() for x in lines if x.startswith("Origin:")]
                origin = origins[0] if origins else ""
                reason = line.split("plugin:", 1)[1].strip()
                return f"{reason} (at {origin})" if origin and not origin.startswith("<") else reason
    first = outcome.inventory_trouble[0].splitlines()[0]
    return first.split("]:", 1)[-1].strip()
