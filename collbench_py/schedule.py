"""Round-robin schedule of host pairs: every pair once, each round's pairs disjoint.

A pairwise sweep runs each round's pairs at the same time, so no host is in two
benchmarks at once and the whole sweep takes n-1 rounds (n even) or n (n odd).
"""

from __future__ import annotations

from collections.abc import Sequence

Pair = tuple[str, str]


def round_robin_pairs(hosts: Sequence[str]) -> list[list[Pair]]:
    """Rounds of disjoint pairs covering every unordered pair of `hosts` exactly once.

    Circle method: the first slot stays fixed, the others rotate by one each round.
    With an odd count a bye slot is added and whoever meets it sits the round out.
    Each pair is sorted (a < b) and each round is sorted, so the schedule depends only
    on the input order.
    """
    if len(set(hosts)) != len(hosts):
        duplicates = sorted({h for h in hosts if hosts.count(h) > 1})
        raise ValueError(f"duplicate host names: {', '.join(duplicates)}")
    slots: list[str | None] = list(hosts)
    if len(slots) % 2:
        slots.append(None)  # the bye
    n = len(slots)
    rounds: list[list[Pair]] = []
    for _ in range(n - 1):
        pairs: list[Pair] = []
        for i in range(n // 2):
            a, b = slots[i], slots[n - 1 - i]
            if a is not None and b is not None:
                pairs.append((a, b) if a < b else (b, a))
        rounds.append(sorted(pairs))
        slots = [slots[0], slots[-1], *slots[1:-1]]
    return [r for r in rounds if r]
