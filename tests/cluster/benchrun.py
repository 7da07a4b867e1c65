"""Run bench.yml on a test cluster with tiny sizes, timed, with a hook that acts when a process appears.

Used by the fault tests: each case starts the real pipeline, does something to a node at the right
moment (stop it, freeze a rank, interrupt the controller) and reads what the run directory says.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.cluster.vcluster import Cluster, ansible_env

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")
VENV_PYTHON = sys.executable

# Tiny sizes: each launch takes seconds; the timeout is what the fault cases measure against.
TIMEOUT_S = 45
KILL_AFTER_S = 5
# What a launch may take beyond timeout + kill-after: Ansible's own round trips on a busy machine.
MARGIN_S = 20


# The nodes' stand-in nvidia-smi reports 8 GPUs while the benchmarks run on the CPU: judge them
# with fleet-relative checks only, like the shipped cpu-gloo profile but for any GPU count.
TEST_PROFILE = """\
name: test-cluster-cpu
measures: cpu
description: "SSH test cluster: stand-in GPUs reported, benchmarks on the CPU over gloo"
pass_fraction: 0.9
fleet:
  min_drop: 0.75
  min_drop_source: "gloo on shared CPU cores: a healthy link once measured half the others"
intra: {}
"""


def write_test_profile(directory: Path) -> Path:
    """TEST_PROFILE written where a run's report step can read it."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "test-cluster-cpu.yml"
    path.write_text(TEST_PROFILE, encoding="utf-8")
    return path


def tiny_vars(results_dir: Path, **extra: Any) -> dict[str, Any]:
    return {
        "collbench_backend": "torch",
        "collbench_python": VENV_PYTHON,
        "collbench_provision": False,
        "collbench_results_dir": str(results_dir),
        "collbench_collectives": ["all_reduce"],
        "collbench_min_bytes": 1048576,
        "collbench_max_bytes": 2097152,
        "collbench_iters": 2,
        "collbench_warmup_iters": 1,
        "collbench_timeout_s": TIMEOUT_S,
        "collbench_kill_after_s": KILL_AFTER_S,
        "collbench_gpus_per_host": 1,
        "collbench_net_if": "eth0",
        "collbench_phases": ["intra", "all"],
        # The node checks have their own end-to-end tests (test_node_checks_e2e.py, which turns them
        # on); here they would add their builds' probes and a phase to every run of the other tests.
        "collbench_node_checks": False,
        # Likewise the rail checks of the pairs (test_rails_e2e.py gives its rail map): on, every run
        # would build perftest for them, and the nodes of the other tests have no rails.
        "collbench_rails": "off",
        "collbench_report_args": ["--profile", str(write_test_profile(results_dir.parent))],
        **extra,
    }


@dataclass
class BenchRun:
    rc: int
    seconds: float
    output: str
    results_dir: Path
    events: dict[str, float] = field(default_factory=dict)  # what the watcher did, seconds after start

    @property
    def run_dirs(self) -> list[Path]:
        return (
            sorted(p for p in self.results_dir.iterdir() if p.is_dir()) if self.results_dir.is_dir() else []
        )

    @property
    def run_dir(self) -> Path:
        dirs = self.run_dirs
        assert len(dirs) == 1, f"expected one run directory in {self.results_dir}, found {dirs}\n{self.tail}"
        return dirs[0]

    def manifest(self) -> dict[str, Any]:
        return json.loads((self.run_dir / "manifest.json").read_text(encoding="utf-8"))

    @property
    def tail(self) -> str:
        return "\n".join(self.output.splitlines()[-40:])


def find_process(cluster: Cluster, host: str, pattern: str) -> dict[int, str]:
    regex = re.compile(pattern)
    return {pid: cmd for pid, cmd in cluster.processes(host).items() if regex.search(cmd)}


def when_process(
    cluster: Cluster,
    host: str,
    pattern: str,
    action: Callable[[], object],
    *,
    name: str,
    events: dict[str, float],
    started: float,
    timeout: float,
) -> threading.Thread:
    """Run `action` as soon as a process matching `pattern` runs on `host` (polled in a thread)."""

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if find_process(cluster, host, pattern):
                    action()
                    events[name] = time.monotonic() - started
                    return
            except Exception as exc:  # a process gone between listing and reading: look again
                events[f"{name} error"] = time.monotonic() - started
                events[f"{name} error: {exc}"] = 0.0
            time.sleep(0.2)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def run_bench(
    cluster: Cluster,
    results_dir: Path,
    control_dir: Path,
    *,
    extra_vars: dict[str, Any] | None = None,
    watch: list[tuple[str, str, Callable[[], object], str]] | None = None,
    interrupt_when: tuple[str, str] | None = None,
    limit_s: float = 600,
    env: dict[str, str] | None = None,
    playbook_args: list[str] | None = None,
    inventory: Sequence[Path] | None = None,
) -> BenchRun:
    """ansible-playbook bench.yml against `cluster`; `watch` items are (host, pattern, action, name);
    `interrupt_when` (host, pattern) sends SIGINT to ansible-playbook once that process runs;
    `playbook_args` go on ansible-playbook's command line (`--limit`, `--tags`); `inventory` replaces
    the cluster's inventory file (several sources, each given with -i)."""
    control_dir.mkdir(parents=True, exist_ok=True)
    variables = tiny_vars(results_dir, **(extra_vars or {}))
    sources = inventory or [cluster.inventory_path]
    argv = [PLAYBOOK, "bench.yml", *(arg for source in sources for arg in ("-i", str(source)))]
    argv += ["-e", json.dumps(variables)]
    argv += playbook_args or []
    events: dict[str, float] = {}
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        env={**ansible_env(control_dir), **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    threads = [
        when_process(
            cluster, host, pattern, action, name=name, events=events, started=started, timeout=limit_s
        )
        for host, pattern, action, name in watch or []
    ]
    if interrupt_when is not None:
        host, pattern = interrupt_when
        threads.append(
            when_process(
                cluster,
                host,
                pattern,
                lambda: proc.send_signal(signal.SIGINT),
                name="SIGINT",
                events=events,
                started=started,
                timeout=limit_s,
            )
        )
    try:
        output, _ = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        raise AssertionError(f"bench.yml ran past {limit_s} s:\n{output[-4000:]}") from None
    seconds = time.monotonic() - started
    for thread in threads:
        thread.join(timeout=1)
    return BenchRun(proc.returncode, seconds, output, results_dir, events)


_shared: dict[str, Any] = {}


def shared_run(key: str, make: Callable[[], Any]) -> Any:
    """One run for every test module that asks for it (module fixtures in different files)."""
    if key not in _shared:
        _shared[key] = make()
    return _shared[key]
