"""End to end: the nccl-tests path of bench.yml on a GPU-fleet stand-in.

Four fleet nodes (management on eth0, data on eth1, their own name on 127.0.1.1, no ssh between them,
an nvidia-smi replaying an idle 8x H100 node; node3's hangs) and the stand-in nccl-tests binaries,
which measure for real over MPI, given to the nccl_tests role as prebuilt binaries. Three runs of the
real pipeline share one cluster:

- the whole pipeline under `collbench_backend: auto`, every phase, node4's DATA link shaped to 100mbit
  for the whole run: the hung node must leave the run alone (not turn the fleet to torch), the others
  are measured with nccl-tests under mpirun over the data network, the report singles out node4;
- the pairs again with one rank of a pair launch frozen (SIGSTOP): that launch is ended at its bound
  and recorded `timeout`, the next rounds run;
- the torch backend with torchrun across the fleet hosts (the static rendezvous form).

Every run's ssh key, authorized_keys line and known_hosts must be gone from the nodes afterwards.
`pytest -s` prints each run's wall time.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from collbench_py.parsers import parse_file
from tests.cluster.benchrun import VENV_PYTHON, BenchRun, find_process, run_bench, write_test_profile
from tests.cluster.vcluster import Cluster, alive, install_nccl_tests_standin

HUNG = "node3"  # its nvidia-smi hangs on every call
SLOW = "node4"  # its data link is shaped to 100mbit during the main run
MEASURED = ["node1", "node2", "node4"]
HEALTHY_PAIR = ("node1", "node2")
COLLECTIVES = ["all_reduce", "all_gather"]
MiB = 1024 * 1024
# 1 and 8 MiB (step factor 8): 8 MiB is where bandwidth, not latency, shows; two sizes keep the
# launches over the 100mbit link short.
SIZES = {1 * MiB, 8 * MiB}
PROBE_TIMEOUT_S = 5
# The pair launch frozen in the second run: round 1 of the pairs of node1, node2, node4 is
# node2--node4 (collbench_py.pairs.schedule.round_robin_pairs); node4 runs its second rank.
FROZEN_HOST = "node4"
FROZEN_PAIR = ["node2", "node4"]
FROZEN_TIMEOUT_S = 30
FROZEN_KILL_AFTER_S = 5
# The rank itself (the stand-in is a Python script run through its shebang), not mpirun or a
# wrapper whose command line names the binary too.
RANK = r"^\S*python\S* \S*/all_reduce_perf( |$)"

# The stand-in reports H100s but measures over TCP on shared cores: judge with fleet-relative checks
# only, as the SSH test cluster's own profile does.
TEST_PROFILE = """\
name: test-fleet-standin
description: "GPU-fleet stand-in: H100s reported, nccl-tests measured over MPI on shared CPU cores"
pass_fraction: 0.9
fleet:
  min_drop: 0.75
  min_drop_source: "MPI over TCP on shared CPU cores: a healthy link once measured half the others"
intra: {}
"""


@dataclass(frozen=True)
class Fleet:
    cluster: Cluster
    standin: Path
    profile: Path


@dataclass(frozen=True)
class Measured:
    run: BenchRun
    eth_sent: dict[str, dict[str, int]]  # bytes each node sent per interface during the run
    ssh_left: dict[str, list[str]]  # what the run left of its ssh setup, per node


@dataclass(frozen=True)
class Frozen:
    run: BenchRun
    frozen_pids: list[int]
    frozen_at: datetime | None  # when the rank was stopped (UTC)
    gone_at: datetime | None  # when the last stopped process had gone (UTC)
    ssh_left: dict[str, list[str]]


def now() -> datetime:
    return datetime.now(UTC)


def utc(stamp: str) -> datetime:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def tx_bytes(cluster: Cluster) -> dict[str, dict[str, int]]:
    counters = {}
    for host in cluster.hosts:
        read = ["cat", "/sys/class/net/eth0/statistics/tx_bytes", "/sys/class/net/eth1/statistics/tx_bytes"]
        eth0, eth1 = cluster.exec(host, read, check=True).stdout.split()
        counters[host] = {"eth0": int(eth0), "eth1": int(eth1)}
    return counters


def ssh_traces(cluster: Cluster, run_dir: Path) -> dict[str, list[str]]:
    """Per node: whatever of a run's ssh setup is still there. A fleet node starts with an empty
    ~/.ssh, so any file with content in it is the run's; and no key or known_hosts anywhere under
    the node's work directory, nor anything named after the run in /tmp (shared by the nodes)."""
    run_id = run_dir.name
    left: dict[str, list[str]] = {}
    for host in cluster.hosts:
        home = cluster.home(host)
        found = [
            f"{path}: {path.read_text(errors='replace').strip()[:200]}"
            for path in sorted((home / ".ssh").rglob("*"))
            if path.is_file() and path.read_text(errors="replace").strip()
        ]
        found += [
            str(path)
            for path in sorted((home / "collbench").rglob("*"))
            if path.is_file() and re.match(r"(id_\w+|known_hosts|authorized_keys)", path.name)
        ]
        left[host] = found
    left["/tmp"] = [str(path) for path in Path("/tmp").glob(f"*{run_id}*")]
    return left


@pytest.fixture(scope="module")
def fleet(cluster_factory: Callable[..., Cluster], tmp_path_factory: pytest.TempPathFactory) -> Fleet:
    cluster = cluster_factory(nodes=4, fleet=True, hang_nvidia_smi=[HUNG])
    scratch = tmp_path_factory.mktemp("nccl-e2e")
    profile = scratch / "test-fleet-standin.yml"
    profile.write_text(TEST_PROFILE)
    # Where every node sees it: the nodes share this machine's filesystem.
    return Fleet(cluster, install_nccl_tests_standin(cluster.workdir / "nccl-tests"), profile)


def nccl_vars(fleet: Fleet, **extra: Any) -> dict[str, Any]:
    return {
        "collbench_backend": "auto",
        "collbench_nccl_tests_source": "prebuilt",
        "collbench_nccl_tests_prebuilt_dir": str(fleet.standin),
        "collbench_provision": False,
        # nccl-tests need no torch: the facts' torch probe fails at once instead of importing torch
        # on 2 loaded cores within the short probe limit.
        "collbench_python": "/usr/bin/python3",
        "collbench_net_if": "eth1",
        "collbench_probe_timeout_s": PROBE_TIMEOUT_S,
        "collbench_gpus_per_host": 1,  # the replay lists 8 GPUs: one rank per host on 2 cores
        "collbench_collectives": COLLECTIVES,
        "collbench_min_bytes": 1 * MiB,
        "collbench_max_bytes": 8 * MiB,
        "collbench_step_factor": 8,
        "collbench_iters": 2,
        "collbench_warmup_iters": 1,
        "collbench_phases": ["intra", "all", "pairs"],
        "collbench_report_args": ["--profile", str(fleet.profile), "--reference-min-bytes", "4M"],
        **extra,
    }


def timed(name: str, run: BenchRun) -> BenchRun:
    print(f"\nNCCL E2E {name}: rc {run.rc} in {run.seconds:.1f} s", flush=True)
    return run


# The runs after the main one: the nodes it provisioned and whose topology it read skip those plays
# (about 30 s of a run on 2 loaded cores); every other play runs as a night's does.
AGAIN = ["--skip-tags", "provision,topology"]


@pytest.fixture(scope="module")
def measured(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Measured:
    work = tmp_path_factory.mktemp("nccl-main")
    cluster = fleet.cluster
    before = tx_bytes(cluster)
    cluster.shape(SLOW, "100mbit", interface="data")
    try:
        run = run_bench(
            cluster, work / "results", work / "cp", extra_vars=nccl_vars(fleet, collbench_timeout_s=150)
        )
    finally:
        cluster.unshape(SLOW, "data")
    after = tx_bytes(cluster)
    sent = {h: {i: after[h][i] - before[h][i] for i in after[h]} for h in cluster.hosts}
    timed("main run (every phase, node4's data link at 100mbit)", run)
    return Measured(run, sent, ssh_traces(cluster, run.run_dir))


@pytest.fixture(scope="module")
def frozen(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Frozen:
    """The pairs again, all_reduce only; node4's rank of the first pair launch is stopped as soon as
    it runs."""
    work = tmp_path_factory.mktemp("nccl-frozen")
    cluster = fleet.cluster
    seen: dict[str, Any] = {}

    def watch_gone(pids: list[int]) -> None:
        while any(alive(pid) for pid in pids):
            time.sleep(0.2)
        seen["gone_at"] = now()

    def freeze() -> None:
        seen["pids"] = cluster.freeze(FROZEN_HOST, RANK)
        seen["frozen_at"] = now()
        threading.Thread(target=watch_gone, args=(seen["pids"],), daemon=True).start()

    run = run_bench(
        cluster,
        work / "results",
        work / "cp",
        extra_vars=nccl_vars(
            fleet,
            collbench_collectives=["all_reduce"],
            collbench_phases=["pairs"],
            collbench_timeout_s=FROZEN_TIMEOUT_S,
            collbench_kill_after_s=FROZEN_KILL_AFTER_S,
        ),
        watch=[(FROZEN_HOST, RANK, freeze, "freeze")],
        # The hung node's case is the main run's: left out here, its probes cost nothing; and the
        # main run provisioned these nodes and read their topology already.
        playbook_args=["--limit", ",".join(MEASURED), *AGAIN],
    )
    timed("frozen rank in a pair launch", run)
    deadline = time.monotonic() + 10
    while "pids" in seen and "gone_at" not in seen and time.monotonic() < deadline:
        time.sleep(0.2)
    return Frozen(
        run,
        seen.get("pids", []),
        seen.get("frozen_at"),
        seen.get("gone_at"),
        ssh_traces(cluster, run.run_dir),
    )


@pytest.fixture(scope="module")
def torch_run(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> BenchRun:
    work = tmp_path_factory.mktemp("nccl-torch")
    extra = nccl_vars(
        fleet,
        collbench_backend="torch",
        collbench_launcher="torchrun",
        # This venv's Python (torch 2.13.0), which the nodes see at the same path.
        collbench_python=VENV_PYTHON,
        collbench_collectives=["all_reduce"],
        collbench_phases=["all"],
        collbench_timeout_s=90,
        # Importing torch on 2 loaded cores can take longer than the main run's short probe limit;
        # the hung node is left out (its failure is the main run's case) so that this costs nothing.
        collbench_probe_timeout_s=60,
        # torch over gloo on GPU nodes fails the report unless the profile says it measures the CPUs.
        collbench_report_args=["--profile", str(write_test_profile(work / "profile"))],
    )
    limit = ["--limit", ",".join(MEASURED), *AGAIN]
    run = run_bench(fleet.cluster, work / "results", work / "cp", extra_vars=extra, playbook_args=limit)
    return timed("torch backend, torchrun", run)


def launches(run: BenchRun, kind: str) -> list[dict[str, Any]]:
    return [launch for launch in run.manifest()["launches"] if launch["kind"] == kind]


def pair_name(hosts: list[str] | tuple[str, ...]) -> str:
    return "--".join(sorted(hosts))


MEASURED_PAIRS = [pair_name((a, b)) for i, a in enumerate(MEASURED) for b in MEASURED[i + 1 :]]


# ---- the main run ------------------------------------------------------------------------------------


def test_every_phase_ran_on_the_nodes_that_answered(measured: Measured) -> None:
    run = measured.run
    manifest = run.manifest()
    assert manifest["status"] == "complete", run.tail
    # The hung node fails the run's exit code, after the report.
    assert run.rc != 0, run.tail
    assert manifest["backend"] == "nccl-tests", (manifest["backend"], run.tail)
    # mpirun's MPI is found once per run: by provision after its packages, not again by facts.
    assert run.output.count("TASK [facts : MPI | Find the mpirun programs]") == 1, run.tail
    assert {h: e["status"] for h, e in manifest["hosts"].items()} == {
        **dict.fromkeys(MEASURED, "ok"),
        HUNG: "failed",
    }, manifest["hosts"]
    intra = {(launch["hosts"][0], launch["collective"]) for launch in launches(run, "intra")}
    assert intra == {(h, c) for h in MEASURED for c in COLLECTIVES}
    across = {(tuple(launch["hosts"]), launch["collective"]) for launch in launches(run, "all")}
    assert across == {(tuple(MEASURED), c) for c in COLLECTIVES}
    pairs = {(pair_name(launch["hosts"]), launch["collective"]) for launch in launches(run, "pair")}
    assert pairs == {(p, c) for p in MEASURED_PAIRS for c in COLLECTIVES}
    statuses = {
        (launch["kind"], pair_name(launch["hosts"]), launch["collective"]): launch["status"]
        for launch in manifest["launches"]
    }
    assert set(statuses.values()) == {"ok"}, statuses


def test_the_hung_node_fails_alone_with_its_facts(measured: Measured) -> None:
    run = measured.run
    entry = run.manifest()["hosts"][HUNG]
    assert entry["status"] == "failed"
    reason = entry.get("reason") or ""
    assert "nvidia-smi" in reason and re.search(r"did not answer|unanswered|hung", reason), reason
    facts = json.loads((run.run_dir / "hosts" / HUNG / "facts.json").read_text())
    assert facts["hostname"] == HUNG
    assert not any(HUNG in launch["hosts"] for launch in run.manifest()["launches"])


def test_the_measured_nodes_ran_nccl_tests_with_json(measured: Measured) -> None:
    root = measured.run.run_dir
    folders = {f"hosts/{h}/intra": {h} for h in MEASURED}
    folders["inter/all"] = set(MEASURED)
    folders |= {f"inter/pairs/{p}": set(p.split("--")) for p in MEASURED_PAIRS}
    for folder, hosts in folders.items():
        for collective in COLLECTIVES:
            log = root / folder / f"{collective}.log"
            text = log.read_text()
            header = [line for line in text.splitlines() if line.startswith("# ")][:3]
            assert any(line.startswith("# nccl-tests version 2.19.6") for line in header), (log, text[:500])
            assert f"# Collective test starting: {collective}_perf" in text, log
            (parsed,) = parse_file(log).runs
            assert parsed.status == "ok" and parsed.collective == collective, (log, parsed.errors)
            assert parsed.nranks == len(hosts) and set(parsed.hosts) == hosts, (log, parsed.hosts)
            json_path = root / folder / f"{collective}.json"
            assert json.loads(json_path.read_text())["results"], json_path  # -J output, not text
            report = parse_file(json_path)
            assert report.kind == "nccl-tests", (folder, report.kind)
            (from_json,) = report.runs
            assert from_json.collective == collective
            sizes = [row.size for row in parsed.rows]
            assert [row.size for row in from_json.rows] == sizes, folder
            # nccl-tests round each size down to whole elements per rank (1048560 B at 3 ranks).
            assert sorted(sizes) == pytest.approx(sorted(SIZES), rel=1e-4), (folder, sizes)


def test_launches_across_hosts_ran_under_mpirun_over_the_data_network(
    fleet: Fleet, measured: Measured
) -> None:
    run, cluster = measured.run, fleet.cluster
    across = launches(run, "all") + launches(run, "pair")
    assert {(launch["launcher"], launch["status"]) for launch in across} == {("mpirun", "ok")}, across
    # The hostfiles name the nodes by their data addresses.
    data = {cluster.address(h, "data") for h in MEASURED}
    hostfiles = [
        path
        for host in MEASURED
        for path in (cluster.home(host) / "collbench" / "runs" / run.run_dir.name).rglob("hostfile")
        if path.parent.name.startswith(("all-", "pair-"))  # an intra-node launch names localhost
    ]
    assert len(hostfiles) == len(across), hostfiles
    for path in hostfiles:
        named = {line.split()[0] for line in path.read_text().splitlines() if line.strip()}
        assert named and named <= data, (path, named)
    # And the data went there: every measured node sent its share of the measured sizes over eth1
    # (each all_reduce launch alone moves ~90 MiB per rank); the hung node sent none.
    sent = measured.eth_sent
    for host in MEASURED:
        assert sent[host]["eth1"] > 100 * MiB, sent
        assert sent[host]["eth1"] > 5 * sent[host]["eth0"], sent
    assert sent[HUNG]["eth1"] < MiB, sent


def test_the_report_singles_out_the_slow_node(measured: Measured) -> None:
    results = json.loads((measured.run.run_dir / "report" / "results.json").read_text())
    verdicts = {host["host"]: host for host in results["hosts"]}
    assert verdicts[SLOW]["verdict"] == "failed", verdicts[SLOW]
    pairs = {(pair_name(p["hosts"]), p["collective"]): p for p in results["pairs"]}
    for collective in COLLECTIVES:
        for partner in ("node1", "node2"):
            flagged = pairs[(pair_name((partner, SLOW)), collective)]
            assert flagged["status"] in ("slow", "failed"), flagged
            assert flagged["cause"] in (f"node {SLOW}", "link"), flagged
        healthy = pairs[(pair_name(HEALTHY_PAIR), collective)]
        assert healthy["status"] == "ok", healthy
    assert any(
        check["name"].startswith("pairs/") and check["status"] == "fail" for check in verdicts[SLOW]["checks"]
    ), verdicts[SLOW]["reasons"]
    for host in HEALTHY_PAIR:
        failing = [
            c for c in verdicts[host]["checks"] if c["name"].startswith("pairs/") and c["status"] == "fail"
        ]
        assert not failing, (host, failing)


def test_no_ssh_key_of_a_run_is_left_on_the_nodes(measured: Measured, frozen: Frozen) -> None:
    for name, left in (("main run", measured.ssh_left), ("frozen run", frozen.ssh_left)):
        assert {where: found for where, found in left.items() if found} == {}, name


# ---- a frozen rank in a pair launch ------------------------------------------------------------------


def test_a_frozen_rank_is_ended_at_the_bound_and_the_next_rounds_run(fleet: Fleet, frozen: Frozen) -> None:
    run = frozen.run
    assert frozen.frozen_pids, f"no rank of {FROZEN_HOST} was caught running: {run.events}\n{run.tail}"
    pairs = launches(run, "pair")
    hits = [
        launch for launch in pairs if launch["hosts"] == FROZEN_PAIR and launch["collective"] == "all_reduce"
    ]
    assert len(hits) == 1, pairs
    (hit,) = hits
    assert hit["status"] == "timeout", hit
    started, finished = utc(hit["started_at"]), utc(hit["finished_at"])
    took = (finished - started).total_seconds()
    print(f"\nNCCL E2E frozen pair launch: {took:.0f} s (timeout {FROZEN_TIMEOUT_S} s)", flush=True)
    # Ended at the bound: not before the timeout, not long after timeout + kill-after.
    assert FROZEN_TIMEOUT_S - 1 <= took <= FROZEN_TIMEOUT_S + FROZEN_KILL_AFTER_S + 20, hit
    # The manifest's times are the launch's true ones: it started before the rank was stopped, and
    # ended when the stopped rank was gone (seconds in the manifest, so a second either way).
    assert frozen.frozen_at is not None and frozen.gone_at is not None
    assert started.timestamp() <= frozen.frozen_at.timestamp() + 1
    assert abs(finished.timestamp() - frozen.gone_at.timestamp()) <= 5, (hit, frozen.gone_at)
    # Nothing of the run left on the pair's hosts.
    for host in FROZEN_PAIR:
        assert not find_process(fleet.cluster, host, re.escape(run.run_dir.name)), host
    # Every later round ran.
    rest = [launch for launch in pairs if launch is not hit]
    assert sorted(launch["round"] for launch in rest) == [2, 3]
    assert {launch["status"] for launch in rest} == {"ok"}, rest


# ---- the torch backend with torchrun across fleet hosts ----------------------------------------------


def test_torchrun_runs_across_fleet_hosts(torch_run: BenchRun) -> None:
    manifest = torch_run.manifest()
    assert manifest["backend"] == "torch"
    (across,) = launches(torch_run, "all")
    assert (across["launcher"], across["status"]) == ("torchrun", "ok"), (across, torch_run.tail)
    assert torch_run.rc == 0, torch_run.tail
    # In inventory order, whatever order the nodes answered preflight in.
    assert across["hosts"] == MEASURED, across["hosts"]
    (parsed,) = parse_file(torch_run.run_dir / across["log"]).runs
    assert parsed.status == "ok", parsed.errors
    assert set(parsed.hosts) == set(across["hosts"])
