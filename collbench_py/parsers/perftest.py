"""perftest (`ib_write_bw`, `ib_read_bw`, `ib_send_bw`, `ib_atomic_bw` and the `_lat` tests): text or
`--out_json` into PerftestRun records.

Text layout: an optional command line, the CUDA/ROCm preamble (`--use_cuda`), a title
(`RDMA_Write BW Test`, `Send Latency Test`, `RDMA_Write Bidirectional BW Test`), a header of
`Key : Value` pairs (two per line, TAB or spaces between), the address lines, then a column header
(`#bytes #iterations BW peak[Gb/sec] ...` or `... t_min[usec] ...`) and one row per size. A file may
hold several runs (server and client, a bandwidth and a latency test). A run that failed (no device,
port down, no connection, GPU memory not usable) is a record with `status: failed` and the line that
says why: data, not an error. `--out_json` writes one object per run (`test_info`, `results`, the
last size only: perftest rewrites the file per size) and names no bandwidth unit.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from collbench_py.parsers._records import cell, number, strip_prompt
from collbench_py.parsers.models import Kind, ParsedFile, ParseError

KIND: Kind = "perftest"

_TITLE = re.compile(
    r"^\s*(?P<title>(?:RDMA_Write|RDMA_Read|Send|Atomic|Write|Read)\S*(?: [\w ]*?)? (?:BW|Latency) Test)\s*$"
)
_TITLE_LINE = re.compile(_TITLE.pattern, re.MULTILINE)
_COMMAND = re.compile(r"\b(?P<tool>ib_(?P<verb>write|read|send|atomic)_(?P<what>bw|lat))\b(?P<args>[^;&|]*)")
_ROWS_HEADER = re.compile(r"^\s*#bytes\b")
_ADDRESS = re.compile(r"^\s*(?P<side>local|remote) address:\s*(?P<rest>.*)$")
_GID = re.compile(r"^\s*GID:\s*(?P<gid>\S+)")
_PAIR = re.compile(r"(?P<key>[A-Za-z][\w*.() /-]*?)\s*:\s*(?P<value>\S+(?: \S+)*?)(?=\s{2,}[A-Za-z]|\s*$)")
_PICKED = re.compile(r"^Picking device No\. (?P<id>\d+)")
_CUDA_PCI = re.compile(r"^CUDA device (?P<id>\d+): PCIe address is (?P<pci>\S+)")
_GPU_NAME = re.compile(r"device name = \[(?P<name>[^\]]*)\]")
_USE_GPU = re.compile(r"-{1,2}use_(?P<api>cuda|rocm)(?:[= ](?P<id>\d+))?")

# What a failed run prints, most specific first: (kind, pattern). The kinds are the contract.
_FAILURES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("no-device", re.compile(r"Unable to find the Infiniband/RoCE device")),
    ("no-device", re.compile(r"Did not detect devices|No IB devices found")),
    (
        "no-device",
        re.compile(r"IB device \S+ not found|Failed to get IB devices list|Couldn't get device list"),
    ),
    ("port-down", re.compile(r"Port number \d+ state is \w+|Couldn't query port|Unable to query port")),
    ("device-open", re.compile(r"Couldn't get (?:context for the )?device|Couldn't open IB device")),
    (
        "connect",
        re.compile(
            r"Couldn't connect to|Unable to open file descriptor|Unable to init the socket connection"
        ),
    ),
    (
        "connect",
        re.compile(
            r"Failed to (?:connect|establish)|Couldn't (?:exchange|read|write) (?:data|remote)"
            r"|rdma_cm.*(?:failed|error)",
            re.I,
        ),
    ),
    (
        "gpu-memory",
        re.compile(
            r"Failed to load (?:CUDA|ROCm) library|There are no available device\(s\) that support CUDA"
        ),
    ),
    (
        "gpu-memory",
        re.compile(
            r"No such device ID \(\d+\) exists|cuInit\(0\) returned [1-9]"
            r"|cuCtxCreate\(\) error|cuMemAlloc\(\) error"
        ),
    ),
    (
        "gpu-memory",
        re.compile(
            r"Failed to load kernel plugin|not compiled with (?:CUDA|ROCm)|CUDA support (?:is )?not", re.I
        ),
    ),
    (
        "memory-registration",
        re.compile(r"Couldn't allocate MR|Couldn't register (?:the )?MR|ibv_reg_(?:dmabuf_)?mr failed"),
    ),
)

# Substrings of the no-device lines above: a cheap guard before their patterns.
_NO_DEVICE_WORDS = ("Infiniband/RoCE", "Did not detect devices", "No IB devices", "IB device", "device list")

_HEADER_FIELDS = {
    "Device": "device",
    "Transport type": "transport_type",
    "Connection type": "connection_type",
    "Link type": "link_type",
    "Data ex. method": "data_exchange",
}
# Column names of the result table as perftest prints them -> the row's field.
_COLUMNS = (
    ("#bytes", "bytes"),
    ("#iterations", "iterations"),
    ("BW peak", "bw_peak"),
    ("BW average", "bw_average"),
    ("MsgRate", "msg_rate"),
    ("t_min", "t_min"),
    ("t_max", "t_max"),
    ("t_typical", "t_typical"),
    ("t_avg", "t_avg"),
    ("t_stdev", "t_stdev"),
    ("99.9% percentile", "p99_9"),
    ("99% percentile", "p99"),
    ("tps average", "tps_average"),
)


@dataclass(frozen=True)
class PerftestRow:
    """One message size. Bandwidths in the run's `bw_unit`, latencies in `lat_unit`, msg_rate in Mpps."""

    bytes: int
    iterations: int | None = None
    bw_peak: float | None = None  # None where not measured (duration mode prints 0.00)
    bw_average: float | None = None
    msg_rate: float | None = None
    t_min: float | None = None
    t_max: float | None = None
    t_typical: float | None = None
    t_avg: float | None = None
    t_stdev: float | None = None
    p99: float | None = None
    p99_9: float | None = None
    tps_average: float | None = None


@dataclass(frozen=True)
class PerftestRun:
    test: str | None = None  # "write_bw", "read_lat", ... (None where a failure came before any header)
    title: str | None = None  # "RDMA_Write Bidirectional BW Test"
    command: str | None = None
    role: str | None = None  # "server" (it waited for a client) or "client" (it named a server)
    server: str | None = None  # the address a client connected to
    device: str | None = None  # "mlx5_0"
    port: int | None = None  # the HCA port (`-i`), where the command line shows it
    link_type: str | None = None  # "IB", "Ethernet"
    transport_type: str | None = None
    connection_type: str | None = None  # "RC", "UD", ...
    qps: int | None = None
    mtu: int | None = None  # bytes
    gid_index: int | None = None
    gid: str | None = None
    remote_gid: str | None = None
    rdma_cm: bool | None = None
    data_exchange: str | None = None
    bidirectional: bool = False
    post_list: int | None = None
    gpu_memory: str | None = None  # "cuda" or "rocm": buffers in GPU memory (GPUDirect RDMA)
    gpu_device: int | None = None
    gpu_name: str | None = None
    gpu_pci: str | None = None
    bw_unit: str | None = None  # as printed: "Gb/sec" (--report_gbits), "MB/sec", "MiB/sec"
    lat_unit: str | None = None  # "usec"
    rows: tuple[PerftestRow, ...] = ()
    status: str = "ok"  # "ok", "failed", "incomplete" (a header and no result)
    failure: str | None = None  # no-device, device-open, port-down, connect, gpu-memory, memory-registration
    reason: str | None = None  # the line that said so
    header: dict[str, str] = field(default_factory=dict)  # every `Key : Value` of the header, as printed
    warnings: tuple[str, ...] = ()

    CSV_FIELDS: ClassVar[tuple[str, ...]] = (
        "test",
        "role",
        "device",
        "port",
        "link_type",
        "gpu_memory",
        "status",
        "failure",
        "bw_unit",
        *(name for _, name in _COLUMNS),
    )

    def csv_rows(self) -> list[dict[str, Any]]:
        base = {name: getattr(self, name) for name in self.CSV_FIELDS[:9]}
        return [{**base, **vars(row)} for row in self.rows] or [base]

    def table_lines(self) -> list[str]:
        head = [f"{self.test or '?'}", f"device {cell(self.device)}", f"status {self.status}"]
        if self.role:
            head.append(self.role)
        if self.link_type:
            head.append(f"link {self.link_type}")
        if self.gpu_memory:
            head.append(f"GPU memory {self.gpu_memory}:{cell(self.gpu_device)}")
        lines = ["  " + "  ".join(head)]
        if self.failure:
            lines.append(f"    failure: {self.failure}: {self.reason}")
        if self.rows and self.bw_unit:
            lines.append(
                f"    {'bytes':>10}  {'iters':>10}  {'peak':>10}  {'average':>10}  {'Mpps':>10}"
                f"  ({self.bw_unit})"
            )
            for row in self.rows:
                values = (row.bytes, row.iterations, row.bw_peak, row.bw_average, row.msg_rate)
                lines.append("    " + "  ".join(f"{cell(value):>10}" for value in values))
        elif self.rows:
            lines.append(
                f"    {'bytes':>10}  {'iters':>10}  {'t_min':>8}  {'t_typical':>9}  {'t_avg':>8}"
                f"  {'99.9%':>8}"
                f"  ({self.lat_unit or '?'})"
            )
            for row in self.rows:
                lines.append(
                    f"    {row.bytes:>10}  {cell(row.iterations):>10}  {cell(row.t_min):>8}"
                    f"  {cell(row.t_typical):>9}  {cell(row.t_avg):>8}  {cell(row.p99_9):>8}"
                )
        lines += [f"    warning: {warning}" for warning in self.warnings]
        return lines


def peak_gbits(run: PerftestRun) -> float | None:
    """A run's average bandwidth at its largest message size, in Gb/s (MB/s runs converted); None for
    a run that did not measure."""
    if run.status != "ok":
        return None
    rows = [row for row in run.rows if row.bw_average is not None]
    if not rows:
        return None
    value = max(rows, key=lambda row: row.bytes or 0).bw_average
    if value is not None and run.bw_unit and run.bw_unit.upper().startswith("MB"):
        value = value * 8 / 1000
    return value


def sniff(text: str) -> Kind | None:
    head = text[:65536]
    if head.lstrip().startswith("{") and '"test_info"' in head and '"results"' in head:
        return KIND
    if "#bytes" in head and re.search(r"(?m)^\s*#bytes\s+#iterations\s+(?:BW peak|t_min|t_avg)", head):
        return KIND
    if ("BW Test" in head or "Latency Test" in head) and _TITLE_LINE.search(head):
        return KIND
    if ("Dual-port" in head or "Number of qps" in head) and re.search(
        r"(?m)^\s*(?:Dual-port|Number of qps)\s*:", head
    ):
        return KIND
    start = head[:4096]
    if any(words in start for words in _NO_DEVICE_WORDS) and any(
        kind == "no-device" and pattern.search(start) for kind, pattern in _FAILURES
    ):
        return KIND
    # A run that failed before its header: the perftest command line and one of its failure lines.
    if (
        "ib_" in head[:8192]
        and any(_command(line.strip()) for line in head[:8192].splitlines()[:50])
        and any(pattern.search(head) for _, pattern in _FAILURES)
    ):
        return KIND
    return None


def parse(text: str, file: str) -> ParsedFile:
    if text.lstrip().startswith("{"):
        return ParsedFile(file=file, kind=KIND, records=tuple(_from_json(text, file)))
    reader = _Reader()
    for line in text.splitlines():
        reader.feed(line.replace("\t", "  ").rstrip())
    runs = reader.finished()
    if not runs:
        raise ParseError("no perftest header, result or failure found")
    return ParsedFile(file=file, kind=KIND, records=tuple(runs))


class _Draft:
    """A run being read: plain attributes, frozen into a PerftestRun at the end."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.header: dict[str, str] = {}
        self.rows: list[PerftestRow] = []
        self.columns: list[str] = []
        self.warnings: list[str] = []
        self.waited = False
        self.picked: int | None = None
        self.pcis: dict[int, str] = {}
        self.titled = False
        self.failure_rank: int | None = None

    def empty(self) -> bool:
        return not (self.titled or self.values.get("failure"))

    def run(self) -> PerftestRun:
        values = dict(self.values)
        if self.picked is not None:
            values.setdefault("gpu_device", self.picked)
            values.setdefault("gpu_memory", "cuda")
            values["gpu_pci"] = self.pcis.get(self.picked)
        if self.waited:
            values["role"] = "server"
        elif values.get("server"):
            values["role"] = "client"
        status = "failed" if values.get("failure") else "ok" if self.rows else "incomplete"
        return PerftestRun(
            **values,
            rows=tuple(self.rows),
            status=status,
            header=dict(self.header),
            warnings=tuple(self.warnings),
        )


class _Reader:
    def __init__(self) -> None:
        self.runs: list[PerftestRun] = []
        self.draft = _Draft()
        self.in_rows = False

    def _close(self) -> None:
        if not self.draft.empty():
            self.runs.append(self.draft.run())
        self.draft = _Draft()
        self.in_rows = False

    def feed(self, line: str) -> None:
        stripped = line.strip()
        if not stripped:
            return
        draft = self.draft
        command = _command(stripped)
        if command is not None:
            if not draft.empty():
                self._close()
            _apply_command(self.draft.values, command)
            return
        if match := _TITLE.match(stripped):
            if draft.titled:  # a second run without a command line between
                self._close()
                draft = self.draft
            draft.titled = True
            title = match["title"]
            draft.values["title"] = title
            draft.values["bidirectional"] = "Bidirectional" in title
            if "test" not in draft.values:
                draft.values["test"] = _test_from_title(title)
            return
        for rank, (kind, pattern) in enumerate(_FAILURES):
            if pattern.search(stripped):
                # The most telling line is the reason (the list is most specific first); the others stay.
                if draft.failure_rank is None or rank < draft.failure_rank:
                    if draft.values.get("reason"):
                        draft.warnings.append(draft.values["reason"])
                    draft.values["failure"], draft.values["reason"] = kind, stripped
                    draft.failure_rank = rank
                else:
                    draft.warnings.append(stripped)
                return
        if self._rows(stripped):
            return
        if draft.rows and (stripped == "initializing CUDA" or "Waiting for client to connect" in stripped):
            self._close()  # the next run's preamble, without a command line before it
            draft = self.draft
        if "Waiting for client" in stripped:
            draft.waited = True
        elif match := _PICKED.match(stripped):
            draft.picked = int(match["id"])
        elif match := _CUDA_PCI.match(stripped):
            draft.pcis[int(match["id"])] = match["pci"]
        elif match := _GPU_NAME.search(stripped):
            draft.values["gpu_name"] = match["name"]
        elif match := _ADDRESS.match(stripped):
            return
        elif match := _GID.match(stripped):
            # The GID line follows its address line: local first, then remote.
            key = "gid" if "gid" not in draft.values else "remote_gid"
            draft.values.setdefault(key, match["gid"])
        elif stripped.startswith("WARNING:"):
            draft.warnings.append(stripped[len("WARNING:") :].strip())
        elif draft.titled and not draft.rows and ":" in stripped:
            self._header(stripped)

    def _header(self, line: str) -> None:
        values = self.draft.values
        for match in _PAIR.finditer(line):
            key, value = match["key"].strip(), match["value"].strip()
            self.draft.header[key] = value
            if key in _HEADER_FIELDS:
                values[_HEADER_FIELDS[key]] = value
            elif key == "Number of qps":
                values["qps"] = _int(value)
            elif key == "Mtu":
                values["mtu"] = _int(value.split("[")[0])
            elif key == "GID index":
                values["gid_index"] = _int(value)
            elif key == "Post List":
                values["post_list"] = _int(value)
            elif key == "rdma_cm QPs":
                values["rdma_cm"] = value.upper() == "ON"

    def _rows(self, line: str) -> bool:
        draft = self.draft
        if _ROWS_HEADER.match(line):
            draft.columns = _columns(line)
            if unit := re.search(r"BW (?:peak|average)\[(?P<unit>[^\]]+)\]", line):
                draft.values["bw_unit"] = unit["unit"]
            if unit := re.search(r"t_(?:min|avg)\[(?P<unit>[^\]]+)\]", line):
                draft.values["lat_unit"] = unit["unit"]
            self.in_rows = True
            return True
        if not self.in_rows:
            return False
        tokens = line.split()
        if len(tokens) < len(draft.columns) or not all(
            _is_number(token) for token in tokens[: len(draft.columns)]
        ):
            if line.startswith("---"):
                return True
            self.in_rows = False
            return False
        cells = dict(zip(draft.columns, tokens, strict=False))
        row: dict[str, Any] = {name: number(token) for name, token in cells.items()}
        for name in ("bw_peak", "bw_average", "msg_rate"):
            if isinstance(row.get(name), int):
                row[name] = float(row[name])
        if row.get("bw_peak") == 0 and (row.get("bw_average") or 0) > 0:
            # Duration mode (-D) does not measure the peak and prints 0.00: not a dead link.
            row["bw_peak"] = None
            warning = f"BW peak printed as 0 at {row['bytes']} bytes: not measured (duration mode)"
            draft.warnings.append(warning)
        draft.rows.append(PerftestRow(**row))
        return True

    def finished(self) -> list[PerftestRun]:
        self._close()
        return self.runs


def _command(line: str) -> str | None:
    """The perftest command of a command line (a prompt, a `(server &); sleep 1; client` line)."""
    candidate = strip_prompt(line)
    if candidate is None:
        candidate = line if line.startswith("ib_") else None
    if candidate is None:
        return None
    found = list(_COMMAND.finditer(candidate))
    return found[-1].group(0).strip() if found else None


# perftest's options that take a value (the rest are flags): for telling the server address apart.
_VALUED = set("cdDfgiIlmnoOpqQrsStuwxyzEJKLMTUVWXYZ")


def _apply_command(values: dict[str, Any], command: str) -> None:
    match = _COMMAND.match(command)
    assert match is not None
    values["command"] = command
    values["test"] = f"{match['verb']}_{match['what']}"
    tokens = match["args"].split()
    positional: list[str] = []
    skip = False
    for index, token in enumerate(tokens):
        if skip:
            skip = False
            continue
        if token.startswith("-"):
            name = token.lstrip("-")
            skip = len(token) == 2 and token[1] in _VALUED
            if token in ("-d", "--ib-dev") and index + 1 < len(tokens):
                values["device"] = tokens[index + 1]
            elif token in ("-i", "--ib-port") and index + 1 < len(tokens):
                values["port"] = _int(tokens[index + 1])
            elif name.startswith("ib-port="):
                values["port"] = _int(name.split("=", 1)[1])
            elif name.startswith("ib-dev="):
                values["device"] = name.split("=", 1)[1]
            continue
        positional.append(token)
    if positional:
        values["server"] = positional[-1]
    if gpu := _USE_GPU.search(command):
        values["gpu_memory"] = gpu["api"]
        if gpu["id"] is not None:
            values["gpu_device"] = int(gpu["id"])


def _test_from_title(title: str) -> str:
    """`RDMA_Write BW Test`, `RDMA_Write_BW_Test` (--out_json), `Send_imm BW Test` -> write_bw, send_bw."""
    words = [word for word in title.replace("_", " ").split() if word != "RDMA"]
    verb = words[0].lower() if words else "?"
    return f"{verb}_{'lat' if 'Latency' in title else 'bw'}"


def _columns(header: str) -> list[str]:
    found = []
    rest = header
    for printed, name in _COLUMNS:
        position = rest.find(printed)
        if position >= 0:
            found.append((position, name))
            rest = rest[:position] + " " * len(printed) + rest[position + len(printed) :]
    return [name for _, name in sorted(found)]


def _is_number(token: str) -> bool:
    return number(token) is not None


def _int(value: str) -> int | None:
    parsed = number(value)
    return parsed if isinstance(parsed, int) else None


# --- --out_json ---------------------------------------------------------------------------------

_JSON_RESULTS = {
    "MsgSize": "bytes",
    "n_iterations": "iterations",
    "BW_peak": "bw_peak",
    "BW_average": "bw_average",
    "bw_avg": "bw_average",
    "MsgRate": "msg_rate",
    "msgRate_avg": "msg_rate",
    "t_min": "t_min",
    "t_max": "t_max",
    "t_typical": "t_typical",
    "t_avg": "t_avg",
    "avg_lat": "t_avg",
    "t_stdev": "t_stdev",
    "percentile_99": "p99",
    "percentile_99.9": "p99_9",
    "tps_average": "tps_average",
}


def _from_json(text: str, file: str) -> list[PerftestRun]:
    decoder = json.JSONDecoder()
    runs = []
    position = text.find("{")
    while position != -1:
        try:
            document, end = decoder.raw_decode(text, position)
        except json.JSONDecodeError as exc:
            raise ParseError(f"not valid perftest JSON ({exc.msg} at line {exc.lineno})") from None
        if not isinstance(document, dict) or not isinstance(document.get("test_info"), dict):
            raise ParseError("JSON without perftest's test_info")
        runs.append(_json_run(document))
        position = text.find("{", end)
    return runs


def _json_run(document: dict[str, Any]) -> PerftestRun:
    info = document["test_info"]
    results = document.get("results") if isinstance(document.get("results"), dict) else {}
    title = str(info.get("test", "")).strip() or None
    values: dict[str, Any] = {"title": title, "test": _test_from_title(title) if title else None}
    values["bidirectional"] = bool(title and "Bidirectional" in title)
    values["device"] = info.get("Device")
    values["link_type"] = info.get("Link_type")
    values["transport_type"] = info.get("Transport_type")
    values["connection_type"] = info.get("Connection_type")
    values["data_exchange"] = info.get("Data_ex_method")
    for key, name in (
        ("Number_of_qps", "qps"),
        ("Mtu", "mtu"),
        ("GID_index", "gid_index"),
        ("Post_List", "post_list"),
    ):
        if isinstance(info.get(key), int):
            values[name] = info[key]
    if "rdma_cm_QPs" in info:
        values["rdma_cm"] = str(info["rdma_cm_QPs"]).upper() == "ON"
    if isinstance(info.get("cuda_device"), int):
        values["gpu_memory"], values["gpu_device"] = "cuda", info["cuda_device"]
    elif str(info.get("Use_ROCm_memory", "")).upper() == "ON":
        values["gpu_memory"] = "rocm"
    row: dict[str, Any] = {}
    for key, name in _JSON_RESULTS.items():
        if isinstance(results.get(key), (int, float)) and not isinstance(results.get(key), bool):
            row[name] = results[key]
    warnings = [str(info[key]) for key in ("WARNING1", "WARNING2") if key in info]
    rows: tuple[PerftestRow, ...] = ()
    if "bytes" in row:
        if row.get("bw_peak") == 0 and (row.get("bw_average") or 0) > 0:
            row["bw_peak"] = None
            warnings.append(f"BW peak printed as 0 at {row['bytes']} bytes: not measured (duration mode)")
        rows = (PerftestRow(**row),)
    if "t_min" in row or "t_avg" in row:
        values["lat_unit"] = "usec"
    return PerftestRun(
        **values,
        rows=rows,
        status="ok" if rows else "incomplete",
        header={key: str(value) for key, value in info.items()},
        warnings=tuple(warnings),
    )
