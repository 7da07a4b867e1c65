"""End to end: `ansible-playbook bench.yml -i <inventory>` on a real 4-host SSH test cluster.

The torch backend with gloo (no GPU here), every phase, real ssh with host key checking, one
node's link shaped to 100mbit. The playbook runs twice, once per module: the whole pipeline with
torchrun (the nodes' first provision), then provision again (nothing may change) and the all-hosts
launch again with mpirun.
The report files of the whole run are read by their consumers: an XML parser (junit.xml),
prometheus_client's text parser (metrics.prom) and json (results.json).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from collbench_py.parsers import parse_file
from tests.ansible_output import changed_tasks
from tests.cluster.benchrun import TEST_PROFILE
from tests.cluster.vcluster import Cluster, ansible_env

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"
# One collective: each torch launch starts every rank's Python and torch again, which is most of a
# launch's time here. Two collectives through the pipeline are tested in test_nccl_e2e.py, and the
# torch benchmark's every collective under torchrun in tests/node/test_torch_bench_node.py.
COLLECTIVES = ["all_reduce"]
SLOW_HOST = "node4"
MiB = 1024 * 1024

# Small sizes and few iterations: the whole file runs in minutes on 2 cores. Sizes reach 8 MB
# so that the shaped link is measured where bandwidth, not latency, dominates (>= 4 MB).
GROUP_VARS = {
    "collbench_backend": "torch",
    # The nodes share this machine's filesystem: this venv's Python has torch==2.13.0.
    "collbench_python": sys.executable,
    "collbench_net_if": "eth0",
    "collbench_collectives": COLLECTIVES,
    "collbench_min_bytes": 1 * MiB,
    "collbench_max_bytes": 8 * MiB,
    "collbench_iters": 3,
    "collbench_warmup_iters": 1,
    "collbench_timeout_s": 240,
    "collbench_cpu_procs_per_host": 2,
}


@dataclass(frozen=True)
class PlaybookRun:
    rc: int
    output: str
    wall_s: float
    run_dir: Path | None

    def recap(self) -> dict[str, dict[str, int]]:
        """Per host: ok, changed, unreachable, failed, ... from the PLAY RECAP."""
        hosts = {}
        for host, counts in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", self.output, re.MULTILINE):
            hosts[host] = {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", counts)}
        return hosts


@dataclass(frozen=True)
class E2E:
    cluster: Cluster
    results: Path
    main: PlaybookRun
    mpirun: PlaybookRun
    main_before_second_run: dict[str, str]


def bench(cluster: Cluster, control_dir: Path, *args: str) -> PlaybookRun:
    env = ansible_env(control_dir)
    started = time.monotonic()
    result = subprocess.run(
        [str(PLAYBOOK_BIN), "bench.yml", "-i", str(cluster.inventory_path), *args],
        check=False,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
        stdin=subprocess.DEVNULL,
    )
    output = result.stdout + result.stderr
    match = re.search(r'"run \S+: (\S+)"', output)
    run = PlaybookRun(
        result.returncode, output, time.monotonic() - started, Path(match[1]) if match else None
    )
    print(f"bench.yml {' '.join(args)}: rc {run.rc} in {run.wall_s:.0f} s", file=sys.stderr)
    return run


def tree_digest(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


@pytest.fixture(scope="module")
def e2e(cluster_factory, tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2E]:
    cluster = cluster_factory(nodes=4, name=f"e2e{os.getpid() % 10**7}")
    scratch = tmp_path_factory.mktemp("bench-e2e")
    results = scratch / "results"
    # Users put their settings in group_vars/ next to the inventory file: so does this test.
    # One work directory path for every node (mpirun starts the same paths on every host).
    profile = scratch / "test-cluster-cpu.yml"
    profile.write_text(TEST_PROFILE)
    group_vars = {
        **GROUP_VARS,
        "collbench_results_dir": str(results),
        "collbench_workdir": str(scratch / "work"),
        "collbench_report_args": ["--profile", str(profile), "--reference-min-bytes", "4M"],
    }
    (cluster.inventory_path.parent / "group_vars").mkdir(exist_ok=True)
    (cluster.inventory_path.parent / "group_vars" / "all.yml").write_text(yaml.safe_dump(group_vars))
    control = scratch / "cp"
    control.mkdir()

    cluster.shape(SLOW_HOST, "100mbit")
    try:
        # The package lists are always stale here (cache_valid_time 0) and the nodes have no route
        # to a mirror, as on a rented node behind a closed firewall: the refresh fails and must not
        # fail the node, whose packages are all there.
        main = bench(cluster, control, "-e", "collbench_apt_cache_valid_time=0")
    finally:
        cluster.unshape(SLOW_HOST)
    before = tree_digest(main.run_dir) if main.run_dir else {}
    # Provision again: the failed refresh left the lists stale, and a long validity keeps this run
    # from trying (and failing) again; every other provision task runs and must change nothing.
    mpirun = bench(
        cluster,
        control,
        "-e",
        json.dumps({"collbench_launcher": "mpirun", "collbench_apt_cache_valid_time": 10 * 365 * 86400}),
        "--tags",
        "provision,inter,report",
    )
    yield E2E(cluster, results, main, mpirun, before)


def manifest(run: PlaybookRun) -> dict:
    assert run.run_dir is not None, run.output[-3000:]
    return json.loads((run.run_dir / "manifest.json").read_text())


def pair_dirs(hosts: list[str]) -> list[str]:
    return [f"{a}--{b}" for i, a in enumerate(hosts) for b in hosts[i + 1 :]]


def test_every_phase_runs_and_fills_the_run_directory(e2e: E2E) -> None:
    run = e2e.main
    # The shaped node fails its verdict: the run fails, after the summary and the report's path.
    assert run.rc == 2, run.output[-5000:]
    printed = run.output.find(f"report: {run.run_dir}/report/index.html")
    assert -1 < printed < run.output.find("the report found a failed host or link"), run.output[-3000:]
    for role in ("preflight", "provision", "facts", "topology", "benchmark", "report"):
        assert f"TASK [{role} : " in run.output, f"no task of role {role} ran"
    data = manifest(run)
    assert data["status"] == "complete"
    assert data["backend"] == "torch" and data["launcher"] == "torchrun"
    assert {h: e["status"] for h, e in data["hosts"].items()} == dict.fromkeys(e2e.cluster.hosts, "ok")
    root = run.run_dir
    for host in e2e.cluster.hosts:
        facts = json.loads((root / "hosts" / host / "facts.json").read_text())
        assert facts["hostname"] == host
        assert facts["torch_version"].startswith("2.13.0")
        assert facts["mpi_version"].startswith("Open MPI")
        assert len(facts["gpus"]) == 8  # the stand-in nvidia-smi replays an 8-GPU HGX H100
        assert parse_file(root / "hosts" / host / "topo.txt").kind == "nvidia-smi-topo"
        for collective in COLLECTIVES:
            assert (root / "hosts" / host / "intra" / f"{collective}.log").is_file()
    for collective in COLLECTIVES:
        assert (root / "inter" / "all" / f"{collective}.log").is_file()
    pairs = pair_dirs(e2e.cluster.hosts)
    assert len(pairs) == 6
    for pair in pairs:
        for collective in COLLECTIVES:
            assert (root / "inter" / "pairs" / pair / f"{collective}.log").is_file(), pair
    launches = data["launches"]
    assert len(launches) == (4 + 1 + 6) * len(COLLECTIVES)
    assert {launch["status"] for launch in launches} == {"ok"}


def test_pairs_run_in_three_rounds_of_two_concurrent_pairs(e2e: E2E) -> None:
    pairs = [launch for launch in manifest(e2e.main)["launches"] if launch["kind"] == "pair"]
    by_round: dict[int, set[tuple[str, ...]]] = {}
    for launch in pairs:
        by_round.setdefault(launch["round"], set()).add(tuple(launch["hosts"]))
    assert sorted(by_round) == [1, 2, 3]
    for round_pairs in by_round.values():
        assert len(round_pairs) == 2
        hosts = [h for pair in round_pairs for h in pair]
        assert len(set(hosts)) == 4  # disjoint
    for number in by_round:
        spans = [(p["started_at"], p["finished_at"]) for p in pairs if p["round"] == number]
        # The two pairs of a round overlap in time: each starts before the other ends.
        assert max(s for s, _ in spans) <= min(f for _, f in spans)


def test_logs_parse_ok_and_name_the_real_hosts(e2e: E2E) -> None:
    root = e2e.main.run_dir
    hosts = e2e.cluster.hosts
    expected = {f"hosts/{h}/intra": {h} for h in hosts}
    expected["inter/all"] = set(hosts)
    expected |= {f"inter/pairs/{pair}": set(pair.split("--")) for pair in pair_dirs(hosts)}
    for folder, names in expected.items():
        for collective in COLLECTIVES:
            parsed = parse_file(root / folder / f"{collective}.log")
            assert parsed.runs, f"{folder}/{collective}.log holds no run"
            run = parsed.runs[0]
            assert run.status == "ok", (folder, collective, run.errors)
            assert run.collective == collective
            assert {row.size for row in run.rows} == {1 * MiB, 2 * MiB, 4 * MiB, 8 * MiB}
            # Hostnames as the nodes report them (each node its own UTS namespace).
            assert set(run.hosts) == names, (folder, run.hosts)


def test_both_inter_node_launchers_run_across_the_hosts(e2e: E2E) -> None:
    torchrun = [launch for launch in manifest(e2e.main)["launches"] if launch["kind"] == "all"]
    assert {launch["launcher"] for launch in torchrun} == {"torchrun"}
    run = e2e.mpirun
    data = manifest(run)
    # Every node measured: the exit code follows the report's verdict alone.
    assert {e["status"] for e in data["hosts"].values()} == {"ok"}
    summary = json.loads((run.run_dir / "report" / "results.json").read_text())["summary"]
    assert run.rc == (2 if summary["failed"] else 0), run.output[-5000:]
    assert data["launcher"] == "mpirun"
    all_hosts = [launch for launch in data["launches"] if launch["kind"] == "all"]
    assert {(launch["launcher"], launch["status"]) for launch in all_hosts} == {("mpirun", "ok")}
    for collective in COLLECTIVES:
        parsed = parse_file(run.run_dir / "inter" / "all" / f"{collective}.log").runs[0]
        assert parsed.status == "ok"
        assert set(parsed.hosts) == set(e2e.cluster.hosts)
        assert parsed.nranks == 2 * len(e2e.cluster.hosts)


def _busbw_at_large_sizes(log: Path) -> float:
    run = parse_file(log).runs[0]
    return statistics.median(row.oop.busbw for row in run.rows if row.size >= 4 * MiB)


def test_the_shaped_node_is_measured_slow_and_singled_out(e2e: E2E) -> None:
    root = e2e.main.run_dir
    busbw = {
        pair: _busbw_at_large_sizes(root / "inter" / "pairs" / pair / "all_reduce.log")
        for pair in pair_dirs(e2e.cluster.hosts)
    }
    slow = {pair: bw for pair, bw in busbw.items() if SLOW_HOST in pair.split("--")}
    healthy = statistics.median(bw for pair, bw in busbw.items() if pair not in slow)
    assert len(slow) == 3
    for pair, bw in slow.items():
        assert bw * 5 <= healthy, f"{pair}: {bw} GB/s is not 5x below the others' median {healthy}"
    summary = {
        line.split()[0]: line.split()[1].lower()
        for line in re.findall(r'^\s+"(node\d+\s+\w+.*?)",?$', e2e.main.output, re.MULTILINE)
    }
    assert summary.get(SLOW_HOST) == "failed", summary
    assert [host for host, verdict in summary.items() if verdict == "failed"] == [SLOW_HOST], summary


def test_a_second_run_leaves_the_first_untouched(e2e: E2E) -> None:
    assert e2e.mpirun.run_dir != e2e.main.run_dir
    assert e2e.main_before_second_run, "the first run left no files"
    assert tree_digest(e2e.main.run_dir) == e2e.main_before_second_run
    runs = sorted(p.name for p in e2e.results.iterdir() if (p / "manifest.json").is_file())
    assert runs == sorted([e2e.main.run_dir.name, e2e.mpirun.run_dir.name])


def test_provisioning_twice_changes_nothing_the_second_time(e2e: E2E) -> None:
    first, second = e2e.main, e2e.mpirun
    refused = [f"{host}: the package lists could not be refreshed" for host in e2e.cluster.hosts]
    assert all(line in first.output for line in refused), first.output[-3000:]
    assert changed_tasks(first.output, "provision"), first.output[-3000:]  # a fresh work directory
    # Provision again: every provision task ran and none changed anything.
    assert "TASK [provision : Install the system packages]" in second.output
    assert not any(line in second.output for line in refused)  # not tried again (the validity above)
    assert changed_tasks(second.output, "provision") == {}


def test_report_files_read_by_their_consumers(e2e: E2E) -> None:
    """Issue 4's end: every report file written; the shaped node fails with a reason that names
    its links, the healthy nodes pass; each file read by what consumes it in production."""
    report = e2e.main.run_dir / "report"
    for name in (
        "index.html",
        "report.md",
        "hosts.csv",
        "results.json",
        "junit.xml",
        "metrics.prom",
        "tickets.md",
    ):
        assert (report / name).stat().st_size > 0, name
    hosts = e2e.cluster.hosts
    healthy = [h for h in hosts if h != SLOW_HOST]
    slow_pairs = [p for p in pair_dirs(hosts) if SLOW_HOST in p.split("--")]

    # junit.xml, as a CI system reads it: the shaped node's testcases fail naming its 3 pairs.
    cases = ET.parse(report / "junit.xml").getroot().iter("testcase")
    failures: dict[str, list[str]] = {h: [] for h in hosts}
    for case in cases:
        for failure in case.iter("failure"):
            failures.setdefault(case.get("classname"), []).append(f"{failure.get('message')}\n{failure.text}")
    assert failures[SLOW_HOST], failures
    said = "\n".join(failures[SLOW_HOST])
    assert all(pair in said for pair in slow_pairs), said
    assert {h: failures[h] for h in healthy} == {h: [] for h in healthy}

    # metrics.prom, as node_exporter's textfile collector hands it to Prometheus.
    families = {f.name: f for f in text_string_to_metric_families((report / "metrics.prom").read_text())}
    busbw = {
        (s.labels["host"], s.labels["collective"]): s.value
        for s in families["collbench_busbw_gbytes_per_second"].samples
    }
    assert set(busbw) == {(h, c) for h in hosts for c in COLLECTIVES}
    assert all(value > 0 for value in busbw.values()), busbw
    verdicts = {
        s.labels["host"]: (s.labels["verdict"], s.value) for s in families["collbench_host_verdict"].samples
    }
    assert verdicts == {h: ("failed", 2.0) if h == SLOW_HOST else ("passed", 0.0) for h in hosts}
    pair_bw = {
        "--".join(sorted((s.labels["host_a"], s.labels["host_b"]))): s.value
        for s in families["collbench_pair_busbw_gbytes_per_second"].samples
        if s.labels["collective"] == "all_reduce"
    }
    assert max(pair_bw[p] for p in slow_pairs) < min(v for p, v in pair_bw.items() if p not in slow_pairs)
    (stamp,) = families["collbench_run_timestamp_seconds"].samples
    assert stamp.labels["run_id"] == e2e.main.run_dir.name and stamp.value > 0

    # results.json: every parsed row, with its host, launch kind, collective and size.
    results = json.loads((report / "results.json").read_text())
    assert results["summary"]["failed"] == 1 and results["summary"]["passed"] == len(healthy)
    # One conclusion: the shaped node is the one bad node, no link is blamed for it.
    assert results["links"]["counts"] == {"bad_nodes": 1, "bad_links": 0, "unresolved": 0}
    # A finding per collective that found it (the count above is of distinct nodes).
    bad_nodes = results["links"]["bad_nodes"]
    assert {f["subject"] for f in bad_nodes} == {SLOW_HOST}
    assert len({f["collective"] for f in bad_nodes}) == len(bad_nodes) >= 1
    assert (
        f"pairs conclusion: 1 bad node to drain ({SLOW_HOST}), 0 bad links, 0 unresolved" in e2e.main.output
    )
    assert {h["host"]: h["verdict"] for h in results["hosts"]} == {
        h: "failed" if h == SLOW_HOST else "passed" for h in hosts
    }
    sizes = {1 * MiB, 2 * MiB, 4 * MiB, 8 * MiB}
    rows: dict[tuple, set[int]] = {}
    for row in results["results"]:
        key = (
            row["launch"],
            row["host"] if row["launch"] == "intra" else "--".join(sorted(row["hosts"])),
            row["collective"],
        )
        rows.setdefault(key, set()).add(row["size"])
    expected = {("intra", h, c) for h in hosts for c in COLLECTIVES}
    expected |= {("all", "--".join(hosts), c) for c in COLLECTIVES}
    expected |= {("pair", p, c) for p in pair_dirs(hosts) for c in COLLECTIVES}
    assert rows == dict.fromkeys(expected, sizes)
