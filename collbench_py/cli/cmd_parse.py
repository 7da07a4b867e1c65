"""`collbench parse`: read benchmark and topology outputs, print their records.

Exit 0 when every file was read (a failed or truncated run is data, not an error);
exit 2 when any file is missing, unreadable or not an output we know, with one line per
bad file on stderr. Good files are still printed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator

from collbench_py.cli import debug_enabled, error
from collbench_py.exitcodes import ExitCode
from collbench_py.parsers import parse_text, read_text
from collbench_py.parsers.formats import CsvWriter, write_json, write_table
from collbench_py.parsers.models import KINDS, Kind, ParsedFile, ParseError

STDIN = "-"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "parse",
        help="parse benchmark logs and topology files into JSON, CSV or a table",
        description=(
            "Parse nccl-tests/rccl-tests logs (text or -J JSON), torch benchmark output, "
            "nvidia-smi/rocm-smi topology and bandwidth matrices, perftest (ib_*_bw/_lat), nvidia-smi/dcgmi "
            "nvlink, ibstat/ibv_devinfo/ibdev2netdev/rdma link, dcgmi diag. The kind is detected from "
            "the content, whatever the file is called. JSON is the stable interface "
            "(docs/parse-json.md)."
        ),
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="a file to parse, or - for standard input")
    parser.add_argument(
        "--format", choices=("json", "csv", "table"), default="table", help="output format (default: table)"
    )
    parser.add_argument("--kind", choices=KINDS, help="skip detection: parse every file as this kind")
    return parser


def read_input(name: str) -> str:
    """The text of a file, or of standard input for `-`; raises OSError or ParseError with a reason."""
    text = sys.stdin.buffer.read().decode("utf-8", errors="replace") if name == STDIN else read_text(name)
    if not text.strip():
        raise ParseError("empty file")
    return text


def _reason(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__


def parse_inputs(names: list[str], kind: Kind | None, bad: list[str]) -> Iterator[ParsedFile]:
    """Parse each input in order; a bad one is reported on stderr, added to `bad`, and skipped."""
    for name in names:
        try:
            yield parse_text(read_input(name), file=name, kind=kind)
        except (OSError, ParseError) as exc:
            error(f"{name}: {_reason(exc)}")
            bad.append(name)
        except Exception as exc:
            # A parser bug on one file must not lose the output of the others.
            if debug_enabled():
                raise
            error(f"{name}: cannot parse ({type(exc).__name__}: {exc}; COLLBENCH_DEBUG=1 for details)")
            bad.append(name)


def run(args: argparse.Namespace) -> int:
    bad: list[str] = []
    parsed = parse_inputs(args.files, args.kind, bad)
    if args.format == "json":
        write_json(parsed, sys.stdout)
    elif args.format == "csv":
        writer = CsvWriter(sys.stdout)
        for item in parsed:
            writer.write(item)
        writer.close()
    else:
        write_table(parsed, sys.stdout)
    sys.stdout.flush()
    return ExitCode.BAD_INPUT if bad else ExitCode.OK
