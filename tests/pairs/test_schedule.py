from __future__ import annotations

import itertools

import pytest

from collbench_py.pairs.schedule import pair_hop_targets, round_robin_pairs


def _hosts(n: int) -> list[str]:
    return [f"node{i:02d}" for i in range(n)]


@pytest.mark.parametrize("n", range(1, 21))
def test_every_pair_once_disjoint_rounds(n: int) -> None:
    hosts = _hosts(n)
    rounds = round_robin_pairs(hosts)

    pairs = [pair for rnd in rounds for pair in rnd]
    assert sorted(pairs) == sorted(itertools.combinations(hosts, 2))  # each unordered pair exactly once
    for rnd in rounds:
        members = [h for pair in rnd for h in pair]
        assert len(members) == len(set(members)), f"a host is in two pairs of one round: {rnd}"
        assert all(a < b for a, b in rnd)
        assert rnd == sorted(rnd)

    if n < 2:
        assert rounds == []
    elif n % 2 == 0:
        assert len(rounds) == n - 1
        assert all(len(rnd) == n // 2 for rnd in rounds)
    else:
        assert len(rounds) == n
        assert all(len(rnd) == (n - 1) // 2 for rnd in rounds)
        # each host sits out exactly one round
        sitting_out = [set(hosts) - {h for pair in rnd for h in pair} for rnd in rounds]
        assert all(len(s) == 1 for s in sitting_out)
        assert sorted(h for s in sitting_out for h in s) == sorted(hosts)


def test_deterministic_and_independent_of_name_order_within_pairs() -> None:
    hosts = ["zeta", "alpha", "mid", "beta"]
    assert round_robin_pairs(hosts) == round_robin_pairs(list(hosts))
    assert all(a < b for rnd in round_robin_pairs(hosts) for a, b in rnd)


def test_eight_hosts_seven_rounds_of_four() -> None:
    rounds = round_robin_pairs(_hosts(8))
    assert [len(r) for r in rounds] == [4] * 7


def test_duplicate_hosts_rejected() -> None:
    with pytest.raises(ValueError, match="duplicate host names: b"):
        round_robin_pairs(["a", "b", "b"])


def test_hop_check_follows_round_robin_pairs_and_a_ring_for_adaptive():
    hosts = [f"n{i:02d}" for i in range(6)]
    # Round robin: exactly the pairs each host heads, every pair once over the hosts.
    heads = {h: pair_hop_targets(h, hosts, "round-robin") for h in hosts}
    hops = {(a, b) for a, targets in heads.items() for b in targets}
    assert hops == {pair for round_ in round_robin_pairs(hosts) for pair in round_}
    # Adaptive: one hop per host, a ring over the sorted hosts, whatever order they come in.
    ring = {h: pair_hop_targets(h, list(reversed(hosts)), "adaptive") for h in hosts}
    assert ring == {h: [hosts[(i + 1) % 6]] for i, h in enumerate(hosts)}
    # Automatic: round robin below the adaptive size, the ring from it on (n hops, not n²/2).
    big = [f"g{i:04d}" for i in range(1000)]
    assert sum(len(pair_hop_targets(h, big, None)) for h in big[:10]) == 10
    assert len(pair_hop_targets("n00", hosts, None)) == len(heads["n00"])
    assert pair_hop_targets("n00", hosts, "none") == []
    assert pair_hop_targets("n00", ["n00"], "adaptive") == []
