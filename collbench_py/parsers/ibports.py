"""RDMA port views into one IbPort record per (CA, port): `ibstat`, `ibstatus`, `ibv_devinfo` (`-v`
adds width and speed), `ibdev2netdev` (`-v` too) and iproute2's `rdma link show`. A file may hold
several of them (a check script prints one after the other): a port seen by several merges into one
record, each view filling what it shows; `sources` says which views did.

States are normalised (`Active`, `ACTIVE`, `PORT_ACTIVE (4)`, `4: ACTIVE` -> `active`; `LinkUp`,
`LINK_UP`, `5: LinkUp` -> `link-up`). A port that is not active still prints a rate (`Rate: 40` on a
disabled port): `rate_printed` keeps it, `rate_gbps` is only set for an active port.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from collbench_py.parsers._records import cell, number
from collbench_py.parsers.models import Kind, ParsedFile, ParseError

KIND: Kind = "ib-ports"

_IBSTAT_CA = re.compile(r"^CA '(?P<ca>[^']+)'")
_IBSTAT_PORT = re.compile(r"^\s+Port (?P<port>\d+):\s*$")
_IBSTAT_FIELD = re.compile(r"^\s+(?P<key>[A-Za-z][\w ]*?):\s*(?P<value>.*?)\s*$")
_IBSTATUS = re.compile(r"^Infiniband device '(?P<ca>[^']+)' port (?P<port>\d+) status:")
_DEVINFO_CA = re.compile(r"^hca_id:\s*(?P<ca>\S+)")
_DEVINFO_PORT = re.compile(r"^\s+port:\s*(?P<port>\d+)\s*$")
_DEVINFO_FIELD = re.compile(r"^\s+(?P<key>\w+):\s*(?P<value>.*?)\s*$")
_RDMA_LINK = re.compile(r"^link (?P<ca>[^/\s]+)/(?P<port>\d+)\s+(?P<rest>.*)$")
_IBDEV2NETDEV = re.compile(
    r"(?P<ca>[\w.-]+)(?: \([^)]*\))?.*? port (?P<port>\d+)(?: \((?P<state>[A-Z_]+)\))?"
    r" ==> (?P<netdev>\S+) \((?P<up>\w+)\)"
)
_WIDTH = re.compile(r"\b(?P<width>\d+)[xX]\b")


@dataclass(frozen=True)
class IbPort:
    ca: str  # "mlx5_0"
    port: int
    state: str | None = None  # "active", "down", "init", "armed"
    physical_state: str | None = None  # "link-up", "disabled", "polling", "sleep", "link-error-recovery"
    up: bool | None = (
        None  # state active (and physically up where shown); netdev state where only that is known
    )
    rate_gbps: float | None = None  # only for an active port
    rate_printed: float | None = None  # the rate as printed, also where the port is down (a placeholder)
    width: str | None = None  # "4X" (`ibv_devinfo -v`, `ibstatus`)
    speed: str | None = None  # "NDR", "100.0 Gbps", as printed
    link_layer: str | None = None  # "InfiniBand", "Ethernet"
    netdev: str | None = None
    netdev_state: str | None = None  # "up", "down" (`ibdev2netdev`)
    lid: int | None = None
    sm_lid: int | None = None
    port_guid: str | None = None
    ca_type: str | None = None  # "MT4129"
    firmware: str | None = None
    sources: tuple[str, ...] = ()  # "ibstat", "ibstatus", "ibv_devinfo", "ibdev2netdev", "rdma-link"

    CSV_FIELDS: ClassVar[tuple[str, ...]] = (
        "ca",
        "port",
        "state",
        "physical_state",
        "up",
        "rate_gbps",
        "rate_printed",
        "width",
        "link_layer",
        "netdev",
        "netdev_state",
        "ca_type",
        "firmware",
        "sources",
    )

    def csv_rows(self) -> list[dict[str, Any]]:
        row = {name: getattr(self, name) for name in self.CSV_FIELDS}
        row["sources"] = " ".join(self.sources)
        return [row]

    def table_lines(self) -> list[str]:
        parts = [
            f"{self.ca}/{self.port}",
            f"state {cell(self.state)}",
            f"phys {cell(self.physical_state)}",
            f"rate {cell(self.rate_gbps)}"
            + (
                f" (printed {cell(self.rate_printed)})"
                if self.rate_gbps is None and self.rate_printed is not None
                else ""
            ),
        ]
        if self.width:
            parts.append(f"width {self.width}")
        parts.append(f"link {cell(self.link_layer)}")
        if self.netdev:
            parts.append(f"netdev {self.netdev} ({cell(self.netdev_state)})")
        return ["  " + "  ".join(parts)]


def state(raw: str) -> str:
    """`PORT_ACTIVE (4)`, `4: ACTIVE`, `Active` -> `active`."""
    word = re.sub(r"\(\d+\)|^\d+:\s*", "", raw).strip().lower().removeprefix("port_")
    return {"initializing": "init", "initialize": "init"}.get(word, word)


def physical_state(raw: str) -> str:
    """`LinkUp`, `LINK_UP`, `5: LinkUp` -> `link-up`; `Disabled` -> `disabled`."""
    word = re.sub(r"\(\d+\)|^\d+:\s*", "", raw).strip()
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "-", word).replace("_", "-").lower()


def sniff(text: str) -> Kind | None:
    head = text[:65536]
    # Substring guards first: most files are benchmark logs, and none of these words is in them.
    if "CA '" in head and re.search(r"(?m)^CA '[^']+'\s*$", head) and "Port " in head:
        return KIND
    if "hca_id:" in head and re.search(r"(?m)^hca_id:\s*\S+", head):
        return KIND
    if "Infiniband device '" in head and re.search(r"(?m)^Infiniband device '[^']+' port \d+ status:", head):
        return KIND
    if "link " in head and re.search(r"(?m)^link [^/\s]+/\d+ (?:subnet_prefix|state) ", head):
        return KIND
    if " ==> " in head and re.search(r"(?m)\bport \d+(?: \([A-Z_]+\))? ==> \S+ \((?:Up|Down)\)", head):
        return KIND
    return None


class _Ports:
    def __init__(self) -> None:
        self.ports: dict[tuple[str, int], dict[str, Any]] = {}
        self.cas: dict[str, dict[str, Any]] = {}

    def port(self, ca: str, number_: int, source: str) -> dict[str, Any]:
        entry = self.ports.setdefault((ca, number_), {"sources": []})
        if source not in entry["sources"]:
            entry["sources"].append(source)
        return entry

    def records(self) -> list[IbPort]:
        out = []
        for (ca, port), values in self.ports.items():
            values = dict(values)
            sources = tuple(values.pop("sources"))
            for key in ("ca_type", "firmware"):
                values.setdefault(key, self.cas.get(ca, {}).get(key))
            known_state = values.get("state")
            if known_state is not None:
                physical = values.get("physical_state")
                values["up"] = known_state == "active" and physical in (None, "link-up")
            elif values.get("netdev_state") is not None:
                values["up"] = values["netdev_state"] == "up"
            if values.get("up") and values.get("rate_printed") is not None:
                values["rate_gbps"] = values["rate_printed"]
            out.append(IbPort(ca=ca, port=port, sources=sources, **values))
        return out


def parse(text: str, file: str) -> ParsedFile:
    ports = _Ports()
    ca: str | None = None
    current: dict[str, Any] | None = None
    view: str | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if match := _IBSTAT_CA.match(line):
            ca, current, view = match["ca"], None, "ibstat"
            ports.cas.setdefault(ca, {})
        elif match := _IBSTATUS.match(line):
            ca, view = match["ca"], "ibstatus"
            current = ports.port(ca, int(match["port"]), "ibstatus")
        elif match := _DEVINFO_CA.match(line):
            ca, current, view = match["ca"], None, "ibv_devinfo"
            ports.cas.setdefault(ca, {})
        elif match := _RDMA_LINK.match(line):
            view, current = None, None
            _rdma_link(ports.port(match["ca"], int(match["port"]), "rdma-link"), match["rest"])
        elif match := _IBDEV2NETDEV.search(line):
            view, current = None, None
            entry = ports.port(match["ca"], int(match["port"]), "ibdev2netdev")
            entry["netdev"], entry["netdev_state"] = match["netdev"], match["up"].lower()
            if match["state"]:
                entry.setdefault("state", state(match["state"]))
        elif view == "ibstat" and ca and (match := _IBSTAT_PORT.match(line)):
            current = ports.port(ca, int(match["port"]), "ibstat")
        elif view == "ibv_devinfo" and ca and (match := _DEVINFO_PORT.match(line)):
            current = ports.port(ca, int(match["port"]), "ibv_devinfo")
        elif view == "ibstat" and ca and (match := _IBSTAT_FIELD.match(line)):
            _ibstat_field(
                ports.cas[ca] if current is None else current, match["key"], match["value"], current is None
            )
        elif view == "ibstatus" and current is not None and (match := _IBSTAT_FIELD.match(line)):
            _ibstatus_field(current, match["key"], match["value"])
        elif view == "ibv_devinfo" and ca and (match := _DEVINFO_FIELD.match(line)):
            _devinfo_field(
                ports.cas[ca] if current is None else current, match["key"], match["value"], current is None
            )
        elif line and not line[0].isspace():
            view, current = None, None  # a prompt, an elision (`..`), another command's output
    records = ports.records()
    if not records:
        raise ParseError("no RDMA port found (ibstat, ibv_devinfo, ibdev2netdev, rdma link)")
    info = (
        {"cas": {name: values for name, values in ports.cas.items() if values}}
        if any(ports.cas.values())
        else {}
    )
    return ParsedFile(file=file, kind=KIND, records=tuple(records), info=info)


def _ibstat_field(target: dict[str, Any], key: str, value: str, ca_level: bool) -> None:
    if ca_level:
        names = {"CA type": "ca_type", "Firmware version": "firmware", "Node GUID": "node_guid"}
        if key in names:
            target[names[key]] = value
        return
    if key == "State":
        target["state"] = state(value)
    elif key == "Physical state":
        target["physical_state"] = physical_state(value)
    elif key == "Rate":
        target["rate_printed"] = _float(value)
    elif key == "Link layer":
        target["link_layer"] = value
    elif key == "Base lid":
        target["lid"] = _int(value)
    elif key == "SM lid":
        target["sm_lid"] = _int(value)
    elif key == "Port GUID":
        target["port_guid"] = value


def _ibstatus_field(target: dict[str, Any], key: str, value: str) -> None:
    if key == "state":
        target["state"] = state(value)
    elif key == "phys state":
        target["physical_state"] = physical_state(value)
    elif key == "rate":
        # `400 Gb/sec (4X NDR)`
        target["rate_printed"] = _float(value.split(maxsplit=1)[0]) if value else None
        if width := _WIDTH.search(value):
            target["width"] = f"{width['width']}X"
        if speed := re.search(r"\(\d+X (?P<speed>\w+)\)", value):
            target["speed"] = speed["speed"]
    elif key == "link_layer":
        target["link_layer"] = value
    elif key == "base lid":
        target["lid"] = _int(value, 16)
    elif key == "sm lid":
        target["sm_lid"] = _int(value, 16)


def _devinfo_field(target: dict[str, Any], key: str, value: str, ca_level: bool) -> None:
    if ca_level:
        names = {
            "fw_ver": "firmware",
            "vendor_part_id": "ca_type",
            "node_guid": "node_guid",
            "board_id": "board_id",
        }
        if key in names:
            target[names[key]] = value
        return
    if key == "state":
        target["state"] = state(value)
    elif key == "phys_state":
        target["physical_state"] = physical_state(value)
    elif key == "link_layer":
        target["link_layer"] = value
    elif key == "port_lid":
        target["lid"] = _int(value)
    elif key == "sm_lid":
        target["sm_lid"] = _int(value)
    elif key == "active_width":
        target["width"] = value.split(maxsplit=1)[0] if value else None
    elif key == "active_speed":
        target["speed"] = re.sub(r"\s*\(\d+\)$", "", value)
    # ibv_devinfo prints no rate: width x lane speed is left to the reader (the lane speed's units vary).


def _rdma_link(target: dict[str, Any], rest: str) -> None:
    tokens = rest.split()
    pairs = dict(zip(tokens[::2], tokens[1::2], strict=False))
    if "state" in pairs:
        target["state"] = state(pairs["state"])
    if "physical_state" in pairs:
        target["physical_state"] = physical_state(pairs["physical_state"])
    if "netdev" in pairs:
        target["netdev"] = pairs["netdev"]
    if "lid" in pairs:
        target["lid"] = _int(pairs["lid"])
    if "sm_lid" in pairs:
        target["sm_lid"] = _int(pairs["sm_lid"])


def _int(value: str, base: int = 10) -> int | None:
    try:
        return int(value, base)
    except ValueError:
        return None


def _float(value: str) -> float | None:
    parsed = number(value)
    return float(parsed) if parsed is not None else None
