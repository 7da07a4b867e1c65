"""The facts phase (one controller task, action_plugins/collbench_facts.py) in a real playbook on six
local nodes, with a stand-in nvidia-smi that prints a real H100 capture: every node in the run
probed and its facts.json written from what its tools printed; the backend decided once from every
node's GPUs and each node's ranks from its own; a node whose GPU tool hangs, whose Python cannot
run the probes, or whose setting cannot work leaves the run with the reason, and only it; a node
already out of the run is not probed, and a node whose MPI the provision role found is not looked
at again. (Over real SSH, with a hung nvidia-smi: tests/cluster/test_nccl_e2e.py.)"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.roles.local_playbook import PLAYBOOK_BIN, REPO, local_inventory, run_playbook

CAPTURES = REPO / "tests" / "data" / "gpu-captures"
QUERY = CAPTURES / "h100-1gpu-query-gpu-idle.csv"
VERSION = CAPTURES / "h100-1gpu-nvidia-smi-version.txt"
NODES = ("node1", "node2", "node3", "node4", "node5", "node6")

pytestmark = pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="ansible-playbook is not in this venv")


def script(path: Path, body: str) -> str:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def playbook(tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # nvidia-smi as on the H100 the captures come from; it hangs where the node says so.
    script(
        bin_dir / "nvidia-smi",
        '[ -n "$STANDIN_HANG" ] && exec sleep 60\n'
        f'case "$1" in --query-gpu=*) exec cat {QUERY};; --version) exec cat {VERSION};; esac\nexit 6',
    )
    broken = script(tmp_path / "broken-python", "echo 'python3: cannot run' >&2\nexit 1")
    hanging = script(tmp_path / "hanging-python", f'STANDIN_HANG=1 exec {sys.executable} "$@"')
    quick = {"collbench_probe_timeout_s": 2}  # each node's own: the hung probe ends sooner
    hosts = dict.fromkeys(NODES, quick) | {
        "node2": {**quick, "ansible_python_interpreter": broken},
        "node3": {**quick, "ansible_python_interpreter": hanging},
        "node4": {"collbench_probe_timeout_s": 0},
        "node6": {**quick, "collbench_gpus_per_host": 4},
    }
    inventory = local_inventory(tmp_path / "hosts.yml", hosts, localhost=True)
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    extra = {"run_dir": str(run_dir)}
    done = run_playbook("facts.yml", inventory, extra, path=f"{bin_dir}:{os.environ['PATH']}")
    return done, run_dir


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path, dict]:
    done, run_dir = playbook(tmp_path_factory.mktemp("facts"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    left = {host: json.loads((run_dir / f"left-{host}.json").read_text()) for host in NODES}
    kinds = ("standing", "ranks", "gpu", "mpi")
    return (
        done,
        run_dir,
        {
            **{kind: {host: left[host][kind] for host in NODES} for kind in kinds},
            "run": json.loads((run_dir / "left-run.json").read_text()),
        },
    )


def facts(run_dir: Path, host: str) -> dict:
    return json.loads((run_dir / "hosts" / host / "facts.json").read_text())


def test_every_node_probed_has_its_facts_json_from_what_its_tools_printed(ran) -> None:
    _, run_dir, _ = ran
    # node4's setting cannot work and node5 had left: neither is probed.
    assert sorted(p.parent.name for p in run_dir.glob("hosts/*/facts.json")) == [
        "node1",
        "node2",
        "node3",
        "node6",
    ]
    node1 = facts(run_dir, "node1")
    assert [gpu["name"] for gpu in node1["gpus"]] == ["NVIDIA H100 80GB HBM3"]
    assert (node1["gpu_vendor"], node1["driver_version"], node1["cuda_version"]) == (
        "nvidia",
        "580.159.04",
        "13.0",
    )
    assert node1["inventory_hostname"] == "node1" and node1["unanswered"] == []
    # The hung tool is named in the evidence of the node that leaves for it.
    assert facts(run_dir, "node3")["unanswered"] == ["gpu_query", "nvidia_smi_version"]
    assert facts(run_dir, "node2")["gpus"] == [] and facts(run_dir, "node2")["hostname"] == ""


def test_the_backend_is_decided_once_and_the_ranks_per_node(ran) -> None:
    _, _, left = ran
    assert left["run"] == {"backend": "nccl-tests", "launcher": "mpirun", "ranks_per_host": 1}
    assert (left["ranks"]["node1"], left["ranks"]["node6"]) == (1, 4)  # node6 pins its own
    assert left["gpu"]["node1"] == {
        "vendor": "nvidia",
        "count": 1,
        "probe": "answered",
        "tool": "nvidia-smi",
        "rc": None,
        "torch_devices": 0,
    }


def test_a_node_that_cannot_be_trusted_or_run_leaves_alone_with_its_reason(ran) -> None:
    done, _, left = ran
    standing = left["standing"]
    assert {host: why for host, why in standing.items() if why == "in the run"} == {
        "node1": "in the run",
        "node6": "in the run",
    }
    assert standing["node5"] == "an earlier phase"
    assert standing["node4"] == "Probe the node failed: collbench_probe_timeout_s must be at least 1 (is 0)"
    assert standing["node3"].startswith("Check that the GPU tools answered failed: ")
    assert "nvidia-smi" in standing["node3"] and "2 s" in standing["node3"]
    assert standing["node2"].startswith("Check that the GPU tools answered failed: ")
    assert "node2 leaves the run: Check that the GPU tools answered failed" in done.stdout


def test_one_task_for_every_node_and_the_provisioned_mpi_kept(ran) -> None:
    done, run_dir, left = ran
    task = done.stdout[done.stdout.find("TASK [facts : Probe every node") :].split("\nTASK [")[0]
    assert re.findall(r"^(changed|ok): \[(\S+)\]", task, re.MULTILINE) == [("ok", "node1")]
    # node6's MPI was found by provision for this home: kept, and its mpirun is what was probed.
    assert left["mpi"]["node6"] == {"mpirun": "/opt/provisioned/bin/mpirun", "prefix": "/opt/provisioned"}
    assert facts(run_dir, "node6")["mpi_version"] is None  # no such mpirun: rc 127, data
    # node1's was looked for here: found or none, it is published either way.
    assert left["mpi"]["node1"] != "unset"
