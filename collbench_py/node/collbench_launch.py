"""Run one benchmark launch on a node, bounded (standard library only; any Python 3.8+).

    python3 collbench_launch.py --timeout-s N --kill-after-s K --match DIR [--gpu-link-csv FILE] -- ARGV...

Runs ARGV with umask 077 (what the launch writes is private). At N seconds it sends TERM to
ARGV's process group, K seconds later KILL, then KILLs every process whose command line contains
DIR (a launch's processes all name its directory), and exits 124. Otherwise exits with ARGV's
code. --gpu-link-csv is accepted and not used by this version (no link sampling).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time

TIMED_OUT = 124


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="collbench_launch.py")
    parser.add_argument("--timeout-s", type=float, required=True)
    parser.add_argument("--kill-after-s", type=float, required=True)
    parser.add_argument("--match", required=True)
    parser.add_argument("--gpu-link-csv")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command or not args.match:
        parser.error("a command after -- and a non-empty --match are needed")
    return args


def processes_naming(text: str) -> list[int]:
    """Pids whose command line contains text, this process and its parents left out."""
    spared = {os.getpid(), os.getppid()}
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in spared:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry))
    return found


def signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, signum)


def main(argv: list[str]) -> int:
    args = parse(argv)
    os.umask(0o077)
    try:
        child = subprocess.Popen(args.command, start_new_session=True)
    except OSError as err:
        print(f"collbench_launch: cannot run {args.command[0]}: {err}", file=sys.stderr)
        return 127
    # TERM from Ansible (its own timeout) ends the launch too.
    signal.signal(signal.SIGTERM, lambda *_: signal_group(child.pid, signal.SIGTERM))
    try:
        return child.wait(timeout=args.timeout_s)
    except subprocess.TimeoutExpired:
        pass
    print(f"collbench_launch: timed out after {args.timeout_s:g} s", file=sys.stderr, flush=True)
    signal_group(child.pid, signal.SIGTERM)
    deadline = time.monotonic() + args.kill_after_s
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    signal_group(child.pid, signal.SIGKILL)
    for pid in processes_naming(args.match):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    child.wait()
    return TIMED_OUT


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
