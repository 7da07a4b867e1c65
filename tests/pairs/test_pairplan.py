"""The adaptive pair plan: initial rounds, the rules judging pairs, whole nights on simulated fleets."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable

import pytest

from collbench_py.pairs.planner import (
    Measurement,
    Planner,
    fleet_baseline,
    initial_rounds,
    judge,
    pair_status,
)
from collbench_py.pairs.schedule import (
    ADAPTIVE_FROM_HOSTS,
    Pair,
    default_pair_schedule,
    round_robin_pairs,
    round_robin_round,
)
from collbench_py.verdicts.model import Options

HEALTHY = 360.0  # GB/s
CV = 0.02  # run-to-run noise of a real fleet


def _hosts(n: int) -> list[str]:
    return [f"node{i:03d}" for i in range(n)]


def _partners(rounds: list[list[Pair]]) -> dict[str, list[str]]:
    partners: dict[str, list[str]] = defaultdict(list)
    for rnd in rounds:
        for a, b in rnd:
            partners[a].append(b)
            partners[b].append(a)
    return partners


# --- initial rounds ---------------------------------------------------------------------------


@pytest.mark.parametrize("k", [2, 3, 4])
@pytest.mark.parametrize("n", [5, 6, 7, 8, 9, 10, 16, 17, 33, 64, 101])
def test_initial_rounds_are_disjoint_matchings_with_k_distinct_partners(n: int, k: int) -> None:
    hosts = _hosts(n)
    rounds = initial_rounds(hosts, k=k, seed=7)
    assert len(rounds) == k
    sitters = []
    for rnd in rounds:
        members = [h for pair in rnd for h in pair]
        assert len(members) == len(set(members)), f"a host is in two pairs of one round: {rnd}"
        assert all(a < b for a, b in rnd)
        sitters.extend(set(hosts) - set(members))
        assert len(set(hosts) - set(members)) == n % 2  # a perfect matching, one out when n is odd
    assert len(sitters) == len(set(sitters)), "the same host sat out twice"
    partners = _partners(rounds)
    for h in hosts:
        assert len(partners[h]) == len(set(partners[h])), f"{h} met a partner twice: {partners[h]}"
        assert len(partners[h]) == k - (h in sitters)


def test_fleets_of_k_plus_one_or_fewer_get_the_round_robin() -> None:
    assert initial_rounds(_hosts(4), k=3) == round_robin_pairs(_hosts(4))
    assert initial_rounds(_hosts(3), k=3) == round_robin_pairs(_hosts(3))
    assert initial_rounds(["a"], k=3) == []


@pytest.mark.parametrize(("n", "leaf"), [(64, 8), (96, 32), (40, 4)])
def test_partners_are_mixed_across_groups(n: int, leaf: int) -> None:
    hosts = _hosts(n)
    groups = {h: f"leaf{i // leaf}" for i, h in enumerate(hosts)}
    for seed in range(5):
        partners = _partners(initial_rounds(hosts, k=3, groups=groups, seed=seed))
        for h in hosts:
            same = [p for p in partners[h] if groups[p] == groups[h]]
            cross = [p for p in partners[h] if groups[p] != groups[h]]
            assert same, f"{h} has no partner in its own group: {partners[h]}"
            assert cross, f"{h} has no partner in another group: {partners[h]}"


def test_same_seed_same_rounds_whatever_the_host_order() -> None:
    hosts = _hosts(50)
    groups = {h: f"rack{i % 5}" for i, h in enumerate(hosts)}
    first = initial_rounds(hosts, k=3, groups=groups, seed=11)
    assert initial_rounds(list(reversed(hosts)), k=3, groups=groups, seed=11) == first
    assert initial_rounds(hosts, k=3, groups=groups, seed=12) != first


def test_duplicate_hosts_and_bad_k_rejected() -> None:
    with pytest.raises(ValueError, match="duplicate host names: b"):
        initial_rounds(["a", "b", "b", "c", "d", "e"])
    with pytest.raises(ValueError, match="k must be at least 1"):
        initial_rounds(_hosts(10), k=0)


@pytest.mark.parametrize("n", range(1, 16))
def test_one_round_robin_round_is_the_same_as_in_the_full_schedule(n: int) -> None:
    full = round_robin_pairs(_hosts(n))
    assert [round_robin_round(_hosts(n), r) for r in range(len(full))] == full


def test_default_schedule_switches_where_round_robin_no_longer_fits_the_night() -> None:
    assert default_pair_schedule(ADAPTIVE_FROM_HOSTS - 1) == "round-robin"
    assert default_pair_schedule(ADAPTIVE_FROM_HOSTS) == "adaptive"
    # 23 rounds of ~38 s fit 15 minutes; one more host's round robin does not
    assert (ADAPTIVE_FROM_HOSTS - 2) * 38 <= 15 * 60 < (ADAPTIVE_FROM_HOSTS - 1) * 38


# --- the rules, on hand-made measurements -------------------------------------------------------


def _ring(hosts: list[str], value: float = HEALTHY) -> list[Measurement]:
    """Healthy pairs host i -- host i+1 and host i -- host i+2: everyone has >= 2 normal pairs."""
    n = len(hosts)
    pairs = {tuple(sorted((hosts[i], hosts[(i + step) % n]))) for i in range(n) for step in (1, 2)}
    # -2 to +2 %: a robust spread of 1.5 % (MAD 1 %), so the suspect band is 5-7.4 % below
    return [Measurement(1, p, value * (1 + 0.01 * (i % 5 - 2))) for i, p in enumerate(sorted(pairs))]


def _m(round_: int, a: str, b: str, busbw: float | None) -> Measurement:
    return Measurement(round_, (min(a, b), max(a, b)), busbw)


def test_slow_pair_is_the_reports_fail_line() -> None:
    baseline = fleet_baseline([HEALTHY * (1 + CV * x) for x in (-1, -0.5, 0, 0.5, 1)], Options())
    assert baseline is not None
    assert pair_status(HEALTHY * 0.8, baseline, Options(), 0.05) == "slow"
    assert pair_status(HEALTHY * 0.97, baseline, Options(), 0.05) == "ok"
    assert pair_status(None, baseline, Options(), 0.05) == "failed"
    # 4 % below is z < -2 here but under the 5 % minimum drop: not even suspect
    assert pair_status(HEALTHY * 0.96, baseline, Options(), 0.05) == "ok"


def test_bad_node_needs_three_slow_partners_two_of_them_known_good() -> None:
    hosts = _hosts(12)
    healthy = _ring(hosts[:11])
    bad = "node011"
    slow = [_m(2, bad, p, HEALTHY * 0.7) for p in ("node000", "node004", "node008")]
    j = judge(healthy + slow)
    (decision,) = j.decisions
    assert (decision.kind, decision.subject) == ("bad node", bad)
    assert {w.pair for w in decision.witnesses} == {m.pair for m in slow}
    assert all(w.status == "slow" for w in decision.witnesses)
    assert "slow with 3 of its 3 partners" in decision.reason
    assert "3 of the slow partners known-good (node000, node004, node008" in decision.reason
    assert "252 GB/s" in decision.reason  # the numbers it rests on

    # a fourth pair just above the fail line (suspect) does not clear the node; a normal one does
    low = _m(3, bad, "node002", HEALTHY * 0.94)
    (decision,) = judge([*healthy, *slow, low]).decisions
    assert decision.subject == bad and "below the baseline with the other 1" in decision.reason
    assert not [
        d for d in judge([*healthy, *slow, _m(3, bad, "node002", HEALTHY)]).decisions if d.kind == "bad node"
    ]

    # two slow partners are not enough: the node is a suspect to localise
    j = judge(healthy + slow[:2])
    assert not j.decisions
    assert j.suspects == (bad,)

    # three slow partners, but only one of them known-good: one witness is not enough
    strangers = [_m(2, bad, "node020", HEALTHY * 0.7), _m(2, bad, "node021", HEALTHY * 0.7)]
    j = judge([*healthy, slow[0], *strangers])
    assert not [d for d in j.decisions if d.kind == "bad node"]
    assert bad in j.suspects


def test_bad_link_needs_two_slow_measurements_and_both_ends_known_good() -> None:
    hosts = _hosts(12)
    healthy = _ring(hosts)
    link = ("node000", "node006")
    once = [*healthy, _m(2, *link, HEALTHY * 0.7)]
    j = judge(once)
    assert not j.decisions
    assert j.remeasure == (link,)  # a one-off is measured again before anything is named

    j = judge([*once, _m(4, *link, HEALTHY * 0.72)])
    (decision,) = j.decisions
    assert (decision.kind, decision.subject, decision.pairs) == ("bad link", "node000--node006", (link,))
    assert "both ends are normal with others" in decision.reason
    assert sum(w.status == "slow" for w in decision.witnesses) == 2
    assert sum(w.status == "ok" for w in decision.witnesses) >= 4  # >= 2 normal pairs on each side

    # one end not known-good: that end is localised, nothing is named
    j = judge([m for m in once if "node006" not in m.pair or m.pair == link])
    assert not j.decisions
    assert j.suspects == ("node006",)


def test_flapping_link_is_unresolved() -> None:
    healthy = _ring(_hosts(12))
    link = ("node000", "node006")
    j = judge([*healthy, _m(2, *link, HEALTHY * 0.7), _m(4, *link, HEALTHY * 1.0)])
    (decision,) = j.decisions
    assert (decision.kind, decision.subject) == ("unresolved", "node000--node006")
    assert "slow in 1 of 2 measurements" in decision.reason


def test_node_slow_with_two_known_good_partners_and_normal_with_others_is_unresolved() -> None:
    healthy = _ring(_hosts(12))
    slow = [_m(2, "node000", "node004", HEALTHY * 0.7), _m(3, "node000", "node008", HEALTHY * 0.7)]
    j = judge(healthy + slow)
    (decision,) = j.decisions
    assert (decision.kind, decision.subject) == ("unresolved", "node000")
    assert "intermittent node, or more than one bad link" in decision.reason
    assert not j.remeasure and not j.open_pairs


# --- whole nights on a simulated fleet ----------------------------------------------------------

Fleet = Callable[[Pair, int], float | None]  # (pair, round) -> busbw


def _night(hosts: list[str], fleet: Fleet, seed: int = 0, **kwargs) -> Planner:
    """Run a night: the planner plans, the simulated fleet measures, with 2 % noise."""
    noise = random.Random(seed)
    planner = Planner(hosts, seed=seed, **kwargs)
    while (pairs := planner.next_round()) is not None:
        results = {}
        for pair in pairs:
            value = fleet(pair, len(planner.rounds) + 1)
            results[pair] = None if value is None else value * (1 + noise.gauss(0, CV))
        planner.record(results)
    return planner


def _slow_node(node: str, factor: float) -> Fleet:
    return lambda pair, _round: HEALTHY * (factor if node in pair else 1.0)


def test_a_planted_bad_node_is_named_with_its_witnesses() -> None:
    hosts = _hosts(64)
    for seed in range(5):
        planner = _night(hosts, _slow_node("node017", 0.8), seed=seed)
        (decision,) = planner.decisions
        assert (decision.kind, decision.subject) == ("bad node", "node017")
        assert len(decision.witnesses) >= 3
        assert all("node017" in w.pair and w.status in ("slow", "suspect") for w in decision.witnesses)
        assert sum(w.status == "slow" for w in decision.witnesses) >= 3
        assert any(line.startswith("bad node node017: slow with") for line in planner.log)
        assert len(planner.rounds) <= 3 + 3


def test_a_node_whose_launches_all_fail_is_a_bad_node() -> None:
    planner = _night(_hosts(32), lambda pair, _r: None if "node005" in pair else HEALTHY, seed=3)
    (decision,) = planner.decisions
    assert (decision.kind, decision.subject) == ("bad node", "node005")
    assert "failed" in decision.reason


def test_a_planted_bad_link_is_named_as_a_link_not_its_nodes() -> None:
    hosts = _hosts(64)
    for seed in range(5):
        link = Planner(hosts, seed=seed).initial[1][7]  # a pair the second round measures
        planner = _night(
            hosts, lambda pair, _r, link=link: HEALTHY * (0.7 if pair == link else 1.0), seed=seed
        )
        (decision,) = planner.decisions
        assert (decision.kind, decision.pairs) == ("bad link", (link,))
        assert len(planner.rounds) == 4  # three initial rounds, one to measure the link again


def test_a_flapping_link_slow_then_normal_ends_unresolved() -> None:
    hosts = _hosts(64)
    link = Planner(hosts, seed=2).initial[0][3]

    def flapping(pair: Pair, round_: int) -> float:
        return HEALTHY * (0.7 if pair == link and round_ == 1 else 1.0)

    (decision,) = _night(hosts, flapping, seed=2).decisions
    assert (decision.kind, decision.pairs) == ("unresolved", (link,))
    assert "slow in 1 of 2 measurements" in decision.reason


@pytest.mark.parametrize("n", [64, 256])
def test_a_quiet_fleet_with_two_percent_noise_flags_nothing(n: int) -> None:
    for seed in range(10):
        planner = _night(_hosts(n), lambda _pair, _r: HEALTHY, seed=seed)
        assert planner.decisions == (), planner.log
        # nothing to localise but, now and then, a node whose reads average near the line: read
        # once more, then cleared
        assert len(planner.rounds) <= 4
        localised = [line for line in planner.log if line.startswith("round 4 planned")]
        assert all("suspect" in line and "mean of 3 reads" in line for line in localised)


def test_same_seed_same_night() -> None:
    hosts = _hosts(40)
    first = _night(hosts, _slow_node("node009", 0.7), seed=4)
    again = _night(hosts, _slow_node("node009", 0.7), seed=4)
    assert first.rounds == again.rounds and first.log == again.log


def _never_settles(pair: Pair, round_: int) -> float:
    """node003 is slow with its first partner and 10 % low with the rest: suspect, neither slow nor
    normal, under WIDE_SUSPECT_BAND, so it never settles."""
    if "node003" not in pair:
        return HEALTHY
    return HEALTHY * (0.7 if round_ == 1 else 0.9)


# The fail line at z -8 leaves a suspect band of 5-16 % below the median at a 2 % spread: room for
# a pair 10 % low plus or minus the noise.
WIDE_SUSPECT_BAND = Options(z_fail=-8.0)


@pytest.mark.parametrize("bound", [1, 3])
def test_localisation_is_bounded_and_what_is_left_is_unresolved(bound: int) -> None:
    planner = _night(_hosts(64), _never_settles, seed=1, options=WIDE_SUSPECT_BAND, localisation_rounds=bound)
    assert len(planner.rounds) == 3 + bound
    assert planner.decisions
    for decision in planner.decisions:  # the pair slow in round 1, and any other that noise made slow
        assert decision.kind == "unresolved" and "node003" in decision.subject
        assert "not explained by the rounds measured" in decision.reason
    # each localisation round gave the suspect a new known-good partner it had not met
    partners = [
        p for rnd in planner.rounds for pair in rnd if "node003" in pair for p in pair if p != "node003"
    ]
    assert len(partners) == len(set(partners)) == 3 + bound
    assert planner.next_round() is None


def test_a_suspect_is_paired_only_with_known_good_nodes_it_has_not_met() -> None:
    for seed in range(10):  # 24 hosts: 2 of the 22 possible witnesses were met: a repeat would show
        planner = _night(_hosts(24), _never_settles, seed=seed, options=WIDE_SUSPECT_BAND)
        partners = [
            p for rnd in planner.rounds for pair in rnd if "node003" in pair for p in pair if p != "node003"
        ]
        assert len(partners) == len(set(partners)) == 6, planner.log
        assert set(partners[3:]) <= planner.judgement.known_good


def test_results_must_match_the_planned_round() -> None:
    planner = Planner(_hosts(10), seed=0)
    with pytest.raises(ValueError, match="call next_round"):
        planner.record({})
    pairs = planner.next_round()
    assert pairs
    with pytest.raises(ValueError, match=r"missing .*not planned node098--node099"):
        planner.record({("node098", "node099"): HEALTHY})
    planner.record({(b, a): HEALTHY for a, b in pairs})  # either order of a pair's hosts
    assert len(planner.rounds) == 1


# The busbw (GB/s) an 8-host test-cluster run measured (tests/cluster/test_pairs_adaptive.py: seed
# adaptive-e2e-1, node6 shaped as a bad node, node1--node3 as a bad link, min_drop 0.5). Both faults
# sit in round 1, so 5 of the 14 pairs measured by round 5 are slow.
MEASURED_8_HOSTS = [
    {
        ("node1", "node3"): 0.0005105,
        ("node2", "node7"): 0.002389,
        ("node4", "node5"): 0.0025135,
        ("node6", "node8"): 0.0005295,
    },
    {
        ("node1", "node4"): 0.0025225,
        ("node2", "node5"): 0.0028195,
        ("node3", "node6"): 0.000527,
        ("node7", "node8"): 0.0034395,
    },
    {
        ("node1", "node8"): 0.003056,
        ("node2", "node4"): 0.0026185,
        ("node3", "node5"): 0.0024005,
        ("node6", "node7"): 0.000573,
    },
    {("node3", "node4"): 0.003732},
    {("node1", "node3"): 0.000553},
]


def test_a_named_bad_node_stays_out_of_the_baseline_that_judges_the_others() -> None:
    """With node6's slow pairs in the baseline its spread grew until neither node6 nor the bad link
    looked slow any more, and the plan ended with no decision."""
    planner = Planner([f"node{i}" for i in range(1, 9)], seed="adaptive-e2e-1", min_drop=0.5)
    for measured in MEASURED_8_HOSTS:
        pairs = planner.next_round()
        assert pairs is not None and {tuple(p) for p in pairs} == set(measured)
        planner.record({pair: measured[tuple(pair)] for pair in pairs})
    assert planner.next_round() is None
    assert sorted((d.kind, d.subject) for d in planner.decisions) == [
        ("bad link", "node1--node3"),
        ("bad node", "node6"),
    ]
