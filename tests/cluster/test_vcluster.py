"""The multi-host test cluster works as real hosts do: ssh with checked host keys, names, links, failures."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest
import yaml

from tests.cluster.vcluster import (
    GPU_PROFILES,
    NVIDIA_SMI,
    TOPOLOGIES,
    Cluster,
    ClusterSpec,
    ansible_env,
    is_anchor,
    main,
    namespaces,
    nvidia_smi_config,
)

ANSIBLE = str(Path(sys.executable).parent / "ansible")
REPO = Path(__file__).resolve().parents[2]
PAYLOAD_MB = 20

RECEIVER = """
import socket, sys
server = socket.create_server(("0.0.0.0", int(sys.argv[1])))
server.settimeout(60)
conn, _ = server.accept()
total = 0
while chunk := conn.recv(1 << 20):
    total += len(chunk)
conn.sendall(str(total).encode())
"""

SENDER = """
import socket, sys, time
host, port, megabytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
deadline = time.monotonic() + 10
while True:
    try:
        conn = socket.create_connection((host, port), timeout=60)
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.02)
block = bytes(1 << 20)
started = time.monotonic()
for _ in range(megabytes):
    conn.sendall(block)
conn.shutdown(socket.SHUT_WR)
received = conn.recv(64).decode()
print(time.monotonic() - started, received)
"""


def ansible_ping(cluster: Cluster, tmp_path: Path, inventory: Path | None = None) -> dict[str, str]:
    """Run `ansible all -m ping` over real ssh; host -> SUCCESS / UNREACHABLE / FAILED."""
    result = subprocess.run(
        [ANSIBLE, "all", "-i", str(inventory or cluster.inventory_path), "-m", "ansible.builtin.ping"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
        env=ansible_env(tmp_path / "cp"),
    )
    states = dict(re.findall(r"^(\S+) \| (SUCCESS|UNREACHABLE!|FAILED!)", result.stdout, re.MULTILINE))
    return {host: state.rstrip("!") for host, state in states.items()} | {"_output": result.stdout}


def transfer_seconds(cluster: Cluster, source: str, target: str, port: int) -> float:
    """Seconds to push PAYLOAD_MB MB from `source` to `target` over TCP, until the receiver confirms."""
    receiver = cluster.popen(
        target, ["python3", "-c", RECEIVER, str(port)], stdout=subprocess.PIPE, text=True
    )
    try:
        sent = cluster.exec(source, ["python3", "-c", SENDER, target, str(port), str(PAYLOAD_MB)], check=True)
        receiver.wait(timeout=60)
    finally:
        receiver.kill()  # on an interrupted transfer; a no-op after wait
        receiver.wait()
    seconds, received = sent.stdout.split()
    assert int(received) == PAYLOAD_MB << 20
    return float(seconds)


def matrix_of(topology_file: str) -> str:
    lines = (TOPOLOGIES / topology_file).read_text().splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("GPU0"))
    return "".join(lines[start:])


def test_four_nodes_come_up_with_an_inventory(cluster: Cluster) -> None:
    assert cluster.hosts == ["node1", "node2", "node3", "node4"]
    status = cluster.status()["hosts"]
    assert all(h["namespace_exists"] and h["sshd_listening"] for h in status.values()), status
    inventory = yaml.safe_load(cluster.inventory_path.read_text())
    hosts = inventory["all"]["children"]["gpu_nodes"]["hosts"]
    assert {h: v["ansible_host"] for h, v in hosts.items()} == {h: cluster.address(h) for h in cluster.hosts}
    assert inventory["all"]["vars"]["ansible_user"] == "root"


def test_ansible_pings_every_node_with_host_key_checking(cluster: Cluster, tmp_path: Path) -> None:
    states = ansible_ping(cluster, tmp_path)
    assert all(states.get(h) == "SUCCESS" for h in cluster.hosts), states["_output"]


def test_a_wrong_host_key_is_refused(cluster: Cluster, tmp_path: Path) -> None:
    # known_hosts where node1 carries node2's key: checking is on, so node1 must be refused.
    known = cluster.known_hosts_path.read_text().splitlines()
    node2_key = known[1].split(" ", 1)[1]
    known[0] = known[0].split(" ", 1)[0] + " " + node2_key
    bad_known = tmp_path / "known_hosts"
    bad_known.write_text("\n".join(known) + "\n")
    bad_config = tmp_path / "ssh_config"
    bad_config.write_text(
        cluster.ssh_config_path.read_text().replace(str(cluster.known_hosts_path), str(bad_known))
    )
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        cluster.inventory_path.read_text().replace(str(cluster.ssh_config_path), str(bad_config))
    )
    states = ansible_ping(cluster, tmp_path, inventory)
    assert states.get("node1") == "UNREACHABLE", states["_output"]
    assert states.get("node2") == "SUCCESS", states["_output"]
    # Why: Ansible passes ssh's message on, except when its pipelined write loses the race with
    # ssh exiting ("Make sure this host can be reached over SSH."). ssh itself always says it.
    refused = subprocess.run(
        ["ssh", "-F", str(bad_config), "node1", "true"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert refused.returncode == 255, refused
    assert "Host key verification failed" in refused.stderr, refused.stderr


def test_each_node_has_its_own_hostname(cluster: Cluster) -> None:
    names = {host: cluster.ssh(host, ["hostname"], check=True).stdout.strip() for host in cluster.hosts}
    assert names == {host: host for host in cluster.hosts}
    assert cluster.exec("node3", ["hostname"], check=True).stdout.strip() == "node3"


def test_nodes_reach_each_other_by_name(cluster: Cluster) -> None:
    for peer in cluster.hosts[1:]:
        resolved = cluster.ssh("node1", ["getent", "hosts", peer], check=True).stdout.split()[0]
        assert resolved == cluster.address(peer)
        assert cluster.ssh("node1", ["ping", "-c", "1", "-W", "2", peer]).returncode == 0
    # ssh from the first node to another, as mpirun does, with that node's known_hosts.
    assert cluster.ssh("node1", ["ssh", "node4", "hostname"], check=True).stdout.strip() == "node4"


def test_stand_in_nvidia_smi_replays_the_node_topology(cluster: Cluster) -> None:
    profile = GPU_PROFILES["hgx-h100"]
    assert cluster.ssh("node2", ["nvidia-smi", "topo", "-m"], check=True).stdout == matrix_of(
        profile.topology
    )
    query = ["nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"]
    rows = cluster.ssh("node2", query, check=True).stdout.splitlines()
    assert rows == [f"{i}, NVIDIA H100 80GB HBM3, 81559" for i in range(8)]
    uuids = {h: cluster.ssh(h, ["nvidia-smi", "-L"], check=True).stdout for h in ("node1", "node2")}
    assert uuids["node1"] != uuids["node2"]
    bad = cluster.ssh("node2", ["nvidia-smi", "--query-gpu=bogus.field", "--format=csv"])
    assert bad.returncode == 2
    assert "not a valid field" in bad.stderr


def test_shaping_a_link_slows_only_that_node(cluster: Cluster) -> None:
    cluster.shape("node3", "100mbit")
    try:
        healthy = transfer_seconds(cluster, "node1", "node2", 5301)
        shaped = transfer_seconds(cluster, "node1", "node3", 5302)
    finally:
        cluster.unshape("node3")
    print(f"\n{PAYLOAD_MB} MB: healthy link {healthy:.3f} s, 100mbit link {shaped:.3f} s")
    assert shaped >= 5 * healthy, (healthy, shaped)
    assert shaped >= PAYLOAD_MB * 8 / 100 * 0.9  # cannot beat 100 Mbit/s line rate
    restored = transfer_seconds(cluster, "node1", "node3", 5303)
    assert restored * 5 < shaped, (restored, shaped)


def test_stopped_sshd_makes_the_host_unreachable(cluster: Cluster, tmp_path: Path) -> None:
    assert cluster.stop_sshd("node2")
    try:
        states = ansible_ping(cluster, tmp_path)
    finally:
        cluster.start_sshd("node2")
    assert states.get("node2") == "UNREACHABLE", states["_output"]
    assert all(states.get(h) == "SUCCESS" for h in ("node1", "node3", "node4")), states["_output"]
    assert cluster.ssh("node2", ["hostname"], check=True).stdout.strip() == "node2"


def test_freeze_stops_matching_processes_in_one_node(cluster: Cluster) -> None:
    sleeper = cluster.popen("node4", ["sleep", "301"])
    try:
        deadline = time.monotonic() + 5
        # Until it has exec'd `sleep`: before that its pid shows the launcher's command line.
        while not cluster.processes("node4").get(sleeper.pid, "").startswith("sleep 301"):
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert cluster.freeze("node4", r"^sleep 301") == [sleeper.pid]
        assert _state(sleeper.pid) == "T"
        assert cluster.freeze("node1", r"^sleep 301") == []
        cluster.thaw("node4", r"^sleep 301")
        assert _state(sleeper.pid) in {"S", "R"}
    finally:
        sleeper.kill()
        sleeper.wait()


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.fixture(scope="module")
def mixed(cluster_factory) -> Cluster:
    """A 3-node cluster whose node2 has another topology, with its own inventory group name."""
    return cluster_factory(nodes=3, node_profiles={"node2": "a100-4gpu"}, group="workers")


def test_a_node_can_be_given_another_topology(mixed: Cluster) -> None:
    outputs = {h: mixed.ssh(h, ["nvidia-smi", "topo", "-m"], check=True).stdout for h in mixed.hosts}
    assert outputs["node1"] == outputs["node3"] == matrix_of(GPU_PROFILES["hgx-h100"].topology)
    assert outputs["node2"] == matrix_of(GPU_PROFILES["a100-4gpu"].topology)
    names = mixed.ssh("node2", ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], check=True)
    assert names.stdout.splitlines() == ["NVIDIA A100-SXM4-80GB"] * 4


def test_inventory_group_is_a_parameter(mixed: Cluster) -> None:
    inventory = yaml.safe_load(mixed.inventory_path.read_text())
    assert list(inventory["all"]["children"]) == ["workers"]


def test_killed_host_is_gone_for_its_peers(mixed: Cluster) -> None:
    assert mixed.kill_host("node3")
    assert mixed.processes("node3") == {}
    assert mixed.ssh("node3", ["true"], timeout=30).returncode == 255
    assert mixed.ssh("node1", ["ping", "-c", "1", "-W", "1", "node3"]).returncode != 0
    assert mixed.ssh("node2", ["hostname"], check=True).stdout.strip() == "node2"


def test_teardown_leaves_nothing_behind(cluster_factory) -> None:
    started = time.monotonic()
    spare = cluster_factory(nodes=4)
    built = time.monotonic() - started
    assert spare.ssh("node4", ["hostname"], check=True).stdout.strip() == "node4"
    started = time.monotonic()
    spare.down()
    torn = time.monotonic() - started
    print(f"\n4-node cluster: up {built:.2f} s (sshd listening), down {torn:.2f} s")
    assert namespaces(f"{spare.name}-") == []
    workdir = str(spare.workdir)
    leftovers = [p for p in Path("/proc").iterdir() if p.name.isdigit() and workdir in _cmdline(p)]
    assert leftovers == []
    assert workdir not in Path("/proc/self/mountinfo").read_text()
    spare.down()  # twice is harmless


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.parametrize("profile", sorted(GPU_PROFILES))
def test_stand_in_gpu_count_matches_the_topology_meta(profile: str, tmp_path: Path) -> None:
    config = tmp_path / "nvidia-smi.json"
    config.write_text(json.dumps(nvidia_smi_config(profile)))
    env = {"PATH": "/usr/bin:/bin", "COLLBENCH_FAKE_GPU_CONFIG": str(config)}

    def stand_in(*args: str) -> str:
        return subprocess.run(
            [str(NVIDIA_SMI), *args], capture_output=True, text=True, env=env, check=True, timeout=30
        ).stdout

    topology = GPU_PROFILES[profile].topology
    meta = (TOPOLOGIES / topology).with_suffix(".meta.md").read_text()
    gpus = int(re.search(r"GPUs (\d+)", meta)[1])
    assert len(stand_in("-L").splitlines()) == gpus
    counts = stand_in("--query-gpu=count,name", "--format=csv,noheader").splitlines()
    assert counts == [f"{gpus}, {GPU_PROFILES[profile].name}"] * gpus
    assert stand_in("topo", "-m") == matrix_of(topology)
    assert stand_in("--query-gpu=memory.total", "--format=csv", "-i", "0").splitlines() == [
        "memory.total [MiB]",
        f"{GPU_PROFILES[profile].memory_mib} MiB",
    ]


def test_cli_builds_reports_and_removes_a_cluster(cluster_support: None, tmp_path: Path) -> None:
    name = f"pt{os.getpid()}q"
    cli = [sys.executable, "-m", "tests.cluster.vcluster"]
    common = ["--name", name, "--workdir", str(tmp_path / "cli")]
    run = partial(subprocess.run, capture_output=True, text=True, timeout=60, check=False, cwd=REPO)
    try:
        up = run([*cli, "up", "--nodes", "2", "--node-profile", "node2=v100-4gpu", *common])
        assert up.returncode == 0, up.stderr
        status = json.loads(run([*cli, "status", *common]).stdout)
        assert [h["sshd_listening"] for h in status["hosts"].values()] == [True, True]
        assert status["hosts"]["node2"]["profile"] == "v100-4gpu"
    finally:
        down = run([*cli, "down", *common])
    assert down.returncode == 0, down.stderr
    assert namespaces(f"{name}-") == []
    assert not (tmp_path / "cli").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["up", "--name", "Bad!"], "cluster name 'Bad!'"),
        (["status", "--name", "vcnothere"], "no cluster vcnothere"),
    ],
)
def test_bad_input_gets_one_clear_message(args: list[str], message: str, capsys) -> None:
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.startswith("vcluster: ") and message in err
    assert "Traceback" not in err


def test_a_node_counts_as_up_only_once_its_holder_has_exec_d(tmp_path: Path) -> None:
    """The holder touches its ready file, then bash execs into it; a look at it mid-exec reads an empty
    cmdline. The wait must outlast the exec, or the next step finds the node down."""
    cluster = Cluster(ClusterSpec(name="tq", nodes=1), tmp_path)
    node_dir = tmp_path / "nodes" / "node1"
    node_dir.mkdir(parents=True)
    # The pause stands for a loaded machine; the marker is built from $1 so bash's own argv lacks it.
    script = f'touch {node_dir / "anchor.ready"}; sleep 0.3; exec -a "vcluster-anchor-$1" sleep 60'
    holder = subprocess.Popen(["bash", "-c", script, "bash", "tq-node1"])
    try:
        (node_dir / "anchor.pid").write_text(f"{holder.pid}\n")
        cluster._wait_for_anchors({"node1": holder})
        assert is_anchor(holder.pid, "tq", "node1")
        assert cluster._anchor_pid("node1") == holder.pid
    finally:
        holder.kill()
        holder.wait()
