"""Verdicts per component inside a node: which GPU, which NVLink, which HCA or port, with evidence.

Pure functions over parsed records (nvbandwidth matrices, `nvidia-smi nvlink -s/-e`, IB ports,
perftest runs); each returns findings that name the host, the component, what it measured, what it
was measured against (a profile line, the fleet median of the same cell, the node's other ports) and
the repair to make. A healthy component gives no finding.

Attribution in a GPU matrix: a GPU is bad when most cells of its row and column are low (one GPU
slows every pair it is in); a pair i--j is bad when its own cells are low and neither GPU is bad
(the link between them, not either end).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from collbench_py.parsers.ibports import IbPort
from collbench_py.parsers.models import Matrix
from collbench_py.parsers.nvlink import NvlinkGpu
from collbench_py.parsers.perftest import PerftestRun, peak_gbits
from collbench_py.profiles import DEFAULT_MIN_DROP
from collbench_py.verdicts.stats import SEVERE_DROP

ComponentKind = Literal["gpu", "nvlink", "hca", "port"]
Severity = Literal["fail", "warn"]
Action = Literal["reseat", "ticket", "swap"]

# A value at the line or up to 5 % above it warns: the margin the anchors use.
WARN_MARGIN = 0.05
# NVLink error counters that count faults; any growth during the run is a finding (threshold 0).
ERROR_COUNTERS = ("crc", "replay", "recovery")


@dataclass(frozen=True)
class Reference:
    """What a value was measured against."""

    basis: Literal["profile", "fleet", "node"]  # a profile line, the fleet median, the node's others
    value: float | None
    source: str  # the profile line's source, "fleet median of <cell>", ...
    nodes: int | None = None  # fleet: how many nodes the median is of


@dataclass(frozen=True)
class ComponentFinding:
    host: str
    kind: ComponentKind
    # "3" (GPU index; "all" when every GPU of the node is low), "3--5" (GPU pair), "3/link7" (one
    # NVLink of GPU 3), "mlx5_2" (HCA), "mlx5_2/1" (port)
    id: str
    severity: Severity
    action: Action
    reason: str
    measured: float | None = None
    unit: str | None = None
    against: Reference | None = None
    bus_id: str | None = None  # PCI bus id where the input has one
    serial: str | None = None  # GPU UUID or serial, HCA GUID
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Cell:
    row: str
    col: str
    value: float
    ref: float
    severity: Severity | None  # None: fine


def _line_severity(value: float, line: float, warn_margin: float) -> Severity | None:
    if value < line:
        return "fail"
    return "warn" if value < line * (1 + warn_margin) else None


def _cells(matrix: Matrix) -> list[tuple[str, str, float]]:
    return [
        (row, col, value)
        for row, values in zip(matrix.row_labels, matrix.values, strict=False)
        for col, value in zip(matrix.col_labels, values, strict=False)
        if value is not None and not (row == col and _square(matrix))
    ]


def _square(matrix: Matrix) -> bool:
    return len(matrix.row_labels) > 1 and matrix.row_labels == matrix.col_labels


def _pair_id(a: str, b: str) -> str:
    first, second = sorted((a, b), key=lambda label: (len(label), label))
    return f"{first}--{second}"


def _devices(devices: Iterable[Mapping[str, Any]] | None) -> dict[str, Mapping[str, Any]]:
    return {str(device.get("id")): device for device in devices or ()}


def _attribute(
    host: str,
    matrix: Matrix,
    cells: Sequence[_Cell],
    reference: Reference,
    devices: Mapping[str, Mapping[str, Any]],
) -> list[ComponentFinding]:
    """GPUs whose row and column are mostly low, then pairs whose cells are low between fine GPUs;
    for a one-row (host to device) matrix, each low cell is its GPU."""
    unit = matrix.unit or "GB/s"
    judged = [cell for cell in cells if cell.severity]
    context: dict[str, Any] = {"matrix": matrix, "reference": reference, "unit": unit, "devices": devices}
    if not _square(matrix):
        return [
            _gpu_finding(host, _per_gpu_label(matrix, cell), [cell], cell.severity or "warn", **context)
            for cell in judged
        ]
    findings: list[ComponentFinding] = []
    bad_gpus: set[str] = set()
    for gpu in matrix.row_labels:
        own = [cell for cell in cells if gpu in (cell.row, cell.col)]
        low = [cell for cell in own if cell.severity]
        if own and len(low) * 2 > len(own):
            worst: Severity = "fail" if sum(c.severity == "fail" for c in low) * 2 > len(own) else "warn"
            bad_gpus.add(gpu)
            findings.append(_gpu_finding(host, gpu, low, worst, **context))
    if len(matrix.row_labels) > 2 and bad_gpus == set(matrix.row_labels):
        # every GPU low: the shared part (baseboard, NVSwitch, clocks), not a GPU to reseat
        return [_whole_board(host, judged, findings, **context)]
    pairs: dict[str, list[_Cell]] = {}
    for cell in judged:
        if cell.row in bad_gpus or cell.col in bad_gpus:
            continue
        pairs.setdefault(_pair_id(cell.row, cell.col), []).append(cell)
    for pair, low in pairs.items():
        severity: Severity = "fail" if any(c.severity == "fail" for c in low) else "warn"
        worst_cell = min(low, key=lambda c: c.value)
        findings.append(
            ComponentFinding(
                host=host,
                kind="nvlink",
                id=pair,
                severity=severity,
                action="ticket",
                reason=(
                    f"GPU pair {pair} {matrix.name}: {worst_cell.value:g} {unit} against "
                    f"{_describe(reference, worst_cell.ref, unit)}; both GPUs are fine with the others: "
                    "the link between them (open a ticket for the NVLink)"
                ),
                measured=worst_cell.value,
                unit=unit,
                against=_with_value(reference, worst_cell.ref),
                evidence=tuple(_evidence(low, unit)),
            )
        )
    return findings


def _whole_board(
    host: str,
    low: Sequence[_Cell],
    per_gpu: Sequence[ComponentFinding],
    *,
    matrix: Matrix,
    reference: Reference,
    unit: str,
    devices: Mapping[str, Mapping[str, Any]],
) -> ComponentFinding:
    del devices  # no single GPU to name
    worst = min(low, key=lambda c: c.value)
    severity: Severity = "fail" if any(f.severity == "fail" for f in per_gpu) else "warn"
    return ComponentFinding(
        host=host,
        kind="gpu",
        id="all",
        severity=severity,
        action="ticket",
        reason=(
            f"every GPU of {matrix.name} is low, worst {worst.value:g} {unit} against "
            f"{_describe(reference, worst.ref, unit)}: the baseboard or NVSwitch they share, not one GPU "
            "(open a ticket for the node)"
        ),
        measured=worst.value,
        unit=unit,
        against=_with_value(reference, worst.ref),
        evidence=tuple(_evidence(low, unit)),
    )


def _per_gpu_label(matrix: Matrix, cell: _Cell) -> str:
    """The GPU of a host-to-device cell: its column where the matrix is one row, else its row."""
    return cell.col if len(matrix.row_labels) == 1 else cell.row


def _gpu_finding(
    host: str,
    gpu: str,
    low: Sequence[_Cell],
    severity: Severity,
    *,
    matrix: Matrix,
    reference: Reference,
    unit: str,
    devices: Mapping[str, Mapping[str, Any]],
) -> ComponentFinding:
    worst = min(low, key=lambda c: c.value)
    device = devices.get(gpu, {})
    scope = "of its row and column" if _square(matrix) else ""
    return ComponentFinding(
        host=host,
        kind="gpu",
        id=gpu,
        severity=severity,
        action="reseat",
        reason=(
            f"GPU {gpu} {matrix.name}: {len(low)} cells {scope} low, worst {worst.value:g} {unit} against "
            f"{_describe(reference, worst.ref, unit)} (reseat the GPU; a ticket if it stays low)"
        ).replace("  ", " "),
        measured=worst.value,
        unit=unit,
        against=_with_value(reference, worst.ref),
        bus_id=device.get("bus_id"),
        serial=device.get("serial") or device.get("uuid"),
        evidence=tuple(_evidence(low, unit)),
    )


def _with_value(reference: Reference, value: float) -> Reference:
    return Reference(reference.basis, value, reference.source, reference.nodes)


def _describe(reference: Reference, value: float, unit: str) -> str:
    if reference.basis == "fleet":
        return f"the fleet median {value:g} {unit} over {reference.nodes} nodes"
    return f"the line {value:g} {unit} ({reference.source})"


def _evidence(cells: Iterable[_Cell], unit: str) -> list[str]:
    return [f"{c.row} -> {c.col}: {c.value:g} {unit} (reference {c.ref:g})" for c in cells]


def gpu_matrix_findings(
    host: str,
    matrix: Matrix,
    line_gbps: float,
    *,
    source: str = "profile",
    devices: Iterable[Mapping[str, Any]] | None = None,
    warn_margin: float = WARN_MARGIN,
) -> list[ComponentFinding]:
    """One node's nvbandwidth matrix (device to device, or host to device per GPU) against a line:
    below it fails, within `warn_margin` above it warns. `devices`: the parser's `info["devices"]`,
    for the PCI bus id of a GPU named."""
    reference = Reference("profile", line_gbps, source)
    cells = [
        _Cell(row, col, value, line_gbps, _line_severity(value, line_gbps, warn_margin))
        for row, col, value in _cells(matrix)
    ]
    return _attribute(host, matrix, cells, reference, _devices(devices))


def fleet_matrix_findings(
    matrices: Mapping[str, Matrix],
    *,
    min_drop: float = DEFAULT_MIN_DROP,
    min_nodes: int = 3,
    devices: Mapping[str, Iterable[Mapping[str, Any]]] | None = None,
) -> list[ComponentFinding]:
    """The same matrix on nodes of one SKU and topology (host -> matrix): a cell `min_drop` or more
    below the fleet median of that cell warns, half of it or more fails (the fleet convention of
    verdicts/bandwidth.py), whatever the profile line. Fewer than `min_nodes` nodes: no verdict."""
    shapes = Counter((m.row_labels, m.col_labels) for m in matrices.values())
    if not shapes:
        return []
    shape = shapes.most_common(1)[0][0]
    alike = {host: m for host, m in matrices.items() if (m.row_labels, m.col_labels) == shape}
    if len(alike) < min_nodes:
        return []
    per_cell: dict[tuple[str, str], list[float]] = {}
    for matrix in alike.values():
        for row, col, value in _cells(matrix):
            per_cell.setdefault((row, col), []).append(value)
    medians = {key: statistics.median(values) for key, values in per_cell.items()}
    findings: list[ComponentFinding] = []
    for host, matrix in alike.items():
        reference = Reference("fleet", None, f"fleet median of each cell of {matrix.name}", len(alike))
        cells = []
        for row, col, value in _cells(matrix):
            median = medians[(row, col)]
            drop = (median - value) / median if median > 0 else 0.0
            severity: Severity | None = None
            if drop >= max(min_drop, SEVERE_DROP):
                severity = "fail"
            elif drop >= min_drop:
                severity = "warn"
            cells.append(_Cell(row, col, value, median, severity))
        findings += _attribute(host, matrix, cells, reference, _devices((devices or {}).get(host)))
    return findings


def _is_error_counter(name: str) -> bool:
    return any(word in name for word in ERROR_COUNTERS)


def nvlink_findings(
    host: str,
    state: Sequence[NvlinkGpu],
    expected_links_per_gpu: int | None,
    counters_before: Sequence[NvlinkGpu] = (),
    counters_after: Sequence[NvlinkGpu] = (),
    *,
    source: str = "profile",
) -> list[ComponentFinding]:
    """`nvidia-smi nvlink -s` (and `-e` before and after the node's benchmarks): a link down, fewer
    active links than the profile expects, a link slower than the GPU's others, an error counter that
    grew during the run."""
    findings: list[ComponentFinding] = []
    speeds = Counter(
        link.speed_gbs for gpu in state for link in gpu.links if link.state == "up" and link.speed_gbs
    )
    normal_speed = speeds.most_common(1)[0][0] if speeds else None
    for gpu in state:
        gpu_id = str(gpu.index)
        down = [link.link for link in gpu.links if link.state == "down"]
        for link in down:
            findings.append(
                ComponentFinding(
                    host,
                    "nvlink",
                    f"{gpu_id}/link{link}",
                    "fail",
                    "ticket",
                    f"GPU {gpu_id} NVLink {link} is down (inactive)",
                    serial=gpu.uuid,
                    evidence=(f"GPU {gpu_id} Link {link}: <inactive>",),
                )
            )
        active = sum(link.state == "up" for link in gpu.links)
        if expected_links_per_gpu is not None and active < expected_links_per_gpu:
            findings.append(
                ComponentFinding(
                    host,
                    "gpu",
                    gpu_id,
                    "fail",
                    "ticket",
                    f"GPU {gpu_id} has {active} active NVLinks, {expected_links_per_gpu} expected ({source})",
                    measured=active,
                    unit="links",
                    against=Reference("profile", expected_links_per_gpu, source),
                    serial=gpu.uuid,
                )
            )
        for link in gpu.links:
            if link.state == "up" and normal_speed and link.speed_gbs and link.speed_gbs < normal_speed:
                findings.append(
                    ComponentFinding(
                        host,
                        "nvlink",
                        f"{gpu_id}/link{link.link}",
                        "fail",
                        "ticket",
                        f"GPU {gpu_id} NVLink {link.link} runs at {link.speed_gbs:g} GB/s, the node's "
                        f"others at {normal_speed:g} GB/s",
                        measured=link.speed_gbs,
                        unit="GB/s",
                        against=Reference("node", normal_speed, "the node's other NVLinks"),
                        serial=gpu.uuid,
                    )
                )
    before = {(g.index, link.link): link.counters for g in counters_before for link in g.links}
    for gpu in counters_after:
        for link in gpu.links:
            earlier = before.get((gpu.index, link.link), {})
            for name, value in link.counters.items():
                start = earlier.get(name)
                if not _is_error_counter(name) or not isinstance(value, (int, float)):
                    continue
                if not isinstance(start, (int, float)) or value <= start:
                    continue
                findings.append(
                    ComponentFinding(
                        host,
                        "nvlink",
                        f"{gpu.index}/link{link.link}",
                        "fail",
                        "ticket",
                        f"GPU {gpu.index} NVLink {link.link} {name} grew by {value - start:g} during the run "
                        f"({start:g} -> {value:g}; any growth fails)",
                        measured=value - start,
                        unit="errors",
                        against=Reference("profile", 0, "error counters must not grow (threshold 0)"),
                        serial=gpu.uuid,
                    )
                )
    return findings


def _width(width: str | None) -> int | None:
    digits = (width or "").upper().rstrip("X")
    return int(digits) if digits.isdigit() else None


def port_findings(
    host: str,
    ports: Sequence[IbPort],
    *,
    rate_gbps: float | None = None,
    rate_source: str = "profile",
) -> list[ComponentFinding]:
    """The compute HCAs' ports (those NCCL would use; the caller picks them): a port not Active and
    LinkUp, a width below the node's usual width (1X of 4X), a rate below the node's other ports or
    the profile's rate."""
    findings: list[ComponentFinding] = []
    widths = Counter(_width(p.width) for p in ports if p.up and _width(p.width))
    normal_width = widths.most_common(1)[0][0] if widths else None
    rates = [p.rate_gbps for p in ports if p.up and p.rate_gbps]
    node_rate = max(rates) if rates else None
    for port in ports:
        port_id = f"{port.ca}/{port.port}"
        if not port.up or (port.physical_state and port.physical_state != "link-up"):
            findings.append(
                ComponentFinding(
                    host,
                    "port",
                    port_id,
                    "fail",
                    "swap",
                    f"{port_id} is {port.state or 'not active'} "
                    f"(physical state {port.physical_state or '?'}): "
                    "check the cable and transceiver, swap them",
                    serial=port.port_guid,
                    evidence=(f"state {port.state}, physical state {port.physical_state}",),
                )
            )
            continue
        width = _width(port.width)
        if width and normal_width and width < normal_width:
            findings.append(
                ComponentFinding(
                    host,
                    "port",
                    port_id,
                    "fail",
                    "swap",
                    f"{port_id} runs at width {port.width}, the node's other ports at {normal_width}X "
                    "(a lane down: swap the cable or transceiver)",
                    measured=width,
                    unit="lanes",
                    against=Reference("node", normal_width, "the node's other compute ports"),
                    serial=port.port_guid,
                )
            )
        expected = max(x for x in (rate_gbps, node_rate) if x) if (rate_gbps or node_rate) else None
        if port.rate_gbps and expected and port.rate_gbps < expected:
            basis: Literal["profile", "node"] = "profile" if rate_gbps == expected else "node"
            source = rate_source if basis == "profile" else "the node's other compute ports"
            findings.append(
                ComponentFinding(
                    host,
                    "port",
                    port_id,
                    "fail",
                    "swap",
                    f"{port_id} rate {port.rate_gbps:g} Gb/s below {expected:g} Gb/s ({source})",
                    measured=port.rate_gbps,
                    unit="Gb/s",
                    against=Reference(basis, expected, source),
                    serial=port.port_guid,
                )
            )
    return findings


def loopback_findings(
    host: str,
    runs: Mapping[str, PerftestRun],
    line_gbits: float,
    *,
    source: str = "profile",
    warn_margin: float = WARN_MARGIN,
) -> list[ComponentFinding]:
    """Per-HCA loopback (HCA name -> its perftest run, the client side): below the line fails, within
    `warn_margin` above it warns, a run that never measured fails (a check that never ran is no pass)."""
    findings: list[ComponentFinding] = []
    for hca, run in runs.items():
        port = f"{hca}/{run.port}" if run.port else hca
        value = peak_gbits(run)
        against = Reference("profile", line_gbits, source)
        if value is None:
            findings.append(
                ComponentFinding(
                    host,
                    "hca",
                    hca,
                    "fail",
                    "ticket",
                    f"{port} loopback did not measure: {run.reason or run.failure or 'no result'}",
                    against=against,
                    evidence=tuple(run.warnings),
                )
            )
            continue
        severity = _line_severity(value, line_gbits, warn_margin)
        if severity:
            findings.append(
                ComponentFinding(
                    host,
                    "hca",
                    hca,
                    severity,
                    "ticket",
                    f"{port} loopback {value:g} Gb/s against the line {line_gbits:g} Gb/s ({source})",
                    measured=value,
                    unit="Gb/s",
                    against=against,
                    evidence=(run.command or "",) if run.command else (),
                )
            )
    return findings
