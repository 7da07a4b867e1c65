"""End to end: the adaptive pair schedule on an 8-host test cluster finds one bad node and one bad link.

One run of bench.yml, the pairs phase only, on 8 fleet nodes (data network on eth1, no ssh between
them until the project sets it up) with the stand-in nccl-tests (real MPI over TCP, -J JSON), under
`collbench_pairs: adaptive`. The data network is shaped: every node's link to FABRIC (so that a
healthy pair measures the network, not two busy shared cores), node6's to a tenth of it (a bad NODE:
slow with every partner), and the link between two other nodes to a tenth with `Cluster.shape_pair`
(a bad LINK: both ends are fine with everyone else). The controller decides each round from what the
last one measured; plan.json must name exactly those two, in at most 6 rounds, and the Ansible output
shows each round's lines.

The seed is fixed (collbench_pairs_seed) so that the bad link is one the first rounds measure: a
link no round measures cannot be named by any plan. `pytest -s` prints the run's wall time.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from collbench_py.pairs.planner import Planner
from collbench_py.rundir.planfile import read_plan
from tests.cluster.benchrun import BenchRun, run_bench
from tests.cluster.test_nccl_e2e import TEST_PROFILE
from tests.cluster.test_vcluster import transfer_seconds
from tests.cluster.vcluster import Cluster, install_nccl_tests_standin, run

HOSTS = [f"node{i}" for i in range(1, 9)]
BAD_NODE = "node6"
SEED = "adaptive-e2e-1"
# 5 MB/s: slow enough that the link, not the scheduling of busy shared cores, sets a healthy pair's
# time (an operation of 1 MiB takes ~0.2 s); the bad node and the bad link get a fifth of it.
FABRIC = "40mbit"
SLOW = "8mbit"
MiB = 1024 * 1024
MIN_BYTES = MAX_BYTES = 1 * MiB
# A shaped pair measures a tenth of the others; half is far from it and from a healthy pair's noise.
MIN_DROP = 0.5


def bad_link(
    hosts: list[str] = HOSTS, bad_nodes: tuple[str, ...] = (BAD_NODE,), seed: str = SEED
) -> tuple[str, str]:
    """A pair the first rounds of `seed` measure that leaves the bad nodes out."""
    rounds = Planner(hosts, seed=seed).initial
    return next(p for r in rounds for p in r if not set(p) & set(bad_nodes))


def shape_fleet(cluster: Cluster, bad_nodes: tuple[str, ...], link: tuple[str, str]) -> None:
    """Every data link at FABRIC, the bad nodes' at SLOW, and SLOW between the two ends of `link`.

    A healthy node's traffic is limited where it leaves the node, by htb as shape_pair does (it
    queues where tbf drops, which keeps a healthy pair's measurements close together)."""
    for host in cluster.hosts:
        if host in bad_nodes:
            cluster.shape(host, SLOW, interface="data")
        elif host not in link:
            tc = ["tc", "-n", cluster.node(host).namespace]
            run([*tc, "qdisc", "replace", "dev", "eth1", "root", "handle", "1:", "htb", "default", "1"])
            run([*tc, "class", "add", "dev", "eth1", "parent", "1:", "classid", "1:1", "htb", "rate", FABRIC])
    cluster.shape_pair(*link, SLOW, interface="data", others=FABRIC)


def pipeline_vars(standin: Path, profile: Path, schedule: str = "adaptive", seed: str = SEED) -> dict:
    return {
        "collbench_backend": "nccl-tests",
        "collbench_nccl_tests_source": "prebuilt",
        "collbench_nccl_tests_prebuilt_dir": str(standin),
        "collbench_python": "/usr/bin/python3",
        "collbench_net_if": "eth1",
        "collbench_gpus_per_host": 1,
        "collbench_collectives": ["all_reduce"],
        "collbench_min_bytes": MIN_BYTES,
        "collbench_max_bytes": MAX_BYTES,
        "collbench_step_factor": 2,
        "collbench_iters": 3,
        "collbench_warmup_iters": 1,
        "collbench_timeout_s": 60,
        "collbench_phases": ["pairs"],
        "collbench_pairs": schedule,
        "collbench_pairs_seed": seed,
        "collbench_pairs_min_drop": MIN_DROP,
        "collbench_report_args": ["--profile", str(profile)],
    }


@pytest.fixture(scope="module")
def adaptive_run(
    cluster_factory: Callable[..., Cluster], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Cluster, BenchRun, tuple[str, str]]:
    cluster = cluster_factory(nodes=8, fleet=True)
    work = tmp_path_factory.mktemp("adaptive")
    standin = install_nccl_tests_standin(cluster.workdir / "nccl-tests")
    profile = work / "profile.yml"
    profile.write_text(TEST_PROFILE, encoding="utf-8")
    link = bad_link()
    shape_fleet(cluster, (BAD_NODE,), link)
    try:
        run = run_bench(
            cluster, work / "results", work / "cp", extra_vars=pipeline_vars(standin, profile), limit_s=900
        )
    finally:
        for host in cluster.hosts:
            cluster.unshape(host, "data")
    print(f"\nadaptive pairs, 8 hosts, whole pipeline: {run.seconds:.1f} s (rc {run.rc})")
    return cluster, run, link


def test_shape_pair_slows_that_link_only(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(nodes=3)
    cluster.shape_pair("node1", "node2", "100mbit")
    try:
        shaped = transfer_seconds(cluster, "node1", "node2", 5311)
        back = transfer_seconds(cluster, "node2", "node1", 5312)
        other = transfer_seconds(cluster, "node1", "node3", 5313)
        third = transfer_seconds(cluster, "node3", "node2", 5314)
    finally:
        cluster.unshape("node1")
        cluster.unshape("node2")
    print(f"\nshape_pair: node1->node2 {shaped:.2f} s, back {back:.2f} s, node1->node3 {other:.2f} s")
    assert shaped >= 20 * 8 / 100 * 0.9 and back >= 20 * 8 / 100 * 0.9  # 20 MB at 100 Mbit/s
    assert other * 5 < shaped and third * 5 < shaped, (shaped, other, third)
    restored = transfer_seconds(cluster, "node1", "node2", 5315)
    assert restored * 5 < shaped


def test_adaptive_plan_names_exactly_the_bad_node_and_the_bad_link(
    adaptive_run: tuple[Cluster, BenchRun, tuple[str, str]],
) -> None:
    _, run, link = adaptive_run
    # The report fails what the plan named, so the run says failure (2: a report that failed).
    assert run.rc == 2, run.tail
    plan = read_plan(run.run_dir)
    assert plan is not None and plan.finished, run.tail
    assert plan.schedule == "adaptive" and plan.seed == SEED and plan.collective == "all_reduce"
    assert plan.size_bytes == MAX_BYTES
    named = sorted((d.kind, d.subject) for d in plan.decisions)
    assert named == [("bad link", "--".join(link)), ("bad node", BAD_NODE)], plan.log
    assert len(plan.rounds) <= 6
    # Every launch of the pairs is a measurement the plan recorded, under its round.
    manifest = run.manifest()
    pairs = [e for e in manifest["launches"] if e["kind"] == "pair"]
    assert len(pairs) == sum(len(r.pairs) for r in plan.rounds)
    assert {e["round"] for e in pairs} == {r.number for r in plan.rounds}
    assert all(e["status"] == "ok" for e in pairs), pairs
    assert manifest["pairs"] == {
        "schedule": "adaptive",
        "rounds": len(plan.rounds),
        "plan": "inter/pairs/plan.json",
    }
    # No healthy node left the run or was blamed: the report fails the bad node, fails the bad link
    # as a link (neither of its ends), and passes every other host.
    assert {h["status"] for h in manifest["hosts"].values()} == {"ok"}
    results = json.loads((run.run_dir / "report" / "results.json").read_text())
    failed = sorted(h["host"] for h in results["hosts"] if h["verdict"] == "failed")
    assert failed == [BAD_NODE], [(h["host"], h["verdict"]) for h in results["hosts"]]
    assert [(f["subject"], f["source"]) for f in results["links"]["bad_links"]] == [("--".join(link), "plan")]
    assert results["summary"]["links_failed"] == 1


def test_the_ansible_output_shows_each_round(adaptive_run: tuple[Cluster, BenchRun, tuple[str, str]]) -> None:
    """A line per round when it is planned (its pairs) and when it is measured (baseline, slow
    pairs), and a line per decision, as the plan's debug task prints them."""
    _, run, link = adaptive_run
    plan = read_plan(run.run_dir)
    for r in plan.rounds:
        size = f"{len(r.pairs)} pair(s): {', '.join(f'{a}--{b}' for a, b in r.pairs)}"
        assert f'"round {r.number} of at most 6 ({r.kind}): {size}' in run.output
        assert f'"round {r.number} ({r.kind}, {len(r.pairs)} pairs): baseline median' in run.output
    assert re.search(rf'"bad node {BAD_NODE}: slow with \d of its \d partners', run.output)
    assert f'"bad link {"--".join(link)}: slow in all 2 measurements' in run.output
    assert f'"done after {len(plan.rounds)} rounds' in run.output
