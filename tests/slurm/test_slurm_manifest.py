"""From a Slurm-shaped inventory to the manifest and the report, without a Slurm cluster: the real
inventory script reads a real sinfo capture (tests/data/slurm/) through a stand-in sinfo, bench.yml
runs on the usable nodes (local connections), and the unusable ones land in the manifest's
`slurm.unusable` with Slurm's reason, read from the inventory, never from the nodes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SLURM_DATA = REPO / "tests" / "data" / "slurm"
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"
SINFO_HEAD = "--noheader --Node --format=%N|%T|%c|%m|%G|%P|%E"

pytestmark = [
    pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="ansible-playbook is not in this venv"),
    pytest.mark.long,  # real playbook runs, minutes in all
]


def sinfo_standin(directory: Path) -> Path:
    """An executable answering as the Slurm test cluster's sinfo did (tests/data/slurm/README.md):
    partition gpu, the node list node[3-5,9], and nothing at all for a partition it does not have
    (sinfo's exit code is 0 then, as tests/cluster/test_slurm_cluster.py saw). Each call is logged."""
    script = directory / "sinfo"
    calls = directory / "sinfo-calls.log"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{calls}"\n'
        'case "$*" in\n'
        f'  "{SINFO_HEAD} --partition=gpu") exec cat "{SLURM_DATA / "sinfo-gpu.txt"}" ;;\n'
        f'  "{SINFO_HEAD} --nodes=node[3-5,9]") exec cat "{SLURM_DATA / "sinfo-nodes-expression.txt"}" ;;\n'
        f'  "{SINFO_HEAD} --partition="*) exit 0 ;;\n'
        "esac\n"
        'echo "sinfo: error: this stand-in does not know: $*" >&2\n'
        "exit 1\n"
    )
    script.chmod(0o755)
    return script


def tripwire(directory: Path) -> tuple[Path, Path]:
    """A Python interpreter that records that it was started and fails: given to the unusable nodes,
    any module Ansible ran on one of them would leave a trace."""
    trace = directory / "touched"
    script = directory / "tripwire-python"
    script.write_text(f'#!/bin/sh\necho "$0 $*" >> "{trace}"\nexit 1\n')
    script.chmod(0o755)
    return script, trace


def playbook(tmp_path: Path, inventory: list[str], environ: dict[str, str]) -> subprocess.CompletedProcess:
    """bench.yml, every node failing its provision check (its Python is /bin/false): a short run that
    still opens the run directory, writes the manifest and the report."""
    settings = {
        "collbench_backend": "torch",
        "collbench_python": "/bin/false",
        "collbench_provision": False,
        "collbench_workdir": str(tmp_path / "work"),
        "collbench_phases": ["intra"],
        "collbench_results_dir": str(tmp_path / "results"),
    }
    env = {
        **os.environ,
        "PATH": f"{PLAYBOOK_BIN.parent}:{os.environ.get('PATH', '')}",
        "ANSIBLE_HOME": str(REPO / ".ansible"),
        "ANSIBLE_LOCAL_TEMP": str(REPO / ".ansible" / "tmp"),
        "ANSIBLE_NOCOLOR": "1",
        **environ,
    }
    return subprocess.run(
        [str(PLAYBOOK_BIN), "bench.yml", *inventory, "-e", json.dumps(settings)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def run_bench(tmp_path: Path, environ: dict[str, str]) -> tuple[subprocess.CompletedProcess, Path]:
    interpreter, trace = tripwire(tmp_path)
    connection = tmp_path / "connection.yml"
    # Connection settings only, as docs/slurm.md says to add them: the nodes come from the script.
    connection.write_text(
        "all:\n  vars:\n    ansible_connection: local\n"
        f"    ansible_python_interpreter: {sys.executable}\n"
        "  children:\n    slurm_unusable:\n      vars:\n"
        f"        ansible_python_interpreter: {interpreter}\n"
    )
    environ = {
        "COLLBENCH_SLURM_SINFO": str(sinfo_standin(tmp_path)),
        "COLLBENCH_SLURM_PARTITION": "",
        "COLLBENCH_SLURM_NODES": "",
        **environ,
    }
    result = playbook(tmp_path, ["-i", "inventory/slurm_inventory.py", "-i", str(connection)], environ)
    assert not trace.exists(), trace.read_text()  # no module ever started on an unusable node
    return result, trace


def the_run(tmp_path: Path) -> Path:
    (run_dir,) = (p for p in (tmp_path / "results").iterdir() if (p / "manifest.json").is_file())
    return run_dir


def hosts_ansible_touched(output: str) -> set[str]:
    """Every host a task result names (ok, changed, fatal, skipping, failed, unreachable)."""
    return set(re.findall(r"^(?:ok|changed|fatal|skipping|failed|unreachable): \[([^\]\s]+)", output, re.M))


def test_a_partitions_unusable_nodes_reach_the_manifest_and_report_untouched(tmp_path: Path) -> None:
    result, _ = run_bench(tmp_path, {"COLLBENCH_SLURM_PARTITION": "gpu"})
    output = result.stdout + result.stderr
    assert "Traceback" not in output
    run_dir = the_run(tmp_path)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert sorted(manifest["hosts"]) == ["node1", "node2", "node3", "node8"]
    assert manifest["slurm"] == {
        "unusable": [
            {
                "host": "node4",
                "state": "down",
                "reason": "bad-gpu | GPU 3 fell off the bus (Xid 79)",
                "named": False,
            },
            {"host": "node5", "state": "draining", "reason": "busbw low, recheck", "named": False},
            {"host": "node6", "state": "drained", "reason": "maintenance", "named": False},
            {"host": "node7", "state": "down*", "reason": "Not responding", "named": False},
        ]
    }
    touched = hosts_ansible_touched(result.stdout)
    assert {"node1", "node8"} <= touched and not touched & {"node4", "node5", "node6", "node7"}, touched
    results = json.loads((run_dir / "report" / "results.json").read_text())
    assert [n["host"] for n in results["not_measured"]] == ["node4", "node5", "node6", "node7"]
    assert "not measured  node6 (drained): maintenance" in result.stdout


def test_named_nodes_slurm_cannot_give_are_marked_named(tmp_path: Path) -> None:
    result, _ = run_bench(tmp_path, {"COLLBENCH_SLURM_NODES": "node[3-5,9]"})
    manifest = json.loads((the_run(tmp_path) / "manifest.json").read_text())
    assert sorted(manifest["hosts"]) == ["node3"], result.stdout[-3000:]
    unusable = {n["host"]: (n["reason"], n["named"]) for n in manifest["slurm"]["unusable"]}
    assert unusable == {
        "node4": ("bad-gpu | GPU 3 fell off the bus (Xid 79)", True),
        "node5": ("busbw low, recheck", True),
        "node9": ("not in Slurm", True),
    }
    assert "fleet warn: 3 node(s) not measured" in result.stdout


def test_a_run_without_slurm_has_no_slurm_object(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  vars:\n    ansible_connection: local\n"
        f"    ansible_python_interpreter: {sys.executable}\n"
        "  children:\n    gpu_nodes:\n      hosts:\n        n1: {}\n"
    )
    playbook(tmp_path, ["-i", str(inventory)], {})
    manifest = json.loads((the_run(tmp_path) / "manifest.json").read_text())
    assert list(manifest["hosts"]) == ["n1"] and "slurm" not in manifest
