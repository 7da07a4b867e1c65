"""The action plugins that write the run directory (action_plugins/), in a playbook over real SSH.

collbench_collect lists a node's launch directory once and copies what is there; collbench_save
writes text on the controller. Both leave directories 0700 and files 0600; a name that is not
there, or that would leave the directory, is not fetched; saving the same text again is no change;
check mode writes nothing.
"""

from __future__ import annotations

import json
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.vcluster import Cluster, ansible_env

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "tests" / "playbooks" / "collect_and_save.yml"
CORPUS = REPO / "tests" / "data" / "corpus" / "nccl-tests"
LOGS = {  # real logs, as rank 0 of a launch leaves them on its host
    "all_reduce.log": CORPUS / "hgx-h100-2node-16rank-mpi-warnings-interleaved-16GiB.txt",
    "all_gather.log": CORPUS / "dgx2-v100-12gpu-nccl-tests-v1-error-column-5-collectives.txt",
}


def playbook(cluster: Cluster, out_dir: Path, launch_dir: str, *args: str) -> subprocess.CompletedProcess:
    variables = json.dumps({"out_dir": str(out_dir), "launch_dir": launch_dir})
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(cluster.inventory_path)]
    return subprocess.run(
        [*argv, str(PLAYBOOK), "-e", variables, *args],
        cwd=REPO,
        env=ansible_env(),
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def changed(output: str) -> dict[str, int]:
    return {host: int(n) for host, n in re.findall(r"^(\S+)\s+:.*\bchanged=(\d+)", output, re.MULTILINE)}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.cluster
def test_collect_brings_back_what_is_there_and_save_writes_it_privately(
    cluster: Cluster, tmp_path: Path
) -> None:
    launch = "collbench-plugin-test/launch"
    node1 = cluster.home("node1") / launch
    node1.mkdir(parents=True, exist_ok=True)
    for name, source in LOGS.items():
        (node1 / name).write_bytes(source.read_bytes())
    (node1.parent / "outside.log").write_text("not the launch's\n")
    (cluster.home("node2") / launch).mkdir(parents=True, exist_ok=True)  # ran, wrote nothing
    # node3 and node4 never got as far as creating the directory.
    out = tmp_path / "run" / "inter" / "all"

    first = playbook(cluster, out, f"~/{launch}")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    assert json.loads((out / "node1" / "collected.json").read_text()) == ["all_gather.log", "all_reduce.log"]
    for name, source in LOGS.items():
        assert (out / "node1" / name).read_bytes() == source.read_bytes()
    for host in ("node2", "node3", "node4"):
        assert json.loads((out / host / "collected.json").read_text()) == []
    written = list((tmp_path / "run").rglob("*"))
    assert {mode(p) for p in written if p.is_dir()} == {0o700}
    assert {mode(p) for p in written if p.is_file()} == {0o600}
    assert sorted(p.name for p in (out / "node1").iterdir()) == [
        "all_gather.log",
        "all_reduce.log",
        "collected.json",
    ]

    # Again: the logs are brought back again (changed), the same text is not saved again.
    again = playbook(cluster, out, f"~/{launch}")
    assert again.returncode == 0, again.stdout[-3000:]
    assert changed(again.stdout) == {"node1": 1, "node2": 0, "node3": 0, "node4": 0}, again.stdout[-2000:]

    # Check mode writes nothing.
    dry = tmp_path / "dry"
    checked = playbook(cluster, dry, f"~/{launch}", "--check")
    assert checked.returncode == 0, checked.stdout[-3000:]
    assert not dry.exists()
