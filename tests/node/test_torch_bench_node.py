"""The node-side torch benchmark, run for real under torchrun and mpirun (gloo on CPU).

Each launch costs a few seconds (importing torch), so one launch covers many checks.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from collbench_py.parsers import parse_text

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "collbench_py" / "node" / "collbench_torch_bench.py"
BIN = Path(sys.executable).parent
TORCHRUN = BIN / "torchrun"
Completed = subprocess.CompletedProcess[str]
HOST = socket.gethostname().split(".")[0]
ALL = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv")
FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}
IN_PLACE = {"all_gather", "reduce_scatter"}  # the others have no in-place half

DEVICE = re.compile(r"^#  Rank +(\d+) Group +0 Pid +(\d+) on +(\S+) device +(\d+) \[([0-9a-f:]+)\] (.+)$")


@dataclass(frozen=True)
class Log:
    collective: str
    version: str
    header: str
    devices: list[tuple[int, int, str]]  # rank, pid, host
    rows: list[list[str]]
    oob: str
    avg_busbw: float


def read_log(text: str, collective: str) -> Log:
    """The nccl-tests layout, read strictly: every line is one we expect."""
    lines = text.splitlines()
    assert lines[0].startswith("# collbench-torch-bench version "), lines[0]
    assert lines[1] == f"# Collective test starting: {collective}_perf"
    assert lines[2].startswith("# nThread 1 nGpus 1 minBytes "), lines[2]
    assert lines[3:5] == ["#", "# Using devices"]
    devices, i = [], 5
    while (m := DEVICE.match(lines[i])) is not None:
        devices.append((int(m[1]), int(m[2]), m[3]))
        i += 1
    assert lines[i] == "#"
    halves = 2 if collective in IN_PLACE else 1  # no in-place columns where torch has no such form
    assert lines[i + 1].split() == ["#", "out-of-place", "in-place"][: halves + 1]
    half = ["time", "algbw", "busbw", "#wrong"]
    assert lines[i + 2].split() == ["#", "size", "count", "type", "redop", "root", *half * halves]
    rows, i = [], i + 4
    while not lines[i].startswith("#"):
        rows.append(lines[i].split())
        i += 1
    oob = re.fullmatch(r"# Out of bounds values : (\d+ (?:OK|FAILED))", lines[i])
    avg = re.fullmatch(r"# Avg bus bandwidth    : (\S+)", lines[i + 1])
    assert oob and avg, lines[i : i + 2]
    assert lines[i + 2 : i + 5] == ["#", f"# Collective test concluded: {collective}_perf", "#"]
    return Log(collective, lines[0].split()[4], lines[2], devices, rows, oob[1], float(avg[1]))


def check_rows(log: Log, nranks: int, check: bool) -> None:
    """Sizes, counts, root/redop, algbw = size/time and busbw = algbw x the nccl-tests factor."""
    assert log.rows, f"{log.collective}: no rows"
    chunks = log.collective in ("all_gather", "reduce_scatter", "alltoall")
    busbws = []
    for row in log.rows:
        assert len(row) == (13 if log.collective in IN_PLACE else 9), row
        size, count, dtype, redop, root = int(row[0]), int(row[1]), row[2], row[3], int(row[4])
        assert dtype == "float"
        assert size == count * 4 * (nranks if chunks else 1)
        assert redop == ("sum" if log.collective in ("all_reduce", "reduce_scatter", "reduce") else "none")
        assert root == (0 if log.collective in ("broadcast", "reduce") else -1)
        halves = [row[5:9], row[9:13]] if log.collective in IN_PLACE else [row[5:9]]
        for time_us, algbw, busbw, wrong in halves:
            t, a, b = float(time_us), float(algbw), float(busbw)
            assert t > 0
            assert a == pytest.approx(size / t / 1e3, rel=0.02, abs=0.006)
            assert b == pytest.approx(a * FACTOR[log.collective](nranks), rel=0.02, abs=0.011)
            assert wrong == ("0" if check else "N/A")
            busbws.append(b)
    assert log.oob == "0 OK"
    assert log.avg_busbw == pytest.approx(sum(busbws) / len(busbws), rel=0.02, abs=0.006)


NOT_LAUNCHED: dict[str, str | None] = {"RANK": None, "WORLD_SIZE": None}  # pytest may run under a launcher


def run(argv: list[str], timeout: float = 120, env: dict[str, str | None] | None = None) -> Completed:
    """Run with `env` over our environment; a None value removes the variable."""
    merged = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    full_env = {k: v for k, v in merged.items() if v is not None}
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=full_env, check=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SMALL = ["--min-bytes", "256K", "--max-bytes", "1M", "--step-factor", "4", "--iters", "3", "--warmup", "1"]


@pytest.fixture(scope="module")
def torchrun_logs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Completed]:
    out = tmp_path_factory.mktemp("torchrun")
    argv = [str(TORCHRUN), "--standalone", "--nproc_per_node=2", str(SCRIPT)]
    proc = run([*argv, "--collectives", ",".join(ALL), *SMALL, "--check", "1", "--out-dir", str(out)])
    return out, proc


def test_torchrun_every_collective(torchrun_logs: tuple[Path, Completed]) -> None:
    out, proc = torchrun_logs
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{c}.log" for c in ALL)
    for collective in ALL:
        log = read_log((out / f"{collective}.log").read_text(), collective)
        assert "validation: 1" in log.header and "iters: 3" in log.header
        assert [d[0] for d in log.devices] == [0, 1]
        assert {d[2] for d in log.devices} == {HOST}  # the real hostname, as nccl-tests shortens it
        assert len({d[1] for d in log.devices}) == 2  # two processes, not one rank twice
        assert [int(r[0]) for r in log.rows][-1] <= 1 << 20
        check_rows(log, nranks=2, check=True)


def test_torchrun_logs_parse(torchrun_logs: tuple[Path, Completed]) -> None:
    out, _ = torchrun_logs
    for collective in ALL:
        text = (out / f"{collective}.log").read_text()
        parsed = parse_text(text, file=f"{collective}.log")
        assert parsed.kind == "nccl-tests"
        (run_,) = parsed.runs
        assert (run_.status, run_.errors, run_.warnings, parsed.warnings) == ("ok", (), (), ())
        assert run_.collective == collective
        assert run_.nranks == 2
        assert set(run_.hosts) == {HOST}
        assert run_.oob == 0
        assert len(run_.rows) == len(read_log(text, collective).rows)
        for row in run_.rows:
            assert row.oop.wrong == 0
            assert (row.ip is not None) == (collective in IN_PLACE)
            assert row.oop.busbw == pytest.approx(row.oop.algbw * FACTOR[collective](2), rel=0.02, abs=0.011)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="Open MPI's mpirun is not installed")
def test_mpirun_stdout_without_check() -> None:
    port = str(free_port())
    mpirun = ["mpirun", "--allow-run-as-root", "--bind-to", "none", "-np", "2"]
    mpirun += ["-x", "MASTER_ADDR=127.0.0.1", "-x", f"MASTER_PORT={port}", "-x", "OMP_NUM_THREADS=1"]
    bench = [sys.executable, str(SCRIPT), "--collectives", "all_reduce,sendrecv", *SMALL, "--check", "0"]
    proc = run([*mpirun, *bench], env=NOT_LAUNCHED)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    text = proc.stdout
    assert text.count("# Collective test starting:") == 2  # only rank 0 prints
    for collective in ("all_reduce", "sendrecv"):
        start = text.index(f"# Collective test starting: {collective}_perf")
        begin = text.rindex("# collbench-torch-bench version", 0, start)
        end = text.index(f"# Collective test concluded: {collective}_perf", start)
        log = read_log(text[begin : text.index("\n", end) + 3], collective)
        assert "validation: 0" in log.header
        assert [(d[0], d[2]) for d in log.devices] == [(0, HOST), (1, HOST)]
        check_rows(log, nranks=2, check=False)
    runs = parse_text(text).runs
    summary = [(r.collective, r.status, r.nranks) for r in runs]
    assert summary == [("all_reduce", "ok", 2), ("sendrecv", "ok", 2)]
    assert all(row.oop.wrong is None for r in runs for row in r.rows)  # `N/A` without --check


def test_single_process_needs_no_launcher_and_imports_only_torch(tmp_path: Path) -> None:
    argv = [sys.executable, "-X", "importtime", str(SCRIPT), "--collectives", "all_reduce,sendrecv"]
    proc = run([*argv, *SMALL, "--out-dir", str(tmp_path)], env=NOT_LAUNCHED)
    assert proc.returncode == 0, proc.stderr[-3000:]
    imported = {
        line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")
    }
    assert "torch.distributed" in imported
    assert not {m for m in imported if m.split(".")[0] == "collbench_py"}
    assert "sendrecv needs 2 or more ranks: skipped" in proc.stderr
    log = read_log((tmp_path / "all_reduce.log").read_text(), "all_reduce")
    assert [(d[0], d[2]) for d in log.devices] == [(0, HOST)]
    check_rows(log, nranks=1, check=True)  # one rank: busbw 0, as nccl-tests prints it
    assert not (tmp_path / "sendrecv.log").exists()


def test_source_imports_only_stdlib_and_torch() -> None:
    tree = ast.parse(SCRIPT.read_text())
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import"
            modules.add((node.module or "").split(".")[0])
    assert modules - set(sys.stdlib_module_names) == {"torch"}


def _env_rank(rank: int, port: int) -> dict[str, str]:
    return {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port)}  # fmt: skip


def test_missing_peer_times_out_with_a_parseable_line(tmp_path: Path) -> None:
    argv = [sys.executable, str(SCRIPT), "--collectives", "all_reduce,broadcast", "--timeout-s", "2"]
    started = time.monotonic()
    proc = run([*argv, "--out-dir", str(tmp_path)], timeout=60, env=_env_rank(0, free_port()))
    assert proc.returncode == 4, proc.stderr
    assert time.monotonic() - started < 30
    first = (tmp_path / "all_reduce.log").read_text().splitlines()
    assert re.fullmatch(
        rf"{HOST}: Test timeout \(2s\) collbench_torch_bench\.py:\d+ 'no progress in 2 s: init .*'", first[0]
    )
    assert all(line.startswith(f" .. {HOST} pid ") for line in first[1:])
    second = (tmp_path / "broadcast.log").read_text()
    assert "'not run: all_reduce failed before it'" in second
    for name in ("all_reduce", "broadcast"):
        (failed,) = parse_text((tmp_path / f"{name}.log").read_text()).runs
        assert failed.status == "failed"
        assert [(e.kind, e.host) for e in failed.errors] == [("Test timeout", HOST)]
    assert "Traceback" not in proc.stderr


def test_peer_killed_mid_run_is_a_failure_in_the_log(tmp_path: Path) -> None:
    port = free_port()
    argv = [sys.executable, str(SCRIPT), "--collectives", "all_reduce,all_gather", "--min-bytes", "64K"]
    argv += [
        "--max-bytes",
        "1G",
        "--iters",
        "3",
        "--warmup",
        "1",
        "--timeout-s",
        "60",
        "--out-dir",
        str(tmp_path),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen(argv, env={**env, **_env_rank(r, port)}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in (0, 1)]  # fmt: skip
    try:
        log = tmp_path / "all_reduce.log"
        deadline = time.monotonic() + 60
        while not (log.exists() and re.search(r"^ +65536 ", log.read_text(), re.M)):
            assert time.monotonic() < deadline, "no first row within 60 s"
            time.sleep(0.1)
        procs[1].send_signal(signal.SIGKILL)
        _, stderr = procs[0].communicate(timeout=60)
    finally:
        for p in procs:
            p.kill()
            p.communicate()
    assert procs[0].returncode == 3, stderr
    text = log.read_text()
    assert "# Collective test starting: all_reduce_perf" in text
    assert re.search(
        rf"^{HOST}: Test failure collbench_torch_bench\.py:\d+ 'gloo: RuntimeError: .+'$", text, re.M
    )
    assert "# Collective test concluded" not in text
    assert "not run: all_reduce failed before it" in (tmp_path / "all_gather.log").read_text()
    (broken,) = parse_text(text).runs
    assert broken.status == "failed" and broken.collective == "all_reduce" and broken.rows
    assert broken.errors[0].kind == "Test failure" and broken.errors[0].host == HOST
    (not_run,) = parse_text((tmp_path / "all_gather.log").read_text()).runs
    assert not_run.status == "failed" and not not_run.rows


def test_init_failure_names_the_interface_from_gloo_socket_ifname(tmp_path: Path) -> None:
    """GLOO_SOCKET_IFNAME reaches gloo; the init failure lands in every requested log."""
    argv = [sys.executable, str(SCRIPT), "--collectives", "all_reduce,broadcast", "--out-dir", str(tmp_path)]
    proc = run(argv, env={**NOT_LAUNCHED, "GLOO_SOCKET_IFNAME": "nonexistent0"})
    assert proc.returncode == 3, proc.stderr
    (first,) = parse_text((tmp_path / "all_reduce.log").read_text()).runs
    assert first.status == "failed" and first.errors[0].kind == "Test failure"
    assert "gloo: RuntimeError:" in first.errors[0].message and "nonexistent0" in first.errors[0].message
    (second,) = parse_text((tmp_path / "broadcast.log").read_text()).runs
    assert second.status == "failed" and "not run: all_reduce failed before it" in second.errors[0].message


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a usable GPU")
def test_nccl_backend_without_gpu_is_a_cuda_failure(tmp_path: Path) -> None:
    argv = [sys.executable, str(SCRIPT), "--backend", "nccl", "--out-dir", str(tmp_path)]
    proc = run(argv, env=NOT_LAUNCHED)
    assert proc.returncode == 2, proc.stderr
    (failed,) = parse_text((tmp_path / "all_reduce.log").read_text()).runs
    assert failed.status == "failed"
    assert [(e.kind, e.host) for e in failed.errors] == [("Test CUDA failure", HOST)]
    assert "nccl: CudaError: backend nccl needs a CUDA device and torch sees none" in failed.errors[0].message


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (
            ["--min-bytes", "2M", "--max-bytes", "1M"],
            {},
            "--min-bytes 2097152 must be >= 1 and <= --max-bytes",
        ),
        (["--collectives", "all_reduce,allreduce"], {}, "unknown collective(s) allreduce"),
        (["--min-bytes", "12Q"], {}, "not a size: '12Q'"),
        (
            [],
            {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "MASTER_ADDR": None},
            "give --master-addr",
        ),
        ([], {"SLURM_PROCID": "x", "SLURM_NTASKS": "2"}, "slurm rank variables are not integers"),
    ],
)
def test_bad_usage_is_one_line_and_exit_6(args: list[str], env: dict[str, str | None], message: str) -> None:
    proc = run([sys.executable, str(SCRIPT), *args], env={**NOT_LAUNCHED, **env})
    assert proc.returncode == 6
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def _load_script():
    spec = importlib.util.spec_from_file_location("collbench_torch_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_check_counts_wrong_elements_and_chunk_sizes_follow_nccl_tests() -> None:
    bench_mod = _load_script()
    want = sum(bench_mod.pattern(r, 100) for r in range(3))
    got = want.clone().to(torch.float32)
    assert bench_mod.count_wrong(got, want, torch.float32) == 0
    got[[3, 50, 99]] += 1
    got[7] = float("nan")
    assert bench_mod.count_wrong(got, want, torch.float32) == 4
    assert bench_mod.count_wrong(want.to(torch.int8), want, torch.int8) == 0

    class Args:
        dtype = "float"

    bench = bench_mod.Bench(Args(), torch.device("cpu"), rank=1, n=3)
    # 1 KiB of floats over 3 ranks: 85 per rank, aligned down to 16 bytes -> 84, as nccl-tests does
    case = bench_mod.make_case(bench, "all_gather", 256, in_place=False)
    assert (case.count, case.size) == (84, 84 * 3 * 4)
    assert bench_mod.make_case(bench, "alltoall", 3, in_place=False) is None  # too small to split
    assert bench_mod.make_case(bench, "all_reduce", 256, in_place=False).size == 1024
