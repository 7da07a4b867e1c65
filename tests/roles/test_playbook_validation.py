"""Bad inputs to bench.yml: one clear message each, a non-zero exit, and no work done; and a run
where every node fails still ends with a finalised manifest, a report and a failing exit code.

Runs the real playbook against the embedded default inventory (this machine, a local
connection): preflight must stop before any node task and before a run directory exists.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"

pytestmark = [
    pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="ansible-playbook is not in this venv"),
    pytest.mark.long,  # real playbook runs, minutes in all
]


def run_bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PATH": f"{PLAYBOOK_BIN.parent}:{os.environ.get('PATH', '')}",
        "ANSIBLE_HOME": str(REPO / ".ansible"),
        "ANSIBLE_LOCAL_TEMP": str(REPO / ".ansible" / "tmp"),
        "XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME", "/tmp/xdg"),
        "ANSIBLE_NOCOLOR": "1",
    }
    return subprocess.run(
        [str(PLAYBOOK_BIN), "bench.yml", "-e", f"collbench_results_dir={tmp_path / 'results'}", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def failure_messages(output: str) -> list[str]:
    """The `msg` of every `fatal: [host]: FAILED! => {...}` line."""
    fatal = re.compile(r"^fatal: \[[^]]+\]: FAILED! => (\{.*\})$", re.MULTILINE)
    return [json.loads(match[1])["msg"] for match in fatal.finditer(output)]


def assert_rejected(result: subprocess.CompletedProcess, tmp_path: Path, *expected: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    errors = failure_messages(output)
    assert len(errors) == 1, output[-3000:]  # one failure, stated once
    for fragment in expected:
        assert fragment in errors[0], errors[0]
    assert "Traceback" not in output
    # No work done: no node was touched and no run directory was opened.
    assert not re.search(r"TASK \[(provision|facts|topology|benchmark) :", output)
    assert not (tmp_path / "results").exists()


BAD_INPUTS = {
    "unknown-backend": (
        ["-e", "collbench_backend=cuda"],
        ["collbench_backend must be one of: auto, nccl-tests, rccl-tests, torch, got: cuda"],
    ),
    "unknown-collective": (
        ["-e", json.dumps({"collbench_collectives": ["all_reduce", "allreduce"]})],
        ["collbench_collectives", "no match for: allreduce"],
    ),
    "gpu-count-not-an-integer": (
        ["-e", "collbench_gpus_per_host=eight"],
        ["collbench_gpus_per_host", "unable to convert to int"],
    ),
    "gpu-count-zero": (
        ["-e", "collbench_gpus_per_host=0"],
        ["collbench_gpus_per_host of localhost must be a whole number of 1 or more, got 0"],
    ),
    "gpu-count-negative": (
        ["-e", "collbench_gpus_per_host=-2"],
        ["collbench_gpus_per_host of localhost must be a whole number of 1 or more, got -2"],
    ),
    "min-above-max": (
        ["-e", "collbench_min_bytes=8388608", "-e", "collbench_max_bytes=1048576"],
        ["collbench_min_bytes (8388608) is larger than collbench_max_bytes (1048576)"],
    ),
    "zero-timeout": (
        ["-e", "collbench_timeout_s=0"],
        ["collbench_timeout_s must be a positive number of seconds, got 0"],
    ),
    "negative-timeout": (
        ["-e", "collbench_timeout_s=-30"],
        ["collbench_timeout_s must be a positive number of seconds, got -30"],
    ),
    "torch-cannot-run-hypercube": (
        ["-e", "collbench_backend=torch", "-e", json.dumps({"collbench_collectives": ["hypercube"]})],
        ["the torch backend does not run hypercube"],
    ),
    "srun-allocation-wait-zero": (
        ["-e", "collbench_launcher=srun", "-e", "collbench_slurm_allocation_wait_s=0"],
        ["collbench_slurm_allocation_wait_s must be 1 or more seconds, got 0"],
    ),
    "unknown-launcher": (
        ["-e", "collbench_launcher=sbatch"],
        ["collbench_launcher must be one of: auto, mpirun, torchrun, srun, got: sbatch"],
    ),
    "torchrun-cannot-start-nccl-tests": (
        ["-e", "collbench_backend=nccl-tests", "-e", "collbench_launcher=torchrun"],
        ["collbench_launcher torchrun cannot start nccl-tests"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_rejected_with_one_clear_message(case: str, tmp_path: Path) -> None:
    args, expected = BAD_INPUTS[case]
    assert_rejected(run_bench(tmp_path, *args), tmp_path, *expected)


def test_an_empty_gpu_group_is_rejected(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts: {}\n    other:\n      hosts:\n        n1:\n"
    )
    result = run_bench(tmp_path, "-i", str(inventory))
    assert_rejected(result, tmp_path, "the inventory has no host in the group 'gpu_nodes'")


def test_host_names_that_collide_once_made_safe_are_rejected(tmp_path: Path) -> None:
    # `a;b` and `a|b` would both be written as hosts/a_b/: refused, with the reason.
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n"
        "        'a;b': {ansible_connection: local}\n        'a|b': {ansible_connection: local}\n"
    )
    result = run_bench(tmp_path, "-i", str(inventory))
    assert_rejected(result, tmp_path, "host names collide once made safe for paths", "a;b", "a|b")


def test_fewer_forks_than_torchrun_hosts_are_rejected(tmp_path: Path) -> None:
    # Three hosts, two forks: the third torchrun would start only after the first two gave up.
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  vars:\n    ansible_connection: local\n  children:\n    gpu_nodes:\n      hosts:\n"
        "        n1: {}\n        n2: {}\n        n3: {}\n"
    )
    torch = ["-i", str(inventory), "-e", "collbench_backend=torch"]
    result = run_bench(tmp_path, *torch, "-f", "2")
    assert_rejected(
        result,
        tmp_path,
        "the run has 3 hosts but Ansible starts 2 at a time (forks 2)",
        "ansible-playbook -f 3, ANSIBLE_FORKS=3, or forks in ansible.cfg",
    )
    # mpirun starts the remote ranks itself: forks do not matter (the run gets past validation)
    mpirun = run_bench(
        tmp_path, "-i", str(inventory), "-e", "collbench_backend=nccl-tests", "-f", "2", "--check"
    )
    assert "starts 2 at a time" not in mpirun.stdout + mpirun.stderr
    # A round of pairs is started by the controller, collbench_round_concurrency commands at a time:
    # one per mpirun pair (1 of 3 hosts), one per host under torchrun. Fewer, and its launches would
    # run in batches, which is said, not refused; forks no longer matter to it.
    batches = "a round of pairs runs up to {} commands but the controller starts 2 at a time"
    assert batches.format(1) not in mpirun.stdout
    torch_pairs = run_bench(tmp_path, *torch, "-f", "3", "-e", "collbench_round_concurrency=2", "--check")
    assert batches.format(2) not in torch_pairs.stdout, torch_pairs.stdout[-3000:]
    five = tmp_path / "five.yml"
    five.write_text(inventory.read_text() + "        n4: {}\n        n5: {}\n")
    torch_five = run_bench(
        tmp_path,
        "-i",
        str(five),
        "-e",
        "collbench_backend=torch",
        "-f",
        "5",
        "-e",
        "collbench_round_concurrency=2",
        "--check",
    )
    assert batches.format(4) in torch_five.stdout, torch_five.stdout[-3000:]
    assert "Raise collbench_round_concurrency to at least 4" in torch_five.stdout
    # Under 2 a torchrun pair could never start on both hosts at once: refused.
    fresh = tmp_path / "fresh"
    one = run_bench(fresh, *torch, "-f", "3", "-e", "collbench_round_concurrency=1")
    assert_rejected(one, fresh, "collbench_round_concurrency must be 2 or more")


def test_check_mode_of_a_bad_input_is_rejected_too(tmp_path: Path) -> None:
    result = run_bench(tmp_path, "--check", "-e", "collbench_backend=cuda")
    assert_rejected(result, tmp_path, "collbench_backend must be one of")


def test_a_run_where_every_node_fails_is_finalised_and_says_failure(tmp_path: Path) -> None:
    """Both nodes fail the provision check (their Python has no torch): each is recorded with the
    failing task, the manifest is complete, the report is written, and the exit code says failure."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  vars:\n    ansible_connection: local\n"
        f"    ansible_python_interpreter: {sys.executable}\n"
        "  children:\n    gpu_nodes:\n      hosts:\n        n1: {}\n        n2: {}\n"
    )
    settings = {
        "collbench_backend": "torch",
        "collbench_python": "/bin/false",
        "collbench_provision": False,
        "collbench_workdir": str(tmp_path / "work"),
        "collbench_phases": ["intra"],
    }
    result = run_bench(tmp_path, "-i", str(inventory), "-e", json.dumps(settings))
    output = result.stdout + result.stderr
    # Ansible's code for a failed host (the report role's last task fails the run), as README says;
    # `collbench run` returns the report's 1 for the same run.
    assert result.returncode == 2, output[-3000:]
    (run_dir,) = (p for p in (tmp_path / "results").iterdir() if (p / "manifest.json").is_file())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    for host in ("n1", "n2"):
        entry = manifest["hosts"][host]
        assert entry["status"] == "failed", entry
        assert "Check that the node's Python has torch" in entry["reason"], entry
    results = json.loads((run_dir / "report" / "results.json").read_text())
    assert {host["host"] for host in results["hosts"]} == {"n1", "n2"}
    assert "2 of 2 nodes not measured: n1 failed, n2 failed" in failure_messages(output)[-1]
    assert "Traceback" not in output


def test_a_run_limited_by_tags_still_fails_when_a_node_left_it(tmp_path: Path) -> None:
    """`--tags provision` opens no run directory, so no manifest says who failed: the exit code must
    still say that n1 (its Python has no torch) left the run, and name it; n2 passes."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  vars:\n    ansible_connection: local\n"
        f"    ansible_python_interpreter: {sys.executable}\n"
        "  children:\n    gpu_nodes:\n      hosts:\n"
        "        n1: {collbench_python: /usr/bin/python3}\n"
        f"        n2: {{collbench_python: {sys.executable}}}\n"
    )
    settings = {
        "collbench_backend": "torch",
        "collbench_provision": False,
        "collbench_workdir": str(tmp_path / "work"),
    }
    result = run_bench(tmp_path, "-i", str(inventory), "-e", json.dumps(settings), "--tags", "provision")
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    message = failure_messages(output)[-1]  # the first: the rescued failure of n1 itself
    left = "1 of 2 nodes left the run: n1 failed (Check that the node's Python has torch"
    assert message.startswith(left), message
    assert "n2" not in message
    assert not (tmp_path / "results").exists()  # provision alone opens no run directory
    assert "Traceback" not in output
