"""Read hosts/<host>/node/ (written by collbench_py/node/node_checks.py) into a NodeChecks record.

checks.json says what ran: each check's name, status ("ok", "failed", "timeout", "skipped"), note,
argv, rc, seconds and the files it wrote. Each file is read through the run directory's own reader
(size cap, no link out of the run directory) and the project's parsers: nvbandwidth.json/.txt into
matrices (or, where a node had no nvbandwidth, p2p-bandwidth-latency.txt of a prebuilt
p2pBandwidthLatencyTest), `nvidia-smi nvlink -s/-e` into links and counters,
ibstat/ibv_devinfo/ibdev2netdev into ports, loopback-<hca>.txt into perftest runs. What cannot be
read is a note, never an exception; a check checks.json does not list, or lists as skipped, is
never taken as passed.

Component ids (the results.json contract): GPU "gpu3", GPU pair "gpu3--gpu5" (i < j; a directional
metric of the reverse cell ends in "_rev"), NVLink "gpu1:link7", HCA "mlx5_2", port "mlx5_2:1".
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from collbench_py.parsers import ibports, nvbandwidth, nvlink, perftest
from collbench_py.parsers import matrices as p2p_matrices
from collbench_py.parsers.ibports import IbPort
from collbench_py.parsers.models import Matrix, ParseError
from collbench_py.parsers.nvlink import NvlinkGpu
from collbench_py.parsers.perftest import PerftestRun, peak_gbits
from collbench_py.redact import redact_text

NODE_DIR = "node"
CHECKS_FILE = "checks.json"
CHECK_STATUSES = ("ok", "failed", "timeout", "skipped")
_HCA_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")

# nvbandwidth testcase -> the metric name of its cells (the results.json contract)
METRICS = {
    "device_to_device_memcpy_read_ce": "d2d_read_ce",
    "device_to_device_memcpy_write_ce": "d2d_write_ce",
    "device_to_device_memcpy_read_sm": "d2d_read_sm",
    "device_to_device_memcpy_write_sm": "d2d_write_sm",
    "host_to_device_memcpy_ce": "h2d_ce",
    "device_to_host_memcpy_ce": "d2h_ce",
    "host_to_device_memcpy_sm": "h2d_sm",
    "device_to_host_memcpy_sm": "d2h_sm",
}
# p2pBandwidthLatencyTest's matrices (by the start of their titles) -> the name they are kept under.
# Its "Unidirectional P2P=Enabled" matrix is cudaMemcpyPeerAsync on the copy engines with peer
# access on, the source GPU writing into the peer ("P2P Writes" in newer titles): nvbandwidth's
# device_to_device_memcpy_write_ce measures the same copy, so the matrix takes that testcase's name
# and the GPU-pair verdicts judge it against the profile's P2P line and the fleet like nvbandwidth's.
# The others have no nvbandwidth twin: kept as measurements under their own names, never judged.
P2P_TEST_FILE = "p2p-bandwidth-latency.txt"
P2P_TEST_MATRICES = (
    ("Unidirectional P2P=Enabled Bandwidth", "device_to_device_memcpy_write_ce"),
    ("Unidirectional P2P=Disabled Bandwidth", "p2p_unidir_disabled"),
    ("Bidirectional P2P=Enabled Bandwidth", "p2p_bidir_enabled"),
    ("Bidirectional P2P=Disabled Bandwidth", "p2p_bidir_disabled"),
    ("P2P=Enabled Latency", "p2p_latency_enabled"),
    ("P2P=Disabled Latency", "p2p_latency_disabled"),
)
# The measured metric of each of those kept under its own name (latency: its GPU and CPU halves).
METRICS.update(
    {
        name: name
        for name in (
            "p2p_unidir_disabled",
            "p2p_bidir_enabled",
            "p2p_bidir_disabled",
            "p2p_latency_enabled_gpu",
            "p2p_latency_enabled_cpu",
            "p2p_latency_disabled_gpu",
            "p2p_latency_disabled_cpu",
        )
    }
)
COUNTER_METRICS = {"crc": "crc_growth", "replay": "replay_growth", "recovery": "recovery_growth"}

Reader = Callable[[str], "str | None"]  # a path under hosts/<host>/ -> its text, or None (with a note)


@dataclass(frozen=True)
class NodeCheck:
    """One entry of checks.json's `checks`."""

    name: str  # "gpu_matrix", "nvlink", "nvlink_after", "nic_ports", "loopback:<hca>"
    status: str  # ok, failed, timeout, skipped
    note: str | None = None
    argv: tuple[str, ...] = ()
    rc: int | None = None
    seconds: float | None = None
    files: tuple[str, ...] = ()

    @property
    def ran(self) -> bool:
        return self.status != "skipped"


@dataclass(frozen=True)
class NodeChecks:
    """What one host's node checks measured, parsed."""

    host: str
    checks: tuple[NodeCheck, ...] = ()
    perftest: dict[str, Any] = field(default_factory=dict)  # {"gpudirect": bool, "source": "..."}
    hcas: tuple[dict[str, Any], ...] = ()  # the compute HCAs checks.json names
    matrices: tuple[Matrix, ...] = ()
    devices: tuple[dict[str, Any], ...] = ()  # nvbandwidth's device list (index, name, bus id)
    nvlink_state: tuple[NvlinkGpu, ...] = ()
    errors_before: tuple[NvlinkGpu, ...] = ()
    errors_after: tuple[NvlinkGpu, ...] = ()
    ports: tuple[IbPort, ...] = ()
    loopback: dict[str, PerftestRun] = field(default_factory=dict)  # HCA -> the client side's run
    notes: tuple[str, ...] = ()

    def check(self, name: str) -> NodeCheck | None:
        return next((c for c in self.checks if c.name == name), None)

    def matrix(self, name: str) -> Matrix | None:
        return next((m for m in self.matrices if m.name == name), None)


@dataclass(frozen=True)
class Measurement:
    host: str
    kind: str  # gpu_pair, gpu, nvlink, hca, port
    id: str
    metric: str
    value: float
    unit: str


def read_node_checks(host: str, read: Reader) -> NodeChecks | None:
    """hosts/<host>/node/ through `read`; None when the host has no checks.json (the node phase
    was switched off or never reached it)."""
    text = read(f"{NODE_DIR}/{CHECKS_FILE}")
    if text is None:
        return None
    notes: list[str] = []
    try:
        document = json.loads(text)
    except ValueError as exc:
        return NodeChecks(
            host, notes=(f"{NODE_DIR}/{CHECKS_FILE}: not JSON ({exc.msg}); node checks not read",)
        )
    if not isinstance(document, dict) or not isinstance(document.get("checks"), list):
        return NodeChecks(host, notes=(f"{NODE_DIR}/{CHECKS_FILE}: no `checks` list; node checks not read",))
    if document.get("schema", 1) != 1:
        return NodeChecks(
            host, notes=(f"{NODE_DIR}/{CHECKS_FILE}: schema {document.get('schema')!r}, this reads 1",)
        )
    checks = tuple(c for c in (_check(entry, notes) for entry in document["checks"]) if c is not None)
    ran = {c.name for c in checks if c.ran}

    def parsed(file: str, module: Any) -> Any:
        body = read(f"{NODE_DIR}/{file}")
        if body is None:
            return None
        try:
            return module.parse(body, f"hosts/{host}/{NODE_DIR}/{file}")
        except ParseError as exc:
            notes.append(f"{NODE_DIR}/{file}: {redact_text(str(exc))}")
            return None

    matrices: tuple[Matrix, ...] = ()
    devices: tuple[dict[str, Any], ...] = ()
    if "gpu_matrix" in ran:
        bandwidth = parsed("nvbandwidth.json", nvbandwidth) or parsed("nvbandwidth.txt", nvbandwidth)
        if bandwidth is not None:
            matrices = bandwidth.matrices
        elif (bandwidth := parsed(P2P_TEST_FILE, p2p_matrices)) is not None:
            matrices = p2p_test_matrices(bandwidth.matrices)
        if bandwidth is not None:
            devices = tuple(d for d in bandwidth.info.get("devices") or () if isinstance(d, dict))
    state = before = after = ()
    if "nvlink" in ran:
        state = _gpus(parsed("nvlink-status.txt", nvlink))
        before = _gpus(parsed("nvlink-errors-before.txt", nvlink))
    if "nvlink_after" in ran:
        after = _gpus(parsed("nvlink-errors-after.txt", nvlink))
    ports: tuple[IbPort, ...] = ()
    if "nic_ports" in ran:
        found = parsed("ibstat.txt", ibports) or parsed("ibv_devinfo.txt", ibports)
        ports = tuple(r for r in found.records if isinstance(r, IbPort)) if found else ()
    loopback: dict[str, PerftestRun] = {}
    for check in checks:
        hca = check.name.partition(":")[2]
        if check.name.startswith("loopback:") and check.ran and _HCA_NAME.match(hca):
            runs = parsed(f"loopback-{hca}.txt", perftest)
            bw_runs = [r for r in (runs.records if runs else ()) if isinstance(r, PerftestRun)]
            if bw_runs:
                loopback[hca] = bw_runs[-1]
    hcas = tuple(
        h for h in document.get("hcas") or () if isinstance(h, dict) and isinstance(h.get("name"), str)
    )
    run_perftest = document.get("perftest")
    return NodeChecks(
        host=host,
        checks=checks,
        perftest=dict(run_perftest) if isinstance(run_perftest, dict) else {},
        hcas=hcas,
        matrices=matrices,
        devices=devices,
        nvlink_state=state,
        errors_before=before,
        errors_after=after,
        ports=ports,
        loopback=loopback,
        notes=tuple(notes),
    )


def p2p_test_matrices(found: tuple[Matrix, ...]) -> tuple[Matrix, ...]:
    """p2pBandwidthLatencyTest's matrices under the names the measurements and verdicts read
    (P2P_TEST_MATRICES); the 0/1 connectivity matrix is left out."""
    kept = []
    for matrix in found:
        name = next((n for title, n in P2P_TEST_MATRICES if matrix.name.startswith(title)), None)
        if name is None:
            continue
        if name.startswith("p2p_latency"):
            name += "_cpu" if matrix.name.endswith(" CPU") else "_gpu"
        kept.append(replace(matrix, name=name))
    return tuple(kept)


def _check(entry: Any, notes: list[str]) -> NodeCheck | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        notes.append(f"{NODE_DIR}/{CHECKS_FILE}: a check without a name ignored")
        return None
    status = entry.get("status")
    if status not in CHECK_STATUSES:
        # an unknown status is not a pass: read it as a check that did not complete
        notes.append(
            f"{NODE_DIR}/{CHECKS_FILE}: check {entry['name']!r} has status {status!r}; read as failed"
        )
        status = "failed"
    argv = entry.get("argv")
    rc, seconds = entry.get("rc"), entry.get("seconds")
    note = entry.get("note")
    return NodeCheck(
        name=entry["name"],
        status=status,
        note=redact_text(note) if isinstance(note, str) else None,
        argv=tuple(redact_text(str(a)) for a in argv) if isinstance(argv, list) else (),
        rc=rc if isinstance(rc, int) and not isinstance(rc, bool) else None,
        seconds=float(seconds)
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool)
        else None,
        files=tuple(str(f) for f in entry.get("files") or () if isinstance(f, str)),
    )


def _gpus(parsed: Any) -> tuple[NvlinkGpu, ...]:
    return tuple(r for r in parsed.records if isinstance(r, NvlinkGpu)) if parsed is not None else ()


def gpu_id(label: str) -> str:
    return f"gpu{label}"


def pair_id(a: str, b: str) -> str:
    first, second = sorted((a, b), key=lambda label: (len(label), label))
    return f"{gpu_id(first)}--{gpu_id(second)}"


def matrix_gpu(matrix: Matrix, row: str, col: str) -> str:
    """The GPU of a host<->device cell: its column where the matrix is one row, else its row."""
    return col if len(matrix.row_labels) == 1 else row


def is_square(matrix: Matrix) -> bool:
    return len(matrix.row_labels) > 1 and matrix.row_labels == matrix.col_labels


def measurements(record: NodeChecks) -> list[Measurement]:
    """Every value the node checks measured, one per component and metric."""
    host = record.host
    found: list[Measurement] = []
    for matrix in record.matrices:
        metric = METRICS.get(matrix.name)
        if metric is None:
            continue
        unit = matrix.unit or "GB/s"
        for row, values in zip(matrix.row_labels, matrix.values, strict=False):
            for col, value in zip(matrix.col_labels, values, strict=False):
                if value is None or (row == col and is_square(matrix)):
                    continue
                if is_square(matrix):
                    forward = (len(row), row) < (len(col), col)
                    name = metric if forward else f"{metric}_rev"
                    found.append(Measurement(host, "gpu_pair", pair_id(row, col), name, value, unit))
                else:
                    found.append(
                        Measurement(host, "gpu", gpu_id(matrix_gpu(matrix, row, col)), metric, value, unit)
                    )
    for gpu in record.nvlink_state:
        for link in gpu.links:
            if link.state == "up" and link.speed_gbs is not None:
                found.append(
                    Measurement(
                        host,
                        "nvlink",
                        f"gpu{gpu.index}:link{link.link}",
                        "link_speed",
                        link.speed_gbs,
                        "GB/s",
                    )
                )
    found += counter_growth(record)
    for port in record.ports:
        if port.rate_gbps is not None:
            found.append(
                Measurement(host, "port", f"{port.ca}:{port.port}", "port_rate", port.rate_gbps, "Gb/s")
            )
    for hca, run in sorted(record.loopback.items()):
        value = peak_gbits(run)
        if value is not None:
            found.append(Measurement(host, "hca", hca, "loopback", value, "Gb/s"))
    return found


def counter_growth(record: NodeChecks) -> list[Measurement]:
    """The NVLink error counters' growth between the reads before and after the benchmarks."""
    before = {(g.index, link.link): link.counters for g in record.errors_before for link in g.links}
    grown: dict[tuple[int, int, str], float] = {}
    for gpu in record.errors_after:
        for link in gpu.links:
            earlier = before.get((gpu.index, link.link))
            if earlier is None:
                continue
            for name, value in link.counters.items():
                start = earlier.get(name)
                metric = next((m for word, m in COUNTER_METRICS.items() if word in name), None)
                if (
                    metric is None
                    or not isinstance(value, (int, float))
                    or not isinstance(start, (int, float))
                ):
                    continue
                key = (gpu.index, link.link, metric)
                grown[key] = grown.get(key, 0) + max(value - start, 0)
    return [
        Measurement(record.host, "nvlink", f"gpu{index}:link{link}", metric, value, "count")
        for (index, link, metric), value in sorted(grown.items())
    ]


def by_host(records: Mapping[str, NodeChecks | None]) -> dict[str, NodeChecks]:
    return {name: record for name, record in records.items() if record is not None}
