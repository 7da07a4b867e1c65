"""The whole pipeline through Slurm (`collbench_launcher: srun`) on a real Slurm cluster of 5 nodes.

One Slurm cluster for the module (tests/cluster/slurm.py: its head is the login node, reached over ssh
as the inventory's `slurm_login` host, where salloc, srun and scancel run). node5's slurmd is stopped
before the runs: Slurm calls it down* ("Not responding"). Two runs of bench.yml, at the same time (each
allocation takes one of a node's two CPUs), to keep the module short:

- torch, its nodes from the partition (inventory/slurm_inventory.py, sinfo run on the login node over
  ssh as docs/slurm.md says): intra, all and pairs on node1-4, node4's link shaped to 100mbit: every
  launch a COMPLETED job step of one allocation, the shaped node singled out by the report as on the SSH
  cluster, no node ssh key made, node5 reported as not measured with Slurm's reason;
- nccl-tests (the stand-in, MPI over PMIx: srun --mpi=pmix) on node1-4: intra and all, node3's intra-node
  rank frozen: its step runs past its Slurm time limit (one minute, from the step options), Slurm ends it
  and it is recorded `timeout`; the launch across all hosts still runs and completes.

Both allocations are released at the end (squeue empty).
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from collbench_py.parsers import parse_file
from tests.cluster.benchrun import BenchRun, find_process, run_bench, write_test_profile
from tests.cluster.slurm import HEAD, PACKAGES, SlurmCluster, missing_tools
from tests.cluster.vcluster import Cluster, install_nccl_tests_standin

REPO = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024
SLOW_HOST = "node4"
FROZEN_HOST = "node3"
UNUSABLE_HOST = "node5"  # its slurmd stopped before the runs
# Runs given the cluster's own inventory: limited to the usable nodes, as a user would (--limit).
ON_THE_USABLE_NODES = ["--limit", f"all:!{UNUSABLE_HOST}"]
# A rank of the stand-in (run by its interpreter), not the srun that names the same binary.
FROZEN = r"python3? \S*/all_reduce_perf "
# The project's bound, well past the step's Slurm time limit (one minute, checked by slurmctld about
# every 30 s): the frozen step is ended by Slurm.
NCCL_TIMEOUT_S = 150
STEP_TIME_LIMIT = ["--time=1"]
BUSY_WAIT_S = 3
FABRIC = "800mbit"


@dataclass(frozen=True)
class SlurmRuns:
    cluster: Cluster
    slurm: SlurmCluster
    torch: BenchRun
    nccl: BenchRun
    busy: BenchRun
    wall_s: float


def torch_vars() -> dict:
    return {
        "collbench_launcher": "srun",
        "collbench_phases": ["intra", "all", "pairs"],
        # Sizes where a 100mbit link is measured by its bandwidth, not its latency.
        "collbench_max_bytes": 4 * MiB,
    }


def nccl_vars(standin: Path) -> dict:
    return {
        "collbench_launcher": "srun",
        "collbench_backend": "nccl-tests",
        "collbench_nccl_tests_source": "prebuilt",
        "collbench_nccl_tests_prebuilt_dir": str(standin),
        "collbench_python": "/usr/bin/python3",  # no torch needed: its probe fails at once
        "collbench_phases": ["intra", "all"],
        "collbench_timeout_s": NCCL_TIMEOUT_S,
        # After the project's own --time (the bound rounded up to minutes): the later option wins.
        "collbench_slurm_step_extra_args": STEP_TIME_LIMIT,
    }


def partition_inventory(cluster: Cluster, slurm: SlurmCluster, scratch: Path) -> tuple[list[Path], dict]:
    """What a user on a Slurm site gives bench.yml: the inventory script for the partition, and a
    file with the connection settings (the cluster's inventory without its group of nodes: which
    nodes run is sinfo's answer). sinfo runs on the login node, through the wrapper docs/slurm.md shows."""
    inventory = yaml.safe_load(cluster.inventory_path.read_text())
    hosts = inventory["all"]["children"].pop("gpu_nodes")["hosts"]
    inventory["all"]["hosts"] = hosts
    connection = scratch / "connection.yml"
    connection.write_text(yaml.safe_dump(inventory, sort_keys=False))
    sinfo = scratch / "sinfo-on-login-node"
    sinfo.write_text(
        f'#!/bin/bash\nexec ssh -F {cluster.ssh_config_path} {HEAD} sinfo $(printf "%q " "$@")\n'
    )
    sinfo.chmod(0o755)
    env = {"COLLBENCH_SLURM_PARTITION": slurm.partition, "COLLBENCH_SLURM_SINFO": str(sinfo)}
    return [connection, REPO / "inventory" / "slurm_inventory.py"], env


@pytest.fixture(scope="module")
def runs(cluster_factory, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmRuns]:
    missing = missing_tools()
    if missing:
        pytest.fail(f"missing Slurm tools: {', '.join(missing)} (Debian: {PACKAGES})", pytrace=False)
    started = time.monotonic()
    cluster = cluster_factory(nodes=5, node_ssh=False)
    slurm = SlurmCluster.up(cluster)
    slurm.stop_slurmd(UNUSABLE_HOST)
    scratch = tmp_path_factory.mktemp("slurm-e2e")
    inventory, inventory_env = partition_inventory(cluster, slurm, scratch)
    standin = install_nccl_tests_standin(cluster.workdir / "nccl-tests")
    # Every link shaped, the slow host's to an eighth: healthy pairs then measure their links, not
    # how busy the machine's cores are (two runs at once), so one slow node in a fleet of four (half
    # the pairs) stands out against a tight baseline.
    for host in cluster.hosts:
        cluster.shape(host, "100mbit" if host == SLOW_HOST else FABRIC)
    freeze = (FROZEN_HOST, FROZEN, lambda: cluster.freeze(FROZEN_HOST, FROZEN), "freeze")
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            torch = pool.submit(
                run_bench,
                cluster,
                scratch / "torch" / "results",
                scratch / "torch" / "cp",
                extra_vars={
                    **torch_vars(),
                    "collbench_report_args": [
                        "--profile",
                        str(write_test_profile(scratch / "torch")),
                        "--reference-min-bytes",
                        "2M",
                    ],
                },
                inventory=inventory,
                env=inventory_env,
                limit_s=900,
            )
            nccl = pool.submit(
                run_bench,
                cluster,
                scratch / "nccl" / "results",
                scratch / "nccl" / "cp",
                extra_vars=nccl_vars(standin),
                watch=[freeze],
                playbook_args=ON_THE_USABLE_NODES,
                limit_s=900,
            )
            torch_run, nccl_run = torch.result(), nccl.result()
        busy_run = run_while_busy(cluster, slurm, scratch / "busy")
        wall = time.monotonic() - started
        print(
            f"slurm e2e: torch {torch_run.seconds:.0f} s, nccl {nccl_run.seconds:.0f} s, {wall:.0f} s in all"
        )
        yield SlurmRuns(cluster, slurm, torch_run, nccl_run, busy_run, wall)
    finally:
        for host in cluster.hosts:
            cluster.unshape(host)
        slurm.down()


def run_while_busy(cluster: Cluster, slurm: SlurmCluster, scratch: Path) -> BenchRun:
    """bench.yml while another job holds every CPU of node1: the allocation is never granted."""
    hold = ["salloc", "--no-shell", "--job-name", "other-user", "-N", "1", "-w", "node1", "-n", "2"]
    holder = slurm.run([*hold, "--time", "10"], check=True)
    try:
        return run_bench(
            cluster,
            scratch / "results",
            scratch / "cp",
            extra_vars={
                "collbench_launcher": "srun",
                "collbench_slurm_allocation_wait_s": BUSY_WAIT_S,
                "collbench_phases": ["intra"],
            },
            playbook_args=ON_THE_USABLE_NODES,
            limit_s=600,
        )
    finally:
        job = holder.stderr.split("allocation")[-1].strip()
        slurm.run(["scancel", job])


def launches(run: BenchRun) -> list[dict]:
    return run.manifest()["launches"]


def test_torch_run_every_launch_is_a_completed_step_of_one_allocation(runs: SlurmRuns) -> None:
    manifest = runs.torch.manifest()
    assert manifest["launcher"] == "srun", runs.torch.tail
    slurm = manifest["slurm"]
    assert slurm["job_id"] and slurm["nodes"] == "node[1-4]" and slurm["state"] == "released", slurm
    assert slurm["submit_host"] == "head"
    entries = manifest["launches"]
    kinds = [entry["kind"] for entry in entries]
    assert kinds.count("intra") == 4 and kinds.count("all") == 1 and kinds.count("pair") == 6, kinds
    assert [e["status"] for e in entries] == ["ok"] * len(entries), entries
    assert {e["launcher"] for e in entries} == {"srun"}
    assert {e["slurm_state"] for e in entries} == {"COMPLETED"}
    steps = [e["slurm_step"] for e in entries]
    assert len(set(steps)) == len(steps), steps
    assert all(re.fullmatch(rf"{slurm['job_id']}\.\d+", step) for step in steps), steps


def test_pairs_of_a_round_are_concurrent_steps(runs: SlurmRuns) -> None:
    pairs = [e for e in launches(runs.torch) if e["kind"] == "pair"]
    for round_ in (1, 2, 3):
        two = [e for e in pairs if e["round"] == round_]
        assert len(two) == 2, pairs
        # Each started before the other ended.
        assert max(e["started_at"] for e in two) <= min(e["finished_at"] for e in two), two


def test_torch_logs_are_collected_from_rank_zero(runs: SlurmRuns) -> None:
    root = runs.torch.run_dir
    for entry in launches(runs.torch):
        log = root / entry["log"]
        assert log.is_file(), entry
        text = log.read_text()
        assert "Avg bus bandwidth" in text, text[-1000:]
    said = (root / "inter" / "all").glob("launcher-*.out")
    assert any("launching StepId=" in path.read_text() for path in said)


def test_the_shaped_node_is_singled_out(runs: SlurmRuns) -> None:
    output = runs.torch.output
    summary = {
        line.split()[0]: line.split()[1].lower()
        for line in re.findall(r'^\s+"(node\d+\s+\w+.*?)",?$', output, re.MULTILINE)
    }
    assert summary.get(SLOW_HOST) == "failed", summary
    assert [host for host, verdict in summary.items() if verdict == "failed"] == [SLOW_HOST], summary
    root = runs.torch.run_dir
    busbw = {}
    for pair in (p for p in (root / "inter" / "pairs").iterdir() if p.is_dir()):  # not plan.json
        rows = parse_file(pair / "all_reduce.log").runs[0].rows
        busbw[pair.name] = statistics.median(row.oop.busbw for row in rows if row.size >= 2 * MiB)
    slow = [bw for pair, bw in busbw.items() if SLOW_HOST in pair.split("--")]
    healthy = [bw for pair, bw in busbw.items() if SLOW_HOST not in pair.split("--")]
    assert max(slow) * 3 < min(healthy), busbw


def test_no_node_ssh_key_is_made(runs: SlurmRuns) -> None:
    output = runs.torch.output
    assert "mpirun logs into the nodes over ssh" not in output
    for host in runs.cluster.hosts:
        dot_ssh = runs.cluster.home(host) / ".ssh"
        assert sorted(p.name for p in dot_ssh.iterdir()) == [], host
    run_roots = list((runs.cluster.home("node1") / "collbench" / "runs").glob("*/*/ssh"))
    assert run_roots == []


def test_nccl_tests_across_all_hosts_run_over_pmix(runs: SlurmRuns) -> None:
    entries = launches(runs.nccl)
    (across,) = [e for e in entries if e["kind"] == "all"]
    assert (across["status"], across["slurm_state"]) == ("ok", "COMPLETED"), across
    log = runs.nccl.run_dir / across["log"]
    parsed = parse_file(log).runs[0]
    assert parsed.nranks == 4 and parsed.rows, log.read_text()[-2000:]
    assert "srun: mpi                 : pmix" in log.read_text()


def test_a_frozen_step_past_its_time_limit_ends_timeout_and_the_next_launches_run(runs: SlurmRuns) -> None:
    assert "freeze" in runs.nccl.events, runs.nccl.events
    entries = launches(runs.nccl)
    intra = {e["hosts"][0]: e for e in entries if e["kind"] == "intra"}
    frozen = intra[FROZEN_HOST]
    # Slurm ended it at its time limit, long before the project's own bound.
    assert (frozen["status"], frozen["slurm_state"]) == ("timeout", "TIMEOUT"), frozen
    took = datetime.fromisoformat(frozen["finished_at"]) - datetime.fromisoformat(frozen["started_at"])
    assert took.total_seconds() < NCCL_TIMEOUT_S - 20, frozen
    said = (runs.nccl.run_dir / frozen["log"]).read_text()  # srun's lines with the ranks' output
    assert re.search(
        rf"STEP {re.escape(frozen['slurm_step'])} ON {FROZEN_HOST} CANCELLED .* TIME LIMIT", said
    ), said
    others = [e for host, e in intra.items() if host != FROZEN_HOST]
    assert [(e["status"], e["slurm_state"]) for e in others] == [("ok", "COMPLETED")] * 3, others
    (across,) = [e for e in entries if e["kind"] == "all"]
    assert across["started_at"] >= frozen["finished_at"] and across["status"] == "ok", (frozen, across)
    assert runs.nccl.manifest()["hosts"][FROZEN_HOST]["status"] == "timeout"
    # Nothing of it is left running on the node.
    assert find_process(runs.cluster, FROZEN_HOST, FROZEN) == {}


def test_the_node_whose_slurmd_is_stopped_is_not_measured_with_slurms_reason(runs: SlurmRuns) -> None:
    manifest = runs.torch.manifest()
    assert sorted(manifest["hosts"]) == ["node1", "node2", "node3", "node4"]
    unusable = [(u["host"], u["state"], u["reason"]) for u in manifest["slurm"]["unusable"]]
    assert unusable == [(UNUSABLE_HOST, "down*", "Not responding")], manifest["slurm"]
    results = json.loads((runs.torch.run_dir / "report" / "results.json").read_text())
    assert [(n["host"], n["state"], n["reason"]) for n in results["not_measured"]] == unusable
    assert UNUSABLE_HOST not in {h["host"] for h in results["hosts"]}
    assert re.search(rf"not measured +{UNUSABLE_HOST} \(down\*\): Not responding", runs.torch.output)
    # Never contacted: nothing of any run on it.
    assert not (runs.cluster.home(UNUSABLE_HOST) / "collbench").exists()


def test_every_allocation_is_released(runs: SlurmRuns) -> None:
    assert runs.slurm.run(["squeue", "-h"], check=True).stdout.strip() == ""
    jobs = {runs.torch.manifest()["slurm"]["job_id"], runs.nccl.manifest()["slurm"]["job_id"]}
    assert len(jobs) == 2
    # The nccl-tests run was limited to the usable nodes (--limit): released all the same.
    assert runs.nccl.manifest()["slurm"]["state"] == "released"
    print(f"slurm e2e wall time: {runs.wall_s:.0f} s", file=sys.stderr)


def test_the_runs_say_which_job_they_use(runs: SlurmRuns) -> None:
    job = runs.torch.manifest()["slurm"]["job_id"]
    assert f"Slurm job {job} on node[1-4]" in runs.torch.output
    assert json.dumps(runs.torch.manifest()["slurm"])  # plain JSON


def test_a_busy_partition_stops_the_run_before_any_launch(runs: SlurmRuns) -> None:
    busy = runs.busy
    assert busy.rc != 0, busy.tail
    manifest = busy.manifest()
    slurm = manifest["slurm"]
    assert slurm["state"] == "not granted", slurm
    reason = slurm["reason"]
    assert reason.startswith(
        f"Slurm did not grant the allocation of 4 nodes in the default partition within {BUSY_WAIT_S} s"
    ), reason
    assert reason.endswith("no launch was started"), reason
    # Said once, and every node recorded as not measured with that reason.
    assert busy.output.count(f'"msg": "{reason}"') == 1, busy.tail
    assert {h["status"] for h in manifest["hosts"].values()} == {"failed"}
    assert {h["reason"] for h in manifest["hosts"].values()} == {reason}
    assert manifest["launches"] == [] and "TASK [benchmark : Launch |" not in busy.output
    # salloc withdrew the job it left pending: nothing of the run is queued (the holder is cancelled).
    assert slurm["job_id"] is None, slurm
