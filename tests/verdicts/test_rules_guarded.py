"""Rules that decide a verdict without being anyone's headline, each held by a test that fails when
the rule is changed: the floor under the fleet's spread, the minimum drop used without a profile,
the planner's known-good node, and exit code 137 as a timeout wherever a launch's end is recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

from collbench_py.launch.steps import launch_entries
from collbench_py.pairs.planner import Measurement
from collbench_py.pairs.planner import judge as judge_pairs
from collbench_py.rundir.load import load_run_dir
from collbench_py.slurm.job import step_outcome
from collbench_py.verdicts import Options, Report, judge
from collbench_py.verdicts.stats import robust_scale
from tests.launch.test_launch_run import NOW, answer, head_result, record_of, torch_pair
from tests.rundir_factory import RunSpec, build_run_dir, make_facts
from tests.slurm.test_slurm_steps import captured

HOSTS = [f"node{i}" for i in range(1, 7)]


def fleet(
    tmp_path: Path, scale: dict[str, float], options: Options | None = None, gpu: str | None = None
) -> Report:
    """Six hosts with the same real H100 log, some scaled down; `gpu` names a GPU no profile knows."""
    facts = {h: make_facts(h, gpu_name=gpu) for h in HOSTS} if gpu else {}
    run = build_run_dir(tmp_path, RunSpec(hosts=HOSTS, facts=facts, host_scale=scale))
    return judge(load_run_dir(run), options=options)


def fleet_check(report: Report, host: str) -> tuple[str, str]:
    (check,) = (c for c in report.hosts[host].checks if c.name == "intra/all_reduce/fleet")
    return check.status, check.reason


# ---- the MAD floor: the spread never counts as less than 1 % of the median -----------------------------


def test_the_spread_of_identical_hosts_is_floored_at_one_percent_of_the_median() -> None:
    assert Options().mad_floor == 0.01
    assert robust_scale([469.0] * 6, 469.0, Options().mad_floor) == pytest.approx(4.69)
    # A real spread above the floor is used as it is (1.4826 x MAD).
    values = [100.0, 96.0, 104.0, 92.0, 108.0]
    assert robust_scale(values, 100.0, 0.01) == pytest.approx(1.4826 * 4.0)


def test_identical_hosts_judge_a_slower_one_against_the_floor(tmp_path: Path) -> None:
    """Five identical hosts (MAD 0): a host 3 % down is z -3 and one 6 % down z -6, so with every
    drop counted (minimum drop 0) the first warns and the second fails. Without the floor both
    would be infinitely far out; with a wider one the second would only warn."""
    report = fleet(tmp_path, {"node5": 0.97, "node6": 0.94}, Options(min_drop=0.0))
    status5, reason5 = fleet_check(report, "node5")
    status6, reason6 = fleet_check(report, "node6")
    assert (status5, status6) == ("warn", "fail"), (reason5, reason6)
    assert "z -3.0" in reason5 and "robust z -6.0" in reason6


# ---- the minimum drop without a profile: 5 % -------------------------------------------------------


def test_without_a_profile_a_host_must_be_five_percent_down_to_be_judged(tmp_path: Path) -> None:
    report = fleet(tmp_path, {"node5": 0.955, "node6": 0.94}, gpu="NVIDIA L40S")
    assert report.profile is None and report.min_drop == 0.05
    # 4.5 % down is z -4.5, past the suspect line, but under the minimum drop: it passes.
    assert fleet_check(report, "node5")[0] == "pass"
    assert fleet_check(report, "node6")[0] == "fail"  # 6 % down
    assert report.hosts["node5"].verdict == "passed"
    assert report.hosts["node6"].verdict == "failed"


# ---- the planner's known-good node: two normal pairs or more --------------------------------------------


def test_a_known_good_node_has_two_normal_pairs_or_more() -> None:
    healthy = 360.0
    # node0 -- node1 -- ... -- node7 in a line, plus two chords: node0 has one normal pair,
    # node1 to node6 two, node7 three.
    line = [(f"node{i}", f"node{i + 1}") for i in range(7)]
    pairs = [*line, ("node2", "node7"), ("node4", "node7")]
    measured = [Measurement(1, tuple(sorted(p)), healthy) for p in pairs]
    normal: dict[str, int] = {}
    for a, b in pairs:
        normal[a] = normal.get(a, 0) + 1
        normal[b] = normal.get(b, 0) + 1
    judgement = judge_pairs(measured)
    assert normal["node0"] == 1 and normal["node1"] == 2 and normal["node7"] == 3
    assert judgement.known_good == frozenset(h for h, n in normal.items() if n >= 2)
    assert "node0" not in judgement.known_good and "node1" in judgement.known_good


# ---- exit code 137 (SIGKILL after the bound's grace) is a timeout, in both places it is recorded -------


@pytest.mark.parametrize("rc", [124, 137])
def test_a_launch_killed_by_its_bound_is_a_timeout(rc: int) -> None:
    record = record_of(torch_pair())
    killed = head_result(record, [answer("pair-node1--node2", rc, ended="10:00:40.900")], [])
    entries = launch_entries(killed, [killed], NOW)
    assert entries and {(e["status"], e["rc"]) for e in entries} == {("timeout", rc)}
    failed = head_result(record, [answer("pair-node1--node2", 1)], [])
    assert {e["status"] for e in launch_entries(failed, [failed], NOW)} == {"failed"}


@pytest.mark.parametrize("rc", [124, 137])
def test_a_slurm_step_ended_by_the_bound_is_a_timeout(rc: int) -> None:
    outcome = step_outcome(captured("srun-v-cancelled-by-bound.txt"), rc)
    assert (outcome.state, outcome.status) == ("CANCELLED", "timeout")
    assert step_outcome(captured("srun-v-cancelled-by-bound.txt"), 1).status == "failed"
