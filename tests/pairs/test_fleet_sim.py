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
    quiet_added = float(row["added minutes (faults median / max; quiet)"].split("; ")[1])
    assert quiet_added == pytest.approx(fleet_sim.Costs().round_s(64) / 60, abs=0.05)


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
