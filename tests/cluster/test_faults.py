"""The fault matrix: bench.yml on the SSH test cluster while a fleet misbehaves.

Each scenario is one real pipeline run with tiny sizes (1-2 MB, 2 iterations, one collective) and a
short `collbench_timeout_s`; several faults that touch different hosts share a run, so the whole
matrix costs three cluster runs and a few preflight-only runs. Every case prints how long the run (and
the launch it hit) took against the configured timeout: `pytest -s` shows the figures.

What the project promises under each fault is written in docs/faults.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from collbench_py.rundir.load import mark_interrupted
from tests.cluster.benchrun import (
    KILL_AFTER_S,
    MARGIN_S,
    PLAYBOOK,
    REPO,
    TIMEOUT_S,
    BenchRun,
    find_process,
    run_bench,
    shared_run,
)
from tests.cluster.vcluster import Cluster, ansible_env
from tests.collbench_cli import collbench
from tests.rundir_factory import RunSpec, build_run_dir

# The benchmark worker (not torchrun, whose command line names the script too) of one launch.
WORKER = r"^\S*python\S* -u \S*collbench_torch_bench\.py .*/{label}$"
LAUNCH_LIMIT_S = TIMEOUT_S + KILL_AFTER_S + MARGIN_S


def seconds_between(start: str, end: str) -> float:
    parse = lambda text: datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    return (parse(end) - parse(start)).total_seconds()


def launches(run: BenchRun, kind: str, host: str | None = None) -> list[dict[str, Any]]:
    return [
        launch
        for launch in run.manifest()["launches"]
        if launch["kind"] == kind and (host is None or host in launch["hosts"])
    ]


def report_hosts(run: BenchRun) -> dict[str, dict[str, Any]]:
    results = json.loads((run.run_dir / "report" / "results.json").read_text(encoding="utf-8"))
    return {host["host"]: host for host in results["hosts"]}


def figure(case: str, seconds: float, budget: float, note: str = "") -> None:
    print(f"\nFAULT {case}: {seconds:.1f} s (timeout {TIMEOUT_S} s, bound {budget:.0f} s) {note}")


def leftovers(cluster: Cluster, host: str, run: BenchRun) -> dict[int, str]:
    """Benchmark processes of this run still alive on `host`."""
    return find_process(cluster, host, rf"collbench_torch_bench\.py .*/runs/{run.run_dir.name}/")


# ---------------------------------------------------------------- dead hosts


@pytest.fixture(scope="module")
def dead_hosts_run(
    cluster_factory: Callable[..., Cluster], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Cluster, BenchRun]:
    """node4's sshd is down from the start; node3 dies (every process, link down) as the launch
    across all hosts starts; node5 dies as its first pair launch starts, in a round the controller
    started from one task (collbench_round)."""
    cluster = cluster_factory(nodes=5)
    cluster.stop_sshd("node4")
    work = tmp_path_factory.mktemp("dead")
    kill = ("node3", WORKER.format(label="all"), lambda: cluster.kill_host("node3"), "kill node3")
    pair_of_node5 = WORKER.format(label=r"pair-\S*node5\S*")
    in_pair = ("node5", pair_of_node5, lambda: cluster.kill_host("node5"), "kill node5")
    phases = {"collbench_phases": ["intra", "all", "pairs"]}
    run = run_bench(cluster, work / "results", work / "cp", extra_vars=phases, watch=[kill, in_pair])
    return cluster, run


def test_host_unreachable_from_the_start(dead_hosts_run: tuple[Cluster, BenchRun]) -> None:
    _, run = dead_hosts_run
    figure("host unreachable from the start", run.seconds, 0, f"(whole run, rc {run.rc})")
    manifest = run.manifest()
    assert manifest["hosts"]["node4"]["status"] == "unreachable", run.tail
    assert manifest["hosts"]["node4"]["reason"]
    # The others were measured: an intra-node launch each, logs brought back.
    for host in ("node1", "node2"):
        (intra,) = launches(run, "intra", host)
        assert intra["status"] == "ok", intra
        assert (run.run_dir / intra["log"]).stat().st_size > 0
    assert not launches(run, "intra", "node4")
    assert manifest["status"] == "complete"
    hosts = report_hosts(run)
    assert hosts["node4"]["verdict"] == "unreachable"
    assert hosts["node1"]["verdict"] != "unreachable"
    # The exit code says failure; the summary and the report's path come first, then the failure
    # that names the nodes.
    assert run.rc != 0
    said = re.search(r"(\d) of 5 nodes not measured: ([^:]*)", run.output)
    assert said and "node4 unreachable" in said[2], run.tail
    assert run.output.index("report: ") < said.start(), run.tail


def test_host_dying_mid_run(dead_hosts_run: tuple[Cluster, BenchRun]) -> None:
    cluster, run = dead_hosts_run
    assert "kill node3" in run.events, f"node3 never started the all-hosts launch: {run.events}\n{run.tail}"
    (across,) = launches(run, "all")
    took = seconds_between(across["started_at"], across["finished_at"])
    figure("host dying mid-run (all-hosts launch)", took, LAUNCH_LIMIT_S, f"(whole run {run.seconds:.0f} s)")
    # The launch that included it is marked, once, and bounded by the timeout.
    assert across["status"] in ("failed", "timeout"), across
    assert took <= LAUNCH_LIMIT_S
    manifest = run.manifest()
    assert manifest["hosts"]["node3"]["status"] != "ok", manifest["hosts"]["node3"]
    assert manifest["status"] == "complete"
    # What node3 measured before it died stays in the run directory.
    (intra,) = launches(run, "intra", "node3")
    assert (run.run_dir / intra["log"]).is_file()
    # The launch's other hosts were cleaned up: no rank left waiting for node3.
    for host in ("node1", "node2"):
        assert not leftovers(cluster, host, run), host
    assert report_hosts(run)["node3"]["verdict"] in ("failed", "unreachable")


def test_host_dying_in_a_round_of_pairs(dead_hosts_run: tuple[Cluster, BenchRun]) -> None:
    """The round's launches are started by one controller task: the dead host's ssh ends (its
    keep-alive), the host leaves the run with what ssh said, its pair is recorded once and
    bounded, and the round's other launches and the next rounds go on without it."""
    cluster, run = dead_hosts_run
    assert "kill node5" in run.events, f"node5 never started a pair launch: {run.events}\n{run.tail}"
    pairs = launches(run, "pair")
    (hit,) = [p for p in pairs if "node5" in p["hosts"]]  # later pairs with node5 were not started
    took = seconds_between(hit["started_at"], hit["finished_at"])
    figure("host dying in a round of pairs", took, LAUNCH_LIMIT_S, f"(whole run {run.seconds:.0f} s)")
    assert hit["status"] in ("failed", "timeout"), hit
    assert took <= LAUNCH_LIMIT_S
    manifest = run.manifest()
    assert manifest["hosts"]["node5"]["status"] == "failed", manifest["hosts"]["node5"]
    reason = manifest["hosts"]["node5"]["reason"]
    assert re.search(r"lost this host failed: the controller lost its connection in round \d: \S", reason), (
        reason
    )
    assert manifest["status"] == "complete"
    # The healthy pair was measured, in a round of its own or beside the dead one.
    healthy = [p for p in pairs if sorted(p["hosts"]) == ["node1", "node2"]]
    assert [p["status"] for p in healthy] == ["ok"], pairs
    # node5's partner was cleaned up: no rank left waiting for it.
    (partner,) = set(hit["hosts"]) - {"node5"}
    assert not leftovers(cluster, partner, run), partner
    assert report_hosts(run)["node5"]["verdict"] in ("failed", "unreachable")


# ---------------------------------------------------------------- a hung rank and wrong data

# On the host named in $FT_CORRUPT_HOST the benchmark's intra-node all_reduce returns three wrong
# elements, as a GPU with bad memory would: real wrong data through the real benchmark and checks.
CORRUPTING_SITECUSTOMIZE = """
import os, socket, sys
_argv = " ".join(getattr(sys, "orig_argv", sys.argv))
if (socket.gethostname() == os.environ.get("FT_CORRUPT_HOST") and "collbench_torch_bench.py" in _argv
        and "torch.distributed.run" not in _argv and "/intra" in _argv):
    import torch.distributed as dist
    _real = dist.all_reduce
    def _corrupting(tensor, *args, **kwargs):
        work = _real(tensor, *args, **kwargs)
        if tensor.numel() > 1:  # the benchmark's buffers, not its one-element sums of times
            tensor.view(-1)[:3] += 1
        return work
    dist.all_reduce = _corrupting
"""

# Planted where a careless tool would pick them up: the launch environment and the controller's.
SECRETS = {
    "MY_API_TOKEN": "sekrit-token-5d1f0c",
    "AWS_SECRET_ACCESS_KEY": "sekrit-aws-7a2e94",
    "DB_PASSWORD": "sekrit-db-03b8c1",
}


def bad_launches_run(cluster_factory: Callable[..., Cluster], work: Path) -> tuple[Cluster, BenchRun]:
    """node2's intra-node rank hangs (SIGSTOP); node3's intra-node all_reduce returns wrong data; the
    launch across all hosts runs under mpirun with shell metacharacters in its extra arguments and
    secrets in its environment."""
    cluster = cluster_factory(nodes=3)
    inject = work / "inject"
    inject.mkdir(parents=True)
    (inject / "sitecustomize.py").write_text(CORRUPTING_SITECUSTOMIZE, encoding="utf-8")
    marker = work / "PWNED"
    extra = {
        "collbench_launcher": "mpirun",
        "collbench_mpirun_extra_args": ["-x", f"FT_ARG=x;touch {marker}", "-x", f"FT_SUB=$(touch {marker})"],
        "collbench_launch_env": {
            "PYTHONPATH": str(inject),
            "FT_CORRUPT_HOST": "node3",
            "FT_SHELL": f"`touch {marker}`;touch {marker}",
            **SECRETS,
        },
    }
    freeze = (
        "node2",
        WORKER.format(label="intra"),
        lambda: cluster.freeze("node2", WORKER.format(label="intra")),
        "freeze node2",
    )
    run = run_bench(cluster, work / "results", work / "cp", extra_vars=extra, watch=[freeze], env=SECRETS)
    return cluster, run


@pytest.fixture(scope="module")
def bad_launches(
    cluster_factory: Callable[..., Cluster], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Cluster, BenchRun]:
    return shared_run(
        "bad launches", lambda: bad_launches_run(cluster_factory, tmp_path_factory.mktemp("bad"))
    )


def test_hung_rank_is_bounded_and_cleaned_up(bad_launches: tuple[Cluster, BenchRun]) -> None:
    cluster, run = bad_launches
    assert "freeze node2" in run.events, f"node2's rank was never seen: {run.events}\n{run.tail}"
    (hung,) = launches(run, "intra", "node2")
    took = seconds_between(hung["started_at"], hung["finished_at"])
    figure("hung rank (SIGSTOP, intra-node launch)", took, LAUNCH_LIMIT_S, f"(whole run {run.seconds:.0f} s)")
    # `timeout` answers 124 after TERM; when its KILL follows, it dies with the group: rc -9.
    assert hung["status"] in ("timeout", "failed"), hung
    assert hung["rc"] in (124, 137, -9), hung
    assert took <= LAUNCH_LIMIT_S
    assert run.manifest()["hosts"]["node2"]["status"] in ("timeout", "failed")
    # Nothing of the launch is left on its host, the frozen rank included.
    assert not leftovers(cluster, "node2", run)
    # The next launch ran, node2 included.
    (across,) = launches(run, "all")
    assert across["started_at"] >= hung["finished_at"]
    assert across["status"] == "ok", (across, run.tail)
    assert (run.run_dir / across["log"]).stat().st_size > 0


def test_hung_launch_is_recorded_as_timeout(bad_launches: tuple[Cluster, BenchRun]) -> None:
    _, run = bad_launches
    (hung,) = launches(run, "intra", "node2")
    assert hung["status"] == "timeout"
    assert run.manifest()["hosts"]["node2"]["status"] == "timeout"


def test_wrong_data_fails_the_host_with_the_rows_quoted(bad_launches: tuple[Cluster, BenchRun]) -> None:
    _, run = bad_launches
    (corrupt,) = launches(run, "intra", "node3")
    assert corrupt["status"] == "failed"
    assert corrupt["rc"] != 0  # the benchmark exits 7; torchrun reports it as 1
    log = (run.run_dir / corrupt["log"]).read_text(encoding="utf-8")
    assert re.search(r"Out of bounds values : \d+ FAILED", log), log
    host = report_hosts(run)["node3"]
    assert host["verdict"] == "failed"
    (data,) = [c for c in host["checks"] if c["name"] == "intra/all_reduce/data"]
    assert data["status"] == "fail"
    assert "data corruption" in data["reason"]
    quoted = "\n".join(data["evidence"])
    assert re.search(r"Out of bounds values : \d+ FAILED", quoted), quoted
    # The row itself, as printed: its #wrong column says 3.
    assert any(line.split()[-1] == "3" and line.split()[0].isdigit() for line in data["evidence"]), quoted
    # Only node3's data was wrong: nobody else is blamed for it.
    for name, other in report_hosts(run).items():
        if name != "node3":
            assert not [c for c in other["checks"] if c["name"].endswith("/data") and c["status"] == "fail"]


def test_extra_arguments_are_argv_never_a_shell(bad_launches: tuple[Cluster, BenchRun]) -> None:
    _, run = bad_launches
    assert not (run.results_dir.parent / "PWNED").exists(), "an extra argument reached a shell"
    (across,) = launches(run, "all")
    assert across["launcher"] == "mpirun"
    # mpirun took the arguments as given (a malformed command line would have failed the launch).
    assert across["status"] == "ok", across


# ---------------------------------------------------------------- an interrupted run


@pytest.fixture(scope="module")
def interrupted_run(
    cluster_factory: Callable[..., Cluster], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Cluster, BenchRun]:
    """SIGINT to ansible-playbook as the launch across all hosts starts (the intra logs are in)."""
    cluster = cluster_factory(nodes=2)
    work = tmp_path_factory.mktemp("sigint")
    run = run_bench(
        cluster, work / "results", work / "cp", interrupt_when=("node1", WORKER.format(label="all"))
    )
    return cluster, run


def test_interrupted_run_keeps_what_was_fetched(interrupted_run: tuple[Cluster, BenchRun]) -> None:
    cluster, run = interrupted_run
    assert "SIGINT" in run.events, run.tail
    figure("SIGINT to ansible-playbook", run.seconds - run.events["SIGINT"], 0, "(from SIGINT to exit)")
    assert run.rc != 0
    for host in ("node1", "node2"):
        log = run.run_dir / "hosts" / host / "intra" / "all_reduce.log"
        assert log.stat().st_size > 0, host
    manifest = run.manifest()  # still valid JSON
    assert manifest["status"] != "complete"
    done = collbench("report", str(run.run_dir), timeout=180)
    assert done.returncode in (0, 1), done.stderr
    assert "Traceback" not in done.stderr
    assert "did not complete" in done.stdout
    results = json.loads((run.run_dir / "report" / "results.json").read_text(encoding="utf-8"))
    assert {h["host"] for h in results["hosts"]} == {"node1", "node2"}
    # The interrupted launch's ranks outlive the controller, bounded by their own `timeout`.
    alive = sum(len(leftovers(cluster, host, run)) for host in ("node1", "node2"))
    deadline = time.monotonic() + LAUNCH_LIMIT_S
    while any(leftovers(cluster, host, run) for host in ("node1", "node2")):
        assert time.monotonic() < deadline, "benchmark processes outlived their timeout"
        time.sleep(1)
    gone_after = time.monotonic() - deadline + LAUNCH_LIMIT_S
    print(f"{alive} benchmark processes alive after the interrupt, gone {gone_after:.0f} s later")


def test_interrupted_run_says_interrupted(interrupted_run: tuple[Cluster, BenchRun]) -> None:
    """Plain ansible-playbook: the callback next to bench.yml (callback_plugins/collbench_interrupt.py)
    rewrites the manifest on SIGINT, as no task can."""
    _, run = interrupted_run
    manifest = run.manifest()
    assert manifest["status"] == "interrupted", run.tail
    assert manifest["finished_at"] >= manifest["started_at"]
    assert "marked interrupted" in run.output


# A stand-in for bench.yml that opens a run as preflight does (the `collbench_run` fact, a `running`
# manifest), then sits in a long task: enough for the interrupt paths, without a cluster.
MINI_BENCH = """
- name: Open a run and wait
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Record the run
      ansible.builtin.set_fact:
        collbench_run:
          run_id: mini
          run_dir: "{{ results }}/mini"
    - name: Write manifest.json
      ansible.builtin.copy:
        dest: "{{ results }}/mini/manifest.json"
        content: '{"schema": 1, "run_id": "mini", "status": "running", "started_at": "2026-11-21T21:51:00Z",
          "hosts": {}, "launches": []}'
        mode: "0600"
    - name: Launch | a long one
      ansible.builtin.command:
        argv: [sh, -c, "touch {{ results }}/started; exec sleep 120"]
      changed_when: true
"""


@pytest.fixture
def mini_project(tmp_path: Path) -> tuple[Path, Path]:
    project = tmp_path / "project"
    project.mkdir()
    (project / "bench.yml").write_text(MINI_BENCH, encoding="utf-8")
    (project / "callback_plugins").symlink_to(REPO / "callback_plugins")
    results = tmp_path / "results"
    (results / "mini").mkdir(parents=True)
    return project, results


def interrupt_when_started(argv: list[str], cwd: Path, results: Path, signum: int) -> tuple[int, str, float]:
    """Run `argv`, send `signum` once the long task runs; (rc, output, seconds from signal to exit)."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=ansible_env(cwd / "cp"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (results / "started").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate(timeout=10)[0]
            time.sleep(0.2)
        time.sleep(1)
        signalled = time.monotonic()
        proc.send_signal(signum)
        output, _ = proc.communicate(timeout=90)
    finally:
        proc.kill()
    return proc.returncode, output, time.monotonic() - signalled


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_to_ansible_playbook_marks_the_manifest(mini_project: tuple[Path, Path], signum: int) -> None:
    project, results = mini_project
    argv = [PLAYBOOK, "bench.yml", "-e", f"results={results}"]
    rc, output, took = interrupt_when_started(argv, project, results, signum)
    figure(f"{signal.Signals(signum).name} to ansible-playbook (local)", took, 0, f"(rc {rc})")
    assert rc != 0
    manifest = json.loads((results / "mini" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "interrupted", output
    assert manifest["finished_at"]
    assert (results / "mini" / "manifest.json").stat().st_mode & 0o777 == 0o600  # its mode kept
    assert not [p.name for p in (results / "mini").iterdir() if p.name != "manifest.json"]  # no temp left


def test_signal_to_collbench_run_marks_the_manifest(mini_project: tuple[Path, Path]) -> None:
    """`collbench run` passes SIGINT on to ansible-playbook, marks the manifest, exits 130."""
    project, results = mini_project
    argv = [sys.executable, "-m", "collbench_py", "run", "--project-dir", str(project), "-i", "localhost,"]
    argv += [
        "-e",
        f"results={results} ansible_connection=local",
        "-e",
        "ansible_python_interpreter={{ ansible_playbook_python }}",
    ]
    rc, output, took = interrupt_when_started(argv, project, results, signal.SIGINT)
    figure("SIGINT to collbench run (local)", took, 0, f"(rc {rc})")
    assert rc == 130, output
    assert "interrupted after" in output
    manifest = json.loads((results / "mini" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "interrupted", output


@pytest.mark.parametrize("status", ["complete", "failed", "interrupted"])
def test_mark_interrupted_leaves_a_finished_manifest_alone(tmp_path: Path, status: str) -> None:
    run = build_run_dir(tmp_path, RunSpec(hosts=["node1", "node2"], status=status))
    before = (run / "manifest.json").read_bytes()
    assert not mark_interrupted(run)
    assert (run / "manifest.json").read_bytes() == before


@pytest.mark.parametrize("status", ["running", "interrupted"])
def test_report_on_an_unfinished_run_says_so(tmp_path: Path, status: str) -> None:
    run = build_run_dir(tmp_path, RunSpec(hosts=["node1", "node2", "node3"], status="running"))
    if status == "interrupted":
        assert mark_interrupted(run)
    done = collbench("report", str(run), timeout=180)
    assert done.returncode in (0, 1), done.stderr
    said = {"running": "its manifest still says `running`", "interrupted": "it was interrupted at 20"}[status]
    assert "the run did not complete" in done.stdout and said in done.stdout, done.stdout


# ---------------------------------------------------------------- a hung GPU tool

# The healthy node's stand-in nvidia-smi (a Python script) must answer within it on 2 loaded cores:
# at 5 s it once did not, and left the run with the hung node.
PROBE_TIMEOUT_S = 10


def run_with_node2_hung(
    cluster: Cluster, tmp_path_factory: pytest.TempPathFactory, hang: dict[str, Any], name: str
) -> tuple[Cluster, BenchRun]:
    """The intra-node phase on `cluster`, node2's stand-in nvidia-smi configured with `hang`."""
    config = cluster.workdir / "nodes" / "node2" / "bin" / "nvidia-smi.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), **hang}))
    work = tmp_path_factory.mktemp(name)
    extra = {"collbench_probe_timeout_s": PROBE_TIMEOUT_S, "collbench_phases": ["intra"]}
    run = run_bench(cluster, work / "results", work / "cp", extra_vars=extra, limit_s=400)
    return cluster, run


@pytest.fixture(scope="module")
def hung_gpu_tool_run(
    cluster_factory: Callable[..., Cluster], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Cluster, BenchRun]:
    """node2's nvidia-smi hangs on every call, as it does on a GPU that fell off the bus."""
    return run_with_node2_hung(cluster_factory(nodes=2), tmp_path_factory, {"hang": True}, "hung-gpu-tool")


def test_a_hung_nvidia_smi_drops_its_node_alone_not_the_run(
    hung_gpu_tool_run: tuple[Cluster, BenchRun],
) -> None:
    cluster, run = hung_gpu_tool_run
    # Unbounded, each hung call would last an hour: run_bench's 400 s limit would fail the test.
    print(f"\nFAULT nvidia-smi hangs on node2: run {run.seconds:.1f} s, probe limit {PROBE_TIMEOUT_S} s")
    manifest = run.manifest()
    assert manifest["status"] == "complete", run.output[-4000:]
    # node2 leaves the run in the facts phase, with the reason; node1 is measured as usual.
    node2 = manifest["hosts"]["node2"]
    assert node2["status"] == "failed", node2
    assert (
        f"nvidia-smi did not answer within collbench_probe_timeout_s ({PROBE_TIMEOUT_S} s)" in node2["reason"]
    ), node2
    assert manifest["hosts"]["node1"]["status"] == "ok", manifest["hosts"]["node1"]
    assert launches(run, "intra", "node2") == []
    assert [launch["status"] for launch in launches(run, "intra", "node1")] == ["ok"]
    # The evidence stays: node2's facts.json was written before it left, naming what did not answer.
    facts = {
        h: json.loads((run.run_dir / "hosts" / h / "facts.json").read_text()) for h in ("node1", "node2")
    }
    assert len(facts["node1"]["gpus"]) == 8 and facts["node2"]["gpus"] == []
    assert facts["node2"]["unanswered"] == ["gpu_query", "nvidia_smi_version"]
    assert (run.run_dir / "hosts" / "node1" / "topo.txt").is_file()
    assert not (run.run_dir / "hosts" / "node2" / "topo.txt").exists()
    hosts = report_hosts(run)
    assert hosts["node2"]["verdict"] == "failed"
    assert hosts["node1"]["verdict"] == "passed"
    # The hung calls were killed at their limit, not left behind on the node.
    assert find_process(cluster, "node2", r"nvidia-smi") == {}


@pytest.fixture(scope="module")
def hung_topology_run(
    cluster_factory: Callable[..., Cluster], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Cluster, BenchRun]:
    """node2's `nvidia-smi topo -m` hangs; its other calls answer."""
    return run_with_node2_hung(
        cluster_factory(nodes=3), tmp_path_factory, {"hang_on": ["topo"]}, "hung-topology"
    )


def test_a_hung_topology_read_costs_its_matrix_alone(hung_topology_run: tuple[Cluster, BenchRun]) -> None:
    """The topology phase reads every node from one controller task: a node whose read does not
    answer within collbench_probe_timeout_s gets no topo.txt, says why, and stays in the run; the
    other nodes' matrices are written as printed."""
    cluster, run = hung_topology_run
    manifest = run.manifest()
    assert manifest["status"] == "complete", run.output[-4000:]
    hosts = manifest["hosts"]
    assert {h: e["status"] for h, e in hosts.items()} == dict.fromkeys(cluster.hosts, "ok"), (
        hosts,
        run.output[-6000:],
    )
    assert [launch["status"] for launch in launches(run, "intra", "node2")] == ["ok"]
    assert not (run.run_dir / "hosts" / "node2" / "topo.txt").exists()
    config = cluster.workdir / "nodes" / "node1" / "bin" / "nvidia-smi.json"
    lines = Path(json.loads(config.read_text())["topology"]).read_text().splitlines(keepends=True)
    matrix = "".join(lines[next(i for i, line in enumerate(lines) if line.strip().startswith("GPU0")) :])
    for host in ("node1", "node3"):
        assert (run.run_dir / "hosts" / host / "topo.txt").read_text() == matrix.rstrip("\r\n") + "\n"
    assert "node2: topology not read: nvidia-smi answered rc 124" in run.output, run.output[-4000:]
    # One task read the three nodes: the phase shows no per-node task.
    start = run.output.find("PLAY [Topology")
    phase = run.output[start : run.output.find("PLAY [", start + 1)]
    assert phase.count("TASK [") == 2, phase
    assert find_process(cluster, "node2", r"nvidia-smi") == {}


# ---------------------------------------------------------------- the controller's filesystem


def tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def preflight_only(results_dir: Path) -> subprocess.CompletedProcess:
    """bench.yml on this machine, always-tagged preflight only: opens the run directory and its manifest."""
    variables = {"collbench_results_dir": str(results_dir), "collbench_backend": "torch"}
    return subprocess.run(
        [PLAYBOOK, "bench.yml", "--tags", "none", "-e", json.dumps(variables)],
        cwd=REPO,
        env=ansible_env(),
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        check=False,
    )


@pytest.mark.parametrize("fault", ["read-only", "full"])
def test_results_directory_unwritable(cluster_support: None, tmp_path: Path, fault: str) -> None:
    with tmpfs(tmp_path / "results", "512k") as results:
        previous = build_run_dir(results, RunSpec(hosts=["node1", "node2"]))
        before = tree_digest(previous)
        if fault == "read-only":
            subprocess.run(["mount", "-o", "remount,ro", str(results)], check=True)
            expected = "Read-only file system"
        else:
            filler = results / "filler"
            with contextlib.suppress(OSError), filler.open("wb") as out:
                while True:
                    out.write(b"\0" * 65536)
            expected = "No space left on device"
        done = preflight_only(results)
        output = done.stdout + done.stderr
        figure(f"results directory {fault}", 0, 0, f"(rc {done.returncode})")
        assert done.returncode != 0
        assert expected in output, output[-3000:]
        assert "Traceback" not in output
        assert tree_digest(previous) == before, "a previous run was touched"
        # A run directory the failure left behind is never taken for a run: no manifest says so.
        for run_dir in results.iterdir():
            if run_dir == previous or not run_dir.is_dir():
                continue
            manifest = run_dir / "manifest.json"
            assert (
                not manifest.exists() or json.loads(manifest.read_text() or "{}").get("status") != "complete"
            )
            report = collbench("report", str(run_dir), "--out", str(tmp_path / "r"), timeout=120)
            assert report.returncode == 2, report.stdout
            assert "not a run directory" in report.stderr or "did not complete" in report.stdout
