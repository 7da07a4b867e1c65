"""benchmarks/fleet_sim.py's rail table at a small fleet: the real planner with rails over simulated
bad NICs and a slow leaf (the README's figures come from the same function at 1,000 and 4,000)."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "fleet_sim.py"


@pytest.fixture(scope="module")
def fleet_sim():
    spec = importlib.util.spec_from_file_location("fleet_sim", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["fleet_sim"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    yield module
    del sys.modules["fleet_sim"]


def test_the_rail_table_names_the_nics_and_the_leaf_and_blames_no_host_for_a_leaf(fleet_sim) -> None:
    row = fleet_sim.simulate_rails(64, 2, 2, 2, costs=fleet_sim.Costs(), cv=0.02)
    assert row["bad NICs named"] == "100 % (4/4)"  # max(2, 64/250) a night, 2 nights
    assert row["NIC precision"] == "100 % (4/4)"
    assert row["bad NICs named bad node"] == "0"
    assert row["slow leaves named"] == "100 % (2/2)" and row["rail precision"] == "100 % (2/2)"
    assert row["hosts blamed on leaf nights"] == "0"
    assert row["false-failure quiet nights"] == "0/2"
    assert row["rounds (quiet / faults max)"].startswith("4 / ")  # k + 1: the rail sample's round
    # On a quiet night rails add one round, the rail sample's: its cost is that round's own.
    costs = fleet_sim.Costs()
    on = fleet_sim.run_night(fleet_sim.make_fleet(64), 5000, costs, 0.02, rails=True)
    off = fleet_sim.run_night(fleet_sim.make_fleet(64), 5000, costs, 0.02)
    assert on.rounds == off.rounds + 1 and on.commands[: off.rounds] == off.commands
    quiet_added = float(row["added minutes (faults median / max; quiet)"].split("; ")[1])
    assert quiet_added == pytest.approx(costs.round_s(on.commands[-1]) / 60, abs=0.05)


def test_a_round_costs_per_command_and_runs_in_batches_beyond_the_concurrency(fleet_sim) -> None:
    costs = fleet_sim.Costs(concurrency=100)
    # A localisation round of three pairs costs what three commands do, not what the fleet does.
    assert costs.round_s(3) == pytest.approx(costs.launch_s + costs.controller_s(3))
    assert costs.controller_s(3) < costs.controller_s(500)
    # 250 commands at 100 at once: three batches of launches.
    assert costs.round_s(250) == pytest.approx(3 * costs.launch_s + costs.controller_s(250))


def test_a_bad_nic_slows_its_pairs_and_only_its_rail(fleet_sim) -> None:
    fleet = fleet_sim.make_fleet(16)
    fleet.nics[("node00003", 2)] = 0.5
    rng = random.Random(0)
    pair = ("node00003", "node00007")
    assert fleet.busbw(pair, set(), rng, 0.0) == pytest.approx(fleet_sim.HEALTHY_BUSBW * 0.5)
    assert fleet.gbits(pair, 2, set(), rng) == pytest.approx(fleet_sim.RAIL_GBITS * 0.5, rel=0.05)
    assert fleet.gbits(pair, 1, set(), rng) == pytest.approx(fleet_sim.RAIL_GBITS, rel=0.05)
    assert fleet.busbw(("node00001", "node00007"), set(), rng, 0.0) == pytest.approx(fleet_sim.HEALTHY_BUSBW)


def test_the_command_prints_the_rail_table(fleet_sim, capsys) -> None:
    assert (
        fleet_sim.main(["16", "--rails", "--fault-nights", "1", "--leaf-nights", "1", "--quiet-nights", "1"])
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("| nodes"))
    assert "bad NICs named" in header and "slow leaves named" in header
    assert lines[-1].startswith("| 16 |")


def test_the_table_names_seven_percent_slow_nodes_at_one_percent_noise(fleet_sim) -> None:
    row = fleet_sim.simulate(64, 2, 2, fleet_sim.Costs(), 0.01)
    # every slowdown planted once a night: 5 bad nodes at 64 nodes, 2 nights
    for slowdown in ("7%", "10%", "20%", "30%", "50%"):
        assert row[f"{slowdown} slow named"] == "100 % (2/2)", row
    assert row["noise CV"] == "1.0%" and row["false-failure nights"] == "0/2"


def test_the_command_prints_a_row_per_size_and_noise_level(fleet_sim, capsys) -> None:
    args = ["16", "32", "--cv", "0.005", "0.02", "--fault-nights", "1", "--quiet-nights", "1"]
    assert fleet_sim.main(args) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert "7% slow named" in rows[0]
    assert [row.split(" | ")[:2] for row in rows[1:]] == [
        ["| 16", "0.5%"], ["| 16", "2.0%"], ["| 32", "0.5%"], ["| 32", "2.0%"]
    ]  # fmt: skip


@pytest.mark.parametrize("cv", ["0", "2", "-0.01"])
def test_a_noise_level_that_is_not_a_small_fraction_is_refused(fleet_sim, capsys, cv: str) -> None:
    with pytest.raises(SystemExit) as stop:
        fleet_sim.main(["16", "--cv", cv])
    assert stop.value.code == 2
    assert "--cv is a fraction above 0 and below 0.2" in capsys.readouterr().err
