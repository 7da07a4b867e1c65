"""Checks on one benchmark log: did it finish, are the values right, how did the bytes travel."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from collbench_py.parsers.models import Device
from collbench_py.redact import redact_text
from collbench_py.rundir.load import Host, LogData, PackedDevices, PackedRows
from collbench_py.verdicts.launcher import LauncherFailure
from collbench_py.verdicts.model import Check

_TRUE = {"1", "true", "yes", "on"}


def run_check(
    log: LogData, name: str, host: str | None, launcher_failure: LauncherFailure | None = None
) -> Check:
    """Completion: the log exists, parsed, finished, holds rows, and ran as one MPI job. A launch
    that failed before its ranks ran (`launcher_failure`) measured nothing: skipped, its failure is
    the fleet check `launcher`'s."""
    launch = log.launch
    if launcher_failure is not None:
        reason = (
            f"not measured: the launch failed before its ranks ran ({launcher_failure.cause}; see `launcher`)"
        )
        return Check(name, "skip", reason, host, (), launch.log)

    def failed(reason: str, evidence: Iterable[str] = log.tail) -> Check:
        return Check(name, "fail", reason, host, tuple(evidence), launch.log)

    if launch.status == "skipped":
        return Check(name, "skip", "launch skipped", host, (), launch.log)
    if not log.exists:
        said = f" (the launch ended: {launch.status}, rc {launch.rc})" if launch.status else ""
        return failed(f"log {launch.log} is missing{said}", ())
    if log.parse_error:
        return failed(f"log not readable as a benchmark output: {log.parse_error}; its tail:")
    run = log.run
    errors = [e for r in log.runs for e in r.errors]
    if launch.status in ("timeout", "failed"):
        what = "timed out" if launch.status == "timeout" else f"failed (rc {launch.rc})"
        first = f": {errors[0].kind}: {redact_text(errors[0].message)}" if errors else ""
        return failed(f"launch {what}{first}; log tail:")
    if run is None or run.status != "ok" or errors:
        if errors:
            error = errors[0]
            where = f" on {error.host}" if error.host else ""
            return failed(f"{error.kind}{where}: {redact_text(error.message)}; log tail:")
        if run is None or not run.rows:
            return failed("no result rows: the benchmark crashed or hung before measuring; log tail:")
        return failed(f"log incomplete (run status {run.status}) after {len(run.rows)} rows; log tail:")
    non_mpi = _non_mpi(log)
    if non_mpi:
        return failed(
            f"built without MPI=1: {non_mpi}; every process ran alone and measured one GPU. "
            "Rebuild nccl-tests with MPI=1",
            log.tail[-4:],
        )
    return Check(name, "pass", f"{len(run.rows)} sizes, {run.nranks or '?'} ranks", host, (), launch.log)


def _non_mpi(log: LogData) -> str | None:
    """Why this log looks like independent one-rank processes writing into one file, if it does."""
    runs = log.runs
    rank0 = sum(_ranks(r.devices).count(0) for r in runs)
    if rank0 > 1 and rank0 > len({r.collective for r in runs}):
        return f"{rank0} processes each say `Rank 0`"
    if log.rank0_lines > max(1, len(runs)):
        return f"{log.rank0_lines} `Rank 0` lines"
    run = log.run
    if run is None or not run.rows:
        return None
    sizes = run.rows.sizes() if isinstance(run.rows, PackedRows) else [row.size for row in run.rows]
    # Each size once (nearly every log) is seen without counting them.
    repeated = [size for size, n in Counter(sizes).items() if n > 1] if len(set(sizes)) < len(sizes) else []
    # Rows are made only for a log whose sizes repeat (rare): 30,000 logs are read here.
    if (
        repeated
        and all((row.oop.busbw or 0) == 0 for row in run.rows)
        and any((row.oop.algbw or 0) > 0 for row in run.rows)
    ):
        return f"sizes repeat ({len(repeated)} sizes printed more than once) and busbw is 0 on every row"
    if any("MPI=1" in warning for r in runs for warning in r.warnings):
        return "several one-rank runs wrote into this log"
    return None


def _ranks(devices: Sequence[Device]) -> list[int | None]:
    return devices.ranks() if isinstance(devices, PackedDevices) else [d.rank for d in devices]


def data_check(log: LogData, name: str, host: str | None) -> Check | None:
    """Wrong values: nonzero #wrong in any row or out-of-bounds values; None when nothing ran."""
    if not log.runs:
        return None
    bad_rows = [
        row
        for r in log.runs
        if not isinstance(r.rows, PackedRows) or r.rows.any_wrong()  # packed: no Row made for a clean log
        for row in r.rows
        if any(h is not None and h.wrong for h in (row.oop, row.ip))
    ]
    oob = sum(r.oob or 0 for r in log.runs)
    if bad_rows or oob:
        parts = []
        if bad_rows:
            sizes = ", ".join(f"{row.size} B" for row in bad_rows[:4])
            parts.append(f"#wrong nonzero in {len(bad_rows)} row(s) ({sizes})")
        if oob:
            parts.append(f"out of bounds values: {oob}")
        reason = "data corruption: " + "; ".join(parts) + ". Results are not trustworthy: check GPUs/links"
        return Check(name, "fail", reason, host, log.wrong_lines or log.tail[-3:], log.launch.log)
    checked = any(
        r.rows.any_checked()
        if isinstance(r.rows, PackedRows)
        else any(h is not None and h.wrong is not None for row in r.rows for h in (row.oop, row.ip))
        for r in log.runs
    )
    if not checked:
        return Check(name, "skip", "values not checked (run with -c 0)", host, (), log.launch.log)
    return Check(name, "pass", "no wrong values", host, (), log.launch.log)


def transport_findings(log: LogData, host: Host) -> list[tuple[str, str]]:
    """(reason, evidence line) for each transport warning in this log."""
    findings: list[tuple[str, str]] = []
    inter_node = log.launch.kind in ("pair", "all")
    for run in log.runs:
        settings = {k.upper(): str(v) for k, v in run.settings.items()}
        if inter_node and "NET/Socket" in run.transports and _has_ib(host):
            findings.append(
                (
                    "inter-node traffic went over NET/Socket (TCP) although the host has InfiniBand ports",
                    _line(log, "NET/Socket"),
                )
            )
        if settings.get("NCCL_IB_DISABLE", "").strip().lower() in _TRUE:
            findings.append(
                ("NCCL_IB_DISABLE is set: NCCL does not use InfiniBand", _line(log, "NCCL_IB_DISABLE"))
            )
        if settings.get("NCCL_P2P_DISABLE", "").strip().lower() in _TRUE:
            findings.append(
                (
                    "NCCL_P2P_DISABLE is set: GPUs exchange data through host memory",
                    _line(log, "NCCL_P2P_DISABLE"),
                )
            )
    return findings


def _has_ib(host: Host) -> bool:
    ports = (host.facts or {}).get("ib") or []
    return any(str(p.get("state", "")).lower().endswith("active") for p in ports if isinstance(p, dict))


def _line(log: LogData, needle: str) -> str:
    return next((line for line in log.evidence if needle in line), f"({needle} in {log.launch.log})")
