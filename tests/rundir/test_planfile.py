"""plan.json: what the controller writes round by round is what the report reads back."""

from __future__ import annotations

import json

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


def test_a_plan_reads_back_as_written(tmp_path):
    write_plan(tmp_path, _record())
    assert read_plan(tmp_path) == _record()
    assert (tmp_path / "inter/pairs/plan.json").stat().st_mode & 0o777 == 0o600


def test_a_run_without_pairs_has_no_plan(tmp_path):
    assert read_plan(tmp_path) is None


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda d: d.update(schema=2), "schema 2"),
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
