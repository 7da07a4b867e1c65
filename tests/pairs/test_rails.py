"""The rail rules (collbench_py/pairs/rails.py) on small hand-made measurement sets, and the planner
that reads bad-node candidates and a sample of clean pairs rail by rail."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from collbench_py.pairs.planner import Planner
from collbench_py.pairs.rails import RailMeasurement, judge_rails, rail_reference, rail_status

RAILS = (0, 1, 2, 3)
GOOD = frozenset({"g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8"})


def read(number: int, a: str, b: str, slow: dict[int, float | None] | None = None) -> list[RailMeasurement]:
    """One pair read on every rail: 400 Gb/s, or what `slow` says for a rail."""
    slow = slow or {}
    pair = (a, b) if a < b else (b, a)
    return [RailMeasurement(number, pair, k, slow.get(k, 400.0)) for k in RAILS]


def kinds(judgement) -> list[tuple[str, str]]:
    return [(f.kind, f.subject) for f in judgement.findings]


def test_the_reference_is_the_median_of_every_rail_read_failed_ones_out() -> None:
    ms = [RailMeasurement(1, ("a", "b"), k, v) for k, v in enumerate([400.0, 390.0, None, None, 100.0])]
    assert rail_reference(ms) == 390.0
    assert rail_reference([RailMeasurement(1, ("a", "b"), 0, None)]) is None


def test_the_reference_comes_from_reads_between_known_good_hosts_when_there_are_some() -> None:
    """Suspects' reads outnumber the sample's on a large fleet: they must not set the reference."""
    every = dict.fromkeys(RAILS, 320.0)  # a node 20 % slow on every rail
    suspects = [m for i, g in enumerate(["g1", "g2", "g3", "g4"]) for m in read(4 + i, f"x{i % 2}", g, every)]
    sample = read(4, "g5", "g6")
    j = judge_rails(suspects + sample, GOOD, ["x0", "x1"])
    assert j.reference == 400.0
    assert kinds(j) == [("bad node", "x0"), ("bad node", "x1")]
    # Without reads between known-good hosts, every read sets it.
    assert judge_rails(suspects, GOOD, ["x0", "x1"]).reference == 320.0


def test_a_rail_is_slow_below_the_fraction_of_the_reference_and_failed_is_slow() -> None:
    assert rail_status(360.0, 400.0, 0.1) == "ok"  # exactly 90 %: a port passes at 90 % of its line
    assert rail_status(359.9, 400.0, 0.1) == "slow"
    assert rail_status(None, 400.0, 0.1) == "failed"
    j = judge_rails(read(4, "x", "g1", {2: None}) + read(5, "x", "g2", {2: None}), GOOD)
    assert kinds(j) == [("bad nic", "x:rail2")]


def test_a_nic_slow_with_two_known_good_partners_is_named_with_its_port() -> None:
    ms = read(4, "node3", "g1", {2: 101.0}) + read(5, "node3", "g2", {2: 99.0}) + read(4, "g3", "g4")
    j = judge_rails(ms, GOOD, ["node3"], hcas={"node3": {2: "mlx5_2"}})
    (nic,) = j.findings
    assert (nic.kind, nic.subject, nic.host, nic.rail, nic.hca) == (
        "bad nic",
        "node3:rail2",
        "node3",
        2,
        "mlx5_2",
    )
    assert nic.reason.startswith(
        "node3 NIC mlx5_2 of rail 2: slow with g1 (101 Gb/s, round 4), g2 (99 Gb/s, round 5)"
    )
    assert "its rails 0, 1, 3 read 400 Gb/s with them" in nic.reason
    assert "reference 400 Gb/s" in nic.reason and "leaf-2 switch port" in nic.reason
    assert j.pending == () and j.if_stopped == ()


def test_one_known_good_partner_is_not_enough_for_a_nic_the_host_is_read_again() -> None:
    one = judge_rails(read(4, "node3", "g1", {2: 101.0}), GOOD, ["node3"])
    assert one.findings == () and one.pending == ("node3",)
    # A partner that is not known-good is no witness: the host waits for another.
    two = judge_rails(
        read(4, "node3", "g1", {2: 101.0}) + read(5, "node3", "bad", {2: 99.0}), GOOD, ["node3"]
    )
    assert two.findings == () and two.pending == ("node3",)


def test_a_rail_slow_in_three_host_disjoint_pairs_is_the_leaf_not_a_nic() -> None:
    ms = read(4, "g1", "g2", {1: 200.0}) + read(4, "g3", "g4", {1: 210.0}) + read(4, "g5", "g6", {1: 190.0})
    j = judge_rails(ms, GOOD)
    (leaf,) = j.findings
    assert (leaf.kind, leaf.subject, leaf.host, leaf.rail) == ("bad rail", "rail1", None, 1)
    assert "3 pairs that share no host" in leaf.reason and "leaf switch of rail 1" in leaf.reason
    assert j.pending == () and j.if_stopped == ()
    # Two disjoint pairs are not a leaf: left open, their ends read again.
    two = judge_rails(ms[:8], GOOD)
    assert two.findings == () and two.pending == ("g1", "g2", "g3", "g4")
    assert [(f.kind, f.subject) for f in two.if_stopped] == [("unresolved", "rail1")]


def test_three_slow_pairs_that_share_a_host_are_its_nic_not_the_leaf() -> None:
    ms = read(4, "x", "g1", {1: 200.0}) + read(5, "x", "g2", {1: 200.0}) + read(6, "x", "g3", {1: 200.0})
    assert kinds(judge_rails(ms, GOOD)) == [("bad nic", "x:rail1")]


def test_three_suspects_slow_on_the_same_rail_are_three_nics_not_the_leaf() -> None:
    ms = [m for i in (1, 2, 3) for r in (4, 5) for m in read(r, f"x{i}", f"g{2 * i + r - 5}", {1: 200.0})]
    assert kinds(judge_rails(ms + read(4, "g7", "g8"), GOOD)) == [
        ("bad nic", "x1:rail1"),
        ("bad nic", "x2:rail1"),
        ("bad nic", "x3:rail1"),
    ]


def test_three_slow_pairs_among_three_known_good_hosts_are_no_leaf() -> None:
    ms = read(4, "g1", "g2", {1: 200.0}) + read(5, "g1", "g3", {1: 200.0}) + read(6, "g2", "g3", {1: 200.0})
    j = judge_rails(ms + read(4, "g5", "g6"), GOOD)
    assert not [f for f in j.findings if f.kind == "bad rail"]


def test_a_nic_on_a_bad_rail_is_the_rail() -> None:
    leaf = read(4, "g1", "g2", {1: 200.0}) + read(4, "g3", "g4", {1: 200.0}) + read(4, "g5", "g6", {1: 200.0})
    x = read(5, "x", "g7", {1: 200.0}) + read(6, "x", "g8", {1: 200.0})
    assert kinds(judge_rails(leaf + x, GOOD)) == [("bad rail", "rail1")]


def test_a_candidate_slow_on_every_rail_stays_a_bad_node_and_its_pairs_name_no_rail() -> None:
    every = dict.fromkeys(RAILS, 150.0)
    # The reference is the median of every reading: the sample's healthy pairs keep it at 400.
    ms = read(4, "x", "g1", every) + read(5, "x", "g2", every) + read(4, "g3", "g4") + read(4, "g5", "g6")
    j = judge_rails(ms, GOOD, ["x"])
    assert kinds(j) == [("bad node", "x")]
    assert "slow on every rail" in j.findings[0].reason
    # Not a candidate: slow on every rail is for the node and link rules, no rail finding at all.
    assert judge_rails(ms, GOOD).findings == judge_rails(ms, GOOD).if_stopped == ()


def test_a_candidate_whose_slow_rail_changes_with_the_partner_is_unresolved() -> None:
    ms = read(4, "x", "g1", {2: 100.0}) + read(5, "x", "g2", {1: 100.0})
    j = judge_rails(ms, GOOD, ["x"])
    assert [(f.kind, f.subject, f.host) for f in j.findings] == [("unresolved", "x", "x")]
    assert "rails 2" not in j.findings[0].reason and "slow rail(s) 2" in j.findings[0].reason
    # A candidate slow on one rail with a partner and normal with another: not a NIC either.
    flapping = judge_rails(read(4, "x", "g1", {2: 100.0}) + read(5, "x", "g2"), GOOD, ["x"])
    assert [(f.kind, f.subject) for f in flapping.findings] == [("unresolved", "x:rail2")]


def test_a_candidate_with_two_slow_rails_with_every_partner_is_not_a_nic() -> None:
    ms = (
        read(4, "x", "g1", {1: 100.0, 2: 100.0})
        + read(5, "x", "g2", {1: 100.0, 2: 100.0})
        + read(4, "g3", "g4")
    )
    assert kinds(judge_rails(ms, GOOD, ["x"])) == [("unresolved", "x")]


def test_only_the_end_read_with_a_known_good_partner_is_read_again() -> None:
    """x (not known-good) slow on rail 2 with g1: x is the suspect, not g1."""
    j = judge_rails(read(4, "x", "g1", {2: 150.0}) + read(4, "g3", "g4"), GOOD)
    assert j.pending == ("x",)
    assert [(f.kind, f.subject) for f in j.if_stopped] == [("unresolved", "x:rail2")]


def test_a_candidate_out_of_rounds_stands_unless_a_rail_stood_apart() -> None:
    unread = judge_rails([], GOOD, ["x"])
    assert unread.pending == ("x",) and [(f.kind, f.subject) for f in unread.if_stopped] == [
        ("bad node", "x")
    ]
    apart = judge_rails(read(4, "x", "g1", {2: 100.0}), GOOD, ["x"])
    assert [(f.kind, f.subject) for f in apart.if_stopped] == [("unresolved", "x:rail2")]


def test_the_partner_of_a_bad_nic_is_not_blamed() -> None:
    """g1--g2 of the sample slow on rail 2: both read again; g1 slow again, g2 normal: g1's NIC."""
    ms = read(4, "g1", "g2", {2: 150.0}) + read(5, "g1", "g3", {2: 150.0}) + read(5, "g2", "g4")
    j = judge_rails(ms, GOOD)
    assert kinds(j) == [("bad nic", "g1:rail2")]
    assert j.pending == () and j.if_stopped == ()


# ---------------------------------------------------------------------------------------------
# The planner with rails


HOSTS = [f"node{i:02d}" for i in range(1, 17)]
ALL_RAILS = {h: list(RAILS) for h in HOSTS}


def night(
    nic: tuple[str, int] | None = None,
    leaf: int | None = None,
    node: str | None = None,
    rails=ALL_RAILS,
    *,
    seed: int = 3,
    link: tuple[str, str] | None = None,
    **kw,
) -> Planner:
    """A 16-host night: a pair runs at its slowest rail (one rail at half drags the pair)."""
    rng = random.Random(seed)

    def rail(pair, k) -> float:
        f = 1.0
        for h in pair:
            if (h, k) == nic or h == node:
                f = 0.5
        if k == leaf:
            f = min(f, 0.6)
        return 400 * f * (1 + rng.gauss(0, 0.01))

    def busbw(pair) -> float:
        factor = 0.6 if pair == link else 1.0
        return 48 * factor * min(rail(pair, k) for k in RAILS) / 400 * (1 + rng.gauss(0, 0.01))

    planner = Planner(kw.pop("hosts", HOSTS), seed=seed, rails=rails, **kw)
    while (pairs := planner.next_round()) is not None:
        rail_pairs = planner.rail_pairs
        assert not {h for p in pairs for h in p} & {h for p in rail_pairs for h in p}
        planner.record(
            {p: busbw(p) for p in pairs},
            rails={p: {k: rail(p, k) for k in planner.rails_of(p)} for p in rail_pairs},
        )
    return planner


def decided(planner: Planner) -> list[tuple[str, str]]:
    return [(d.kind, d.subject) for d in planner.decisions]


def test_a_quiet_night_with_rails_takes_one_round_more_and_names_nothing() -> None:
    planner = night()
    assert decided(planner) == []
    assert len(planner.rounds) == 4 and planner.rounds[3] == []
    assert len(planner.rail_rounds[3]) == 4  # the sample: rail_sample disjoint pairs
    hosts = [h for p in planner.rail_rounds[3] for h in p]
    assert len(set(hosts)) == 8


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_a_bad_nic_is_named_in_place_of_a_bad_node(seed: int) -> None:
    planner = night(nic=("node05", 2), seed=seed, hcas={"node05": {2: "mlx5_2"}})
    assert decided(planner) == [("bad nic", "node05:rail2")]
    (nic,) = planner.decisions
    assert (nic.host, nic.rail, nic.hca) == ("node05", 2, "mlx5_2")
    assert nic.pairs and all("node05" in p for p in nic.pairs)  # its slow pairs, explained by the NIC
    rail_ws = [w for w in nic.witnesses if w.rail is not None]
    assert {w.pair for w in rail_ws if w.status == "slow"} and all(w.busbw is None for w in rail_ws)
    assert len({h for w in rail_ws for h in w.pair} - {"node05"}) >= 2
    assert len(planner.rounds) <= 6
    # Never named a bad node on the way: it waited for its rails.
    assert not any(line.startswith("bad node node05") for line in planner.log)


def test_a_bad_node_slow_on_every_rail_is_still_a_bad_node_with_rail_witnesses() -> None:
    planner = night(node="node05")
    assert decided(planner) == [("bad node", "node05")]
    assert any(w.rail is not None for w in planner.decisions[0].witnesses)
    assert "slow on every rail" in planner.decisions[0].reason


def test_a_slow_leaf_is_a_bad_rail_and_blames_no_host() -> None:
    planner = night(leaf=1)
    assert decided(planner) == [("bad rail", "rail1")]
    assert planner.decisions[0].host is None


def test_a_sample_too_small_to_name_a_leaf_reads_its_pairs_again_until_it_can() -> None:
    planner = night(leaf=1, rail_sample=2)
    assert decided(planner) == [("bad rail", "rail1")]


def test_no_rails_is_the_plan_of_old() -> None:
    """rails None or {} give the rounds and decisions of a planner that has never heard of rails."""
    plain = night(node="node05", rails=None)
    empty = night(node="node05", rails={})
    assert plain.rounds == empty.rounds and len(plain.rounds) == 3
    assert decided(plain) == decided(empty) == [("bad node", "node05")]
    assert all(r == [] for r in plain.rail_rounds)
    # Without rails a bad NIC is what the pairs see: a bad node.
    assert decided(night(nic=("node05", 2), rails=None)) == [("bad node", "node05")]


def test_a_host_paired_for_its_pair_is_not_read_for_its_rails_in_the_same_round() -> None:
    """node01 waits for its rails and is the only clean partner for a suspect: it takes the pair."""
    planner = Planner(HOSTS, seed=3, rails=ALL_RAILS)
    for _ in range(3):
        planner.record(dict.fromkeys(planner.next_round(), 48.0))
    met = {h for m in planner.measurements for h in m.pair if "node01" in m.pair} - {"node01"}
    suspect = next(h for h in HOSTS if h not in met and h != "node01")
    planner.judgement = replace(
        planner.judgement, suspects=(suspect,), clean=frozenset({"node01"}), rail_pending=("node01",)
    )
    assert planner.next_round() == [tuple(sorted((suspect, "node01")))]
    assert "node01" not in {h for p in planner.rail_pairs for h in p}
    assert not {suspect, "node01"} & {h for p in planner.rail_pairs for h in p}


def test_a_round_must_bring_every_rail_pair_it_planned() -> None:
    planner = Planner(HOSTS, seed=3, rails=ALL_RAILS)
    for _ in range(3):
        planner.record(dict.fromkeys(planner.next_round(), 48.0))
    assert planner.next_round() == [] and planner.rail_pairs
    with pytest.raises(ValueError, match="rail readings must cover its rail pairs exactly"):
        planner.record({})
    pair = planner.rail_pairs[0]
    with pytest.raises(ValueError, match="not rails of both hosts"):
        planner.record({}, rails={p: {7: 1.0} if p == pair else {} for p in planner.rail_pairs})


def test_round_robin_reads_rails_after_its_rounds_and_never_pairs_again() -> None:
    hosts = HOSTS[:8]
    rails = {h: list(RAILS) for h in hosts}
    quiet = night(rails=rails, hosts=hosts, round_robin=True)
    assert decided(quiet) == [] and len(quiet.rounds) == 7 + 1 and quiet.rounds[7] == []
    nic = night(nic=("node05", 2), rails=rails, hosts=hosts, round_robin=True)
    assert decided(nic) == [("bad nic", "node05:rail2")]
    assert all(r == [] for r in nic.rounds[7:]) and len(nic.rounds) <= 7 + 3
    # A link slow once is not measured again: a round robin never pairs again, rails or not.
    link = night(link=("node02", "node06"), rails=rails, hosts=hosts, round_robin=True)
    assert decided(link) == [("unresolved", "node02--node06")]
    assert all(r == [] for r in link.rounds[7:])
    # Without rails it is the round robin of old: 7 rounds, the bad NIC a bad node.
    old = night(nic=("node05", 2), rails=None, hosts=hosts, round_robin=True)
    assert len(old.rounds) == 7 and decided(old) == [("bad node", "node05")]
