"""Runs while their lines are read, and the Run records made from them at the end of the log."""

from __future__ import annotations

from collections import deque
from typing import Any

from collbench_py.parsers import _nccl_infer as infer
from collbench_py.parsers._nccl_records import new_record
from collbench_py.parsers._nccl_table import Layout
from collbench_py.parsers.models import Device, Row, Run, RunError

FAILURE_KINDS = frozenset(("Test NCCL failure", "Test CUDA failure", "Test timeout"))


class Facts:
    """`NCCL INFO` facts: what a run learns from them, held for the next run while none is in progress."""

    __slots__ = ("nccl_version", "net_devices", "nranks", "settings", "transports")

    def __init__(self) -> None:
        self.nccl_version: str | None = None
        self.nranks: int | None = None
        self.transports: set[str] = set()
        self.settings: dict[str, str] = {}
        # host -> NET device (`NET/IB/0`) -> GPUDirect RDMA on every channel line of it
        self.net_devices: dict[str, dict[str, bool]] = {}

    def add_net_channel(self, host: str, device: str, gdr: bool) -> None:
        devices = self.net_devices.setdefault(host, {})
        devices[device] = devices.get(device, True) and gdr


class ErrorDraft:
    """A RunError while its trace lines are still coming."""

    __slots__ = ("host", "kind", "message", "pid", "trace")

    def __init__(self, kind: str, host: str | None, message: str, pid: int | None = None) -> None:
        self.kind, self.host, self.message, self.pid = kind, host, message, pid
        self.trace: list[str] = []

    def record(self) -> RunError:
        if self.pid is None:
            return RunError(self.kind, self.host, self.message)
        trace = f"; trace: {', '.join(self.trace)}" if self.trace else ""
        return RunError(self.kind, self.host, f"{self.message} [pid {self.pid}{trace}]")


class RunBuilder(Facts):
    """A run while its lines are read."""

    __slots__ = (
        "avg_busbw", "closed", "colheader", "collective", "devices", "duplicate_headers", "errors",
        "fragment", "layout", "oob", "params", "params_seen", "rows", "tool_version", "traced", "untraced",
        "version_rank", "warnings",
    )  # fmt: skip

    def __init__(self, facts: Facts, collective: str | None, layout: Layout | None) -> None:
        super().__init__()
        self.nccl_version, self.nranks = facts.nccl_version, facts.nranks
        self.transports, self.settings = facts.transports, facts.settings
        self.net_devices = facts.net_devices
        self.version_rank = 1 if self.nccl_version else 0
        self.collective = collective
        self.tool_version: str | None = None
        self.devices: list[Device] = []
        self.params: dict[str, Any] = {}
        self.params_seen = False
        self.duplicate_headers = 0
        self.colheader = False
        self.layout = layout
        self.rows: list[Row] = []
        self.fragment: str | None = None  # a row's first part, waiting for the rest
        self.avg_busbw: float | None = None
        self.oob: int | None = None
        self.closed = False  # summary or `Collective test concluded` seen
        self.errors: list[ErrorDraft] = []
        self.untraced: dict[str, deque[ErrorDraft]] = {}  # host -> its failures still without a trace
        self.traced: dict[tuple[str, int], ErrorDraft] = {}  # (host, pid) -> the error its trace extends
        self.warnings: list[str] = []

    def has_body(self) -> bool:
        return self.params_seen or self.colheader or bool(self.rows) or self.closed

    def several_processes(self) -> bool:
        """Headers or `Rank 0` lines repeat: processes of a non-MPI build write into one table."""
        return self.duplicate_headers > 0 or sum(1 for d in self.devices if d.rank == 0) > 1

    def set_version(self, version: str | None, rank: int) -> None:
        if version and rank > self.version_rank:
            self.nccl_version, self.version_rank = version, rank


def flag_separate_rank0_runs(builders: list[RunBuilder]) -> None:
    """Several one-rank runs from different processes: a non-MPI launch, when some never finished
    (their tables were cut by the next process's) or when one collective was run by more than one
    process (mpirun -np N of a build without MPI=1: N complete tables, each `Rank 0`, busbw 0)."""
    lonely = [b for b in builders if b.devices and all(d.rank == 0 for d in b.devices)]
    pids = {d.pid for b in lonely for d in b.devices}
    unfinished = any(not b.closed and not b.errors for b in lonely[:-1])
    pids_by_collective: dict[str | None, set[int | None]] = {}
    for b in lonely:
        pids_by_collective.setdefault(b.collective, set()).update(d.pid for d in b.devices)
    same_collective = any(len(p) > 1 for c, p in pids_by_collective.items() if c is not None)
    if len(lonely) > 1 and len(pids) > 1 and (unfinished or same_collective):
        for b in lonely:
            b.duplicate_headers += 1


def _nranks(b: RunBuilder) -> tuple[int | None, str]:
    if b.devices:
        ranks = {d.rank for d in b.devices}
        # an elided listing (`Rank 0`, `Rank 1`, `...`, `Rank 127`) still names the last rank
        return max(len(ranks), max(ranks) + 1), ""
    if b.nranks:
        return b.nranks, ""
    params = b.params
    if "nRanks" in params and "nGpus" in params:
        return params["nRanks"] * params["nGpus"] * params.get("nThread", 1), ""
    return None, ""


def build(b: RunBuilder, tool: str) -> Run:
    rows = b.rows
    warnings = list(b.warnings)
    collective = b.collective
    nranks, _ = _nranks(b)
    if collective is None and rows:
        collective, evidence = infer.infer_collective(rows, nranks)
        if collective:
            warnings.append(f"collective {collective} inferred from the rows ({evidence}): not in the log")
    if nranks is None and rows:
        nranks, how = infer.infer_nranks(collective, rows)
        if nranks:
            warnings.append(f"nranks {nranks} inferred from {how}: the log has no device lines")
    if b.several_processes() or (
        (nranks == 1 or all(not r.oop.busbw for r in rows)) and infer.repeated_rows(rows)
    ):
        warnings.append(infer.NON_MPI_WARNING)
    hosts = tuple(dict.fromkeys(d.host for d in b.devices if d.host))
    errors = [e.record() for e in b.errors]
    failed = (
        any(e.kind != "NCCL WARN" for e in errors)
        or bool(b.oob)
        or any(r.oop.wrong or (r.ip is not None and r.ip.wrong) for r in rows)
    )
    summary = b.oob is not None or b.avg_busbw is not None
    started = b.params_seen or b.colheader or bool(rows) or bool(b.devices) or b.tool_version is not None
    status = "failed" if failed else ("incomplete" if started and not summary else "ok")
    if status == "ok":  # a run that passed: its WARN lines are notes, not the cause of anything
        warnings += [f"NCCL WARN on {e.host or '?'}: {e.message}" for e in errors if e.kind == "NCCL WARN"]
        errors = [e for e in errors if e.kind != "NCCL WARN"]
    return new_record(
        Run,
        collective=collective,
        tool_version=b.tool_version,
        nccl_version=b.nccl_version,
        nranks=nranks,
        hosts=hosts,
        rows=tuple(rows),
        avg_busbw=b.avg_busbw,
        oob=b.oob,
        status=status,
        errors=tuple(errors),
        transports=tuple(sorted(b.transports)),
        gdr=all(all(d.values()) for d in b.net_devices.values()) if b.net_devices else None,
        net_devices={host: dict(sorted(d.items())) for host, d in sorted(b.net_devices.items())},
        tool=tool,
        devices=tuple(b.devices),
        params=b.params,
        settings=b.settings,
        warnings=tuple(warnings),
    )
