#!/usr/bin/env python3
"""Collective benchmark over torch.distributed, printed in the nccl-tests text format.

This file is copied to the nodes and run there on its own: it needs the Python
standard library and torch, nothing else (nodes never import collbench_py).

    torchrun --nproc_per_node=2 collbench_torch_bench.py --collectives all_reduce,all_gather
    mpirun -np 2 -x MASTER_ADDR=node1 -x MASTER_PORT=29500 python3 collbench_torch_bench.py
    srun -n 2 python3 collbench_torch_bench.py --master-addr node1

Ranks come from torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT), Open MPI
(OMPI_COMM_WORLD_*) or Slurm (SLURM_PROCID, ...); under the last two MASTER_ADDR comes
from `--master-addr` or the environment. Backend `nccl` on GPUs (timed with CUDA events),
`gloo` on CPU (timed with time.perf_counter between barriers); GLOO_SOCKET_IFNAME and the
NCCL_* variables are read by torch as usual.

Output: what nccl-tests prints (header, `Using devices`, rows, summary), so one parser
reads both. Sizes, counts and busbw factors follow nccl-tests; the time of a row is the
mean over ranks. Columns that differ from nccl-tests by necessity:
- the out-of-place half holds the op as torch runs it: all_reduce, broadcast and reduce
  have a single torch form (which writes into its input), all_to_all_single and send/recv
  take distinct buffers;
- the in-place half is measured for all_gather and reduce_scatter, where torch takes an
  input that is a slice of the output (or the reverse); the other tables have no
  in-place columns.
Only rank 0 prints the log (one per collective under `--out-dir`). A failure prints
`<host>: Test NCCL failure FILE:LINE '<message>'` (or `Test CUDA failure`, `Test timeout`)
and the process exits with nccl-tests' codes: 2 CUDA, 3 backend, 4 timeout, 6 usage,
7 wrong data.
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

import torch
import torch.distributed as dist

VERSION = "0.1.0"
SCRIPT = os.path.basename(__file__)

EXIT_CUDA, EXIT_BACKEND, EXIT_TIMEOUT, EXIT_USAGE, EXIT_WRONG = 2, 3, 4, 6, 7

DTYPES = {
    "float": torch.float32,
    "double": torch.float64,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "int32": torch.int32,
    "int64": torch.int64,
}


@dataclass(frozen=True)
class Spec:
    busbw_factor: Callable[[int], float]
    redop: str  # as nccl-tests prints it
    root: int
    per_rank_chunks: bool  # count is split into nranks aligned chunks (all_gather, ...)


def _ring(n: int) -> float:
    return 2 * (n - 1) / n


def _spread(n: int) -> float:
    return (n - 1) / n


def _one(n: int) -> float:
    return 1.0


SPECS = {
    "all_reduce": Spec(_ring, "sum", -1, False),
    "all_gather": Spec(_spread, "none", -1, True),
    "reduce_scatter": Spec(_spread, "sum", -1, True),
    "alltoall": Spec(_spread, "none", -1, True),
    "broadcast": Spec(_one, "none", 0, False),
    "reduce": Spec(_one, "sum", 0, False),
    "sendrecv": Spec(_one, "none", -1, False),
}


IN_PLACE = ("all_gather", "reduce_scatter")  # where torch takes a slice of one buffer as the other


class UsageError(Exception):
    """A bad command line or environment: one message, exit 6."""


class CudaError(Exception):
    """The GPU the backend needs is not there."""


class BenchTimeout(Exception):
    pass


# ---------------------------------------------------------------- command line and environment


def parse_size(text: str) -> int:
    """`8`, `64K`, `128M`, `1G` (powers of 1024, as nccl-tests reads -b/-e)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    text = text.strip().upper().removesuffix("B")
    scale = units.get(text[-1:], 1)
    digits = text[:-1] if text[-1:] in units else text
    if not digits.isdigit():
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (bytes, or a number with K, M or G)")
    return int(digits) * scale


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = _Parser(prog=SCRIPT, description="Collectives over torch.distributed, nccl-tests output.")
    p.add_argument("--collectives", default="all_reduce", help=f"comma list of {', '.join(SPECS)}")
    p.add_argument("--min-bytes", "-b", type=parse_size, default=parse_size("1M"))
    p.add_argument("--max-bytes", "-e", type=parse_size, default=parse_size("64M"))
    p.add_argument("--step-factor", "-f", type=int, default=2)
    p.add_argument("--iters", "-n", type=int, default=20)
    p.add_argument("--warmup", "-w", type=int, default=5)
    p.add_argument("--check", "-c", type=int, choices=(0, 1), default=1)
    p.add_argument("--dtype", "-d", choices=tuple(DTYPES), default="float")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    p.add_argument("--out-dir", help="write <collective>.log here (rank 0) instead of stdout")
    p.add_argument("--timeout-s", type=float, default=300.0, help="bound on init and on each size")
    p.add_argument("--master-addr", default=None, help="rendezvous host (default: $MASTER_ADDR)")
    p.add_argument("--master-port", type=int, default=None, help="rendezvous port (default: $MASTER_PORT)")
    args = p.parse_args(argv)
    names = [c.strip() for c in args.collectives.split(",") if c.strip()]
    unknown = [c for c in names if c not in SPECS]
    if not names or unknown:
        p.error(f"unknown collective(s) {', '.join(unknown) or '(none given)'}; known: {', '.join(SPECS)}")
    args.collectives = names
    if args.min_bytes < 1 or args.min_bytes > args.max_bytes:
        p.error(f"--min-bytes {args.min_bytes} must be >= 1 and <= --max-bytes {args.max_bytes}")
    if args.step_factor < 2:
        p.error("--step-factor must be 2 or more")
    if args.iters < 1 or args.warmup < 0:
        p.error("--iters must be >= 1 and --warmup >= 0")
    if args.timeout_s <= 0:
        p.error("--timeout-s must be > 0")
    return args


@dataclass(frozen=True)
class Placement:
    rank: int
    world_size: int
    local_rank: int
    launcher: str


def placement(env: dict[str, str]) -> Placement:
    """This process's rank, from torchrun, Open MPI or Slurm (checked in that order)."""
    for launcher, keys in (
        ("torchrun", ("RANK", "WORLD_SIZE", "LOCAL_RANK")),
        ("mpi", ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK")),
        ("slurm", ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")),
    ):
        if keys[0] in env and keys[1] in env:
            try:
                rank, size = int(env[keys[0]]), int(env[keys[1]])
                local = int(env.get(keys[2], "0"))
            except ValueError as exc:
                raise UsageError(f"{launcher} rank variables are not integers: {exc}") from None
            return Placement(rank, size, local, launcher)
    return Placement(0, 1, 0, "single")


def rendezvous(args: argparse.Namespace, where: Placement) -> tuple[str, int]:
    addr = args.master_addr or os.environ.get("MASTER_ADDR")
    port = args.master_port or int(os.environ.get("MASTER_PORT", "0") or 0)
    if where.world_size == 1 and not addr:
        with socket.socket() as s:  # a lone process: any free local port
            s.bind(("127.0.0.1", 0))
            return "127.0.0.1", s.getsockname()[1]
    if not addr:
        raise UsageError(
            f"launched by {where.launcher}: give --master-addr (or MASTER_ADDR) for the rendezvous"
        )
    return addr, port or 29500


def short_hostname() -> str:
    return socket.gethostname().split(".")[0]  # as nccl-tests prints it


# ---------------------------------------------------------------- output


class Output:
    """Rank 0 writes the logs; every rank may report a failure.

    `pending` lists the collectives whose log is not finished: a failure is written into
    each of them (the one that broke, then those that will not run), so every requested
    log exists and says what happened.
    """

    def __init__(self, rank: int, out_dir: str | None, collectives: list[str]) -> None:
        self.rank = rank
        self.out_dir = out_dir if rank == 0 else None
        self.pending = list(collectives)
        self.current: TextIO | None = sys.stdout if (rank == 0 and not out_dir) else None
        self.current_name: str | None = None
        self.lock = threading.Lock()
        if self.out_dir:
            os.makedirs(self.out_dir, mode=0o700, exist_ok=True)

    def _open(self, name: str) -> None:
        self._close()
        self.current_name = name
        if self.out_dir:
            path = os.path.join(self.out_dir, f"{name}.log")
            self.current = open(path, "w", buffering=1, encoding="utf-8")  # noqa: SIM115

    def _close(self) -> None:
        if self.current is not None and self.current is not sys.stdout:
            self.current.close()
            self.current = None

    def start(self, name: str) -> None:
        with self.lock:
            self._open(name)

    def done(self, name: str) -> None:
        with self.lock:
            if self.out_dir:
                self._close()
            self.pending.remove(name)
            self.current_name = None

    def line(self, text: str = "") -> None:
        with self.lock:
            if self.current is not None:
                self.current.write(text + "\n")
                self.current.flush()

    def fail(self, lines: list[str], not_run: list[str]) -> None:
        with self.lock:
            if not self.out_dir:  # stdout: the log itself on rank 0, the launcher's output elsewhere
                sys.stdout.write("".join(t + "\n" for t in lines))
                sys.stdout.flush()
                return
            for i, name in enumerate(self.pending):
                if name != self.current_name:
                    self._open(name)
                assert self.current is not None
                self.current.write("".join(t + "\n" for t in (lines if i == 0 else not_run)))
            self._close()
            self.pending.clear()


def failure_lines(kind: str, message: str, frames: list[int], host: str) -> list[str]:
    """nccl-tests' failure form: the error at the innermost line, then the call frames."""
    message = " ".join(message.split()).replace("'", '"')[:500]
    where = frames[0] if frames else 0
    lines = [f"{host}: Test {kind} {SCRIPT}:{where} '{message}'"]
    lines += [f" .. {host} pid {os.getpid()}: Test failure {SCRIPT}:{n}" for n in frames[1:]]
    return lines


def report_failure(out: Output, kind: str, message: str, frames: list[int], host: str) -> None:
    first = out.pending[0] if out.pending else "the benchmark"
    out.fail(
        failure_lines(kind, message, frames, host),
        failure_lines(kind, f"not run: {first} failed before it", frames[:1], host),
    )


def own_frames(tb: traceback.StackSummary | list[traceback.FrameSummary]) -> list[int]:
    """Line numbers in this file, innermost first."""
    here = os.path.abspath(__file__)
    return [f.lineno or 0 for f in reversed(list(tb)) if os.path.abspath(f.filename) == here]


class Watchdog:
    """Ends the process when one phase (init, one size) outlasts the timeout.

    torch's own timeouts do not bound every hang (a rendezvous that never completes,
    a GPU kernel stuck on a dead peer), and a killed process prints nothing: this one
    leaves a `Test timeout` line in the log first.
    """

    def __init__(self, timeout_s: float, out: Output, host: str) -> None:
        self.timeout_s = timeout_s
        self.out = out
        self.host = host
        self.deadline: float | None = None
        self.phase = ""
        self.main_id = threading.get_ident()
        threading.Thread(target=self._watch, daemon=True).start()

    def arm(self, phase: str) -> None:
        self.phase = phase
        self.deadline = time.monotonic() + self.timeout_s

    def disarm(self) -> None:
        self.deadline = None

    def _watch(self) -> None:
        while True:
            time.sleep(0.2)
            if self.deadline is not None and time.monotonic() > self.deadline:
                frame = sys._current_frames().get(self.main_id)
                frames = own_frames(traceback.extract_stack(frame)) if frame else []
                message = f"no progress in {self.timeout_s:g} s: {self.phase}"
                report_failure(self.out, f"timeout ({self.timeout_s:g}s)", message, frames, self.host)
                print(f"{SCRIPT}: timeout after {self.timeout_s:g} s", file=sys.stderr, flush=True)
                os._exit(EXIT_TIMEOUT)


# ---------------------------------------------------------------- the collectives


def pattern(rank: int, length: int, offset: int = 0) -> torch.Tensor:
    """Small integers, exact in every dtype we offer and in sums over a few dozen ranks."""
    return ((torch.arange(length, dtype=torch.float64) + offset + rank) % 5) + 1


@dataclass
class Case:
    """Buffers of one collective at one size, and how to run and check it."""

    count: int  # what nccl-tests prints in `count`: elements per rank's chunk
    size: int  # bytes, as nccl-tests prints it
    run: Callable[[], None]
    fill: Callable[[], None]  # put the check pattern into the input
    result: Callable[[], torch.Tensor | None]  # the output to check (None: nothing here)
    expected: Callable[[], torch.Tensor]


def make_case(bench: Bench, name: str, count: int, in_place: bool) -> Case | None:
    elt, dtype, dev, rank, n = bench.elt, bench.dtype, bench.dev, bench.rank, bench.n
    spec = SPECS[name]
    if spec.per_rank_chunks:
        align = max(16 // elt, 1)
        c = (count // n) // align * align
    else:
        c = count
    if c == 0:
        return None

    def zeros(k: int) -> torch.Tensor:
        return torch.zeros(k, dtype=dtype, device=dev)

    def put(t: torch.Tensor, values: torch.Tensor) -> None:
        t.copy_(values.to(dtype))

    def ranks_sum(length: int, offset: int = 0) -> torch.Tensor:
        total = torch.zeros(length, dtype=torch.float64)
        for r in range(n):
            total += pattern(r, length, offset)
        return total

    if name == "all_reduce":
        buf = zeros(c)
        return Case(
            c,
            c * elt,
            lambda: dist.all_reduce(buf),
            lambda: put(buf, pattern(rank, c)),
            lambda: buf,
            lambda: ranks_sum(c),
        )
    if name == "broadcast":
        buf = zeros(c)
        return Case(
            c,
            c * elt,
            lambda: dist.broadcast(buf, src=0),
            lambda: put(buf, pattern(rank, c)),
            lambda: buf,
            lambda: pattern(0, c),
        )
    if name == "reduce":
        buf = zeros(c)
        return Case(
            c,
            c * elt,
            lambda: dist.reduce(buf, dst=0),
            lambda: put(buf, pattern(rank, c)),
            lambda: buf if rank == 0 else None,
            lambda: ranks_sum(c),
        )
    if name == "sendrecv":
        send, recv = zeros(c), zeros(c)
        ops = [dist.P2POp(dist.isend, send, (rank + 1) % n), dist.P2POp(dist.irecv, recv, (rank - 1) % n)]

        def sendrecv() -> None:
            for work in dist.batch_isend_irecv(ops):
                work.wait()

        return Case(
            c,
            c * elt,
            sendrecv,
            lambda: put(send, pattern(rank, c)),
            lambda: recv,
            lambda: pattern((rank - 1) % n, c),
        )
    if name == "alltoall":
        send, recv = zeros(c * n), zeros(c * n)
        return Case(
            c,
            c * n * elt,
            lambda: dist.all_to_all_single(recv, send),
            lambda: put(send, pattern(rank, c * n)),
            lambda: recv,
            lambda: torch.cat([pattern(s, c, rank * c) for s in range(n)]),
        )
    if name == "all_gather":
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        recv = zeros(c * n)
        send = recv.narrow(0, rank * c, c) if in_place else zeros(c)
        return Case(
            c,
            c * n * elt,
            lambda: gather(recv, send),
            lambda: put(send, pattern(rank, c)),
            lambda: recv,
            lambda: torch.cat([pattern(r, c) for r in range(n)]),
        )
    if name == "reduce_scatter":
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        send = zeros(c * n)
        recv = send.narrow(0, rank * c, c) if in_place else zeros(c)
        return Case(
            c,
            c * n * elt,
            lambda: scatter(recv, send),
            lambda: put(send, pattern(rank, c * n)),
            lambda: recv,
            lambda: ranks_sum(c, rank * c),
        )
    raise AssertionError(name)


def count_wrong(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> int:
    got64 = got.detach().to("cpu", torch.float64)
    if dtype.is_floating_point:
        tolerance = 1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-9
        bad = ~((got64 - want).abs() <= tolerance * want.abs())  # NaN counts as wrong
    else:
        bad = got64 != want.to(torch.int64).to(dtype).to(
            torch.float64
        )  # integer sums wrap like the collective's
    return int(bad.sum())


class Bench:
    def __init__(self, args: argparse.Namespace, dev: torch.device, rank: int, n: int) -> None:
        self.args = args
        self.dev = dev
        self.rank = rank
        self.n = n
        self.dtype = DTYPES[args.dtype]
        self.elt = torch.empty((), dtype=self.dtype).element_size()

    def _sum_over_ranks(self, value: float) -> float:
        t = torch.tensor([value], dtype=torch.float64, device=self.dev)
        dist.all_reduce(t)
        return float(t.item())

    def timed(self, case: Case) -> float:
        """Seconds per iteration, averaged over ranks."""
        for _ in range(self.args.warmup):
            case.run()
        cuda = self.dev.type == "cuda"
        if cuda:
            torch.cuda.synchronize(self.dev)
        dist.barrier()
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(self.args.iters):
                case.run()
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1e3 / self.args.iters
        else:
            t0 = time.perf_counter()
            for _ in range(self.args.iters):
                case.run()
            seconds = (time.perf_counter() - t0) / self.args.iters
        return self._sum_over_ranks(seconds) / self.n

    def wrong(self, case: Case) -> int:
        """Elements wrong after one run on the check pattern, summed over ranks."""
        case.fill()
        case.run()
        if self.dev.type == "cuda":
            torch.cuda.synchronize(self.dev)
        got = case.result()
        local = 0 if got is None else count_wrong(got, case.expected(), self.dtype)
        return round(self._sum_over_ranks(float(local)))


# ---------------------------------------------------------------- the log


@dataclass(frozen=True)
class HalfResult:
    seconds: float
    algbw: float
    busbw: float
    wrong: int | None


def fmt_time(us: float) -> str:
    if us < 10000:
        return f"{us:.2f}"
    return f"{us:.1f}" if us < 100000 else f"{us:.0f}"


def fmt_half(h: HalfResult) -> str:
    wrong = "N/A" if h.wrong is None else str(h.wrong)
    return f"  {fmt_time(h.seconds * 1e6):>7}  {h.algbw:6.2f}  {h.busbw:6.2f}  {wrong:>6}"


def version_line(backend: str) -> str:
    line = (
        f"# collbench-torch-bench version {VERSION} torch={torch.__version__.split('+')[0]} backend={backend}"
    )
    if backend == "nccl":
        version = torch.cuda.nccl.version()  # (2, 27, 3); a plain code in old torch
        code = version if isinstance(version, int) else version[0] * 10000 + version[1] * 100 + version[2]
        line += f" nccl-library={code}"
    return line


def header(out: Output, name: str, args: argparse.Namespace, backend: str, devices: list[str]) -> None:
    halves = 2 if name in IN_PLACE else 1  # a table without in-place columns where there is none
    out.line(version_line(backend))
    out.line(f"# Collective test starting: {name}_perf")
    out.line(
        f"# nThread 1 nGpus 1 minBytes {args.min_bytes} maxBytes {args.max_bytes} "
        f"step: {args.step_factor}(factor) warmup iters: {args.warmup} iters: {args.iters} "
        f"agg iters: 1 validation: {args.check} graph: 0"
    )
    out.line("#")
    out.line("# Using devices")
    for text in devices:
        out.line(text)
    out.line("#")
    out.line(f"#{'out-of-place':>74}" + (f"{'in-place':>30}" if halves == 2 else ""))
    out.line(
        f"#{'size':>11}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}"
        + f"  {'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}" * halves
    )
    out.line(
        f"#{'(B)':>11}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}"
        + (f"  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}" * halves).rstrip()
    )


def device_line(rank: int, local_rank: int, dev: torch.device) -> str:
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        bus = "{:04x}:{:02x}:{:02x}".format(
            getattr(props, "pci_domain_id", 0),
            getattr(props, "pci_bus_id", 0),
            getattr(props, "pci_device_id", 0),
        )
        index, name = dev.index, props.name
    else:
        bus, index, name = "0000:00:00", local_rank, "cpu"
    where = f"Pid {os.getpid():6d} on {short_hostname():>10} device {index:2d} [{bus}] {name}"
    return f"#  Rank {rank:2d} Group  0 {where}"


def sizes(args: argparse.Namespace) -> list[int]:
    out, size = [], args.min_bytes
    while size <= args.max_bytes:
        out.append(size)
        size *= args.step_factor
    return out


def run_collective(bench: Bench, out: Output, watchdog: Watchdog, name: str) -> int:
    """Rows of one collective; returns the number of checks that found wrong data."""
    spec, n, args = SPECS[name], bench.n, bench.args
    failed_checks, busbws = 0, []
    for size in sizes(args):
        watchdog.arm(f"{name} {size} bytes")
        count = size // bench.elt
        halves: list[HalfResult] = []
        case = None
        for in_place in (False, True) if name in IN_PLACE else (False,):
            case = make_case(bench, name, count, in_place)
            if case is None:
                break
            seconds = bench.timed(case)
            wrong = bench.wrong(case) if args.check else None
            failed_checks += bool(wrong)
            algbw = case.size / seconds / 1e9
            busbw = algbw * spec.busbw_factor(n)
            busbws.append(busbw)
            halves.append(HalfResult(seconds, algbw, busbw, wrong))
        watchdog.disarm()
        if case is None:  # too small to split across the ranks
            continue
        out.line(
            f"{case.size:12d}  {case.count:12d}  {args.dtype:>8}  {spec.redop:>6}  {spec.root:6d}"
            + "".join(fmt_half(h) for h in halves)
        )
    out.line(f"# Out of bounds values : {failed_checks} {'FAILED' if failed_checks else 'OK'}")
    out.line(f"# Avg bus bandwidth    : {sum(busbws) / len(busbws) if busbws else 0:g}")
    out.line("#")
    out.line(f"# Collective test concluded: {name}_perf")
    out.line("#")
    return failed_checks


# ---------------------------------------------------------------- main


def choose_device(backend: str, local_rank: int) -> torch.device:
    if backend == "gloo":
        return torch.device("cpu")
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        raise CudaError("backend nccl needs a CUDA device and torch sees none")
    dev = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    return dev


def classify(exc: BaseException, backend: str) -> tuple[str, int]:
    """Failure kind as nccl-tests words it, and the exit code."""
    if isinstance(exc, CudaError) or ("CUDA" in str(exc) and "NCCL" not in str(exc)):
        return "CUDA failure", EXIT_CUDA
    text = str(exc).lower()
    if "timed out" in text or "timeout" in text:
        return "timeout", EXIT_TIMEOUT
    # nccl-tests has no word for a gloo error: the generic `Test failure` is still read as one
    return ("NCCL failure" if backend == "nccl" else "failure"), EXIT_BACKEND


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    host = short_hostname()
    try:
        where = placement(dict(os.environ))
        addr, port = rendezvous(args, where)
    except UsageError as exc:
        print(f"{SCRIPT}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.backend == "auto":
        backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() > 0 else "gloo"
    else:
        backend = args.backend
    out = Output(where.rank, args.out_dir, args.collectives)
    watchdog = Watchdog(args.timeout_s, out, host)
    try:
        watchdog.arm(f"init ({backend}, {where.world_size} ranks, rendezvous {addr}:{port})")
        dev = choose_device(backend, where.local_rank)
        dist.init_process_group(
            backend,
            init_method="env://" if where.launcher == "torchrun" else f"tcp://{addr}:{port}",
            rank=where.rank,
            world_size=where.world_size,
            # torch's own timeout after ours, so that a hang is reported by the watchdog
            timeout=datetime.timedelta(seconds=args.timeout_s + 60),
            **({"device_id": dev} if dev.type == "cuda" else {}),
        )
        devices: list[str] = [""] * where.world_size
        dist.all_gather_object(devices, device_line(where.rank, where.local_rank, dev))
        watchdog.disarm()
        bench = Bench(args, dev, where.rank, where.world_size)
        failed_checks = 0
        for name in args.collectives:
            if name == "sendrecv" and where.world_size < 2:
                print(f"{SCRIPT}: sendrecv needs 2 or more ranks: skipped", file=sys.stderr)
                out.done(name)
                continue
            out.start(name)
            header(out, name, args, backend, devices)
            failed_checks += run_collective(bench, out, watchdog, name)
            out.done(name)
        dist.destroy_process_group()
    except Exception as exc:  # one failure form for the parser, whatever broke
        watchdog.disarm()
        kind, code = classify(exc, backend)
        frames = own_frames(traceback.extract_tb(exc.__traceback__))
        report_failure(out, kind, f"{backend}: {type(exc).__name__}: {exc}", frames, host)
        print(
            f"{SCRIPT}: rank {where.rank} on {host}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True
        )
        os._exit(code)  # a broken process group can hang in its teardown
    return EXIT_WRONG if failed_checks else 0


if __name__ == "__main__":
    sys.exit(main())
