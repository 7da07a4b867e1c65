"""plan.json: what the controller writes round by round is what the report reads back."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from collbench_py.rundir.planfile import (
    PlanDecision,
    PlanFileError,
    PlanRecord,
    PlanRound,
    PlanWitness,
    read_plan,
    write_plan,
)


def _record() -> PlanRecord:
    witness = PlanWitness(1, ("node1", "node5"), 0.01, "slow")
    return PlanRecord(
        schedule="adaptive",
        collective="all_reduce",
        size_bytes=1 << 28,
        k=3,
        localisation_rounds=3,
        seed="20261124T000000Z-abcdef",
        hosts=("node1", "node5"),
        groups={"node1": "leaf1"},
        rounds=(PlanRound(1, "initial", (("node1", "node5"),), {"node1--node5": 0.01}),),
        decisions=(PlanDecision("bad node", "node5", (("node1", "node5"),), (witness,), "node5: slow"),),
        log=("round 1 (initial, 1 pairs)",),
        finished=True,
    )


def _rail_record() -> PlanRecord:
    """Schema 2: rails per host, a round read rail by rail, a bad NIC with its rail witnesses."""
    nic = (
        PlanWitness(4, ("node1", "node3"), None, "slow", 2, 101.2),
        PlanWitness(4, ("node1", "node3"), None, "ok", 0, 399.1),
    )
    return replace(
        _record(),
        hosts=("node1", "node3", "node5"),
        rails={"node1": (0, 1, 2, 3), "node3": (0, 1, 2, 3)},
        rail_sample=2,
        rail_min_drop=0.15,
        rounds=(
            *_record().rounds,
            PlanRound(
                2,
                "localisation",
                (),
                {},
                (("node1", "node3"),),
                {"node1--node3": {0: 399.1, 1: None, 2: 101.2}},
            ),
        ),
        decisions=(
            *_record().decisions,
            PlanDecision(
                "bad nic",
                "node3:rail2",
                (("node1", "node3"),),
                nic,
                "node3 NIC mlx5_2 of rail 2",
                "node3",
                2,
                "mlx5_2",
            ),
        ),
    )


def test_a_plan_reads_back_as_written(tmp_path):
    write_plan(tmp_path, _record())
    assert read_plan(tmp_path) == _record()
    assert (tmp_path / "inter/pairs/plan.json").stat().st_mode & 0o777 == 0o600


def test_a_plan_with_rails_reads_back_as_written_in_schema_2(tmp_path):
    path = write_plan(tmp_path, _rail_record())
    data = json.loads(path.read_text())
    assert data["schema"] == 2
    assert data["rails"] == {"node1": [0, 1, 2, 3], "node3": [0, 1, 2, 3]}
    assert data["rounds"][1]["rails"] == {"node1--node3": {"0": 399.1, "1": None, "2": 101.2}}
    assert data["decisions"][1] | {"witnesses": None} == {
        "kind": "bad nic", "subject": "node3:rail2", "pairs": [["node1", "node3"]], "witnesses": None,
        "reason": "node3 NIC mlx5_2 of rail 2", "host": "node3", "rail": 2, "hca": "mlx5_2",
    }  # fmt: skip
    assert (
        data["decisions"][0]["witnesses"][0] | {"rail": None, "gbits": None}
        == data["decisions"][0]["witnesses"][0]
    )
    assert read_plan(tmp_path) == _rail_record()


def test_the_nights_noise_reads_back_and_an_older_plan_without_it_still_reads(tmp_path):
    path = write_plan(tmp_path, replace(_rail_record(), noise=0.0093))
    data = json.loads(path.read_text())
    assert data["schema"] == 2 and data["noise"] == 0.0093
    assert read_plan(tmp_path).noise == 0.0093
    del data["noise"]  # a plan.json written before the noise was measured
    path.write_text(json.dumps(data))
    assert read_plan(tmp_path) == _rail_record() and read_plan(tmp_path).noise is None


def test_a_schema_1_plan_reads_as_a_plan_without_rails(tmp_path):
    """A plan.json written before rail checks: no rails, default rail settings, no rail fields."""
    path = write_plan(tmp_path, _record())
    data = json.loads(path.read_text())
    data["schema"] = 1
    for key in ("rails", "rail_sample", "rail_min_drop"):
        del data[key]
    for r in data["rounds"]:
        del r["rail_pairs"], r["rails"]
    for d in data["decisions"]:
        del d["host"], d["rail"], d["hca"]
        for w in d["witnesses"]:
            del w["rail"], w["gbits"]
    path.write_text(json.dumps(data))
    assert read_plan(tmp_path) == _record()
    assert read_plan(tmp_path).rails == {}


def test_a_run_without_pairs_has_no_plan(tmp_path):
    assert read_plan(tmp_path) is None


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda d: d.update(schema=3), "schema 3"),
        (lambda d: d.update(schema=True), "schema True"),
        (lambda d: d["rounds"][0]["rails"].update({"node1--node5": {"two": 1.0}}), "rail 'two'"),
        (lambda d: d["rounds"][0]["rails"].update({"node1--node5": {"2": -5}}), "busbw -5"),
        (lambda d: d["decisions"][0].update(rail=-1), "decisions[].rail -1"),
        (lambda d: d.update(rail_min_drop=1.5), "rail_min_drop 1.5"),
        (lambda d: d.update(noise=-0.01), "noise -0.01"),
        (lambda d: d.update(noise="1 %"), "noise '1 %'"),
        (lambda d: d.update(rails={"node1": "0,1"}), "is not a list"),
        (lambda d: d.update(schedule="random"), "schedule 'random'"),
        (lambda d: d["rounds"][0]["busbw"].update({"node1--node5": -1}), "busbw -1"),
        (lambda d: d["decisions"][0].update(kind="bad rack"), "decision kind 'bad rack'"),
        (lambda d: d["decisions"][0]["witnesses"][0].update(pair=["node1"]), "pair ['node1']"),
        (lambda d: d.pop("hosts"), "hosts"),
    ],
)
def test_a_damaged_plan_is_one_clear_error(tmp_path, change, words):
    path = write_plan(tmp_path, _record())
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    with pytest.raises(PlanFileError, match=r"plan\.json: not a plan") as error:
        read_plan(tmp_path)
    assert words in str(error.value)


def test_a_plan_that_is_not_json_is_one_clear_error(tmp_path):
    (tmp_path / "inter/pairs").mkdir(parents=True)
    (tmp_path / "inter/pairs/plan.json").write_text("{")
    with pytest.raises(PlanFileError, match="not a readable plan"):
        read_plan(tmp_path)
