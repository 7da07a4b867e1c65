"""collbench_py/node/rail_bw.py run as the benchmark role runs it (one CONFIG_JSON argument), with
stand-ins on PATH: an ssh that runs the remote line here, and an ib_write_bw that prints the real
server and client captures of the shared corpus, or hangs, or is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collbench_py.parsers.models import ParseError
from collbench_py.parsers.perftest import parse, peak_gbits

REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "collbench_py" / "node" / "rail_bw.py"
CORPUS = REPO.parent / "shared" / "corpus"
if not CORPUS.is_dir():
    CORPUS = Path("/work/shared/corpus")
T4_WRITE_BW = (
    CORPUS / "perftest" / "k8s-t4-gpudirect-roce-rdma-cm-write-bw-server-client-relaxed-ordering-warning.txt"
)
PEER = "node2"

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason="the shared corpus is not here")


def lines_between(path: Path, start: str, stop: str | None) -> str:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if line.startswith(start)) + 1
    last = next((i for i in range(first, len(lines)) if stop and lines[i].startswith(stop)), len(lines))
    return "".join(lines[first:last])


SERVER = lines_between(T4_WRITE_BW, "ib_write_bw -d mlx5_5", "#client example")
CLIENT = lines_between(T4_WRITE_BW, "ib_write_bw -d mlx5_4", None)


class Tools:
    """ssh and ib_write_bw stand-ins; each records how it was called."""

    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.bin.mkdir()
        self.data = root / "data"
        self.data.mkdir()
        self.calls = root / "calls"
        self.calls.mkdir()
        (self.data / "server").write_text(SERVER, encoding="utf-8")
        (self.data / "client").write_text(CLIENT, encoding="utf-8")
        # ssh HOST LINE, its options dropped: the line runs here, as sshd would run it there.
        self.add(
            "ssh",
            f'echo "$@" >> {self.calls}/ssh\nwhile [ $# -gt 2 ]; do shift; done\nexec /bin/sh -c "$2"\n',
        )

    def add(self, name: str, body: str) -> Path:
        path = self.bin / name
        path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
        path.chmod(0o755)
        return path

    def write_bw(
        self,
        hang_server_of: str = "",
        hang_client_of: str = "",
        fail_client_of: str = "",
        peers: tuple = (PEER,),
    ) -> Path:
        """The server (no peer address) prints the server capture; the client (its last word one of
        `peers`) its own. The HCA named hangs its server or its client (printing nothing), or fails
        its client."""
        client = "|".join(f"*{peer}" for peer in peers)
        hang_server = f'  *"-d {hang_server_of} "*" -p "*) exec /bin/sleep 317;;\n' if hang_server_of else ""
        hang_client = f'  *"-d {hang_client_of} "*{PEER}) exec /bin/sleep 319;;\n' if hang_client_of else ""
        fail_client = (
            f'  *"-d {fail_client_of} "*{PEER}) echo " Couldn\'t connect to {PEER}:18515"; exit 1;;\n'
            if fail_client_of
            else ""
        )
        return self.add(
            "ib_write_bw",
            f'echo "$@" >> {self.calls}/ib_write_bw\n'
            f'echo "$CUDA_DEVICE_ORDER" >> {self.calls}/cuda_device_order\n'
            f'case "$*" in\n{hang_client}{fail_client}'
            f"  {client}) /bin/cat {self.data}/client; exit 0;;\n"
            f"{hang_server}"
            f"  *) /bin/cat {self.data}/server; exit 0;;\nesac\n",
        )

    def called(self, name: str) -> list[str]:
        path = self.calls / name
        return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


@pytest.fixture
def tools(tmp_path: Path) -> Tools:
    return Tools(tmp_path)


def rails(count: int) -> list[dict]:
    return [
        {"index": k, "hca_a": f"mlx5_{k}", "hca_b": f"mlx5_{k}", "gpu_a": k, "gpu_b": k} for k in range(count)
    ]


def config_for(out: Path, tools: Tools, **changes) -> dict:
    config = {
        "out_dir": str(out),
        "peer": PEER,
        "rsh": ["ssh", "-o", "StrictHostKeyChecking=no", "-p", "2222"],
        "ib_write_bw": str(tools.bin / "ib_write_bw"),
        "gpudirect": True,
        "rails": rails(4),
        "seconds": 5,
        "size": 8388608,
        "timeout_s": 20,
        "server_ready_s": 10,
    }
    config.update(changes)
    return config


def run_program(config: dict, tools: Tools, timeout: float = 90) -> tuple[subprocess.CompletedProcess, dict]:
    env = dict(os.environ, PATH=f"{tools.bin}:/usr/bin:/bin")
    done = subprocess.run(
        [sys.executable, str(PROGRAM), json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    return done, (json.loads(done.stdout) if done.returncode == 0 else {})


def alive(marker: str) -> bool:
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True, check=False)
    return bool(found.stdout.strip())


def gbits(path: Path) -> float | None:
    """The rail's figure as the controller reads it: none from a log the parser cannot read."""
    try:
        return peak_gbits(parse(path.read_text(encoding="utf-8"), file=path.name).records[0])
    except ParseError:
        return None


def test_every_rail_at_once_servers_over_ssh_and_clients_here(tmp_path: Path, tools: Tools) -> None:
    tools.write_bw()
    out = tmp_path / "out"
    done, summary = run_program(config_for(out, tools), tools)
    assert done.returncode == 0, done.stderr
    assert summary["status"] == "ok"
    assert [(r["index"], r["status"], r["log"], r["server_log"]) for r in summary["rails"]] == [
        (k, "ok", f"rail{k}.log", f"rail{k}.server.log") for k in range(4)
    ]
    for k in range(4):
        assert (out / f"rail{k}.log").read_text(encoding="utf-8") == CLIENT
        assert (out / f"rail{k}.server.log").read_text(encoding="utf-8") == SERVER
        # The controller's reading of a rail: the perftest parser on the client's log.
        assert gbits(out / f"rail{k}.log") == pytest.approx(10.50)
    calls = tools.called("ib_write_bw")
    common = "-s 8388608 -D 5 -F --report_gbits"
    for k in range(4):
        assert f"-d mlx5_{k} -i 1 -p {18515 + k} {common} --use_cuda={k}" in calls
        assert f"-d mlx5_{k} -i 1 -p {18515 + k} {common} --use_cuda={k} {PEER}" in calls
    # The launch's ssh options first, then the batch options, the peer and the bounded server.
    ssh = tools.called("ssh")
    assert len(ssh) == 4
    assert all(line.startswith("-o StrictHostKeyChecking=no -p 2222 -o BatchMode=yes") for line in ssh)
    # GPU k is CUDA device k on both sides: PCI bus order, as nvidia-smi numbers them.
    assert tools.called("cuda_device_order") == ["PCI_BUS_ID"] * 8
    remote = "exec 'env' 'CUDA_DEVICE_ORDER=PCI_BUS_ID' 'LC_ALL=C' 'timeout' '-k' '5' '20' 'stdbuf' '-oL' "
    assert all(f" {PEER} {remote}" in line for line in ssh)
    assert oct(out.stat().st_mode & 0o777) == "0o700"
    assert oct((out / "rail0.log").stat().st_mode & 0o777) == "0o600"


def test_without_gpudirect_no_use_cuda_and_gpu_null_is_host_memory(tmp_path: Path, tools: Tools) -> None:
    tools.write_bw()
    one = [{"index": 0, "hca_a": "mlx5_0", "hca_b": "mlx5_3", "port_b": 2, "gpu_a": None, "gpu_b": 3}]
    done, summary = run_program(config_for(tmp_path / "out", tools, rails=one), tools)
    assert summary["status"] == "ok", done.stderr
    calls = tools.called("ib_write_bw")
    assert "-d mlx5_3 -i 2 -p 18515 -s 8388608 -D 5 -F --report_gbits --use_cuda=3" in calls
    assert f"-d mlx5_0 -i 1 -p 18515 -s 8388608 -D 5 -F --report_gbits {PEER}" in calls
    done, _ = run_program(config_for(tmp_path / "out2", tools, rails=one, gpudirect=False), tools)
    assert not any("use_cuda" in line for line in tools.called("ib_write_bw")[2:])


def test_a_hung_server_fails_its_rail_with_its_log_and_the_others_still_measure(
    tmp_path: Path, tools: Tools
) -> None:
    tools.write_bw(hang_server_of="mlx5_2")
    out = tmp_path / "out"
    started = time.monotonic()
    done, summary = run_program(config_for(out, tools, server_ready_s=2), tools)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 30
    statuses = {r["index"]: r["status"] for r in summary["rails"]}
    assert statuses == {0: "ok", 1: "ok", 2: "failed", 3: "ok"}
    assert summary["status"] == "failed"
    note = summary["rails"][2]["note"]
    assert note == f"ib_write_bw server on {PEER} never said it listens and did not finish: no output"
    assert (out / "rail2.log").read_text(encoding="utf-8").endswith(f"collbench: {note}\n")
    assert gbits(out / "rail1.log") == pytest.approx(10.50)
    # Cut at its bound, not left running.
    assert not alive("sleep 317")


def test_a_hung_client_is_cut_at_its_bound_and_says_so(tmp_path: Path, tools: Tools) -> None:
    tools.write_bw(hang_client_of="mlx5_1")
    out = tmp_path / "out"
    started = time.monotonic()
    done, summary = run_program(config_for(out, tools, timeout_s=3), tools)
    assert time.monotonic() - started < 30
    assert summary["status"] == "timeout", done.stderr
    assert summary["rails"][1]["status"] == "timeout"
    assert summary["rails"][1]["note"] == "ib_write_bw ran past 3 s; killed, its output so far kept"
    assert [r["status"] for r in summary["rails"] if r["index"] != 1] == ["ok", "ok", "ok"]
    assert gbits(out / "rail1.log") is None
    assert not alive("sleep 319")


def test_a_failed_client_keeps_its_output_and_adds_the_reason(tmp_path: Path, tools: Tools) -> None:
    tools.write_bw(fail_client_of="mlx5_3")
    out = tmp_path / "out"
    _, summary = run_program(config_for(out, tools), tools)
    rail = summary["rails"][3]
    assert rail["status"] == "failed" and rail["rc"] == 1
    assert rail["note"] == f"ib_write_bw exited 1: Couldn't connect to {PEER}:18515"
    assert (out / "rail3.log").read_text(encoding="utf-8").splitlines() == [
        f" Couldn't connect to {PEER}:18515",
        f"collbench: {rail['note']}",
    ]


def test_no_ib_write_bw_on_the_peer_fails_each_rail_with_its_words(tmp_path: Path, tools: Tools) -> None:
    tools.write_bw()
    out = tmp_path / "out"
    missing = str(tmp_path / "nowhere" / "ib_write_bw")
    done, summary = run_program(config_for(out, tools, peer_ib_write_bw=missing), tools)
    assert done.returncode == 0, done.stderr
    assert {r["status"] for r in summary["rails"]} == {"failed"}
    note = summary["rails"][0]["note"]
    assert note.startswith(f"ib_write_bw server on {PEER} exited 127: ")
    assert missing in note
    assert missing in (out / "rail0.server.log").read_text(encoding="utf-8")
    assert (out / "rail0.log").read_text(encoding="utf-8") == f"collbench: {note}\n"
    assert not any(line.endswith(PEER) for line in tools.called("ib_write_bw"))


def test_no_ib_write_bw_here_skips_every_rail_and_starts_nothing(tmp_path: Path, tools: Tools) -> None:
    out = tmp_path / "out"
    done, summary = run_program(config_for(out, tools, ib_write_bw=""), tools)
    assert done.returncode == 0, done.stderr
    assert summary["status"] == "skipped"
    assert {r["note"] for r in summary["rails"]} == {
        "ib_write_bw not found on this host (no perftest): rail check skipped"
    }
    assert (out / "rail0.log").read_text(encoding="utf-8").startswith("collbench: ib_write_bw not found")
    assert tools.called("ssh") == []


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"out_dir": "relative"}, "out_dir must be an absolute path"),
        ({"peer": ""}, "peer must be the second host's address"),
        ({"peer": "-oProxyCommand=x"}, "peer must be the second host's address"),
        ({"rails": []}, "rails must be a non-empty list"),
        ({"rails": [{"index": 0, "hca_a": "mlx5_0"}]}, "rail 0 needs hca_b"),
        ({"rails": rails(1) + rails(1)}, "two rails have the same index"),
        ({"seconds": 0}, "seconds must be a whole number of 1 or more"),
        ({"rsh": "ssh -p 22"}, "rsh must be a list"),
    ],
)
def test_a_bad_config_is_one_line_and_exit_2(tmp_path: Path, tools: Tools, change: dict, words: str) -> None:
    done, _ = run_program(config_for(tmp_path / "out", tools, **change), tools)
    assert done.returncode == 2
    assert done.stderr == f"rail_bw: {words}" + done.stderr.removeprefix(f"rail_bw: {words}")
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_no_perftest_on_the_peer_skips_every_rail_and_starts_nothing(tmp_path: Path, tools: Tools) -> None:
    tools.write_bw()
    out = tmp_path / "out"
    done, summary = run_program(config_for(out, tools, peer_ib_write_bw=""), tools)
    assert done.returncode == 0, done.stderr
    assert summary["status"] == "skipped"
    assert {r["note"] for r in summary["rails"]} == {
        f"no ib_write_bw on {PEER} (no perftest there): rail check skipped"
    }
    assert tools.called("ssh") == [] and tools.called("ib_write_bw") == []
