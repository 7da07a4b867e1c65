"""The node-check stand-ins (node_standins.py, nvidia-smi nvlink) read by the project's own parsers.

The first tests run the stand-ins in a bin dir of their own (no cluster); the last ones move real bytes
through the rails of a 2-node test cluster and show that a shaped rail reads lower.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collbench_py.parsers import ibports, nvbandwidth, nvlink, perftest
from tests.cluster.vcluster import NODE_STANDIN_TOOLS, NODE_STANDINS, NVIDIA_SMI, nvidia_smi_config

CAPTURE = Path(__file__).parent.parent / "data" / "corpus" / "nvbandwidth"
CAPTURE = next(CAPTURE.glob("hgx-h100-8gpu-v0.10.0-*.txt"))
D2D_READ = "device_to_device_memcpy_read_ce"


@pytest.fixture
def node_bin(tmp_path: Path) -> Path:
    """A node's bin dir as vcluster.py writes it: nvidia-smi, the tool links and 4 HCAs on 4 rails."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(NVIDIA_SMI)
    (bin_dir / "nvidia-smi.json").write_text(json.dumps(nvidia_smi_config("hgx-h100")))
    for tool in NODE_STANDIN_TOOLS:
        (bin_dir / tool).symlink_to(NODE_STANDINS)
    hcas = [
        {"name": f"mlx5_{k}", "rail": k, "netdev": f"rail{k}", "address": f"10.9.{10 + k}.11", "lid": 27 + k}
        for k in range(4)
    ]
    (bin_dir / "devices.json").write_text(json.dumps({"node_index": 1, "hcas": hcas}))
    return bin_dir


def run_tool(bin_dir: Path, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    result = subprocess.run(
        [str(bin_dir / argv[0]), *argv[1:]], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


def set_faults(bin_dir: Path, **faults: object) -> None:
    (bin_dir / "faults.json").write_text(json.dumps(faults))


def matrices(text: str, name: str) -> dict[str, object]:
    return {m.name: m for m in nvbandwidth.parse(text, name).matrices}


def test_nvbandwidth_replays_the_capture_for_the_testcases_asked(node_bin: Path) -> None:
    captured = matrices(CAPTURE.read_text(), CAPTURE.name)
    text = run_tool(node_bin, "nvbandwidth", "-t", D2D_READ, "host_to_device_memcpy_ce").stdout
    replayed = matrices(text, "stand-in.txt")
    assert set(replayed) == {D2D_READ, "host_to_device_memcpy_ce"}
    for name, matrix in replayed.items():
        assert matrix.values == captured[name].values
        assert matrix.sum == captured[name].sum  # the capture's own SUM line when nothing is degraded
        assert matrix.unit == "GB/s"
    assert len(replayed[D2D_READ].values) == 8


def test_nvbandwidth_json_degrades_exactly_one_link(node_bin: Path) -> None:
    captured = matrices(CAPTURE.read_text(), CAPTURE.name)[D2D_READ].values
    set_faults(node_bin, link_scale=[[3, 5, 0.6]])
    text = run_tool(node_bin, "nvbandwidth", "-j", "-t", D2D_READ, "device_to_host_memcpy_ce").stdout
    assert json.loads(text)["nvbandwidth"]["testcases"][0]["status"] == "Passed"
    parsed = matrices(text, "stand-in.json")
    values = parsed[D2D_READ].values
    changed = {
        (i, j) for i in range(8) for j in range(8) if i != j and values[i][j] != pytest.approx(captured[i][j])
    }
    assert changed == {(3, 5), (5, 3)}
    assert values[3][5] == pytest.approx(captured[3][5] * 0.6, abs=0.01)
    d2h = matrices(CAPTURE.read_text(), CAPTURE.name)["device_to_host_memcpy_ce"].values
    assert parsed["device_to_host_memcpy_ce"].values == d2h  # a link fault leaves the host copies alone


def test_nvbandwidth_degrades_a_gpu_row_and_column_and_its_host_copies(node_bin: Path) -> None:
    captured = matrices(CAPTURE.read_text(), CAPTURE.name)
    set_faults(node_bin, gpu_scale={"2": 0.5})
    parsed = matrices(
        run_tool(node_bin, "nvbandwidth", "-t", D2D_READ, "host_to_device_memcpy_ce").stdout, "t"
    )
    values, before = parsed[D2D_READ].values, captured[D2D_READ].values
    changed = {(i, j) for i in range(8) for j in range(8) if i != j and values[i][j] != before[i][j]}
    assert changed == {(i, j) for i in range(8) for j in range(8) if i != j and 2 in (i, j)}
    h2d, h2d_before = (
        parsed["host_to_device_memcpy_ce"].values[0],
        captured["host_to_device_memcpy_ce"].values[0],
    )
    assert [k for k in range(8) if h2d[k] != h2d_before[k]] == [2]
    assert parsed[D2D_READ].sum < captured[D2D_READ].sum  # the SUM follows the degraded cells


def test_nvbandwidth_waives_what_the_capture_lacks_and_rejects_unknown_names(node_bin: Path) -> None:
    document = json.loads(
        run_tool(node_bin, "nvbandwidth", "-j", "-t", "device_to_device_memcpy_read_sm", "x").stdout
    )
    statuses = {t["name"]: t["status"] for t in document["nvbandwidth"]["testcases"]}
    assert statuses == {"device_to_device_memcpy_read_sm": "Waived", "x": "Not Found"}


def test_nvlink_status_has_one_link_down_where_asked(node_bin: Path) -> None:
    set_faults(node_bin, nvlink_down=[[4, 7]])
    gpus = nvlink.parse(run_tool(node_bin, "nvidia-smi", "nvlink", "-s").stdout, "s.txt").records
    assert [g.index for g in gpus] == list(range(8))
    assert all(len(g.links) == 18 for g in gpus)
    down = [(g.index, link.link) for g in gpus for link in g.links if link.state == "down"]
    assert down == [(4, 7)]
    assert {link.speed_gbs for g in gpus for link in g.links if link.state == "up"} == {26.562}
    one = nvlink.parse(run_tool(node_bin, "nvidia-smi", "nvlink", "-s", "-i", "4").stdout, "s4.txt")
    assert [g.index for g in one.records] == [4] and one.info["links_down"] == 1


def test_nvlink_error_counters_grow_between_calls(node_bin: Path) -> None:
    set_faults(node_bin, nvlink_error_growth=[[1, 3, "crc", 5]])

    def counters() -> dict[tuple[int, int], dict[str, int]]:
        gpus = nvlink.parse(run_tool(node_bin, "nvidia-smi", "nvlink", "-e").stdout, "e.txt").records
        return {(g.index, link.link): link.counters for g in gpus for link in g.links}

    before, after = counters(), counters()
    assert before[1, 3] == {"replay_errors": 0, "recovery_errors": 0, "crc_errors": 0}
    assert after[1, 3]["crc_errors"] == 5
    grown = {key for key in after if after[key] != before[key]}
    assert grown == {(1, 3)}


def test_ib_views_list_four_active_400g_ports_on_the_rails(node_bin: Path) -> None:
    text = run_tool(node_bin, "ibstat").stdout + run_tool(node_bin, "ibdev2netdev").stdout
    ports = {p.ca: p for p in ibports.parse(text, "ib.txt").records}
    assert sorted(ports) == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    for k, port in enumerate(ports[f"mlx5_{k}"] for k in range(4)):
        assert (port.state, port.physical_state, port.up, port.rate_gbps) == ("active", "link-up", True, 400)
        assert (port.netdev, port.netdev_state, port.link_layer) == (f"rail{k}", "up", "InfiniBand")
    devinfo = {p.ca: p for p in ibports.parse(run_tool(node_bin, "ibv_devinfo", "-v").stdout, "d").records}
    assert {(p.state, p.width) for p in devinfo.values()} == {("active", "4X")}


def test_a_degraded_port_reads_degraded_in_every_view(node_bin: Path) -> None:
    set_faults(node_bin, hca_ports={"mlx5_1": {"rate": 200, "width": "2X"}, "mlx5_3": {"state": "Down"}})
    ports = {p.ca: p for p in ibports.parse(run_tool(node_bin, "ibstat").stdout, "ibstat").records}
    assert (ports["mlx5_1"].rate_gbps, ports["mlx5_0"].rate_gbps) == (200, 400)
    assert ports["mlx5_3"].state == "down" and ports["mlx5_3"].rate_gbps is None
    devinfo = {p.ca: p for p in ibports.parse(run_tool(node_bin, "ibv_devinfo", "-v").stdout, "d").records}
    assert devinfo["mlx5_1"].width == "2X" and devinfo["mlx5_0"].width == "4X"
    netdevs = {
        p.ca: p.netdev_state for p in ibports.parse(run_tool(node_bin, "ibdev2netdev").stdout, "n").records
    }
    assert netdevs == {"mlx5_0": "up", "mlx5_1": "up", "mlx5_2": "up", "mlx5_3": "down"}


def test_ib_write_bw_names_a_missing_device_as_perftest_does(node_bin: Path) -> None:
    result = run_tool(node_bin, "ib_write_bw", "-d", "mlx5_9", "--report_gbits", check=False)
    assert result.returncode != 0
    (run,) = perftest.parse(result.stdout + result.stderr, "missing.txt").records
    assert run.failure == "no-device"


# ---- on the cluster: real bytes through the rails -------------------------------------------------


@pytest.fixture(scope="module")
def rails(cluster_factory):
    return cluster_factory(nodes=2, rails=4)


def loopbacks(cluster, host: str) -> dict[str, object]:
    """ib_write_bw to its own host on all four HCAs at once (server, then client), as the node checks
    run it; the client outputs parsed by the project's perftest parser."""
    servers = [
        cluster.popen(
            host,
            ["ib_write_bw", "-d", f"mlx5_{k}", "-p", str(18515 + k), "-s", "8388608", "-F", "--report_gbits"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for k in range(4)
    ]
    time.sleep(0.3)
    clients = [
        cluster.popen(
            host,
            [
                "ib_write_bw",
                "-d",
                f"mlx5_{k}",
                "-p",
                str(18515 + k),
                "-s",
                "8388608",
                "-F",
                "--report_gbits",
                host,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for k in range(4)
    ]
    runs = {}
    for k, (client, server) in enumerate(zip(clients, servers, strict=True)):
        out, _ = client.communicate(timeout=60)
        server_out, _ = server.communicate(timeout=60)
        assert client.returncode == 0 and server.returncode == 0, out + server_out
        (run,) = perftest.parse(out, f"loopback-mlx5_{k}.txt").records
        assert (run.device, run.bw_unit, run.status, run.test) == (f"mlx5_{k}", "Gb/sec", "ok", "write_bw")
        assert "Waiting for client to connect" in server_out
        runs[f"mlx5_{k}"] = run.rows[0].bw_average
    return runs


def test_a_shaped_rail_reads_lower_and_the_others_do_not(rails) -> None:
    healthy = loopbacks(rails, "node1")
    print("healthy loopback Gb/s:", healthy, file=sys.stderr)
    assert all(300 < value < 500 for value in healthy.values()), healthy  # a 400G-looking port
    rails.shape_rail_port("node1", 2, "10mbit")
    try:
        shaped = loopbacks(rails, "node1")
        other = loopbacks(rails, "node2")
    finally:
        rails.unshape_rails("node1")
    print("node1 rail2 at 10mbit:", shaped, "node2:", other, file=sys.stderr)
    assert shaped["mlx5_2"] < 0.4 * min(v for k, v in shaped.items() if k != "mlx5_2")
    assert min(v for k, v in shaped.items() if k != "mlx5_2") > 300
    assert min(other.values()) > 300  # another node's HCA 2 is on its own port of the same rail


def test_a_whole_rail_shaped_slows_that_hca_on_every_node(rails) -> None:
    rails.shape_rail(1, "10mbit")
    try:
        measured = {host: loopbacks(rails, host) for host in rails.hosts}
    finally:
        rails.unshape_rails()
    for host, runs in measured.items():
        slow = [hca for hca, value in runs.items() if value < 0.4 * max(runs.values())]
        assert slow == ["mlx5_1"], (host, runs)


def test_rails_are_bridges_of_their_own(rails) -> None:
    addresses = rails.exec("node1", ["ip", "-o", "-4", "addr", "show"], check=True).stdout
    found = dict(re.findall(r"\d+: (rail\d)\s+inet (\S+)/24", addresses))
    assert sorted(found) == ["rail0", "rail1", "rail2", "rail3"]
    peer = json.loads((rails.workdir / "nodes" / "node2" / "bin" / "devices.json").read_text())["hcas"][3]
    ping = rails.exec("node1", ["ping", "-c1", "-W2", "-I", "rail3", peer["address"]])
    assert ping.returncode == 0, ping.stdout
    for rail in range(4):  # each rail's switch holds that rail's port of every node, nothing else
        ports = subprocess.run(
            ["ip", "-n", rails.bridge_namespace, "-o", "link", "show", "master", f"rail{rail}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert sorted(re.findall(r"^\d+: (\S+?)@", ports, re.MULTILINE)) == [f"r{rail}n1", f"r{rail}n2"]
