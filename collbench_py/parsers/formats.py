"""Serialise parsed files as JSON, CSV or a fixed-width text table.

JSON is the stable interface (docs/parse-json.md): one object per file, exactly
`ParsedFile.to_dict()`. CSV flattens benchmark runs to one line per (run, row, half);
topology and matrix files have no runs and give no CSV lines (their data is in the JSON).
Files of the node-check kinds (perftest, NVLink, IB ports, dcgmi diag) give their records' own
columns, under a header line of their own written where the columns change.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

from collbench_py.parsers.models import Half, Matrix, ParsedFile, Row, Run, Topology

CSV_FIELDS = (
    "file",
    "kind",
    "run",
    "collective",
    "tool",
    "tool_version",
    "nccl_version",
    "nranks",
    "hosts",
    "status",
    "avg_busbw",
    "oob",
    "size",
    "count",
    "dtype",
    "redop",
    "root",
    "half",
    "time_us",
    "algbw",
    "busbw",
    "wrong",
    "error",
)


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: a non-finite float becomes null, recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def json_object(parsed: ParsedFile) -> dict[str, Any]:
    """The JSON object of one file: `to_dict()`, with non-finite floats as null."""
    return _finite(parsed.to_dict())


def write_json(parsed_files: Iterable[ParsedFile], stream: TextIO) -> None:
    """Write a JSON list, one object per file, streaming so thousands of files need little memory."""
    stream.write("[")
    for index, parsed in enumerate(parsed_files):
        stream.write(",\n" if index else "\n")
        stream.write(json.dumps(json_object(parsed), allow_nan=False))
    stream.write("\n]\n")


# --- CSV ---------------------------------------------------------------------------------


def _half_fields(name: str, half: Half) -> dict[str, Any]:
    return {
        "half": name,
        "time_us": half.time_us,
        "algbw": half.algbw,
        "busbw": half.busbw,
        "wrong": half.wrong,
        "error": half.error,
    }


def csv_records(parsed: ParsedFile) -> Iterator[dict[str, Any]]:
    """One record per (run, row, half): the run's fields repeated on each.

    A run without rows (it failed or hung before the first size) still gives one record with
    empty row fields, so its status is not lost. Files without runs give nothing.
    """
    for run_index, run in enumerate(parsed.runs):
        base = {
            "file": parsed.file,
            "kind": parsed.kind,
            "run": run_index,
            "collective": run.collective,
            "tool": run.tool,
            "tool_version": run.tool_version,
            "nccl_version": run.nccl_version,
            "nranks": run.nranks,
            "hosts": " ".join(run.hosts),
            "status": run.status,
            "avg_busbw": run.avg_busbw,
            "oob": run.oob,
        }
        if not run.rows:
            yield base
        for row in run.rows:
            row_fields = {
                "size": row.size,
                "count": row.count,
                "dtype": row.dtype,
                "redop": row.redop,
                "root": row.root,
            }
            yield {**base, **row_fields, **_half_fields("oop", row.oop)}
            if row.ip is not None:
                yield {**base, **row_fields, **_half_fields("ip", row.ip)}


def _csv_value(value: Any) -> Any:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    return value


class CsvWriter:
    """Write a CSV header, then the records of each file as it comes.

    The header is written with the first line, so that a file of the node-check kinds starts with
    its own columns; `close()` writes the benchmark header where nothing was written at all."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._writer: csv.DictWriter[str] | None = None
        self._fields: tuple[str, ...] = ()

    def write(self, parsed: ParsedFile) -> None:
        for record in csv_records(parsed):
            self._writerow(CSV_FIELDS, record)
        for item in parsed.records:
            fields = ("file", "kind", *item.CSV_FIELDS)
            for row in item.csv_rows():
                self._writerow(fields, {"file": parsed.file, "kind": parsed.kind, **row})

    def _writerow(self, fields: tuple[str, ...], row: dict[str, Any]) -> None:
        if self._writer is None or fields != self._fields:  # another record kind: a header line of its own
            self._fields = fields
            self._writer = csv.DictWriter(self._stream, fieldnames=fields, lineterminator="\n")
            self._writer.writeheader()
        self._writer.writerow({key: _csv_value(row.get(key)) for key in fields})

    def close(self) -> None:
        if self._writer is None:
            csv.DictWriter(self._stream, fieldnames=CSV_FIELDS, lineterminator="\n").writeheader()


def write_csv(parsed_files: Iterable[ParsedFile], stream: TextIO) -> None:
    writer = CsvWriter(stream)
    for parsed in parsed_files:
        writer.write(parsed)
    writer.close()


# --- text table --------------------------------------------------------------------------


def human_size(size: int) -> str:
    """1048576 -> '1 MiB', 8 -> '8 B'; a size that is no whole number of units gets a '~': '~1.5 KiB'."""
    value, unit = float(size), "B"
    for bigger in ("KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1023.95:  # so 1048560 is "~1.0 MiB", not "~1024.0 KiB"
            break
        value, unit = value / 1024, bigger
    return f"{value:.0f} {unit}" if value == int(value) else f"~{value:.1f} {unit}"


def _number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _wrong(row: Row) -> str:
    halves = [row.oop] if row.ip is None else [row.oop, row.ip]
    if all(half.wrong is None for half in halves) and any(half.error is not None for half in halves):
        # Pre-2.13 logs print a max delta (`error`) instead of a count.
        return "err " + "/".join("-" if half.error is None else f"{half.error:g}" for half in halves)
    return "/".join("N/A" if half.wrong is None else str(half.wrong) for half in halves)


def _run_headline(index: int, run: Run) -> str:
    parts = [f"run {index}: {run.collective or '?'}"]
    if run.nranks is not None:
        parts.append(f"{run.nranks} ranks")
    if run.hosts:
        shown = " ".join(run.hosts[:8]) + (f" (+{len(run.hosts) - 8} more)" if len(run.hosts) > 8 else "")
        parts.append(f"hosts: {shown}")
    parts.append(f"status: {run.status}")
    if run.avg_busbw is not None:
        parts.append(f"avg busbw {run.avg_busbw:g} GB/s")
    return "  ".join(parts)


def _run_table(index: int, run: Run) -> list[str]:
    lines = [_run_headline(index, run)]
    if run.rows:
        lines.append(f"  {'size':>12}  {'':<12}  {'busbw oop':>10}  {'busbw ip':>10}  {'wrong':>9}")
        for row in run.rows:
            size, busbw_oop = f"({human_size(row.size)})", _number(row.oop.busbw)
            busbw_ip = _number(row.ip.busbw) if row.ip is not None else ""
            lines.append(f"  {row.size:>12}  {size:<12}  {busbw_oop:>10}  {busbw_ip:>10}  {_wrong(row):>9}")
    else:
        lines.append("  (no rows)")
    lines.extend(f"  error: {e.kind}{f' on {e.host}' if e.host else ''}: {e.message}" for e in run.errors)
    lines.extend(f"  warning: {warning}" for warning in run.warnings)
    return lines


def _grid(header: list[str], rows: list[list[str]]) -> list[str]:
    """Left-aligned columns, as wide as their widest cell; short rows are padded."""
    ncols = max(len(row) for row in [header, *rows])
    table = [[*row, *[""] * (ncols - len(row))] for row in [header, *rows]]
    width = [max(len(row[i]) for row in table) for i in range(ncols)]
    lines = ("  ".join(text.ljust(w) for text, w in zip(row, width, strict=True)) for row in table)
    return ["  " + line.rstrip() for line in lines]


def _label_grid(matrix: dict[str, dict[str, str]], extra: dict[str, dict[str, str | None]]) -> list[str]:
    columns = list(dict.fromkeys(column for cells in matrix.values() for column in cells))
    extra_names = [name for name, values in extra.items() if values]
    rows = [
        [
            label,
            *(cells.get(column, "") for column in columns),
            *(extra[name].get(label) or "N/A" for name in extra_names),
        ]
        for label, cells in matrix.items()
    ]
    return _grid(["", *columns, *extra_names], rows)


def _topology_table(topology: Topology) -> list[str]:
    lines: list[str] = []
    if topology.links:
        extra = {
            "CPU Affinity": topology.cpu_affinity,
            "NUMA Affinity": topology.numa_affinity,
            "GPU NUMA ID": topology.gpu_numa_id,
        }
        lines += _label_grid(topology.links, extra)
    for name, matrix in topology.matrices.items():
        lines.append(f"  {name}:")
        lines += _label_grid(matrix, {})
    if topology.nics:
        lines.append("  NICs: " + ", ".join(f"{nic}={dev}" for nic, dev in topology.nics.items()))
    return lines or ["  (empty topology)"]


def _matrix_table(matrix: Matrix) -> list[str]:
    head = matrix.name + (f" ({matrix.unit})" if matrix.unit else "")
    if matrix.sum is not None:
        head += f"  SUM {matrix.sum:g}"
    ncols = max([len(matrix.col_labels), *(len(values) for values in matrix.values)])
    columns = [*matrix.col_labels, *[""] * (ncols - len(matrix.col_labels))]
    labels = [*matrix.row_labels, *[""] * (len(matrix.values) - len(matrix.row_labels))]
    rows = [
        [label, *("N/A" if value is None else f"{value:g}" for value in values)]
        for label, values in zip(labels, matrix.values, strict=True)
    ]
    return [head, *_grid(["", *columns], rows)]


def format_table(parsed: ParsedFile) -> str:
    """A readable fixed-width view of one parsed file."""
    lines = [f"{parsed.file}  ({parsed.kind})"]
    for index, run in enumerate(parsed.runs):
        lines += _run_table(index, run)
    if parsed.topology is not None:
        lines += _topology_table(parsed.topology)
    for matrix in parsed.matrices:
        lines += _matrix_table(matrix)
    for record in parsed.records:
        lines += record.table_lines()
    lines += [f"  warning: {warning}" for warning in parsed.warnings]
    if not (parsed.runs or parsed.topology or parsed.matrices or parsed.records):
        lines.append("  (nothing to show)")
    return "\n".join(lines) + "\n"


def write_table(parsed_files: Iterable[ParsedFile], stream: TextIO) -> None:
    for index, parsed in enumerate(parsed_files):
        if index:
            stream.write("\n")
        stream.write(format_table(parsed))
