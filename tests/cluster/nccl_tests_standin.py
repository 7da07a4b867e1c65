"""Stand-in for the nccl-tests v2.19.6 executables on the test cluster's nodes, where there is no GPU.

Installed as `all_reduce_perf`, `all_gather_perf`, `reduce_scatter_perf`, `alltoall_perf`,
`broadcast_perf` and `sendrecv_perf` (`vcluster.install_nccl_tests_standin`); the name it is run
under picks the collective. It stands in for the GPU and NCCL only: it takes nccl-tests' command line,
gets its rank from the MPI launcher (mpi4py over the system's Open MPI), and measures for real, with MPI
collectives over TCP between the hosts, each size timed over `-n` iterations after `-w` warm-ups. It
prints what nccl-tests prints (text on rank 0 and, with `-J FILE.json`, its JSON file), with algbw and
busbw computed by nccl-tests' own rules per collective, and with `-c N` it checks every result against the
values it must hold and counts the wrong elements.

The devices it reports are those the node's `nvidia-smi` lists (the cluster's stand-in): a node whose
nvidia-smi hangs hangs here too, as CUDA does on a GPU that fell off the bus; no nvidia-smi is a CUDA
failure. `NCCL_TESTS_STANDIN_CORRUPT_RANK=R` makes rank R's results hold one wrong element, as a
faulty GPU's would (for tests of the data check). One GPU per process (`-g 1`, `-t 1`); bfloat16, fp8
and the `avg`/`mulsum` ops are not available.
"""

# ruff: noqa: UP031 - printf-style formats, to print exactly what the C printf calls of nccl-tests print
from __future__ import annotations

import getopt
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

VERSION = "2.19.6"
NCCL_VERSION_CODE = 22807  # what the header line names as nccl-headers and nccl-library (2.28.7)
JSON_FILE_VERSION = 3

# Exit codes of nccl-tests (testResult_t).
CUDA_ERROR, NOT_IMPLEMENTED, NUM_RESULTS = 2, 5, 7

SHORT_OPTIONS = "t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:"
LONG_OPTIONS = {
    "nthreads": "t",
    "ngpus": "g",
    "minbytes": "b",
    "maxbytes": "e",
    "stepbytes": "i",
    "stepfactor": "f",
    "iters": "n",
    "agg_iters": "m",
    "warmup_iters": "w",
    "run_cycles": "N",
    "parallel_init": "p",
    "check": "c",
    "op": "o",
    "datatype": "d",
    "root": "r",
    "blocking": "z",
    "stream_null": "y",
    "timeout": "T",
    "cudagraph": "G",
    "report_cputime": "C",
    "report_timestamps": "S",
    "output_file": "J",
    "average": "a",
    "local_register": "R",
    "cta_policy": "x",
    "device_implementation": "D",
    "device_cta_count": "V",
    "memory": "M",
    "unalign": "u",
    "per_iter_timing": "I",
    "per_iter_skip": "K",
}
TYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double")
NUMPY_TYPES = dict(zip(TYPES, ("i1", "u1", "i4", "u4", "i8", "u8", "f2", "f4", "f8"), strict=True))
OPS = ("sum", "prod", "max", "min")


@dataclass
class Options:
    nthreads: int = 1
    ngpus: int = 1
    min_bytes: int = 32 << 20
    max_bytes: int = 32 << 20
    step_bytes: int = 1 << 20
    step_factor: int = 1
    iters: int = 20
    agg_iters: int = 1
    warmup_iters: int = 1
    run_cycles: int = 1
    datacheck: int = 1
    op: str = "sum"  # or "all"
    dtype: str = "float"  # or "all"
    root: int = 0
    average: int = 1  # 0 rank 0, 1 mean, 2 min, 3 max
    check_avg_bw: float = -1
    output_file: str | None = None
    memory_report: int = 0


@dataclass(frozen=True)
class Collective:
    name: str
    reduces: bool  # prints the op in the redop column, else `none`
    rooted: bool  # prints the root, else -1
    bw_ranks: bool  # algbw counts the bytes of every rank (gather, scatter and alltoall shapes)
    factor: Callable[[int], float]  # busbw = algbw x factor(nranks), doc/PERFORMANCE.md
    checks_in_place: bool = True


def _all_ranks(n: int) -> float:
    return (n - 1) / n


COLLECTIVES = {
    "all_reduce": Collective("all_reduce", True, False, False, lambda n: 2 * (n - 1) / n),
    "all_gather": Collective("all_gather", False, False, True, _all_ranks),
    "reduce_scatter": Collective("reduce_scatter", True, False, True, _all_ranks),
    "alltoall": Collective("alltoall", False, False, True, _all_ranks, checks_in_place=False),
    "broadcast": Collective("broadcast", False, True, False, lambda n: 1.0),
    "sendrecv": Collective("sendrecv", True, False, False, lambda n: 1.0, checks_in_place=False),
}


class UsageError(Exception):
    pass


# ---- command line ---------------------------------------------------------------------------------------


def parse_size(text: str) -> int:
    """nccl-tests' sizes: a number with an optional K, M or G (powers of 2)."""
    text = text.strip()
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    scale = units.get(text[-1:].lower(), 1) if text else 1
    number = text[:-1] if scale > 1 else text
    try:
        value = float(number) * scale
    except ValueError:
        return -1
    return int(value) if value >= 0 else -1


def parse_options(argv: list[str]) -> Options:
    longs = [f"{name}=" for name in LONG_OPTIONS] + ["help"]
    try:
        pairs, _ = getopt.gnu_getopt(argv, SHORT_OPTIONS, longs)
    except getopt.GetoptError as error:
        raise UsageError(f"invalid option '{error.opt}'") from None
    options = Options()
    for flag, value in pairs:
        letter = flag[1:] if not flag.startswith("--") else LONG_OPTIONS.get(flag[2:], "h")
        _apply(options, letter, value)
    if options.min_bytes > options.max_bytes:
        print(
            f"invalid sizes for 'minbytes' and 'maxbytes': {options.min_bytes} > {options.max_bytes}",
            file=sys.stderr,
        )
        sys.exit(255)
    return options


def _integer(value: str) -> int:
    return int(value, 0) if value.strip() else 0


def _apply(options: Options, letter: str, value: str) -> None:
    sizes = {"b": ("min_bytes", "minbytes"), "e": ("max_bytes", "maxbytes"), "i": ("step_bytes", "stepBytes")}
    numbers = {
        "t": "nthreads",
        "g": "ngpus",
        "f": "step_factor",
        "n": "iters",
        "m": "agg_iters",
        "w": "warmup_iters",
        "N": "run_cycles",
        "c": "datacheck",
        "r": "root",
        "a": "average",
        "M": "memory_report",
    }
    if letter == "h":
        raise UsageError("")
    if letter in sizes:
        attribute, label = sizes[letter]
        size = parse_size(value)
        if size < 0:
            print(f"invalid size specified for '{label}'", file=sys.stderr)
            sys.exit(255)
        setattr(options, attribute, size)
    elif letter in numbers:
        setattr(options, numbers[letter], _integer(value))
    elif letter == "J":
        options.output_file = value
    elif letter == "d":
        options.dtype = value if value in (*TYPES, "all") else _invalid("type", value, "float")
    elif letter == "o":
        options.op = value if value in (*OPS, "all") else _invalid("op", value, "sum")
    # The others (-p -z -y -T -G -C -S -R -x -D -V -u -I -K) change how a GPU runs; accepted, no effect here.


def _invalid(what: str, value: str, default: str) -> str:
    print(f"invalid {what} {value}, defaulting to {default} .. ")
    return default


def usage(program: str) -> str:
    flags = " ".join(f"[-{letter},--{name}]" for name, letter in LONG_OPTIONS.items())
    return f"USAGE: {program} \n\t{flags} [-h,--help]\n"


# ---- output -------------------------------------------------------------------------------------------


def float_cell(value: float, width: int) -> str:
    """A number in `width` characters, as nccl-tests prints it: 2, 1 or 0 decimals, else e-notation."""
    for pattern in (f"%{width}.2f", f"%{width}.1f", f"%{width}.0f"):
        text = pattern % value
        if len(text) <= width:
            return text
    return (f"%{width}.1e" if width >= 7 else f"%{width}.0e") % value


def json_string(text: str) -> str:
    """A JSON string as nccl-tests writes one: it escapes " \\ / tab and newline, and stops at the first
    character it cannot write (non-ASCII or a control character)."""
    out = []
    for char in text:
        if char in '"\\/':
            out.append("\\" + char)
        elif char == "\t":
            out.append("\\t")
        elif char == "\n":
            out.append("\\n")
        elif ord(char) >= 0x7F or ord(char) <= 0x1F:
            break
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def json_double(value: float) -> str:
    return '"nan"' if math.isnan(value) else "%f" % value  # C's %lf, inf included


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())


class JsonReport:
    """nccl-tests' JSON file, written as the run goes (compact, keys in its order): a run that dies
    leaves it unterminated, as the real one does."""

    def __init__(self, handle) -> None:
        self.handle = handle
        self.open_items: list[list] = []  # per open object or list: [its closing bracket, items so far]
        self.after_key = False

    def _item(self) -> None:
        if self.after_key:
            self.after_key = False
        elif self.open_items:
            if self.open_items[-1][1]:
                self.handle.write(",")
            self.open_items[-1][1] += 1

    def key(self, name: str) -> JsonReport:
        self._item()
        self.handle.write(json_string(name) + ":")
        self.after_key = True
        return self

    def raw(self, text: str) -> None:
        self._item()
        self.handle.write(text)

    def string(self, text: str) -> None:
        self.raw(json_string(text))

    def boolean(self, value: bool) -> None:
        self.string("true" if value else "false")  # nccl-tests writes its booleans as strings

    def open(self, bracket: str) -> None:
        self._item()
        self.handle.write(bracket)
        self.open_items.append(["}" if bracket == "{" else "]", 0])

    def close(self, _bracket: str = "") -> None:
        self.handle.write(self.open_items.pop()[0])

    def finish(self) -> None:
        """Close what is open, as nccl-tests does at exit (end_time only when all else was closed)."""
        if len(self.open_items) == 1 and not self.after_key:
            self.key("end_time").string(now())
        if self.after_key:
            self.raw("null")
        while self.open_items:
            self.close()
        self.handle.close()


def open_json(path: str) -> tuple[JsonReport | None, str]:
    """Open the JSON file exclusively; an existing file is kept and `path.0`, `path.1`, ... tried."""
    candidate, tries = path, 0
    while True:
        try:
            handle = open(candidate, "x", encoding="ascii")  # noqa: SIM115 - held until the run ends
        except FileExistsError:
            candidate, tries = f"{path}.{tries}", tries + 1
            continue
        except OSError:
            return None, f"# skipping json output; {candidate} not accessible"
        return JsonReport(handle), f"# Writing JSON output to {candidate}"


# ---- the GPU the node says it has ---------------------------------------------------------------------


@dataclass(frozen=True)
class Gpu:
    name: str
    bus_id: str  # 00000000:18:00.0
    memory_bytes: int

    def pci_triplet(self) -> str:
        domain, bus, rest = self.bus_id.split(":")
        return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(rest.split('.')[0], 16):02x}"


def node_gpus() -> list[Gpu] | None:
    """The GPUs the node's nvidia-smi lists (None without one: no driver, as CUDA would say)."""
    query = ["nvidia-smi", "--query-gpu=name,pci.bus_id,memory.total", "--format=csv,noheader,nounits"]
    try:
        answer = subprocess.run(query, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
    except OSError:
        return None
    if answer.returncode != 0:
        return None
    gpus = []
    for line in answer.stdout.splitlines():
        name, bus_id, memory = (cell.strip() for cell in line.split(","))
        gpus.append(Gpu(name, bus_id, int(memory) << 20))
    return gpus


def short_hostname() -> str:
    return socket.gethostname().split(".")[0]


# ---- the benchmark ------------------------------------------------------------------------------------


def element_counts(collective: str, count: int, size: int, nranks: int) -> tuple[int, int, int]:
    """(send, receive, parameter) element counts for `count` elements of `size` bytes: nccl-tests'
    per-collective rules (gather/scatter shapes keep whole 16-byte groups per rank)."""
    if collective in ("all_gather", "reduce_scatter", "alltoall"):
        base = (count // nranks) & ~(16 // size - 1)
        if collective == "all_gather":
            return base, base * nranks, base
        if collective == "reduce_scatter":
            return base * nranks, base, base
        return base * nranks, base * nranks, base
    return count, count, count


def pattern(np, dtype, rank: int, *, start: int, length: int, rep: int):
    """The values rank `rank` puts at elements start.. of its send buffer: small integers, exact in
    every type, that differ by rank, by element and from one check to the next."""
    index = np.arange(start, start + length, dtype=np.int64)
    return ((index * 7 + rank * 3 + rep) % 5 + 1).astype(dtype)


class Bench:
    """One collective over MPI_COMM_WORLD: buffers, one call, the expected result, the timing."""

    def __init__(self, mpi, np, collective: Collective, options: Options) -> None:
        self.MPI, self.np = mpi, np
        self.comm = mpi.COMM_WORLD
        self.rank, self.nranks = self.comm.Get_rank(), self.comm.Get_size()
        self.collective, self.options = collective, options
        self.ops = {"sum": mpi.SUM, "prod": mpi.PROD, "max": mpi.MAX, "min": mpi.MIN}
        self.bw_sum, self.bw_count, self.errors = 0.0, 0, 0

    def setup(self, size: int, dtype: str) -> tuple[int, int, int]:
        width = self.np.dtype(NUMPY_TYPES[dtype]).itemsize
        send, recv, param = element_counts(self.collective.name, size // width, width, self.nranks)
        self.dtype, self.send_count, self.recv_count, self.param = NUMPY_TYPES[dtype], send, recv, param
        return send, recv, param

    def fill(self, rep: int, in_place: bool, root: int) -> None:
        np, rank, name = self.np, self.rank, self.collective.name
        base = self.param
        self.send = pattern(np, self.dtype, rank, start=0, length=self.send_count, rep=rep)
        self.recv = np.zeros(max(self.recv_count, self.send_count), dtype=self.dtype)
        if in_place:  # the input sits where nccl-tests puts it: in the receive buffer
            offset = rank * base if name == "all_gather" else 0
            self.recv[offset : offset + self.send_count] = self.send
        if name == "broadcast" and rank != root:
            self.send[:] = 0

    def call(self, op: str, root: int, in_place: bool) -> None:
        mpi, comm, name = self.MPI, self.comm, self.collective.name
        n, rank = self.nranks, self.rank
        reduce_op = self.ops[op]
        recv = self.recv[: self.recv_count] if name != "reduce_scatter" or not in_place else self.recv
        if name == "all_reduce":
            comm.Allreduce(mpi.IN_PLACE if in_place else self.send, recv, op=reduce_op)
        elif name == "all_gather":
            comm.Allgather(mpi.IN_PLACE if in_place else self.send, recv)
        elif name == "reduce_scatter":
            if in_place:
                comm.Reduce_scatter_block(mpi.IN_PLACE, self.recv[: self.send_count], op=reduce_op)
            else:
                comm.Reduce_scatter_block(self.send, recv, op=reduce_op)
        elif name == "alltoall":
            comm.Alltoall(mpi.IN_PLACE if in_place else self.send, recv)
        elif name == "broadcast":
            if not in_place and rank == root:
                recv[:] = self.send
            comm.Bcast(recv, root=root)
        else:  # sendrecv: a ring, each rank sends to the next and receives from the previous
            peers = {"dest": (rank + 1) % n, "source": (rank - 1) % n}
            if in_place:
                comm.Sendrecv_replace(recv, **peers)
            else:
                comm.Sendrecv(self.send, recvbuf=recv, **peers)

    def expected(self, op: str, root: int, rep: int):
        np, n, rank, base = self.np, self.nranks, self.rank, self.param
        name = self.collective.name
        if name == "all_gather":
            return np.concatenate(
                [pattern(np, self.dtype, r, start=0, length=base, rep=rep) for r in range(n)]
            )
        if name == "alltoall":
            return np.concatenate(
                [pattern(np, self.dtype, r, start=rank * base, length=base, rep=rep) for r in range(n)]
            )
        if name == "broadcast":
            return pattern(np, self.dtype, root, start=0, length=self.recv_count, rep=rep)
        if name == "sendrecv":
            return pattern(np, self.dtype, (rank - 1) % n, start=0, length=self.recv_count, rep=rep)
        start = rank * base if name == "reduce_scatter" else 0
        parts = [pattern(np, self.dtype, r, start=start, length=self.recv_count, rep=rep) for r in range(n)]
        fold = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}[op]
        with np.errstate(over="ignore"):
            return fold.reduce(np.stack(parts), axis=0).astype(self.dtype)

    def wrong_elements(self, op: str, root: int, rep: int) -> int:
        got = self.recv[: self.recv_count]
        if str(self.rank) == os.environ.get("NCCL_TESTS_STANDIN_CORRUPT_RANK") and len(got):
            got[0] += 1  # a fault to order: this rank's GPU returns one wrong element
        want = self.expected(op, root, rep)
        return int(self.np.count_nonzero(got != want))

    def timed(self, op: str, root: int, in_place: bool) -> tuple[float, float, float, int | None]:
        """(time in us, algbw, busbw, wrong elements or None when not checked) of one half of a row."""
        options, comm = self.options, self.comm
        self.fill(99, in_place, root)
        self.call(op, root, in_place)
        comm.Barrier()
        runs = options.iters * options.agg_iters
        started = time.perf_counter()
        for _ in range(runs):
            self.call(op, root, in_place)
        seconds = (time.perf_counter() - started) / max(runs, 1)
        seconds = self._agreed(seconds)
        width = self.np.dtype(self.dtype).itemsize
        moved = self.param * width * (self.nranks if self.collective.bw_ranks else 1)
        algbw = moved / 1.0e9 / seconds if seconds > 0 else math.inf
        busbw = algbw * self.collective.factor(self.nranks)
        comm.Barrier()
        checked = bool(options.datacheck) and (self.collective.checks_in_place or not in_place)
        wrong = 0
        for repeat in range(options.datacheck):
            rep = repeat + 1
            self.fill(rep, in_place, root)
            self.call(op, root, in_place)
            wrong = comm.allreduce(self.wrong_elements(op, root, rep), op=self.MPI.SUM)
            if wrong:
                break
        if checked and wrong:
            self.errors += 1
        self.bw_sum += busbw
        self.bw_count += 1
        return seconds * 1.0e6, algbw, busbw, (wrong if checked else None)

    def _agreed(self, seconds: float) -> float:
        mode = self.options.average
        if mode == 0:
            return self.comm.bcast(seconds, root=0)
        combine = {2: self.MPI.MIN, 3: self.MPI.MAX}.get(mode, self.MPI.SUM)
        total = self.comm.allreduce(seconds, op=combine)
        return total / self.nranks if combine == self.MPI.SUM else total


def sizes(options: Options) -> Iterator[int]:
    size = options.min_bytes
    while size <= options.max_bytes:
        yield size
        grown = size * options.step_factor if options.step_factor > 1 else size + options.step_bytes
        if grown <= size:
            return
        size = grown


@dataclass(frozen=True)
class RowHead:
    """The first five columns of a result row."""

    size: int
    count: int
    dtype: str
    redop: str
    root: int


Half = tuple[float, float, float, "int | None"]  # time (us), algbw, busbw, #wrong (None: N/A)


class Printer:
    """Rank 0's text output (and the JSON file, when there is one)."""

    def __init__(self, main: bool, report: JsonReport | None) -> None:
        self.main, self.report = main, report

    def line(self, text: str) -> None:
        if self.main:
            print(text, flush=True)

    def table_header(self) -> None:
        blank = "# %10s  %12s  %8s  %6s  %6s" % ("", "", "", "", "")
        self.line("#")
        self.line(blank + "           out-of-place                       in-place          ")
        columns = ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong")
        units = ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "")
        for cells in (columns, units):
            row = "# %10s  %12s  %8s  %6s  %6s" % cells[:5]
            half = "  %7s  %6s  %6s  %6s" % cells[5:]
            self.line(row + half + half + " ")
        if self.report:
            self.report.key("results").open("[")

    def row(self, head: RowHead, halves: list[Half], iters: int) -> None:
        root_cell = "%6i" % head.root
        text = "%12li  %12li  %8s  %6s  %6s" % (head.size, head.count, head.dtype, head.redop, root_cell)
        for time_us, algbw, busbw, wrong in halves:
            cells = (float_cell(time_us, 7), float_cell(algbw, 6), float_cell(busbw, 6))
            text += "  %7s  %6s  %6s" % cells + ("  %6g" % wrong if wrong is not None else "    N/A")
        self.line(text)
        if self.report:
            self._json_row(head, halves, iters)

    def _json_row(self, head: RowHead, halves: list[Half], iters: int) -> None:
        report = self.report
        report.open("{")
        report.key("size").raw(str(head.size))
        report.key("count").raw(str(head.count))
        report.key("type").string(head.dtype)
        report.key("redop").string(head.redop)
        report.key("root").string("%6i" % head.root)
        for name, (time_us, algbw, busbw, wrong) in zip(("out_of_place", "in_place"), halves, strict=True):
            report.key(name).open("{")
            report.key("time").raw(json_double(time_us))
            report.key("alg_bw").raw(json_double(algbw))
            report.key("bus_bw").raw(json_double(busbw))
            report.key("nwrong").raw(json_double(wrong) if wrong is not None else "null")
            report.close("}")
        report.key("actual_iterations").raw(str(iters))
        report.key("experiment_name").string("")
        report.close("}")


def device_line(rank: int, pid: int, host: str, device: int, gpu: Gpu) -> str:
    return "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s" % (
        rank,
        0,
        pid,
        host,
        device,
        gpu.pci_triplet(),
        gpu.name,
    )


def write_config(report: JsonReport, options: Options, lines: list[str]) -> None:
    report.key("config").open("{")
    for key, value in (
        ("nthreads", options.nthreads),
        ("ngpus", options.ngpus),
        ("minimum_bytes", options.min_bytes),
        ("maximum_bytes", options.max_bytes),
    ):
        report.key(key).raw(str(value))
    if options.step_factor > 1:
        report.key("step_factor").raw(str(options.step_factor))
    else:
        report.key("step_bytes").raw(str(options.step_bytes))
    for key, value in (
        ("warmup_iters", options.warmup_iters),
        ("iterations", options.iters),
        ("aggregated_iterations", options.agg_iters),
        ("validation", options.datacheck),
        ("graph", 0),
    ):
        report.key(key).raw(str(value))
    report.key("blocking_collectives").boolean(False)
    report.key("per_iter_timing").boolean(False)
    report.key("per_iter_skip").raw("0")
    report.key("parallel_init").boolean(False)
    report.key("devices").open("[")
    for line in lines:
        words = line.split()  # #  Rank R Group G Pid P on HOST device D [BUS] NAME
        report.open("{")
        report.key("rank").raw(words[2])
        report.key("group").raw(words[4])
        report.key("pid").raw(words[6])
        report.key("hostname").string(words[8])
        report.key("device").raw(words[10])
        report.key("device_hex").string(words[11].strip("[]"))
        report.key("device_info").string(" ".join(words[12:]))
        report.close("}")
    report.close("]")
    report.close("}")


def header(printer: Printer, program: str, options: Options) -> None:
    step = (options.step_factor, "factor") if options.step_factor > 1 else (options.step_bytes, "bytes")
    printer.line(
        f"# nccl-tests version {VERSION} nccl-headers={NCCL_VERSION_CODE} nccl-library={NCCL_VERSION_CODE}"
    )
    printer.line(f"# Collective test starting: {program}")
    printer.line(
        f"# nThread {options.nthreads} nGpus {options.ngpus} minBytes {options.min_bytes} "
        f"maxBytes {options.max_bytes} step: {step[0]}({step[1]}) warmup iters: {options.warmup_iters} "
        f"iters: {options.iters} agg iters: {options.agg_iters} validation: {options.datacheck} graph: 0 "
        "unalign: 0"
    )
    printer.line("#")
    printer.line("# Using devices")


def failure(code: int) -> int:
    """What nccl-tests' main prints when run() failed (TESTCHECK at common.cu:1454), and its exit code."""
    print(f" .. {short_hostname()} pid {os.getpid()}: Test failure common.cu:1454", flush=True)
    return code


def run(program: str, collective: Collective, options: Options, *, mpi, np, report: JsonReport | None) -> int:
    comm = mpi.COMM_WORLD
    rank, nranks = comm.Get_rank(), comm.Get_size()
    printer = Printer(rank == 0, report)
    host = short_hostname()
    hosts = comm.allgather(host)
    local_rank = hosts[:rank].count(host)
    header(printer, program, options)
    gpus = node_gpus()
    if gpus is None:
        print(f"{host}: Test CUDA failure util.cu:674 'no CUDA-capable device is detected'", flush=True)
        return CUDA_ERROR
    device = local_rank * options.nthreads * options.ngpus
    if options.nthreads * options.ngpus != 1:
        print("nccl-tests stand-in: one GPU per process only (-t 1 -g 1)", file=sys.stderr)
        return NOT_IMPLEMENTED
    if device >= len(gpus):
        print(
            f"Invalid number of GPUs: {device + 1} requested but only {len(gpus)} were found.\n"
            "Please check the number of processes and GPUs per process.",
            file=sys.stderr,
        )
        return NOT_IMPLEMENTED
    line = device_line(rank, os.getpid(), host, device, gpus[device])
    lines = comm.gather(line, root=0)
    max_memory = comm.allreduce(gpus[device].memory_bytes, op=mpi.MIN)
    if rank == 0:
        for text in lines:
            printer.line(text)
        if report:
            write_config(report, options, lines)
    limit_memory(printer, options, max_memory, rank)
    bench = Bench(mpi, np, collective, options)
    printer.table_header()
    types = TYPES if options.dtype == "all" else (options.dtype,)
    ops = OPS if options.op == "all" else (options.op,)
    roots = range(nranks) if collective.rooted and options.root == -1 else (options.root,)
    for dtype in types:
        for op in ops if collective.reduces else ("none",):
            for root in roots if collective.rooted else (-1,):
                time_test(bench, printer, dtype, op, root)
    if report:
        report.close("]")
    errors = comm.allreduce(bench.errors, op=mpi.SUM)
    average = bench.bw_sum / bench.bw_count if bench.bw_count else math.nan
    footer(printer, program, options, errors, average)
    mpi.Finalize()
    printer.line("")  # the last NCCL error, none here
    if report:
        report.key("errors").open("[")
        report.string("")  # ncclGetLastError: an empty string, not NULL, when all went well
        report.close("]")
    return NUM_RESULTS if errors or average < options.check_avg_bw * 0.9 else 0


def limit_memory(printer: Printer, options: Options, max_memory: int, rank: int) -> None:
    """As nccl-tests: keep room for the buffers in the smallest GPU's memory."""
    gib = 1 << 30
    reserve = min(-(-max_memory // (16 * gib)) * gib, 4 * gib)
    limit = (max_memory - reserve - gib) // (3 if options.datacheck else 2)
    if options.max_bytes > limit:
        options.max_bytes = limit
        options.min_bytes = min(options.min_bytes, limit)
        if rank == 0:
            print(f"#\n# Reducing maxBytes to {limit} due to memory limitation", flush=True)


def time_test(bench: Bench, printer: Printer, dtype: str, op: str, root: int) -> None:
    options = bench.options
    bench.comm.Barrier()
    call_op = op if op != "none" else "sum"
    size = options.min_bytes
    while size <= options.max_bytes:  # warm-up: every size, doubling, out-of-place
        bench.setup(size, dtype)
        bench.fill(0, False, max(root, 0))
        for _ in range(options.warmup_iters):
            bench.call(call_op, max(root, 0), False)
        size *= 2
        if size == 0:
            break
    cycles = options.run_cycles
    while True:
        for size in sizes(options):
            send, recv, param = bench.setup(size, dtype)
            width = bench.np.dtype(bench.dtype).itemsize
            halves = [bench.timed(call_op, max(root, 0), in_place) for in_place in (False, True)]
            printer.row(RowHead(max(send, recv) * width, param, dtype, op, root), halves, options.iters)
        cycles -= 1
        if cycles == 0:
            return


def footer(printer: Printer, program: str, options: Options, errors: int, average: float) -> None:
    verdict = (
        "" if options.check_avg_bw == -1 else ("FAILED" if average < options.check_avg_bw * 0.9 else "OK")
    )
    printer.line("# %-20s : %d %s" % ("Out of bounds values", errors, "FAILED" if errors else "OK"))
    printer.line("# %-20s : %g %s" % ("Avg bus bandwidth", average, verdict))
    printer.line("#")
    printer.line(f"# Collective test concluded: {program}")
    report = printer.report
    if report:
        report.key("out_of_bounds").open("{")
        report.key("count").raw(str(errors))
        report.key("okay").boolean(errors == 0)
        report.close("}")
        report.key("average_bus_bandwidth").open("{")
        report.key("bandwidth").raw(json_double(average))
        if options.check_avg_bw == -1:
            report.key("okay").string("unchecked")
        else:
            report.key("okay").boolean(average >= options.check_avg_bw * 0.9)
        report.close("}")
    printer.line("#")


def main(argv: list[str]) -> int:
    program = os.path.basename(argv[0])
    collective = COLLECTIVES.get(program.removesuffix("_perf").removesuffix("_mpi"))
    if collective is None:
        print(
            f"nccl-tests stand-in: run it as one of {', '.join(c + '_perf' for c in COLLECTIVES)}",
            file=sys.stderr,
        )
        return NOT_IMPLEMENTED
    try:
        options = parse_options(argv[1:])
    except UsageError as error:
        if str(error):
            print(str(error))
        print(usage(program), end="")
        return 0
    env = os.environ.get("NCCL_TESTS_MIN_BW")
    options.check_avg_bw = float(env) if env else -1

    import mpi4py  # noqa: PLC0415 - MPI starts after the command line is read, as in nccl-tests
    import numpy as np  # noqa: PLC0415

    mpi4py.rc.initialize = False
    mpi4py.rc.finalize = False
    from mpi4py import MPI  # noqa: PLC0415

    MPI.Init()
    report = None
    if (
        options.output_file
        and options.output_file.lower().endswith(".json")
        and MPI.COMM_WORLD.Get_rank() == 0
    ):
        report, message = open_json(options.output_file)
        print(message, flush=True)
        if report:
            report.open("{")
            report.key("version").raw(str(JSON_FILE_VERSION))
            report.key("start_time").string(now())
            report.key("args").open("[")
            for arg in argv:
                report.string(arg)
            report.close("]")
            report.key("env").open("[")
            for name, value in os.environ.items():
                report.string(f"{name}={value}")
            report.close("]")
            report.key("nccl_version").raw(str(NCCL_VERSION_CODE))
    code = run(program, collective, options, mpi=MPI, np=np, report=report)
    if report:
        report.finish()
    return failure(code) if code else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
