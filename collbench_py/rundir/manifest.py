"""`manifest.json`: the run, who took part and how each launch ended; the contract between the
playbook that writes it as the run goes and the report that reads it (collbench_py/rundir/load.py).

Every writer goes through this module: the playbook at the start (`running`), after each benchmark
phase and at the end (`complete`), through action_plugins/collbench_manifest.py and `from_ansible`;
`collbench fetch` for logs gathered from nodes (fetch.py); and `mark_interrupted` when the controller
is stopped. Written whole (a temporary file renamed over it), 0600, keys sorted, indent 2.
docs/run-directory.md describes each field for the user. Hosts are keyed by their directory name
(`<host>` of hosts/<host>/); paths are relative to the run directory.

    {
      "schema": 1,
      "run_id": "20261121T215100Z-3f9a2c",
      "status": "complete",                    # running | complete | interrupted | failed
      "started_at": "2026-11-21T21:51:00Z",
      "finished_at": "2026-11-21T21:53:12Z",   # null while running
      "collbench_version": "0.1.0",
      "backend": "torch", "launcher": "torchrun",
      "parameters": {"collectives": [...], ..., "gpus_per_host": 2},
      "hosts": {"node1": {"inventory_hostname": "node1", "status": "ok"},     # ok | unreachable
                "node3": {"inventory_hostname": "node3", "status": "failed",  # | failed | timeout
                          "reason": "..."}},                                   # every status but ok
      "ssh_hops": {...} or null, "pairs": {...} or null,
      "launches": [{"kind": "intra", "hosts": ["node1"], "collective": "all_reduce",
                    "log": "hosts/node1/intra/all_reduce.log", "status": "ok", "rc": 0,
                    "started_at": "...", "finished_at": "...", "round": null, ...},
                   {"kind": "rails", "hosts": ["node1", "node3"], "round": 4, "label": "...",
                    "dest": "inter/pairs/node1--node3/rails-round-4", "status": "ok", "rc": 0,
                    "logs": ["<dest>/rail0.log", "<dest>/rail0.server.log", ...],
                    "rails": [{"index": 0, "status": "ok", "note": null}, ...], ...}],
      "slurm": {"unusable": [{"host", "state", "reason", "named"}], "job_id": ..., ...},  # Slurm only
      "fetched": {"at": "...", "remote_glob": "...", "by": "collbench fetch"}           # fetch only
    }

A host's status, in this order (`host_entry`): what the playbook recorded when the host left the
run (collbench_host_status: unreachable, failed, Slurm's refusal); `failed` when it is no longer in
the play (a task failed on it); `timeout` when an intra-node launch of it timed out; `failed` when
one failed; else `ok`. Launches are in the order they started; the ones never started come last.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from collbench_py.rundir.private_files import replace_file, write_private

SCHEMA = 1
MANIFEST_NAME = "manifest.json"
RUN_STATUSES = ("running", "complete", "interrupted", "failed")
HOST_STATUSES = ("ok", "unreachable", "failed", "timeout")
LAUNCH_KINDS = ("intra", "all", "pair", "rails")
# A rail launch (one pair, rail by rail) keeps its perftest logs in `logs`, not one nccl `log`.
RAIL_KIND = "rails"
OMITTABLE = frozenset(("ssh_hops", "pairs"))
LAUNCH_STATUSES = ("ok", "failed", "timeout", "skipped", None)  # None: fetched, the report judges the log

LEFT_THE_PLAY = "a task failed on this host: see the Ansible output"
INTRA_TIMEOUT = "its intra-node launch ran past collbench_timeout_s"
INTRA_FAILED = "its intra-node launch failed: see its logs"


class ManifestError(ValueError):
    """manifest.json is not what this module writes; the message names the file and the field."""


@dataclass(frozen=True)
class HostEntry:
    inventory_hostname: str
    status: str  # HOST_STATUSES
    reason: str | None = None  # why it is not ok


@dataclass(frozen=True)
class Unusable:
    """A node Slurm listed as down, drained...: from the inventory, never contacted."""

    host: str
    state: str | None
    reason: str | None
    named: bool  # the user named it (COLLBENCH_SLURM_NODES), so its absence matters


@dataclass(frozen=True)
class Manifest:
    run_id: str
    status: str  # RUN_STATUSES
    started_at: str | None
    finished_at: str | None
    collbench_version: str | None
    backend: str | None
    launcher: str | None
    parameters: Mapping[str, Any]
    hosts: Mapping[str, HostEntry]  # by directory name
    # Each launch's entry as collbench_py/launch/steps.py (or fetch.py) made it: kept as written.
    launches: tuple[Mapping[str, Any], ...]
    ssh_hops: Mapping[str, Any] | None = None
    pairs: Mapping[str, Any] | None = None
    slurm: Mapping[str, Any] | None = None  # only in a run with Slurm
    fetched: Mapping[str, Any] | None = None  # only in a run `collbench fetch` wrote
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys this version does not name, kept
    # ssh_hops or pairs when the file has no such key (a run from before they existed, or one
    # `collbench fetch` wrote): left out again rather than written as null.
    absent: frozenset[str] = frozenset()


@dataclass(frozen=True)
class HostState:
    """What the playbook knows of one host of the run."""

    inventory_hostname: str
    dir_name: str
    in_play: bool  # still among the play's hosts (ansible_play_hosts)
    recorded_status: str | None = None  # collbench_host_status: set where the host left the run
    recorded_reason: str | None = None  # collbench_host_reason
    launches: tuple[Mapping[str, Any], ...] = ()  # collbench_launches: those it was the first host of


# ---------------------------------------------------------------- the rules


def host_entry(host: HostState, launches: Sequence[Mapping[str, Any]]) -> HostEntry:
    """The host's status and why (the order of the rules is the module docstring's)."""
    name = host.inventory_hostname
    if host.recorded_status is not None:
        return HostEntry(name, host.recorded_status, host.recorded_reason)
    if not host.in_play:
        return HostEntry(name, "failed", LEFT_THE_PLAY)
    intra = [
        launch.get("status")
        for launch in launches
        if launch.get("kind") == "intra" and host.dir_name in (launch.get("hosts") or ())
    ]
    if "timeout" in intra:
        return HostEntry(name, "timeout", INTRA_TIMEOUT)
    if "failed" in intra:
        return HostEntry(name, "failed", INTRA_FAILED)
    return HostEntry(name, "ok")


def ordered_launches(per_host: Sequence[Sequence[Mapping[str, Any]]]) -> tuple[Mapping[str, Any], ...]:
    """Every host's recorded launches as one list: by start, then those never started, in the
    hosts' order (a launch is recorded by its first host only, so none is there twice)."""
    launches = [launch for recorded in per_host for launch in recorded]
    started = sorted((x for x in launches if x.get("started_at")), key=lambda x: x["started_at"])
    return (*started, *(launch for launch in launches if not launch.get("started_at")))


def slurm_object(allocation: Mapping[str, Any] | None, unusable: Sequence[Unusable]) -> dict[str, Any] | None:
    """The run's allocation (srun), kept as the playbook recorded it, with the unusable nodes."""
    found = dict(allocation or {})
    if unusable:
        found["unusable"] = [_plain(node) for node in unusable]
    return found or None


def build(
    run: Mapping[str, Any],
    hosts: Sequence[HostState],
    *,
    status: str = "running",
    controller: Mapping[str, Any] | None = None,
    unusable: Sequence[Unusable] = (),
    now: str | None = None,
) -> Manifest:
    """The manifest of the run so far. `run` is preflight's collbench_run (run_id, started_at,
    collbench_version, backend, launcher, parameters); `controller` the controller's facts that
    resolve it later (collbench_backend_resolved, collbench_launcher_resolved,
    collbench_ranks_per_host, collbench_ssh_hops_summary, collbench_pairs_plan,
    collbench_slurm_allocation), each one absent until its play sets it."""
    known: Mapping[str, Any] = controller or {}  # only the keys named below are read (templated)
    launches = ordered_launches([host.launches for host in hosts])
    # Each host's intra-node launches, found once: a fleet run has thousands of hosts and launches.
    intra: dict[str, list[Mapping[str, Any]]] = {}
    for launch in launches:
        if launch.get("kind") == "intra":
            for name in launch.get("hosts") or ():
                intra.setdefault(name, []).append(launch)
    return Manifest(
        run_id=run["run_id"],
        status=status,
        started_at=run.get("started_at"),
        finished_at=None if status == "running" else (now or utc_now()),
        collbench_version=run.get("collbench_version"),
        backend=known.get("collbench_backend_resolved", run.get("backend")),
        launcher=known.get("collbench_launcher_resolved", run.get("launcher")),
        parameters={
            **dict(run.get("parameters") or {}),
            "gpus_per_host": known.get("collbench_ranks_per_host"),
        },
        hosts={host.dir_name: host_entry(host, intra.get(host.dir_name, ())) for host in hosts},
        launches=launches,
        ssh_hops=known.get("collbench_ssh_hops_summary"),
        pairs=known.get("collbench_pairs_plan"),
        slurm=slurm_object(known.get("collbench_slurm_allocation"), unusable),
    )


def not_measured(manifest: Manifest) -> list[tuple[str, str]]:
    """The hosts whose status is not ok, (directory name, status): the run's exit code says failure."""
    return [(name, entry.status) for name, entry in manifest.hosts.items() if entry.status != "ok"]


# ---------------------------------------------------------------- from what Ansible knows


def recorded_launches(
    hostvars: Mapping[str, Mapping[str, Any]], names: Sequence[str]
) -> list[Mapping[str, Any]]:
    """The launches the hosts `names` recorded (collbench_launches), in start order."""
    return list(ordered_launches([hostvars[name].get("collbench_launches") or () for name in names]))


def from_ansible(
    hostvars: Mapping[str, Mapping[str, Any]],
    play_hosts: Sequence[str],
    unusable_hosts: Sequence[str] = (),
    *,
    status: str = "running",
    now: str | None = None,
) -> Manifest:
    """The manifest from the playbook's variables: `hostvars` (the controller is `localhost`, it
    holds collbench_run), the hosts still in the play, and the inventory's group slurm_unusable."""
    controller = hostvars["localhost"]
    run = controller["collbench_run"]
    play = set(play_hosts)
    hosts = []
    # One look-up per host: Ansible computes a host's variables afresh on each.
    for name in run["hosts"]:
        values = hostvars[name]
        hosts.append(
            HostState(
                inventory_hostname=name,
                dir_name=str(run["dir_names"][name]),
                in_play=name in play,
                recorded_status=values.get("collbench_host_status"),
                recorded_reason=values.get("collbench_host_reason"),
                launches=tuple(values.get("collbench_launches") or ()),
            )
        )
    unusable = []
    for name in sorted(set(unusable_hosts) - set(run["hosts"])):
        values = hostvars[name]
        unusable.append(
            Unusable(
                host=name,
                state=values.get("collbench_slurm_state"),
                reason=values.get("collbench_slurm_reason"),
                named=_as_bool(values.get("collbench_slurm_named")),
            )
        )
    return build(run, hosts, status=status, controller=controller, unusable=unusable, now=now)


def _as_bool(value: Any) -> bool:
    """Ansible's `bool`: an inventory may say yes, "true" or 1."""
    if isinstance(value, bool):
        return value
    return str(value).lower() in ("yes", "on", "1", "true") if value is not None else False


# ---------------------------------------------------------------- to and from the file


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def to_dict(manifest: Manifest) -> dict[str, Any]:
    data: dict[str, Any] = {
        **manifest.extra,
        "schema": SCHEMA,
        "run_id": manifest.run_id,
        "status": manifest.status,
        "started_at": manifest.started_at,
        "finished_at": manifest.finished_at,
        "collbench_version": manifest.collbench_version,
        "backend": manifest.backend,
        "launcher": manifest.launcher,
        "parameters": dict(manifest.parameters),
        "hosts": {name: _host_dict(entry) for name, entry in manifest.hosts.items()},
        "ssh_hops": manifest.ssh_hops,
        "pairs": manifest.pairs,
        "launches": [dict(launch) for launch in manifest.launches],
    }
    for key in OMITTABLE & manifest.absent:
        if data[key] is None:
            del data[key]
    if manifest.slurm:
        data["slurm"] = dict(manifest.slurm)
    if manifest.fetched is not None:
        data["fetched"] = dict(manifest.fetched)
    return data


def to_json(manifest: Manifest) -> str:
    data = to_dict(manifest)
    validate(data)  # never write what the readers would refuse
    return _dumps(data)


def write(run_dir: Path, manifest: Manifest) -> bool:
    """Write (or replace: it is rewritten as the run goes) the run's manifest.json, 0600, whole.
    False, and nothing written, when it already holds exactly that."""
    return write_private(Path(run_dir) / MANIFEST_NAME, to_json(manifest).encode())


def read(run_dir: Path) -> Manifest:
    """The run's manifest. Raises ManifestError with one clear sentence when it is missing, not
    JSON, or not a manifest this version reads."""
    path = Path(run_dir) / MANIFEST_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"{path}: no such file (not a run directory?)") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        raise ManifestError(f"{path}: not a readable manifest ({error})") from None
    try:
        return from_dict(data)
    except (KeyError, TypeError, ValueError) as error:
        raise ManifestError(f"{path}: not a manifest this version reads ({error})") from None


def from_dict(data: Any) -> Manifest:
    validate(data)
    known = (set(Manifest.__dataclass_fields__) - {"extra", "absent"}) | {"schema"}
    return Manifest(
        run_id=data["run_id"],
        status=data["status"],
        started_at=data.get("started_at"),
        finished_at=data.get("finished_at"),
        collbench_version=data.get("collbench_version"),
        backend=data.get("backend"),
        launcher=data.get("launcher"),
        parameters=dict(data.get("parameters") or {}),
        hosts={
            name: HostEntry(entry["inventory_hostname"], entry["status"], entry.get("reason"))
            for name, entry in data["hosts"].items()
        },
        launches=tuple(data.get("launches") or ()),
        ssh_hops=data.get("ssh_hops"),
        pairs=data.get("pairs"),
        slurm=data.get("slurm"),
        fetched=data.get("fetched"),
        extra={key: value for key, value in data.items() if key not in known},
        absent=frozenset(key for key in OMITTABLE if key not in data),
    )


def validate(data: Any) -> None:
    """Raises ValueError naming the first field that is not what a manifest holds."""
    _expect(isinstance(data, dict), "the top level is not an object")
    _expect(data.get("schema") == SCHEMA, f"schema {data.get('schema')!r}, expected {SCHEMA}")
    _text(data.get("run_id"), "run_id")
    _expect(data.get("status") in RUN_STATUSES, f"status {data.get('status')!r}")
    for key in ("started_at", "finished_at", "collbench_version", "backend", "launcher"):
        _expect(data.get(key) is None or isinstance(data[key], str), f"{key} {data.get(key)!r} is not text")
    for key in ("parameters", "ssh_hops", "pairs", "slurm", "fetched"):
        _expect(data.get(key) is None or isinstance(data[key], dict), f"{key} is not an object")
    hosts = data.get("hosts")
    _expect(isinstance(hosts, dict), "hosts is not an object")
    for name, entry in hosts.items():
        _expect(isinstance(entry, dict), f"hosts.{name} is not an object")
        _text(entry.get("inventory_hostname"), f"hosts.{name}.inventory_hostname")
        _expect(entry.get("status") in HOST_STATUSES, f"hosts.{name}.status {entry.get('status')!r}")
        _expect(entry.get("reason") is None or isinstance(entry["reason"], str), f"hosts.{name}.reason")
    launches = data.get("launches", [])
    _expect(isinstance(launches, list), "launches is not a list")
    for number, launch in enumerate(launches):
        where = f"launches[{number}]"
        _expect(isinstance(launch, dict), f"{where} is not an object")
        _expect(launch.get("kind") in LAUNCH_KINDS, f"{where}.kind {launch.get('kind')!r}")
        _expect(
            isinstance(launch.get("hosts"), list) and all(isinstance(h, str) for h in launch["hosts"]),
            f"{where}.hosts {launch.get('hosts')!r}",
        )
        if launch["kind"] == RAIL_KIND:
            logs = launch.get("logs")
            listed = isinstance(logs, list) and all(isinstance(log, str) for log in logs)
            _expect(listed, f"{where}.logs {logs!r}")
        else:
            _text(launch.get("collective"), f"{where}.collective")
            _text(launch.get("log"), f"{where}.log")
        _expect(launch.get("status") in LAUNCH_STATUSES, f"{where}.status {launch.get('status')!r}")


def mark_interrupted(run_dir: str | Path, now: str | None = None) -> bool:
    """Rewrite a `running` manifest as `interrupted` (with `finished_at`), atomically, keeping the
    file's mode and every other key as it is. Any other status (complete, failed, interrupted), a
    manifest that is not ours or not readable, is left as it is. True when the manifest changed."""
    path = Path(run_dir) / MANIFEST_NAME
    if path.is_symlink() or not path.is_file():
        return False
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    if not isinstance(data, dict) or data.get("status") != "running":
        return False
    # Kept whole, not through the dataclasses: whatever the run recorded so far is never dropped.
    data["status"] = "interrupted"
    data["finished_at"] = now or utc_now()
    text = _dumps(data)
    try:
        mode = path.stat().st_mode & 0o777
        replace_file(path, lambda temporary: Path(temporary).write_text(text, encoding="utf-8"), mode)
    except OSError:
        return False
    return True


def _dumps(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def _host_dict(entry: HostEntry) -> dict[str, Any]:
    found: dict[str, Any] = {"inventory_hostname": entry.inventory_hostname, "status": entry.status}
    if entry.status != "ok":
        found["reason"] = entry.reason
    return found


def _plain(node: Unusable) -> dict[str, Any]:
    return {"host": node.host, "state": node.state, "reason": node.reason, "named": node.named}


def _text(value: Any, name: str) -> str:
    _expect(isinstance(value, str), f"{name} {value!r} is not text")
    return value


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise ValueError(what)
