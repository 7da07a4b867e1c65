"""A real Slurm cluster on the test cluster (tests/cluster/slurm.py), and the Slurm inventory against it.

One 4-node cluster for the module. A step past its time limit is in tests/cluster/test_slurm_e2e.py
(the frozen nccl-tests step, ended by Slurm).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.slurm import PACKAGES, SlurmCluster, missing_tools
from tests.cluster.vcluster import Cluster, ansible_env, namespaces

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
HOSTS = ["node1", "node2", "node3", "node4"]


@pytest.fixture(scope="module")
def slurm_pair(cluster_factory) -> Iterator[tuple[Cluster, SlurmCluster]]:
    missing = missing_tools()
    if missing:
        pytest.fail(f"missing Slurm tools: {', '.join(missing)} (Debian: {PACKAGES})", pytrace=False)
    cluster = cluster_factory(nodes=4)
    slurm = SlurmCluster.up(cluster)
    try:
        yield cluster, slurm
    finally:
        slurm.down()


@pytest.fixture(scope="module")
def slurm(slurm_pair: tuple[Cluster, SlurmCluster]) -> SlurmCluster:
    return slurm_pair[1]


def states_and_reasons(slurm: SlurmCluster) -> dict[str, tuple[str, str]]:
    lines = slurm.run(["sinfo", "-h", "-N", "-p", "gpu", "-o", "%N|%T|%E"], check=True).stdout.splitlines()
    return {name: (state, reason) for name, state, reason in (line.split("|", 2) for line in lines)}


def test_four_nodes_idle_in_sinfo(slurm: SlurmCluster) -> None:
    assert states_and_reasons(slurm) == dict.fromkeys(HOSTS, ("idle", "none"))
    summary = slurm.run(["sinfo", "-h", "-o", "%P %a %D %N"], check=True).stdout.split()
    assert summary == ["gpu*", "up", "4", "node[1-4]"]


def test_srun_on_four_nodes_prints_their_names(slurm: SlurmCluster) -> None:
    result = slurm.run(["srun", "-N4", "hostname"], check=True)
    assert sorted(result.stdout.split()) == HOSTS


def test_mpi_hello_over_pmix_on_two_nodes(slurm: SlurmCluster) -> None:
    hello = (
        "from mpi4py import MPI; c = MPI.COMM_WORLD; "
        "print(c.rank, c.size, MPI.Get_processor_name(), c.allreduce(c.rank + 1), flush=True)"
    )
    argv = ["srun", "-N2", "-n2", "--mpi=pmix", sys.executable, "-c", hello]
    result = slurm.run(argv, check=True, timeout=120)
    lines = sorted(line.split() for line in result.stdout.splitlines())
    assert [(rank, size, total) for rank, size, _, total in lines] == [("0", "2", "3"), ("1", "2", "3")]
    assert len({host for _, _, host, _ in lines}) == 2 and {host for _, _, host, _ in lines} <= set(HOSTS)


def test_down_node_shows_with_its_reason(slurm: SlurmCluster) -> None:
    reason = "collbench test: GPU 3 fell off the bus"
    slurm.run(["scontrol", "update", "NodeName=node3", "State=DOWN", f"Reason={reason}"], check=True)
    try:
        assert states_and_reasons(slurm)["node3"] == ("down", reason)
        assert states_and_reasons(slurm)["node2"] == ("idle", "none")
    finally:
        slurm.run(["scontrol", "update", "NodeName=node3", "State=RESUME"], check=True)
    slurm.wait_for_states({"node3": "idle"}, timeout=30)


def inventory_listing(slurm: SlurmCluster, tmp_path: Path) -> dict:
    """`ansible-inventory --list` on the head (the login node), the script run by the system python3."""
    env = ansible_env(tmp_path)
    wanted = ("ANSIBLE_HOME", "ANSIBLE_LOCAL_TEMP", "XDG_CACHE_HOME", "ANSIBLE_NOCOLOR")
    argv = [
        str(VENV_BIN / "ansible-inventory"),
        "-i",
        str(REPO / "inventory" / "slurm_inventory.py"),
        "--list",
    ]
    result = slurm.run(
        argv,
        check=True,
        env={
            **{key: env[key] for key in wanted},
            "PATH": "/usr/bin:/bin",  # no venv: the script's python3 is the node's own
            "COLLBENCH_SLURM_PARTITION": "gpu",
        },
    )
    return json.loads(result.stdout)


def test_inventory_from_the_real_cluster(slurm: SlurmCluster, tmp_path: Path) -> None:
    listing = inventory_listing(slurm, tmp_path)
    assert sorted(listing["gpu_nodes"]["hosts"]) == HOSTS
    assert "hosts" not in listing.get("slurm_unusable", {})
    slurm.run(["scontrol", "update", "NodeName=node3", "State=DOWN", "Reason=bad-gpu"], check=True)
    try:
        listing = inventory_listing(slurm, tmp_path)
    finally:
        slurm.run(["scontrol", "update", "NodeName=node3", "State=RESUME"], check=True)
    assert sorted(listing["gpu_nodes"]["hosts"]) == ["node1", "node2", "node4"]
    assert listing["slurm_unusable"]["hosts"] == ["node3"]
    node3 = listing["_meta"]["hostvars"]["node3"]
    assert (node3["collbench_slurm_state"], node3["collbench_slurm_reason"]) == ("down", "bad-gpu")
    slurm.wait_for_states({"node3": "idle"}, timeout=30)


def test_inventory_script_node_list_and_unknown_partition(slurm: SlurmCluster) -> None:
    script = ["/usr/bin/python3", str(REPO / "inventory" / "slurm_inventory.py"), "--list"]
    listed = slurm.run(script, env={"COLLBENCH_SLURM_NODES": "node[3-4,9]"}, check=True)
    listing = json.loads(listed.stdout)
    assert sorted(listing["gpu_nodes"]["hosts"]) == ["node3", "node4"]
    assert listing["_meta"]["hostvars"]["node9"]["collbench_slurm_reason"] == "not in Slurm"
    wrong = slurm.run(script, env={"COLLBENCH_SLURM_PARTITION": "nosuch"})  # sinfo itself says nothing
    assert (wrong.returncode, wrong.stdout) == (1, "")
    assert wrong.stderr == "slurm_inventory: sinfo lists no node in partition 'nosuch'\n"


def test_down_leaves_nothing(slurm_pair: tuple[Cluster, SlurmCluster]) -> None:
    cluster, slurm = slurm_pair
    slurm.down()
    assert slurm.processes() == {}
    assert slurm.head_namespace not in namespaces(f"{cluster.name}-")
    assert not slurm.root.exists()
    leftovers = [
        pid for pid in os.listdir("/proc") if pid.isdigit() and str(slurm.conf_path) in _cmdline(pid)
    ]
    assert leftovers == []
    cluster.down()
    assert namespaces(f"{cluster.name}-") == []


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
