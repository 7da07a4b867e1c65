"""The `collbench` command line: one module per subcommand, each a thin layer over the library.

A subcommand is `collbench_py/cli/cmd_<name>.py` with `add_parser(subparsers)` and
`run(args) -> int`. Names listed in COMMANDS whose module does not exist are skipped, so the
list can name commands before they are written. Only the command being run is imported (some
pull in matplotlib or paramiko); `--help` and usage errors import them all.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Sequence
from types import ModuleType

from collbench_py import __version__
from collbench_py.exitcodes import ExitCode

COMMANDS = ("run", "report", "parse", "compare", "history", "baseline", "fetch", "bundle")

PROG = "collbench"


def _command_modules(names: Sequence[str]) -> list[ModuleType]:
    modules = []
    for name in names:
        module_name = f"collbench_py.cli.cmd_{name}"
        try:
            modules.append(importlib.import_module(module_name))
        except ModuleNotFoundError as missing:
            # Only the command's own module may be absent; a missing dependency is a real error.
            if missing.name != module_name:
                raise
    return modules


def _commands_needed(argv: Sequence[str]) -> Sequence[str]:
    """The command named on the command line (the first word that is not an option); none for a
    plain --version, which argparse answers before it looks for a command (every run of the
    playbook asks); else all."""
    first = next((word for word in argv if not word.startswith("-")), None)
    if first in COMMANDS:
        return (first,)
    if first is None and "--version" in argv and not {"-h", "--help"} & set(argv):
        return ()
    return COMMANDS


def build_parser(names: Sequence[str] = COMMANDS) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Benchmark GPU collectives across a cluster and judge the numbers.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _command_modules(names):
        sub = module.add_parser(subparsers)
        sub.set_defaults(run=module.run)
    return parser


def error(message: str) -> None:
    """Print one line on stderr, prefixed with the program name."""
    one_line = " ".join(str(message).split())
    print(f"{PROG}: {one_line}", file=sys.stderr)


def debug_enabled() -> bool:
    return os.environ.get("COLLBENCH_DEBUG", "") not in ("", "0")


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_commands_needed(argv))
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        # argparse exits for --help, --version (0) and usage errors (2): return, so `main` stays callable.
        return exit_.code if isinstance(exit_.code, int) else ExitCode.BAD_INPUT
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        error("interrupted")
        return 130
    except BrokenPipeError:
        # `collbench parse ... | head`: the reader left; stop quietly and keep Python from
        # complaining again when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return ExitCode.OK
    except Exception as exc:
        if debug_enabled():
            traceback.print_exc()
        hint = "" if debug_enabled() else " (COLLBENCH_DEBUG=1 for details)"
        error(f"{type(exc).__name__}: {exc}{hint}")
        return ExitCode.BAD_INPUT
