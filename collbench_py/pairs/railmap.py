"""The rails of each host: rail k = (GPU k, its nearest compute NIC), and `inter/pairs/rails.json`.

On a rail-optimised fabric NIC k of every node sits on leaf switch k, so a pair measured rail by
rail (NIC k of one host against NIC k of the other, with GPU k's memory) tells a slow NIC, a slow
leaf and a slow pair apart. Where a host's rails come from, its `collbench_rails` setting:

    auto    from `nvidia-smi topo -m`: the GPUs in index order, each with its nearest NIC among
            those PIX or PXB to a GPU (the NICs NCCL takes, verdicts/fabric.py), each NIC on one
            rail only; the NIC's port is its first active RDMA port in facts.json (else 1).
            No such NIC (or no topo -m): no rails, and the source says why.
    off     no rails (YAML's bare `off` reads as false: the same).
    a list  in rail order: HCA names (`mlx5_0`, or `mlx5_0:1` with its port; rail k uses GPU k),
            or {hca, gpu, port} (gpu defaults to k, port to 1; gpu null: host memory).

rails.json, written by the pair plan before its first round (run directory host names):

    {"schema": 1,
     "hosts": {"node1": {"rails": [{"index": 0, "hca": "mlx5_0", "port": 1, "gpu": 0}, ...],
                         "source": "topo -m: GPU k -> nearest PIX/PXB NIC"}}}
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from collbench_py.nodechecks.hcas import CLOSENESS, closeness, gpu_index, read_host_dir, topology_of
from collbench_py.rundir.load import Host
from collbench_py.rundir.private_files import write_private
from collbench_py.verdicts.fabric import gpu_attached_nics

SCHEMA = 1
RAILS_FILE = "inter/pairs/rails.json"
SETTING = "collbench_rails"
AUTO_SOURCE = "topo -m: GPU k -> nearest PIX/PXB NIC"
INVENTORY_SOURCE = "inventory collbench_rails"
OFF_SOURCE = "no rails: collbench_rails is off"
# The cells of topo -m that put a NIC next to a GPU, as NCCL counts them (PIX, PXB).
NEAR = CLOSENESS[:2]
_HCA_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_ENTRY_KEYS = frozenset(("hca", "gpu", "port"))


class RailSettingError(ValueError):
    """A `collbench_rails` value that names no rails the tool can use; one sentence for the user."""


class RailsFileError(ValueError):
    """rails.json cannot be read back; one sentence for the user."""


@dataclass(frozen=True)
class Rail:
    """One rail of one host."""

    index: int  # k
    hca: str  # "mlx5_2"
    port: int  # 1
    gpu: int | None  # 2; None: the rail's traffic uses host memory


@dataclass(frozen=True)
class HostRails:
    rails: tuple[Rail, ...]
    source: str  # where the rails came from, or why there are none

    def indices(self) -> tuple[int, ...]:
        return tuple(rail.index for rail in self.rails)

    def as_json(self) -> dict[str, Any]:
        return {"rails": [asdict(rail) for rail in self.rails], "source": self.source}


# ---- the setting


def _is_off(setting: Any) -> bool:
    return setting is None or setting is False or (isinstance(setting, str) and setting.strip() == "off")


def _whole(value: Any, least: int) -> int | None:
    """A whole number of at least `least` (YAML's 1 or Ansible's "1"), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= least else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value) if int(value) >= least else None
    return None


def _entry(k: int, entry: Any) -> Rail:
    """Rail k from one list entry; RailSettingError saying what is wrong with it."""
    where = f"entry {k} ({entry!r})"
    if isinstance(entry, str):
        name, _, port_text = entry.strip().partition(":")
        port = _whole(port_text, 1) if port_text else 1
        if not _HCA_NAME.match(name) or port is None:
            raise RailSettingError(f"{where} is not an HCA name such as mlx5_{k} or mlx5_{k}:1")
        return Rail(k, name, port, k)
    if not isinstance(entry, Mapping):
        raise RailSettingError(f"{where} must be an HCA name or {{hca, gpu, port}}")
    unknown = sorted(str(key) for key in entry if key not in _ENTRY_KEYS)
    if unknown:
        raise RailSettingError(f"{where} has unknown keys {', '.join(unknown)}: only hca, gpu and port")
    name = entry.get("hca")
    if not isinstance(name, str) or not _HCA_NAME.match(name.strip()):
        raise RailSettingError(f"{where} needs hca: the HCA's name, such as mlx5_{k}")
    port = _whole(entry.get("port", 1), 1)
    if port is None:
        raise RailSettingError(f"{where} has port {entry.get('port')!r}: a whole number of 1 or more")
    gpu: int | None = k
    if "gpu" in entry:
        gpu = None if entry["gpu"] is None else _whole(entry["gpu"], 0)
        if gpu is None and entry["gpu"] is not None:
            raise RailSettingError(f"{where} has gpu {entry['gpu']!r}: a GPU index (0, 1, ...) or null")
    return Rail(k, name.strip(), port, gpu)


def rails_from_setting(setting: Any) -> tuple[Rail, ...] | None:
    """The rails a list setting names; None for auto; () for off. RailSettingError otherwise."""
    if _is_off(setting):
        return ()
    if isinstance(setting, str) and setting.strip() == "auto":
        return None
    if isinstance(setting, str) or not isinstance(setting, list | tuple):
        raise RailSettingError(f"must be auto, off or a list of HCAs in rail order, not {setting!r}")
    if not setting:
        raise RailSettingError("is an empty list: list the HCAs in rail order, or say off")
    rails = tuple(_entry(k, entry) for k, entry in enumerate(setting))
    seen: dict[tuple[str, int], int] = {}
    for rail in rails:
        first = seen.setdefault((rail.hca, rail.port), rail.index)
        if first != rail.index:
            raise RailSettingError(
                f"names {rail.hca} port {rail.port} twice (rails {first} and {rail.index})"
            )
    return rails


def setting_problems(settings: Mapping[str, Any]) -> list[str]:
    """One sentence per host whose `collbench_rails` cannot be used ({host: setting})."""
    problems = []
    for host, setting in settings.items():
        try:
            rails_from_setting(setting)
        except RailSettingError as error:
            problems.append(f"{SETTING} of {host} {error}")
    return problems


def _number_problem(name: str, value: Any, least: float, most: float | None, words: str) -> str | None:
    if isinstance(value, bool):
        return f"{name} must be {words}, not {value!r}"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return f"{name} must be {words}, not {value!r}"
    whole_wanted = most is None
    if number < least or (most is not None and number >= most) or (whole_wanted and number != int(number)):
        return f"{name} must be {words}, not {value!r}"
    return None


def rail_settings_problems(
    rails: Mapping[str, Any], *, sample: Any, min_drop: Any, seconds: Any, size: Any
) -> list[str]:
    """One sentence per bad rail setting: collbench_rails of each host ({host: setting}), and
    collbench_rails_sample, _min_drop, _seconds, _size."""
    problems = setting_problems(rails)
    checks = (
        ("collbench_rails_sample", sample, 0, None, "a whole number of 0 or more"),
        ("collbench_rails_min_drop", min_drop, 0.0, 1.0, "a fraction from 0 up to (not including) 1"),
        ("collbench_rails_seconds", seconds, 1, None, "a whole number of seconds, 1 or more"),
        ("collbench_rails_size", size, 1, None, "a whole number of bytes, 1 or more"),
    )
    for name, value, least, most, words in checks:
        problem = _number_problem(name, value, least, most, words)
        if problem:
            problems.append(problem)
    return problems


def rails_on(setting: Any, phases: Any, pairs: Any) -> bool:
    """Whether a host may be measured rail by rail (and so needs perftest): its rails are not
    off and the run has a pairs phase."""
    return not _is_off(setting) and "pairs" in list(phases or ()) and pairs != "none"


# ---- one host


def _port_of(host: Host, hca: str) -> int:
    """The HCA's first active port in facts.json (the one NCCL takes), else its first, else 1."""
    ports = [p for p in (host.facts or {}).get("ib") or [] if isinstance(p, dict) and p.get("device") == hca]
    active = [p for p in ports if str(p.get("state") or "").lower().endswith("active")]
    for port in active + ports:
        number = _whole(port.get("port"), 1)
        if number is not None:
            return number
    return 1


def _natural(name: str) -> tuple[Any, ...]:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def auto_rails(host: Host) -> HostRails:
    """Rail k = the k-th GPU (index order) that has a PIX/PXB NIC not taken by a lower GPU."""
    topology = host.topology
    if topology is None:
        return HostRails((), "no rails: no topo -m matrix for this host")
    # NICs topo -m shows without a legend keep their NICn label: no HCA name to pin, no rail.
    named = {nic for nic in gpu_attached_nics(topology) if not re.fullmatch(r"NIC\d+", nic)}
    if not named:
        return HostRails((), "no rails: topo -m names no NIC PIX or PXB to a GPU")
    gpus = sorted((g for g in topology.gpus if gpu_index(g) is not None), key=lambda g: gpu_index(g) or 0)
    rails: list[Rail] = []
    taken: set[str] = set()
    for gpu in gpus:
        near = [
            (rank, _natural(nic), nic)
            for nic in named - taken
            if (rank := closeness(topology, gpu, nic)) is not None and CLOSENESS[rank] in NEAR
        ]
        if not near:
            continue
        nic = min(near)[2]
        taken.add(nic)
        rails.append(Rail(len(rails), nic, _port_of(host, nic), gpu_index(gpu)))
    return HostRails(tuple(rails), AUTO_SOURCE)


def host_rails(host: Host, setting: Any) -> HostRails:
    """The rails of one host under its `collbench_rails` setting (RailSettingError when bad)."""
    listed = rails_from_setting(setting)
    if listed is None:
        return auto_rails(host)
    if not listed:
        return HostRails((), OFF_SOURCE)
    return HostRails(listed, INVENTORY_SOURCE)


def host_dir_host(host_dir: str | Path, name: str) -> Host:
    """The Host of a run directory's `hosts/<name>/` as far as the rail map needs it (facts, topo -m)."""
    facts, topo_text = read_host_dir(host_dir)
    return Host(
        name=name,
        inventory_hostname=name,
        status="ok",
        facts=facts,
        topology=topology_of(topo_text),
    )


# ---- rails.json


def run_rails(
    run_dir: str | Path, settings: Mapping[str, Any], perftest: Mapping[str, Any] | None = None
) -> dict[str, HostRails]:
    """{run directory host: its rails} from hosts/<host>/ and {host: collbench_rails}.

    `perftest` is each host's published collbench_perftest (role perftest), when known: a host
    without ib_write_bw gets no rails, and the reason, since every read of its rails would fail."""
    root = Path(run_dir)
    problems = setting_problems(settings)
    if problems:
        raise RailSettingError("; ".join(problems))
    rails = {}
    for host, setting in sorted(settings.items()):
        tool = (perftest or {}).get(host)
        if (
            perftest is not None
            and not _is_off(setting)
            and not (isinstance(tool, Mapping) and tool.get("bin_dir"))
        ):
            note = tool.get("note") if isinstance(tool, Mapping) else None
            rails[host] = HostRails(
                (), f"no ib_write_bw on this host ({note or 'perftest was not built here'})"
            )
            continue
        rails[host] = host_rails(host_dir_host(root / "hosts" / host, host), setting)
    return rails


def rails_document(rails: Mapping[str, HostRails]) -> dict[str, Any]:
    """rails.json's content."""
    return {"schema": SCHEMA, "hosts": {host: rails[host].as_json() for host in sorted(rails)}}


def write_rails(run_dir: str | Path, rails: Mapping[str, HostRails]) -> Path:
    path = Path(run_dir) / RAILS_FILE
    document = rails_document(rails)
    write_private(path, (json.dumps(document, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    return path


def _rail_of(host: str, entry: Any) -> Rail:
    if not isinstance(entry, Mapping):
        raise RailsFileError(f"{RAILS_FILE}: a rail of {host} is not an object")
    index, hca, port, gpu = (entry.get(key) for key in ("index", "hca", "port", "gpu"))
    valid = (
        _whole(index, 0) is not None
        and isinstance(index, int)
        and isinstance(hca, str)
        and bool(hca)
        and isinstance(port, int)
        and _whole(port, 1) is not None
        and (gpu is None or (isinstance(gpu, int) and _whole(gpu, 0) is not None))
    )
    if not valid:
        raise RailsFileError(f"{RAILS_FILE}: rail {entry!r} of {host} needs index, hca, port, gpu")
    return Rail(index, hca, port, gpu)


def read_rails(run_dir: str | Path) -> dict[str, HostRails]:
    """{host: HostRails} of rails.json; {} when the run wrote none. RailsFileError when unreadable."""
    path = Path(run_dir) / RAILS_FILE
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise RailsFileError(f"{RAILS_FILE} cannot be read: {error}") from None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise RailsFileError(f"{RAILS_FILE} is not a schema {SCHEMA} rail map")
    hosts = document.get("hosts")
    if not isinstance(hosts, dict):
        raise RailsFileError(f"{RAILS_FILE} has no hosts object")
    out = {}
    for host, entry in hosts.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("rails"), list):
            raise RailsFileError(f"{RAILS_FILE}: {host} has no rails list")
        rails = tuple(_rail_of(host, rail) for rail in entry["rails"])
        if [rail.index for rail in rails] != list(range(len(rails))):
            raise RailsFileError(f"{RAILS_FILE}: the rails of {host} are not numbered 0, 1, ... in order")
        out[host] = HostRails(rails, str(entry.get("source") or ""))
    return out
