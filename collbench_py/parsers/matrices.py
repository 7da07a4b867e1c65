"""CUDA sample `p2pBandwidthLatencyTest` and AMD `rocm-bandwidth-test` into Matrix records.

Both print a title, a header whose first cell is a corner label (`D\\D`, `D/D`, or `GPU`/`CPU` for
the two halves of p2pBandwidthLatencyTest's latency matrices) followed by device ids, and one row per
device. Quirks handled: a literal TAB after the row id (p2p connectivity matrix), trailing spaces,
a blank line after every row (rocm-bandwidth-test), `N/A` cells, device lines with empty fields.

Matrix names are the tool's titles without the unit (`Unidirectional P2P=Disabled Bandwidth Matrix`,
`Unidirectional copy peak bandwidth`); the latency halves get the corner label appended
(`P2P=Disabled Latency Matrix GPU`, `... CPU`). Units: `GB/s`, `us`, or None for the 0/1 access
and connectivity matrices and the NUMA distances.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from collbench_py.parsers.models import Kind, Matrix, ParsedFile, ParseError

P2P: Kind = "p2p-bandwidth-latency"
ROCM: Kind = "rocm-bandwidth-test"

_P2P_BANNER = "[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]"
_P2P_DEVICE = re.compile(
    r"^Device: (?P<id>\d+), (?P<name>.*?), pciBusID: (?P<bus>[0-9a-fA-F]+), "
    r"pciDeviceID: (?P<dev>[0-9a-fA-F]+), pciDomainID:\s*(?P<domain>[0-9a-fA-F]+)"
)
_P2P_ACCESS = re.compile(r"^Device=(?P<src>\d+) (?P<can>CAN|CANNOT) Access Peer Device=(?P<dst>\d+)")
_ROCM_DEVICE = re.compile(r"^Device: (?P<id>\d+),(?P<rest>.*)$")
_ROCM_VERSION = re.compile(r"RocmBandwidthTest Version: (?P<version>\S+)")
_HEADER = re.compile(r"^(?P<corner>D\\D|D/D|GPU|CPU)\s+(?P<ids>\d+(?:\s+\d+)*)$")
_VALUE = re.compile(r"^(?:-?\d+(?:\.\d+)?|N/A)$")
_UNIT_SUFFIX = re.compile(r"^(?P<name>.*?)\s*(?:\((?P<paren>GB/s|us|ns|ms)\)|(?P<bare>GB/s))$")


def sniff(text: str) -> Kind | None:
    # Every log of a run is asked: one scan for `Bandwidth`, which the first three markers
    # contain, spares most texts three more.
    bandwidth = "Bandwidth" in text
    if bandwidth and (
        _P2P_BANNER in text or ("P2P Connectivity Matrix" in text and "Bandwidth Matrix (GB/s)" in text)
    ):
        return P2P
    if (
        (bandwidth and "RocmBandwidthTest Version" in text)
        or "copy peak bandwidth GB/s" in text
        or ("Inter-Device Access" in text and "D/D" in text)
    ):
        return ROCM
    return None


def parse(text: str, file: str) -> ParsedFile:
    kind = sniff(text)
    if kind is None:
        raise ParseError(f"{file}: not p2pBandwidthLatencyTest or rocm-bandwidth-test output")
    reader = _Reader(kind)
    for line in text.splitlines():
        reader.feed(line.strip())
    if not reader.grids:
        raise ParseError(f"{file}: {kind} output without any matrix")
    return ParsedFile(
        file=file, kind=kind, matrices=tuple(g.matrix() for g in reader.grids), info=reader.info
    )


def _split_title(title: str) -> tuple[str, str | None]:
    match = _UNIT_SUFFIX.match(title)
    if match is None:
        return title, None
    return match["name"], match["paren"] or match["bare"]


@dataclass
class _Grid:
    name: str
    unit: str | None
    columns: list[str]
    rows: list[tuple[str, tuple[float | None, ...]]] = field(default_factory=list)

    def matrix(self) -> Matrix:
        return Matrix(
            name=self.name,
            unit=self.unit,
            row_labels=tuple(label for label, _ in self.rows),
            col_labels=tuple(self.columns),
            values=tuple(values for _, values in self.rows),
        )


class _Reader:
    """Titles, headers and rows in order; blank lines never end a matrix (rocm prints one per row)."""

    def __init__(self, kind: Kind) -> None:
        self.kind = kind
        self.info: dict[str, Any] = {}
        self.grids: list[_Grid] = []
        self.grid: _Grid | None = None
        self.title: str | None = None

    def feed(self, line: str) -> None:
        if not line:
            return
        if header := _HEADER.match(line):
            self._open(header["corner"], header["ids"].split())
            return
        tokens = line.split()
        if self.grid is not None and self._row(tokens):
            return
        self.grid = None
        if self._device(line):
            return
        if line.startswith(("***NOTE", "So you can see", "NOTE:", "Launch Command", _P2P_BANNER)):
            return
        if match := _ROCM_VERSION.search(line):
            self.info["version"] = match["version"]
            return
        self.title = line

    def _open(self, corner: str, ids: list[str]) -> None:
        base, unit = _split_title(self.title or "matrix")
        name = f"{base} {corner}" if corner in ("GPU", "CPU") else base
        self.grid = _Grid(name=name, unit=unit, columns=ids)
        self.grids.append(self.grid)

    def _row(self, tokens: list[str]) -> bool:
        assert self.grid is not None
        if len(tokens) != len(self.grid.columns) + 1 or not tokens[0].isdigit():
            return False
        if not all(_VALUE.match(token) for token in tokens[1:]):
            return False
        values = tuple(None if token == "N/A" else float(token) for token in tokens[1:])
        self.grid.rows.append((tokens[0], values))
        return True

    def _device(self, line: str) -> bool:
        devices = self.info.setdefault("devices", [])
        if match := _P2P_DEVICE.match(line):
            domain, bus, dev = (int(match[key], 16) for key in ("domain", "bus", "dev"))
            devices.append(
                {
                    "id": int(match["id"]),
                    "name": match["name"].strip() or None,
                    "pci_bus_id": match["bus"],
                    "bus_id": f"{domain:04x}:{bus:02x}:{dev:02x}",  # the form nccl-tests prints
                }
            )
            return True
        if match := _P2P_ACCESS.match(line):
            access = self.info.setdefault("peer_access", {})
            access.setdefault(match["src"], {})[match["dst"]] = match["can"] == "CAN"
            return True
        if self.kind == ROCM and (match := _ROCM_DEVICE.match(line)):
            # a GPU: `Device: 4,  ,  GPU-ab43b63dec8adaf3,  c9:0.0` (the name is often empty);
            # a CPU: `Device: 0,  AMD EPYC 7543P 32-Core Processor`
            fields = [part.strip() for part in match["rest"].split(",")]
            device: dict[str, Any] = {"id": int(match["id"]), "name": fields[0] or None}
            if len(fields) >= 3:
                device.update(type="gpu", uuid=fields[1] or None, bus_id=fields[2] or None)
            else:
                device["type"] = "cpu"
            devices.append(device)
            return True
        return False
