"""`collbench fetch`: pull benchmark logs made outside Ansible into a run directory `collbench report` reads.

Exit 0 when every host answered and the run directory was written; 1 when it was written but some
host could not be fetched (recorded as unreachable in the manifest); 2 when nothing was written
(bad arguments, no host answered, no benchmark log matched, the run directory exists).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from collbench_py.exitcodes import ExitCode
from collbench_py.fetch import FetchError, FetchResult, fetch, new_run_id, targets_for

PROG = "collbench fetch"
RUN_ID = r"[A-Za-z0-9][A-Za-z0-9._-]*"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "fetch",
        help="pull benchmark logs from nodes over SSH (Slurm, Kubernetes jobs) into a run directory",
        description=(
            "Copy the files matching --remote-glob from each host over SSH (paramiko, honouring "
            "~/.ssh/config "
            "and known_hosts; unknown host keys are refused unless --accept-new-host-keys), recognise each "
            "nccl-tests/rccl-tests log by its content, and write a new run directory (hosts/<host>/intra/, "
            "inter/all/, inter/pairs/, manifest.json) for `collbench report`. Exit 0 all hosts fetched, "
            "1 written but some host failed, 2 nothing written."
        ),
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--hosts", metavar="H1,H2", help="hosts as ssh knows them (names in ~/.ssh/config)")
    which.add_argument("-i", "--inventory", metavar="INVENTORY", help="an Ansible inventory file")
    parser.add_argument(
        "--group", default="gpu_nodes", help="inventory group to fetch from (default gpu_nodes)"
    )
    parser.add_argument(
        "--remote-glob",
        required=True,
        metavar="GLOB",
        help="files on each node, e.g. '/scratch/job42/*.log' or '~/nccl/*/*.out' (quote it)",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--run-dir", type=Path, metavar="DIR", help="the new run directory (must not exist)")
    where.add_argument(
        "--results-dir",
        type=Path,
        default=Path("results"),
        metavar="DIR",
        help="create DIR/<run_id>/ (default results/)",
    )
    parser.add_argument(
        "--run-id", metavar="ID", help="name of the run (default: UTC time and a random suffix)"
    )
    parser.add_argument("--ssh-config", metavar="FILE", help="ssh config file (default ~/.ssh/config)")
    parser.add_argument("--known-hosts", metavar="FILE", help="known_hosts file (default: the ssh config's)")
    parser.add_argument("--user", "-u", help="remote user (default: the ssh config's, or the inventory's)")
    parser.add_argument("--port", type=int, help="ssh port (default: the ssh config's, else 22)")
    parser.add_argument("--identity", metavar="KEY", help="private key file (added before the config's)")
    parser.add_argument(
        "--accept-new-host-keys",
        action="store_true",
        help="add unknown host keys to known_hosts instead of refusing (a changed key is still refused)",
    )
    return parser


def _run_dir(args: argparse.Namespace) -> Path:
    if args.run_id and not re.fullmatch(RUN_ID, args.run_id):
        raise FetchError(f"--run-id {args.run_id!r}: use letters, digits, '.', '_' and '-' only")
    if args.run_dir:
        return args.run_dir
    return args.results_dir / (args.run_id or new_run_id())


def _say(line: str) -> None:
    print(f"{PROG}: {line}", file=sys.stderr)


def _summary(result: FetchResult) -> list[str]:
    lines = [f"{PROG}: {result.logs} log(s) from {result.files} file(s) written to {result.run_dir}"]
    lines += [f"  note: {note}" for note in result.notes]
    lines += [f"  unreachable: {host}: {reason}" for host, reason in result.unreachable.items()]
    lines.append(f"next: collbench report {result.run_dir}")
    return lines


def run(args: argparse.Namespace) -> int:
    hosts = [h.strip() for h in (args.hosts or "").split(",") if h.strip()]
    if args.hosts is not None and not hosts:
        _say("--hosts names no host")
        return ExitCode.BAD_INPUT
    try:
        run_dir = _run_dir(args)
        if run_dir.exists():
            raise FetchError(f"{run_dir} exists: a run directory is never written into twice")
        targets = targets_for(
            hosts,
            args.inventory,
            args.group,
            ssh_config=args.ssh_config,
            user=args.user,
            port=args.port,
            key_file=args.identity,
            known_hosts=args.known_hosts,
        )
        result = fetch(
            targets, args.remote_glob, run_dir, accept_new_host_keys=args.accept_new_host_keys, say=_say
        )
    except FetchError as exc:
        _say(str(exc))
        return ExitCode.BAD_INPUT
    print("\n".join(_summary(result)))
    return ExitCode.FAILED if result.unreachable else ExitCode.OK
