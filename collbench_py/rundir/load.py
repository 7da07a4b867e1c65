"""Load a run directory (docs/run-directory.md) into typed records.

Everything the verdicts need is read here, once: the manifest, each host's facts and
topology, and every benchmark log, parsed. From each log we also keep the few raw lines a
report quotes as evidence (its tail, the lines naming a transport or an NCCL setting, the
rows with wrong values), so nothing later has to read a log again.

A run directory is input like any other: every file read must resolve inside it (a link out of
it is refused, never read), values of the wrong type are dropped with a note, a log is read up to
a cap (its head and its tail), and every line quoted from a log is redacted (collbench_py.redact).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, fields, replace
from functools import cached_property, partial
from pathlib import Path
from typing import Any

from collbench_py.child_processes import end_with_parent
from collbench_py.nodechecks.nodedir import NODE_DIR, NodeChecks, read_node_checks
from collbench_py.parsers import nccl_json, parse_text, read_text
from collbench_py.parsers._nccl_records import new_device, new_half, new_row
from collbench_py.parsers.models import Device, Half, ParseError, Row, Run, Topology
from collbench_py.redact import redact_text, redact_value, without_private_keys
from collbench_py.rundir.manifest import RAIL_KIND
from collbench_py.rundir.manifest import mark_interrupted as _mark_interrupted
from collbench_py.rundir.planfile import PLAN_PATH, PlanRecord, read_plan

TAIL_LINES = 12
# What a launcher printed before its ranks ran: lines kept per file, and bytes read of a launcher-*.out.
LAUNCHER_LINES = 40
LAUNCHER_BYTES = 256 << 10
EVIDENCE_PER_LOG = 6
WRONG_LINES = 10
# A log above HEAD_BYTES + TAIL_BYTES is read as its first and last bytes only: a runaway log
# (a rank printing in a loop) must not take the controller's memory or the night.
HEAD_BYTES = 64 << 20
TAIL_BYTES = 1 << 20
# The other files are small; one larger than this is not read at all.
MANIFEST_MAX_BYTES = 256 << 20
HOST_FILE_MAX_BYTES = 16 << 20
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
    launcher: str | None = None  # mpirun, torchrun, direct; None when the manifest does not say


@dataclass(frozen=True)
class LogData:
    """One benchmark log, parsed, with the raw lines a report may quote (redacted)."""

    launch: Launch
    exists: bool
    runs: tuple[Run, ...] = ()
    parse_error: str | None = None
    tail: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()  # lines naming transports or NCCL settings
    wrong_lines: tuple[str, ...] = ()  # rows with nonzero #wrong, and a failed out-of-bounds line
    rank0_lines: int = 0
    note: str | None = None  # what the report must say about reading it (cut, refused)
    # What the launcher printed: the launcher-*.out files beside the log, and the log's own first
    # lines when it holds no result row (mpirun's and ssh's errors come before any rank's output).
    launcher_output: tuple[str, ...] = ()
    # Where the measurements came from: the nccl-tests `-J` file beside the log ("json") when it
    # holds rows, else the log itself ("log"). The log's lines are the evidence either way.
    source: str = "log"

    @property
    def run(self) -> Run | None:
        """The run that holds the measurements: the one with the most rows."""
        runs = self.runs
        if len(runs) == 1:  # nearly every log: the verdicts and the history ask 280,000 times
            return runs[0]
        if not runs:
            return None
        return max(runs, key=lambda r: len(r.rows))


@dataclass(frozen=True)
class GpuLink:
    """One GPU's PCIe link as sampled while a launch ran (hosts/<dir>/intra/gpu-link-<coll>.csv)."""

    bus_id: str
    gen: int | None
    gen_max: int | None
    width: int | None
    width_max: int | None


@dataclass(frozen=True)
class SshHop:
    """A hop mpirun would make (head of a launch -> another host of it) that failed its check."""

    source: str  # directory names
    target: str
    error: str


@dataclass(frozen=True)
class SshHops:
    """The manifest's `ssh_hops`: the node-to-node ssh check before the launches."""

    mode: str | None
    checked: int | None
    failed: tuple[SshHop, ...]


@dataclass(frozen=True)
class Host:
    name: str  # sanitised: the directory name under hosts/
    inventory_hostname: str
    status: str  # ok, unreachable, failed, timeout
    reason: str | None = None
    facts: dict[str, Any] | None = None
    topology: Topology | None = None
    topology_error: str | None = None
    # collective -> the PCIe links seen under that launch's load; empty when none was sampled
    gpu_links: dict[str, tuple[GpuLink, ...]] = field(default_factory=dict)
    # The NCCL its benchmark logs say they loaded (`nccl-library=` of the header, the JSON's
    # `nccl_version`); facts.json's own probe asks torch, whose wheel may bundle another NCCL.
    nccl_from_logs: str | None = None
    nccl_from_probe: str | None = None
    # hosts/<name>/node/: what the node checks measured; None where the node phase wrote nothing
    node_checks: NodeChecks | None = None


@dataclass(frozen=True)
class NotMeasured:
    """A node the scheduler listed but the run never touched (manifest `slurm.unusable`): down,
    drained, not responding. Neither passed nor failed; the report names it with Slurm's reason."""

    host: str
    state: str | None
    reason: str
    named: bool = False  # the user named it (a node list), so its absence is a warning


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
    ssh_hops: SshHops | None = None  # None when the run did not check them
    not_measured: tuple[NotMeasured, ...] = ()  # from the manifest's `slurm.unusable`
    plan: PlanRecord | None = None  # inter/pairs/plan.json: None without one, or when not readable
    plan_error: str | None = None  # why a plan.json that is there was not used (also in `notes`)

    def logs_of(self, kind: str) -> list[LogData]:
        return list(self._logs_by_kind.get(kind, ()))

    @cached_property
    def _logs_by_kind(self) -> dict[str, list[LogData]]:
        """The logs of each launch kind, in order: sorted once (the verdicts ask seven times, each a
        pass over 30,000 logs at 4,000 hosts)."""
        by_kind: dict[str, list[LogData]] = {}
        for log in self.logs:
            by_kind.setdefault(log.launch.kind, []).append(log)
        return by_kind


def load_run_dir(path: str | Path, workers: int | None = None) -> RunDir:
    return load_run_dir_with(path, None, workers)[0]


def load_run_dir_with(
    path: str | Path, each_log: Callable[[LogData], Any] | None, workers: int | None = None
) -> tuple[RunDir, tuple[Any, ...]]:
    """The run directory, and `each_log(log)` of every log in log order, called by the worker that
    parsed the log (a picklable function): work on each log done on every core during the parse."""
    root = Path(path)
    manifest = _read_manifest(root)
    notes: list[str] = []
    wrong: list[str] = []  # manifest values of the wrong type, named in one note
    hosts = _hosts(root, manifest, notes, wrong)
    launches = _launches(root, manifest, hosts, notes, wrong)
    logs, extras = _load_logs(root, launches, workers, each_log)
    hosts = _with_log_nccl(hosts, logs)
    notes += [f"{log.launch.log}: {log.note}" for log in logs if log.note]
    top = {key: _field(manifest, key, wrong) for key in _MANIFEST_TEXT}
    parameters = _parameters(manifest, wrong)
    ssh_hops = _ssh_hops(manifest, wrong)
    not_measured = _not_measured(manifest, hosts, wrong)
    plan, plan_error = _read_plan(root, set(hosts), notes)
    if wrong:
        more = f" and {len(wrong) - 8} more" if len(wrong) > 8 else ""
        notes.append(f"manifest values of the wrong type ignored: {', '.join(wrong[:8])}{more}")
    run = RunDir(
        path=root,
        run_id=top["run_id"] or root.name,
        status=top["status"] or "unknown",
        started_at=top["started_at"],
        finished_at=top["finished_at"],
        backend=top["backend"],
        launcher=top["launcher"],
        collbench_version=top["collbench_version"],
        parameters=parameters,
        hosts=hosts,
        logs=tuple(logs),
        notes=tuple(notes),
        ssh_hops=ssh_hops,
        not_measured=not_measured,
        plan=plan,
        plan_error=plan_error,
    )
    return run, extras


def evidence_files(run: RunDir) -> tuple[str, ...]:
    """The relative paths of every file `load_run_dir` read to make `run`, by the same rules it read
    them: the manifest (launches, Slurm's unusable nodes, ssh hops), each host's facts, topology and
    PCIe links under load, every launch's log (re-measured rounds included), the nccl-tests JSON and
    the launcher output beside it, and the pair plan. Only regular files inside the run directory:
    what the load refused is not evidence. The acceptance bundle packs exactly these."""
    root = run.path
    found = ["manifest.json"]
    for name in run.hosts:
        folder = f"hosts/{name}"
        found += [f"{folder}/facts.json", f"{folder}/topo.txt"]
        intra = root / folder / "intra"
        if intra.is_dir():
            found += [
                f"{folder}/intra/{p.name}" for p in sorted(intra.iterdir()) if _GPU_LINK_FILE.match(p.name)
            ]
        node = run.hosts[name].node_checks
        if node is not None:
            named = {"checks.json", *(file for check in node.checks for file in check.files)}
            found += [f"{folder}/{NODE_DIR}/{file}" for file in sorted(named)]
    for log in run.logs:
        rel = log.launch.log
        found += [rel, _json_beside(rel)]
        folder = Path(rel).parent
        if _lexically_inside(str(folder)):
            found += [(folder / p.name).as_posix() for p in sorted((root / folder).glob("launcher-*.out"))]
    found.append(PLAN_PATH)
    return tuple(
        rel
        for rel in dict.fromkeys(os.path.normpath(r).replace(os.sep, "/") for r in found)
        if _lexically_inside(rel) and (root / rel).is_file() and _inside(root, rel)
    )


def _read_plan(root: Path, hosts: set[str], notes: list[str]) -> tuple[PlanRecord | None, str | None]:
    """The pair plan, or None and why not (also a note) when it is there but cannot be used: the
    report then judges the pairs from their logs alone."""
    path = root / PLAN_PATH
    if not path.is_file() and not path.is_symlink():
        return None, None
    error = None
    if not _inside(root, PLAN_PATH):
        error = f"{PLAN_PATH} links out of the run directory; not read"
    elif path.stat().st_size > MANIFEST_MAX_BYTES:
        error = f"{PLAN_PATH} is {_size(path.stat().st_size)}, larger than any plan; not read"
    if error is not None:
        notes.append(f"the pair plan is not used: {error}; pairs judged from their logs")
        return None, error
    try:
        plan = _redacted_plan(read_plan(root))
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError) as exc:
        # PlanFileError is a ValueError; the others are what a hand-edited file could still raise.
        error = redact_text(str(exc)).replace(str(path), PLAN_PATH)
        if not error.startswith(PLAN_PATH):
            error = f"{PLAN_PATH}: not a readable plan ({error})"
        notes.append(f"the pair plan is not used: {error}; pairs judged from their logs")
        return None, error
    named = {d.subject for d in plan.decisions if "--" not in d.subject}
    named |= {h for d in plan.decisions for pair in d.pairs for h in pair}
    strangers = sorted(named - hosts)
    if strangers:
        more = f" and {len(strangers) - 5} more" if len(strangers) > 5 else ""
        notes.append(f"{PLAN_PATH} names hosts the run does not have: {', '.join(strangers[:5])}{more}")
    return plan, None


def _redacted_plan(plan: PlanRecord | None) -> PlanRecord | None:
    """The plan with its free text (the log the run printed, each decision's reason) redacted: the
    report quotes both."""
    if plan is None:
        return None
    decisions = tuple(replace(d, reason=redact_text(d.reason)) for d in plan.decisions)
    return replace(plan, log=tuple(redact_text(line) for line in plan.log), decisions=decisions)


# Parameters are flat (docs/run-directory.md); deeper nesting is not a run's.
_PARAMETERS_DEPTH = 8
_MANIFEST_TEXT = ("run_id", "status", "started_at", "finished_at", "backend", "launcher", "collbench_version")


def launch_ranks(log: LogData, parameters: dict[str, Any]) -> int | None:
    """How many ranks a launch ran: as its log says (the `#  Rank N` lines, the JSON), else the
    manifest's hosts x gpus_per_host; None when neither tells."""
    run = log.run
    if run is not None and run.nranks:
        return run.nranks
    if run is not None and run.devices:
        return len(run.devices)
    per_host = parameters.get("gpus_per_host")
    if isinstance(per_host, int) and not isinstance(per_host, bool) and per_host > 0 and log.launch.hosts:
        return per_host * len(log.launch.hosts)
    return None


def _with_log_nccl(hosts: dict[str, Host], logs: list[LogData]) -> dict[str, Host]:
    """Each host's NCCL as its benchmark logs name it, put where the report reads it (its
    facts' `nccl_version`); what facts.json said is kept in `nccl_from_probe`."""
    seen: dict[str, Counter[str]] = {}
    names = _names_of(hosts)
    for log in logs:
        host = _rank0_host(log, hosts, names)
        for run in log.runs:
            if host is not None and run.nccl_version:
                seen.setdefault(host, Counter())[run.nccl_version] += 1
    out: dict[str, Host] = {}
    for name, host in hosts.items():
        counted = seen.get(name)
        if not counted:
            out[name] = host
            continue
        version = counted.most_common(1)[0][0]
        probe = (host.facts or {}).get("nccl_version")
        facts = {**host.facts, "nccl_version": version} if host.facts is not None else None
        out[name] = replace(host, facts=facts, nccl_from_logs=version, nccl_from_probe=probe)
    return out


def _names_of(hosts: dict[str, Host]) -> dict[str, str]:
    """Each name a host may print (its name, inventory name, facts' hostname) to the host: the first
    host in order that has it, looked up once per log (a scan of every host for each of a 4,000-host
    run's 24,000 pair logs took 7 s)."""
    names: dict[str, str] = {}
    for name, host in hosts.items():
        for known in (name, host.inventory_hostname, (host.facts or {}).get("hostname")):
            if isinstance(known, str):
                names.setdefault(known, name)
    return names


def _rank0_host(log: LogData, hosts: dict[str, Host], names: dict[str, str]) -> str | None:
    """The host whose process printed the log's header (rank 0): an intra launch's own host; for a
    pair or all-hosts launch, the host rank 0's device line names."""
    launch = log.launch
    if launch.kind == "intra":
        return launch.hosts[0] if launch.hosts and launch.hosts[0] in hosts else None
    run = log.run
    printed = next((d.host for d in run.devices if d.rank == 0 and d.host), None) if run else None
    return None if printed is None else names.get(printed)


def mark_interrupted(run_dir: str | Path) -> bool:
    """Rewrite a `running` manifest as `interrupted` (collbench_py/rundir/manifest.py owns the file)."""
    return _mark_interrupted(run_dir)


def _text(value: Any) -> str | None:
    """A manifest string; anything else (a list where a string belongs) counts as absent."""
    return value if isinstance(value, str) and value else None


def _field(entry: dict[str, Any], key: str, wrong: list[str], where: str = "") -> str | None:
    """A string field of the manifest; a value of another type is named in `wrong` and ignored."""
    value = entry.get(key)
    if value is not None and not isinstance(value, str):
        wrong.append(f"{where}{key}")
    return _text(value)


def _parameters(manifest: dict[str, Any], wrong: list[str]) -> dict[str, Any]:
    parameters = manifest.get("parameters")
    if isinstance(parameters, dict) and _depth(parameters, _PARAMETERS_DEPTH) <= _PARAMETERS_DEPTH:
        # Quoted whole in results.json and the history: a launch environment can be among them.
        return redact_value(parameters)
    if parameters is not None:
        wrong.append("parameters")
    return {}


def _read_manifest(root: Path) -> dict[str, Any]:
    if not root.is_dir():
        raise RunDirError(f"{root}: no such directory")
    manifest_path = root / "manifest.json"
    if not manifest_path.is_file():
        runs = sorted(p.name for p in root.iterdir() if (p / "manifest.json").is_file())
        hint = f"; it holds runs, the newest is {root / runs[-1]}" if runs else ""
        raise RunDirError(f"{root} is not a run directory: no manifest.json{hint}")
    if not _inside(root, "manifest.json"):
        raise RunDirError(f"{manifest_path}: links out of the run directory; not read")
    try:
        size = manifest_path.stat().st_size
        if size > MANIFEST_MAX_BYTES:
            raise RunDirError(f"{manifest_path}: {_size(size)}, larger than any run's manifest; not read")
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RunDirError(f"{manifest_path}: cannot read ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise RunDirError(f"{manifest_path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise RunDirError(f"{manifest_path}: not valid JSON (nested too deeply)") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("hosts", {}), dict):
        raise RunDirError(f"{manifest_path}: not a run manifest (no `hosts` object)")
    if manifest.get("schema", 1) != 1:
        raise RunDirError(f"{manifest_path}: manifest schema {manifest.get('schema')!r}, this reads 1")
    return manifest


def _hosts(root: Path, manifest: dict[str, Any], notes: list[str], wrong: list[str]) -> dict[str, Host]:
    entries: dict[str, Any] = dict(manifest.get("hosts") or {})
    hosts_dir = root / "hosts"
    on_disk = sorted(p.name for p in hosts_dir.iterdir() if p.is_dir()) if hosts_dir.is_dir() else []
    for name in on_disk:
        if name not in entries:
            notes.append(f"hosts/{name}/ is not in the manifest; read anyway")
            entries[name] = {"status": "ok"}
    hosts: dict[str, Host] = {}
    topologies: dict[str, Topology] = {}  # by text: a fleet's hosts mostly print the same matrix
    for name in sorted(entries):
        entry = entries[name]
        if not isinstance(entry, dict):
            wrong.append(f"hosts.{name}")
            entry = {}
        where = f"hosts.{name}."
        reason = _field(entry, "reason", wrong, where)
        topology, topology_error = _read_topology(root, name, notes, topologies)
        node_checks = read_node_checks(name, lambda rel, name=name: _host_file(root, name, rel, notes))
        notes.extend(f"hosts/{name}/{note}" for note in (node_checks.notes if node_checks else ()))
        hosts[name] = Host(
            name=name,
            inventory_hostname=_field(entry, "inventory_hostname", wrong, where) or name,
            status=_field(entry, "status", wrong, where) or "ok",
            reason=redact_text(reason) if reason else None,
            facts=_read_facts(root, name, notes),
            topology=topology,
            topology_error=topology_error,
            gpu_links=_read_gpu_links(root, name, notes),
            node_checks=node_checks,
        )
    return hosts


def _host_file(root: Path, name: str, file: str, notes: list[str]) -> str | None:
    """The text of hosts/<name>/<file>, or None when it is absent, links out of the run directory
    or is too large (with a note)."""
    rel = f"hosts/{name}/{file}"
    path = root / rel
    if not path.is_file() and not path.is_symlink():
        return None
    if not _inside(root, rel):
        notes.append(f"{rel} links out of the run directory; not read")
        return None
    if not path.is_file():
        return None
    try:
        size = path.stat().st_size
        if size > HOST_FILE_MAX_BYTES:
            notes.append(f"{rel} is {_size(size)}, too large for what it holds; not read")
            return None
        return read_text(path)
    except OSError as exc:
        notes.append(f"{rel}: cannot read ({exc.strerror or exc})")
        return None


def _read_facts(root: Path, name: str, notes: list[str]) -> dict[str, Any] | None:
    text = _host_file(root, name, "facts.json", notes)
    if text is None:
        return None
    try:
        facts = json.loads(text)
    except (ValueError, RecursionError) as exc:
        reason = exc if isinstance(exc, ValueError) else "nested too deeply"
        notes.append(f"{name}/facts.json is not valid JSON ({reason}); facts ignored")
        return None
    if not isinstance(facts, dict):
        notes.append(f"{name}/facts.json is not a JSON object ({type(facts).__name__}); facts ignored")
        return None
    dropped: list[str] = []
    checked = _checked_facts(facts, dropped)
    if dropped:
        more = f" and {len(dropped) - 8} more" if len(dropped) > 8 else ""
        notes.append(f"{name}/facts.json: values of the wrong type ignored: {', '.join(dropped[:8])}{more}")
    # Facts are quoted by the report (kernel, versions, names): a probe that echoed a secret keeps it out.
    return redact_value(checked)


# The documented facts schema (docs/run-directory.md): a value of another type is dropped, as if
# the host could not tell, so that no check compares a string with a number.
_NUMBER = (int, float)
_FACT_TYPES: dict[str, tuple[type, ...]] = {
    "hostname": (str,),
    "inventory_hostname": (str,),
    "collected_at": (str,),
    "gpus": (list,),
    "gpu_vendor": (str,),
    "driver_version": (str,),
    "cuda_version": (str,),
    "nccl_version": (str,),
    "mpi_version": (str,),
    "torch_version": (str,),
    "ib": (list,),
    "cpu": (dict,),
    "numa_nodes": (int,),
    "memory_mib": _NUMBER,
    "os": (dict,),
    "unanswered": (list,),
}
# Lists of names, not of records.
_STRING_LISTS = frozenset({"unanswered"})
_FIELD_TYPES: dict[str, dict[str, tuple[type, ...]]] = {
    "gpus": {
        "index": (int,),
        "name": (str,),
        "uuid": (str,),
        "memory_total_mib": _NUMBER,
        "pci_bus_id": (str,),
        "driver_version": (str,),
        "pcie_gen_current": (int,),
        "pcie_gen_max": (int,),
        "pcie_width_current": (int,),
        "pcie_width_max": (int,),
    },
    "ib": {"device": (str,), "port": (int,), "state": (str,), "rate_gbps": _NUMBER, "link_layer": (str,)},
    "cpu": {"model": (str,), "sockets": (int,), "cores": (int,), "threads": (int,)},
    "os": {"distribution": (str,), "version": (str,), "kernel": (str,)},
}
# Keys the schema does not name are kept when shallow (a newer schema's), dropped when deeper.
_UNKNOWN_DEPTH = 4


def _is(value: Any, types: tuple[type, ...]) -> bool:
    return isinstance(value, types) and not (isinstance(value, bool) and bool not in types)


def _checked_facts(facts: dict[str, Any], dropped: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in facts.items():
        types = _FACT_TYPES.get(key)
        if value is None:
            out[key] = None
        elif types is None:
            if _depth(value, _UNKNOWN_DEPTH) <= _UNKNOWN_DEPTH:
                out[key] = value
            else:
                dropped.append(key)
        elif not _is(value, types):
            dropped.append(key)
        elif key in _STRING_LISTS:
            dropped += [f"{key}[{i}]" for i, item in enumerate(value) if not isinstance(item, str)]
            out[key] = [item for item in value if isinstance(item, str)]
        elif isinstance(value, list):
            items = [(i, item) for i, item in enumerate(value) if isinstance(item, dict)]
            dropped += [f"{key}[{i}]" for i, item in enumerate(value) if not isinstance(item, dict)]
            out[key] = [
                _checked_fields(item, _FIELD_TYPES[key], f"{key}[{i}].", dropped) for i, item in items
            ]
        elif isinstance(value, dict):
            out[key] = _checked_fields(value, _FIELD_TYPES[key], f"{key}.", dropped)
        else:
            out[key] = value
    return out


def _checked_fields(
    entry: dict[str, Any], types: dict[str, tuple[type, ...]], where: str, dropped: list[str]
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in entry.items():
        wanted = types.get(key)
        ok = _is(value, wanted) if wanted else _depth(value, 1) <= 1
        if value is None or ok:
            out[key] = value
        else:
            dropped.append(f"{where}{key}")
    return out


def _depth(value: Any, limit: int) -> int:
    """How deeply `value` nests lists and objects, counted up to limit + 1."""
    if not isinstance(value, (dict, list)):
        return 0
    if limit < 0:
        return 1
    items = value.values() if isinstance(value, dict) else value
    return 1 + max((_depth(item, limit - 1) for item in items), default=0)


# One file per nccl-tests launch (gpu-link-<collective>.csv); a torch launch, which runs every
# collective in one process, writes gpu-link.csv.
_GPU_LINK_FILE = re.compile(r"^gpu-link(?:-(?P<collective>[\w.-]+))?\.csv$")


def _read_gpu_links(root: Path, name: str, notes: list[str]) -> dict[str, tuple[GpuLink, ...]]:
    """Every hosts/<name>/intra/gpu-link[-<collective>].csv: the PCIe links under load, per launch
    (keyed by collective; "all" for a torch launch's single file)."""
    folder = root / "hosts" / name / "intra"
    if not folder.is_dir():
        return {}
    out: dict[str, tuple[GpuLink, ...]] = {}
    for path in sorted(folder.iterdir()):
        match = _GPU_LINK_FILE.match(path.name)
        if match is None:
            continue
        text = _host_file(root, name, f"intra/{path.name}", notes)
        if text is None:
            continue
        links, skipped = parse_gpu_links(text)
        if skipped:
            notes.append(f"hosts/{name}/intra/{path.name}: {skipped} line(s) not read as a PCIe link")
        if links:
            out[match["collective"] or "all"] = links
    return out


def parse_gpu_links(text: str) -> tuple[tuple[GpuLink, ...], int]:
    """`nvidia-smi --query-gpu=pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,
    pcie.link.width.current,pcie.link.width.max --format=csv,noheader` lines; a value nvidia-smi
    could not read (`[N/A]`) is None. Returns the links and how many lines were not links."""
    links: list[GpuLink] = []
    skipped = 0
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if not line.strip():
            continue
        if len(cells) != 5 or not cells[0] or cells[0].lower().startswith("pci.bus_id"):
            skipped += not cells[0].lower().startswith("pci.bus_id")
            continue
        numbers = [int(cell) if cell.isdigit() else None for cell in cells[1:]]
        links.append(GpuLink(cells[0], *numbers))
    return tuple(links), skipped


def _read_topology(
    root: Path, name: str, notes: list[str], known: dict[str, Topology]
) -> tuple[Topology | None, str | None]:
    """The host's topology; one text read before (`known`, by text) is not parsed again, and the
    hosts that printed it share one Topology (the verdicts compare their cells once)."""
    text = _host_file(root, name, "topo.txt", notes)
    if text is None:
        return None, None
    if text in known:
        return known[text], None
    if not text.strip():
        return None, "topo.txt is empty"
    try:
        parsed = parse_text(text, file=f"hosts/{name}/topo.txt")
    except ParseError as exc:
        return None, f"topo.txt not readable: {redact_text(str(exc))}"
    if parsed.topology is None:
        return None, "topo.txt holds no topology matrix"
    known[text] = _shared_texts(parsed.topology)
    return known[text], None


def _shared_texts(topology: Topology) -> Topology:
    """The same topology with its labels and cells interned: every host of a fleet says "NV18",
    "GPU0" and "SYS" hundreds of times, and 4,000 hosts' copies took 50 MB."""
    return replace(topology, **{f.name: _interned(getattr(topology, f.name)) for f in fields(topology)})


def _interned(value: Any) -> Any:
    if type(value) is str:
        return sys.intern(value)
    if type(value) is dict:
        return {_interned(k): _interned(v) for k, v in value.items()}
    if type(value) is tuple:
        return tuple(_interned(v) for v in value)
    return value


def _launches(
    root: Path, manifest: dict[str, Any], hosts: dict[str, Host], notes: list[str], wrong: list[str]
) -> list[Launch]:
    launches: list[Launch] = []
    seen: set[str] = set()
    entries = manifest.get("launches") or []
    if not isinstance(entries, list):
        wrong.append("launches")
        notes.append("the manifest's `launches` is not a list; logs found on disk are read instead")
        entries = []
    for index, entry in enumerate(entries):
        where = f"launches[{index}]."
        if isinstance(entry, dict) and entry.get("kind") == RAIL_KIND:
            continue  # perftest logs, read through the pair plan (plan.json), not nccl logs
        if not isinstance(entry, dict) or not _text(entry.get("log")):
            wrong.append(f"launches[{index}]" if not isinstance(entry, dict) else f"{where}log")
            continue
        log = str(entry["log"])
        seen.add(os.path.normpath(log))
        if not _lexically_inside(log):
            notes.append(f"launch log {log!r} points outside the run directory; ignored")
            continue
        hosts_listed = entry.get("hosts")
        listed = isinstance(hosts_listed, list) and all(isinstance(h, str) for h in hosts_listed)
        if hosts_listed is not None and not listed:
            wrong.append(f"{where}hosts")
        launches.append(
            Launch(
                kind=_field(entry, "kind", wrong, where) or _kind_of(log),
                hosts=tuple(hosts_listed) if listed and hosts_listed else _hosts_of(log),
                collective=_field(entry, "collective", wrong, where) or Path(log).stem,
                log=log,
                status=_field(entry, "status", wrong, where),
                rc=_int(entry, "rc", wrong, where),
                round=_int(entry, "round", wrong, where),
                launcher=_field(entry, "launcher", wrong, where),
            )
        )
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


def _ssh_hops(manifest: dict[str, Any], wrong: list[str]) -> SshHops | None:
    """The manifest's `ssh_hops` (docs/run-directory.md); a malformed one is named and ignored."""
    entry = manifest.get("ssh_hops")
    if entry is None:
        return None
    failed = entry.get("failed") if isinstance(entry, dict) else None
    if not isinstance(failed, list):
        wrong.append("ssh_hops")
        return None
    hops = []
    for index, hop in enumerate(failed):
        where = f"ssh_hops.failed[{index}]."
        if not isinstance(hop, dict):
            wrong.append(f"ssh_hops.failed[{index}]")
            continue
        source, target = _field(hop, "from", wrong, where), _field(hop, "to", wrong, where)
        if source and target:
            error = _field(hop, "error", wrong, where) or "failed"
            hops.append(SshHop(source, target, redact_text(error)))
    mode, checked = _field(entry, "mode", wrong, "ssh_hops."), _int(entry, "checked", wrong, "ssh_hops.")
    return SshHops(mode, checked, tuple(hops))


def _not_measured(
    manifest: dict[str, Any], hosts: dict[str, Host], wrong: list[str]
) -> tuple[NotMeasured, ...]:
    """The manifest's `slurm.unusable` (docs/run-directory.md). A host that was measured after all
    (it has an entry under `hosts`) is not listed: what was measured is judged."""
    slurm = manifest.get("slurm")
    if slurm is None:
        return ()
    entries = slurm.get("unusable") if isinstance(slurm, dict) else None
    if entries is None and isinstance(slurm, dict):
        return ()
    if not isinstance(entries, list):
        wrong.append("slurm.unusable" if isinstance(slurm, dict) else "slurm")
        return ()
    measured = set(hosts) | {h.inventory_hostname for h in hosts.values()}
    found: dict[str, NotMeasured] = {}
    for index, entry in enumerate(entries):
        where = f"slurm.unusable[{index}]."
        if not isinstance(entry, dict):
            wrong.append(f"slurm.unusable[{index}]")
            continue
        host = _field(entry, "host", wrong, where)
        if host is None or host in measured or host in found:
            continue
        state, reason = _field(entry, "state", wrong, where), _field(entry, "reason", wrong, where)
        named = entry.get("named") is True
        why = redact_text(reason) if reason else f"Slurm state {state or 'unknown'}"
        found[host] = NotMeasured(host, state, why, named)
    return tuple(sorted(found.values(), key=lambda n: n.host))


def _int(entry: dict[str, Any], key: str, wrong: list[str], where: str) -> int | None:
    value = entry.get(key)
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    wrong.append(f"{where}{key}")
    return None


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


def _lexically_inside(rel: str) -> bool:
    """A relative path that stays below its base as written (no `..` out, not absolute)."""
    norm = os.path.normpath(rel)
    return (
        "\0" not in rel
        and not os.path.isabs(rel)
        and norm != ".."
        and not norm.startswith("../")
        and norm != "."
    )


def _inside(root: Path, rel: str) -> bool:
    """`rel` stays inside `root` once every link is followed."""
    base = os.path.realpath(root)
    target = os.path.realpath(os.path.join(base, rel))
    return target.startswith(base + os.sep)


def _size(size: int) -> str:
    return f"{size / 2**30:.1f} GiB" if size >= 2**30 else f"{size / 2**20:.0f} MiB"


def _load_logs(
    root: Path, launches: list[Launch], workers: int | None, each_log: Callable[[LogData], Any] | None
) -> tuple[list[LogData], tuple[Any, ...]]:
    jobs = [(str(root), launch) for launch in launches]
    if workers is None:
        workers = min(os.cpu_count() or 1, 4) if len(jobs) >= PARALLEL_FROM else 1
    job: Callable[[tuple[str, Launch]], Any] = (
        _load_packed if each_log is None else partial(_load_packed_and, each_log)
    )
    if workers <= 1:
        done = [job(one) for one in jobs]
    else:
        with ProcessPoolExecutor(workers, initializer=end_with_parent, initargs=(os.getpid(),)) as pool:
            done = list(pool.map(job, jobs, chunksize=64))
    if each_log is None:
        return done, ()
    return [log for log, _ in done], tuple(extra for _, extra in done)


def _load_packed_and(each_log: Callable[[LogData], Any], job: tuple[str, Launch]) -> tuple[LogData, Any]:
    log = _load_packed(job)
    return log, each_log(log)


def _load_packed(job: tuple[str, Launch]) -> LogData:
    """A log, its rows and ranks packed (PackedRows, PackedDevices): a 4,000-host run holds
    30,000 logs, and as records their rows alone took most of a gigabyte."""
    log = _load_log(job)
    if not log.runs:
        return log
    return replace(log, runs=tuple(_packed_run(run) for run in log.runs))


def _packed_run(run: Run) -> Run:
    return replace(run, rows=PackedRows.of(run.rows), devices=PackedDevices.of(run.devices))


# ---- rows and ranks held as numbers --------------------------------------------------------------

_INT64 = (-(2**63), 2**63)
_HALF_FLOATS = ("time_us", "algbw", "busbw", "error")
ROW_INTS = 6  # size, count, root, oop wrong, ip wrong, the mask of what is None
ROW_FLOATS = 8  # time_us, algbw, busbw, error of each half
COMMON_MASK = (1 << 6) | (1 << 11)  # every value but the error columns (nccl-tests >= 2.13)
# Mask bits (see _pack_row): no in-place half; no busbw out of place; no busbw in place; no #wrong
# out of place; no #wrong in place.
_IP_NONE, _OOP_BUSBW_NONE, _IP_BUSBW_NONE = 1 << 2, 1 << 5, 1 << 10
_OOP_WRONG_NONE, _IP_WRONG_NONE = 1 << 7, 1 << 12


class _ReadAsTuple:
    """A packed sequence (PackedRows, PackedDevices, Points) equal to, and hashed as, the plain
    tuple of the records it makes when read."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, type(self) | tuple | list):
            return tuple(self) == tuple(other)  # type: ignore[call-overload]
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))  # type: ignore[call-overload]


class Points(_ReadAsTuple, Sequence[tuple[int, float]]):
    """A log's (size, busbw) points in two arrays: each (size, busbw) tuple is made when read, equal
    to one of a plain tuple of them, and not kept (16 bytes a point instead of about 130: a 4,000-host
    report holds some 670,000 for its figures)."""

    __slots__ = ("_sizes", "_values")

    def __init__(self, sizes: Iterable[int], values: Iterable[float]) -> None:
        self._sizes, self._values = array("q", sizes), array("d", values)

    def __len__(self) -> int:
        return len(self._sizes)

    def __getitem__(self, index):  # type: ignore[no-untyped-def, override]
        if isinstance(index, slice):
            return tuple(zip(self._sizes[index].tolist(), self._values[index].tolist(), strict=True))
        return (self._sizes[index], self._values[index])

    def __iter__(self) -> Iterator[tuple[int, float]]:
        return zip(self._sizes.tolist(), self._values.tolist(), strict=True)

    def __repr__(self) -> str:
        return f"Points({tuple(self)!r})"


class PackedRows(_ReadAsTuple, Sequence[Row]):
    """A run's rows in two arrays of numbers and a tuple of texts; the Row (and Half) records are
    made when read, equal to the parsed ones, and not kept. About 130 bytes a row instead of 700.

    `of` keeps the plain tuple of rows it cannot pack exactly (a value of an unexpected type, an
    integer beyond 64 bits)."""

    __slots__ = ("_floats", "_ints", "_series", "_texts")

    def __init__(self, ints: array, floats: array, texts: tuple[str | None, ...]) -> None:
        self._ints, self._floats, self._texts = ints, floats, texts
        self._series: dict[bool, Points] = {}

    @classmethod
    def of(cls, rows: Sequence[Row]) -> Sequence[Row]:
        if isinstance(rows, PackedRows) or not rows:
            return rows
        ints, floats, texts = array("q"), array("d"), []
        try:
            for row in rows:
                mask = _pack_row(row, ints, floats)
                ints.append(mask)
                texts += (_text_of(row.dtype), _text_of(row.redop))
        except (TypeError, OverflowError):
            return rows
        return cls(ints, floats, tuple(texts))

    def __len__(self) -> int:
        return len(self._texts) // 2

    def __getitem__(self, index):  # type: ignore[no-untyped-def, override]
        if isinstance(index, slice):
            return tuple(self._row(i) for i in range(*index.indices(len(self))))
        count = len(self)
        if index < 0:
            index += count
        if not 0 <= index < count:
            raise IndexError("row index out of range")
        return self._row(index)

    def __iter__(self) -> Iterator[Row]:
        # The verdicts read every row of every log several times: one pass over plain lists,
        # the common row (nothing None) made without a test per field.
        ints, floats, texts = iter(self._ints.tolist()), iter(self._floats.tolist()), iter(self._texts)
        half, row = new_half, new_row
        for (size, count, root, w1, w2, mask), (t1, a1, b1, e1, t2, a2, b2, e2), dtype, redop in zip(
            zip(ints, ints, ints, ints, ints, ints, strict=False),  # six at a time
            zip(floats, floats, floats, floats, floats, floats, floats, floats, strict=False),
            texts,
            texts,
            strict=True,
        ):
            if mask == COMMON_MASK:
                yield row(
                    size, count, dtype, redop, root, half(t1, a1, b1, w1, None), half(t2, a2, b2, w2, None)
                )
            else:
                yield self._made(
                    size, count, root, w1, w2, mask, (t1, a1, b1, e1, t2, a2, b2, e2), dtype, redop
                )

    def __repr__(self) -> str:
        return f"PackedRows({len(self)} rows)"

    def sizes(self) -> list[int]:
        """Each row's size, in order, without making the rows."""
        return self._ints[0::ROW_INTS].tolist()

    def any_wrong(self) -> bool:
        """Whether a row has a nonzero #wrong in either half (a None is packed as 0)."""
        return any(self._ints[3::ROW_INTS]) or any(self._ints[4::ROW_INTS])

    def any_checked(self) -> bool:
        """Whether a row has a #wrong value in either half (none anywhere: the run had `-c 0`), read
        from the masks: the verdicts ask for every log, and making its rows cost a whole pass."""
        masks = self._ints[5::ROW_INTS]
        return any(not mask & _OOP_WRONG_NONE or not mask & (_IP_NONE | _IP_WRONG_NONE) for mask in masks)

    def busbw_series(self, in_place: bool) -> Points:
        """(size, busbw) by size as verdicts.stats.series computes them (each row the mean of its
        halves as row_busbw does, a size printed twice its median), read from the arrays without
        making a Row. Kept, since the verdicts ask for it more than once; the report's series of a
        host is this same one (4,000 hosts: 670,000 points, held once, in arrays)."""
        known = self._series.get(in_place)
        if known is not None:
            return known
        ints, floats = self._ints.tolist(), self._floats.tolist()
        mask = _shared_mask(ints)
        if mask is not None:
            # Each size once, every row with the same values (nearly every log): each its row's mean.
            means = _half_means(floats, 2, mask, in_place)
            found = Points(ints[0::ROW_INTS], means) if means is not None else Points((), ())
            self._series[in_place] = found
            return found
        by_size: dict[int, list[float]] = {}
        for i in range(len(self)):
            size, mask = ints[i * ROW_INTS], ints[i * ROW_INTS + 5]
            values = [] if mask & _OOP_BUSBW_NONE else [floats[i * ROW_FLOATS + 2]]
            if in_place and not mask & (_IP_NONE | _IP_BUSBW_NONE):
                values.append(floats[i * ROW_FLOATS + 6])
            if values:
                by_size.setdefault(size, []).append(sum(values) / len(values))
        ordered = sorted(by_size.items())
        found = Points((size for size, _ in ordered), (_median_of(values) for _, values in ordered))
        self._series[in_place] = found
        return found

    def columns(self) -> tuple[list[int], list[float], tuple[str | None, ...]]:
        """The packed values as plain lists: ROW_INTS ints (size, count, root, oop wrong, ip
        wrong, mask) and ROW_FLOATS floats (time, algbw, busbw, error of each half) per row, and
        two texts (dtype, redop); a row whose mask is COMMON_MASK has every value but the errors."""
        return self._ints.tolist(), self._floats.tolist(), self._texts

    def size_summary(self) -> list[tuple[int, float | None, float | None, float | None, int | None]]:
        """Per size, in size order: the median of the rows' busbw, algbw and time (each row the mean
        of its halves) and the sum of #wrong (None when no half has one), as history.records
        computes them from the rows, read from the arrays without making a Row."""
        ints, floats = self._ints.tolist(), self._floats.tolist()
        sizes = ints[0::ROW_INTS]
        mask = _shared_mask(ints)
        if mask is not None and mask != COMMON_MASK:
            # Each size once, every row with the same values (alltoall and sendrecv have no
            # in-place #wrong): each size its row's half means, a column at a time.
            missing = [None] * len(sizes)
            return list(
                zip(
                    sizes,
                    _half_means(floats, 2, mask) or missing,
                    _half_means(floats, 1, mask) or missing,
                    _half_means(floats, 0, mask) or missing,
                    _wrong_sums(ints, mask) or missing,
                    strict=True,
                )
            )
        if mask is not None:
            # Every row whole, each size once (nearly every log): each size its row's half means, in
            # one pass (the column path above does four).
            return [
                (size, (b1 + b2) / 2, (a1 + a2) / 2, (t1 + t2) / 2, w1 + w2)
                for size, t1, a1, b1, t2, a2, b2, w1, w2 in zip(
                    sizes,
                    floats[0::ROW_FLOATS],
                    floats[1::ROW_FLOATS],
                    floats[2::ROW_FLOATS],
                    floats[4::ROW_FLOATS],
                    floats[5::ROW_FLOATS],
                    floats[6::ROW_FLOATS],
                    ints[3::ROW_INTS],
                    ints[4::ROW_INTS],
                    strict=True,
                )
            ]
        groups: dict[int, tuple[list[float], list[float], list[float], list[int]]] = {}
        for i in range(len(self)):
            size, mask, at = ints[i * ROW_INTS], ints[i * ROW_INTS + 5], i * ROW_FLOATS
            group = groups.get(size)
            if group is None:
                group = groups[size] = ([], [], [], [])
            if mask == COMMON_MASK:  # both halves whole: the loop below, without its lists
                group[0].append((floats[at + 2] + floats[at + 6]) / 2)
                group[1].append((floats[at + 1] + floats[at + 5]) / 2)
                group[2].append((floats[at] + floats[at + 4]) / 2)
                group[3].extend((ints[i * ROW_INTS + 3], ints[i * ROW_INTS + 4]))
                continue
            in_place = not mask & _IP_NONE
            for k, values in ((2, group[0]), (1, group[1]), (0, group[2])):  # busbw, algbw, time_us
                present = [] if mask & (8 << k) else [floats[at + k]]
                if in_place and not mask & (256 << k):
                    present.append(floats[at + 4 + k])
                if present:
                    values.append(sum(present) / len(present))
            if not mask & (8 << 4):
                group[3].append(ints[i * ROW_INTS + 3])
            if in_place and not mask & (256 << 4):
                group[3].append(ints[i * ROW_INTS + 4])
        return [
            (size, _median_or_none(b), _median_or_none(a), _median_or_none(t), sum(w) if w else None)
            for size, (b, a, t, w) in sorted(groups.items())
        ]

    def _row(self, i: int) -> Row:
        size, count, root, w1, w2, mask = self._ints[i * ROW_INTS : (i + 1) * ROW_INTS]
        f = self._floats[i * ROW_FLOATS : (i + 1) * ROW_FLOATS]
        return self._made(size, count, root, w1, w2, mask, f, self._texts[2 * i], self._texts[2 * i + 1])

    @staticmethod
    def _made(  # noqa: PLR0917 - the packed fields, in order
        size: int,
        count: int,
        root: int,
        w1: int,
        w2: int,
        mask: int,
        f: Sequence[float],
        dtype: str | None,
        redop: str | None,
    ) -> Row:
        oop = _half(f, 0, w1, mask >> 3)
        ip = None if mask & 4 else _half(f, 4, w2, mask >> 8)
        return new_row(size, None if mask & 1 else count, dtype, redop, None if mask & 2 else root, oop, ip)


def _shared_mask(ints: list[int]) -> int | None:
    """The mask every row has, where each size is printed once in increasing order; else None."""
    sizes, masks = ints[0::ROW_INTS], ints[5::ROW_INTS]
    if not masks:
        return COMMON_MASK
    if masks.count(masks[0]) == len(masks) and all(map(int.__lt__, sizes, sizes[1:])):
        return masks[0]
    return None


def _half_means(floats: list[float], k: int, mask: int, in_place: bool = True) -> list[float] | None:
    """Each row's mean of its halves' value k (0 time, 1 algbw, 2 busbw), every row having `mask`,
    as a loop over the rows computes it (sum of the present halves over their count); None where
    no half has one."""
    oop = None if mask & (8 << k) else floats[k::ROW_FLOATS]
    ip = floats[4 + k :: ROW_FLOATS] if in_place and not mask & (_IP_NONE | (256 << k)) else None
    if oop is not None and ip is not None:
        return list(map(_half_mean, oop, ip))
    one = oop if oop is not None else ip
    return None if one is None else list(map(_one_mean, one))


def _wrong_sums(ints: list[int], mask: int) -> list[int] | None:
    """Each row's #wrong summed over the halves that have one, every row having `mask`; None where
    no half has one."""
    oop = None if mask & _OOP_WRONG_NONE else ints[3::ROW_INTS]
    ip = None if mask & (_IP_NONE | _IP_WRONG_NONE) else ints[4::ROW_INTS]
    if oop is not None and ip is not None:
        return list(map(int.__add__, oop, ip))
    return oop if oop is not None else ip


def _half_mean(oop: float, ip: float) -> float:
    """The mean of a row's two busbw halves as row_busbw computes it (sum of a list over its length)."""
    return sum((oop, ip)) / 2


def _one_mean(oop: float) -> float:
    """The out-of-place busbw alone as row_busbw computes it."""
    return sum((oop,)) / 1


def _median_of(values: list[float]) -> float:
    # A size printed once (nearly every size) is its own median, without statistics' sort.
    return values[0] if len(values) == 1 else statistics.median(values)


def _median_or_none(values: list[float]) -> float | None:
    return _median_of(values) if values else None


def _pack_row(row: Row, ints: array, floats: array) -> int:
    """Append the row's numbers; return its mask: bit 0 count, 1 root, 2 ip None, then 5 bits a
    half (time, algbw, busbw, error, wrong) from bit 3 (out of place) and bit 8 (in place)."""
    if type(row) is not Row or type(row.size) is not int:
        raise TypeError("not a plain row")
    if any(value is not None and type(value) is not int for value in (row.count, row.root)):
        raise TypeError("not an integer")
    mask = 4 if row.ip is None else 0
    halves = (row.oop, row.ip or Half())
    wrongs = []
    for shift, half in zip((3, 8), halves, strict=True):
        if type(half) is not Half:
            raise TypeError("not a plain half")
        for k, name in enumerate(_HALF_FLOATS):
            value = getattr(half, name)
            if value is None:
                mask |= 1 << (shift + k)
                floats.append(0.0)
            elif type(value) is float:
                floats.append(value)
            else:
                raise TypeError("not a float")
        if half.wrong is None:
            mask |= 1 << (shift + 4)
        elif type(half.wrong) is not int:
            raise TypeError("not an integer")
        wrongs.append(half.wrong or 0)
    mask |= (row.count is None) | (row.root is None) << 1
    ints.extend((row.size, row.count or 0, row.root or 0, *wrongs))
    return mask


def _half(f: Sequence[float], at: int, wrong: int, mask: int) -> Half:
    return new_half(
        None if mask & 1 else f[at],
        None if mask & 2 else f[at + 1],
        None if mask & 4 else f[at + 2],
        None if mask & 16 else wrong,
        None if mask & 8 else f[at + 3],
    )


def _text_of(value: str | None) -> str | None:
    if value is None:
        return None
    if type(value) is not str:
        raise TypeError("not a text")
    return sys.intern(value)  # dtype and redop repeat in every row: one object each per worker batch


class PackedDevices(_ReadAsTuple, Sequence[Device]):
    """A run's `#  Rank N ...` lines as tuples of their fields (texts interned); Device records
    made when read. A pair log has 16 of them, 30,000 logs half a million."""

    __slots__ = ("_fields",)

    def __init__(self, fields: tuple[tuple[Any, ...], ...]) -> None:
        self._fields = fields

    @classmethod
    def of(cls, devices: Sequence[Device]) -> Sequence[Device]:
        if isinstance(devices, PackedDevices) or not devices:
            return devices
        if any(type(d) is not Device for d in devices):
            return devices
        return cls(
            tuple(
                (d.rank, _intern(d.host), d.pid, d.group, d.device, _intern(d.bus_id), _intern(d.name))
                for d in devices
            )
        )

    def __len__(self) -> int:
        return len(self._fields)

    def __getitem__(self, index):  # type: ignore[no-untyped-def, override]
        if isinstance(index, slice):
            return tuple(new_device(*f) for f in self._fields[index])
        return new_device(*self._fields[index])

    def __iter__(self) -> Iterator[Device]:
        return (new_device(*f) for f in self._fields)

    def ranks(self) -> list[Any]:
        """Each line's rank, without making the records (the verdicts count the `Rank 0` lines of
        every log)."""
        return [f[0] for f in self._fields]

    def __repr__(self) -> str:
        return f"PackedDevices({len(self)} ranks)"


def _intern(value: Any) -> Any:
    return sys.intern(value) if type(value) is str else value


def load_log(run_dir: str | Path, launch: Launch) -> LogData:
    """One launch's log read as the report reads it (parsed, -J JSON included, tail and evidence)."""
    return _load_log((str(run_dir), launch))


def _load_log(job: tuple[str, Launch]) -> LogData:
    root, launch = job
    path = Path(root) / launch.log
    if not path.is_file() and not path.is_symlink():
        return LogData(launch=launch, exists=False, launcher_output=_launcher_output(Path(root), launch, []))
    if not _inside(Path(root), launch.log):
        refused = "links out of the run directory; not read"
        return LogData(launch=launch, exists=True, parse_error=f"the log {refused}", note=refused)
    if not path.is_file():
        return LogData(launch=launch, exists=False)
    try:
        size = path.stat().st_size
        text = read_text(path, HEAD_BYTES, TAIL_BYTES)
    except OSError as exc:
        reason = f"cannot read ({exc.strerror or exc})"
        return LogData(launch=launch, exists=True, parse_error=reason, note=reason)
    note = None
    if size > HEAD_BYTES + TAIL_BYTES:
        note = (
            f"log is {_size(size)}: only the first {_size(HEAD_BYTES)} and the last {_size(TAIL_BYTES)} "
            "were read"
        )
    # Lines are quoted from it (tail, evidence): a key block goes whole first, its lines say nothing alone.
    lines = without_private_keys(text)[0].splitlines()
    launcher_output = _launcher_output(Path(root), launch, lines)
    tail = tuple(redact_text(line) for line in _last_nonblank(lines, TAIL_LINES))
    evidence = tuple(redact_text(line.strip()) for line in _first(lines, _EVIDENCE.search, EVIDENCE_PER_LOG))
    del lines  # not held while the parser builds its records: a large log's lines are many
    rank0 = len(_RANK0.findall(text))
    common = {"tail": tail, "evidence": evidence, "rank0_lines": rank0, "launcher_output": launcher_output}
    try:
        parsed_runs, unreadable = parse_text(text, file=launch.log).runs, None
    except ParseError as exc:
        parsed_runs, unreadable = (), redact_text(str(exc))
    runs, source, json_note = _with_json_results(Path(root), launch, parsed_runs)
    if unreadable is not None and source != "json":
        return LogData(launch=launch, exists=True, parse_error=unreadable, note=note, **common)
    if unreadable is not None:
        # The -J JSON beside it holds the rows: judged from those, the log kept as the evidence.
        said = f"the log is not readable as a benchmark output ({unreadable}); {json_note}"
        return LogData(
            launch=launch,
            exists=True,
            runs=runs,
            note="; ".join(n for n in (note, said) if n),
            source=source,
            **common,
        )
    return LogData(
        launch=launch,
        exists=True,
        runs=runs,
        wrong_lines=tuple(redact_text(line) for line in _wrong_lines(runs, text)),
        note="; ".join(n for n in (note, json_note) if n) or None,
        source=source,
        **common,
    )


def _launcher_output(root: Path, launch: Launch, log_lines: list[str]) -> tuple[str, ...]:
    """Redacted lines of what the launcher printed: the launch's launcher-*.out files (torch), and
    the log's first lines when the launch failed (nccl-tests: the log is what was printed)."""
    found: list[str] = []
    if launch.status == "failed":
        found += _first(log_lines, str.strip, LAUNCHER_LINES)
    folder = Path(launch.log).parent
    for path in sorted((root / folder).glob("launcher-*.out")) if _lexically_inside(str(folder)) else []:
        rel = (folder / path.name).as_posix()
        if path.is_file() and _inside(root, rel):
            try:
                text = read_text(path, LAUNCHER_BYTES, 0)
            except OSError:
                continue
            found += _first(without_private_keys(text)[0].splitlines(), str.strip, LAUNCHER_LINES)
    return tuple(redact_text(line.rstrip()) for line in found)


def _last_nonblank(lines: list[str], count: int) -> list[str]:
    found: list[str] = []
    for line in reversed(lines):
        if line.strip():
            found.append(line)
            if len(found) == count:
                break
    return found[::-1]


def _first(lines: list[str], match: Any, count: int) -> list[str]:
    found: list[str] = []
    for line in lines:
        if match(line):
            found.append(line)
            if len(found) == count:
                break
    return found


def _wrong_lines(runs: tuple[Run, ...], text: str) -> tuple[str, ...]:
    """The raw log lines of rows with nonzero #wrong, and a failed out-of-bounds line."""
    bad = any(h is not None and h.wrong for run in runs for row in run.rows for h in (row.oop, row.ip))
    if not bad and "Out of bounds" not in text:
        return ()
    lines = text.splitlines()
    quoted: list[str] = []
    for run in runs:
        for row in run.rows:
            if len(quoted) >= WRONG_LINES:
                break
            counts = [h.wrong for h in (row.oop, row.ip) if h is not None and h.wrong]
            if not counts:
                continue
            size = str(row.size)
            raw = next(
                (line.strip() for line in lines if size in line.split() and str(counts[0]) in line.split()),
                None,
            )
            quoted.append(raw or _describe_row(row))
    quoted += [m.group(0).strip() for line in lines if (m := _OOB.search(line)) and "FAILED" in line][
        :WRONG_LINES
    ]
    return tuple(dict.fromkeys(quoted))[:WRONG_LINES]


def _describe_row(row: Any) -> str:
    ip = row.ip.wrong if row.ip is not None else None
    return f"size {row.size}: out-of-place #wrong {row.oop.wrong}, in-place #wrong {ip}"


# ---- nccl-tests -J beside the log ------------------------------------------------------------------


def _with_json_results(
    root: Path, launch: Launch, text_runs: tuple[Run, ...]
) -> tuple[tuple[Run, ...], str, str | None]:
    """The runs to judge, where their rows came from, and a note when the JSON could not be used.

    The JSON's rows (exact numbers, no launcher noise) replace those of the log's main run; what
    only the log tells (NCCL settings, transports, failure lines, warnings) stays. A JSON that is
    absent, unreadable or without rows leaves the log's runs as they are."""
    rel = _json_beside(launch.log)
    json_run, problem = _read_json_run(root, rel)
    if json_run is None:
        return text_runs, "log", problem
    main = max(text_runs, key=lambda r: len(r.rows), default=None)
    if main is None:
        return (json_run,), "json", f"results read from {Path(rel).name}"
    merged = _merged_run(main, json_run)
    return tuple(merged if run is main else run for run in text_runs), "json", None


def _json_beside(log: str) -> str:
    return (Path(log).parent / f"{Path(log).stem}.json").as_posix()


def _read_json_run(root: Path, rel: str) -> tuple[Run | None, str | None]:
    """The run of the JSON file at `rel` with its rows, or None and why not (None when absent)."""
    path = root / rel
    if not path.is_file() and not path.is_symlink():
        return None, None
    if not _inside(root, rel):
        return None, f"{rel} links out of the run directory; not read"
    try:
        size = path.stat().st_size
        if size > HEAD_BYTES:
            return None, f"{rel} is {_size(size)}, too large; results read from the log"
        text = read_text(path, HEAD_BYTES, 0)
    except OSError as exc:
        return None, f"{rel}: cannot read ({exc.strerror or exc}); results read from the log"
    if nccl_json.sniff(text) is None:
        return None, f"{rel} is not an nccl-tests JSON file; results read from the log"
    try:
        parsed = nccl_json.parse(text, rel)
    except ParseError as exc:
        return None, f"{rel}: {redact_text(str(exc))}; results read from the log"
    with_rows = [run for run in parsed.runs if run.rows]
    if not with_rows:
        return None, None  # a run that died before its first size: the log says more
    return _redacted_run(max(with_rows, key=lambda r: len(r.rows))), None


def _redacted_run(run: Run) -> Run:
    """The JSON's `env` block is never read by the parser; its args and error messages are redacted
    like any quoted line."""
    errors = tuple(replace(e, message=redact_text(e.message)) for e in run.errors)
    warnings = tuple(redact_text(w) for w in run.warnings)
    return replace(run, errors=errors, warnings=warnings, params=redact_value(run.params))


def _merged_run(text_run: Run, json_run: Run) -> Run:
    """The log's run with the JSON's measurements. A failure either one saw is kept."""
    status = "failed" if "failed" in (text_run.status, json_run.status) else json_run.status
    errors = text_run.errors + tuple(e for e in json_run.errors if e not in text_run.errors)
    return replace(
        text_run,
        rows=json_run.rows,
        avg_busbw=json_run.avg_busbw if json_run.avg_busbw is not None else text_run.avg_busbw,
        oob=json_run.oob if json_run.oob is not None else text_run.oob,
        nranks=json_run.nranks or text_run.nranks,
        status=status,
        errors=errors,
        warnings=text_run.warnings + tuple(w for w in json_run.warnings if w not in text_run.warnings),
    )
