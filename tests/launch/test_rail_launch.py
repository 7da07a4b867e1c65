"""A rail launch on the controller's side (collbench_py/launch/rail_launch.py and the filters of
filter_plugins/collbench_rails.py): the node program's config from the pair's hostvars, its
manifest entry from the program's real answer (rail_bw.py run with stand-ins), and that entry
through the manifest and the report's loader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collbench_py.launch.rail_launch import (
    backstop_s,
    pair_rail_config,
    rail_bw_config,
    rail_entry,
    rail_timeout_s,
)
from collbench_py.pairs.railmap import rails_on
from collbench_py.rundir import manifest as mf
from collbench_py.rundir.load import load_run_dir
from tests.node.test_rail_bw import Tools, run_program
from tests.rundir.test_manifest import RUN, host, launch

LAUNCH = {
    "hosts": ["gpu-a01", "gpu-a02"],
    "label": "rails-gpu-a01--gpu-a02-round-4",
    "dest": "inter/pairs/gpu-a01--gpu-a02/rails-round-4",
    "rails": [
        {"index": 0, "hca_a": "mlx5_0", "hca_b": "mlx5_0", "gpu_a": 0, "gpu_b": 0},
        {"index": 1, "hca_a": "mlx5_3", "hca_b": "mlx5_1", "gpu_a": 1, "gpu_b": 1},
    ],
}
BUILT = {"bin_dir": "/opt/perftest/bin/", "gpudirect": True, "source": "built"}
DISTRO = {"bin_dir": "/usr/bin", "gpudirect": False, "source": "distribution"}
NONE = {"bin_dir": "", "gpudirect": False, "source": "none"}


def hostvars(perftest_b: dict | None = BUILT) -> dict:
    def benchmark_host(name: str, address: str) -> dict:
        return {"name": name, "address": address, "run_root": f"/scratch/collbench/runs/r/{name}/"}

    return {
        "gpu-a01": {
            "__benchmark_host": benchmark_host("gpu-a01", "10.0.0.1") | {"rsh_args": ["-p", "2222"]},
            "collbench_perftest": BUILT,
        },
        "gpu-a02": {
            "__benchmark_host": benchmark_host("gpu-a02", "10.0.0.2"),
            "collbench_perftest": perftest_b,
        },
    }


def test_the_config_runs_on_the_first_host_against_the_seconds_address_over_mpiruns_ssh() -> None:
    config = pair_rail_config(LAUNCH, hostvars(), seconds="5", size=8388608)
    assert config == {
        "out_dir": "/scratch/collbench/runs/r/gpu-a01/rails-gpu-a01--gpu-a02-round-4",
        "peer": "10.0.0.2",
        "rsh": ["ssh", "-p", "2222"],
        "ib_write_bw": "/opt/perftest/bin/ib_write_bw",
        "peer_ib_write_bw": "/opt/perftest/bin/ib_write_bw",
        "gpudirect": True,
        "rails": LAUNCH["rails"],
        "seconds": 5,
        "size": 8388608,
        "timeout_s": 75,
        "server_ready_s": 30,
    }


def test_gpudirect_only_when_both_sides_have_it_and_no_perftest_is_an_empty_path() -> None:
    assert pair_rail_config(LAUNCH, hostvars(DISTRO), seconds=5, size=1)["gpudirect"] is False
    config = pair_rail_config(LAUNCH, hostvars(NONE), seconds=5, size=1)
    assert config["peer_ib_write_bw"] == ""
    assert pair_rail_config(LAUNCH, hostvars(None), seconds=5, size=1)["peer_ib_write_bw"] == ""


def test_the_backstop_is_beyond_everything_the_program_bounds_itself() -> None:
    config = rail_bw_config(LAUNCH, hostvars()["gpu-a01"]["__benchmark_host"], {"address": "b"},
                            perftest=BUILT, peer_perftest=BUILT, seconds=5, size=1)  # fmt: skip
    assert backstop_s(5) > config["server_ready_s"] + config["timeout_s"] + 30
    assert rail_timeout_s(20) > 20


@pytest.mark.parametrize(
    ("setting", "phases", "pairs", "on"),
    [
        ("auto", ["intra", "pairs"], None, True),
        (["mlx5_0"], ["pairs"], "adaptive", True),
        ("off", ["pairs"], None, False),
        (False, ["pairs"], None, False),
        ("auto", ["intra", "all"], None, False),
        ("auto", ["pairs"], "none", False),
    ],
)
def test_rails_are_on_only_with_a_pairs_phase_and_rails_not_off(setting, phases, pairs, on) -> None:
    assert rails_on(setting, phases, pairs) is on


def answered(tmp_path: Path, **changes) -> tuple[dict, list[str]]:
    """What the role registers from a real run of rail_bw.py with stand-ins, and the logs it left."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    tools = Tools(tmp_path)
    tools.write_bw(**changes.pop("standin", {}))
    out = tmp_path / "out"
    config = {
        "out_dir": str(out),
        "peer": "node2",
        "rsh": ["ssh"],
        "ib_write_bw": str(tools.bin / "ib_write_bw"),
        "rails": LAUNCH["rails"],
        "server_ready_s": 5,
        **changes,
    }
    done, _ = run_program(config, tools)
    result = {"rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr, "changed": True}
    return result, sorted(str(path) for path in out.glob("rail*.log")) if out.is_dir() else []


def collbench_rail_entry(
    result: dict, launch: dict, fetched: list[str], hosts: list[str], round_
) -> list[dict]:
    """The entry as the round's task makes it: the fetched logs by name."""
    names = [Path(path).name for path in fetched]
    return [rail_entry(launch, result, names, hosts=hosts, round_=None if round_ is None else int(round_))]


def test_the_entry_of_a_measured_launch(tmp_path: Path) -> None:
    result, fetched = answered(tmp_path)
    (entry,) = collbench_rail_entry(result, LAUNCH, fetched, ["gpu-a01", "gpu-a02"], "4")
    dest = LAUNCH["dest"]
    assert entry["kind"] == "rails" and entry["hosts"] == ["gpu-a01", "gpu-a02"] and entry["round"] == 4
    assert (entry["status"], entry["rc"], entry["label"], entry["dest"]) == ("ok", 0, LAUNCH["label"], dest)
    assert entry["logs"] == [f"{dest}/rail{k}{end}" for k in (0, 1) for end in (".log", ".server.log")]
    assert entry["rails"] == [{"index": k, "status": "ok", "note": None} for k in (0, 1)]
    assert entry["started_at"].endswith("Z") and entry["finished_at"] >= entry["started_at"]


def test_the_entry_of_a_launch_with_a_hung_server_is_failed_and_names_the_rail(tmp_path: Path) -> None:
    result, fetched = answered(tmp_path, standin={"hang_server_of": "mlx5_1"}, server_ready_s=1)
    (entry,) = collbench_rail_entry(result, LAUNCH, fetched, ["gpu-a01", "gpu-a02"], 4)
    assert entry["status"] == "failed"
    assert entry["rails"][1] == {
        "index": 1,
        "status": "failed",
        "note": "ib_write_bw server on node2 never said it listens and did not finish: no output",
    }


def test_the_entry_of_a_program_that_refused_its_config_says_why(tmp_path: Path) -> None:
    result, fetched = answered(tmp_path, rails=[])
    assert result["rc"] == 2 and fetched == []
    (entry,) = collbench_rail_entry(result, LAUNCH, fetched, ["gpu-a01", "gpu-a02"], 4)
    assert (entry["status"], entry["rc"], entry["logs"]) == ("failed", 2, [])
    assert entry["reason"] == "rail_bw.py: rail_bw: rails must be a non-empty list"


def test_the_entry_of_a_launch_ansible_cut_at_its_backstop_is_timeout() -> None:
    # Ansible's task timeout: the task failed, with `timedout` in its result.
    result = {"failed": True, "msg": "Timed out after 215 seconds.", "timedout": {"period": 215}}
    entry = rail_entry(LAUNCH, result, [], hosts=["a", "b"], round_=4, now="2026-11-27T10:00:00Z")
    assert (entry["status"], entry["started_at"]) == ("timeout", "2026-11-27T10:00:00Z")


def test_the_entry_in_check_mode_is_skipped() -> None:
    entry = rail_entry(LAUNCH, {"skipped": True}, [], hosts=["a", "b"], round_=4)
    assert (entry["status"], entry["rc"], entry["rails"]) == ("skipped", None, [])


def test_a_rail_entry_goes_through_the_manifest_and_the_loader_leaves_it_to_the_plan(tmp_path: Path) -> None:
    result, fetched = answered(tmp_path / "node")
    (entry,) = collbench_rail_entry(result, LAUNCH, fetched, ["gpu-a01", "gpu-a02"], 4)
    hosts = [
        host(
            inventory_hostname="gpu-a01",
            dir_name="gpu-a01",
            launches=(launch("intra", ["gpu-a01"], "ok"), entry),
        ),
        host(inventory_hostname="gpu-a02", dir_name="gpu-a02"),
    ]
    run_dir = tmp_path / "run"
    built = mf.build(RUN, hosts, status="complete")
    mf.write(run_dir, built)
    data = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    assert [x["kind"] for x in data["launches"]] == ["intra", "rails"]
    assert mf.read(run_dir) == built
    run = load_run_dir(run_dir)
    # The loader reads nccl logs: the rail launch's perftest logs are the pair plan's to read.
    assert [log.launch.kind for log in run.logs] == ["intra"]
    assert not any("launches[1]" in note for note in run.notes)


def test_a_rail_entry_without_its_logs_list_is_refused(tmp_path: Path) -> None:
    bad = {"kind": "rails", "hosts": ["gpu-a01", "gpu-a02"], "status": "ok", "logs": "rail0.log"}
    built = mf.build(RUN, [host(inventory_hostname="gpu-a01", dir_name="gpu-a01", launches=(bad,))])
    with pytest.raises(ValueError, match=r"launches\[0\]\.logs 'rail0.log'"):
        mf.write(tmp_path, built)
