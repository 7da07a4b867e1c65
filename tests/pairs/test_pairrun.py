"""The pairs phase on the controller (collbench_py/pairs/controller.py): plan.json written round by round,
the planner replayed from it, each pair's busbw read from its real log in the run directory.

A "round" here writes what a real round leaves on the controller: each pair's log (a real
nccl-tests log from the corpus, scaled where a node or link is slow) at the directory the plan
named, and the manifest entry launch.yml records for it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from collbench_py.pairs.controller import (
    PairRunError,
    PairSettings,
    judged_size,
    pair_dest,
    resolve_settings,
    settings_problems,
    step,
)
from collbench_py.pairs.planner import NOISE_FLOOR, Planner
from collbench_py.pairs.schedule import round_robin_pairs
from collbench_py.rundir.planfile import read_plan
from tests.rundir_factory import H100_LOG, NCCL_FAILURE, nccl_tests_json, scale_log

HOSTS = [f"node{i:02d}" for i in range(1, 9)]
SEED = "20261124T020000Z-3f9a2c"
LOG = H100_LOG.read_text(encoding="utf-8")

Rate = Callable[[tuple[str, str]], float | None]  # a pair's speed factor; None: its launch failed


def settings(schedule: str = "adaptive", hosts: list[str] = HOSTS, **kw) -> PairSettings:
    return PairSettings(
        schedule=schedule,
        collective=kw.pop("collective", "all_reduce"),
        k=kw.pop("k", 3),
        localisation_rounds=kw.pop("localisation_rounds", 3),
        seed=kw.pop("seed", SEED),
        hosts=tuple(hosts),
        groups=kw.pop("groups", {}),
    )


def fleet(bad_nodes: tuple[str, ...] = (), bad_links: tuple[tuple[str, str], ...] = ()) -> Rate:
    def rate(pair: tuple[str, str]) -> float:
        if set(pair) & set(bad_nodes):
            return 0.5
        return 0.4 if tuple(sorted(pair)) in bad_links else 1.0

    return rate


def measured_link(avoid: str, seed: str = SEED) -> tuple[str, str]:
    """A pair the first rounds measure (a link no round measures cannot be named), away from `avoid`."""
    first = Planner(HOSTS, seed=seed).initial
    return next(p for r in first for p in r if avoid not in p)


def run_round(run_dir: Path, now, rate: Rate, launches: list[dict], text: str = LOG) -> None:
    """What a real round leaves on the controller: each pair's log and its manifest entry."""
    for launch in now.launches:
        factor = rate(launch.pair)
        folder = run_dir / launch.dest
        folder.mkdir(parents=True, exist_ok=True)
        log = f"{launch.dest}/all_reduce.log"
        if factor is not None:
            (folder / "all_reduce.log").write_text(scale_log(text, factor), encoding="utf-8")
        launches.append(
            {
                "kind": "pair",
                "hosts": list(launch.pair),
                "collective": "all_reduce",
                "log": log,
                "status": "ok" if factor is not None else "failed",
                "rc": 0 if factor is not None else 1,
                "round": now.round,
            }
        )


def run_plan(run_dir: Path, s: PairSettings, rate: Rate, limit: int = 40):
    launches: list[dict] = []
    now = step(run_dir, s, launches)
    steps = [now]
    while not now.done:
        assert len(steps) < limit
        run_round(run_dir, now, rate, launches)
        now = step(run_dir, s, launches)
        steps.append(now)
    return steps, launches


# ---------------------------------------------------------------------------------------------
# Adaptive, through plan.json


def test_adaptive_names_the_bad_node_and_the_bad_link_from_the_real_logs(tmp_path: Path) -> None:
    link = measured_link("node03")
    rate = fleet(bad_nodes=("node03",), bad_links=(link,))
    steps, _ = run_plan(tmp_path, settings(), rate)
    plan = read_plan(tmp_path)
    assert plan is not None and plan.finished
    named = sorted((d.kind, d.subject) for d in plan.decisions)
    assert named == [("bad link", "--".join(link)), ("bad node", "node03")]
    assert len(plan.rounds) <= 6
    # Every measured value is the log's busbw at the judged size, the largest one in the log.
    assert plan.size_bytes == 17179869184
    healthy = [
        v for r in plan.rounds for p, v in r.busbw.items() if "node03" not in p and p != "--".join(link)
    ]
    assert healthy and len(set(healthy)) == 1 and healthy[0] > 100
    # identical healthy logs measure no spread: the night's noise is the floor, recorded
    assert plan.noise == NOISE_FLOOR
    # The decisions name their witnesses, measured in the rounds recorded.
    node = next(d for d in plan.decisions if d.kind == "bad node")
    assert {w.round for w in node.witnesses} <= {r.number for r in plan.rounds}
    assert all(w.status == "slow" for w in node.witnesses)
    # The log says each round's pairs, what was slow and what was decided.
    assert any(line.startswith("round 1 of at most 6 (initial): 4 pair(s)") for line in plan.log)
    assert any("bad node node03" in line for line in plan.log)
    assert plan.log[-1].startswith("done after")
    assert [line for s in steps for line in s.log] == list(plan.log)


def test_the_plan_is_the_planners_own_the_same_seed_the_same_rounds(tmp_path: Path) -> None:
    """Replaying plan.json is the planner fed the same values: same rounds, same decisions."""
    rate = fleet(bad_nodes=("node02",), bad_links=(measured_link("node02"),))
    run_plan(tmp_path / "a", settings(), rate)
    plan = read_plan(tmp_path / "a")
    planner = Planner(HOSTS, seed=SEED)
    for r in plan.rounds:
        assert [tuple(p) for p in planner.next_round()] == [tuple(p) for p in r.pairs]
        planner.record({tuple(p): r.busbw[f"{p[0]}--{p[1]}"] for p in r.pairs})
    assert planner.next_round() is None
    assert [d.subject for d in planner.decisions] == [d.subject for d in plan.decisions]
    run_plan(tmp_path / "b", settings(), rate)
    assert read_plan(tmp_path / "b").rounds == plan.rounds
    other = settings(seed="20261125T020000Z-000001")
    run_plan(tmp_path / "c", other, rate)
    assert read_plan(tmp_path / "c").rounds[0].pairs != plan.rounds[0].pairs


def test_a_recorded_round_the_plan_would_not_give_is_refused(tmp_path: Path) -> None:
    launches: list[dict] = []
    now = step(tmp_path, settings(), launches)
    run_round(tmp_path, now, fleet(), launches)
    now = step(tmp_path, settings(), launches)
    path = tmp_path / "inter/pairs/plan.json"
    data = json.loads(path.read_text())
    first = data["rounds"][0]
    a, b = first["pairs"][0][1], first["pairs"][1][1]  # swap two partners: a round it never gave
    first["pairs"][0][1], first["pairs"][1][1] = b, a
    first["pairs"] = [sorted(p) for p in first["pairs"]]
    first["busbw"] = {f"{p[0]}--{p[1]}": 1.0 for p in first["pairs"]}
    path.write_text(json.dumps(data))
    with pytest.raises(PairRunError, match=r"round 1 as recorded .* is not the round the plan gives"):
        step(tmp_path, settings(), launches)


def test_a_plan_json_of_another_plan_is_refused(tmp_path: Path) -> None:
    step(tmp_path, settings(), [])
    with pytest.raises(PairRunError, match="belongs to another plan: k 3 \\(asked 2\\)"):
        step(tmp_path, settings(k=2), [])


def test_a_finished_plan_answers_done_and_writes_nothing(tmp_path: Path) -> None:
    run_plan(tmp_path, settings(), fleet())
    path = tmp_path / "inter/pairs/plan.json"
    before = path.read_bytes()
    again = step(tmp_path, settings(), [])
    assert again.done and again.log == () and path.read_bytes() == before


def test_a_repeated_pair_gets_its_own_directory(tmp_path: Path) -> None:
    """A link candidate measured again never overwrites its first log."""
    link = measured_link("none")
    name = "--".join(link)
    _, launches = run_plan(tmp_path, settings(), fleet(bad_links=(link,)))
    logs = [e["log"] for e in launches if tuple(e["hosts"]) == link]
    assert len(logs) == 2 and len(set(logs)) == 2
    assert logs[0] == f"inter/pairs/{name}/all_reduce.log"
    assert logs[1].startswith(f"inter/pairs/{name}/round-")
    first = pair_dest(("a", "b"), 2, [])
    again = pair_dest(("a", "b"), 5, [[("a", "b")]])
    assert (first.dest, first.label) == ("inter/pairs/a--b", "pair-a--b")
    assert (again.dest, again.label) == ("inter/pairs/a--b/round-5", "pair-a--b-round-5")


# ---------------------------------------------------------------------------------------------
# Reading busbw


def test_a_failed_launch_and_a_missing_or_unreadable_log_have_no_busbw(tmp_path: Path) -> None:
    launches: list[dict] = []
    now = step(tmp_path, settings(), launches)
    failed, missing, unreadable, *_ = now.launches
    run_round(tmp_path, now, fleet(), launches)
    entry = {tuple(e["hosts"]): e for e in launches}
    entry[failed.pair]["status"] = "failed"
    (tmp_path / missing.dest / "all_reduce.log").unlink()
    (tmp_path / unreadable.dest / "all_reduce.log").write_text(NCCL_FAILURE.read_text(encoding="utf-8"))
    step(tmp_path, settings(), launches)
    busbw = read_plan(tmp_path).rounds[0].busbw
    names = [f"{p.pair[0]}--{p.pair[1]}" for p in (failed, missing, unreadable)]
    assert [busbw[n] for n in names] == [None, None, None]
    assert sum(v is not None for v in busbw.values()) == len(busbw) - 3
    log = read_plan(tmp_path).log
    said = next(line for line in log if line.startswith("round 1: no busbw for"))
    assert "launch failed" in said and "no log" in said


def test_a_pair_that_was_not_started_has_no_busbw(tmp_path: Path) -> None:
    launches: list[dict] = []
    now = step(tmp_path, settings(), launches)
    run_round(tmp_path, now, fleet(), launches)
    dropped = launches.pop(0)  # a host of it left the run: no launch, no entry
    step(tmp_path, settings(), launches)
    busbw = read_plan(tmp_path).rounds[0].busbw
    assert busbw["--".join(dropped["hosts"])] is None


def test_busbw_comes_from_the_json_beside_an_unreadable_log(tmp_path: Path) -> None:
    """nccl-tests -J: the JSON's rows count even when the text log cannot be parsed."""
    launches: list[dict] = []
    now = step(tmp_path, settings(), launches)
    run_round(tmp_path, now, fleet(), launches)
    target = now.launches[0]
    folder = tmp_path / target.dest
    (folder / "all_reduce.json").write_text(nccl_tests_json(H100_LOG, factor=0.5), encoding="utf-8")
    (folder / "all_reduce.log").write_text("mpirun noise only\n", encoding="utf-8")
    step(tmp_path, settings(), launches)
    busbw = read_plan(tmp_path).rounds[0].busbw
    name = f"{target.pair[0]}--{target.pair[1]}"
    others = [v for k, v in busbw.items() if k != name]
    assert busbw[name] == pytest.approx(others[0] * 0.5, rel=0.02)


def test_the_judged_size_is_the_largest_every_measured_pair_reached() -> None:
    assert judged_size([{1: 1.0, 2: 2.0, 4: 3.0}, {1: 1.0, 2: 2.0}, None]) == 2
    assert judged_size([None, None]) is None


# ---------------------------------------------------------------------------------------------
# Round robin, the same path


def test_round_robin_runs_every_pair_once_through_the_same_plan(tmp_path: Path) -> None:
    hosts = HOSTS[:5]
    rate = fleet(bad_nodes=("node02",))
    steps, launches = run_plan(tmp_path, settings("round-robin", hosts), rate)
    plan = read_plan(tmp_path)
    assert plan.schedule == "round-robin" and plan.finished
    assert [tuple(map(tuple, r.pairs)) for r in plan.rounds] == [tuple(r) for r in round_robin_pairs(hosts)]
    assert {r.kind for r in plan.rounds} == {"round-robin"}
    assert steps[0].max_rounds == 5  # n for odd n
    assert [(d.kind, d.subject) for d in plan.decisions] == [("bad node", "node02")]
    assert all(e["log"].count("/") == 3 for e in launches)  # never a repeat directory


# ---------------------------------------------------------------------------------------------
# Settings


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"pairs": "rr"}, "collbench_pairs must be one of adaptive, round-robin, none (or unset), got 'rr'"),
        ({"k": 0}, "collbench_pairs_k must be a whole number of 1 or more, got 0"),
        ({"k": "three"}, "collbench_pairs_k must be a whole number of 1 or more, got 'three'"),
        (
            {"localisation_rounds": -1},
            "collbench_pairs_localisation_rounds must be a whole number of 0 or more",
        ),
        (
            {"collective": "all_gather"},
            "collbench_pairs_collective 'all_gather' is not one of the run's collectives",
        ),
        ({"groups": {"node01": ""}}, "collbench_topology_group of node01 must be a name (text), got ''"),
        ({"min_drop": 1.5}, "collbench_pairs_min_drop must be a fraction from 0 to below 1, got 1.5"),
        ({"min_drop": "x"}, "collbench_pairs_min_drop must be a fraction from 0 to below 1, got 'x'"),
    ],
)
def test_bad_settings_get_one_sentence_each(kw: dict, message: str) -> None:
    args = {
        "pairs": None,
        "collective": None,
        "k": 3,
        "localisation_rounds": 3,
        "groups": {},
        "min_drop": 0.05,
    } | kw
    pairs = args.pop("pairs")
    problems = settings_problems(pairs, collectives=["all_reduce", "sendrecv"], **args)
    assert len(problems) == 1 and message in problems[0], problems
    with pytest.raises(PairRunError):
        resolve_settings(pairs, collectives=["all_reduce"], seed=SEED, hosts=HOSTS, **args)


def test_settings_resolve_the_automatic_choices() -> None:
    auto = resolve_settings(
        None, collective=None, collectives=["sendrecv"], k="3", localisation_rounds=3, seed=SEED, hosts=HOSTS
    )
    assert auto.schedule == "round-robin" and auto.collective == "sendrecv" and auto.k == 3
    many = [f"n{i}" for i in range(25)]
    big = resolve_settings(
        None, collective=None, collectives=["all_reduce"], k=3, localisation_rounds=3, seed=SEED, hosts=many
    )
    assert big.schedule == "adaptive" and big.collective == "all_reduce"
    off = resolve_settings(
        "none",
        collective=None,
        collectives=["all_reduce"],
        k=3,
        localisation_rounds=3,
        seed=SEED,
        hosts=HOSTS,
    )
    assert off is None


# ---------------------------------------------------------------------------------------------
# The playbook stops on them before anything runs


def test_the_playbook_rejects_bad_pair_settings_before_any_launch(tmp_path: Path) -> None:
    from tests.roles.test_playbook_validation import assert_rejected, run_bench  # noqa: PLC0415 - the real playbook

    result = run_bench(
        tmp_path,
        "-e",
        json.dumps({"collbench_pairs": "rr", "collbench_pairs_k": 0, "collbench_pairs_collective": "reduce"}),
    )
    assert_rejected(
        result,
        tmp_path,
        "collbench_pairs must be one of adaptive, round-robin, none (or unset), got 'rr'",
        "collbench_pairs_k must be a whole number of 1 or more, got 0",
        "collbench_pairs_collective 'reduce' is not one of the run's collectives",
    )
