"""Load a run directory (docs/run-directory.md) into typed records.

Everything the verdicts need is read here, once: the manifest, each host's facts and
topology, and every benchmark log, parsed. From each log we also keep the few raw lines a
report quotes as evidence (its tail, the lines naming a transport or an NCCL setting, the
rows with wrong values), so nothing later has to read a log again.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collbench_py.models import ParseError, Run, Topology
from collbench_py.parsers import parse_text, read_text

TAIL_LINES = 12
EVIDENCE_PER_LOG = 6
# Parsing is CPU-bound: with many logs, worker processes pay for their start-up.
PARALLEL_FROM = 300

_EVIDENCE = re.compile(
    r"NET/Socket|NET/IB|NCCL_IB_DISABLE|NCCL_P2P_DISABLE|NCCL_SHM_DISABLE|NCCL_NET\b|NCCL_ALGO|"
    r"P2P (?:is )?disabled|via P2P|NVLS|CollNet"
)
_RANK0 = re.compile(r"^\W*#?\s*Rank\s+0\b", re.MULTILINE)
_OOB = re.compile(r"Out of bounds values\s*:.*")


class RunDirError(Exception):
    """The path is not a run directory we can read (one line for the user)."""


@dataclass(frozen=True)
class Launch:
    kind: str  # intra, all, pair
    hosts: tuple[str, ...]
    collective: str | None
    log: str  # relative to the run directory
    status: str | None = None  # ok, failed, timeout, skipped; None when the manifest does not say
    rc: int | None = None
    round: int | None = None


@dataclass(frozen=True)
class LogData:
    """One benchmark log, parsed, with the raw lines a report may quote."""

    launch: Launch
    exists: bool
    runs: tuple[Run, ...] = ()
    parse_error: str | None = None
    tail: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()  # lines naming transports or NCCL settings
    wrong_lines: tuple[str, ...] = ()  # rows with nonzero #wrong, and a failed out-of-bounds line
    rank0_lines: int = 0

    @property
    def run(self) -> Run | None:
        """The run that holds the measurements: the one with the most rows."""
        if not self.runs:
            return None
        return max(self.runs, key=lambda r: len(r.rows))


@dataclass(frozen=True)
class Host:
    name: str  # sanitised: the directory name under hosts/
    inventory_hostname: str
    status: str  # ok, unreachable, failed, timeout
    reason: str | None = None
    facts: dict[str, Any] | None = None
    topology: Topology | None = None
    topology_error: str | None = None


@dataclass(frozen=True)
class RunDir:
    path: Path
    run_id: str
    status: str
    started_at: str | None
    finished_at: str | None
    backend: str | None
    launcher: str | None
    collbench_version: str | None
    parameters: dict[str, Any]
    hosts: dict[str, Host]
    logs: tuple[LogData, ...] = ()
    notes: tuple[str, ...] = field(default=())  # what was odd about the directory itself

    def logs_of(self, kind: str) -> list[LogData]:
        return [log for log in self.logs if log.launch.kind == kind]


def load_run_dir(path: str | Path, workers: int | None = None) -> RunDir:
    root = Path(path)
    manifest = _read_manifest(root)
    notes: list[str] = []
    hosts = _hosts(root, manifest, notes)
    launches = _launches(root, manifest, hosts, notes)
    logs = _load_logs(root, launches, workers)
    return RunDir(
        path=root,
        run_id=_text(manifest.get("run_id")) or root.name,
        status=_text(manifest.get("status")) or "unknown",
        started_at=_text(manifest.get("started_at")),
        finished_at=_text(manifest.get("finished_at")),
        backend=_text(manifest.get("backend")),
        launcher=_text(manifest.get("launcher")),
        collbench_version=_text(manifest.get("collbench_version")),
        parameters=parameters if isinstance(parameters := manifest.get("parameters"), dict) else {},
        hosts=hosts,
        logs=tuple(logs),
        notes=tuple(notes),
    )


def _text(value: Any) -> str | None:
    """A manifest string; anything else (a list where a string belongs) counts as absent."""
    return value if isinstance(value, str) and value else None


def _read_manifest(root: Path) -> dict[str, Any]:
    if not root.is_dir():
        raise RunDirError(f"{root}: no such directory")
    manifest_path = root / "manifest.json"
    if not manifest_path.is_file():
        runs = sorted(p.name for p in root.iterdir() if (p / "manifest.json").is_file())
        hint = f"; it holds runs, the newest is {root / runs[-1]}" if runs else ""
        raise RunDirError(f"{root} is not a run directory: no manifest.json{hint}")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise RunDirError(f"{manifest_path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise RunDirError(f"{manifest_path}: not valid JSON (nested too deeply)") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("hosts", {}), dict):
        raise RunDirError(f"{manifest_path}: not a run manifest (no `hosts` object)")
    if manifest.get("schema", 1) != 1:
        raise RunDirError(f"{manifest_path}: manifest schema {manifest.get('schema')!r}, this reads 1")
    return manifest


def _hosts(root: Path, manifest: dict[str, Any], notes: list[str]) -> dict[str, Host]:
    entries: dict[str, dict[str, Any]] = dict(manifest.get("hosts") or {})
    hosts_dir = root / "hosts"
    on_disk = sorted(p.name for p in hosts_dir.iterdir() if p.is_dir()) if hosts_dir.is_dir() else []
    for name in on_disk:
        if name not in entries:
            notes.append(f"hosts/{name}/ is not in the manifest; read anyway")
            entries[name] = {"status": "ok"}
    hosts: dict[str, Host] = {}
    for name in sorted(entries):
        entry = entries[name] if isinstance(entries[name], dict) else {}
        host_dir = hosts_dir / name
        facts = _read_facts(host_dir / "facts.json", notes)
        topology, topology_error = _read_topology(host_dir / "topo.txt")
        hosts[name] = Host(
            name=name,
            inventory_hostname=_text(entry.get("inventory_hostname")) or name,
            status=_text(entry.get("status")) or "ok",
            reason=_text(entry.get("reason")),
            facts=facts,
            topology=topology,
            topology_error=topology_error,
        )
    return hosts


def _read_facts(path: Path, notes: list[str]) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        facts = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        notes.append(f"{path.parent.name}/facts.json is not valid JSON ({exc}); facts ignored")
        return None
    return facts if isinstance(facts, dict) else None


def _read_topology(path: Path) -> tuple[Topology | None, str | None]:
    if not path.is_file():
        return None, None
    text = read_text(path)
    if not text.strip():
        return None, "topo.txt is empty"
    try:
        parsed = parse_text(text, file=str(path))
    except ParseError as exc:
        return None, f"topo.txt not readable: {exc}"
    return parsed.topology, None if parsed.topology else "topo.txt holds no topology matrix"


def _launches(root: Path, manifest: dict[str, Any], hosts: dict[str, Host], notes: list[str]) -> list[Launch]:
    launches: list[Launch] = []
    seen: set[str] = set()
    entries = manifest.get("launches") or []
    if not isinstance(entries, list):
        notes.append("the manifest's `launches` is not a list; logs found on disk are read instead")
        entries = []
    for entry in entries:
        if not isinstance(entry, dict) or not _text(entry.get("log")):
            continue
        log = str(entry["log"])
        if not _inside(root, log):
            notes.append(f"launch log {log!r} points outside the run directory; ignored")
            continue
        hosts_listed = entry.get("hosts")
        hosts_of = (
            tuple(str(h) for h in hosts_listed)
            if isinstance(hosts_listed, list) and hosts_listed
            else _hosts_of(log)
        )
        rc = entry.get("rc")
        launches.append(
            Launch(
                kind=_text(entry.get("kind")) or _kind_of(log),
                hosts=hosts_of,
                collective=_text(entry.get("collective")) or Path(log).stem,
                log=log,
                status=_text(entry.get("status")),
                rc=rc if isinstance(rc, int) else None,
                round=entry.get("round") if isinstance(entry.get("round"), int) else None,
            )
        )
        seen.add(log)
    # Logs on disk the manifest does not list (an interrupted run writes the manifest last).
    for log in _logs_on_disk(root):
        if log not in seen:
            launches.append(
                Launch(kind=_kind_of(log), hosts=_hosts_of(log), collective=Path(log).stem, log=log)
            )
    missing = sorted({h for launch in launches for h in launch.hosts} - set(hosts))
    if missing:
        notes.append(f"launches name hosts not in the manifest: {', '.join(missing[:5])}")
    return launches


def _logs_on_disk(root: Path) -> Iterable[str]:
    patterns = ("hosts/*/intra/*.log", "inter/all/*.log", "inter/pairs/*/*.log")
    for pattern in patterns:
        for path in sorted(root.glob(pattern)):
            yield path.relative_to(root).as_posix()


def _kind_of(log: str) -> str:
    if log.startswith("inter/pairs/"):
        return "pair"
    if log.startswith("inter/all/"):
        return "all"
    return "intra"


def _hosts_of(log: str) -> tuple[str, ...]:
    parts = log.split("/")
    if log.startswith("inter/pairs/") and len(parts) >= 4:
        return tuple(parts[2].split("--", 1))
    if log.startswith("hosts/") and len(parts) >= 2:
        return (parts[1],)
    return ()


def _inside(root: Path, rel: str) -> bool:
    base = os.path.realpath(root)
    target = os.path.realpath(os.path.join(base, rel))
    return target.startswith(base + os.sep)


def _load_logs(root: Path, launches: list[Launch], workers: int | None) -> list[LogData]:
    jobs = [(str(root), launch) for launch in launches]
    if workers is None:
        workers = min(os.cpu_count() or 1, 4) if len(jobs) >= PARALLEL_FROM else 1
    if workers <= 1:
        return [_load_log(job) for job in jobs]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_load_log, jobs, chunksize=64))


def _load_log(job: tuple[str, Launch]) -> LogData:
    root, launch = job
    path = Path(root) / launch.log
    if not path.is_file():
        return LogData(launch=launch, exists=False)
    text = read_text(path)
    lines = text.splitlines()
    tail = tuple(line for line in lines if line.strip())[-TAIL_LINES:]
    evidence = tuple(line.strip() for line in lines if _EVIDENCE.search(line))[:EVIDENCE_PER_LOG]
    rank0 = len(_RANK0.findall(text))
    try:
        parsed = parse_text(text, file=launch.log)
    except ParseError as exc:
        return LogData(
            launch=launch, exists=True, parse_error=str(exc), tail=tail, evidence=evidence, rank0_lines=rank0
        )
    runs = parsed.runs
    return LogData(
        launch=launch,
        exists=True,
        runs=runs,
        tail=tail,
        evidence=evidence,
        wrong_lines=_wrong_lines(runs, lines),
        rank0_lines=rank0,
    )


def _wrong_lines(runs: tuple[Run, ...], lines: list[str]) -> tuple[str, ...]:
    """The raw log lines of rows with nonzero #wrong, and a failed out-of-bounds line."""
    quoted: list[str] = []
    for run in runs:
        for row in run.rows:
            counts = [h.wrong for h in (row.oop, row.ip) if h is not None and h.wrong]
            if not counts:
                continue
            size = str(row.size)
            raw = next(
                (line.strip() for line in lines if size in line.split() and str(counts[0]) in line.split()),
                None,
            )
            quoted.append(raw or _describe_row(row))
    quoted += [m.group(0).strip() for line in lines if (m := _OOB.search(line)) and "FAILED" in line]
    return tuple(dict.fromkeys(quoted))[:10]


def _describe_row(row: Any) -> str:
    ip = row.ip.wrong if row.ip is not None else None
    return f"size {row.size}: out-of-place #wrong {row.oop.wrong}, in-place #wrong {ip}"
