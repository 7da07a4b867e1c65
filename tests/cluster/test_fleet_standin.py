"""The GPU-fleet stand-in: fleet nodes of the test cluster and the stand-in nccl-tests suite.

A fleet node is what a rented GPU node is: management on eth0, data on eth1, its own name on 127.0.1.1,
no ssh between nodes, an nvidia-smi that replays an idle H100 node (and hangs on a chosen node). The
stand-in nccl-tests measure for real under a real mpirun across the nodes, over the data network.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from collbench_py.parsers import parse_file
from tests.cluster.vcluster import (
    IDLE_H100_QUERY,
    NCCL_TESTS_BINARIES,
    NVIDIA_SMI,
    TOPOLOGIES,
    Cluster,
    install_nccl_tests_standin,
    nvidia_smi_config,
)

HUNG = "node3"
MPIRUN = shutil.which("mpirun")
needs_mpi = pytest.mark.skipif(MPIRUN is None, reason="no mpirun (Debian: openmpi-bin)")
# busbw / algbw of each collective at 3 ranks: nccl-tests' factors (doc/PERFORMANCE.md).
ARGS = {  # nccl-tests command lines, by the way one writes them
    line: line.split()
    for line in (
        "-b 4M -e 8M -f 2 -n 3 -w 1 -c 1",
        "-b 4M -e 8M -f 2 -n 2 -w 1 -c 0",
        "-b 64K -e 256K -f 4 -n 2 -w 1 -c 1 -J",
        "-b 1K -e 2K -f 2 -n 1 -w 1 -c 1",
    )
}
FACTORS_AT_3 = {
    "all_reduce": 4 / 3,
    "all_gather": 2 / 3,
    "reduce_scatter": 2 / 3,
    "alltoall": 2 / 3,
    "broadcast": 1.0,
    "sendrecv": 1.0,
}


@pytest.fixture(scope="module")
def fleet(cluster_factory: Callable[..., Cluster]) -> Cluster:
    return cluster_factory(nodes=3, fleet=True, hang_nvidia_smi=[HUNG])


@pytest.fixture(scope="module")
def standin_dir(fleet: Cluster) -> Path:
    """The stand-in binaries where every node sees them (the nodes share this machine's filesystem)."""
    return install_nccl_tests_standin(fleet.workdir / "nccl-tests")


# ---- fleet nodes ---------------------------------------------------------------------------------------


def test_fleet_nodes_have_a_management_and_a_data_interface(fleet: Cluster) -> None:
    for host in fleet.hosts:
        shown = fleet.ssh(host, ["ip", "-4", "-o", "addr", "show"], check=True).stdout
        addresses = {line.split()[1]: line.split()[3] for line in shown.splitlines()}
        assert addresses["eth0"] == f"{fleet.address(host)}/24"
        assert addresses["eth1"] == f"{fleet.address(host, 'data')}/24"
        assert fleet.address(host, "data").split(".")[2] == "1" != fleet.address(host).split(".")[2]
    # The data network carries traffic between nodes.
    ping = fleet.ssh("node1", ["ping", "-c", "1", "-W", "2", fleet.address("node2", "data")])
    assert ping.returncode == 0, ping.stdout + ping.stderr


def test_a_fleet_node_names_itself_127_0_1_1_and_the_others_by_management_address(fleet: Cluster) -> None:
    for host in fleet.hosts:
        assert fleet.ssh(host, ["hostname", "-i"], check=True).stdout.split() == ["127.0.1.1"]
        others = [h for h in fleet.hosts if h != host]
        resolved = fleet.ssh(host, ["getent", "hosts", host, *others], check=True).stdout.split("\n")
        found = dict(reversed(line.split()) for line in resolved if line.strip())
        assert found == {host: "127.0.1.1", **{h: fleet.address(h) for h in others}}


def test_fleet_nodes_cannot_ssh_to_each_other(fleet: Cluster) -> None:
    for host in fleet.hosts:
        assert fleet.ssh(host, ["ls", "-A", str(fleet.home(host) / ".ssh")], check=True).stdout == ""
    attempt = fleet.ssh("node1", ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "node2", "true"])
    assert attempt.returncode == 255, attempt.stderr


def test_the_chosen_node_s_nvidia_smi_hangs(fleet: Cluster) -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        fleet.exec(HUNG, ["nvidia-smi", "-L"], timeout=3)


def test_the_other_nodes_replay_an_idle_h100_node(fleet: Cluster) -> None:
    fields = "index,pci.bus_id,memory.used,memory.total,pcie.link.gen.current,pcie.link.gen.max"
    fields += ",pcie.link.width.current,pcie.link.width.max"
    captured = IDLE_H100_QUERY.read_text().splitlines()[1:]
    matrix = (TOPOLOGIES / nvidia_smi_config("hgx-h100")["topology"]).read_text()
    matrix = matrix[matrix.index("\tGPU0") :] if "\tGPU0" in matrix else matrix
    for host in (h for h in fleet.hosts if h != HUNG):
        query = [f"--query-gpu={fields}", "--format=csv,noheader,nounits"]
        answer = fleet.ssh(host, ["nvidia-smi", *query], check=True, timeout=20).stdout.splitlines()
        assert answer == captured
        gens = {(line.split(", ")[4], line.split(", ")[5]) for line in answer}
        assert gens == {("1", "5")}  # idle: the link below its max generation
        topo = fleet.ssh(host, ["nvidia-smi", "topo", "-m"], check=True, timeout=20).stdout
        assert topo.count("NV18") == 8 * 7 and topo.strip().endswith(matrix.strip()[-40:])


def test_a_node_running_nccl_tests_reads_its_pcie_link_at_max(fleet: Cluster) -> None:
    """Busy GPUs: the link at gen 5 x16, as the real H100 read under load; a quiet node stays idle."""
    busy, quiet = [h for h in fleet.hosts if h != HUNG][:2]
    query = ["--query-gpu=pcie.link.gen.current,pcie.link.width.current", "--format=csv,noheader,nounits"]
    load = fleet.popen(busy, ["bash", "-c", "exec -a all_reduce_perf sleep 30"])
    try:
        deadline = time.monotonic() + 10
        while not any("all_reduce_perf" in cmd for cmd in fleet.processes(busy).values()):
            assert time.monotonic() < deadline, "the stand-in load did not start"
            time.sleep(0.05)
        under_load = (
            fleet.ssh(busy, ["nvidia-smi", *query], check=True, timeout=20).stdout.replace(" ", "").split()
        )
        idle = (
            fleet.ssh(quiet, ["nvidia-smi", *query], check=True, timeout=20).stdout.replace(" ", "").split()
        )
    finally:
        load.kill()
        load.wait()
    assert set(under_load) == {"5,16"} and len(under_load) == 8
    assert set(idle) == {"1,16"}


# ---- the stand-in nccl-tests under a real mpirun ---------------------------------------------------------


def mpirun_argv(fleet: Cluster, hosts: list[str], binary: Path, *args: str) -> list[str]:
    """mpirun from the first host over ssh with the cluster key: a setup of this test's own, since the
    nodes have no ssh between them. MPI's data goes over eth1, its control over eth0."""
    rsh = f"-i {fleet.key_path} -o UserKnownHostsFile={fleet.known_hosts_path} -o BatchMode=yes"
    return [
        "timeout",
        "150",
        "mpirun",
        "--allow-run-as-root",
        "--bind-to",
        "none",
        "-np",
        str(len(hosts)),
        "--host",
        ",".join(hosts),
        "--mca",
        "plm_rsh_args",
        rsh,
        "--mca",
        "oob_tcp_if_include",
        "eth0",
        "--mca",
        "btl",
        "tcp,self",
        "--mca",
        "btl_tcp_if_include",
        "eth1",
        str(binary),
        *args,
    ]


def tx_bytes(fleet: Cluster, host: str) -> dict[str, int]:
    read = ["cat", "/sys/class/net/eth0/statistics/tx_bytes", "/sys/class/net/eth1/statistics/tx_bytes"]
    eth0, eth1 = fleet.exec(host, read, check=True).stdout.split()
    return {"eth0": int(eth0), "eth1": int(eth1)}


def run_pair(fleet: Cluster, standin_dir: Path, out: Path, *args: str) -> tuple[Path, Path]:
    json_path = out.with_suffix(".json")
    argv = mpirun_argv(
        fleet, ["node1", "node2"], standin_dir / "all_reduce_perf", *args, "-J", str(json_path)
    )
    result = fleet.ssh("node1", argv, timeout=180)
    out.write_text(result.stdout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out, json_path


def best_busbw(json_path: Path) -> float:
    results = json.loads(json_path.read_text())["results"]
    return max(max(r["out_of_place"]["bus_bw"], r["in_place"]["bus_bw"]) for r in results)


@needs_mpi
def test_standin_nccl_tests_measure_across_nodes_over_the_data_network(
    fleet: Cluster, standin_dir: Path, tmp_path: Path
) -> None:
    before = tx_bytes(fleet, "node2")
    text, json_path = run_pair(
        fleet, standin_dir, tmp_path / "pair.txt", *ARGS["-b 4M -e 8M -f 2 -n 3 -w 1 -c 1"]
    )
    sent = {name: tx_bytes(fleet, "node2")[name] - before[name] for name in before}
    # node2 sends its 4 and 8 MB halves over eth1 every iteration; eth0 carries only ssh and MPI control.
    assert sent["eth1"] > 12 * 4 * 2**20 > 20 * sent["eth0"], sent
    output = text.read_text()
    assert (
        "#  Rank  1 Group  0 Pid" in output and " on      node2 device  0 [0000:18:00] NVIDIA H100" in output
    )
    report = json.loads(json_path.read_text())
    assert [d["hostname"] for d in report["config"]["devices"]] == ["node1", "node2"]
    measured = [(r["size"], r["out_of_place"]["bus_bw"], r["in_place"]["bus_bw"]) for r in report["results"]]
    assert [size for size, _, _ in measured] == [4 * 2**20, 8 * 2**20]
    assert all(r["out_of_place"]["nwrong"] == 0 == r["in_place"]["nwrong"] for r in report["results"])
    for path, places in ((text, 0.006), (json_path, 1e-6)):  # the text rounds to 2 decimals
        (run,) = parse_file(path).runs
        assert run.collective == "all_reduce" and run.nranks == 2
        parsed = [(row.size, row.oop.busbw, row.ip.busbw) for row in run.rows]
        assert [p[0] for p in parsed] == [m[0] for m in measured]
        for got, want in zip(parsed, measured, strict=True):
            assert got[1:] == pytest.approx(want[1:], abs=places)


@needs_mpi
def test_a_shaped_data_link_shows_in_busbw(fleet: Cluster, standin_dir: Path, tmp_path: Path) -> None:
    args = ARGS["-b 4M -e 8M -f 2 -n 2 -w 1 -c 0"]
    _, healthy = run_pair(fleet, standin_dir, tmp_path / "healthy.txt", *args)
    fleet.shape("node2", "100mbit", interface="data")
    try:
        _, shaped = run_pair(fleet, standin_dir, tmp_path / "shaped.txt", *args)
    finally:
        fleet.unshape("node2", "data")
    ratio = best_busbw(healthy) / best_busbw(shaped)
    print(
        f"\nbusbw node1-node2 healthy {best_busbw(healthy):.4f} GB/s, 100mbit data link "
        f"{best_busbw(shaped):.4f} GB/s: {ratio:.1f}x"
    )
    assert ratio >= 5
    assert best_busbw(shaped) <= 0.0125 * 1.1  # 100 Mbit/s is 0.0125 GB/s: nothing beats the line


# ---- the stand-in suite on this machine: formats, factors, data check ------------------------------------


@pytest.fixture(scope="module")
def local_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stand-ins and an H100 node's nvidia-smi in one directory, for mpirun on this machine."""
    bindir = install_nccl_tests_standin(tmp_path_factory.mktemp("suite") / "bin", sys.executable)
    (bindir / "nvidia-smi").symlink_to(NVIDIA_SMI)
    (bindir / "nvidia-smi.json").write_text(json.dumps(nvidia_smi_config("hgx-h100")))
    return bindir


def local_argv(bindir: Path, binary: str, *args: str, env: dict[str, str] | None = None) -> list[str]:
    argv = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "3"]
    argv += [word for name in env or {} for word in ("-x", name)]
    return [*argv, str(bindir / binary), *args]


def local_env(bindir: Path, env: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", **(env or {})}


def local_run(
    bindir: Path, binary: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    argv = local_argv(bindir, binary, *args, env=env)
    return subprocess.run(
        argv, check=False, capture_output=True, text=True, timeout=120, env=local_env(bindir, env)
    )


@pytest.fixture(scope="module")
def suite_runs(
    local_suite: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[str, int, Path]]:
    """Every collective at 3 ranks, launched side by side (most of a launch is starting Python)."""
    out = tmp_path_factory.mktemp("suite-runs")
    children = {}
    for collective in FACTORS_AT_3:
        json_path = out / f"{collective}.json"
        argv = local_argv(local_suite, f"{collective}_perf", *ARGS["-b 64K -e 256K -f 4 -n 2 -w 1 -c 1 -J"])
        children[collective] = (
            subprocess.Popen(
                [*argv, str(json_path)],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=local_env(local_suite),
            ),
            json_path,
        )
    runs = {}
    for collective, (child, json_path) in children.items():
        output, _ = child.communicate(timeout=180)
        runs[collective] = (output, child.returncode, json_path)
    return runs


@needs_mpi
@pytest.mark.parametrize("collective", list(FACTORS_AT_3))
def test_each_standin_prints_nccl_tests_output_with_its_busbw_factor(
    suite_runs: dict[str, tuple[str, int, Path]], tmp_path: Path, collective: str
) -> None:
    output, returncode, json_path = suite_runs[collective]
    assert returncode == 0, output
    lines = output.splitlines()
    assert lines[0] == f"# Writing JSON output to {json_path}"
    assert lines[1].startswith("# nccl-tests version 2.19.6 nccl-headers=")
    assert lines[2] == f"# Collective test starting: {collective}_perf"
    assert (
        "# Out of bounds values : 0 OK" in lines
        and f"# Collective test concluded: {collective}_perf" in lines
    )
    report = json.loads(json_path.read_text())
    assert len(report["results"]) == 2 and report["out_of_bounds"] == {"count": 0, "okay": "true"}
    for row in report["results"]:
        for half in ("out_of_place", "in_place"):
            measured = row[half]
            assert measured["bus_bw"] == pytest.approx(
                measured["alg_bw"] * FACTORS_AT_3[collective], rel=1e-4, abs=2e-6
            )
            assert measured["alg_bw"] > 0
        assert row["out_of_place"]["nwrong"] == 0
    text_path = tmp_path / "out.txt"
    text_path.write_text(output)
    (run,) = parse_file(text_path).runs
    assert run.collective == collective and run.nranks == 3
    assert [row.size for row in run.rows] == [r["size"] for r in report["results"]]


@needs_mpi
def test_the_data_check_counts_wrong_elements(local_suite: Path) -> None:
    faulty = local_run(
        local_suite,
        "all_reduce_perf",
        *ARGS["-b 1K -e 2K -f 2 -n 1 -w 1 -c 1"],
        env={"NCCL_TESTS_STANDIN_CORRUPT_RANK": "1"},
    )
    assert faulty.returncode == 7, faulty.stdout + faulty.stderr  # nccl-tests' exit code for bad data
    rows = [line.split() for line in faulty.stdout.splitlines() if line.strip()[:1].isdigit()]
    assert [(row[8], row[12]) for row in rows] == [("1", "1"), ("1", "1")]
    # Every rank counts each failed check: 2 sizes x 2 halves x 3 ranks.
    assert "# Out of bounds values : 12 FAILED" in faulty.stdout
    clean = local_run(local_suite, "all_reduce_perf", *ARGS["-b 1K -e 2K -f 2 -n 1 -w 1 -c 1"])
    assert clean.returncode == 0 and "# Out of bounds values : 0 OK" in clean.stdout


def test_the_suite_installs_as_the_build_role_expects(tmp_path: Path) -> None:
    bindir = install_nccl_tests_standin(tmp_path / "prebuilt", "/usr/bin/python3")
    for name in NCCL_TESTS_BINARIES:
        path = bindir / name
        assert os.access(path, os.X_OK) and path.read_text().startswith("#!/usr/bin/python3\n")
    # verify.yml runs ldd on the first binary and fails on "not found": a script has no libraries to miss.
    ldd = subprocess.run(
        ["ldd", str(bindir / NCCL_TESTS_BINARIES[0])], check=False, capture_output=True, text=True
    )
    assert "not found" not in ldd.stdout + ldd.stderr
