"""Topology: each host's `nvidia-smi topo -m` against the fleet majority for its GPU model."""

from __future__ import annotations

from collections import Counter, defaultdict

from collbench_py.parsers.models import Topology
from collbench_py.rundir.load import Host
from collbench_py.verdicts.model import Check

MAX_LISTED = 12
Cells = dict[tuple[str, str], str]


def gpu_model(host: Host) -> str:
    names = Counter(g.get("name") for g in (host.facts or {}).get("gpus") or [] if g.get("name"))
    return names.most_common(1)[0][0] if names else "unknown GPU model"


def cells(topology: Topology) -> Cells:
    """Every comparable cell: links (NICs by device name), then per-GPU affinities."""
    nic_names = {label: f"{label} ({dev})" for label, dev in topology.nics.items()}
    out: Cells = {}
    for row, cols in topology.links.items():
        for col, value in cols.items():
            if row != col:
                out[(nic_names.get(row, row), nic_names.get(col, col))] = value
    for gpu in topology.gpus:
        for label, table in (
            ("NUMA affinity", topology.numa_affinity),
            ("CPU affinity", topology.cpu_affinity),
            ("GPU NUMA ID", topology.gpu_numa_id),
        ):
            if gpu in table:
                out[(gpu, label)] = str(table[gpu])
    return out


def signature(c: Cells) -> frozenset[tuple[tuple[str, str], str]]:
    return frozenset(c.items())


def nvlink(hosts: dict[str, Host]) -> bool | None:
    """Whether the majority topology joins GPUs by NVLink; None without topologies."""
    votes = Counter(
        any(v.startswith("NV") for cols in h.topology.links.values() for v in cols.values())
        for h in hosts.values()
        if h.topology and h.topology.links
    )
    return votes.most_common(1)[0][0] if votes else None


def judge_topology(hosts: dict[str, Host]) -> tuple[dict[str, Check], dict[str, Cells], dict[str, Cells]]:
    """Per host a check and the deviating cells (cell -> fleet value); per model the reference cells."""
    groups: dict[str, dict[str, Cells]] = defaultdict(dict)
    signatures: dict[str, frozenset[tuple[tuple[str, str], str]]] = {}
    checks: dict[str, Check] = {}
    # Hosts that printed the same text share one Topology (rundir): its cells are made once.
    made: dict[int, tuple[Cells, frozenset[tuple[tuple[str, str], str]]]] = {}
    for host in hosts.values():
        if host.topology_error:
            checks[host.name] = Check("topology", "warn", host.topology_error, host.name)
        elif host.topology is not None:
            if id(host.topology) not in made:
                mine = cells(host.topology)
                made[id(host.topology)] = (mine, signature(mine))
            groups[gpu_model(host)][host.name], signatures[host.name] = made[id(host.topology)]
    diffs: dict[str, Cells] = {}
    references: dict[str, Cells] = {}
    for model, members in groups.items():
        votes = Counter(signatures[name] for name in members)
        ranked = votes.most_common(2)
        majority, count = ranked[0]
        if len(members) < 2 or (len(ranked) > 1 and ranked[1][1] == count):
            for name in members:
                reason = (
                    f"{len(members)} host(s) with {model}: no majority topology to compare with"
                    if len(members) < 2 or len(votes) > 1
                    else "matches"
                )
                checks[name] = Check("topology", "skip", reason, name)
            continue
        reference = dict(majority)
        references[model] = reference
        for name, mine in members.items():
            if signatures[name] == majority:
                checks[name] = Check(
                    "topology", "pass", f"matches the {model} majority ({count} hosts)", name
                )
                continue
            diff, lines, severe = _diff(mine, reference)
            diffs[name] = diff
            shown = lines[:MAX_LISTED] + (
                [f"... and {len(lines) - MAX_LISTED} more"] if len(lines) > MAX_LISTED else []
            )
            what = "GPU links differ" if severe else "NIC placement or affinity differs"
            reason = (
                f"topology deviates from the {model} majority ({count} of {len(members)} hosts): "
                f"{what}: {'; '.join(shown[:3])}"
            )
            checks[name] = Check(
                "topology", "fail" if severe else "warn", reason, name, tuple(shown), f"hosts/{name}/topo.txt"
            )
    return checks, diffs, references


def _nodes(c: Cells) -> set[str]:
    return {row for row, col in c if not _is_affinity(col)}


def _diff(mine: Cells, reference: Cells) -> tuple[Cells, list[str], bool]:
    """Deviating cells, one line per difference, and whether a GPU link or a GPU is affected."""
    ours_nodes, fleet_nodes = _nodes(mine), _nodes(reference)
    lines: list[str] = []
    missing = sorted(fleet_nodes - ours_nodes, key=_node_order)
    only_here = sorted(ours_nodes - fleet_nodes, key=_node_order)
    presence = ([f"{', '.join(missing)} missing"] if missing else []) + (
        [f"{', '.join(only_here)} present only on this host"] if only_here else []
    )
    severe = any(n.startswith("GPU") for n in fleet_nodes ^ ours_nodes)
    both = ours_nodes & fleet_nodes
    diff: Cells = {}
    for cell in sorted(set(reference) | set(mine), key=_cell_order):
        row, col = cell
        if row not in both or (col not in both and not _is_affinity(col)):
            continue
        ours, theirs = mine.get(cell), reference.get(cell)
        if ours == theirs or (not _is_affinity(col) and (col, row) in diff):
            continue  # the matrix is symmetric: one line per pair
        diff[cell] = theirs if theirs is not None else "(absent)"
        severe = severe or (row.startswith("GPU") and col.startswith("GPU"))
        lines.append(f"{row}/{col} {ours if ours is not None else '(absent)'} (fleet {diff[cell]})")
    for cell in list(diff):
        if not _is_affinity(cell[1]):
            diff[(cell[1], cell[0])] = diff[cell]  # highlight both halves of the matrix
    gpu_links = [line for line in lines if line.startswith("GPU") and line.split("/")[1].startswith("GPU")]
    rest = [line for line in lines if line not in gpu_links]
    return diff, gpu_links + presence + rest, severe


def _node_order(node: str) -> tuple[str, int]:
    digits = "".join(ch for ch in node.split(" ", maxsplit=1)[0] if ch.isdigit())
    return node[:3], int(digits or 0)


def _is_affinity(col: str) -> bool:
    return col in ("NUMA affinity", "CPU affinity", "GPU NUMA ID")


def _cell_order(cell: tuple[str, str]) -> tuple[int, tuple[str, int], tuple[str, int]]:
    row, col = cell
    if row.startswith("GPU") and col.startswith("GPU"):
        rank = 0
    elif _is_affinity(col):
        rank = 2 if col == "CPU affinity" else 1  # NUMA placement says more than a CPU list
    else:
        rank = 3
    return rank, _node_order(row), _node_order(col)
