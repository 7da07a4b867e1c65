"""Nodes from a Slurm scheduler: hostlist expressions and `sinfo` output.

Pure functions, standard library only: `inventory/slurm_inventory.py` imports this module with whatever
python3 a login node has.

- `expand_hostlist("gpu[001-003],b7")` -> `["gpu001", "gpu002", "gpu003", "b7"]`, as Slurm expands it.
- `parse_sinfo(text)` reads `sinfo -h -N -o SINFO_FORMAT` (`sinfo_argv(...)` builds the command) into
  `SlurmNode`s: name, state as sinfo prints it, CPUs, memory, GRES and Slurm's reason. A node is usable
  when Slurm could give it to a job now or soon (idle, mixed, allocated, completing, planned) and it
  responds; down, drained, draining, failing, ... nodes are kept, with their reason, as not usable.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# Node-oriented sinfo, one line per node and partition. The reason (%E, free text set by an admin) goes
# last: it may hold the separator itself. The other fields never do.
SINFO_FORMAT = "%N|%T|%c|%m|%G|%P|%E"
SINFO_FIELDS = 7

# Base states (sinfo %T, before any flag character) in which Slurm can run a job on the node.
USABLE_STATES = frozenset({"idle", "mixed", "allocated", "completing", "planned"})
# Every other base state sinfo prints (22.05 man page, NODE STATE CODES); none of them takes work.
OTHER_STATES = frozenset(
    {
        "blocked",
        "down",
        "drained",
        "draining",
        "fail",
        "failing",
        "future",
        "inval",
        "maint",
        "perfctrs",
        "power_down",
        "powered_down",
        "powering_down",
        "powering_up",
        "reboot_issued",
        "reboot_requested",
        "reserved",
        "unknown",
    }
)
# Flag characters sinfo appends to a state, and what each means. Power-saving flags leave a node
# usable (Slurm powers it up for a job); these do not.
UNUSABLE_FLAGS = {
    "*": "not responding",
    "$": "in a maintenance reservation",
    "@": "reboot pending",
    "^": "reboot issued",
}
USABLE_FLAGS = frozenset("~#!%-")
NO_REASON = ("", "none", "(null)")
# Inventory groups: the nodes to benchmark, and those Slurm says are out of service.
USABLE_GROUP = "gpu_nodes"
UNUSABLE_GROUP = "slurm_unusable"


class SlurmInputError(ValueError):
    """A hostlist expression or sinfo output that cannot be read; the message says where."""


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str  # as sinfo prints it: "idle", "down*", "drained", "mixed~"
    cpus: int | None
    memory_mb: int | None
    gres: str  # "gpu:8", "gpu:h100:8(S:0-1)", "" for none
    partitions: tuple[str, ...]
    reason: str  # Slurm's reason (admin text), "" when it has none

    @property
    def base_state(self) -> str:
        return split_state(self.state)[0]

    @property
    def usable(self) -> bool:
        return not self.unusable_because

    @property
    def unusable_because(self) -> str:
        """Why Slurm will not run work on this node: its reason, else what its state says; "" if usable."""
        base, flags = split_state(self.state)
        known = base in USABLE_STATES or base in OTHER_STATES
        problems = (
            [] if base in USABLE_STATES else [base if known else f"{base}: a state collbench does not know"]
        )
        problems += [UNUSABLE_FLAGS[flag] for flag in flags if flag in UNUSABLE_FLAGS]
        if not problems:
            return ""
        if self.reason:
            return self.reason
        return f"Slurm state {self.state} ({', '.join(problems)})"


# ---- hostlists ------------------------------------------------------------------------------------------


def expand_hostlist(expression: str) -> list[str]:
    """The host names of a Slurm hostlist expression, in order, duplicates kept once.

    `gpu[001-128]` keeps the zero padding of the lower bound; `a[1-3,5],b7` mixes ranges and single
    numbers; `r[1-2]n[1-2]` expands every bracket (r1n1, r1n2, r2n1, r2n2); commas inside brackets do
    not split hosts."""
    names: list[str] = []
    for item in _top_level_items(expression):
        names.extend(_expand_item(item))
    return list(dict.fromkeys(names))


def _top_level_items(expression: str) -> list[str]:
    items, current, depth = [], [], 0
    for char in expression.strip():
        if char == "[":
            depth += 1
            if depth > 1:
                raise SlurmInputError(f"hostlist {expression!r}: brackets cannot nest")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise SlurmInputError(f"hostlist {expression!r}: ']' without '['")
        if char == "," and depth == 0:
            items.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    if depth:
        raise SlurmInputError(f"hostlist {expression!r}: '[' without ']'")
    items.append("".join(current).strip())
    if not any(items) or not all(items):
        raise SlurmInputError(f"hostlist {expression!r}: an empty host name")
    return items


def _expand_item(item: str) -> list[str]:
    # "rack[1-2]-n[01-02]" -> literal parts and bracket bodies, alternating: ["rack", "1-2", "-n", ...].
    parts = re.split(r"\[([^\]]*)\]", item)
    choices = [[literal] if k % 2 == 0 else _expand_ranges(literal, item) for k, literal in enumerate(parts)]
    return ["".join(combo) for combo in itertools.product(*choices)]


def _expand_ranges(body: str, item: str) -> list[str]:
    numbers: list[str] = []
    for piece in body.split(","):
        piece = piece.strip()
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", piece)
        if not match:
            raise SlurmInputError(f"hostlist {item!r}: [{body}] holds {piece!r}, not a number or a range")
        low, high = match[1], match[2] if match[2] is not None else match[1]
        if int(high) < int(low):
            raise SlurmInputError(f"hostlist {item!r}: range {piece} runs backwards")
        width = len(low)  # Slurm pads to the lower bound's width: [001-128], [08-10]
        numbers.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
    return numbers


# ---- sinfo ----------------------------------------------------------------------------------------------


def sinfo_argv(partition: str = "", nodes: str = "", sinfo: str = "sinfo") -> list[str]:
    """The sinfo command whose output `parse_sinfo` reads: one partition, a node list, or both."""
    argv = [sinfo, "--noheader", "--Node", f"--format={SINFO_FORMAT}"]
    if partition:
        argv.append(f"--partition={partition}")
    if nodes:
        argv.append(f"--nodes={nodes}")
    return argv


def split_state(state: str) -> tuple[str, str]:
    """("drained", "*") for "drained*": the base state in lower case and its flag characters."""
    # A state this module does not know keeps its whole text as the base: not usable, never an error.
    match = re.fullmatch(r"([a-z_+]*)(.*)", state.strip().lower())
    return match[1], match[2]


def parse_sinfo(text: str) -> list[SlurmNode]:
    """Nodes of `sinfo -h -N -o SINFO_FORMAT`, in sinfo's order; a node listed under several partitions
    appears once with all of them."""
    nodes: dict[str, SlurmNode] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        node = _parse_sinfo_line(line, number)
        if node.name in nodes:
            seen = nodes[node.name]
            partitions = seen.partitions + tuple(p for p in node.partitions if p not in seen.partitions)
            node = SlurmNode(**{**seen.__dict__, "partitions": partitions})
        nodes[node.name] = node
    return list(nodes.values())


def _parse_sinfo_line(line: str, number: int) -> SlurmNode:
    fields = line.split("|", SINFO_FIELDS - 1)
    if len(fields) != SINFO_FIELDS:
        raise SlurmInputError(
            f"sinfo line {number}: {line!r} has {len(fields)} fields, expected {SINFO_FIELDS} "
            f"(format {SINFO_FORMAT})"
        )
    name, state, cpus, memory, gres, partition, reason = (field.strip() for field in fields)
    if not name or "[" in name or "," in name:
        raise SlurmInputError(f"sinfo line {number}: {name!r} is not one node name (run sinfo with -N)")
    if not state:
        raise SlurmInputError(f"sinfo line {number}: node {name} has no state")
    return SlurmNode(
        name=name,
        state=state.lower(),
        cpus=_number(cpus, "CPUs", number),
        memory_mb=_number(memory, "memory", number),
        gres="" if gres in ("(null)", "") else gres,
        partitions=(partition.rstrip("*"),) if partition else (),  # "gpu*": the default partition
        reason="" if reason.lower() in NO_REASON else reason,
    )


def _number(text: str, what: str, number: int) -> int | None:
    if text in ("", "N/A"):
        return None
    if not text.isdigit():
        raise SlurmInputError(f"sinfo line {number}: {what} {text!r} is not a number")
    return int(text)


def missing_nodes(wanted: Iterable[str], listed: Sequence[SlurmNode], *, why: str) -> list[SlurmNode]:
    """Nodes named in `wanted` that sinfo did not list, as unusable nodes with reason `why`."""
    known = {node.name for node in listed}
    return [
        SlurmNode(name=name, state="unknown", cpus=None, memory_mb=None, gres="", partitions=(), reason=why)
        for name in wanted
        if name not in known
    ]


# ---- Ansible ----------------------------------------------------------------------------------------------


def ansible_inventory(nodes: Sequence[SlurmNode]) -> dict[str, object]:
    """Ansible's script-inventory JSON: usable nodes in `gpu_nodes`, the others in `slurm_unusable` with
    `collbench_slurm_reason`; every host's vars in `_meta`."""
    return {
        "_meta": {"hostvars": {node.name: host_vars(node) for node in nodes}},
        "all": {"children": [USABLE_GROUP, UNUSABLE_GROUP]},
        USABLE_GROUP: {"hosts": [node.name for node in nodes if node.usable]},
        UNUSABLE_GROUP: {"hosts": [node.name for node in nodes if not node.usable]},
    }


def host_vars(node: SlurmNode) -> dict[str, object]:
    values: dict[str, object] = {
        "collbench_slurm_state": node.state,
        "collbench_slurm_partitions": list(node.partitions),
        "collbench_slurm_cpus": node.cpus,
        "collbench_slurm_memory_mb": node.memory_mb,
        "collbench_slurm_gres": node.gres,
    }
    if not node.usable:
        values["collbench_slurm_reason"] = node.unusable_because
    return values
