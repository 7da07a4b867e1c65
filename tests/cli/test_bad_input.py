"""Bad input is rejected before any work, with one clear message and no traceback.

bench.yml runs against this machine (inventory/localhost.yml or an inventory of local hosts) with
`--tags none`: only the always-tagged preflight runs, so every case takes seconds. All cases start at
once in a pool (each is mostly waiting on Ansible) and the tests read their outcomes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")
COLLBENCH = [sys.executable, "-m", "collbench_py"]

# Host names that would leave the run directory, split a path, or run a command if a shell or a
# path join ever saw them raw. MARK is replaced by a file that must never be created.
HOSTILE_NAMES = ("../escape", "a/b", "sp ace", "x;touch MARK", "$(touch MARK)", "`touch MARK`", ".hidden")


def sanitised(name: str) -> str:
    """What docs/run-directory.md promises for hosts/<name>/."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
    return "_" + safe[1:] if safe.startswith(".") else safe


@dataclass(frozen=True)
class Outcome:
    rc: int
    output: str
    results_dir: Path


def ansible_env() -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "ANSIBLE_HOME": str(REPO / ".ansible"),
        "ANSIBLE_LOCAL_TEMP": str(REPO / ".ansible" / "tmp"),
        "XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME", "/tmp/xdg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
    }


def playbook(workdir: Path, extra_vars: dict, inventory: Path | None = None, tags: str = "none") -> Outcome:
    results = workdir / "results"
    variables = {"collbench_results_dir": str(results), **extra_vars}
    argv = [PLAYBOOK, "bench.yml", "--tags", tags, "-e", json.dumps(variables)]
    if inventory is not None:
        argv += ["-i", str(inventory)]
    done = subprocess.run(
        argv,
        cwd=REPO,
        env=ansible_env(),
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return Outcome(done.returncode, done.stdout + done.stderr, results)


def local_inventory(path: Path, names: list[str], **host_vars: object) -> Path:
    hosts = {name: {"ansible_connection": "local", **host_vars} for name in names}
    inventory = {
        "all": {
            "vars": {"ansible_python_interpreter": sys.executable},
            "children": {"gpu_nodes": {"hosts": hosts}},
        }
    }
    path.write_text(yaml.safe_dump(inventory), encoding="utf-8")
    return path


# name -> (extra vars, inventory text or None for inventory/localhost.yml, the message expected)
REJECTED: dict[str, tuple[dict, str | None, str]] = {
    "unknown backend": (
        {"collbench_backend": "bogus"},
        None,
        "value of collbench_backend must be one of: auto, nccl-tests, rccl-tests, torch, got: bogus",
    ),
    "unknown launcher": (
        {"collbench_launcher": "ssh-loop"},
        None,
        "value of collbench_launcher must be one of: auto, mpirun, torchrun, srun, got: ssh-loop",
    ),
    "unknown collective": (
        {"collbench_collectives": ["all_reduce", "allreduce"]},
        None,
        "value of collbench_collectives must be one or more of",
    ),
    "size not a number": (
        {"collbench_min_bytes": "lots"},
        None,
        "argument 'collbench_min_bytes' is of type str and we were unable to convert to int",
    ),
    "empty size range": (
        {"collbench_min_bytes": 4096, "collbench_max_bytes": 1024},
        None,
        "collbench_min_bytes (4096) is larger than collbench_max_bytes (1024): the size range is empty",
    ),
    "zero size": ({"collbench_min_bytes": 0}, None, "collbench_min_bytes must be at least 1, got 0"),
    "zero timeout": (
        {"collbench_timeout_s": 0},
        None,
        "collbench_timeout_s must be a positive number of seconds, got 0",
    ),
    "negative timeout": (
        {"collbench_timeout_s": -5},
        None,
        "collbench_timeout_s must be a positive number of seconds, got -5",
    ),
    "timeout not a number": (
        {"collbench_timeout_s": "soon"},
        None,
        "argument 'collbench_timeout_s' is of type str and we were unable to convert to int",
    ),
    "no collectives": ({"collbench_collectives": []}, None, "collbench_collectives is empty"),
    "step factor 1": ({"collbench_step_factor": 1}, None, "collbench_step_factor must be 2 or more, got 1"),
    "empty inventory": (
        {},
        "all:\n  children:\n    gpu_nodes:\n      hosts: {}\n",
        "the inventory has no host in the group 'gpu_nodes'",
    ),
    "empty inventory file": ({}, "", "the inventory has no host in the group 'gpu_nodes'"),
    "malformed inventory": (
        {},
        "all:\n  children: [gpu_nodes\n    hosts: {node1: \n",
        "No inventory was parsed",
    ),
}
# Ansible stops before any play when no inventory could be read: no task runs, so none fails.
NO_TASK_RUNS = {"malformed inventory"}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    """Every rejected case, and the hostile host names run through preflight and facts, in parallel."""
    jobs = {}
    for name, (extra_vars, inventory_text, _) in REJECTED.items():
        workdir = tmp_path_factory.mktemp("bad")
        inventory = None
        if inventory_text is not None:
            inventory = workdir / "inventory.yml"
            inventory.write_text(inventory_text, encoding="utf-8")
        jobs[name] = (workdir, extra_vars, inventory, "none")
    workdir = tmp_path_factory.mktemp("hostile")
    marker = workdir / "PWNED"
    names = [n.replace("MARK", str(marker)) for n in HOSTILE_NAMES]
    # The nccl-tests backend with one rank per host needs no torch probe to pass: facts stay cheap.
    hostile_vars = {"collbench_backend": "nccl-tests", "collbench_gpus_per_host": 1}
    inventory = local_inventory(workdir / "inventory.yml", names, collbench_python="/bin/true")
    jobs["hostile names"] = (workdir, hostile_vars, inventory, "facts")
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(playbook, *job) for name, job in jobs.items()}
        return {name: future.result() for name, future in futures.items()}


def failed_tasks(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("fatal: ")]


@pytest.mark.parametrize("case", list(REJECTED))
def test_bad_input_is_rejected_before_any_work(outcomes: dict[str, Outcome], case: str) -> None:
    outcome = outcomes[case]
    expected = REJECTED[case][2]
    assert outcome.rc != 0, outcome.output[-2000:]
    assert expected in outcome.output, outcome.output[-3000:]
    assert "Traceback" not in outcome.output
    # One task failed, once: the message is said once, not once per host or per phase.
    fatal = failed_tasks(outcome.output)
    assert len(fatal) == (0 if case in NO_TASK_RUNS else 1), fatal
    # Before any work: no run directory, not even an empty results directory.
    assert not outcome.results_dir.exists(), list(outcome.results_dir.rglob("*"))


def test_malformed_inventory_says_why_it_was_not_read(outcomes: dict[str, Outcome]) -> None:
    assert "YAML parsing failed" in outcomes["malformed inventory"].output


def test_hostile_host_names_stay_inside_the_run_directory(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes["hostile names"]
    workdir = outcome.results_dir.parent
    assert outcome.rc == 0, outcome.output[-3000:]
    assert not (workdir / "PWNED").exists(), "a host name reached a shell"
    # Nothing was written beside the results directory (`../escape` would land there).
    assert sorted(p.name for p in workdir.iterdir()) == ["inventory.yml", "results"]
    (run_dir,) = outcome.results_dir.iterdir()
    names = [n.replace("MARK", str(workdir / "PWNED")) for n in HOSTILE_NAMES]
    expected_dirs = {sanitised(n) for n in names}
    assert {p.name for p in (run_dir / "hosts").iterdir()} == expected_dirs
    for path in run_dir.rglob("*"):
        assert path.resolve().is_relative_to(run_dir.resolve()), path
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert set(manifest["hosts"]) == expected_dirs
    # The manifest keeps every original name, and facts.json says whose facts they are.
    assert {h["inventory_hostname"] for h in manifest["hosts"].values()} == set(names)
    for name in names:
        facts = json.loads((run_dir / "hosts" / sanitised(name) / "facts.json").read_text(encoding="utf-8"))
        assert facts["inventory_hostname"] == name


def test_colliding_host_names_are_rejected(tmp_path: Path) -> None:
    inventory = local_inventory(tmp_path / "inventory.yml", ["a/b", "a b"])
    outcome = playbook(tmp_path, {}, inventory)
    assert outcome.rc != 0
    assert "host names collide once made safe for paths" in outcome.output, outcome.output[-2000:]
    assert "Traceback" not in outcome.output
    assert not outcome.results_dir.exists()


@pytest.mark.parametrize("target", ["/etc", "/nonexistent/run", "/dev/null"])
def test_report_on_what_is_not_a_run_directory(target: str) -> None:
    done = subprocess.run(
        [*COLLBENCH, "report", target], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert target in lines[0]
    assert "Traceback" not in done.stderr
    # Nothing was written into a directory that is not a run.
    assert not Path(target, "report").exists()
