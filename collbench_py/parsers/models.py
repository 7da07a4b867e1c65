"""The typed records every parser returns.

Field names are the keys of the JSON interface of `collbench parse` (see
docs/parse-json.md): `to_dict()` is `dataclasses.asdict` and nothing more,
so renaming a field is a breaking change of that interface.

Records are frozen; collections inside them are tuples (or dicts that are
never mutated after construction).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal[
    "nccl-tests",
    "rccl-tests",
    "torch-bench",
    "nvidia-smi-topo",
    "rocm-smi-topo",
    "nvbandwidth",
    "p2p-bandwidth-latency",
    "rocm-bandwidth-test",
    "perftest",
    "nvidia-smi-nvlink",
    "dcgmi-nvlink",
    "nvidia-smi-topo-p2p",
    "ib-ports",
    "dcgmi-diag",
]
KINDS: tuple[str, ...] = Kind.__args__  # type: ignore[attr-defined]

Status = Literal["ok", "failed", "incomplete"]


@dataclass(frozen=True)
class Half:
    """One half of a result row: out-of-place or in-place."""

    time_us: float | None = None
    algbw: float | None = None  # GB/s (1e9 bytes/s), as the tools print it
    busbw: float | None = None  # GB/s
    wrong: int | None = None  # `#wrong` count; None for `N/A`
    error: float | None = None  # pre-2.13 `error` column (a max delta, not a count)


@dataclass(frozen=True)
class Row:
    size: int  # bytes
    count: int | None = None  # elements
    dtype: str | None = None
    redop: str | None = None  # None where the tool prints `none` or nothing
    root: int | None = None
    oop: Half = field(default_factory=Half)
    ip: Half | None = None  # None when the tool ran no in-place half


@dataclass(frozen=True)
class RunError:
    kind: str  # e.g. "Test NCCL failure", "Test CUDA failure", "Test timeout", "mpi-abort", "NCCL WARN"
    host: str | None
    message: str


@dataclass(frozen=True)
class Device:
    """A `#  Rank  0 Group  0 Pid 123 on host device 0 [0000:1b:00] NVIDIA H100` line."""

    rank: int
    host: str | None = None
    pid: int | None = None
    group: int | None = None
    device: int | None = None
    bus_id: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class Run:
    """One benchmark run: one header, its rows and its summary."""

    collective: str | None = None  # all_reduce, all_gather, ... (no `_perf`)
    tool_version: str | None = None
    nccl_version: str | None = None  # "2.29.2"
    nranks: int | None = None
    hosts: tuple[str, ...] = ()
    rows: tuple[Row, ...] = ()
    avg_busbw: float | None = None
    oob: int | None = None  # `Out of bounds values : N`
    status: Status = "ok"
    errors: tuple[RunError, ...] = ()
    transports: tuple[str, ...] = ()  # P2P/IPC, P2P/direct, SHM, NET/IB, NET/Socket, NVLS, CollNet
    # GPUDirect RDMA from `via NET/IB/0/GDRDMA` channel lines: True when every NET channel (NET/Socket
    # aside) had it, False when one had not, None without such lines (no NCCL_DEBUG=INFO, one node).
    gdr: bool | None = None
    net_devices: dict[str, dict[str, bool]] = field(default_factory=dict)  # host -> `NET/IB/0` -> GDRDMA
    # Beyond the minimum interface: what else the log tells about itself.
    tool: str | None = None  # "nccl-tests", "rccl-tests", "torch-bench", "mscclpp-test", ...
    devices: tuple[Device, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)  # header: nThread, nGpus, minBytes, iters, ...
    settings: dict[str, str] = field(default_factory=dict)  # `NCCL_X set by environment to Y`
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Topology:
    """A `nvidia-smi topo -m` or `rocm-smi --showtopo` matrix."""

    gpus: tuple[str, ...] = ()  # "GPU0", ...
    nics: dict[str, str] = field(default_factory=dict)  # "NIC0" -> "mlx5_0"
    links: dict[str, dict[str, str]] = field(default_factory=dict)  # "GPU0" -> {"GPU1": "NV18"}
    cpu_affinity: dict[str, str | None] = field(default_factory=dict)
    numa_affinity: dict[str, str | None] = field(default_factory=dict)
    gpu_numa_id: dict[str, str | None] = field(default_factory=dict)
    # rocm-smi prints several matrices: name ("weight", "hops", "link type", ...) -> the matrix
    matrices: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Matrix:
    """A labelled matrix of numbers (nvbandwidth testcases, p2pBandwidthLatencyTest, rocm-bandwidth-test)."""

    name: str  # e.g. "memcpy_ce_device_to_device_read", "Unidirectional P2P=Disabled Bandwidth"
    unit: str | None = None  # "GB/s", "us", ...
    row_labels: tuple[str, ...] = ()
    col_labels: tuple[str, ...] = ()
    values: tuple[tuple[float | None, ...], ...] = ()  # None where the tool prints N/A
    sum: float | None = None  # nvbandwidth `SUM <testcase> <value>`


@dataclass(frozen=True)
class ParsedFile:
    """What `collbench parse` prints for one input file."""

    file: str
    kind: Kind
    runs: tuple[Run, ...] = ()
    topology: Topology | None = None
    warnings: tuple[str, ...] = ()
    matrices: tuple[Matrix, ...] = ()
    info: dict[str, Any] = field(default_factory=dict)  # versions and devices of matrix tools
    # The records of the node-check kinds (perftest runs, NVLink GPUs, IB ports, dcgmi diag tests):
    # each kind's own frozen dataclass, defined in its parser module (docs/parse-json.md).
    records: tuple[Any, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class ParseError(ValueError):
    """Input that is not a benchmark output we can read (one line for the user)."""


# busbw = algbw x BUSBW_FACTORS[collective](n ranks): nccl-tests' factors (its doc/PERFORMANCE.md),
# which the torch benchmarks apply too.
BUSBW_FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}
