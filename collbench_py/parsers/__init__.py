"""Parsers: pure functions from a tool's output text to typed records.

Each module handles one family of outputs and exposes two functions:

- `sniff(text) -> Kind | None`: a cheap look at the text; the kind it is, if it is ours;
- `parse(text, file) -> ParsedFile`: the records; raises `ParseError` only for text that
  is not this kind at all (a failed or truncated run is data, not an error).

`detect` asks the modules in order, most specific first.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path
from types import ModuleType
from typing import BinaryIO

from collbench_py.parsers import (
    dcgm,
    ibports,
    matrices,
    nccl_json,
    nccl_text,
    nvbandwidth,
    nvlink,
    perftest,
    topo,
    torch_bench,
)
from collbench_py.parsers.models import Kind, ParsedFile, ParseError

# Order matters: JSON first (unambiguous), then formats whose markers could also
# appear inside an nccl-tests log (a topology printed before a run), nccl-tests text after them.
# The node-check formats (perftest, NVLink, RDMA ports, dcgmi diag) come last: none of the modules
# before claims them, and most files are nccl-tests logs, which then never pay for their sniffing.
_MODULES = (nccl_json, nvbandwidth, matrices, topo, torch_bench, nccl_text, perftest, nvlink, ibports, dcgm)

_BY_KIND = {
    "nccl-tests": (nccl_json, nccl_text),
    "rccl-tests": (nccl_json, nccl_text),
    "torch-bench": (torch_bench,),
    "nvidia-smi-topo": (topo,),
    "rocm-smi-topo": (topo,),
    "nvbandwidth": (nvbandwidth,),
    "p2p-bandwidth-latency": (matrices,),
    "rocm-bandwidth-test": (matrices,),
    "perftest": (perftest,),
    "nvidia-smi-nvlink": (nvlink,),
    "dcgmi-nvlink": (nvlink,),
    "nvidia-smi-topo-p2p": (nvlink,),
    "ib-ports": (ibports,),
    "dcgmi-diag": (dcgm,),
}


def _recognise(text: str) -> tuple[Kind, ModuleType] | None:
    """The kind of `text` and the first module that claims it."""
    for module in _MODULES:
        kind = module.sniff(text)
        if kind is not None:
            return kind, module
    return None


def detect(text: str) -> Kind | None:
    """The kind of output `text` is, or None when no parser recognises it."""
    found = _recognise(text)
    return found[0] if found else None


def parse_text(text: str, file: str = "-", kind: Kind | None = None) -> ParsedFile:
    """Parse `text` (of `kind`, detected when None) into a ParsedFile."""
    # A parse allocates many small records and frees none of them: the cyclic garbage collector
    # would walk every live object again and again (up to a quarter of the CPU time, and superlinear in
    # the size of one log) to find no garbage. Paused for the parse, restored as it was.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse_text(text, file, kind)
    finally:
        if enabled:
            gc.enable()


def _what_it_is(text: str) -> str:
    """A hint for a file of the run directory that is not a benchmark output."""
    head = text[:4096]
    if head.lstrip().startswith("{") and '"collected_at"' in head and '"gpus"' in head:
        return " (a host's facts.json, written by the facts role: `collbench report RUN_DIR` reads it)"
    return ""


def _parse_text(text: str, file: str, kind: Kind | None) -> ParsedFile:
    if kind is None:
        # The module that recognised the text parses it: the same choice as the loop below
        # (a kind's modules are asked in the order of _MODULES), without sniffing twice.
        found = _recognise(text)
        if found is None:
            raise ParseError(f"not a recognised benchmark or topology output{_what_it_is(text)}")
        return found[1].parse(text, file)
    for module in _BY_KIND[kind]:
        if module.sniff(text) is not None or len(_BY_KIND[kind]) == 1:
            return module.parse(text, file)
    return _BY_KIND[kind][-1].parse(text, file)


def read_text(path: str | Path, head_bytes: int = 64 << 20, tail_bytes: int = 1 << 20) -> str:
    """Read a log as text; undecodable bytes become U+FFFD rather than an error.

    A log longer than head_bytes + tail_bytes (a rank printing in a loop) is read as its first
    head_bytes and its last tail_bytes, cut at line ends, with a line between them saying so:
    memory stays bounded, and the start (header, rows) and the end (how it finished) are kept."""
    with open(os.fspath(path), "rb") as stream:  # open(): a Path costs as much as reading a small log
        head = _read_up_to(stream, head_bytes)
        if len(head) < head_bytes:  # the whole log, the common case
            return head.decode("utf-8", errors="replace")
        tail = stream.read(tail_bytes + 1)
        if len(tail) <= tail_bytes:
            return (head + tail if tail else head).decode("utf-8", errors="replace")
        cut = head.rfind(b"\n") + 1 or len(head)
        said = "the rest was not read"
        tail = b""
        # A device or a pipe (collbench parse /dev/stdin) has no end to read from: its head only.
        size = stream.seek(0, 2) if stream.seekable() else 0
        if size > head_bytes + tail_bytes:
            stream.seek(size - tail_bytes)
            tail = stream.read(tail_bytes)
            tail = tail[tail.find(b"\n") + 1 :]
            said = f"{size - cut - len(tail)} bytes skipped here"
        marker = (
            f"\n[collbench: {said}: a log is read up to its first {head_bytes} and last {tail_bytes} bytes]\n"
        )
        # One copy of the head (a memoryview slice is none), then its bytes are let go before decoding.
        data = b"".join((memoryview(head)[:cut], marker.encode(), tail))
        del head
        return data.decode("utf-8", errors="replace")


def _read_up_to(stream: BinaryIO, limit: int) -> bytes:
    """`stream.read(limit)`, without first making a buffer of `limit` bytes for a small file.

    read(n) allocates n bytes before reading: 64 MiB for each log of a run cost more than
    parsing it. The file's size (plus one byte, to see its end) is asked for first; a file that
    grew since, or a pipe (size 0), is read on up to `limit`.
    """
    try:
        size = os.fstat(stream.fileno()).st_size
    except OSError:
        return stream.read(limit)
    want = min(limit, size + 1)
    data = stream.read(want)
    if len(data) < want or want == limit:
        return data
    return data + stream.read(limit - want)


def parse_file(path: str | Path, kind: Kind | None = None) -> ParsedFile:
    return parse_text(read_text(path), file=str(path), kind=kind)


__all__ = ["ParseError", "detect", "parse_file", "parse_text", "read_text"]
