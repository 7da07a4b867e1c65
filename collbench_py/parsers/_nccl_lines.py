"""Single lines of an nccl-tests log: launcher prefixes, header fields, devices, versions, failures.

Every pattern here is applied only after a cheap `startswith` / `in` test picked the line, so a
log of mostly `NCCL INFO` noise costs little more than splitting it into lines.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from collbench_py.parsers._nccl_records import INTS, new_device
from collbench_py.parsers.models import Device, RunError

# One or more launcher prefixes in front of a line: Open MPI `--tag-output` `[1,0]<stdout>:`,
# SkyPilot `(head, rank=0, pid=N) `, torchrun `[host:0]:` / `[default0]:`, srun `--label` ` 0: `.
PREFIX = re.compile(
    r"(?:\[\d+,\d+\]<std(?:out|err)>: ?"
    r"|\((?:head|worker\d*)[^()]*?, rank=\d+, pid=\d+[^()]*\) "
    r"|\[[\w.-]+(?::\d+)?\]: ?"
    r"| *\d+: )+"
)
PREFIX_START = frozenset("[( 0123456789")  # the first characters a prefix can have


COLLECTIVES = frozenset(
    ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "alltoallv", "broadcast", "reduce",
     "sendrecv", "gather", "scatter", "hypercube")
)  # fmt: skip
_BINARY = re.compile(r"\b(" + "|".join(sorted(COLLECTIVES, key=len, reverse=True)) + r")_perf(?:_mpi)?\b")


def collective_named(text: str) -> str | None:
    """The collective of the first `<name>_perf` binary named in `text`."""
    m = _BINARY.search(text)
    return m.group(1) if m else None


def collective_of_source(location: str) -> str | None:
    """`all_reduce` from a failure location such as `all_reduce.cu:90`."""
    name = location.split(":", 1)[0].rsplit("/", 1)[-1]
    if name.endswith(".cu") and name[:-3] in COLLECTIVES:
        return name[:-3]
    return None


# Keys as the current nccl-tests prints them; older spellings map onto them.
_PARAM_KEYS = {
    "nthread": "nThread", "nthreads": "nThread", "ngpus": "nGpus", "nranks": "nRanks",
    "minbytes": "minBytes", "maxbytes": "maxBytes", "step": "step", "warmupiters": "warmup iters",
    "iters": "iters", "aggiters": "agg iters", "validation": "validation", "graph": "graph",
    "unalign": "unalign", "parallelinit": "parallel_init",
}  # fmt: skip


# `name value`, `name: value`, `step: 2(factor)`; names of one or more words (`warmup iters`).
_PARAM = re.compile(r"([A-Za-z_]+(?: [A-Za-z_]+)*):?\s*(-?\d+)(?:\((\w+)\))?")


def parse_params(text: str) -> dict[str, Any]:
    """`nThread 1 nGpus 8 ... step: 2(factor) warmup iters: 1 ...`, also `nThreads: 1 nGpus: 2 ...`."""
    return dict(_params(text))


# The logs of a nightly run repeat a few header lines thousands of times: read each once.
@functools.lru_cache(maxsize=256)
def _params(text: str) -> tuple[tuple[str, int], ...]:
    params: dict[str, int] = {}
    for name, value, unit in _PARAM.findall(text):
        key = _PARAM_KEYS.get(name.replace(" ", "").replace("_", "").lower(), name)
        if key == "step" and unit == "bytes":
            key = "step_bytes"
        params[key] = int(value)
    return tuple(params.items())


_DEVICE = re.compile(
    r"Rank\s+(\d+)(?:\s+Group\s+(\d+))?(?:\s+Pid\s+(\d+))?\s+on\s+(\S+)\s+device\s+(\d+)"
    r"(?:\s+\[([^\]]*)\])?\s*(.*)"
)


def parse_device(text: str) -> Device | None:
    """A Device from `Rank  0 Group  0 Pid 123 on host device  0 [0000:1b:00] NVIDIA H100`."""
    # An all-hosts log has a line per rank of the fleet: the two shapes nccl-tests prints
    # (with and without `Group`) are read by splitting, the pattern reads the rest.
    parts = text.split(None, 10) if text[:4] == "Rank" else []
    if len(parts) >= 10 and parts[0] == "Rank" and parts[2] == "Group":
        if parts[4] == "Pid" and parts[6] == "on" and parts[8] == "device":
            rank, group, pid, host, device = parts[1], parts[3], parts[5], parts[7], parts[9]
            if rank.isdecimal() and group.isdecimal() and pid.isdecimal() and device.isdecimal():
                bus_id, name = _bus_and_name(parts[10] if len(parts) == 11 else "")
                return new_device(INTS[rank], host, INTS[pid], INTS[group], INTS[device], bus_id, name)
    elif len(parts) >= 8 and parts[0] == "Rank" and parts[2] == "Pid":
        parts = text.split(None, 8)
        if parts[4] == "on" and parts[6] == "device":
            rank, pid, host, device = parts[1], parts[3], parts[5], parts[7]
            if rank.isdecimal() and pid.isdecimal() and device.isdecimal():
                bus_id, name = _bus_and_name(parts[8] if len(parts) == 9 else "")
                return new_device(INTS[rank], host, INTS[pid], None, INTS[device], bus_id, name)
    m = _DEVICE.match(text)
    if not m:
        return None
    rank, group, pid, host, device, bus_id, name = m.groups()
    return new_device(
        int(rank), host, int(pid) if pid else None, int(group) if group else None, int(device), bus_id,
        name.strip() or None,
    )  # fmt: skip


def _bus_and_name(rest: str) -> tuple[str | None, str | None]:
    """(bus id, name) from what follows the device number, read as _DEVICE reads it."""
    bus_id = None
    if rest[:1] == "[":
        end = rest.find("]")
        if end > 0:
            bus_id, rest = rest[1:end], rest[end + 1 :]
    return bus_id, rest.strip() or None


def version_from_code(code: int) -> str:
    """`22807` -> `2.28.7` (MAJOR*10000+MINOR*100+PATCH; MAJOR*1000+... before NCCL 2.9)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


_LIB_VERSION = re.compile(r"[NR]CCL version\s*:?\s*(\d+(?:\.\d+)+|\d{4,6}\b)")
_CODE = re.compile(r"[nr]ccl-(library|headers)=(\d+)")


def library_version(text: str) -> str | None:
    """The NCCL/RCCL version of an `NCCL version 2.26.2+cuda12.8` / `RCCL version : ...` line."""
    m = _LIB_VERSION.search(text)
    if not m:
        return None
    value = m.group(1)
    if "." in value:
        return ".".join(value.split(".")[:3])
    return version_from_code(int(value))


@functools.lru_cache(maxsize=256)  # the same first line in every log of a run
def header_versions(text: str) -> tuple[str | None, str | None]:
    """(tool version, library version) of `# nccl-tests version 2.19.6 nccl-headers=N nccl-library=N`."""
    parts = text.split()
    tool = parts[parts.index("version") + 1] if "version" in parts[:-1] else None
    codes = dict(m.groups() for m in _CODE.finditer(text))
    code = codes.get("library") or codes.get("headers")
    return tool, version_from_code(int(code)) if code else None


_FAILURE = re.compile(
    r"^(?:(?P<host>\S+?):\s+)?Test (?P<kind>NCCL failure|CUDA failure|timeout|failure)\s*(?P<msg>.*)$"
)
_FRAME = re.compile(r"^\.\.\s+(?P<host>\S+) pid (?P<pid>\d+): Test failure (?P<loc>\S+)")
_WARN = re.compile(
    r"^(?:(?P<host>[^\s:]+):\d+:\d+ \[\d+\] )?(?:.*?(?P<loc>[^\s/]+:\d+) )?NCCL WARN (?P<msg>.*)$"
)
_INFO_HOST = re.compile(r"^([^\s:]+):\d+:\d+ \[")


def parse_failure(text: str) -> RunError | None:
    """`host: Test NCCL failure common.cu:392 '...'`, `Test CUDA failure`, `Test timeout`."""
    m = _FAILURE.match(text)
    if not m:
        return None
    kind = m.group("kind")
    kind = "Test failure" if kind == "failure" else f"Test {kind}"
    message = m.group("msg").rstrip()
    if message.endswith(" / '"):  # `'<error> / <last error>'` with an empty last error
        message = message[:-4] + "'"
    return RunError(kind=kind, host=m.group("host"), message=message)


def parse_frame(text: str) -> tuple[str, int, str] | None:
    """(host, pid, location) of a ` .. host pid N: Test failure common.cu:1189` trace line."""
    m = _FRAME.match(text)
    return (m.group("host"), int(m.group("pid")), m.group("loc")) if m else None


def parse_warn(text: str) -> RunError | None:
    m = _WARN.match(text)
    if not m:
        return None
    loc = m.group("loc")
    message = m.group("msg").strip()
    return RunError(kind="NCCL WARN", host=m.group("host"), message=f"{loc} {message}" if loc else message)


def info_host(text: str) -> str | None:
    m = _INFO_HOST.match(text)
    return m.group(1) if m else None


_VIA = re.compile(r" via (\S+(?: Libfabric)?)")
_NVLS_CHANNELS = re.compile(r"(\d+) nvls channels")
_NRANKS = re.compile(r"\bn[Rr]anks (\d+)")
_SETTING = re.compile(r"(\w+) set by environment to (.*)$")


def transport_of(text: str) -> str | None:
    """The transport an INFO `... via P2P/IPC/read` line names, as one of a few stable names."""
    m = _VIA.search(text)
    if not m:
        return None
    parts = m.group(1).split("/")
    head = parts[0].upper()
    second = parts[1] if len(parts) > 1 else ""
    if head == "P2P":
        if second in ("IPC", "CUMEM"):  # CUMEM: the cuMem-handle form of IPC (NCCL >= 2.19)
            return "P2P/IPC"
        return f"P2P/{second}" if second else "P2P"
    if head == "SHM":
        return "SHM"
    if head == "NET":
        return f"NET/{second}" if second else "NET"
    if head == "COLLNET":
        return "CollNet"
    if head == "NVLS":
        return "NVLS"
    return None


# `... [send] via NET/IB/0/GDRDMA`, `via NET/AWS Libfabric/1/GDRDMA`, `via NET/IB/3(7)/GDRDMA/Shared`
# (a PXN proxy rank in parentheses), `via NET/IBext_v8/7`: NCCL appends `/GDRDMA` only where the NIC
# reads and writes GPU memory itself.
_NET_CHANNEL = re.compile(r" via NET/(?P<net>[^/]+)/(?P<dev>\d+)(?:\(\d+\))?(?P<flags>\S*)")


def net_channel(text: str) -> tuple[str, bool] | None:
    """(`NET/IB/0`, whether with GPUDirect RDMA) of a NET channel line; None for NET/Socket, which
    never has it, and for any other line."""
    m = _NET_CHANNEL.search(text)
    if not m or m.group("net") == "Socket":
        return None
    return f"NET/{m.group('net')}/{m.group('dev')}", "/GDRDMA" in m.group("flags")


def uses_nvls(text: str) -> bool:
    if "NVLS comm" in text or "Connected NVLS" in text:
        return True
    m = _NVLS_CHANNELS.search(text)
    return bool(m and int(m.group(1)) > 0)


def nranks_of(text: str) -> int | None:
    m = _NRANKS.search(text)
    return int(m.group(1)) if m else None


def setting_of(text: str) -> tuple[str, str] | None:
    m = _SETTING.search(text)
    if not m:
        return None
    value = m.group(2).strip()
    if value.endswith(".") and value[:-1].replace(".", "").isdigit():
        value = value[:-1]  # `NCCL_BUFFSIZE set by environment to 4194304.`
    return m.group(1), value


_MPI_ABORT = re.compile(
    r"noticed that process rank|exited with non-zero status|MPI_ABORT was invoked|exited on signal"
)
_ON_NODE = re.compile(r"on node (\S+?)[.,]?(?:\s|$)")


def mpi_abort(text: str) -> RunError | None:
    """An Open MPI / PRRTE / Slurm line saying the job was aborted, as a RunError."""
    if text.startswith("srun: error:") and ("Exited with exit code" in text or "task" in text):
        parts = text.split(":")
        return RunError(kind="mpi-abort", host=parts[2].strip() or None, message=text)
    # Most lines that get here are noise: three substring tests (each alternative of the
    # pattern contains one) spare them the pattern.
    if ("exited " in text or "noticed that" in text or "MPI_ABORT" in text) and _MPI_ABORT.search(text):
        m = _ON_NODE.search(text)
        return RunError(kind="mpi-abort", host=m.group(1) if m else None, message=text)
    return None
