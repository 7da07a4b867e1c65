"""NVIDIA nvbandwidth output (v0.2 to v0.10, text or `-j` JSON) into Matrix records.

Text layout, per testcase: `Running <testcase>.`, a title (`memcpy CE GPU(row) -> GPU(column)
bandwidth (GB/s)`), a header of column labels, one row per source (` 0     25.17`; v0.4 and older
have no leading space), `N/A` where a pair was not measured, then `SUM <key> <value>`. The key is the
testcase name, or with a suffix where one testcase prints several matrices (v0.6+ bidirectional
device tests: `_read1`, `_read2`, `_total`), so each Matrix is named by its SUM key. v0.9+ adds
`COEFFICIENT_OF_VARIATION <key> <value>` after the SUM: one number per matrix, kept in
`info["coefficient_of_variation"][key]` (a matrix titled as a coefficient of variation, should a
version print one, becomes a Matrix named `<key> coefficient_of_variation`).

The title is not trusted for the testcase (v0.2 prints a CE title for an SM test); the `Running`
line is. Several invocations may share one file (each starts with its version banner).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from collbench_py.parsers.models import Kind, Matrix, ParsedFile, ParseError

KIND: Kind = "nvbandwidth"

_LAUNCHER_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\[[^\]\s]*\]:)")
_VERSION = re.compile(r"^nvbandwidth Version: (?P<version>\S+)")
_GIT = re.compile(r"^Built from Git version: ?(?P<git>\S*)")
_CUDA = re.compile(r"^CUDA (?P<which>Runtime|Driver) Version(?: \(API\))?: (?P<value>.+)$")
_DRIVER = re.compile(r"^Driver Version: (?P<value>\S+)")
_MPI = re.compile(r"^MPI version: (?P<value>.+)$")
_DEVICE = re.compile(
    r"^Device (?P<id>\d+): (?P<name>.+?)(?: \((?P<bus>[0-9a-fA-F]+:[0-9a-fA-F]+:[0-9a-fA-F.]+)\))?$"
)
_PROCESS = re.compile(
    r"^Process (?P<process>\d+) \((?P<host>[^)]*)\): device (?P<id>-?\d+): (?P<name>.+?)"
    r"(?: \((?P<bus>[0-9a-fA-F]+:[0-9a-fA-F]+:[0-9a-fA-F.]+)\))?$"
)
_RUNNING = re.compile(r"^Running (?P<testcase>\w+)\.$")
_SUM = re.compile(r"^SUM (?P<key>\w+) (?P<value>-?[\d.]+(?:e[+-]?\d+)?)")
_PERF = re.compile(r"^&&&& PERF (?P<key>\w+) (?P<value>-?[\d.]+(?:e[+-]?\d+)?)")
_COV = re.compile(r"^COEFFICIENT_OF_VARIATION (?P<key>\w+) (?P<value>-?[\d.]+(?:e[+-]?\d+)?)")
_STATUS = re.compile(r"^(?P<status>Waived|WAIVED|Not Found|Error|ERROR)\b:?\s*(?P<message>.*)$")
_WAIVING = re.compile(r"^Waiving (?P<testcase>\w+)\.$")  # v0.2
_FAILURE = re.compile(r"^(?:ASSERT in expression|.*\bCUDA_ERROR_\w+)")
_UNIT = re.compile(r"\((?P<unit>[A-Za-z/]+)\)\s*$")
_VALUE = re.compile(r"^(?:-?\d+(?:\.\d+)?(?:e[+-]?\d+)?|N/A)$")


def sniff(text: str) -> Kind | None:
    if "nvbandwidth Version:" in text:
        return KIND
    head = text.lstrip()[:4096]
    if head.startswith("{") and '"nvbandwidth"' in head:
        return KIND
    # a banner-less excerpt: `Running <testcase>.` and `SUM <testcase> <value>` of a known testcase family
    if "\nSUM " in text and "Running " in text:
        found = re.search(r"^SUM \w+_(?:ce|sm)(?:_\w+)? [\d.]+\s*$", text, re.MULTILINE)
        if found and re.search(r"^Running \w+_(?:ce|sm)\.\s*$", text, re.MULTILINE):
            return KIND
    return None


def parse(text: str, file: str) -> ParsedFile:
    if '"nvbandwidth"' in text and "nvbandwidth Version:" not in text:
        document = _json_document(text)
        if document is not None:
            return _from_json(document, file)
    reader = _TextReader()
    for raw in text.splitlines():
        reader.feed(_LAUNCHER_PREFIX.sub("", raw).rstrip())
    if not reader.matrices and "version" not in reader.info:
        raise ParseError(f"{file}: no nvbandwidth banner or result matrix found")
    return ParsedFile(
        file=file,
        kind=KIND,
        matrices=tuple(reader.finished()),
        info=reader.info,
        warnings=tuple(reader.warnings),
    )


def _number(token: str) -> float | None:
    return None if token == "N/A" else float(token)


def _unit(title: str | None) -> str | None:
    """`(GB/s)`, `(ns)` at the end of the title; multinode bisect titles say only `BW`."""
    match = _UNIT.search(title or "")
    if match:
        return match["unit"]
    return "GB/s" if re.search(r"\b(?:BW|bandwidth)\b", title or "") else None


@dataclass
class _Grid:
    """A matrix being read: its title, column labels, rows, and the SUM that closes it."""

    testcase: str | None
    title: str | None
    columns: list[str]
    rows: list[tuple[str, list[float | None]]] = field(default_factory=list)
    key: str | None = None
    total: float | None = None

    def matrix(self) -> Matrix:
        name = self.key or self.testcase or (self.title or "unnamed")
        if self.title and "coefficient of variation" in self.title.lower():
            name = f"{name} coefficient_of_variation"
        return Matrix(
            name=name,
            unit=_unit(self.title),
            row_labels=tuple(label for label, _ in self.rows),
            col_labels=tuple(self.columns),
            values=tuple(tuple(values) for _, values in self.rows),
            sum=self.total,
        )


class _TextReader:
    """Line by line; a header line (labels only) right after a title opens a matrix."""

    def __init__(self) -> None:
        self.info: dict[str, Any] = {}
        self.matrices: list[_Grid] = []
        self.warnings: list[str] = []
        self.testcase: str | None = None
        self.title: str | None = None
        self.grid: _Grid | None = None
        self.previous = ""

    def feed(self, line: str) -> None:
        stripped = line.strip()
        previous, self.previous = self.previous, stripped
        if self.grid is not None:
            if self._row(stripped):
                return
            self.grid = None  # rows are contiguous: anything else ends the matrix
        if not stripped:
            return
        if (match := _SUM.match(stripped)) or (match := _PERF.match(stripped)):
            self._close(match["key"], float(match["value"]))
        elif match := _COV.match(stripped):
            self.info.setdefault("coefficient_of_variation", {})[match["key"]] = float(match["value"])
        elif match := _RUNNING.match(stripped):
            self.testcase, self.title, self.grid = match["testcase"], None, None
        elif self._banner(stripped, previous):
            self.grid = None
        elif self.title is not None and self._header(stripped):
            return
        elif match := _WAIVING.match(stripped):
            self.info.setdefault("testcase_status", {})[match["testcase"]] = "Waived"
        elif _FAILURE.match(stripped):
            self.warnings.append(f"{self.testcase or 'nvbandwidth'}: {stripped}")
        elif match := _STATUS.match(stripped):
            status = self.info.setdefault("testcase_status", {})
            status[self.testcase or "-"] = match["status"].capitalize()
            if match["message"]:
                self.warnings.append(
                    f"{self.testcase or 'nvbandwidth'}: {match['status']}: {match['message']}"
                )
        else:
            self.title = stripped

    def _header(self, line: str) -> bool:
        labels = line.split()
        if not labels or not all(label.isdigit() for label in labels):  # column labels are device ids
            return False
        self.grid = _Grid(self.testcase, self.title, labels)
        self.matrices.append(self.grid)
        self.title = None
        return True

    def _row(self, line: str) -> bool:
        assert self.grid is not None
        tokens = line.split()
        if len(tokens) != len(self.grid.columns) + 1 or not all(_VALUE.match(t) for t in tokens[1:]):
            return False
        self.grid.rows.append((tokens[0], [_number(token) for token in tokens[1:]]))
        return True

    def _close(self, key: str, value: float) -> None:
        """A SUM belongs to the latest matrix that has none yet."""
        for grid in reversed(self.matrices):
            if grid.key is None:
                grid.key, grid.total = key, value
                return
            break
        self.warnings.append(f"SUM {key} without a matrix")

    def _banner(self, line: str, previous: str) -> bool:
        info = self.info
        if match := _VERSION.match(line):
            info.setdefault("version", match["version"])
            if match["version"] not in info.setdefault("versions", []):
                info["versions"].append(match["version"])
        elif match := _GIT.match(line):
            info.setdefault("git_version", match["git"] or None)
        elif match := _CUDA.match(line):
            info.setdefault(f"cuda_{match['which'].lower()}_version", _cuda_version(match["value"]))
        elif match := _DRIVER.match(line):
            info.setdefault("driver_version", match["value"])
        elif match := _MPI.match(line):
            info.setdefault("mpi_version", match["value"].strip())
        elif match := _PROCESS.match(line):
            device = {"process": int(match["process"]), "host": match["host"], "id": int(match["id"])}
            device.update(name=match["name"].strip(), bus_id=match["bus"])
            self._add_device(device)
            if match["host"] not in info.setdefault("hosts", []):
                info["hosts"].append(match["host"])
        elif match := _DEVICE.match(line):
            if int(match["id"]) == 0 and previous and " " not in previous and ":" not in previous:
                info.setdefault("hostname", previous)  # v0.8+ prints the host name above the list
                if self.title == previous:
                    self.title = None
            self._add_device({"id": int(match["id"]), "name": match["name"].strip(), "bus_id": match["bus"]})
        elif line.startswith(("NOTE:", "Additional system-specific", "Performance can vary")):
            pass
        else:
            return False
        return True

    def _add_device(self, device: dict[str, Any]) -> None:
        devices = self.info.setdefault("devices", [])
        if device not in devices:
            devices.append(device)

    def finished(self) -> list[Matrix]:
        if len(self.info.get("versions", ())) < 2:
            self.info.pop("versions", None)
        grids = [grid for grid in self.matrices if grid.rows]
        titles = {grid.matrix().name: grid.title for grid in grids if grid.title}
        if titles:
            self.info["titles"] = titles  # the direction and copy engine, as the tool describes them
        return [grid.matrix() for grid in grids]


def _cuda_version(raw: str) -> int | str:
    """`12040`, or v0.10's `13.2 (13020)`: the integer code where printed, else the text."""
    codes = re.findall(r"\b(\d{4,6})\b", raw)
    return int(codes[-1]) if codes else raw.strip()


def _json_document(text: str) -> dict[str, Any] | None:
    """The `-j` document: the first JSON object with an `nvbandwidth` key (launcher lines may precede it)."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            document, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
            continue
        if isinstance(document, dict) and isinstance(document.get("nvbandwidth"), dict):
            return document
        start = text.find("{", start + 1)
    return None


def _from_json(document: dict[str, Any], file: str) -> ParsedFile:
    body = document["nvbandwidth"]
    info: dict[str, Any] = {}
    version = body.get("version") or body.get("git_version")
    if version:
        info["version"] = version
    if body.get("git_version"):
        info["git_version"] = body["git_version"]
    if "CUDA Runtime Version" in body:
        info["cuda_runtime_version"] = _cuda_version(str(body["CUDA Runtime Version"]))
    if "Driver Version" in body:
        info["driver_version"] = str(body["Driver Version"])
    devices = []
    for entry in body.get("GPU Device list") or []:
        # "0: NVIDIA GB200 (00000008:06:00): (n179-067-085)"
        match = re.match(r"^(\d+): (.+?)(?: \(([0-9a-fA-F:.]+)\))?(?:: \(([^)]*)\))?$", str(entry))
        if match:
            devices.append({"id": int(match[1]), "name": match[2], "bus_id": match[3], "host": match[4]})
    if devices:
        info["devices"] = devices
    warnings = [f"nvbandwidth: {body[key]}" for key in ("error", "warning") if body.get(key)]
    matrices = []
    status: dict[str, str] = {}
    for testcase in body.get("testcases") or []:
        name = str(testcase.get("name", "unnamed"))
        status[name] = str(testcase.get("status", ""))
        if testcase.get("error"):
            warnings.append(f"{name}: {testcase['error']}")
        grid = testcase.get("bandwidth_matrix") or []
        if not grid or not all(isinstance(row, list) and row for row in grid):
            continue
        values = tuple(tuple(_json_number(cell) for cell in row) for row in grid)
        description = testcase.get("bandwidth_description")
        total = testcase.get("sum")
        matrices.append(
            Matrix(
                name=name,
                unit=_unit(description),
                row_labels=tuple(str(i) for i in range(len(values))),
                col_labels=tuple(str(j) for j in range(max(len(row) for row in values))),
                values=values,
                sum=float(total) if isinstance(total, (int, float)) else None,
            )
        )
    if status:
        info["testcase_status"] = status
    return ParsedFile(file=file, kind=KIND, matrices=tuple(matrices), info=info, warnings=tuple(warnings))


def _json_number(cell: Any) -> float | None:
    try:
        return float(cell)
    except (TypeError, ValueError):
        return None
