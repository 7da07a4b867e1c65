"""`collbench fetch` on the SSH test cluster: logs left on the nodes by a job outside Ansible (real
corpus logs, and a real two-node torchrun job), fetched over SSH with host keys checked, laid out as
a run directory that `collbench report` judges. Layout rules are also checked without the cluster."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest

from collbench_py import cli
from collbench_py.fetch import FetchError, Layout, RemoteFile, place, resolve_target, safe_name, split_runs
from tests.cluster.conftest import cluster, cluster_factory, cluster_support  # noqa: F401
from tests.cluster.vcluster import Cluster

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "data" / "corpus" / "nccl-tests"
FIVE_COLLECTIVES = CORPUS / "dgx2-v100-12gpu-nccl-tests-v1-error-column-5-collectives.txt"
SENDRECV = CORPUS / "sendrecv-nthread2-info-interleaved-destroy-lines-a100-leonardo.txt"
TWO_NODE = CORPUS / "hgx-h100-2node-16rank-mpi-warnings-interleaved-16GiB.txt"
TORCH_BENCH = REPO / "collbench_py" / "node" / "collbench_torch_bench.py"


def collbench(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    commands = tuple(dict.fromkeys((*cli.COMMANDS, "fetch", "report")))
    saved, cli.COMMANDS = cli.COMMANDS, commands
    try:
        code = cli.main(argv)
    finally:
        cli.COMMANDS = saved
    out, err = capsys.readouterr()
    return code, out, err


# ---- without the cluster: how fetched files are filed -------------------------------------------------


def _source(host: str, path: str, mtime: float = 1.0) -> RemoteFile:
    return RemoteFile(host=host, path=path, size=0, mtime=mtime)


def test_five_collectives_in_one_old_log_are_split_by_collective() -> None:
    text = FIVE_COLLECTIVES.read_text()
    assert len(split_runs(text)) == 5
    layout = Layout(hosts=["node1", "node2"], names={"node1": "node1", "node2": "node2"})
    place(layout, _source("node1", "/job/multi.log"), text)
    assert sorted(layout.logs) == [
        f"hosts/node1/intra/{c}.log"
        for c in ("all_gather", "all_reduce", "broadcast", "reduce", "reduce_scatter")
    ]
    # Each file holds its own run only: the all_reduce file has no broadcast header.
    assert "broadcast_perf" not in layout.logs["hosts/node1/intra/all_reduce.log"].text.split("nThread", 1)[1]
    assert any("ranks on seville, filed under node1" in note for note in layout.notes)


def test_a_log_of_two_hosts_is_a_pair_unless_they_are_all_the_hosts() -> None:
    text = TWO_NODE.read_text()
    four = Layout(hosts=["bm-h100-01", "bm-h100-02", "c", "d"], names={})
    place(four, _source("c", "/job/x.log"), text)
    assert list(four.logs) == ["inter/pairs/bm-h100-01--bm-h100-02/all_reduce.log"]
    two = Layout(hosts=["bm-h100-01", "bm-h100-02"], names={})
    place(two, _source("bm-h100-01", "/job/x.log"), text)
    assert list(two.logs) == ["inter/all/all_reduce.log"]
    assert two.logs["inter/all/all_reduce.log"].hosts == ("bm-h100-01", "bm-h100-02")


def test_same_log_from_a_shared_filesystem_is_kept_once_and_a_different_one_newest() -> None:
    layout = Layout(hosts=["a", "b"], names={})
    text = SENDRECV.read_text()
    place(layout, _source("a", "/shared/s.log"), text)
    place(layout, _source("a", "/shared/s.log"), text)
    assert list(layout.logs) == ["hosts/a/intra/sendrecv.log"] and not any(
        "two different" in n for n in layout.notes
    )
    newer = text.replace("Avg bus bandwidth", "Avg bus bandwidth ")
    place(layout, _source("a", "/shared/s2.log", mtime=5.0), newer)
    assert layout.logs["hosts/a/intra/sendrecv.log"].source.path == "/shared/s2.log"
    assert any("two different logs" in n for n in layout.notes)


def test_files_that_are_not_benchmark_logs_are_skipped_with_a_note() -> None:
    layout = Layout(hosts=["a"], names={})
    place(layout, _source("a", "/job/slurm.err"), "srun: error: node7: task 3: Exited with exit code 1\n")
    assert not layout.logs and "not a benchmark log" in layout.notes[0]


def test_host_names_are_made_safe_for_paths() -> None:
    assert safe_name("../etc") == "_._etc"
    assert safe_name("gpu node/7") == "gpu_node_7"
    assert safe_name(".hidden") == "_hidden"


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A TCP port on 127.0.0.1 that accepts connections and never says a word (an overloaded sshd,
    a half-dead node). Its thread stops when the test ends, and after 60 s at the latest."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        deadline = time.monotonic() + 60
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        server.close()


def test_a_host_that_sends_no_ssh_banner_is_one_line_without_a_traceback(
    silent_port: int, tmp_path: Path
) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host quiet1 quiet2 quiet3\n  HostName 127.0.0.1\n  Port {silent_port}\n  ConnectTimeout 1\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "collbench_py", "fetch", "--hosts", "quiet1,quiet2,quiet3", "--ssh-config",
         str(config), "--known-hosts", str(tmp_path / "known_hosts"), "--remote-glob", "/job/*.log",
         "--run-dir", str(tmp_path / "run")],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.returncode == 2 and result.stdout == ""
    said = [
        f"quiet{n}: 127.0.0.1:{silent_port} accepted the connection but sent no SSH banner (waited 1 s): "
        "sshd overloaded or hung, or not sshd"
        for n in (1, 2, 3)
    ]
    assert result.stderr.splitlines() == [
        *(f"collbench fetch: {line}" for line in said),
        f"collbench fetch: nothing to write: {'; '.join(said)}",
    ]
    assert not (tmp_path / "run").exists()


# ---- on the cluster -----------------------------------------------------------------------------------


def _put(vc: Cluster, host: str, remote: str, text: str) -> None:
    vc.ssh(host, ["sh", "-c", f"mkdir -p ~/job && cat > ~/job/{remote}"], input=text, check=True)


def _two_node_torch_job(vc: Cluster, a: str, b: str) -> None:
    """A real job outside Ansible: two ranks on two nodes (the environment a launcher such as srun
    or an MPIJob sets), rank 0 writing its log on `a`."""
    script = [sys.executable, str(TORCH_BENCH), "--collectives", "all_reduce", "-b", "1M", "-e", "2M"]
    script += ["-n", "2", "-w", "1", "--out-dir", str(vc.home(a) / "job")]
    procs = []
    for rank, host in enumerate((a, b)):
        env = [f"RANK={rank}", "WORLD_SIZE=2", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1"]
        env += [f"MASTER_ADDR={vc.address(a)}", "MASTER_PORT=29561", "GLOO_SOCKET_IFNAME=eth0"]
        pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
        procs.append(vc.popen(host, ["env", *env, *script], **pipes))
    for proc in procs:
        out, _ = proc.communicate(timeout=180)
        assert proc.returncode == 0, out[-2000:]


@pytest.fixture(scope="module")
def job_cluster(cluster: Cluster) -> Cluster:  # noqa: F811 - the fixture imported above
    for host in cluster.hosts:
        cluster.ssh(host, ["rm", "-rf", "job"], check=True)
    _put(cluster, "node1", "multi.log", FIVE_COLLECTIVES.read_text())
    _put(cluster, "node2", "slurm-7.out", SENDRECV.read_text())
    _put(cluster, "node2", "slurm-7.err", "srun: Job step aborted: Waiting up to 32 seconds\n")
    _two_node_torch_job(cluster, "node3", "node4")
    return cluster


@pytest.mark.cluster
def test_fetch_from_inventory_then_report(job_cluster: Cluster, tmp_path: Path, capsys) -> None:
    run_dir = tmp_path / "fetched"
    code, out, err = collbench(
        [
            "fetch",
            "-i",
            str(job_cluster.inventory_path),
            "--remote-glob",
            "~/job/*",
            "--run-dir",
            str(run_dir),
        ],
        capsys,
    )
    assert code == 0, err
    assert f"written to {run_dir}" in out and "slurm-7.err: not a benchmark log" in out
    logs = sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*.log"))
    assert logs == [
        "hosts/node1/intra/all_gather.log",
        "hosts/node1/intra/all_reduce.log",
        "hosts/node1/intra/broadcast.log",
        "hosts/node1/intra/reduce.log",
        "hosts/node1/intra/reduce_scatter.log",
        "hosts/node2/intra/sendrecv.log",
        "inter/pairs/node3--node4/all_reduce.log",
    ]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["run_id"] == "fetched" and set(manifest["hosts"]) == {"node1", "node2", "node3", "node4"}
    pair = next(launch for launch in manifest["launches"] if launch["kind"] == "pair")
    assert pair["hosts"] == ["node3", "node4"]
    assert pair["source"] == f"node3:{job_cluster.home('node3')}/job/all_reduce.log"

    code, out, err = collbench(["report", str(run_dir)], capsys)
    results = json.loads((run_dir / "report" / "results.json").read_text())
    verdicts = {h["host"]: h["verdict"] for h in results["hosts"]}
    # node1's all_gather log really did fail its data check (`Out of bounds values : 4 FAILED`).
    assert code == 1 and verdicts["node1"] == "failed", out + err
    assert verdicts["node2"] == "passed"
    measured = [r for r in results["results"] if r["log"] == "inter/pairs/node3--node4/all_reduce.log"]
    assert [r["size"] for r in measured] == [1048576, 2097152] and measured[0]["nranks"] == 2
    assert (run_dir / "report" / "index.html").is_file()


@pytest.mark.cluster
def test_fetch_by_host_names_through_the_ssh_config(job_cluster: Cluster, tmp_path: Path, capsys) -> None:
    argv = ["fetch", "--hosts", "node2", "--ssh-config", str(job_cluster.ssh_config_path)]
    code, _, err = collbench([*argv, "--remote-glob", "~/job/*.out", "--results-dir", str(tmp_path)], capsys)
    assert code == 0, err
    (run_dir,) = tmp_path.iterdir()
    assert (run_dir / "hosts" / "node2" / "intra" / "sendrecv.log").read_text() == SENDRECV.read_text()


def _config(tmp_path: Path, text: str):
    path = tmp_path / "ssh_config"
    path.write_text(text)
    return paramiko.SSHConfig.from_path(str(path))


def test_proxyjump_chains_are_resolved_hop_by_hop_through_the_config(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        "Host gpu7\n  HostName 10.1.0.7\n  ProxyJump ops@bastion:2222,inner\n"
        "Host bastion\n  HostName bastion.example.org\n  User nobody\n"
        "Host inner\n  HostName 192.168.0.2\n  ProxyJump elsewhere\n",
    )
    target = resolve_target("gpu7", config)
    inner = target.jump
    assert (target.hostname, inner.name, inner.hostname) == ("10.1.0.7", "inner", "192.168.0.2")
    # inner is reached through bastion, not through its own ProxyJump, as ssh -J does it.
    bastion = inner.jump
    assert (bastion.hostname, bastion.user, bastion.port) == ("bastion.example.org", "ops", 2222)
    assert bastion.jump is None
    assert resolve_target("bastion", config).jump is None


def test_a_proxyjump_loop_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    config = _config(tmp_path, "Host a\n  ProxyJump b\nHost b\n  ProxyJump a\n")
    with pytest.raises(FetchError, match="ProxyJump goes more than 8 hops deep"):
        resolve_target("a", config)
    with pytest.raises(FetchError, match="cannot read the hop"):
        resolve_target("c", _config(tmp_path, "Host c\n  ProxyJump user@@x\n"))


@pytest.mark.cluster
def test_fetch_through_a_jump_host_to_an_address_only_it_can_reach(
    job_cluster: Cluster, tmp_path: Path, capsys
) -> None:
    # The nodes' addresses live behind a bridge in its own namespace: from here only node1's
    # ProxyCommand reaches node1, and node2's address is reachable from node1 alone.
    config = tmp_path / "ssh_config"
    behind = job_cluster.address("node2")
    config.write_text(
        f"Host node2-via-node1 node9-via-node1\n  HostKeyAlias node2\n  ProxyJump node1\n"
        f"Host node2-via-node1\n  HostName {behind}\n"
        f"Host node9-via-node1\n  HostName 10.255.255.1\n  ConnectTimeout 3\n\n"
        + job_cluster.ssh_config_path.read_text()
    )
    argv = ["fetch", "--ssh-config", str(config), "--remote-glob", "~/job/*.out"]
    code, _, err = collbench([*argv, "--hosts", "node2-via-node1", "--run-dir", str(tmp_path / "a")], capsys)
    assert code == 0, err
    fetched = tmp_path / "a" / "hosts" / "node2-via-node1" / "intra" / "sendrecv.log"
    assert fetched.read_text() == SENDRECV.read_text()

    argv += ["--hosts", "node9-via-node1", "--run-dir", str(tmp_path / "b")]
    code, out, err = collbench(argv, capsys)
    assert code == 2 and "Traceback" not in err
    assert "node9-via-node1: jump host node1 cannot reach 10.255.255.1:22" in out + err, out + err


@pytest.mark.cluster
def test_unknown_host_key_is_refused_with_a_clear_message(
    job_cluster: Cluster, tmp_path: Path, capsys
) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    argv = ["fetch", "--hosts", "node1", "--ssh-config", str(job_cluster.ssh_config_path)]
    argv += ["--known-hosts", str(empty), "--remote-glob", "~/job/*", "--run-dir", str(tmp_path / "run")]
    code, _, err = collbench(argv, capsys)
    assert code == 2
    assert "host key of node1 is not in known_hosts" in err and "--accept-new-host-keys" in err
    assert "Traceback" not in err and not (tmp_path / "run").exists() and empty.read_text() == ""


@pytest.mark.cluster
def test_accept_new_host_keys_remembers_the_key(job_cluster: Cluster, tmp_path: Path, capsys) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    base = ["fetch", "--hosts", "node2", "--ssh-config", str(job_cluster.ssh_config_path)]
    base += ["--known-hosts", str(known), "--remote-glob", "~/job/*.out"]
    code, _, err = collbench([*base, "--accept-new-host-keys", "--run-dir", str(tmp_path / "a")], capsys)
    assert code == 0, err
    recorded = known.read_text().split()
    real = next(
        line.split() for line in job_cluster.known_hosts_path.read_text().splitlines() if "node2" in line
    )
    assert recorded == ["node2", *real[1:3]]
    code, _, err = collbench([*base, "--run-dir", str(tmp_path / "b")], capsys)
    assert code == 0, err


@pytest.mark.cluster
def test_changed_host_key_is_refused_even_when_accepting_new_keys(
    job_cluster: Cluster, tmp_path: Path, capsys
) -> None:
    lines = job_cluster.known_hosts_path.read_text().splitlines()
    node3_key = next(line.split()[1:3] for line in lines if line.split()[0].split(",")[0] == "node3")
    forged = tmp_path / "known_hosts"
    forged.write_text(f"node1 {' '.join(node3_key)}\n")
    argv = ["fetch", "--hosts", "node1", "--ssh-config", str(job_cluster.ssh_config_path)]
    argv += ["--known-hosts", str(forged), "--accept-new-host-keys", "--remote-glob", "~/job/*"]
    code, _, err = collbench([*argv, "--run-dir", str(tmp_path / "run")], capsys)
    assert code == 2 and "HOST KEY CHANGED for node1" in err
    assert forged.read_text() == f"node1 {' '.join(node3_key)}\n"


@pytest.mark.cluster
def test_unreachable_host_is_recorded_and_an_existing_run_dir_never_overwritten(
    job_cluster: Cluster, tmp_path: Path, capsys
) -> None:
    argv = ["fetch", "--hosts", "node1,node2", "--ssh-config", str(job_cluster.ssh_config_path)]
    argv += ["--remote-glob", "~/job/*"]
    job_cluster.stop_sshd("node1")
    try:
        code, out, err = collbench([*argv, "--run-dir", str(tmp_path / "run")], capsys)
    finally:
        job_cluster.start_sshd("node1")
    assert code == 1, err
    assert "node1: " in err and "unreachable: node1" in out
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["hosts"]["node1"]["status"] == "unreachable" and manifest["hosts"]["node1"]["reason"]
    assert manifest["hosts"]["node2"]["status"] == "ok"

    before = sorted(p.name for p in (tmp_path / "run").rglob("*"))
    code, _, err = collbench([*argv, "--run-dir", str(tmp_path / "run")], capsys)
    assert code == 2 and "never written into twice" in err
    assert sorted(p.name for p in (tmp_path / "run").rglob("*")) == before
    shutil.rmtree(tmp_path / "run")
