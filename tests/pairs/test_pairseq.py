"""The pair plan's mean test: a node reading low is judged on the mean of every read of it against
the night's own pair noise, and read again with known-good partners until the mean settles."""

from __future__ import annotations

import random

import pytest

from collbench_py.pairs.planner import NOISE_FLOOR, Measurement, Planner, judge, measured_noise
from collbench_py.pairs.schedule import Pair

HEALTHY = 360.0  # GB/s


def _hosts(n: int) -> list[str]:
    return [f"node{i:03d}" for i in range(n)]


def _m(round_: int, a: str, b: str, busbw: float | None) -> Measurement:
    return Measurement(round_, (min(a, b), max(a, b)), busbw)


def _ring(hosts: list[str], cv: float) -> list[Measurement]:
    """Healthy pairs host i -- host i+1 and host i -- host i+2, spread evenly over +-2 cv: every
    host has >= 2 normal pairs (known-good), and the pair spread is about cv."""
    n = len(hosts)
    pairs = sorted({tuple(sorted((hosts[i], hosts[(i + step) % n]))) for i in range(n) for step in (1, 2)})
    return [Measurement(1, p, HEALTHY * (1 + cv * (i % 5 - 2))) for i, p in enumerate(pairs)]


SLOW = "node020"  # 7 % slower, outside the ring
PARTNERS = ("node000", "node003", "node006", "node009")


def _reads(count: int, factor: float = 0.93, partners: tuple[str, ...] = PARTNERS) -> list[Measurement]:
    return [_m(2 + i, SLOW, p, HEALTHY * factor) for i, p in enumerate(partners[:count])]


def test_a_seven_percent_slow_node_with_four_known_good_reads_is_named_with_its_witnesses() -> None:
    healthy = _ring(_hosts(12), 0.01)
    reads = _reads(4)
    j = judge(healthy + reads, noise=0.02)
    # each read alone is only suspect at this spread: the BAD NODE rule of old names nothing
    assert all(w.status == "suspect" for w in j.witnesses if SLOW in w.pair)
    assert not judge(healthy + reads).decisions
    (decision,) = j.decisions
    assert (decision.kind, decision.subject) == ("bad node", SLOW)
    assert {w.pair for w in decision.witnesses} == {m.pair for m in reads}
    assert set(decision.pairs) == {m.pair for m in reads}
    # 0.93 of 360 GB/s over a baseline median of 358 (the ring's median, the slow reads in it)
    assert "mean of 4 reads 0.935 of the fleet, noise 1.00% (the night's 2.00% / sqrt 4): z -6.5" in (
        decision.reason
    )
    assert "4 partners known-good (node000, node003, node006, node009" in decision.reason
    assert SLOW in j.explained and not j.retest


def test_the_same_node_with_one_read_stays_suspect_and_is_read_again() -> None:
    j = judge(_ring(_hosts(12), 0.01) + _reads(1), noise=0.02)
    assert not j.decisions
    (test,) = (m for m in j.means if m.subject == SLOW)
    # one read carries the night's whole noise: between the lines, and one witness of two
    assert test.verdict == "warn" and test.witnesses == ("node000",) and test.open
    assert j.retest == (SLOW,)


def test_four_low_reads_with_one_known_good_partner_are_not_enough() -> None:
    """The witness rule: >= 2 distinct known-good partners, however low the mean."""
    strangers = ("node030", "node031", "node032")  # in no other pair: not known-good
    j = judge(_ring(_hosts(12), 0.01) + _reads(4, partners=("node000", *strangers)), noise=0.02)
    assert not [d for d in j.decisions if d.kind == "bad node"]
    (test,) = (m for m in j.means if m.subject == SLOW)
    assert test.witnesses == ("node000",) and test.verdict == "fail"


def test_a_bad_link_read_among_normal_ones_is_not_a_bad_node() -> None:
    """One read 30 % low and three normal average 7.5 % low, but no one slowdown explains them."""
    healthy = _ring(_hosts(12), 0.01)
    reads = [_m(2, SLOW, "node000", HEALTHY * 0.7)] + [
        _m(3 + i, SLOW, p, HEALTHY) for i, p in enumerate(PARTNERS[1:])
    ]
    j = judge(healthy + reads, noise=0.02)
    assert not [d for d in j.decisions if d.kind == "bad node"]
    (test,) = (m for m in j.means if m.subject == SLOW)
    assert test.verdict == "fail" and not test.same_slowdown and not test.open


def test_a_link_slow_then_just_above_the_fail_line_is_named_on_its_mean() -> None:
    """A link 7-9 % slow reads slow once and suspect once: flapping by the pair rules alone, a bad
    link on the mean of both reads, its ends (normal with others) the witnesses."""
    link = ("node000", "node006")
    reads = [_m(2, *link, HEALTHY * 0.91), _m(3, *link, HEALTHY * 0.935)]
    healthy = _ring(_hosts(12), 0.01)
    assert [w.status for w in judge(healthy + reads).witnesses[-2:]] == ["slow", "suspect"]
    (before,) = judge(healthy + reads).decisions
    assert (before.kind, before.subject) == ("unresolved", "node000--node006")
    (decision,) = judge(healthy + reads, noise=0.015).decisions
    assert (decision.kind, decision.pairs) == ("bad link", (link,))
    assert "bad link node000--node006: mean of 2 reads 0.92" in decision.reason
    assert "while both ends are normal with others" in decision.reason
    # the same reads and a third 25 % low (a flapping link): no one slowdown, unresolved
    flapping = [*reads, _m(4, *link, HEALTHY * 0.75)]
    (decision,) = judge(healthy + flapping, noise=0.015).decisions
    assert (decision.kind, decision.subject) == ("unresolved", "node000--node006")


def test_the_mean_needs_the_minimum_drop() -> None:
    """Many reads 4 % low: far below the fleet in z, but under the 5 % minimum drop: never named."""
    partners = ("node000", "node003", "node006", "node009", "node001", "node004", "node007", "node010")
    reads = [_m(2 + i, SLOW, p, HEALTHY * (0.94 if i % 2 else 0.98)) for i, p in enumerate(partners)]
    j = judge(_ring(_hosts(12), 0.01) + reads, noise=0.005)
    (test,) = (m for m in j.means if m.subject == SLOW)
    assert test.z < -5 and test.verdict == "pass" and not j.decisions


def test_noise_is_measured_from_the_pairs_never_below_its_floor() -> None:
    rng = random.Random(0)
    quiet = [HEALTHY * (1 + rng.gauss(0, 0.005)) for _ in range(400)]
    noisy = [HEALTHY * (1 + rng.gauss(0, 0.02)) for _ in range(400)]
    assert measured_noise(quiet) == pytest.approx(0.005, rel=0.15)
    assert measured_noise(noisy) == pytest.approx(0.02, rel=0.15)
    assert measured_noise([HEALTHY] * 10) == NOISE_FLOOR  # identical logs: MAD 0
    assert measured_noise([HEALTHY, HEALTHY]) is None  # nothing to measure a spread from


def _night(hosts: list[str], cv: float, seed: int, slow: dict[str, float] | None = None, **kwargs) -> Planner:
    """A night on a fleet with noise `cv`; `slow`: node -> factor."""
    rng = random.Random(f"seq {seed}")
    slow = slow or {}
    planner = Planner(hosts, seed=seed, **kwargs)
    while (pairs := planner.next_round()) is not None:
        planner.record(
            {p: HEALTHY * min(slow.get(h, 1.0) for h in p) * (1 + rng.gauss(0, cv)) for p in pairs}
        )
    return planner


def test_the_planner_measures_the_nights_noise_after_the_initial_rounds() -> None:
    quiet, noisy = _night(_hosts(128), 0.005, 1), _night(_hosts(128), 0.02, 1)
    assert quiet.noise == pytest.approx(0.005, rel=0.25)
    assert noisy.noise == pytest.approx(0.02, rel=0.25)
    assert any(line.startswith("round 3: pair noise") for line in noisy.log)


@pytest.mark.parametrize("cv", [0.005, 0.01, 0.02])
def test_a_healthy_fleet_at_its_measured_noise_names_nobody(cv: float) -> None:
    for seed in range(8):
        planner = _night(_hosts(128), cv, seed)
        assert planner.decisions == (), planner.log
        assert len(planner.rounds) <= 4


@pytest.mark.parametrize("cv", [0.01, 0.02])
def test_a_seven_percent_slow_node_is_named_through_the_localisation_rounds(cv: float) -> None:
    named = 0
    for seed in range(10):
        planner = _night(_hosts(64), cv, seed, {"node017": 0.93})
        assert {d.subject for d in planner.decisions if d.kind == "bad node"} <= {"node017"}
        named += any(d.subject == "node017" for d in planner.decisions)
        assert len(planner.rounds) <= 6
    assert named >= 9


def test_a_node_that_stays_between_the_lines_stays_suspect_logged_never_failed() -> None:
    """Reads alternating 6 % and 3.5 % low: each first one suspect, their mean under the minimum
    drop but within one noise of it: read again each round with a new known-good partner, then
    left suspect."""
    hosts = _hosts(64)
    odd = "node017"
    rng = random.Random(3)
    planner = Planner(hosts, seed=3)
    reads = 0

    def value(pair: Pair) -> float:
        nonlocal reads
        if odd in pair:
            reads += 1
            return HEALTHY * (0.94 if reads % 2 else 0.965)
        return HEALTHY * (1 + rng.gauss(0, 0.02))

    while (pairs := planner.next_round()) is not None:
        planner.record({p: value(p) for p in pairs})
    assert planner.decisions == ()
    partners = [p for rnd in planner.rounds for pair in rnd if odd in pair for p in pair if p != odd]
    assert len(planner.rounds) == 6 and len(partners) == len(set(partners)) == 6  # one new a round
    assert set(partners[3:]) <= planner.judgement.known_good
    assert any(line.startswith(f"suspect {odd} left suspect: mean of 6 reads") for line in planner.log)
