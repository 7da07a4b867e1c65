"""The pairs phase on a real 16-host test cluster: adaptive against round robin.

Builds a fleet test cluster (tests/cluster/vcluster.py: network namespaces, real sshd, needs root)
with the stand-in nccl-tests (real MPI over TCP), shapes its data network as the adaptive e2e test
does (tests/cluster/test_pairs_adaptive.py): every link at the fabric's rate, two bad nodes and one
bad link at a tenth of it. Then runs bench.yml twice, pairs phase only, `collbench_pairs: adaptive`
and `collbench_pairs: round-robin`, and prints for each: the rounds (pairs, wall time of each from
the manifest's launch times), the wall time of the pairs phase and of the whole run, and what its
plan.json named.

    python benchmarks/fleet_e2e.py [--nodes 16] [--seed fleet-e2e-1] [--only adaptive]

The bad link is one the adaptive plan's first rounds measure (a link no round measures cannot be
named by any plan). This is a benchmark, not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collbench_py.rundir.planfile import read_plan  # noqa: E402
from tests.cluster.benchrun import BenchRun, run_bench  # noqa: E402
from tests.cluster.test_nccl_e2e import TEST_PROFILE  # noqa: E402
from tests.cluster.test_pairs_adaptive import FABRIC, SLOW, bad_link, pipeline_vars, shape_fleet  # noqa: E402
from tests.cluster.vcluster import Cluster, install_nccl_tests_standin  # noqa: E402

STAMP = "%Y-%m-%dT%H:%M:%SZ"
PLAN_TASK = re.compile(r"TASK \[benchmark : Plan the (?:first|next) round of pairs\]")


def seconds_between(start: str, end: str) -> float:
    return (datetime.strptime(end, STAMP) - datetime.strptime(start, STAMP)).total_seconds()


def report(schedule: str, run: BenchRun) -> None:
    plan = read_plan(run.run_dir)
    pairs = [e for e in run.manifest()["launches"] if e["kind"] == "pair"]
    meaning = " (the report failed hosts: collbench_fail_on_verdict)" if run.rc == 2 else ""
    print(f"\n== {schedule}: rc {run.rc}{meaning}, whole run {run.seconds:.0f} s")
    if plan is None:
        print("   no plan.json\n" + run.tail)
        return
    by_round: dict[int, list[dict]] = {}
    for entry in pairs:
        by_round.setdefault(int(entry["round"]), []).append(entry)
    for r in plan.rounds:
        launched = by_round.get(r.number, [])
        starts = [e["started_at"] for e in launched if e["started_at"]]
        ends = [e["finished_at"] for e in launched if e["finished_at"]]
        wall = f"{seconds_between(min(starts), max(ends)):4.0f} s" if starts and ends else "   ? s"
        slow = [f"{k} {v:.3g}" if v is not None else f"{k} none" for k, v in r.busbw.items()]
        print(
            f"   round {r.number:2d} {r.kind:12s} {len(r.pairs):2d} pairs, launches {wall}: {', '.join(slow)}"
        )
    starts = [e["started_at"] for e in pairs if e["started_at"]]
    ends = [e["finished_at"] for e in pairs if e["finished_at"]]
    if starts and ends:
        phase = seconds_between(min(starts), max(ends))
        print(f"   pairs phase (first launch to last): {phase:.0f} s over {len(plan.rounds)} rounds")
    plan_calls = len(PLAN_TASK.findall(run.output))
    print(f"   plan task runs: {plan_calls}")
    for d in plan.decisions:
        print(f"   {d.kind}: {d.subject}")
    print(f"   size judged: {plan.size_bytes} bytes; finished: {plan.finished}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--seed", default="fleet-e2e-1")
    parser.add_argument("--only", choices=["adaptive", "round-robin"])
    args = parser.parse_args()
    hosts = [f"node{i}" for i in range(1, args.nodes + 1)]
    bad_nodes = (hosts[4], hosts[11 % len(hosts)])
    link = bad_link(hosts, bad_nodes, args.seed)
    print(f"{args.nodes} hosts; bad nodes {', '.join(bad_nodes)} and bad link {'--'.join(link)} at {SLOW}")
    print(f"every other data link at {FABRIC}")
    with tempfile.TemporaryDirectory(prefix="collbench-fleet-e2e-") as tmp:
        work = Path(tmp)
        started = time.monotonic()
        cluster = Cluster.up(nodes=args.nodes, name="fleete2e", workdir=work / "cluster", fleet=True)
        print(f"cluster up in {time.monotonic() - started:.1f} s")
        try:
            standin = install_nccl_tests_standin(cluster.workdir / "nccl-tests")
            profile = work / "profile.yml"
            profile.write_text(TEST_PROFILE, encoding="utf-8")
            shape_fleet(cluster, bad_nodes, link)
            for schedule in [args.only] if args.only else ["adaptive", "round-robin"]:
                variables = pipeline_vars(standin, profile, schedule, args.seed)
                run = run_bench(
                    cluster,
                    work / schedule / "results",
                    work / schedule / "cp",
                    extra_vars=variables,
                    limit_s=3000,
                )
                report(schedule, run)
        finally:
            cluster.down()


if __name__ == "__main__":
    main()
