"""ml-engineering `all_reduce_bench.py` / `torch-dist-bench.py` output (every generation) into Runs.

Generations, as the scripts printed them:
- 2023 legacy: `The average bandwidth of all_reduce with a 4.0GB payload (5 trials, 16 ranks):`
  then ` algbw: X GBps (Y Gbps)` (optionally `(std: Z)`) and ` busbw: ...`. The payload there is
  `M*N*4/1e9`, so `GB` means 10**9 bytes.
- 2025-01-15..22: `| payload | busbw | algbw |` with `32KB`-style labels (powers of two) and
  bandwidth divided by 2**30 although labelled `GBps`; kept as printed (like every other number the
  parsers return), with a warning that they are GiB/s.
- later: `KiB/MiB/GiB` labels, GBps = 10**9 bytes/s, an `Environment:` block (torch, cuda,
  `nccl=(2, 27, 7)`, device properties) and an `over N ranks (W warmups / T trials...)` sentence.
- `torch-dist-bench.py`: the same per collective, plus `latency median | p99 | mean | calls`
  columns (the median per-call latency becomes `time_us`), a combined table for several collectives
  (`<name> busbw | <name> median`), and blank bandwidth cells where only latency was measured.
- `--profile_stability`: one row per trial, `| busbw | algbw |`, the size taken from the sentence.

Tables are read by their header names. Lines may carry torchrun prefixes (`[host:0]:`,
`[default0]:`) and any amount of launcher noise.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from collbench_py.parsers.models import BUSBW_FACTORS, Half, Kind, ParsedFile, ParseError, Row, Run, RunError

KIND: Kind = "torch-bench"

# Launcher prefixes, possibly stacked: torchrun `[host:0]:`/`[default0]:`, OpenMPI `[1,0]<stdout>:`,
# srun ` 0: `.
_PREFIX = re.compile(r"^(?:\[[^\]\s]*\]:|\[\d+,\d+\]<std(?:out|err)>:|\s*\d+: )")
_TORCHRUN_HOST = re.compile(r"^(?P<host>[^\]:\s]+):\d+$")

_SENTENCE = re.compile(
    r"^The (?:(?P<profile>[\d.]+)GiB payload bandwidth|average bandwidth(?: and the per-call latency)?)"
    r" of (?:(?P<ncoll>\d+) collectives|(?P<name>[a-z_]+))"
    r"(?: with a (?P<legacy>[\d.]+\s*[KMGT]?i?B) payload)?(?: over (?P<ranks>\d+) ranks)?"
    r"\s*\((?P<inner>[^)]*)\)"
)
_LEGACY_BW = re.compile(
    r"^(?P<which>algbw|busbw):\s*(?P<value>[\d.]+)\s*GBps(?:\s*\(std:\s*(?P<std>[\d.]+)\))?"
)
_SOFTWARE = re.compile(r"^- software: torch=(?P<torch>\S+), cuda=(?P<cuda>\S+), nccl=(?P<nccl>.+)$")
_HARDWARE = re.compile(r"^(?:- hardware|Device info): (?P<props>.+)$")
_PLOT = re.compile(
    r"Plotting results into busbw-(?:mean|profile)-(?:(?:all_reduce|all_gather|reduce_scatter|all_to_all|"
    r"broadcast|reduce|gather|scatter|batch_isend_irecv|collectives)-)?(?P<host>.+)-(?P<ranks>\d+)"
    r"(?:-[a-z-]+)?\.png"
)
_ELAPSED = re.compile(r"^Elapsed time: (?P<elapsed>\S+)")
_SEPARATOR = re.compile(r"^\|(?:\s*:?-+:?\s*\|)+\s*$")
_NCCL_TESTS_HEADER = re.compile(r"^#?\s+size\s+count\s+type\s", re.MULTILINE)
_CELL_NUMBER = re.compile(r"^(?P<value>[\d.]+(?:e[+-]?\d+)?)\s*(?P<unit>GBps|us)?$")

_BINARY = {"": 0, "K": 10, "M": 20, "G": 30, "T": 40, "P": 50, "E": 60}
_GIB_PER_GB = 2**30 / 1e9
# The factors that depend on the rank count, the only ones that can tell it (nccl-tests' own).
_BUSBW_FACTOR = {
    name: BUSBW_FACTORS[name]
    for name in ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "gather", "scatter")
}
# the script's names where nccl-tests calls the collective differently
_NCCL_NAMES = {"all_to_all": "alltoall"}


def sniff(text: str) -> Kind | None:
    """Claims a file with the scripts' own markers; never nccl-tests text (which has no `GBps`)."""
    if "GBps" not in text and "per-call latency" not in text:
        return None
    if "| payload |" in text or " of all_reduce" in text or "algbw: " in text or "per-call latency" in text:
        if _NCCL_TESTS_HEADER.search(text):
            return None
        return KIND
    return None


def parse(text: str, file: str) -> ParsedFile:
    runs = tuple(_Reader(text).runs())
    if not runs:
        raise ParseError(f"{file}: no all_reduce_bench.py result (table or algbw/busbw block) found")
    return ParsedFile(file=file, kind=KIND, runs=runs)


@dataclass
class _Block:
    """One run being assembled: what its sentence said, and the rows found under it."""

    collective: str = "all_reduce"
    fmt: str = "table"
    nranks: int | None = None
    size: int | None = None  # the one payload of legacy and profile runs
    rows: list[Row] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    gib_labels: bool = False
    filled: bool = False


def _strip_prefixes(line: str, hosts: list[str]) -> str:
    while True:
        match = _PREFIX.match(line)
        if match is None:
            return line
        inner = match.group(0)
        if inner.startswith("[") and inner.endswith("]:"):
            host = _TORCHRUN_HOST.match(inner[1:-2])
            if host and host["host"] not in hosts:
                hosts.append(host["host"])
        line = line[match.end() :]


def _binary_size(label: str) -> int:
    """`32KiB`, `1.5MiB`, `8B`, and `32KB` (the 2025-01 script meant 2**10 too) -> bytes."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGTPE]?)i?B", label.strip())
    if match is None:
        raise ValueError(label)
    return round(float(match[1]) * 2 ** _BINARY[match[2]])


def _legacy_size(label: str) -> int:
    """The legacy sentence prints `M*N*4/1e9` followed by `GB`: decimal, unless it says `GiB`."""
    match = re.fullmatch(r"([\d.]+)\s*([KMGT]?)(i?)B", label.strip())
    if match is None:
        raise ValueError(label)
    exponent = "KMGT".find(match[2]) + 1 if match[2] else 0
    base = 2**10 if match[3] else 1000
    return round(float(match[1]) * base**exponent)


def _nccl_version(raw: str) -> str | None:
    """`(2, 27, 7)` (torch's tuple) or a packed int (`21805`, or the old `2708`)."""
    numbers = re.findall(r"\d+", raw)
    if len(numbers) >= 3:
        return ".".join(numbers[:3])
    if len(numbers) == 1:
        code = int(numbers[0])
        if code >= 10000:
            return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
        return f"{code // 1000}.{code // 100 % 10}.{code % 100}"
    return None


def _device_properties(raw: str) -> dict[str, str]:
    """`_CudaDeviceProperties(name='NVIDIA H200', major=9, ...)` -> {"name": "NVIDIA H200", ...}."""
    inner = re.search(r"\((.*)\)\s*$", raw)
    if inner is None:
        return {"description": raw.strip()}
    pairs = re.findall(r"(\w+)=('(?:[^'\\]|\\.)*'|[^,]+)", inner[1])
    return {key: value.strip().strip("'") for key, value in pairs}


def _cell(text: str) -> float | None:
    match = _CELL_NUMBER.match(text.strip())
    return float(match["value"]) if match else None


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def implied_nranks(rows: list[Row], collective: str, decimals: int = 2) -> int | None:
    """The rank count n for which busbw = algbw * factor(n) holds on every row, if exactly one does.

    The scripts compute busbw from algbw with nccl-tests' factor, so only the printed rounding blurs it.
    """
    factor = _BUSBW_FACTOR.get(collective)
    if factor is None:
        return None
    scale = factor(10**9)  # the factor's limit: 2 for all_reduce, 1 for the (n-1)/n ones
    low, high = 2.0, math.inf
    half_step = 0.5 * 10**-decimals
    for row in rows:
        algbw, busbw = row.oop.algbw, row.oop.busbw
        if not algbw or busbw is None or algbw <= half_step:
            continue
        ratio_low = (busbw - half_step) / (algbw + half_step) / scale
        ratio_high = (busbw + half_step) / (algbw - half_step) / scale
        if ratio_low >= 1:
            return None
        # factor(n) / scale = 1 - 1/n  ->  n = 1 / (1 - ratio)
        low = max(low, 1 / (1 - ratio_low))
        if ratio_high < 1:
            high = min(high, 1 / (1 - ratio_high))
    first = math.ceil(low - 1e-9)
    return first if high != math.inf and math.floor(high + 1e-9) == first else None


class _Reader:
    """One pass over the lines: a sentence opens a run; the table or the algbw/busbw lines fill it."""

    def __init__(self, text: str) -> None:
        self.hosts: list[str] = []
        self.lines = [_strip_prefixes(line, self.hosts).strip() for line in text.splitlines()]
        self.env: dict[str, Any] = {}
        self.errors: list[RunError] = []

    def runs(self) -> list[Run]:
        self._scan_environment()
        blocks: list[_Block] = []
        context: _Block | None = None  # the last sentence's run, until a table or block fills it
        index = 0
        while index < len(self.lines):
            line = self.lines[index]
            index += 1
            if sentence := _SENTENCE.match(line):
                context = self._from_sentence(sentence)
                blocks.append(context)
            elif line.startswith("|") and index < len(self.lines) and _SEPARATOR.match(self.lines[index]):
                header = [name.lower() for name in _cells(line)]
                body: list[list[str]] = []
                index += 1
                while index < len(self.lines) and self.lines[index].startswith("|"):
                    body.append(_cells(self.lines[index]))
                    index += 1
                filled = self._table(header, body, context)
                for block in filled:
                    if block is not context:
                        blocks.append(block)
                if filled:
                    context = None
            elif context is not None and context.fmt == "legacy" and (match := _LEGACY_BW.match(line)):
                self._legacy_line(context, match)
            elif context is not None and "No payload was measured" in line:
                context.warnings.append("the script measured no payload")
        return [self._run(block) for block in blocks if block.filled or block.fmt != "combined"]

    def _from_sentence(self, sentence: re.Match[str]) -> _Block:
        block = _Block(collective=sentence["name"] or "all_reduce")
        if sentence["ncoll"]:
            block.fmt = "combined"
        elif sentence["legacy"]:
            block.fmt, block.size = "legacy", _legacy_size(sentence["legacy"])
        elif sentence["profile"]:
            block.fmt, block.size = "profile", round(float(sentence["profile"]) * 2**30)
        inner = sentence["inner"]
        for key, pattern in (
            ("warmups", r"(\d+)\s+warmups?"),
            ("trials", r"(\d+)\s+trials?"),
            ("queued_calls", r"up to (\d+) queued calls"),
        ):
            if found := re.search(pattern, inner):
                block.params[key] = int(found[1])
        if "host overhead included" in inner:
            block.params["with_host_overhead"] = True
        if "symmetric memory" in inner:
            block.params["sym_mem"] = True
        ranks = sentence["ranks"] or next(iter(re.findall(r"(\d+)\s+ranks", inner)), None)
        block.nranks = int(ranks) if ranks else None
        return block

    def _table(self, header: list[str], body: list[list[str]], context: _Block | None) -> list[_Block]:
        """The runs a markdown table fills, by its column names; [] for tables that are not results."""
        column = {name: position for position, name in enumerate(header)}

        def cell(row: list[str], name: str) -> str:
            position = column.get(name)
            return row[position] if position is not None and position < len(row) else ""

        if "payload" in column and "busbw" in column:
            block = context if context is not None and context.fmt == "table" else _Block()
            for row in body:
                payload = cell(row, "payload")
                if not re.fullmatch(r"\d+(?:\.\d+)?\s*[KMGTPE]?i?B", payload):
                    continue
                if re.search(r"\d\s*[KMGTPE]B$", payload):
                    block.gib_labels = True
                time_us = _cell(cell(row, "latency median"))
                half = Half(time_us=time_us, algbw=_cell(cell(row, "algbw")), busbw=_cell(cell(row, "busbw")))
                block.rows.append(Row(size=_binary_size(payload), oop=half))
            block.filled = True
            return [block]
        if "payload" in column and any(name.endswith(" busbw") for name in header):
            names = [name[: -len(" busbw")] for name in header if name.endswith(" busbw")]
            template = context or _Block()
            blocks = []
            for name in names:
                block = _Block(collective=name, nranks=template.nranks, params=dict(template.params))
                for row in body:
                    payload = cell(row, "payload")
                    if not re.fullmatch(r"\d+(?:\.\d+)?\s*[KMGTPE]?i?B", payload):
                        continue
                    busbw, median = _cell(cell(row, f"{name} busbw")), _cell(cell(row, f"{name} median"))
                    if busbw is None and median is None:
                        continue
                    block.rows.append(Row(size=_binary_size(payload), oop=Half(time_us=median, busbw=busbw)))
                block.filled = True
                blocks.append(block)
            return blocks
        if header == ["busbw", "algbw"] and context is not None and context.fmt == "profile":
            for row in body:
                busbw, algbw = _cell(row[0]), _cell(row[1]) if len(row) > 1 else None
                if busbw is not None and context.size is not None:
                    context.rows.append(Row(size=context.size, oop=Half(algbw=algbw, busbw=busbw)))
            context.filled = True
            return [context]
        return []

    def _legacy_line(self, block: _Block, match: re.Match[str]) -> None:
        block.params[match["which"]] = float(match["value"])
        if match["std"] is not None:
            block.params[f"{match['which']}_std"] = float(match["std"])
        if "algbw" in block.params and "busbw" in block.params and not block.rows and block.size:
            algbw, busbw = block.params.pop("algbw"), block.params.pop("busbw")
            block.rows.append(Row(size=block.size, oop=Half(algbw=algbw, busbw=busbw)))
            block.filled = True

    def _scan_environment(self) -> None:
        for line in self.lines:
            if match := _SOFTWARE.match(line):
                self.env["torch"] = match["torch"]
                self.env["cuda"] = match["cuda"]
                self.env["nccl"] = _nccl_version(match["nccl"])
            elif match := _HARDWARE.match(line):
                self.env["device"] = _device_properties(match["props"])
            elif match := _PLOT.search(line):
                self.env.setdefault("plot_host", match["host"])
                self.env.setdefault("plot_ranks", int(match["ranks"]))
            elif match := _ELAPSED.match(line):
                self.env["elapsed"] = match["elapsed"]
            elif "NCCL WARN" in line:
                self.errors.append(RunError("NCCL WARN", None, line.split("NCCL WARN", 1)[1].strip()))
            elif re.match(r"^[\w.]*(Error|Exception)\b:", line):
                self.errors.append(RunError("python-exception", None, line))

    def _run(self, block: _Block) -> Run:
        collective = _NCCL_NAMES.get(block.collective, block.collective)
        params: dict[str, Any] = {"format": block.fmt, **block.params}
        if collective != block.collective:
            params["collective_name"] = block.collective
        warnings = list(block.warnings)
        decimals = 3 if block.fmt == "legacy" else 2
        implied = implied_nranks(block.rows, collective, decimals)
        if implied is not None:
            params["nranks_implied"] = implied
        rows = tuple(block.rows)
        if block.gib_labels:
            warnings.append(
                "KB/MB/GB payload labels: this script generation divided bandwidth by 2**30 while "
                f"printing GBps; values kept as printed (GiB/s; x{_GIB_PER_GB:.4f} for GB/s)"
            )
        for key in ("torch", "cuda", "device", "elapsed"):
            if key in self.env:
                params[key] = self.env[key]
        nranks = block.nranks or self.env.get("plot_ranks")
        if nranks is not None and implied is not None and implied != nranks:
            warnings.append(f"busbw/algbw implies {implied} ranks, the output says {nranks}")
        hosts = list(self.hosts)
        if not hosts and "plot_host" in self.env:
            hosts.append(self.env["plot_host"])
        status = "ok" if rows else ("failed" if self.errors else "incomplete")
        return Run(
            collective=collective,
            nccl_version=self.env.get("nccl"),
            nranks=nranks,
            hosts=tuple(hosts),
            rows=rows,
            status=status,
            errors=tuple(self.errors),
            tool="torch-bench",
            params=params,
            warnings=tuple(warnings),
        )
