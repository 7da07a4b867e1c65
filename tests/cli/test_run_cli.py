"""`collbench run`: the real bench.yml through ansible-runner against the SSH test cluster (tiny sizes,
intra-node launches only), with one node down. Its output is not a terminal, so progress comes as plain
lines; the exit code is the verdict; Ansible's own errors (an unreachable host, a bad inventory) show
up as what they are."""

from __future__ import annotations

import io
import json
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from collbench_py.ansible_run import Display, LiveDisplay, Tracker
from collbench_py.cli import build_parser
from collbench_py.cli.cmd_run import request_from_args
from tests.cluster.conftest import cluster, cluster_factory, cluster_support  # noqa: F401
from tests.cluster.vcluster import Cluster, ansible_env
from tests.slurm.test_slurm_manifest import sinfo_standin

REPO = Path(__file__).resolve().parents[2]
# The command line as installed, with the commands of this change registered where they are not yet.
LAUNCHER = (
    "import sys; from collbench_py import cli; "
    "cli.COMMANDS = tuple(dict.fromkeys((*cli.COMMANDS, 'run', 'bundle', 'report'))); "
    "sys.exit(cli.main(sys.argv[1:]))"
)
TINY = [
    "-e",
    "collbench_backend=torch",
    "-e",
    f"collbench_python={sys.executable}",
    "-e",
    "collbench_provision=false",
    "-e",
    '{"collbench_collectives": ["all_reduce"], "collbench_phases": ["intra"]}',
    "-e",
    "collbench_min_bytes=1048576 collbench_max_bytes=1048576 collbench_iters=2 collbench_warmup_iters=1",
]


def collbench_run(argv: list[str], tmp: Path, timeout: float = 480) -> subprocess.CompletedProcess:
    env = ansible_env(tmp / "cp")
    # Without the venv on PATH: `collbench run` must put it there for ansible-runner itself.
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
    return subprocess.run(
        [sys.executable, "-c", LAUNCHER, "run", *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def bench_run(cluster_factory, tmp_path_factory: pytest.TempPathFactory):  # noqa: F811
    """One run of bench.yml on three nodes, node3's sshd stopped, in acceptance mode."""
    vc: Cluster = cluster_factory(nodes=3)
    tmp = tmp_path_factory.mktemp("run")
    vc.stop_sshd("node3")
    argv = ["-i", str(vc.inventory_path), *TINY, "-e", f"collbench_results_dir={tmp / 'results'}"]
    argv += ["--acceptance", "h100-sxm", "--keep-artifacts", str(tmp / "artifacts")]
    result = collbench_run(argv, tmp)
    (run_dir,) = (p for p in (tmp / "results").iterdir() if p.is_dir())
    return result, run_dir, tmp


@pytest.mark.cluster
def test_progress_comes_as_plain_lines_off_a_terminal(bench_run) -> None:
    result, _, _ = bench_run
    out = result.stdout
    for line in (
        "phase: Preflight | reach the nodes",
        "phase: Benchmark | run the launches",
        "launch started: intra",
        "launch done: intra on node1, node2 in ",
        "phase: Report | finalise the manifest and write the report",
    ):
        assert line in out, out + result.stderr
    assert "\r" not in out and "\x1b[" not in out
    phases = [line for line in out.splitlines() if "phase: " in line]
    assert len(phases) >= 6 and all(re.match(r"^\[\d\d:\d\d\] phase: ", line) for line in phases), out


@pytest.mark.cluster
def test_an_unreachable_host_shows_up_as_unreachable(bench_run) -> None:
    result, run_dir, _ = bench_run
    unreachable = [line for line in result.stdout.splitlines() if line.startswith("UNREACHABLE node3: ")]
    assert unreachable, result.stdout
    assert "ssh" in unreachable[0].lower() or "connect" in unreachable[0].lower()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["hosts"]["node3"]["status"] == "unreachable"
    assert manifest["hosts"]["node1"]["status"] == "ok"


@pytest.mark.cluster
def test_the_exit_code_is_the_verdict_of_the_report_and_the_bundle(bench_run) -> None:
    result, run_dir, _ = bench_run
    report = json.loads((run_dir / "report" / "results.json").read_text())
    verdicts = {h["host"]: h["verdict"] for h in report["hosts"]}
    assert verdicts["node3"] == "unreachable" and report["profile"]["name"] == "h100-sxm"
    assert result.returncode == report["summary"]["exit_code"] == 1, result.stdout + result.stderr
    assert f"report: {run_dir}/report/index.html" in result.stdout
    (archive,) = (run_dir / "acceptance").glob("collbench-acceptance-*.tar.gz")
    with tarfile.open(archive) as tar:
        bundle = json.load(tar.extractfile(f"{archive.name.removesuffix('.tar.gz')}/bundle.json"))
    assert bundle["exit_code"] == 1 and bundle["verdict"] == "failed"
    assert f"acceptance bundle: {archive}" in result.stdout


@pytest.mark.cluster
def test_the_bundle_of_a_cluster_run_verifies_and_opens(bench_run, tmp_path: Path) -> None:
    _, run_dir, _ = bench_run
    (archive,) = (run_dir / "acceptance").glob("*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path, filter="data")
    (top,) = tmp_path.iterdir()
    check = subprocess.run(
        ["sha256sum", "-c", "SHA256SUMS"], cwd=top, capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout
    html = (top / "report" / "index.html").read_text()
    assert html.lstrip().lower().startswith("<!doctype html") and run_dir.name in html
    assert (top / "run" / "hosts" / "node1" / "intra" / "all_reduce.log").stat().st_size > 0
    versions = json.loads((top / "versions.json").read_text())
    assert list(versions["benchmark_tools"]) == ["collbench-torch-bench 0.1.0"]
    ((torch, hosts),) = versions["torch"].items()
    assert torch.startswith("2.13.0") and hosts == ["node1", "node2"]


@pytest.mark.cluster
def test_on_a_terminal_one_status_line_is_redrawn_in_place(bench_run) -> None:
    """The run's real event stream, replayed into the terminal display."""
    _, _, tmp = bench_run
    events = [json.loads(p.read_text()) for p in (tmp / "artifacts").glob("*/job_events/*.json")]
    events.sort(key=lambda e: e["counter"])
    clock = iter(range(10**6))
    tracker = Tracker(clock=lambda: float(next(clock)))
    screen = io.StringIO()
    display = LiveDisplay(tracker, screen)
    states = []
    for event in events:
        display.event(event)
        states.append(tracker.status_line())
    text = screen.getvalue()
    assert text.count("\r\x1b[2K") > len(events) // 2
    assert any("Benchmark | run the launches" in s and "in flight: intra" in s for s in states)
    # A problem clears the status line, is printed on its own line, and the status line comes back.
    assert re.search(r"\r\x1b\[2KUNREACHABLE node3: [^\r]*\n\r\x1b\[2K\[", text)
    assert "phase: " not in text  # phases live in the status line, not as lines


BENCHMARK_EVENTS = Path(__file__).parents[1] / "data" / "runner-events" / "benchmark-phase.jsonl"


def replayed_lines(events: list[dict]) -> list[str]:
    """What the plain display prints for these events, without its clock."""
    clock = iter(range(10**6))
    tracker = Tracker(clock=lambda: float(next(clock)))
    screen = io.StringIO()
    display = Display(tracker, screen, heartbeat_s=10**9)
    for event in events:
        display.event(event)
    return [re.sub(r"^\[\d+:\d+\] ", "", line) for line in screen.getvalue().splitlines()]


def test_a_launch_is_followed_from_its_one_task_in_a_real_event_stream() -> None:
    """The Benchmark play's real events (tests/data/runner-events): the launch task is known by its
    action and the hosts' launch facts, so its start, end and hosts are printed."""
    lines = replayed_lines([json.loads(line) for line in BENCHMARK_EVENTS.read_text().splitlines()])
    launches = [line for line in lines if line.startswith("launch ")]
    assert launches[0] == "launch started: intra"
    assert re.fullmatch(r"launch done: intra on node1, node2 in \d+ s", launches[1]), launches
    assert len(launches) == 2, launches


ROUND_EVENTS = Path(__file__).parents[1] / "data" / "runner-events" / "pair-rounds.jsonl"


def test_each_round_of_pairs_is_one_line_from_its_one_task_in_a_real_event_stream() -> None:
    """The rounds of pairs of a real run (tests/data/runner-events): each round is one controller
    task (action collbench_round), whose result says how many launches it ran and how they ended."""
    events = [json.loads(line) for line in ROUND_EVENTS.read_text().splitlines()]
    lines = replayed_lines(events)
    rounds = [line for line in lines if line.startswith("round ")]
    assert [r.split(" done:")[0] for r in rounds] == ["round 1", "round 2", "round 3"], lines
    for line in rounds:
        assert re.fullmatch(r"round \d done: 4 launches \(4 ok\) in \d+ s", line), line
    # The round's result is the one the events carried: its launches, each one a manifest entry.
    results = [
        e["event_data"]["res"]
        for e in events
        if e["event"] == "runner_on_ok" and e["event_data"].get("task_action") == "collbench_round"
    ]
    assert [len(r["launches"]) for r in results] == [4, 4, 4]
    assert {x["status"] for r in results for x in r["launches"]} == {"ok"}


def test_a_bad_inventory_is_one_clear_message(tmp_path: Path) -> None:
    missing = collbench_run(["-i", str(tmp_path / "nowhere.yml")], tmp_path, timeout=60)
    assert missing.returncode == 2
    assert (
        missing.stderr.strip()
        == f"collbench run: inventory {tmp_path / 'nowhere.yml'}: no such file or directory"
    )

    broken = tmp_path / "broken.yml"
    broken.write_text("all:\n  hosts: [node1\n")
    result = collbench_run(["-i", str(broken)], tmp_path, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    (message,) = result.stderr.strip().splitlines()
    assert message.startswith(f"collbench run: bad inventory ({broken}): YAML parsing failed")
    assert f"(at {broken}:3:1)" in message
    assert "[ERROR]: No inventory was parsed" in result.stdout  # Ansible's own words stay visible

    no_group = tmp_path / "no_group.yml"
    no_group.write_text("all:\n  hosts:\n    node1:\n")
    result = collbench_run(["-i", str(no_group)], tmp_path, timeout=120)
    assert result.returncode == 2
    assert (
        "FAILED localhost: Stop when the group gpu_nodes is empty: the inventory has no host" in result.stdout
    )
    assert "before opening a run directory" in result.stderr and "Traceback" not in result.stderr


# ---- the scheduler and CI examples call this command: they must be right ------------------------------

EXAMPLES = REPO / "examples"


def _run_command_lines() -> list[tuple[str, list[str]]]:
    """Every `collbench run ...` command line in the examples, as argv after `run`."""
    found = []
    for path in sorted(EXAMPLES.rglob("*")):
        if not path.is_file():
            continue
        lines = [line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")]
        text = "\n".join(lines).replace("\\\n", " ")
        if path.suffix in (".yml", ".yaml"):
            text = re.sub(r"\n\s+(?=-e )", " ", text)  # YAML folded lines
        for match in re.finditer(r"collbench run (.+?)(?:\s*[|>]|\s*$)", text, flags=re.MULTILINE):
            found.append((path.name, shlex.split(match[1])))
    return found


def test_every_example_command_line_is_a_valid_collbench_run() -> None:
    from collbench_py.cli import build_parser  # noqa: PLC0415 - the registry as the examples see it

    lines = _run_command_lines()
    assert {name for name, _ in lines} >= {
        "collbench-nightly",
        "collbench-nightly.service",
        "github-actions.yml",
        "gitlab-ci.yml",
    }
    parser = build_parser()
    for name, argv in lines:
        args = parser.parse_args(["run", *argv])
        assert args.inventory and args.progress == "lines" and not args.ansible_args, name
        assert any(v.startswith("collbench_results_dir=") for v in args.extra_vars), name


def test_ci_examples_parse_and_publish_junit_and_keep_the_report() -> None:
    github = yaml.safe_load((EXAMPLES / "ci" / "github-actions.yml").read_text())
    steps = github["jobs"]["benchmark"]["steps"]
    assert github[True]["schedule"][0]["cron"] == "30 2 * * *"  # `on:` is YAML 1.1 true
    assert github["jobs"]["benchmark"]["defaults"]["run"]["shell"] == "bash"  # -eo pipefail with tee
    junit = next(s for s in steps if "junit" in s.get("uses", ""))
    keep = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
    assert junit["with"]["report_paths"] == "report/junit.xml" and keep["with"]["path"] == "report/"
    assert junit["if"] == keep["if"] == "always()"

    gitlab = yaml.safe_load((EXAMPLES / "ci" / "gitlab-ci.yml").read_text())["collbench-nightly"]
    assert gitlab["artifacts"]["reports"]["junit"] == "report/junit.xml"
    assert gitlab["artifacts"]["paths"] == ["report/"] and gitlab["artifacts"]["when"] == "always"
    assert "set -o pipefail" in gitlab["script"]


def test_the_cron_line_is_well_formed() -> None:
    lines = [
        line
        for line in (EXAMPLES / "cron" / "collbench-nightly").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    env, job = lines
    assert re.fullmatch(r"MAILTO=\S+", env)
    minute, hour, dom, month, dow, user, command = job.split(maxsplit=6)
    assert (minute, hour, dom, month, dow, user) == ("30", "2", "*", "*", "*", "root")
    assert "%" not in command  # cron turns % into a newline
    assert "flock -n" in command and "|| echo" in command


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_the_systemd_units_verify(tmp_path: Path) -> None:
    """systemd-analyze verify, with the install path pointed at this checkout (it checks ExecStart)."""
    units = sorted((EXAMPLES / "systemd").iterdir())
    for unit in units:
        (tmp_path / unit.name).write_text(unit.read_text().replace("/opt/collbench", str(REPO)))
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *(f"./{u.name}" for u in units)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr.strip() == ""
    service = (EXAMPLES / "systemd" / "collbench-nightly.service").read_text()
    assert "OnFailure=collbench-alert@%n.service" in service and "Type=oneshot" in service


# ---- nodes from Slurm: --slurm-partition / --slurm-nodes ----------------------------------------------


def planned_hosts(artifacts: Path) -> list[str]:
    """The hosts of bench.yml's plays on gpu_nodes, as `ansible-playbook --list-hosts` printed them."""
    (stdout,) = artifacts.glob("*/stdout")
    text = stdout.read_text()
    block = re.search(r"pattern: \['gpu_nodes'\]\n\s+hosts \((\d+)\):\n((?:\s+\S+\n)+)", text)
    assert block is not None, text[-2000:]
    return sorted(block[2].split())


@pytest.fixture
def slurm_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COLLBENCH_SLURM_SINFO", str(sinfo_standin(tmp_path)))
    return tmp_path


@pytest.mark.parametrize(
    ("argv", "hosts"),
    [
        (["--slurm-partition", "gpu"], ["node1", "node2", "node3", "node8"]),
        (["--slurm-nodes", "node[3-5,9]"], ["node3"]),
    ],
)
def test_the_nodes_of_a_slurm_partition_are_the_runs_inventory(
    slurm_env: Path, argv: list[str], hosts: list[str]
) -> None:
    artifacts = slurm_env / "artifacts"
    result = collbench_run([*argv, "--keep-artifacts", str(artifacts), "--", "--list-hosts"], slurm_env, 120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert planned_hosts(artifacts) == hosts
    assert "Traceback" not in result.stderr


def test_slurm_nodes_and_an_inventory_or_an_unknown_partition_are_one_clear_message(slurm_env: Path) -> None:
    both = collbench_run(["--slurm-partition", "gpu", "-i", "inventory/localhost.yml"], slurm_env, 60)
    assert both.returncode == 2
    (message,) = both.stderr.strip().splitlines()
    assert message.startswith("collbench run: -i and --slurm-partition/--slurm-nodes both name the nodes")

    unknown = collbench_run(["--slurm-partition", "nosuch"], slurm_env, 60)
    assert unknown.returncode == 2
    assert unknown.stderr == "collbench run: slurm_inventory: sinfo lists no node in partition 'nosuch'\n"
    assert unknown.stdout == ""  # stopped before Ansible started


def test_no_sinfo_is_one_clear_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLLBENCH_SLURM_SINFO", str(tmp_path / "nowhere" / "sinfo"))
    result = collbench_run(["--slurm-partition", "gpu"], tmp_path, 60)
    assert result.returncode == 2
    assert result.stderr == (
        f"collbench run: slurm_inventory: {tmp_path / 'nowhere' / 'sinfo'} not found: "
        "run this on a Slurm login node\n"
    )


def test_the_allocation_asks_for_the_partition_the_nodes_came_from() -> None:
    parser = build_parser(("run",))
    args = parser.parse_args(["run", "--slurm-partition", "gpu", "--strict"])
    assert request_from_args(args, None).collbench_vars == {
        "collbench_report_args": ["--strict"],
        "collbench_slurm_partition": "gpu",
    }
    nodes_only = parser.parse_args(["run", "--slurm-nodes", "gpu[1-2]"])
    assert "collbench_slurm_partition" not in request_from_args(nodes_only, None).collbench_vars


def test_run_passes_new_db_beside_strict_and_the_profile() -> None:
    """--new-db reaches the report with the other report arguments (one variable carries them all,
    so passing it by -e beside --strict would have lost one of the two)."""
    parser = build_parser()
    args = parser.parse_args(["run", "-i", "hosts.yml", "--strict", "--new-db"])
    assert request_from_args(args, "h100-sxm").collbench_vars == {
        "collbench_report_args": ["--profile", "h100-sxm", "--strict", "--new-db"]
    }
    plain = parser.parse_args(["run", "-i", "hosts.yml"])
    assert "--new-db" not in str(request_from_args(plain, None).collbench_vars)
