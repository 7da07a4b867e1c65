"""A launch that fails before its ranks run is the launcher's failure, never a bad node or link.

Real outputs (tests/data/launcher/README.md says how each was made): mpirun that cannot reach a
host over ssh, refused host keys, missing programs and libraries; and a whole run directory from
a test cluster whose nodes had no ssh between them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from collbench_py.exitcodes import ExitCode
from collbench_py.parsers import parse_text
from collbench_py.rundir.load import SshHop, SshHops, load_run_dir
from collbench_py.verdicts import judge
from collbench_py.verdicts.launcher import classify_launch, failed_hop_of
from tests.collbench_cli import collbench

DATA = Path(__file__).parents[1] / "data" / "launcher"
RUN = DATA / "rundir-no-node-ssh"
CORPUS = Path(__file__).parents[1] / "data" / "corpus"


def lines(name: str) -> list[str]:
    return (DATA / name).read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize(
    ("name", "rc", "launcher", "cause", "quoted"),
    [
        (
            "mpirun-ssh-timeout.out",
            255,
            "mpirun",
            "ssh could not connect",
            "Connection timed out during banner",
        ),
        (
            "mpirun-host-key-verification.out",
            255,
            "mpirun",
            "ssh refused a host key",
            "Host key verification failed",
        ),
        (
            "mpirun-missing-binary.out",
            132,
            "mpirun",
            "mpirun could not start the program",
            "unable to launch",
        ),
        (
            "timeout-missing-binary.out",
            127,
            "direct",
            "the program could not be started",
            "failed to run command",
        ),
        ("missing-library.out", 127, "direct", "a shared library is missing", "libcbgone.so"),
        ("mpirun-missing-library.out", 127, "mpirun", "a shared library is missing", "libcbgone.so"),
    ],
)
def test_real_launcher_outputs_are_launcher_failures(name, rc, launcher, cause, quoted):
    failure = classify_launch("failed", rc, launcher, lines(name), ranks_ran=False)
    assert failure is not None
    assert failure.cause.startswith(cause)
    assert quoted in failure.line


def test_orte_daemon_error_alone_is_a_launcher_failure():
    orte = [line for line in lines("mpirun-ssh-timeout.out") if "Connection" not in line]
    failure = classify_launch("failed", 255, "mpirun", orte, ranks_ran=False)
    assert failure is not None and failure.cause == "mpirun could not start its daemons"


def test_exit_codes_alone():
    assert classify_launch("failed", 127, "direct", [], ranks_ran=False).cause.endswith("(rc 127)")
    assert classify_launch("failed", 126, "torchrun", [], ranks_ran=False).cause.endswith("(rc 126)")
    assert classify_launch("failed", 255, "mpirun", ["x"], ranks_ran=False).line == "x"
    # 255 is mpirun's own code; from another launcher it says nothing about the launch.
    assert classify_launch("failed", 255, "torchrun", [], ranks_ran=False) is None
    assert classify_launch("failed", 1, "mpirun", [], ranks_ran=False) is None


def test_not_launcher_failures():
    text = lines("mpirun-host-key-verification.out")
    # Ranks that printed the benchmark's header ran: what went wrong after is theirs.
    assert classify_launch("failed", 255, "mpirun", text, ranks_ran=True) is None
    assert classify_launch("timeout", 124, "mpirun", text, ranks_ran=False) is None
    assert classify_launch("ok", 0, "mpirun", text, ranks_ran=False) is None
    assert classify_launch(None, None, None, text, ranks_ran=False) is None


def test_a_real_nccl_failure_is_not_a_launcher_failure():
    """A real nccl-tests log of ranks that ran and failed (CUDA error): theirs, not the launcher's."""
    path = CORPUS / "nccl-tests" / "gh200-8rank-test-cuda-failure-device-busy-interleaved.txt"
    text = path.read_text(encoding="utf-8")
    runs = parse_text(text, file=path.name).runs
    assert runs
    assert classify_launch("failed", 2, "mpirun", text.splitlines(), ranks_ran=bool(runs)) is None


def test_failed_hop_names_the_launch_head():
    hops = SshHops("managed", 4, (SshHop("node1", "node3", "Permission denied (publickey)."),))
    assert (
        failed_hop_of(("node1", "node3"), "mpirun", hops) == "node1 -> node3: Permission denied (publickey)."
    )
    assert failed_hop_of(("node1", "node2", "node3"), "mpirun", hops) is not None
    # Not this launch's hop: its head is another host, or it is not under mpirun.
    assert failed_hop_of(("node3", "node1"), "mpirun", hops) is None
    assert failed_hop_of(("node1", "node2"), "mpirun", hops) is None
    assert failed_hop_of(("node1", "node3"), "torchrun", hops) is None
    failure = classify_launch("failed", 1, "mpirun", [], ranks_ran=False, failed_hop="node1 -> node3: x")
    assert failure is not None and failure.line == "node1 -> node3: x"


def test_no_node_ssh_run_blames_the_launcher_not_the_hosts(tmp_path):
    """The real run where nodes had no ssh between them: every launch across hosts failed. The
    test cluster's nodes report stand-in GPUs while the torch benchmark runs over gloo: judged with
    a profile that measures the CPU, as the cluster tests do."""
    profile = tmp_path / "test-cluster-cpu.yml"
    profile.write_text("name: test-cluster-cpu\nmeasures: cpu\npass_fraction: 0.9\nintra: {}\n")
    report = judge(load_run_dir(RUN), str(profile))
    assert {name: v.verdict for name, v in report.hosts.items()} == dict.fromkeys(
        ("node1", "node2", "node3"), "passed"
    )
    assert not [r for r in report.pairs if r.cause != "launcher" or r.status != "launcher"]
    checks = [c for c in report.fleet_checks if c.name == "launcher"]
    assert len(checks) == 1 and checks[0].status == "fail"
    assert "4 launch(es) failed before their ranks ran" in checks[0].reason
    assert any(
        "pair node1--node3 all_reduce" in e and "Host key verification failed" in e
        for e in checks[0].evidence
    )
    all_run = next(c for c in report.fleet_checks if c.name == "all/all_reduce/run")
    assert all_run.status == "skip"
    # Nothing was measured across hosts: the run still fails.
    assert report.exit_code(strict=False) == ExitCode.FAILED


def test_failed_hop_from_the_manifest_makes_a_launcher_failure(tmp_path):
    """A pair launch with no launcher output and an exit code that says nothing, whose hop failed."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    for out in run.glob("inter/**/launcher-*.out"):
        out.unlink()
    manifest = json.loads((run / "manifest.json").read_text())
    for launch in manifest["launches"]:
        if launch["kind"] != "intra":
            launch["rc"] = 1
    manifest["ssh_hops"] = {
        "mode": "managed",
        "checked": 4,
        "failed": [{"from": "node1", "to": "node3", "error": "Permission denied (publickey)."}],
    }
    (run / "manifest.json").write_text(json.dumps(manifest))
    report = judge(load_run_dir(run))
    by_pair = {r.label: r for r in report.pairs}
    assert by_pair["node1--node3"].status == "launcher"
    # The others failed with rc 1 and no sign of the launcher: pair failures as before.
    assert by_pair["node1--node2"].status == "failed"
    check = next(c for c in report.fleet_checks if c.name == "launcher")
    assert "ssh hop node1 -> node3: Permission denied (publickey)." in check.evidence
    assert "1 ssh hop(s) between nodes failed" in check.reason


def test_ssh_hops_of_the_wrong_shape_are_named(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["ssh_hops"] = {"failed": "node1 -> node3"}
    (run / "manifest.json").write_text(json.dumps(manifest))
    loaded = load_run_dir(run)
    assert loaded.ssh_hops is None
    assert any("ssh_hops" in note for note in loaded.notes)


def test_report_command_on_the_no_node_ssh_run(tmp_path):
    """Every report file and the history database take a pair the launcher failed."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    profile = tmp_path / "test-cluster-cpu.yml"  # stand-in GPUs, gloo on the CPU (see above)
    profile.write_text("name: test-cluster-cpu\nmeasures: cpu\npass_fraction: 0.9\nintra: {}\n")
    done = collbench("report", str(run), "--profile", str(profile))
    assert done.returncode == ExitCode.FAILED, done.stderr
    assert "Traceback" not in done.stderr and "KeyError" not in done.stderr
    results = json.loads((run / "report" / "results.json").read_text())
    assert {p["status"] for p in results["pairs"]} == {"launcher"}
    assert {h["verdict"] for h in results["hosts"]} == {"passed"}
    assert [c["status"] for c in results["fleet"]["checks"] if c["name"] == "launcher"] == ["fail"]
