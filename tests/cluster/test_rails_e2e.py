"""End to end: rail localisation in the adaptive pair schedule on an 8-host test cluster with 4 rails.

Every node has 4 data interfaces rail0..rail3 (HCA mlx5_k on rail k), each rail on a bridge of its own:
one leaf switch per rail, every port at the cluster's rail rate (40mbit). The pairs' stand-in
nccl-tests run over Open MPI's TCP BTL on all four rails (`collbench_net_if: rail0,...,rail3`), which
stripes each message over them as NCCL's rings spread over every rail: one rail port at a quarter makes
its pairs about 3x slower, a whole rail at a quarter every pair about 4x (the first two tests show it on
this cluster). The rail checks run the stand-in ib_write_bw, NIC k <-> NIC k, in the perftest role's
prebuilt mode.

Three runs of bench.yml (pairs phase, adaptive, fixed seed, rail map given in the inventory, a sample of
4 clean pairs measured rail by rail): healthy -> nothing named and the report passes; node3's port on
rail 2 at a quarter -> exactly "bad nic node3:rail2", no node failed but node3, whose verdict names the
port; rail 1's bridge at a quarter (a slow leaf) -> exactly "bad rail rail1", no host failed.
`pytest -s` prints each run's wall time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from collbench_py.rundir.planfile import read_plan
from tests.cluster.benchrun import TEST_PROFILE, BenchRun, run_bench
from tests.cluster.vcluster import Cluster, install_nccl_tests_standin, install_node_standins

HOSTS = [f"node{i}" for i in range(1, 9)]
RAILS = 4
HCAS = [f"mlx5_{k}" for k in range(RAILS)]
RAIL_IFS = ",".join(f"rail{k}" for k in range(RAILS))
SEED = "rails-e2e-1"
BAD_HOST, BAD_HOST_RAIL = "node3", 2
BAD_RAIL = 1
# A quarter of the rail rate (40mbit): a port or a leaf at a quarter of its line.
QUARTER = "10mbit"
MiB = 1024 * 1024
# A pair with node3's rail 2 at a quarter measures about a third of a healthy pair (striping waits for
# its slowest rail); half is far from both and from a healthy pair's noise, as in test_pairs_adaptive.
PAIR_MIN_DROP = 0.5
# A healthy rail reads ~400 Gb/s +-3 % (the stand-in's report factor), one at a quarter ~100: a rail
# slower than 0.7 x the night's reference is slow. The shipped 0.1 would sit within reach of the
# scheduling noise of 2 shared cores running 16 rail clients at once.
RAIL_MIN_DROP = 0.3
LIMIT_S = 600
# The healthy run provisioned the nodes (their work directory, the tools checked) and read their
# topology (the rail map comes from the inventory here): the next two runs on the same nodes skip
# those plays (~50 s of an 8-host run on 2 loaded cores); every other play runs as a night's does.
AGAIN = ["--skip-tags", "provision,topology"]
MPIRUN = shutil.which("mpirun")
needs_mpi = pytest.mark.skipif(MPIRUN is None, reason="no mpirun (Debian: openmpi-bin)")
pytestmark = pytest.mark.cluster


@dataclass(frozen=True)
class Bench:
    cluster: Cluster
    scratch: Path
    variables: dict[str, Any]


@dataclass(frozen=True)
class RailRun:
    run: BenchRun
    results: dict[str, Any]

    @property
    def plan(self):
        plan = read_plan(self.run.run_dir)
        assert plan is not None and plan.finished, self.run.tail
        return plan

    @property
    def named(self) -> list[tuple[str, str]]:
        return sorted((d.kind, d.subject) for d in self.plan.decisions)

    @property
    def rails(self) -> dict[str, Any]:
        return self.results["rails"]

    @property
    def verdicts(self) -> dict[str, str]:
        return {h["host"]: h["verdict"] for h in self.results["hosts"]}


@pytest.fixture(scope="module")
def rails_cluster(cluster_factory: Callable[..., Cluster]) -> Cluster:
    # Fleet nodes: no ssh between them until the project sets it up (the rail checks' servers are
    # started over that ssh too); the rails carry the data.
    return cluster_factory(nodes=len(HOSTS), fleet=True, rails=RAILS, name=f"rl{os.getpid() % 10**7}")


@pytest.fixture(scope="module")
def bench(rails_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Bench:
    scratch = tmp_path_factory.mktemp("rails-e2e")
    profile = scratch / "test-cluster-rails.yml"
    profile.write_text(TEST_PROFILE.replace("name: test-cluster-cpu", "name: test-cluster-rails"))
    variables = {
        "collbench_backend": "nccl-tests",
        "collbench_nccl_tests_source": "prebuilt",
        "collbench_nccl_tests_prebuilt_dir": str(install_nccl_tests_standin(scratch / "nccl-tests")),
        "collbench_perftest_source": "prebuilt",
        "collbench_perftest_prebuilt_dir": str(install_node_standins(scratch / "standins")),
        "collbench_python": "/usr/bin/python3",
        "collbench_net_if": RAIL_IFS,
        "collbench_gpus_per_host": 1,
        "collbench_collectives": ["all_reduce"],
        "collbench_min_bytes": MiB,
        "collbench_max_bytes": MiB,
        "collbench_step_factor": 2,
        "collbench_iters": 3,
        "collbench_warmup_iters": 1,
        "collbench_timeout_s": 60,
        "collbench_phases": ["pairs"],
        "collbench_pairs": "adaptive",
        "collbench_pairs_seed": SEED,
        "collbench_pairs_min_drop": PAIR_MIN_DROP,
        "collbench_rails": HCAS,
        "collbench_rails_sample": 4,
        "collbench_rails_min_drop": RAIL_MIN_DROP,
        # The stand-in ib_write_bw moves bytes for 1 s at most (-D only shortens it); size is reported.
        "collbench_rails_seconds": 1,
        "collbench_rails_size": MiB,
        "collbench_report_args": ["--profile", str(profile)],
    }
    return Bench(rails_cluster, scratch, variables)


def rails_run(bench: Bench, label: str, playbook_args: list[str] | None = None) -> RailRun:
    run = run_bench(
        bench.cluster,
        bench.scratch / label / "results",
        bench.scratch / label / "control",
        extra_vars=bench.variables,
        playbook_args=playbook_args,
        limit_s=LIMIT_S,
    )
    print(f"\nrails e2e ({label}), 8 hosts: rc {run.rc} in {run.seconds:.1f} s", file=sys.stderr)
    path = run.run_dir / "report" / "results.json"
    assert path.is_file(), f"no {path}:\n{run.tail}"
    return RailRun(run, json.loads(path.read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def healthy(bench: Bench) -> RailRun:
    return rails_run(bench, "healthy")


@pytest.fixture(scope="module")
def bad_nic(bench: Bench, healthy: RailRun) -> RailRun:  # runs after the healthy one, shaped on its own
    bench.cluster.shape_rail_port(BAD_HOST, BAD_HOST_RAIL, QUARTER)
    try:
        return rails_run(bench, "bad-nic", AGAIN)
    finally:
        bench.cluster.unshape_rails()


@pytest.fixture(scope="module")
def bad_rail(bench: Bench, bad_nic: RailRun) -> RailRun:
    bench.cluster.shape_rail(BAD_RAIL, QUARTER)
    try:
        return rails_run(bench, "bad-rail", AGAIN)
    finally:
        bench.cluster.unshape_rails()


# ---- the cluster: pair traffic crosses every rail, so a slow rail slows the pair -------------------


def standin_pair(cluster: Cluster, a: str, b: str) -> float:
    """Busbw (GB/s) of a 1 MiB all_reduce between `a` and `b`: the stand-in under mpirun over the
    rails, as the pairs phase launches it (btl_tcp_if_include and oob_tcp_if_include = the rails), with
    ssh of this test's own (fleet nodes have none before the project sets it up)."""
    standin = install_nccl_tests_standin(cluster.workdir / "nccl-tests")
    rsh = f"-i {cluster.key_path} -o UserKnownHostsFile={cluster.known_hosts_path} -o BatchMode=yes"
    argv = ["timeout", "120", "mpirun", "--allow-run-as-root", "--bind-to", "none", "-np", "2"]
    argv += ["--host", f"{a},{b}", "--mca", "plm_rsh_args", rsh, "--mca", "btl", "tcp,self"]
    argv += ["--mca", "btl_tcp_if_include", RAIL_IFS, "--mca", "oob_tcp_if_include", RAIL_IFS]
    argv += [str(standin / "all_reduce_perf"), "-b", "1M", "-e", "1M", "-n", "3", "-w", "1", "-c", "0"]
    result = cluster.ssh(a, argv, timeout=150)
    found = re.search(r"Avg bus bandwidth\s*:\s*([\d.]+)", result.stdout)
    assert result.returncode == 0 and found, result.stdout[-2000:] + result.stderr[-2000:]
    return float(found.group(1))


def rail_tx_bytes(cluster: Cluster, host: str) -> list[int]:
    paths = [f"/sys/class/net/rail{k}/statistics/tx_bytes" for k in range(RAILS)]
    return [int(v) for v in cluster.exec(host, ["cat", *paths], check=True).stdout.split()]


@needs_mpi
def test_a_pair_stripes_its_traffic_over_every_rail(rails_cluster: Cluster) -> None:
    before = rail_tx_bytes(rails_cluster, "node1")
    standin_pair(rails_cluster, "node1", "node2")
    sent = [after - b for after, b in zip(rail_tx_bytes(rails_cluster, "node1"), before, strict=True)]
    print(f"\nnode1 bytes sent per rail by one 1 MiB all_reduce pair run: {sent}")
    # 5 operations x 2 (in place and out of place) x 1 MiB: each rail carried a share, none all of it
    assert sum(sent) > 5 * MiB, sent
    assert min(sent) > 0.15 * sum(sent), sent


@needs_mpi
def test_a_slow_rail_port_slows_its_pairs_and_a_slow_rail_every_pair(rails_cluster: Cluster) -> None:
    cluster = rails_cluster
    healthy = {pair: standin_pair(cluster, *pair) for pair in (("node1", "node3"), ("node2", "node4"))}
    with_node3, without = ("node1", "node3"), ("node2", "node4")
    cluster.shape_rail_port(BAD_HOST, BAD_HOST_RAIL, QUARTER)
    try:
        port = {pair: standin_pair(cluster, *pair) for pair in healthy}
        # Load from elsewhere on this machine only ever lowers a pair's busbw: the pair that must not
        # slow down is measured again, up to twice, and keeps its best.
        for _ in range(2):
            if port[without] > 0.7 * healthy[without]:
                break
            port[without] = max(port[without], standin_pair(cluster, *without))
    finally:
        cluster.unshape_rails()
    cluster.shape_rail(BAD_RAIL, QUARTER)
    try:
        leaf = {pair: standin_pair(cluster, *pair) for pair in healthy}
    finally:
        cluster.unshape_rails()
    print(f"\nbusbw GB/s, healthy {healthy}, node3 rail2 at a quarter {port}, rail1 at a quarter {leaf}")
    assert port[with_node3] < 0.5 * healthy[with_node3], (healthy, port)
    assert port[without] > 0.7 * healthy[without], (healthy, port)
    assert all(leaf[pair] < 0.5 * healthy[pair] for pair in healthy), (healthy, leaf)


# ---- the pipeline: adaptive plan with rail checks ----------------------------------------------------


def rail_launches(run: RailRun) -> list[dict[str, Any]]:
    return [e for e in run.run.manifest()["launches"] if e["kind"] == "rails"]


def test_a_healthy_fleet_names_nothing_and_passes(healthy: RailRun) -> None:
    assert healthy.run.rc == 0, healthy.run.tail
    assert healthy.named == [], healthy.plan.log
    assert healthy.verdicts == dict.fromkeys(HOSTS, "passed")
    assert healthy.rails["findings"] == []
    assert healthy.rails["hosts"] == {
        host: [{"index": k, "hca": hca, "gpu": k} for k, hca in enumerate(HCAS)] for host in HOSTS
    }
    # The rail sample ran: 4 disjoint clean pairs, every rail of each, all near the line
    sampled = {tuple(m["pair"]) for m in healthy.rails["measurements"]}
    assert len(sampled) == 4 and len({h for p in sampled for h in p}) == 8, sampled
    values = [m["gbits"] for m in healthy.rails["measurements"]]
    assert len(values) == 16 and min(values) > 300, values
    assert all(e["status"] == "ok" for e in rail_launches(healthy)), rail_launches(healthy)
    print(f"rails e2e wall time: healthy {healthy.run.seconds:.1f} s", file=sys.stderr)


def test_a_slow_port_names_exactly_that_nic(bad_nic: RailRun) -> None:
    assert bad_nic.named == [("bad nic", f"{BAD_HOST}:rail{BAD_HOST_RAIL}")], bad_nic.plan.log
    (decision,) = bad_nic.plan.decisions
    assert (decision.host, decision.rail, decision.hca) == (BAD_HOST, BAD_HOST_RAIL, "mlx5_2")
    # Witnessed rail by rail with two or more known-good partners, node3's rail 2 slow in each
    rail_witnesses = [w for w in decision.witnesses if w.rail == BAD_HOST_RAIL]
    partners = {h for w in rail_witnesses for h in w.pair if h != BAD_HOST}
    assert len(partners) >= 2 and BAD_HOST not in partners, decision.witnesses
    assert all(w.gbits is not None and w.gbits < 200 for w in rail_witnesses), rail_witnesses
    (finding,) = bad_nic.rails["findings"]
    assert (finding["kind"], finding["subject"], finding["host"], finding["rail"], finding["hca"]) == (
        "bad nic",
        "node3:rail2",
        BAD_HOST,
        BAD_HOST_RAIL,
        "mlx5_2",
    )
    assert all(e["status"] == "ok" for e in rail_launches(bad_nic)), rail_launches(bad_nic)


def test_a_bad_nic_fails_its_host_by_port_and_no_other(bad_nic: RailRun) -> None:
    assert bad_nic.run.rc == 2, bad_nic.run.tail  # the report failed a host: the run says so
    assert bad_nic.verdicts == {host: "failed" if host == BAD_HOST else "passed" for host in HOSTS}
    (node3,) = [h for h in bad_nic.results["hosts"] if h["host"] == BAD_HOST]
    reasons = " ".join(node3["reasons"])
    assert "mlx5_2" in reasons and "rail 2" in reasons, node3["reasons"]
    assert "bad node" not in reasons, node3["reasons"]
    assert bad_nic.results["links"]["counts"]["bad_nodes"] == 0


def test_a_slow_leaf_names_exactly_that_rail_and_no_host(bad_rail: RailRun) -> None:
    assert bad_rail.named == [("bad rail", f"rail{BAD_RAIL}")], bad_rail.plan.log
    (decision,) = bad_rail.plan.decisions
    assert (decision.host, decision.rail) == (None, BAD_RAIL)
    # Rail 1 slow in at least 3 host-disjoint pairs
    pairs = sorted({tuple(w.pair) for w in decision.witnesses if w.rail == BAD_RAIL})
    disjoint: list[tuple[str, ...]] = []
    for pair in pairs:
        if not {h for p in disjoint for h in p} & set(pair):
            disjoint.append(pair)
    assert len(disjoint) >= 3, decision.witnesses
    assert [(f["kind"], f["subject"], f["host"]) for f in bad_rail.rails["findings"]] == [
        ("bad rail", f"rail{BAD_RAIL}", None)
    ]
    # Fabric-wide: the run fails, no host does
    assert bad_rail.run.rc == 2, bad_rail.run.tail
    assert bad_rail.verdicts == dict.fromkeys(HOSTS, "passed")
    assert bad_rail.results["links"]["counts"]["bad_nodes"] == 0
