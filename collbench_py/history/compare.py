"""What changed between two runs: per host and link and collective, busbw and verdict, and facts.

Each subject is compared at its reference sizes, the largest sizes from `reference_min_bytes`
up that both runs measured (else the largest both measured). A change is worse when busbw
dropped by `min_drop` or more, or the verdict got worse.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from collbench_py.history.query import Snapshot

# Worse is higher. Host verdicts and pair statuses (stored as check statuses) share the scale.
RANK = {None: 0, "passed": 0, "pass": 0, "warned": 1, "warn": 1, "failed": 2, "fail": 2, "unreachable": 3}


@dataclass(frozen=True)
class Change:
    kind: str  # intra, pair, all, host (a host with no measurements in either run)
    subject: str
    collective: str
    sizes: tuple[int, ...] = ()
    before: float | None = None  # busbw in run A, GB/s
    after: float | None = None
    verdict_before: str | None = None
    verdict_after: str | None = None
    worse: bool = False

    @property
    def relative(self) -> float | None:
        if self.before is None or self.after is None or self.before <= 0:
            return None
        return self.after / self.before - 1


@dataclass(frozen=True)
class Comparison:
    a: Snapshot
    b: Snapshot
    changes: tuple[Change, ...]
    only_a: tuple[str, ...]  # hosts in run A only
    only_b: tuple[str, ...]
    facts: tuple[tuple[str, str, str | None, str | None], ...]  # host, key, before, after

    @property
    def worse(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.worse)


def compare(
    a: Snapshot,
    b: Snapshot,
    min_drop: float = 0.05,
    reference_min_bytes: int = 256 * 1024**2,
    reference_sizes: int = 3,
) -> Comparison:
    changes: list[Change] = []
    measured_hosts: set[str] = set()
    for key in sorted(set(a.values) | set(b.values)):
        kind, subject, collective = key
        if kind == "intra":
            measured_hosts.add(subject)
        points_a, points_b = a.values.get(key, {}), b.values.get(key, {})
        sizes = _sizes(set(points_a) & set(points_b), reference_min_bytes, reference_sizes)
        before = _at(points_a, sizes)
        after = _at(points_b, sizes)
        verdict_a, verdict_b = _verdict(a, kind, subject, collective), _verdict(b, kind, subject, collective)
        change = Change(kind, subject, collective, sizes, before, after, verdict_a, verdict_b)
        dropped = change.relative is not None and change.relative <= -min_drop
        changes.append(_with_worse(change, dropped or _worse(verdict_a, verdict_b)))
    for host in sorted((set(a.host_verdicts) | set(b.host_verdicts)) - measured_hosts):
        verdict_a, verdict_b = a.host_verdicts.get(host), b.host_verdicts.get(host)
        if host in a.host_verdicts and host in b.host_verdicts:
            change = Change("host", host, "", (), None, None, verdict_a, verdict_b)
            changes.append(_with_worse(change, _worse(verdict_a, verdict_b)))
    facts = tuple(
        (host, key, a.facts[host].get(key), value)
        for host in sorted(set(a.facts) & set(b.facts))
        for key, value in sorted(b.facts[host].items())
        if key in a.facts[host] and a.facts[host][key] != value
    )
    return Comparison(
        a=a,
        b=b,
        changes=tuple(changes),
        only_a=tuple(sorted(set(a.host_verdicts) - set(b.host_verdicts))),
        only_b=tuple(sorted(set(b.host_verdicts) - set(a.host_verdicts))),
        facts=facts,
    )


def _with_worse(change: Change, worse: bool) -> Change:
    return replace(change, worse=worse)


def _sizes(common: set[int], min_bytes: int, count: int) -> tuple[int, ...]:
    ordered = sorted(common)
    large = [s for s in ordered if s >= min_bytes]
    return tuple(large[-count:] if large else ordered[-1:])


def _at(points: dict[int, float], sizes: tuple[int, ...]) -> float | None:
    values = [points[s] for s in sizes if s in points]
    if values:
        return statistics.median(values)
    return points[max(points)] if points and not sizes else None


def _verdict(snapshot: Snapshot, kind: str, subject: str, collective: str) -> str | None:
    if kind == "intra":
        return snapshot.host_verdicts.get(subject)
    if kind == "pair":
        return snapshot.pair_status.get((subject, collective))
    return None


def _worse(before: str | None, after: str | None) -> bool:
    return before is not None and after is not None and RANK.get(after, 0) > RANK.get(before, 0)
