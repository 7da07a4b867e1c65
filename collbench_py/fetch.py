"""Fetch benchmark logs made outside Ansible (a Slurm job, a Kubernetes MPIJob) into a run directory.

Each host is reached over SSH with paramiko the way `ssh HOST` would reach it: `~/.ssh/config` (or
the file given) supplies HostName, User, Port, IdentityFile, ProxyCommand, ProxyJump (a bastion,
or a chain of them), HostKeyAlias and UserKnownHostsFile; the host key must already be in
known_hosts unless the caller opts in to accepting new ones (a changed key is refused either way),
for every hop. Files matching a remote glob come back over SFTP (no remote shell, so no quoting
of names), are recognised by their content, and are laid out as docs/run-directory.md says: a log
of one host's ranks under hosts/<host>/intra/, a log of several hosts under inter/, named by the
collective it measured.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import os
import posixpath
import re
import secrets
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import paramiko

from collbench_py import __version__
from collbench_py.parsers import parse_text
from collbench_py.parsers.models import ParseError, Run
from collbench_py.rundir.manifest import OMITTABLE, HostEntry, Manifest
from collbench_py.rundir.manifest import write as write_manifest

MAX_FILE_BYTES = 256 * 1024**2
MAX_FILES_PER_HOST = 2000
DEFAULT_CONNECT_TIMEOUT_S = 20.0
BENCHMARK_KINDS = ("nccl-tests", "rccl-tests")
TOPOLOGY_KINDS = ("nvidia-smi-topo", "rocm-smi-topo")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
# paramiko's transport thread logs every failed handshake with its traceback; with no handler set,
# Python prints them on stderr. Each failure reaches the user once, as a FetchError line.
logging.getLogger("paramiko").addHandler(logging.NullHandler())
# Where one run's header starts: the version and "test starting" lines precede `nThread`.
_HEADER_START = re.compile(
    r"^\W*#?\s*(nThreads?\b|.*nccl-tests version|.*rccl-tests|Collective test starting)"
)


_SUMMARY = re.compile(r"Avg bus bandwidth|Out of bounds values|Collective test concluded")


class FetchError(Exception):
    """Fetching cannot go on (one line for the user)."""


def safe_name(name: str) -> str:
    """A host name as the run directory writes it (docs/run-directory.md)."""
    return re.sub(r"^\.", "_", _UNSAFE.sub("_", name)) or "_"


def new_run_id(now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


# ---- where each host is -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One host, resolved the way ssh would resolve it."""

    name: str  # as the user or the inventory names it (the manifest keeps it)
    hostname: str  # what to connect to
    port: int = 22
    user: str | None = None
    key_files: tuple[str, ...] = ()
    proxy_command: str | None = None
    known_hosts: tuple[str, ...] = ()
    host_key_alias: str | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S
    identities_only: bool = False
    jump: Target | None = None  # ProxyJump: the last hop before this host (itself maybe jumped to)

    @property
    def key_name(self) -> str:
        """The name known_hosts lists this host's key under."""
        if self.host_key_alias:
            return self.host_key_alias
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


def load_ssh_config(path: str | None) -> paramiko.SSHConfig:
    config_path = Path(path or "~/.ssh/config").expanduser()
    if not config_path.exists():
        if path:
            raise FetchError(f"ssh config {path}: no such file")
        return paramiko.SSHConfig()
    try:
        return paramiko.SSHConfig.from_path(str(config_path))
    except (OSError, paramiko.ssh_exception.ConfigParseError) as exc:
        raise FetchError(f"ssh config {config_path}: {exc}") from None


def resolve_target(
    name: str,
    config: paramiko.SSHConfig,
    *,
    connect_to: str | None = None,
    user: str | None = None,
    port: int | None = None,
    key_file: str | None = None,
    known_hosts: str | None = None,
    _depth: int = 0,
) -> Target:
    """`name` as ssh would reach it: the config's values, overridden by explicit ones (the
    inventory's ansible_host/user/port/key or the command line's)."""
    entry = config.lookup(connect_to or name)
    proxy = entry.get("proxycommand")
    jump = _jump_chain(name, entry.get("proxyjump"), config, known_hosts, depth=_depth)
    files = (
        known_hosts.split()
        if known_hosts
        else (entry.get("userknownhostsfile") or "~/.ssh/known_hosts").split()
    )
    files += (entry.get("globalknownhostsfile") or "/etc/ssh/ssh_known_hosts").split()
    keys = [key_file] if key_file else []
    keys += list(entry.get("identityfile") or [])
    try:
        resolved_port = int(port or entry.get("port") or 22)
        timeout = float(entry.get("connecttimeout") or DEFAULT_CONNECT_TIMEOUT_S)
    except ValueError as exc:
        raise FetchError(f"{name}: bad Port or ConnectTimeout in the ssh config ({exc})") from None
    return Target(
        name=name,
        hostname=str(entry.get("hostname") or connect_to or name),
        port=resolved_port,
        user=user or entry.get("user"),
        key_files=tuple(str(Path(k).expanduser()) for k in keys),
        proxy_command=None if not proxy or proxy.lower() == "none" else proxy,
        known_hosts=tuple(str(Path(f).expanduser()) for f in files),
        host_key_alias=entry.get("hostkeyalias"),
        connect_timeout=timeout,
        identities_only=str(entry.get("identitiesonly", "no")).lower() == "yes",
        jump=jump,
    )


MAX_JUMPS = 8  # ProxyJump hops, counting those of the jump hosts' own entries: a loop ends here


def _jump_chain(
    name: str, spec: str | None, config: paramiko.SSHConfig, known_hosts: str | None, depth: int
) -> Target | None:
    """ProxyJump `a,b` as ssh reads it: reach a, from a reach b, from b the host. Each hop is
    resolved through the config like any host ([user@]host[:port]), its key checked the same way."""
    if not spec or spec.strip().lower() == "none":
        return None
    if depth >= MAX_JUMPS:
        raise FetchError(
            f"{name}: ProxyJump goes more than {MAX_JUMPS} hops deep (a loop in the ssh config?)"
        )
    previous: Target | None = None
    for hop in (h.strip() for h in spec.split(",")):
        match = re.fullmatch(r"(?:(?P<user>[^@\s]+)@)?(?P<host>\[[^\]]+\]|[^:@\s]+)(?::(?P<port>\d+))?", hop)
        if not match:
            raise FetchError(f"{name}: ProxyJump {spec!r}: cannot read the hop {hop!r}")
        host = match["host"].strip("[]")
        target = resolve_target(host, config, known_hosts=known_hosts, _depth=depth + 1)
        if previous is not None:
            # Only the first hop is reached as `ssh hop` would be (its own entry may jump again);
            # every later hop is reached through the one before it.
            target = replace(target, jump=previous, proxy_command=None)
        if match["user"] or match["port"]:
            target = replace(
                target,
                user=match["user"] or target.user,
                port=int(match["port"]) if match["port"] else target.port,
            )
        previous = target
    return previous


@dataclass(frozen=True)
class InventoryHost:
    name: str
    connect_to: str | None = None
    user: str | None = None
    port: int | None = None
    key_file: str | None = None
    ssh_config: str | None = None  # `-F FILE` in ansible_ssh_common_args / ansible_ssh_extra_args


def inventory_hosts(source: str, group: str) -> list[InventoryHost]:
    """The hosts of `group` in an Ansible inventory, with the connection variables ssh would use."""
    from ansible.inventory.manager import InventoryManager  # noqa: PLC0415 - heavy, only for -i
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415
    from ansible.vars.manager import VariableManager  # noqa: PLC0415

    if not Path(source).exists():
        raise FetchError(f"inventory {source}: no such file")
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[source])
    if group not in inventory.groups:
        raise FetchError(f"inventory {source}: no group {group!r} (or the file could not be parsed)")
    manager = VariableManager(loader=loader, inventory=inventory)
    hosts = []
    for host in inventory.get_hosts(pattern=group):
        variables = manager.get_vars(host=host)

        def var(key: str, variables: dict[str, Any] = variables, host_name: str = host.name) -> str | None:
            value = variables.get(key)
            if value is None or value == "":
                return None
            if "{{" in str(value):
                raise FetchError(
                    f"{host_name}: {key} is a template ({value}); pass --hosts and an ssh config"
                )
            return str(value)

        common = " ".join(filter(None, (var("ansible_ssh_common_args"), var("ansible_ssh_extra_args"))))
        config_match = re.search(r"(?:^|\s)-F\s*(\S+)", common)
        port = var("ansible_port") or var("ansible_ssh_port")
        hosts.append(
            InventoryHost(
                name=host.name,
                connect_to=var("ansible_host"),
                user=var("ansible_user") or var("ansible_ssh_user"),
                port=int(port) if port else None,
                key_file=var("ansible_ssh_private_key_file") or var("ansible_private_key_file"),
                ssh_config=config_match[1] if config_match else None,
            )
        )
    if not hosts:
        raise FetchError(f"inventory {source}: group {group!r} has no hosts")
    return hosts


# ---- connecting ---------------------------------------------------------------------------------------


class _AcceptNew(paramiko.MissingHostKeyPolicy):
    """StrictHostKeyChecking=accept-new: remember an unknown key in known_hosts; a changed key
    is still refused (paramiko raises BadHostKeyException before asking a policy)."""

    def __init__(self, target: Target, notes: list[str]) -> None:
        self.target = target
        self.notes = notes

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        path = Path(self.target.known_hosts[0])
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write(f"{self.target.key_name} {key.get_name()} {key.get_base64()}\n")
        self.notes.append(
            f"{self.target.name}: new host key {key.get_name()} {key.fingerprint} added to {path}"
        )


class _JumpedClient(paramiko.SSHClient):
    """An SSHClient that also closes the jump hosts' connections it was reached through."""

    def __init__(self) -> None:
        super().__init__()
        self.via: paramiko.SSHClient | None = None

    def close(self) -> None:
        super().close()
        if self.via is not None:
            self.via.close()


def connect(target: Target, *, accept_new_host_keys: bool = False, notes: list[str] | None = None):
    """An SSHClient logged in to `target`, its host key checked against known_hosts (a jump
    host's too: each hop is connected to like any host)."""
    client = _JumpedClient()
    known = paramiko.HostKeys()
    for path in target.known_hosts:
        if Path(path).is_file():
            try:
                known.load(path)
            except (OSError, paramiko.SSHException) as exc:
                raise FetchError(f"known_hosts {path}: {exc}") from None
    # paramiko looks keys up by the name it dials; HostKeyAlias lists them under another one.
    dialled = target.hostname if target.port == 22 else f"[{target.hostname}]:{target.port}"
    for key_type, key in (known.lookup(target.key_name) or {}).items():
        client.get_host_keys().add(dialled, key_type, key)
    if accept_new_host_keys:
        client.set_missing_host_key_policy(_AcceptNew(target, notes if notes is not None else []))
    else:
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
    sock: Any = paramiko.ProxyCommand(target.proxy_command) if target.proxy_command else None
    if target.jump is not None:
        client.via = connect(target.jump, accept_new_host_keys=accept_new_host_keys, notes=notes)
        try:
            where = (target.hostname, target.port)
            transport = client.via.get_transport()
            sock = transport.open_channel(
                "direct-tcpip", where, ("127.0.0.1", 0), timeout=target.connect_timeout
            )
        except (paramiko.SSHException, OSError) as exc:
            client.close()
            hop = target.jump.name
            raise FetchError(
                f"{target.name}: jump host {hop} cannot reach {where[0]}:{where[1]}: {exc}"
            ) from None
    keys = [k for k in target.key_files if Path(k).is_file()]
    try:
        client.connect(
            target.hostname,
            port=target.port,
            username=target.user,
            key_filename=keys or None,
            sock=sock,
            timeout=target.connect_timeout,
            banner_timeout=target.connect_timeout,
            auth_timeout=target.connect_timeout,
            look_for_keys=not target.identities_only,
            allow_agent=not target.identities_only,
        )
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise FetchError(
            f"{target.name}: HOST KEY CHANGED for {target.key_name} (now {exc.key.get_name()} "
            f"{exc.key.fingerprint}); refusing to connect: check the host, then fix known_hosts"
        ) from None
    except paramiko.SSHException as exc:
        # No banner read: the handshake's own error is then a race between paramiko's threads
        # ("Error reading SSH protocol banner", or "No existing session" when the wait ran out first).
        transport = client.get_transport()
        no_banner = transport is not None and not transport.remote_version
        client.close()
        if no_banner:
            raise FetchError(
                f"{target.name}: {target.hostname}:{target.port} accepted the connection but sent no SSH "
                f"banner (waited {target.connect_timeout:g} s): sshd overloaded or hung, or not sshd"
            ) from None
        if "not found in known_hosts" in str(exc):
            files = ", ".join(target.known_hosts[:2])
            raise FetchError(
                f"{target.name}: host key of {target.key_name} is not in known_hosts ({files}); refusing "
                "to connect: verify the key and add it (ssh-keyscan), or pass --accept-new-host-keys"
            ) from None
        raise FetchError(f"{target.name}: ssh: {exc}") from None
    except OSError as exc:
        client.close()
        raise FetchError(f"{target.name}: cannot connect to {target.hostname}:{target.port}: {exc}") from None
    return client


# ---- finding and bringing back the files --------------------------------------------------------------


@dataclass(frozen=True)
class RemoteFile:
    host: str  # the target's name
    path: str
    size: int
    mtime: float


def remote_glob(sftp: paramiko.SFTPClient, pattern: str) -> list[tuple[str, paramiko.SFTPAttributes]]:
    """Regular files matching a glob (`*`, `?`, `[...]` in any component; no `**`), by SFTP."""
    if "**" in pattern:
        raise FetchError(f"{pattern}: `**` is not supported; name each directory level")
    home = sftp.normalize(".")
    if pattern.startswith("~/"):
        pattern = posixpath.join(home, pattern[2:])
    elif not pattern.startswith("/"):
        pattern = posixpath.join(home, pattern)
    candidates = ["/"]
    for part in [p for p in pattern.split("/") if p]:
        expanded = []
        for base in candidates:
            if not any(c in part for c in "*?["):
                expanded.append(posixpath.join(base, part))
                continue
            try:
                names = sftp.listdir(base)
            except OSError:
                continue
            hidden_ok = part.startswith(".")
            expanded += [
                posixpath.join(base, n)
                for n in sorted(names)
                if fnmatch.fnmatchcase(n, part) and (hidden_ok or not n.startswith("."))
            ]
        candidates = expanded
    found = []
    for path in candidates:
        try:
            attrs = sftp.stat(path)  # follows links, as a shell glob would
        except OSError:
            continue
        if attrs.st_mode is not None and stat.S_ISREG(attrs.st_mode):
            found.append((path, attrs))
    return found


def download(
    client: paramiko.SSHClient, target: Target, pattern: str, dest: Path, notes: list[str]
) -> list[tuple[RemoteFile, Path]]:
    """Copy every file matching `pattern` on the host into `dest` (a scratch directory)."""
    sftp = client.open_sftp()
    try:
        matches = remote_glob(sftp, pattern)
        if len(matches) > MAX_FILES_PER_HOST:
            raise FetchError(f"{target.name}: {len(matches)} files match {pattern}; narrow the glob")
        fetched = []
        for index, (path, attrs) in enumerate(matches):
            size = attrs.st_size or 0
            if size > MAX_FILE_BYTES:
                notes.append(f"{target.name}:{path}: {size} bytes, larger than any benchmark log; skipped")
                continue
            local = dest / f"{index:04d}-{safe_name(posixpath.basename(path))}"
            sftp.get(path, str(local))
            fetched.append((RemoteFile(target.name, path, size, float(attrs.st_mtime or 0)), local))
        return fetched
    finally:
        sftp.close()


# ---- laying out the run directory ---------------------------------------------------------------------


@dataclass
class Placed:
    """A log filed under its run-directory path."""

    rel: str
    kind: str  # intra, all, pair
    hosts: tuple[str, ...]
    collective: str
    text: str
    source: RemoteFile
    tool: str | None = None


@dataclass
class Layout:
    hosts: list[str]  # fetched hosts, sanitised, in order
    names: dict[str, str]  # sanitised -> original name
    logs: dict[str, Placed] = field(default_factory=dict)
    topologies: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def split_runs(text: str) -> list[str]:
    """One chunk per benchmark run: old nccl-tests builds write several collectives into one file.
    A run ends after its summary line; what follows (a `Running: ...` echo, the next header) is the
    next run's."""
    lines = text.splitlines(keepends=True)
    headers = [i for i, line in enumerate(lines) if re.match(r"^\W*#?\s*nThreads?\b", line)]
    if len(headers) <= 1:
        return [text]
    starts = [0]
    for previous, header in pairwise(headers):
        ends = [j for j in range(previous, header) if _SUMMARY.search(lines[j])]
        start = header
        if ends:
            start = ends[-1] + 1
        else:
            while start - 1 > previous and _HEADER_START.match(lines[start - 1]):
                start -= 1
        starts.append(start)
    bounds = [*starts[1:], len(lines)]
    return ["".join(lines[a:b]) for a, b in zip(starts, bounds, strict=True)]


def _host_of(name: str, fetched: Sequence[str]) -> str:
    """A host named in a log (`Rank 0 ... on NAME`) as a fetched host's name where it is one."""
    clean = safe_name(name)
    if clean in fetched:
        return clean
    short = clean.split(".")[0]
    matches = [h for h in fetched if h.split(".")[0] == short]
    return matches[0] if len(matches) == 1 else clean


def place(layout: Layout, source: RemoteFile, text: str) -> None:
    """File one fetched file: benchmark runs by collective and hosts, a topology by host."""
    origin = safe_name(source.host)
    where = f"{source.host}:{source.path}"
    try:
        parsed = parse_text(text, file=where)
    except ParseError as exc:
        layout.notes.append(f"{where}: not a benchmark log ({exc}); skipped")
        return
    if parsed.kind in TOPOLOGY_KINDS:
        layout.topologies.setdefault(origin, text)
        return
    if parsed.kind not in BENCHMARK_KINDS or not parsed.runs:
        layout.notes.append(f"{where}: a {parsed.kind} output, not an nccl-tests log; skipped")
        return
    collectives = {r.collective for r in parsed.runs}
    chunks = [(text, parsed.runs)] if len(collectives) == 1 else _chunks(text, where)
    for chunk, runs in chunks:
        run = max(runs, key=lambda r: len(r.rows))
        if not run.collective:
            layout.notes.append(f"{where}: names no collective; skipped")
            continue
        _file_run(layout, source, chunk, run, origin)


def _chunks(text: str, where: str) -> list[tuple[str, tuple[Run, ...]]]:
    out = []
    for chunk in split_runs(text):
        try:
            out.append((chunk, parse_text(chunk, file=where).runs))
        except ParseError:
            continue
    return [(c, r) for c, r in out if r]


def _file_run(layout: Layout, source: RemoteFile, text: str, run: Run, origin: str) -> None:
    named = sorted({_host_of(h, layout.hosts) for h in run.hosts})
    if len(named) <= 1:
        host = named[0] if named and named[0] in layout.hosts else origin
        if named and named[0] != host:
            note = f"{source.host}:{source.path}: ranks on {named[0]}, filed under {host}"
            if note not in layout.notes:
                layout.notes.append(note)
        kind, hosts, rel = "intra", (host,), f"hosts/{host}/intra/{run.collective}.log"
    elif len(named) == 2 and set(named) != set(layout.hosts):
        kind, hosts, rel = "pair", tuple(named), f"inter/pairs/{named[0]}--{named[1]}/{run.collective}.log"
    else:
        kind, hosts, rel = "all", tuple(named), f"inter/all/{run.collective}.log"
    placed = Placed(rel, kind, hosts, run.collective, text, source, run.tool)
    earlier = layout.logs.get(rel)
    if earlier is None:
        layout.logs[rel] = placed
    elif hashlib.sha256(earlier.text.encode()).digest() != hashlib.sha256(text.encode()).digest():
        keep, drop = (placed, earlier) if source.mtime > earlier.source.mtime else (earlier, placed)
        layout.logs[rel] = keep
        layout.notes.append(
            f"{rel}: two different logs ({keep.source.host}:{keep.source.path} and "
            f"{drop.source.host}:{drop.source.path}); kept the newer, {keep.source.host}:{keep.source.path}"
        )


def _iso(timestamp: float | None) -> str | None:
    if not timestamp:
        return None
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def manifest(layout: Layout, run_id: str, unreachable: dict[str, str], pattern: str) -> Manifest:
    logs = sorted(layout.logs.values(), key=lambda p: p.rel)
    mtimes = [p.source.mtime for p in logs if p.source.mtime]
    tools = sorted({p.tool for p in logs if p.tool})
    hosts = {
        host: HostEntry(layout.names[host], "unreachable", unreachable[host])
        if host in unreachable
        else HostEntry(layout.names[host], "ok")
        for host in layout.hosts
    }
    return Manifest(
        run_id=run_id,
        status="complete",
        started_at=_iso(min(mtimes)) if mtimes else None,
        finished_at=_iso(max(mtimes)) if mtimes else None,
        collbench_version=__version__,
        backend=tools[0] if len(tools) == 1 else None,
        launcher=None,
        parameters={"collectives": sorted({p.collective for p in logs})},
        hosts=hosts,
        launches=tuple(
            {
                "kind": p.kind,
                "hosts": list(p.hosts),
                "collective": p.collective,
                "log": p.rel,
                # How the launch ended is not known here: the report judges the log itself.
                "status": None,
                "rc": None,
                "started_at": None,
                "finished_at": _iso(p.source.mtime),
                "round": None,
                "source": f"{p.source.host}:{p.source.path}",
            }
            for p in logs
        ),
        fetched={
            "at": _iso(datetime.now(UTC).timestamp()),
            "remote_glob": pattern,
            "by": "collbench fetch",
        },
        absent=OMITTABLE,  # no ssh check, no pair plan: a fetched run never had them
    )


def write_run_dir(
    run_dir: Path, layout: Layout, run_id: str, unreachable: dict[str, str], pattern: str
) -> None:
    """Write the run directory whole, then move it into place: never over an existing one."""
    if run_dir.exists():
        raise FetchError(f"{run_dir} exists: a run directory is never written into twice")
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{run_dir.name}.", dir=run_dir.parent))
    try:
        for placed in layout.logs.values():
            path = scratch / placed.rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(placed.text, encoding="utf-8")
        for host, text in layout.topologies.items():
            (scratch / "hosts" / host).mkdir(parents=True, exist_ok=True)
            (scratch / "hosts" / host / "topo.txt").write_text(text, encoding="utf-8")
        write_manifest(scratch, manifest(layout, run_id, unreachable, pattern))
        # rename fails when the target appeared meanwhile (a non-empty directory): never clobbered.
        os.rename(scratch, run_dir)
    except OSError as exc:
        shutil.rmtree(scratch, ignore_errors=True)
        raise FetchError(f"cannot write {run_dir}: {exc.strerror or exc}") from None


# ---- the whole job ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FetchResult:
    run_dir: Path
    files: int
    logs: int
    unreachable: dict[str, str]
    notes: tuple[str, ...]


def fetch(
    targets: Sequence[Target],
    pattern: str,
    run_dir: Path,
    *,
    accept_new_host_keys: bool = False,
    say: Callable[[str], None] = lambda line: None,
) -> FetchResult:
    """Fetch `pattern` from every target into a new run directory; a host that cannot be reached is
    recorded as unreachable. Raises FetchError when nothing usable came back."""
    names = [t.name for t in targets]
    sanitised = [safe_name(n) for n in names]
    if len(set(sanitised)) != len(sanitised):
        raise FetchError(f"host names collide once made safe for paths: {', '.join(names)}")
    layout = Layout(hosts=sanitised, names=dict(zip(sanitised, names, strict=True)))
    unreachable: dict[str, str] = {}
    files = 0
    with tempfile.TemporaryDirectory(prefix="collbench-fetch-") as scratch:
        for target, host in zip(targets, sanitised, strict=True):
            host_dir = Path(scratch) / host
            host_dir.mkdir()
            try:
                client = connect(target, accept_new_host_keys=accept_new_host_keys, notes=layout.notes)
                try:
                    fetched = download(client, target, pattern, host_dir, layout.notes)
                finally:
                    client.close()
            except FetchError as exc:
                unreachable[host] = str(exc).removeprefix(f"{target.name}: ")
                say(f"{exc}")
                continue
            except (OSError, paramiko.SSHException) as exc:
                unreachable[host] = f"ssh: {exc}"
                say(f"{target.name}: ssh: {exc}")
                continue
            say(f"{target.name}: {len(fetched)} file(s) match {pattern}")
            files += len(fetched)
            for source, local in fetched:
                place(layout, source, local.read_bytes().decode("utf-8", errors="replace"))
    if not layout.logs:
        reasons = (
            "; ".join(f"{h}: {r}" for h, r in unreachable.items()) or f"no benchmark log matches {pattern}"
        )
        raise FetchError(f"nothing to write: {reasons}")
    write_run_dir(run_dir, layout, run_dir.name, unreachable, pattern)
    return FetchResult(run_dir, files, len(layout.logs), unreachable, tuple(layout.notes))


def targets_for(
    hosts: Iterable[str] | None,
    inventory: str | None,
    group: str,
    *,
    ssh_config: str | None,
    user: str | None,
    port: int | None,
    key_file: str | None,
    known_hosts: str | None,
) -> list[Target]:
    """The targets of `--hosts` or of an inventory group, resolved through the ssh config."""
    if inventory:
        out = []
        configs: dict[str | None, paramiko.SSHConfig] = {}
        for host in inventory_hosts(inventory, group):
            config_file = ssh_config or host.ssh_config
            if config_file not in configs:
                configs[config_file] = load_ssh_config(config_file)
            out.append(
                resolve_target(
                    host.name,
                    configs[config_file],
                    connect_to=host.connect_to,
                    user=user or host.user,
                    port=port or host.port,
                    key_file=key_file or host.key_file,
                    known_hosts=known_hosts,
                )
            )
        return out
    config = load_ssh_config(ssh_config)
    kw = {"user": user, "port": port, "key_file": key_file, "known_hosts": known_hosts}
    return [resolve_target(h, config, **kw) for h in hosts or ()]
