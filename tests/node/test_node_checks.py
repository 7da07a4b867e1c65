"""collbench_py/node/node_checks.py run as the node_checks role runs it (one CONFIG_JSON argument),
with stand-in executables on PATH that print real captured outputs from the shared corpus."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collbench_py.node import node_checks
from collbench_py.parsers import matrices

REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "collbench_py" / "node" / "node_checks.py"
CORPUS = REPO.parent / "shared" / "corpus"
if not CORPUS.is_dir():
    CORPUS = Path("/work/shared/corpus")
A10_NVBANDWIDTH = CORPUS / "nvbandwidth" / "a10-single-gpu-h2d-ce-and-sm-v0.5.txt"
H100_NVLINK = CORPUS / "nvlink" / "gke-a3-h100-1gpu-pod-nvlink-status-tab-indent.txt"
CX7_IBSTAT = CORPUS / "ib" / "cx7-roce-ibstat-port-down-disabled-rate40-elided-plus-ibdev2netdev.txt"
T4_WRITE_BW = (
    CORPUS / "perftest" / "k8s-t4-gpudirect-roce-rdma-cm-write-bw-server-client-relaxed-ordering-warning.txt"
)
H200_NO_NVLINK = REPO / "tests" / "data" / "gpu-captures" / "h200-1gpu"
NO_DEVICE = CORPUS / "perftest" / "no-rdma-device-in-container-unable-to-find-device.txt"

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason="the shared corpus is not here")


def lines_between(path: Path, start: str, stop: str | None) -> str:
    """The captured output between two marker lines of a corpus file (prompts and titles left out)."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if line.startswith(start)) + 1
    last = next((i for i in range(first, len(lines)) if stop and lines[i].startswith(stop)), len(lines))
    return "".join(lines[first:last])


def a10_run() -> str:
    return lines_between(A10_NVBANDWIDTH, "$ ./nvbandwidth -t host_to_device_memcpy_ce", "$ ")


def ibstat_capture() -> str:
    return lines_between(CX7_IBSTAT, "$> ibstat", "..")


def ibdev2netdev_capture() -> str:
    return CX7_IBSTAT.read_text(encoding="utf-8").splitlines(keepends=True)[-1]


def write_bw_server() -> str:
    return lines_between(T4_WRITE_BW, "ib_write_bw -d mlx5_5", "#client example")


def write_bw_client() -> str:
    return lines_between(T4_WRITE_BW, "ib_write_bw -d mlx5_4", None)


class Tools:
    """A directory of stand-in executables: each prints a captured output, then exits or hangs."""

    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.bin.mkdir()
        self.data = root / "data"
        self.data.mkdir()
        self.calls = root / "calls"
        self.calls.mkdir()

    def add(self, name: str, body: str) -> Path:
        path = self.bin / name
        path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
        path.chmod(0o755)
        return path

    def printing(self, name: str, text: str, rc: int = 0, then: str = "") -> Path:
        out = self.data / f"{name}.out"
        out.write_text(text, encoding="utf-8")
        log = self.calls / name
        return self.add(name, f'echo "$@" >> {log}\n/bin/cat {out}\n{then}exit {rc}\n')

    def nvidia_smi(self, status: str, errors: str, then_errors: str = "") -> None:
        status_file, errors_file = self.data / "nvlink-s", self.data / "nvlink-e"
        status_file.write_text(status, encoding="utf-8")
        errors_file.write_text(errors, encoding="utf-8")
        self.add(
            "nvidia-smi",
            f'case "$2" in -s) /bin/cat {status_file};; -e) /bin/cat {errors_file}; {then_errors};; esac\n',
        )

    def write_bw(self, server: str, client: str, client_rc: int = 0, sleep_s: float = 0) -> Path:
        """ib_write_bw: the server side (no address) prints the server capture, the client its own
        (after `sleep_s`)."""
        (self.data / "server").write_text(server, encoding="utf-8")
        (self.data / "client").write_text(client, encoding="utf-8")
        pause = f"/bin/sleep {sleep_s}\n" if sleep_s else ""
        return self.add(
            "ib_write_bw",
            f'echo "$@" >> {self.calls}/ib_write_bw\n'
            f'case "$*" in *127.0.0.1) {pause}/bin/cat {self.data}/client; exit {client_rc};;\n'
            f"  *) /bin/cat {self.data}/server; exit 0;; esac\n",
        )

    def numactl(self) -> None:
        # Records its options, then runs the command (what numactl does once it has bound).
        self.add("numactl", f'echo "$1 $2" >> {self.calls}/numactl\nshift 2\nexec "$@"\n')


def run_program(config: dict, tools: Tools, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=str(tools.bin))
    return subprocess.run(
        [sys.executable, str(PROGRAM), json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def config_for(out: Path, **changes) -> dict:
    config = {
        "out_dir": str(out),
        "timeout_s": 20,
        "checks": ["gpu_matrix", "nvlink", "nic"],
        "nvbandwidth": "",
        "nvbandwidth_testcases": ["host_to_device_memcpy_ce"],
        "perftest": {"bin_dir": "", "gpudirect": False, "source": "none"},
        "hcas": [],
        "phase": "before",
        "host": "node1",
        "sys_root": str(out.parent / "no-sys"),
    }
    config.update(changes)
    return config


def checks_of(out: Path) -> dict[str, dict]:
    document = json.loads((out / "checks.json").read_text(encoding="utf-8"))
    return {entry["name"]: entry for entry in document["checks"]}


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for its new parent to reap it."""
    for _ in range(20):
        try:
            state = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        if state in {"Z", "X"}:
            return False
        time.sleep(0.1)
    return True


@pytest.fixture
def tools(tmp_path: Path) -> Tools:
    return Tools(tmp_path)


def test_every_check_runs_and_keeps_each_tool_output_as_printed(tmp_path: Path, tools: Tools) -> None:
    nvbandwidth = tools.printing("nvbandwidth", a10_run())
    tools.nvidia_smi(H100_NVLINK.read_text(encoding="utf-8"), H100_NVLINK.read_text(encoding="utf-8"))
    tools.printing("ibstat", ibstat_capture())
    tools.printing("ibdev2netdev", ibdev2netdev_capture())
    tools.write_bw(write_bw_server(), write_bw_client())
    tools.numactl()
    out = tmp_path / "out"
    hcas = [{"name": "mlx5_0", "port": 1, "gpu": 0, "numa_node": 1}]
    perftest = {"bin_dir": str(tools.bin), "gpudirect": True, "source": "built"}
    done = run_program(config_for(out, nvbandwidth=str(nvbandwidth), perftest=perftest, hcas=hcas), tools)
    assert done.returncode == 0, done.stderr

    document = json.loads((out / "checks.json").read_text(encoding="utf-8"))
    assert document["schema"] == 1
    assert document["host"] == "node1"
    assert document["perftest"] == {"gpudirect": True, "source": "built"}
    assert document["hcas"] == hcas
    assert document["started_at"].endswith("Z") and document["finished_at"].endswith("Z")
    checks = checks_of(out)
    assert {name: entry["status"] for name, entry in checks.items()} == {
        "gpu_matrix": "ok",
        "nvlink": "ok",
        "nic_ports": "ok",
        "loopback:mlx5_0": "ok",
    }
    # The v0.5 stand-in's --help does not offer --json: the text output is kept.
    assert checks["gpu_matrix"]["argv"] == [str(nvbandwidth), "-t", "host_to_device_memcpy_ce"]
    assert (out / "nvbandwidth.txt").read_text(encoding="utf-8") == a10_run()
    assert (out / "nvlink-status.txt").read_bytes() == H100_NVLINK.read_bytes()
    assert (out / "nvlink-errors-before.txt").read_bytes() == H100_NVLINK.read_bytes()
    assert (out / "ibstat.txt").read_text(encoding="utf-8") == ibstat_capture()
    assert (out / "ibdev2netdev.txt").read_text(encoding="utf-8") == ibdev2netdev_capture()
    assert (out / "loopback-mlx5_0.txt").read_text(encoding="utf-8") == write_bw_client()
    assert (out / "loopback-mlx5_0-server.txt").read_text(encoding="utf-8") == write_bw_server()
    assert checks["nic_ports"]["files"] == ["ibstat.txt", "ibdev2netdev.txt"]
    assert {path.stat().st_mode & 0o777 for path in out.iterdir()} == {0o600}
    assert out.stat().st_mode & 0o777 == 0o700

    loopback = checks["loopback:mlx5_0"]
    numactl = str(tools.bin / "numactl")
    expected_tail = ["--use_cuda=0", "-d", "mlx5_0", "-i", "1", "-p", "18515"]
    assert loopback["argv"][:3] == [numactl, "--cpunodebind=1", "--membind=1"]
    assert loopback["argv"][-8:] == [*expected_tail, "127.0.0.1"]
    assert loopback["server_argv"][-7:] == expected_tail
    assert "-s 8388608 -x 0 -F --report_gbits --perform_warm_up" in " ".join(loopback["argv"])
    assert (tools.calls / "numactl").read_text(encoding="utf-8").splitlines() == [
        "--cpunodebind=1 --membind=1"
    ] * 2
    assert loopback["note"] is None


def test_a_node_without_the_tools_skips_every_check_with_its_note(tmp_path: Path, tools: Tools) -> None:
    out = tmp_path / "out"
    done = run_program(config_for(out), tools)
    assert done.returncode == 0, done.stderr
    checks = checks_of(out)
    assert {name: entry["status"] for name, entry in checks.items()} == dict.fromkeys(
        ["gpu_matrix", "nvlink", "nic_ports", "loopback"], "skipped"
    )
    assert "no nvbandwidth" in checks["gpu_matrix"]["note"]
    assert "nvidia-smi not found" in checks["nvlink"]["note"]
    assert "neither ibstat nor ibv_devinfo" in checks["nic_ports"]["note"]
    assert "no active RDMA port" in checks["loopback"]["note"]
    assert sorted(path.name for path in out.iterdir()) == ["checks.json"]


def test_ibv_devinfo_stands_in_for_a_missing_ibstat(tmp_path: Path, tools: Tools) -> None:
    tools.printing("ibv_devinfo", NO_DEVICE.read_text(encoding="utf-8"))
    out = tmp_path / "out"
    run_program(config_for(out, checks=["nic"]), tools)
    ports = checks_of(out)["nic_ports"]
    assert ports["argv"] == [str(tools.bin / "ibv_devinfo"), "-v"]
    assert ports["files"] == ["ibv_devinfo.txt"]
    assert (out / "ibv_devinfo.txt").read_bytes() == NO_DEVICE.read_bytes()


def test_a_port_tool_failing_on_a_node_without_rdma_device_is_skipped_with_its_words(
    tmp_path: Path, tools: Tools
) -> None:
    tools.printing("ibstat", NO_DEVICE.read_text(encoding="utf-8"), rc=1)
    out = tmp_path / "out"
    run_program(config_for(out, checks=["nic"]), tools)
    ports = checks_of(out)["nic_ports"]
    assert ports["status"] == "skipped"
    assert ports["rc"] == 1
    assert (
        ports["note"]
        == "no RDMA device on this node; ibstat exited 1: Unable to find the Infiniband/RoCE device"
    )
    assert (out / "ibstat.txt").read_bytes() == NO_DEVICE.read_bytes()
    # The same failure where sysfs lists a device is a failure of the check.
    sys_root = fake_sys(tmp_path, {("mlx5_0", 1): "4: ACTIVE"}, {}, gpus=0)
    run_program(config_for(out, checks=["nic"], sys_root=str(sys_root)), tools)
    assert checks_of(out)["nic_ports"]["status"] == "failed"


def test_switched_off_checks_are_skipped_and_say_which_switch(tmp_path: Path, tools: Tools) -> None:
    tools.nvidia_smi(H100_NVLINK.read_text(encoding="utf-8"), "")
    out = tmp_path / "out"
    run_program(config_for(out, checks=["nvlink"]), tools)
    checks = checks_of(out)
    assert checks["nvlink"]["status"] == "ok"
    assert checks["gpu_matrix"]["note"] == "switched off (collbench_node_checks_gpu_matrix: false)"
    assert checks["nic_ports"]["status"] == checks["loopback"]["status"] == "skipped"


def test_a_gpu_without_nvlink_is_skipped_not_ok(tmp_path: Path, tools: Tools) -> None:
    # Captured on one H200: `nvidia-smi nvlink -s` and `-e` answer nothing, with exit status 0.
    tools.nvidia_smi(
        (H200_NO_NVLINK / "nvlink-s.txt").read_text(encoding="utf-8"),
        (H200_NO_NVLINK / "nvlink-e-before.txt").read_text(encoding="utf-8"),
    )
    out = tmp_path / "out"
    run_program(config_for(out, checks=["nvlink"]), tools)
    nvlink = checks_of(out)["nvlink"]
    assert nvlink["status"] == "skipped"
    assert "lists no link" in nvlink["note"]
    assert (out / "nvlink-status.txt").exists()


def test_a_hung_tool_is_killed_with_its_group_at_its_bound_and_its_output_kept(
    tmp_path: Path, tools: Tools
) -> None:
    pid_file = tmp_path / "hung.pid"
    first_lines = "".join(H100_NVLINK.read_text(encoding="utf-8").splitlines(keepends=True)[:3])
    # `sleep` runs as a child of the shell: only killing the process group ends it.
    tools.nvidia_smi(first_lines, first_lines, then_errors=f"/bin/sleep 60 & echo $! > {pid_file}; wait")
    out = tmp_path / "out"
    started = time.monotonic()
    done = run_program(config_for(out, checks=["nvlink"], timeout_s=2), tools)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    nvlink = checks_of(out)["nvlink"]
    assert nvlink["status"] == "timeout", nvlink
    assert nvlink["rc"] is None
    assert "ran past" in nvlink["note"]
    assert (out / "nvlink-errors-before.txt").read_text(encoding="utf-8") == first_lines
    assert elapsed < 15
    sleeper = int(pid_file.read_text(encoding="utf-8"))
    assert not alive(sleeper)


def test_a_failing_loopback_is_failed_with_its_output_kept(tmp_path: Path, tools: Tools) -> None:
    failure = NO_DEVICE.read_text(encoding="utf-8")
    tools.write_bw(write_bw_server(), failure, client_rc=1)
    out = tmp_path / "out"
    perftest = {"bin_dir": str(tools.bin), "gpudirect": False, "source": "distribution"}
    hcas = [{"name": "mlx5_9", "port": 1, "gpu": None, "numa_node": None}]
    run_program(config_for(out, checks=["nic"], perftest=perftest, hcas=hcas), tools)
    loopback = checks_of(out)["loopback:mlx5_9"]
    assert loopback["status"] == "failed"
    assert loopback["rc"] == 1
    assert "Unable to find the Infiniband/RoCE device" in loopback["note"]
    assert "unpinned: NUMA node of the HCA unknown" in loopback["note"]
    assert "perftest without GPUDirect (source distribution)" in loopback["note"]
    assert not any(arg.startswith("--use_cuda") for arg in loopback["argv"])
    assert (out / "loopback-mlx5_9.txt").read_text(encoding="utf-8") == failure


def test_every_hca_loopback_runs_at_once(tmp_path: Path, tools: Tools) -> None:
    tools.write_bw(write_bw_server(), write_bw_client(), sleep_s=1)
    out = tmp_path / "out"
    perftest = {"bin_dir": str(tools.bin), "gpudirect": False, "source": "built"}
    hcas = [{"name": f"mlx5_{i}", "port": 1, "gpu": i, "numa_node": None} for i in range(2)]
    run_program(config_for(out, checks=["nic"], perftest=perftest, hcas=hcas), tools)
    checks = checks_of(out)
    assert [checks[f"loopback:mlx5_{i}"]["status"] for i in range(2)] == ["ok", "ok"]
    # Each client takes 1 s: one after the other would take 2 s, both at once 1 s.
    elapsed = max(checks[f"loopback:mlx5_{i}"]["seconds"] for i in range(2))
    print(f"two 1 s loopbacks took {elapsed:.2f} s")
    assert 1.0 <= elapsed < 1.6, elapsed
    ports = sorted(
        line.split("-p ")[1].split()[0] for line in (tools.calls / "ib_write_bw").read_text().splitlines()
    )
    assert ports == ["18515", "18515", "18516", "18516"]


def test_json_output_where_nvbandwidth_has_it_and_waived_testcases_noted(
    tmp_path: Path, tools: Tools
) -> None:
    # No -j capture exists in the corpus: this document follows v0.8's json_output.cpp keys
    # (one GPU: nvbandwidth waives the device-to-device testcases itself).
    document = {
        "nvbandwidth": {
            "CUDA Runtime Version": 12040,
            "testcases": [
                {"name": "device_to_device_memcpy_read_ce", "status": "Waived"},
                {"name": "host_to_device_memcpy_ce", "status": "Passed", "sum": 25.17},
            ],
        }
    }
    json_text = json.dumps(document, indent=4) + "\n"
    help_line = "  -j [ --json ]   Print output in json format instead of plain text.\n"
    nvbandwidth = tools.add(
        "nvbandwidth",
        f'case "$1" in --help) echo \'{help_line.strip()}\';; *) echo "$@" > {tools.calls}/nvb; '
        f"/bin/cat <<'EOF'\n{json_text}EOF\n;; esac\n",
    )
    out = tmp_path / "out"
    testcases = ["device_to_device_memcpy_read_ce", "host_to_device_memcpy_ce"]
    run_program(
        config_for(out, checks=["gpu_matrix"], nvbandwidth=str(nvbandwidth), nvbandwidth_testcases=testcases),
        tools,
    )
    matrix = checks_of(out)["gpu_matrix"]
    assert matrix["status"] == "ok"
    assert matrix["argv"] == [str(nvbandwidth), "-j", "-t", *testcases]
    assert matrix["files"] == ["nvbandwidth.json"]
    assert json.loads((out / "nvbandwidth.json").read_text(encoding="utf-8")) == document
    assert not (out / "nvbandwidth.txt").exists()
    assert matrix["note"] == "waived by nvbandwidth: device_to_device_memcpy_read_ce"


def test_the_after_phase_adds_the_second_error_read_to_the_first_checks(tmp_path: Path, tools: Tools) -> None:
    tools.nvidia_smi(H100_NVLINK.read_text(encoding="utf-8"), H100_NVLINK.read_text(encoding="utf-8"))
    out = tmp_path / "out"
    run_program(config_for(out, checks=["nvlink"]), tools)
    before = json.loads((out / "checks.json").read_text(encoding="utf-8"))
    for _ in range(2):  # a second read replaces the first, it does not pile up
        run_program(config_for(out, checks=["nvlink"], phase="after"), tools)
    after = json.loads((out / "checks.json").read_text(encoding="utf-8"))
    assert after["started_at"] == before["started_at"]
    assert after["checks"][:-1] == before["checks"]
    assert [entry["name"] for entry in after["checks"]].count("nvlink_after") == 1
    assert after["checks"][-1]["status"] == "ok"
    assert after["checks"][-1]["files"] == ["nvlink-errors-after.txt"]
    assert (out / "nvlink-errors-after.txt").read_bytes() == H100_NVLINK.read_bytes()


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        ("{not json", "CONFIG_JSON is not JSON"),
        ('{"out_dir": "relative"}', "out_dir must be an absolute path"),
        ('{"out_dir": "/tmp/x", "phase": "during"}', "phase must be before or after"),
        ('{"out_dir": "/tmp/x", "checks": ["gpu"]}', "checks must be a list"),
        ("/nonexistent/config.json", "cannot read /nonexistent/config.json"),
    ],
)
def test_bad_config_is_one_line_and_exit_2(argument: str, message: str, tools: Tools) -> None:
    done = subprocess.run(
        [sys.executable, str(PROGRAM), argument], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_check_that_raises_is_failed_with_its_message() -> None:
    def broken(config: dict) -> dict:
        raise KeyError("timeout_s")

    entry = node_checks.guarded("nvlink", broken, {})
    assert entry["status"] == "failed"
    assert entry["note"] == "the check raised: KeyError: 'timeout_s'"


def test_checks_json_is_written_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "checks.json"
    node_checks.write_atomically(str(target), '{"old": true}\n')

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(node_checks.os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space"):
        node_checks.write_atomically(str(target), '{"new": true}\n')
    assert target.read_text(encoding="utf-8") == '{"old": true}\n'
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checks.json"]


def fake_sys(root: Path, ports: dict[tuple[str, int], str], numa: dict[str, int], gpus: int) -> Path:
    sys_root = root / "sys"
    for (hca, port), state in ports.items():
        port_dir = sys_root / "class" / "infiniband" / hca / "ports" / str(port)
        port_dir.mkdir(parents=True)
        (port_dir / "state").write_text(state + "\n", encoding="utf-8")
    for hca, node in numa.items():
        device = sys_root / "class" / "infiniband" / hca / "device"
        device.mkdir(parents=True)
        (device / "numa_node").write_text(f"{node}\n", encoding="utf-8")
    for index in range(gpus):
        (root / "proc" / "driver" / "nvidia" / "gpus" / f"0000:{index:02x}:00.0").mkdir(parents=True)
    return sys_root


def test_without_hcas_given_the_active_ports_are_found_and_paired_with_gpus_by_index(tmp_path: Path) -> None:
    sys_root = fake_sys(
        tmp_path,
        {
            ("mlx5_10", 1): "4: ACTIVE",
            ("mlx5_2", 1): "4: ACTIVE",
            ("mlx5_3", 1): "1: DOWN",
            ("mlx5_0", 1): "4: ACTIVE",
        },
        {"mlx5_0": 0, "mlx5_2": 1, "mlx5_10": -1},
        gpus=2,
    )
    assert node_checks.active_ports(str(sys_root)) == [
        {"name": "mlx5_0", "port": 1, "gpu": 0, "numa_node": 0},
        {"name": "mlx5_2", "port": 1, "gpu": 1, "numa_node": 1},
        {"name": "mlx5_10", "port": 1, "gpu": 0, "numa_node": None},
    ]


def test_found_ports_are_recorded_and_tested(tmp_path: Path, tools: Tools) -> None:
    sys_root = fake_sys(tmp_path, {("mlx5_4", 1): "4: ACTIVE"}, {"mlx5_4": 0}, gpus=0)
    tools.write_bw(write_bw_server(), write_bw_client())
    out = tmp_path / "out"
    perftest = {"bin_dir": str(tools.bin), "gpudirect": True, "source": "built"}
    run_program(config_for(out, checks=["nic"], perftest=perftest, sys_root=str(sys_root)), tools)
    document = json.loads((out / "checks.json").read_text(encoding="utf-8"))
    assert document["hcas"] == [{"name": "mlx5_4", "port": 1, "gpu": None, "numa_node": 0}]
    loopback = checks_of(out)["loopback:mlx5_4"]
    assert loopback["status"] == "ok"
    assert "host memory: no GPU paired with this HCA" in loopback["note"]
    assert "unpinned: neither numactl nor taskset found" in loopback["note"]


def test_taskset_pins_the_cpus_where_numactl_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sys_root = tmp_path / "sys"
    (sys_root / "devices" / "system" / "node" / "node1").mkdir(parents=True)
    (sys_root / "devices" / "system" / "node" / "node1" / "cpulist").write_text("16-31\n", encoding="utf-8")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "taskset").write_text("#!/bin/sh\n", encoding="utf-8")
    (bin_dir / "taskset").chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    prefix, note = node_checks.numa_pinning(1, str(sys_root))
    assert prefix == [str(bin_dir / "taskset"), "-c", "16-31"]
    assert "taskset" in note


def test_a_given_hca_without_its_numa_node_takes_the_one_sysfs_says(tmp_path: Path, tools: Tools) -> None:
    sys_root = fake_sys(tmp_path, {}, {"mlx5_2": 1}, gpus=0)
    out = tmp_path / "out"
    hcas = [{"name": "mlx5_2", "port": 1, "gpu": 2, "numa_node": None}]
    run_program(config_for(out, checks=["nic"], hcas=hcas, sys_root=str(sys_root)), tools)
    document = json.loads((out / "checks.json").read_text(encoding="utf-8"))
    assert document["hcas"] == [{"name": "mlx5_2", "port": 1, "gpu": 2, "numa_node": 1}]


P2P_TEST = CORPUS / "other" / "p2pBandwidthLatencyTest-2x-rtx5090-no-p2p.txt"


def p2p_test_run() -> str:
    return "".join(P2P_TEST.read_text(encoding="utf-8").splitlines(keepends=True)[1:])  # less its prompt


def test_a_prebuilt_p2p_test_measures_the_gpu_matrix_where_there_is_no_nvbandwidth(
    tmp_path: Path, tools: Tools
) -> None:
    p2p_test = tools.printing("p2pBandwidthLatencyTest", p2p_test_run())
    out = tmp_path / "out"
    run_program(config_for(out, checks=["gpu_matrix"], nvbandwidth="", p2p_test=str(p2p_test)), tools)
    matrix = checks_of(out)["gpu_matrix"]
    assert matrix["status"] == "ok" and matrix["rc"] == 0
    assert matrix["argv"] == [str(p2p_test)]
    assert matrix["files"] == ["p2p-bandwidth-latency.txt"]
    assert matrix["note"] == (
        "p2pBandwidthLatencyTest (prebuilt) instead of nvbandwidth: "
        "its copy-engine figures read higher than NCCL gets"
    )
    text = (out / "p2p-bandwidth-latency.txt").read_text(encoding="utf-8")
    assert text == p2p_test_run()
    parsed = matrices.parse(text, "p2p-bandwidth-latency.txt")
    enabled = next(m for m in parsed.matrices if m.name.startswith("Unidirectional P2P=Enabled"))
    assert enabled.values[0][1] == 38.20


def test_nvbandwidth_wins_over_the_p2p_test_when_both_are_there(tmp_path: Path, tools: Tools) -> None:
    nvbandwidth = tools.printing("nvbandwidth", a10_run())
    p2p_test = tools.printing("p2pBandwidthLatencyTest", p2p_test_run())
    out = tmp_path / "out"
    run_program(
        config_for(out, checks=["gpu_matrix"], nvbandwidth=str(nvbandwidth), p2p_test=str(p2p_test)), tools
    )
    matrix = checks_of(out)["gpu_matrix"]
    assert matrix["status"] == "ok" and matrix["argv"][0] == str(nvbandwidth)
    assert matrix["files"] == ["nvbandwidth.txt"] and matrix["note"] is None
    assert not (tools.calls / "p2pBandwidthLatencyTest").exists()
    assert not (out / "p2p-bandwidth-latency.txt").exists()


def test_a_p2p_test_not_on_the_node_is_skipped_with_its_path(tmp_path: Path, tools: Tools) -> None:
    out = tmp_path / "out"
    missing = str(tmp_path / "no" / "p2pBandwidthLatencyTest")
    run_program(config_for(out, checks=["gpu_matrix"], p2p_test=missing), tools)
    matrix = checks_of(out)["gpu_matrix"]
    assert matrix["status"] == "skipped" and missing in matrix["note"]


def test_a_failing_p2p_test_keeps_its_output_and_a_hung_one_is_killed_at_the_bound(
    tmp_path: Path, tools: Tools
) -> None:
    failing = tools.printing("p2pBandwidthLatencyTest", "cudaGetDeviceCount returned 100\n", rc=1)
    out = tmp_path / "failed"
    run_program(config_for(out, checks=["gpu_matrix"], p2p_test=str(failing)), tools)
    matrix = checks_of(out)["gpu_matrix"]
    assert matrix["status"] == "failed" and matrix["rc"] == 1
    assert matrix["note"] == "p2pBandwidthLatencyTest exited 1: cudaGetDeviceCount returned 100"
    assert (out / "p2p-bandwidth-latency.txt").read_text() == "cudaGetDeviceCount returned 100\n"
    hung = tools.printing("p2pBandwidthLatencyTest", p2p_test_run()[:200], then="/bin/sleep 30\n")
    out = tmp_path / "hung"
    run_program(config_for(out, checks=["gpu_matrix"], p2p_test=str(hung), timeout_s=1), tools)
    matrix = checks_of(out)["gpu_matrix"]
    assert matrix["status"] == "timeout" and matrix["seconds"] < 10
    assert (out / "p2p-bandwidth-latency.txt").read_text(encoding="utf-8") == p2p_test_run()[:200]
