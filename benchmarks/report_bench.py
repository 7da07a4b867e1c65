"""Benchmark `collbench report` on synthetic fleets built from real logs.

For each fleet size a run directory is built with tests/rundir_factory.py: per host six
intra-node logs (real corpus logs, one per collective), facts.json and a real
`nvidia-smi topo -m`; host pairs in a chain (n-1 pairs, one all_reduce log each); 1 % of
the hosts run at half speed and one host has another topology, so the report has work to
do. Then `python -m collbench_py report` runs as a child process while its process tree's
RSS is sampled from /proc.

    .venv/bin/python benchmarks/report_bench.py            # 100, 300, 1000 hosts
    .venv/bin/python benchmarks/report_bench.py 1000       # one size
    .venv/bin/python benchmarks/report_bench.py --adaptive 1000 4000

The adaptive shape is a run directory as the adaptive pair schedule leaves it: the same six
intra-node logs per host, then the pair rounds a real collbench_py.pairs.planner.Planner chose over
simulated busbw (3 initial rounds of disjoint pairs, then localisation rounds), each pair's log
the real pair log scaled to the busbw the planner was given (+-1.5 % noise), and the plan.json it
wrote. Planted: 3 bad nodes (half speed on every pair), 1 bad link (60 %) and 3 hosts at half
speed intra-node.

Targets: 1,000 hosts in <= 60 s and < 1 GB peak RSS on a 2-core machine, time linear in hosts;
at 4,000 hosts the report within 1.5x of reading its logs alone.
`peak MiB` is the largest sum of RSS over the report's process tree (sampled every 50 ms), `PSS MiB`
the same with shared pages divided between the processes that share them.
`cpu s` (user + system of the report and its parsing workers) shows the work apart from how busy
the machine was: wall time is about cpu / 2 on an idle 2-core machine while the logs are parsed.

Seconds differ from machine to machine; a ratio carries across them. So each size also times, in
the same run and right before the report, a child process that only loads the run directory
(`load_run_dir`: every log parsed by the same worker pool the report uses, facts and topologies
read) and prints `x parse`: the report's wall and CPU time over that load's.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import subprocess
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collbench_py.pairs.planner import initial_rounds  # noqa: E402
from collbench_py.parsers import parse_text  # noqa: E402
from collbench_py.verdicts.stats import reference_sizes, series, value_at  # noqa: E402
from tests.rundir_factory import (  # noqa: E402
    CORPUS,
    H100_LOG,
    H100_TOPO_12NICS,
    RunSpec,
    build_run_dir,
    plan_record,
    run_planner,
)

NCCL = CORPUS / "nccl-tests"
# Real logs stand in for each collective (the report keys results by the manifest's collective).
INTRA = {
    "all_reduce": NCCL / "hgx-h100-2node-16rank-mpi-warnings-interleaved-16GiB.txt",
    "all_gather": NCCL / "dgx-spark-gb10-2node-allgather-v2.18.3-x11-noise.txt",
    "alltoall": NCCL / "alltoall-v2.18.3-2node-16rank-inplace-NA-mpi-noise-in-table.txt",
    "sendrecv": NCCL / "sendrecv-nthread2-info-interleaved-destroy-lines-a100-leonardo.txt",
    "reduce_scatter": NCCL / "cscs-gh200-2node-v2.18.2-version-header.txt",
    "broadcast": NCCL / "skypilot-h200-2node-allgather-double-prefix.txt",
}


def build(root: Path, hosts: int) -> Path:
    names = [f"gpu{i:04d}" for i in range(hosts)]
    slow = dict.fromkeys(names[:: max(1, hosts // max(1, hosts // 100))][: max(1, hosts // 100)], 0.5)
    spec = RunSpec(
        hosts=names,
        intra=INTRA,
        host_scale=slow,
        topo_override={names[-1]: H100_TOPO_12NICS},
        pairs=list(pairwise(names)),
    )
    return build_run_dir(root, spec)


def reference_busbw(log: Path) -> float:
    """The busbw the report scores a copy of `log` at (its reference sizes)."""
    run = max(parse_text(log.read_text(encoding="utf-8"), file=log.name).runs, key=lambda r: len(r.rows))
    points = series(run)
    sizes, _ = reference_sizes([[s for s, _ in points]], 256 << 20, 3)
    value = value_at(points, sizes)
    assert value is not None
    return value


def noise(number: int, pair: tuple[str, str]) -> float:
    """A measurement's own scatter, +-1.5 %, the same on every build."""
    digest = hashlib.blake2b(f"{number}:{pair}".encode(), digest_size=4).digest()
    return 0.985 + 0.03 * int.from_bytes(digest) / 2**32


def build_adaptive(root: Path, hosts: int) -> Path:
    names = [f"gpu{i:04d}" for i in range(hosts)]
    bad_nodes = {names[hosts // 7], names[hosts // 3], names[(2 * hosts) // 3]}
    # The bad link is a pair the first round measures (the planner's own rounds, same seed).
    first = initial_rounds(names, seed=hosts)[0]
    bad_link = next(pair for pair in first[len(first) // 2 :] if not set(pair) & bad_nodes)
    base = reference_busbw(H100_LOG)

    def factor(number: int, pair: tuple[str, str]) -> float:
        slow = 0.5 if set(pair) & bad_nodes else 0.6 if pair == bad_link else 1.0
        return slow * noise(number, pair)

    planner = run_planner(names, lambda number, pair: base * factor(number, pair), seed=hosts)
    spec = RunSpec(
        hosts=names,
        intra=INTRA,
        host_scale=dict.fromkeys(names[5 : hosts : hosts // 3][:3], 0.5),
        topo_override={names[-1]: H100_TOPO_12NICS},
        pair_rounds=[list(pairs) for pairs in planner.rounds],
        round_scale={
            number: {pair: factor(number, pair) for pair in pairs}
            for number, pairs in enumerate(planner.rounds, start=1)
        },
        plan=plan_record(planner),
    )
    return build_run_dir(root, spec)


def tree_memory_kib(pid: int) -> tuple[int, int]:
    """Resident memory (RSS, PSS) of a process and all its descendants, from /proc.

    RSS counts a page shared by a forked child in both processes; PSS divides it between them,
    so its sum is the tree's own memory (the report forks writers that share the parsed run)."""
    rss, pss, stack = 0, 0, [pid]
    while stack:
        current = stack.pop()
        try:
            with open(f"/proc/{current}/smaps_rollup") as rollup:
                for line in rollup:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1])
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1])
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as children:
                    stack += [int(c) for c in children.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return rss, pss


# The stand-in logs come from several GPU models, so only all_reduce (an HGX H100 log) has an
# absolute expectation; the other collectives are judged against the fleet alone.
PROFILE = """name: bench-h100
description: HGX H100, all_reduce only
pass_fraction: 0.9
line_rate_gbs: 450
intra:
  all_reduce: {size: 1073741824, busbw: 355.9, source: "as the shipped h100-sxm profile"}
"""


def run_sampled(argv: list[str]) -> tuple[float, float, float, float]:
    """Wall s, peak RSS MiB, peak PSS MiB and CPU s (with its children) of a child process, its tree's
    memory sampled from /proc every 50 ms."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    child = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = peak_pss = 0
    while child.poll() is None:
        rss, pss = tree_memory_kib(child.pid)
        peak, peak_pss = max(peak, rss), max(peak_pss, pss)
        time.sleep(0.05)
    elapsed = time.perf_counter() - start
    if child.returncode not in (0, 1):
        raise SystemExit(f"{argv[1:4]} exited {child.returncode}: {child.stderr.read().decode()[-500:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)  # workers included
    return elapsed, peak / 1024, peak_pss / 1024, cpu


def run_report(run: Path) -> tuple[float, float, float, float]:
    profile = run.parent / "bench-profile.yml"
    profile.write_text(PROFILE, encoding="utf-8")
    return run_sampled([sys.executable, "-m", "collbench_py", "report", str(run), "--profile", str(profile)])


def run_load(run: Path) -> tuple[float, float]:
    """Wall and CPU seconds of loading the run directory alone, in a child process as the report runs,
    sampled as the report is: on 2 cores the sampler's own reads of /proc take about 5 % of the
    report's wall, and only the report's paid them."""
    code = "import sys; from collbench_py.rundir.load import load_run_dir; load_run_dir(sys.argv[1])"
    elapsed, _, _, cpu = run_sampled([sys.executable, "-c", code, str(run)])
    return elapsed, cpu


def main(sizes: list[int], adaptive: bool = False, keep: Path | None = None) -> None:
    print(f"shape: {'adaptive pair schedule' if adaptive else 'chain of n-1 pairs'}")
    print(
        f"{'hosts':>6} {'logs':>6} {'build s':>8} {'report s':>9} {'cpu s':>7} {'s/host':>7} {'peak MiB':>9} "
        f"{'PSS MiB':>8} {'html MiB':>9} {'json MiB':>9} {'parse s':>8} {'x parse':>8} {'x cpu':>6}"
    )
    for hosts in sizes:
        with tempfile.TemporaryDirectory(prefix="collbench-bench-") as tmp:
            start = time.perf_counter()
            where = keep / f"{'adaptive' if adaptive else 'chain'}-{hosts}" if keep else Path(tmp)
            existing = next(where.glob("*/manifest.json"), None) if keep else None
            if existing is not None:
                run = existing.parent
            else:
                run = (build_adaptive if adaptive else build)(where, hosts)
            built = time.perf_counter() - start
            logs = sum(1 for _ in run.rglob("*.log"))
            parse_wall, parse_cpu = run_load(run)
            elapsed, peak, peak_pss, cpu = run_report(run)
            html = (run / "report" / "index.html").stat().st_size / 2**20
            data = (run / "report" / "results.json").stat().st_size / 2**20
            print(
                f"{hosts:>6} {logs:>6} {built:>8.1f} {elapsed:>9.1f} {cpu:>7.1f} {elapsed / hosts:>7.3f} "
                f"{peak:>9.0f} {peak_pss:>8.0f} {html:>9.1f} {data:>9.1f} {parse_wall:>8.1f} "
                f"{elapsed / parse_wall:>8.2f} {cpu / parse_cpu:>6.2f}"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("hosts", type=int, nargs="*", help="fleet sizes (default 100 300 1000)")
    parser.add_argument("--adaptive", action="store_true", help="the adaptive pair schedule's run directory")
    parser.add_argument("--keep", type=Path, help="build each run directory here once and reuse it")
    args = parser.parse_args()
    main(args.hosts or [100, 300, 1000], args.adaptive, args.keep)
