"""NVLink views: `nvidia-smi nvlink -s` (state and speed) and `-e` (error counters), `dcgmi nvlink -s`
(the U/D/X matrix), and `nvidia-smi topo -p2p` (peer-access capability), into records.

`nvidia-smi nvlink -s`: `GPU i: NAME (UUID: GPU-...)`, then one `Link n: 26.562 GB/s` line per link
(TAB + space, or spaces where pasted), `Link n: <inactive>` for a link that is down. `-e`: the same
GPU lines, then `Link n: Replay Errors: 0` per counter (names differ between drivers: every counter
is kept, under its printed name in snake case). Both in one file merge per GPU and link.
`dcgmi nvlink -s`: `gpuId N:` then one letter per link (U up, D down, X disabled, _ not supported),
the same for NvSwitches (`physicalId N:`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from collbench_py.parsers._records import cell, number, snake
from collbench_py.parsers.models import Kind, ParsedFile, ParseError, Topology

KIND: Kind = "nvidia-smi-nvlink"
DCGMI: Kind = "dcgmi-nvlink"
P2P: Kind = "nvidia-smi-topo-p2p"

_GPU = re.compile(r"^GPU (?P<index>\d+): (?P<name>.+?) \(UUID: (?P<uuid>[^)]+)\)\s*$")
_LINK = re.compile(r"^\s+Link (?P<link>\d+): (?P<rest>.+?)\s*$")
_SPEED = re.compile(r"^(?P<value>[\d.]+) (?P<unit>[GM]B/s)$")
_COUNTER = re.compile(r"^(?P<name>[^:]+?): (?P<value>\S+)$")
_DCGMI_ENTITY = re.compile(r"^\s*(?P<entity>gpuId|physicalId) (?P<id>\d+):\s*$")
_DCGMI_STATES = {"U": "up", "D": "down", "X": "disabled", "_": "not-supported"}
_P2P_LEGEND = re.compile(r"^\s*(?P<code>X|OK|CNS|GNS|TNS|NS|DR|U)\s+=\s+(?P<meaning>.+?)\s*$")


@dataclass(frozen=True)
class NvlinkLink:
    link: int
    state: str | None = None  # "up", "down" (`<inactive>`); None where the file has only counters
    speed_gbs: float | None = None  # GB/s per direction, as printed
    counters: dict[str, int | float | None] = field(
        default_factory=dict
    )  # `-e`: replay_errors, crc_errors, ...


@dataclass(frozen=True)
class NvlinkGpu:
    """One GPU of `nvidia-smi nvlink -s/-e`."""

    index: int
    name: str | None = None
    uuid: str | None = None
    links: tuple[NvlinkLink, ...] = ()

    CSV_FIELDS: ClassVar[tuple[str, ...]] = ("gpu", "uuid", "link", "state", "speed_gbs", "counters")

    def csv_rows(self) -> list[dict[str, Any]]:
        return [
            {
                "gpu": self.index,
                "uuid": self.uuid,
                "link": link.link,
                "state": link.state,
                "speed_gbs": link.speed_gbs,
                "counters": " ".join(f"{key}={cell(value)}" for key, value in link.counters.items()),
            }
            for link in self.links
        ] or [{"gpu": self.index, "uuid": self.uuid}]

    def table_lines(self) -> list[str]:
        up = sum(link.state == "up" for link in self.links)
        down = [str(link.link) for link in self.links if link.state == "down"]
        lines = [f"  GPU {self.index}: {self.name or '?'}  {len(self.links)} links, {up} up"]
        if down:
            lines.append(f"    down: links {', '.join(down)}")
        speeds = sorted({link.speed_gbs for link in self.links if link.speed_gbs is not None})
        if speeds:
            lines.append(f"    speed: {', '.join(f'{speed:g}' for speed in speeds)} GB/s per link")
        grown = [
            f"link {link.link} {key}={cell(value)}"
            for link in self.links
            for key, value in link.counters.items()
            if isinstance(value, (int, float)) and value and key.endswith(("errors", "events"))
        ]
        if grown:
            lines.append(f"    counters not zero: {'; '.join(grown)}")
        return lines


@dataclass(frozen=True)
class DcgmiLinks:
    """One GPU or NvSwitch of `dcgmi nvlink -s`: a state per link."""

    entity: str  # "gpu" or "nvswitch"
    id: int
    states: tuple[str, ...] = ()  # "up", "down", "disabled", "not-supported", in link order

    CSV_FIELDS: ClassVar[tuple[str, ...]] = ("entity", "id", "link", "state")

    def csv_rows(self) -> list[dict[str, Any]]:
        return [
            {"entity": self.entity, "id": self.id, "link": i, "state": s} for i, s in enumerate(self.states)
        ]

    def table_lines(self) -> list[str]:
        counts = {state: self.states.count(state) for state in dict.fromkeys(self.states)}
        summary = ", ".join(f"{count} {state}" for state, count in counts.items())
        return [f"  {self.entity} {self.id}: {len(self.states)} links: {summary}"]


def p2p_only(text: str) -> bool:
    """`nvidia-smi topo -p2p` alone: its legend (GNS, CNS), no `topo -m` legend (SYS, NODE, PHB)."""
    head = text[:65536]
    if "NS " not in head:  # cheap: neither legend entry GNS nor CNS
        return False
    if re.search(r"(?m)^\s*(?:SYS|NODE|PHB|PIX|PXB)\s+=\s+", head):
        return False  # printed after a `topo -m`: the file is topo's
    return bool(re.search(r"(?m)^\s*(?:GNS|CNS)\s+=\s+", head) and re.search(r"(?m)^\s*GPU0\s", head))


def sniff(text: str) -> Kind | None:
    head = text[:65536]
    if p2p_only(head):
        return P2P
    if "NvLink Link Status" in head or (
        "gpuId" in head and re.search(r"(?m)^\s*gpuId \d+:\s*\n\s*[UDX_](?: [UDX_])*\s*$", head)
    ):
        return DCGMI
    if (
        "(UUID: " in head
        and re.search(r"(?m)^GPU \d+: .+\(UUID: ", head)
        and re.search(r"(?m)^\s+Link \d+: ", head)
    ):
        return KIND
    return None


def parse(text: str, file: str) -> ParsedFile:
    kind = sniff(text)
    if kind == P2P:
        return _p2p(text, file)
    if kind == DCGMI:
        return _dcgmi(text, file)
    if kind is None:
        raise ParseError("no `nvidia-smi nvlink` GPU and link lines found")
    return _nvidia_smi(text, file)


def _nvidia_smi(text: str, file: str) -> ParsedFile:
    gpus: dict[int, tuple[re.Match[str], dict[int, dict[str, Any]]]] = {}
    current: dict[int, dict[str, Any]] | None = None
    warnings: list[str] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if match := _GPU.match(line):
            index = int(match["index"])
            current = gpus.setdefault(index, (match, {}))[1]  # -s then -e: the same GPU again
        elif (match := _LINK.match(line)) and current is not None:
            link = current.setdefault(int(match["link"]), {"counters": {}})
            _link_value(link, match["rest"])
        elif line.strip() and current is not None and not line.startswith(("GPU ", " ", "\t")):
            warnings.append(line.strip())  # `NVML: ...`, `Failed to ...`
    if not gpus:
        raise ParseError("no `nvidia-smi nvlink` GPU lines found")
    records = []
    for index, (match, links) in sorted(gpus.items()):
        built = tuple(
            NvlinkLink(link=n, state=v.get("state"), speed_gbs=v.get("speed_gbs"), counters=v["counters"])
            for n, v in sorted(links.items())
        )
        records.append(NvlinkGpu(index=index, name=match["name"], uuid=match["uuid"], links=built))
    info = {
        "gpus": len(records),
        "links_down": sum(link.state == "down" for gpu in records for link in gpu.links),
    }
    return ParsedFile(file=file, kind=KIND, records=tuple(records), info=info, warnings=tuple(warnings))


def _link_value(link: dict[str, Any], rest: str) -> None:
    if rest == "<inactive>":
        link["state"], link["speed_gbs"] = "down", None
    elif match := _SPEED.match(rest):
        speed = float(match["value"])
        link["state"] = "up"
        link["speed_gbs"] = speed / 1000 if match["unit"] == "MB/s" else speed
    elif match := _COUNTER.match(rest):
        link["counters"][snake(match["name"])] = number(match["value"])
    else:
        link["counters"][snake(rest)] = None


def _dcgmi(text: str, file: str) -> ParsedFile:
    records: list[DcgmiLinks] = []
    pending: tuple[str, int] | None = None
    for raw in text.splitlines():
        if match := _DCGMI_ENTITY.match(raw):
            entity = "gpu" if match["entity"] == "gpuId" else "nvswitch"
            pending = (entity, int(match["id"]))
            continue
        letters = raw.split()
        if pending and letters and all(letter in _DCGMI_STATES for letter in letters):
            states = tuple(_DCGMI_STATES[letter] for letter in letters)
            records.append(DcgmiLinks(entity=pending[0], id=pending[1], states=states))
        pending = None
    if not records and "NvLink Link Status" not in text:
        raise ParseError("no `dcgmi nvlink -s` entity found")
    info = {
        "gpus": sum(r.entity == "gpu" for r in records),
        "nvswitches": sum(r.entity == "nvswitch" for r in records),
        "links_up": sum(r.states.count("up") for r in records),
        "links_down": sum(r.states.count("down") for r in records),
    }
    return ParsedFile(file=file, kind=DCGMI, records=tuple(records), info=info)


def _p2p(text: str, file: str) -> ParsedFile:
    matrix: dict[str, dict[str, str]] = {}
    columns: list[str] = []
    legend: dict[str, str] = {}
    for raw in text.splitlines():
        cells = raw.split()
        if not cells:
            continue
        if match := _P2P_LEGEND.match(raw):
            legend[match["code"]] = match["meaning"]
        elif all(re.fullmatch(r"GPU\d+", label) for label in cells) and not columns:
            columns = cells
        elif columns and re.fullmatch(r"GPU\d+", cells[0]) and len(cells) == len(columns) + 1:
            matrix[cells[0]] = dict(zip(columns, cells[1:], strict=True))
    if not matrix:
        raise ParseError("no `nvidia-smi topo -p2p` matrix found")
    mode = re.search(r"topo\s+-p2p\s+(?P<mode>[rwnpa]+)\b", text)
    info: dict[str, Any] = {"legend": legend, "mode": mode["mode"] if mode else None}
    topology = Topology(gpus=tuple(matrix), matrices={"p2p": matrix})
    return ParsedFile(file=file, kind=P2P, topology=topology, info=info)
