"""The pairs phase on the controller with rail checks: plan.json schema 2 round by round, the rail
launches' directories, and each rail's Gb/s read from an ib_write_bw client log in the run directory.

A rail log here is a real ib_write_bw client capture (tests/data/corpus/perftest, DGX Spark CX-7,
111.71 Gb/s average) with its result row's two bandwidth figures scaled to the rail's speed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from collbench_py.pairs.controller import (
    PairRunError,
    PairSettings,
    rail_dest,
    rail_gbits,
    read_rail_map,
    resolve_settings,
    step,
)
from collbench_py.rundir.planfile import read_plan
from tests.pairs.test_pairrun import HOSTS, SEED, run_round

CAPTURE = (
    Path(__file__).resolve().parents[1]
    / "data/corpus/perftest/dgx-spark-cx7-write-bw-4qp-rdma-cm-and-write-lat.txt"
)
# The capture holds an ib_write_bw run, then an ib_write_lat run: the client log of a rail is the first.
CLIENT = CAPTURE.read_text(encoding="utf-8").split("$ ib_write_lat")[0]
HEALTHY = 111.71
RAILS = (0, 1, 2, 3)


def rail_log(factor: float) -> str:
    """The capture with its result row (BW peak, BW average) at `factor` of what it measured."""

    def scaled(match: re.Match) -> str:
        peak, average = (float(match.group(i)) * factor for i in (2, 3))
        return f"{match.group(1)}{peak:.2f}             {average:.2f}"

    return re.sub(r"(?m)^(\s*65536\s+20000\s+)([\d.]+)\s+([\d.]+)", scaled, CLIENT)


def write_rail_map(run_dir: Path, hosts=HOSTS, rails=RAILS) -> None:
    entries = {
        h: {
            "rails": [{"index": k, "hca": f"mlx5_{k}", "port": 1, "gpu": k} for k in rails],
            "source": "inventory collbench_rails",
        }
        for h in hosts
    }
    path = run_dir / "inter/pairs/rails.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": 1, "hosts": entries}))


def settings(run_dir: Path, schedule: str = "adaptive", **kw) -> PairSettings:
    found = read_rail_map(run_dir)
    s = resolve_settings(
        schedule,
        collective="all_reduce",
        collectives=["all_reduce"],
        k=3,
        localisation_rounds=3,
        seed=SEED,
        hosts=HOSTS,
        rails={h: [r.index for r in rs] for h, rs in found.items()},
        hcas={h: {r.index: r.hca for r in rs} for h, rs in found.items()},
        **kw,
    )
    assert s is not None
    return s


def run_rails(
    run_dir: Path, now, nic: tuple[str, int] | None, missing: set[tuple[str, int]] = frozenset()
) -> None:
    """What a rail launch leaves on the controller: rail<k>.log per rail (a slow NIC at half)."""
    for launch in now.rail_launches:
        folder = run_dir / launch.dest
        folder.mkdir(parents=True, exist_ok=True)
        for k in launch.rails:
            if any((h, k) in missing for h in launch.pair):
                continue
            factor = 0.5 if nic and nic[1] == k and nic[0] in launch.pair else 1.0
            (folder / f"rail{k}.log").write_text(rail_log(factor), encoding="utf-8")


def run_plan(run_dir: Path, nic: tuple[str, int] | None = None, missing=frozenset(), **kw):
    s = settings(run_dir, **kw)

    def rate(pair):
        return 0.5 if nic and nic[0] in pair else 1.0

    launches: list[dict] = []
    now = step(run_dir, s, launches)
    steps = [now]
    while not now.done:
        assert len(steps) < 20
        run_round(run_dir, now, rate, launches)
        run_rails(run_dir, now, nic, missing)
        now = step(run_dir, s, launches)
        steps.append(now)
    return steps


def test_a_bad_nic_is_named_from_the_rail_logs(tmp_path: Path) -> None:
    write_rail_map(tmp_path)
    steps = run_plan(tmp_path, nic=("node03", 2))
    plan = read_plan(tmp_path)
    assert plan is not None and plan.finished
    assert [(d.kind, d.subject, d.host, d.rail, d.hca) for d in plan.decisions] == [
        ("bad nic", "node03:rail2", "node03", 2, "mlx5_2")
    ]
    assert plan.decisions[0].reason.startswith("node03 NIC mlx5_2 of rail 2: slow with ")
    assert plan.rails == dict.fromkeys(HOSTS, RAILS)
    # Every rail read is the log's figure: the capture's, or half of it on node03's rail 2.
    read = [
        (r.number, pair, k, v)
        for r in plan.rounds
        for pair, values in r.rails.items()
        for k, v in values.items()
    ]
    assert read and sorted({v for *_, v in read}) == [
        55.85,
        HEALTHY,
    ]  # the average column, 111.71 x 0.5 printed to 2 places
    slow = {(pair, k) for _, pair, k, v in read if v < HEALTHY}
    assert slow and all("node03" in pair and k == 2 for pair, k in slow)
    # The launches: the rail pairs' directories and labels, rails both hosts have, hosts apart
    # from the round's nccl pairs.
    railed = [s for s in steps if s.rail_launches]
    assert railed and railed[0].round == 4
    for s in railed:
        for launch in s.rail_launches:
            name = f"{launch.pair[0]}--{launch.pair[1]}"
            assert launch.dest == f"inter/pairs/{name}/rails-round-{s.round}"
            assert launch.label == f"rails-{name}-round-{s.round}"
            assert launch.rails == RAILS
        assert not {h for la in s.launches for h in la.pair} & {h for la in s.rail_launches for h in la.pair}
    assert any("rail by rail: " in line for line in plan.log)
    assert plan.log[-1].endswith("1 bad NIC(s), 0 bad rail(s), 0 unresolved")


def test_round_robin_with_rails_reads_them_after_its_rounds(tmp_path: Path) -> None:
    write_rail_map(tmp_path)
    steps = run_plan(tmp_path, nic=("node03", 2), schedule="round-robin")
    plan = read_plan(tmp_path)
    assert plan is not None and plan.schedule == "round-robin"
    assert [(d.kind, d.subject) for d in plan.decisions] == [("bad nic", "node03:rail2")]
    assert [r.kind for r in plan.rounds[:7]] == ["round-robin"] * 7
    assert all(r.kind == "localisation" and r.pairs == () and r.rail_pairs for r in plan.rounds[7:])
    assert all(s.launches == () for s in steps[7:])


def test_a_quiet_night_with_rails_takes_one_round_more(tmp_path: Path) -> None:
    write_rail_map(tmp_path)
    steps = run_plan(tmp_path, rail_sample=2)
    plan = read_plan(tmp_path)
    assert plan is not None and plan.decisions == ()
    assert len(plan.rounds) == 4 and plan.rounds[3].pairs == () and len(plan.rounds[3].rail_pairs) == 2
    assert steps[3].launches == () and len(steps[3].rail_launches) == 2
    assert plan.rail_sample == 2


def test_a_missing_rail_log_is_a_failed_rail(tmp_path: Path) -> None:
    """node03's rail 1 client wrote nothing: a failed rail counts as slow, the rest as measured."""
    write_rail_map(tmp_path)
    run_plan(tmp_path, nic=("node03", 2), missing={("node03", 1)})
    plan = read_plan(tmp_path)
    assert plan is not None
    values = [
        v for r in plan.rounds for p, vs in r.rails.items() if "node03" in p for k, v in vs.items() if k == 1
    ]
    assert values and all(v is None for v in values)
    assert any("rail 1: no log (rail1.log)" in line for line in plan.log)
    assert [(d.kind, d.subject) for d in plan.decisions] == [("unresolved", "node03")]


def test_without_a_rail_map_nothing_is_read_rail_by_rail(tmp_path: Path) -> None:
    steps = run_plan(tmp_path, nic=("node03", 2))
    plan = read_plan(tmp_path)
    assert plan is not None and plan.rails == {}
    assert [(d.kind, d.subject) for d in plan.decisions] == [("bad node", "node03")]
    assert all(s.rail_launches == () for s in steps)


def test_a_rail_log_that_holds_no_result_has_no_gbits(tmp_path: Path) -> None:
    (tmp_path / "rail0.log").write_text(rail_log(1.0))
    assert rail_gbits(tmp_path / "rail0.log") == (HEALTHY, None)
    (tmp_path / "rail1.log").write_text("ssh: connect to host node2 port 22: Connection refused\n")
    value, why = rail_gbits(tmp_path / "rail1.log")
    assert value is None and "rail1.log" in why
    no_device = (CAPTURE.parent / "no-rdma-device-in-container-unable-to-find-device.txt").read_text()
    (tmp_path / "rail2.log").write_text(no_device)
    assert rail_gbits(tmp_path / "rail2.log")[0] is None


def test_the_rail_map_and_rail_settings_are_checked(tmp_path: Path) -> None:
    assert read_rail_map(tmp_path) == {}
    (tmp_path / "inter/pairs").mkdir(parents=True)
    (tmp_path / "inter/pairs/rails.json").write_text(
        '{"schema": 1, "hosts": {"node1": {"rails": [{"hca": 1}]}}}'
    )
    with pytest.raises(PairRunError, match=r"rails\.json: not a rail map"):
        read_rail_map(tmp_path)
    with pytest.raises(PairRunError) as error:
        resolve_settings(
            "adaptive", collective=None, collectives=["all_reduce"], k=3, localisation_rounds=3, seed="s",
            hosts=HOSTS, rail_sample=-1, rail_min_drop=1.0,
        )  # fmt: skip
    assert "collbench_rails_sample must be a whole number of 0 or more, got -1" in str(error.value)
    assert "collbench_rails_min_drop must be a fraction from 0 to below 1, got 1.0" in str(error.value)


def test_a_plan_json_with_other_rail_settings_is_refused(tmp_path: Path) -> None:
    write_rail_map(tmp_path)
    step(tmp_path, settings(tmp_path), [])
    with pytest.raises(PairRunError, match=r"another plan: rail_sample 4 \(asked 2\)"):
        step(tmp_path, settings(tmp_path, rail_sample=2), [])


def test_rail_dest_names_a_directory_per_round() -> None:
    assert rail_dest(("node1", "node3"), 5, (0, 2)).dest == "inter/pairs/node1--node3/rails-round-5"


# ---------------------------------------------------------------------------------------------
# The action, in a real playbook

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"


@pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="ansible-playbook is not in this venv")
def test_the_action_returns_the_rail_pairs_with_inventory_names_and_each_rails_nics(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write_rail_map(run_dir)
    s = settings(run_dir, rail_sample=2)
    launches: list[dict] = []
    now = step(run_dir, s, launches)
    for _ in range(3):  # the initial rounds, healthy; the action plans round 4: the rail sample
        run_round(run_dir, now, lambda pair: 1.0, launches)
        if now.round < 3:
            now = step(run_dir, s, launches)
    inventory = {f"inv{h[-2:]}": h for h in HOSTS}
    (tmp_path / "hosts.yml").write_text(
        "all:\n  vars:\n    ansible_connection: local\n"
        f"    ansible_python_interpreter: {sys.executable}\n"
        "  children:\n    gpu_nodes:\n      hosts:\n" + "".join(f"        {h}: {{}}\n" for h in inventory)
    )
    extra = {
        "run_dir": str(run_dir),
        "seed": SEED,
        "dir_names": inventory,
        "launches": launches,
        "rails_sample": 2,
        "out_file": str(tmp_path / "answer.json"),
    }
    (tmp_path / "extra.json").write_text(json.dumps(extra))
    env = {
        **os.environ,
        "ANSIBLE_HOME": str(REPO / ".ansible"),
        "ANSIBLE_LOCAL_TEMP": str(REPO / ".ansible/tmp"),
    }
    argv = [str(PLAYBOOK_BIN), "-i", str(tmp_path / "hosts.yml"), "tests/playbooks/pair_plan_rails.yml"]
    done = subprocess.run(
        [*argv, "-e", f"@{tmp_path / 'extra.json'}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    answer = json.loads((tmp_path / "answer.json").read_text())
    assert (answer["round"], answer["kind"], answer["pairs"]) == (4, "localisation", [])
    assert len(answer["rail_pairs"]) == 2
    for launch in answer["rail_pairs"]:
        a, b = (inventory[h] for h in launch["hosts"])
        assert launch["dest"] == f"inter/pairs/{a}--{b}/rails-round-4"
        assert launch["label"] == f"rails-{a}--{b}-round-4"
        assert launch["rails"] == [
            {
                "index": k,
                "hca_a": f"mlx5_{k}",
                "hca_b": f"mlx5_{k}",
                "gpu_a": k,
                "gpu_b": k,
                "port_a": 1,
                "port_b": 1,
            }
            for k in RAILS
        ]
    plan = read_plan(run_dir)
    assert plan is not None and plan.rail_sample == 2 and len(plan.rounds[3].rail_pairs) == 2
