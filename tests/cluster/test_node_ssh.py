"""mpirun's ssh between nodes, prepared and checked by the run itself (role node_ssh).

The clusters here are built with `node_ssh=False`: no key and no known_hosts between the nodes,
as rented nodes come. bench.yml runs the launches across hosts under mpirun (torch backend, tiny
sizes); the run must install its own key and known_hosts, check every hop, and leave nothing
behind. A fault case: a node missing from another's known_hosts (the user's own ssh setup,
`collbench_node_ssh: existing`) is named by the hop check and its launches are launcher failures,
not bad hosts or links.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.cluster.benchrun import BenchRun, run_bench
from tests.cluster.vcluster import Cluster

pytestmark = pytest.mark.cluster

ACROSS = {"collbench_launcher": "mpirun", "collbench_phases": ["all", "pairs"]}


def controller_key_dirs(work: Path) -> list[Path]:
    """The run's key directories on the controller: made in the test's own temporary directory
    (TMPDIR of its runs), where no other test's run, running meanwhile, makes its own."""
    return sorted((work / "controller-tmp").glob("collbench-node-ssh-*"))


def bench(cluster: Cluster, work: Path, **extra: object) -> BenchRun:
    started = time.monotonic()
    (work / "controller-tmp").mkdir(exist_ok=True)
    run = run_bench(
        cluster,
        work / "results",
        work / "cp",
        extra_vars={**ACROSS, "collbench_workdir": str(work / "nodework"), **extra},
        env={"TMPDIR": str(work / "controller-tmp")},
    )
    print(f"bench.yml on {len(cluster.hosts)} nodes: rc {run.rc} in {time.monotonic() - started:.1f} s")
    return run


def across(run: BenchRun) -> list[dict]:
    return [launch for launch in run.manifest()["launches"] if launch["kind"] in ("all", "pair")]


def run_lines(cluster: Cluster, run_id: str) -> dict[str, list[str]]:
    """Each node's authorized_keys lines that name the run."""
    found = {}
    for host in cluster.hosts:
        keys = cluster.home(host) / ".ssh" / "authorized_keys"
        text = keys.read_text() if keys.exists() else ""
        found[host] = [line for line in text.splitlines() if f"collbench-run-{run_id}" in line]
    return found


def run_ssh_dirs(work: Path) -> list[Path]:
    return sorted((work / "nodework").glob("runs/*/*/ssh"))


def report_results(run: BenchRun) -> dict:
    return json.loads((run.run_dir / "report" / "results.json").read_text())


def test_managed_ssh_between_bare_nodes(cluster_factory, tmp_path):
    """Nodes with no ssh between them: every launch across hosts runs under mpirun, and the run's
    key, authorized_keys line and known_hosts are gone afterwards."""
    cluster = cluster_factory(nodes=3, node_ssh=False)
    for host in cluster.hosts:
        assert not (cluster.home(host) / ".ssh" / "id_ed25519").exists()
        assert not (cluster.home(host) / ".ssh" / "known_hosts").exists()
    run = bench(cluster, tmp_path)
    launches = across(run)
    assert launches, run.tail
    assert {(launch["launcher"], launch["status"]) for launch in launches} == {("mpirun", "ok")}, run.tail
    assert {launch["kind"] for launch in launches} == {"all", "pair"}
    hops = run.manifest()["ssh_hops"]
    # 3 nodes: the first host to the 2 others, and the first host of each of the 3 pairs.
    assert hops["mode"] == "managed" and hops["failed"] == [] and hops["checked"] >= 3
    run_id = run.run_dir.name
    assert run_lines(cluster, run_id) == {host: [] for host in cluster.hosts}
    assert run_ssh_dirs(tmp_path) == []
    assert controller_key_dirs(tmp_path) == []
    # The private key never enters the run directory.
    for path in run.run_dir.rglob("*"):
        if path.is_file():
            assert "PRIVATE KEY" not in path.read_text(errors="replace"), path


def test_managed_ssh_kept_when_asked(cluster_factory, tmp_path):
    cluster = cluster_factory(nodes=3, node_ssh=False)
    run = bench(cluster, tmp_path, collbench_node_ssh_keep=True, collbench_phases=["all"])
    assert {launch["status"] for launch in across(run)} == {"ok"}, run.tail
    run_id = run.run_dir.name
    lines = run_lines(cluster, run_id)
    assert all(len(found) == 1 for found in lines.values()), lines
    dirs = run_ssh_dirs(tmp_path)
    assert len(dirs) == 3
    for folder in dirs:
        assert (folder / "id_ed25519").stat().st_mode & 0o777 == 0o600
        assert (folder / "known_hosts").is_file()
    # What was kept works by hand, host key checking on: node1 to node3 with the run's files.
    folder = next(d for d in dirs if d.parent.name == "node1")
    argv = [
        "ssh",
        "-i",
        str(folder / "id_ed25519"),
        "-o",
        f"UserKnownHostsFile={folder / 'known_hosts'}",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        "IdentitiesOnly=yes",
    ]
    for name in ("node3", cluster.address("node3")):
        done = cluster.exec("node1", [*argv, name, "hostname"])
        assert done.stdout.strip() == "node3", done


def test_failing_hop_is_a_launcher_failure(cluster_factory, tmp_path):
    """The user's own ssh setup (`existing`), where node1 does not know node3's host key."""
    cluster = cluster_factory(nodes=3)  # the cluster's key and known_hosts in every ~/.ssh
    known = cluster.home("node1") / ".ssh" / "known_hosts"
    kept = [line for line in known.read_text().splitlines() if not line.startswith("node3,")]
    known.write_text("\n".join(kept) + "\n")
    run = bench(cluster, tmp_path, collbench_node_ssh="existing")
    assert "node1 -> node3: Host key verification failed" in run.output, run.tail
    hops = run.manifest()["ssh_hops"]
    assert hops["mode"] == "existing"
    assert [(hop["from"], hop["to"]) for hop in hops["failed"]] == [("node1", "node3")]
    assert "Host key verification failed" in hops["failed"][0]["error"]
    by_hosts = {tuple(launch["hosts"]): launch for launch in across(run)}
    expected = {("node1", "node2"), ("node2", "node3"), ("node1", "node3"), ("node1", "node2", "node3")}
    assert set(by_hosts) == expected, (sorted(by_hosts), run.tail)
    assert by_hosts[("node1", "node2")]["status"] == "ok"
    assert by_hosts[("node2", "node3")]["status"] == "ok"
    # Launches whose head cannot reach one of their hosts are not started: the pair node1--node3
    # and the launch across all hosts (node1 heads it), recorded failed with no exit code.
    for refused in (by_hosts[("node1", "node3")], by_hosts[("node1", "node2", "node3")]):
        assert refused["status"] == "failed" and refused["rc"] is None, refused
        assert refused["reason"].startswith("not started: the ssh hop node1 -> node3: Host key"), refused
        started = datetime.fromisoformat(refused["started_at"])
        assert (datetime.fromisoformat(refused["finished_at"]) - started).total_seconds() <= 1, refused
        # no process ran: no launch directory on a node, nothing fetched to the run directory
        assert not any((run.run_dir / Path(refused["log"]).parent).glob("*")), refused
    launch_dirs = [p.name for p in (tmp_path / "nodework" / "runs" / run.run_dir.name).glob("*/*")]
    assert "pair-node1--node2" in launch_dirs and "pair-node2--node3" in launch_dirs, launch_dirs
    assert "pair-node1--node3" not in launch_dirs and "all" not in launch_dirs, launch_dirs
    assert "pair-node1--node3 is not started: the ssh hop node1 -> node3: Host key" in run.output, run.tail
    results = report_results(run)
    pair = next(p for p in results["pairs"] if p["hosts"] == ["node1", "node3"])
    assert pair["status"] == "launcher" and pair["cause"] == "launcher"
    for host in results["hosts"]:
        for check in host["checks"]:
            assert "node1--node3" not in check["reason"], check
    launcher = [c for c in results["fleet"]["checks"] if c["name"] == "launcher"]
    assert launcher and launcher[0]["status"] == "fail"
    assert any("node1 -> node3" in line for line in launcher[0]["evidence"])
    assert run.rc != 0  # nothing was measured on node1--node3
    # `existing` installs nothing.
    assert run_lines(cluster, run.run_dir.name) == {host: [] for host in cluster.hosts}
