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


def round_robin_round(hosts: Sequence[str], index: int) -> list[Pair]:
    """Round `index` (0-based) of round_robin_pairs(hosts), built on its own in O(n).

    The full schedule holds n^2/2 pairs; a plan that wants a few of its rounds for 10,000
    hosts builds only those. After r rounds the circle method has rotated every slot but the
    first r places to the right."""
    slots: list[str | None] = list(hosts)
    if len(slots) % 2:
        slots.append(None)  # the bye
    n = len(slots)
    if n < 2:
        return []
    r = index % (n - 1)
    rest = slots[1:]
    slots = [slots[0], *rest[len(rest) - r :], *rest[: len(rest) - r]]
    pairs = [(slots[i], slots[n - 1 - i]) for i in range(n // 2)]
    return sorted((a, b) if a < b else (b, a) for a, b in pairs if a is not None and b is not None)


# The pairs phase's schedules: `adaptive` (collbench_py.pairs.planner: k rounds in which every node
# meets k partners, then each suspect re-paired with known-good nodes), `round-robin` (every pair,
# n-1 rounds), `none` (no pairs).
PAIR_SCHEDULES = ("adaptive", "round-robin", "none")

# Round robin measures every link, which no shorter plan can; it is kept while its n-1 rounds fit
# a 15-minute nightly window at ~38 s a round (30 s for an 8 GiB ring pair plus ~7-8 s of
# controller work): 23 rounds, 24 hosts. From 25 hosts on, the adaptive plan (3 rounds on a quiet
# night, at most 6) is the default.
ADAPTIVE_FROM_HOSTS = 25


def default_pair_schedule(host_count: int) -> str:
    """`round-robin` while it fits the nightly window, `adaptive` from ADAPTIVE_FROM_HOSTS hosts."""
    return "adaptive" if host_count >= ADAPTIVE_FROM_HOSTS else "round-robin"


def pair_hop_targets(host: str, hosts: Sequence[str], schedule: str | None) -> list[str]:
    """The hosts `host` heads a pair launch to, for the ssh hop check before the launches.

    Round robin knows every pair in advance: its hops are checked, one per pair. The adaptive
    plan's pairs are decided round by round, and checking every possible pair would be n²/2 hops
    (500,000 at 1,000 nodes): each host checks the next one of the sorted hosts instead (a ring),
    which proves every node's key, sshd and known_hosts in n hops. A hop the ring did not try
    is not refused; if it fails, its launch fails and the report says `launcher`.
    `schedule` None is the automatic choice (default_pair_schedule)."""
    ordered = sorted(hosts)
    schedule = schedule or default_pair_schedule(len(ordered))
    if host not in ordered or len(ordered) < 2 or schedule == "none":
        return []
    if schedule == "round-robin":
        return [b for round_ in round_robin_pairs(ordered) for a, b in round_ if a == host]
    after = ordered[(ordered.index(host) + 1) % len(ordered)]
    return [after]
