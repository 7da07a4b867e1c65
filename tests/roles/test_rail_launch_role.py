"""The rail launches of one round as the benchmark role starts them (collbench_round, one controller
task, roles/benchmark/tasks/pair_round.yml) on four local nodes: each pair's first host runs
rail_bw.py, with stand-in ssh and ib_write_bw that print real perftest captures, its logs land in
<dest>/rail<k>.log and .server.log of the run directory, and the round records one manifest entry
of kind rails per pair; the other hosts run nothing. A hung server fails its rail and its launch,
never the host or the play."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from collbench_py.parsers.perftest import parse, peak_gbits
from collbench_py.rundir import manifest as mf
from tests.node.test_rail_bw import CLIENT, SERVER, Tools
from tests.roles.local_playbook import PLAYBOOK_BIN, REPO, local_inventory
from tests.roles.local_playbook import run_playbook as run_local_playbook
from tests.rundir.test_manifest import RUN, host

HOSTS = ["node1", "node2", "node3", "node4"]
RUN_ID = "20261127T100000Z-abc123"

pytestmark = [
    pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="ansible-playbook is not in this venv"),
    pytest.mark.long,  # one playbook run on four local nodes, about a minute
]


def rail(k: int, hca_b: str | None = None) -> dict:
    return {"index": k, "hca_a": f"mlx5_{k}", "hca_b": hca_b or f"mlx5_{k}", "gpu_a": k, "gpu_b": k}


def launch(a: str, b: str, rails: list[dict]) -> dict:
    return {
        "hosts": [a, b],
        "label": f"rails-{a}--{b}-round-4",
        "dest": f"inter/pairs/{a}--{b}/rails-round-4",
        "rails": rails,
    }


PLAN = {
    "done": False,
    "round": 4,
    "rail_pairs": [
        launch("node1", "node2", [rail(0), rail(1)]),
        launch("node3", "node4", [rail(0), rail(1, "mlx5_9")]),
    ],
}


def run_playbook(tmp_path: Path, tools: Tools) -> tuple[subprocess.CompletedProcess, dict]:
    inventory = local_inventory(tmp_path / "hosts.yml", {host: {} for host in HOSTS})
    workdir = tmp_path / "work"
    (workdir / "bin").mkdir(parents=True)
    shutil.copy(REPO / "collbench_py" / "node" / "rail_bw.py", workdir / "bin" / "collbench_rail_bw.py")
    out_file = tmp_path / "recorded.json"
    extra = {
        "run_id": RUN_ID,
        "run_dir": str(tmp_path / "run"),
        "workdir": str(workdir),
        "standin_bin": str(tools.bin),
        "plan": PLAN,
        "out_file": str(out_file),
        "collbench_rails_seconds": 2,
    }
    done = run_local_playbook(
        "rail_launch.yml", inventory, extra, path=f"{tools.bin}:{PLAYBOOK_BIN.parent}:/usr/bin:/bin"
    )
    recorded = json.loads(out_file.read_text(encoding="utf-8")) if out_file.exists() else {}
    return done, recorded


def test_each_pairs_first_host_measures_its_rails_and_records_one_entry(tmp_path: Path) -> None:
    tools = Tools(tmp_path)
    tools.write_bw(hang_server_of="mlx5_9", peers=("node2", "node4"))
    done, recorded = run_playbook(tmp_path, tools)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    # No host failed or left: the recap counts no failure anywhere.
    assert not re.search(r"failed=[1-9]", output)

    # One entry per pair (its first host ran rail_bw.py), in the plan's order; no host lost.
    assert recorded["lost"] == {}
    healthy, hung = recorded["launches"]
    # The servers were started over ssh on the second hosts only.
    ssh = tools.called("ssh")
    second = [bool(re.search(r"\bnode[24]\b", line)) and not re.search(r"\bnode[13]\b", line) for line in ssh]
    assert ssh and all(second), ssh
    run = tmp_path / "run"
    dest = "inter/pairs/node1--node2/rails-round-4"
    assert healthy["kind"] == "rails" and healthy["hosts"] == ["node1", "node2"] and healthy["round"] == 4
    assert (healthy["status"], healthy["label"], healthy["dest"]) == (
        "ok",
        "rails-node1--node2-round-4",
        dest,
    )
    assert healthy["logs"] == [f"{dest}/rail{k}{end}" for k in (0, 1) for end in (".log", ".server.log")]
    for k in (0, 1):
        assert (run / dest / f"rail{k}.log").read_text(encoding="utf-8") == CLIENT
        assert (run / dest / f"rail{k}.server.log").read_text(encoding="utf-8") == SERVER
        text = (run / dest / f"rail{k}.log").read_text(encoding="utf-8")
        assert peak_gbits(parse(text, file="rail.log").records[0]) == pytest.approx(10.50)
    # ib_write_bw as the contract gives it: -D from collbench_rails_seconds, GPUDirect on GPU k.
    calls = tools.called("ib_write_bw")
    assert "-d mlx5_1 -i 1 -p 18516 -s 8388608 -D 2 -F --report_gbits --use_cuda=1 node2" in calls

    # The hung server: rail 1 of node3--node4 failed with its reason in its log; rail 0 measured.
    hung_dest = run / "inter/pairs/node3--node4/rails-round-4"
    assert hung["status"] == "failed"
    assert [r["status"] for r in hung["rails"]] == ["ok", "failed"]
    assert hung["rails"][1]["note"].startswith("ib_write_bw server on node4 never said it listens")
    assert f"collbench: {hung['rails'][1]['note']}" in (hung_dest / "rail1.log").read_text(encoding="utf-8")
    assert (hung_dest / "rail0.log").read_text(encoding="utf-8") == CLIENT

    # The entries make a manifest the readers accept.
    first_hosts = {"node1": (healthy,), "node3": (hung,)}
    states = [host(inventory_hostname=h, dir_name=h, launches=first_hosts.get(h, ())) for h in HOSTS]
    built = mf.build(RUN | {"hosts": HOSTS, "dir_names": {h: h for h in HOSTS}}, states, status="complete")
    mf.write(tmp_path / "manifest", built)
    assert [x["kind"] for x in mf.read(tmp_path / "manifest").launches] == ["rails", "rails"]
    assert {entry.status for entry in built.hosts.values()} == {"ok"}


def run_map_playbook(tmp_path: Path, host_vars: dict[str, dict]) -> subprocess.CompletedProcess:
    inventory = local_inventory(tmp_path / "hosts.yml", {h: host_vars.get(h, {}) for h in HOSTS})
    return run_local_playbook("rail_map.yml", inventory, {"run_id": RUN_ID, "run_dir": str(tmp_path / "run")})


def test_the_first_plan_call_writes_the_rail_map_once_from_each_hosts_setting(tmp_path: Path) -> None:
    topo = REPO / "tests" / "data" / "corpus" / "topo" / "hgx-h100-nv18-8nics-gpu-numa-id-spaces-sglang.txt"
    for name in HOSTS:
        folder = tmp_path / "run" / "hosts" / name
        folder.mkdir(parents=True)
        (folder / "facts.json").write_text("{}", encoding="utf-8")
        shutil.copy(topo, folder / "topo.txt")
    listed = [{"hca": "mlx5_4", "gpu": 4, "port": 1}]
    # What role perftest publishes: node2 got no perftest, so no rails (every read would fail).
    built = {"collbench_perftest": {"bin_dir": "/opt/perftest/bin", "source": "prebuilt", "gpudirect": True}}
    none = {"collbench_perftest": {"bin_dir": "", "source": "none", "note": "no RDMA device on this node"}}
    done = run_map_playbook(
        tmp_path,
        {
            "node1": built,
            "node2": none,
            "node3": {**built, "collbench_rails": False},
            "node4": {**built, "collbench_rails": listed},
        },
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    path = tmp_path / "run" / "inter" / "pairs" / "rails.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    hosts = document["hosts"]
    assert [len(hosts[h]["rails"]) for h in HOSTS] == [8, 0, 0, 1]
    assert hosts["node2"]["source"] == "no ib_write_bw on this host (no RDMA device on this node)"
    assert hosts["node1"]["rails"][5] == {"index": 5, "hca": "mlx5_5", "port": 1, "gpu": 5}
    assert hosts["node3"]["source"] == "no rails: collbench_rails is off"
    assert hosts["node4"]["rails"] == [{"index": 0, "hca": "mlx5_4", "port": 1, "gpu": 4}]
    # Written by the first call only; the plan itself went on (its plan.json).
    first, second = (
        block.split("TASK [")[0] for block in output.split("TASK [benchmark : Write the rail map]")[1:]
    )
    assert "changed: [node1 -> localhost]" in first
    assert "skipping: [node1]" in second and "changed" not in second
    assert (tmp_path / "run" / "inter" / "pairs" / "plan.json").is_file()


def test_with_every_hosts_rails_off_no_rail_map_is_written(tmp_path: Path) -> None:
    done = run_map_playbook(tmp_path, {h: {"collbench_rails": "off"} for h in HOSTS})
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert not (tmp_path / "run" / "inter" / "pairs" / "rails.json").exists()
    assert (tmp_path / "run" / "inter" / "pairs" / "plan.json").is_file()
