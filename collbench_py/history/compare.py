"""What changed between two runs: per host and link and collective, busbw and verdict, and facts.

Each subject is compared at its reference sizes, the largest sizes from `reference_min_bytes`
up that both runs measured (else the largest both measured). A change is worse when busbw
dropped by `min_drop` or more, or the verdict got worse. A host's intra-node row carries the verdict
of its own intra-node checks for that collective, not the host's verdict: a host failed for a slow
link must not read as an intra-node change. A host whose verdict changed gets a row of its own that
names the checks that changed it.

A pair that the conclusion of either run called a bad link is a `link` row: its result in each
run with `(bad link)` where it was one (`ok -> slow (bad link)`, and back when it recovered). It
is worse when the link became bad. Its ends get no host row for it: a host row whose only
moved checks are the `pairs/<collective>` of a link that changed is the link's, said once.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from collbench_py.history.query import Snapshot

# Worse is higher. Host verdicts and pair statuses (stored as check statuses) share the scale.
RANK = {None: 0, "passed": 0, "pass": 0, "warned": 1, "warn": 1, "failed": 2, "fail": 2, "unreachable": 3}


@dataclass(frozen=True)
class Change:
    kind: str  # intra, pair, link (a pair that was or became a bad link), all, host (the host's verdict)
    subject: str
    collective: str
    sizes: tuple[int, ...] = ()
    before: float | None = None  # busbw in run A, GB/s
    after: float | None = None
    verdict_before: str | None = None
    verdict_after: str | None = None
    worse: bool = False
    checks: tuple[str, ...] = ()  # for a host row: its checks whose status got worse (pairs/all_reduce)

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
    checks_a, checks_b = _checks_by_host(a), _checks_by_host(b)
    intra_moved: set[str] = set()  # hosts whose intra-node verdict changed: their rows say why
    changed_links: dict[str, set[str]] = {}  # an end of a link that became bad or recovered -> pairs/<coll>
    for key in sorted(set(a.values) | set(b.values)):
        kind, subject, collective = key
        if kind == "intra":
            measured_hosts.add(subject)
        points_a, points_b = a.values.get(key, {}), b.values.get(key, {})
        sizes = _sizes(set(points_a) & set(points_b), reference_min_bytes, reference_sizes)
        before = _at(points_a, sizes)
        after = _at(points_b, sizes)
        verdict_a = _verdict(a, checks_a, kind, subject, collective)
        verdict_b = _verdict(b, checks_b, kind, subject, collective)
        change = Change(kind, subject, collective, sizes, before, after, verdict_a, verdict_b)
        if kind == "intra" and verdict_a != verdict_b:
            intra_moved.add(subject)
        dropped = change.relative is not None and change.relative <= -min_drop
        worse = dropped or _worse(verdict_a, verdict_b)
        link_a, link_b = (subject, collective) in a.bad_links, (subject, collective) in b.bad_links
        if kind == "pair" and (link_a or link_b):
            if link_a != link_b:
                for end in subject.split("--"):
                    changed_links.setdefault(end, set()).add(f"pairs/{collective}")
            change = replace(
                change,
                kind="link",
                verdict_before=_link_state(a, subject, collective, verdict_a),
                verdict_after=_link_state(b, subject, collective, verdict_b),
            )
            worse = worse or not link_a
        changes.append(_with_worse(change, worse))
    for host in sorted(set(a.host_verdicts) & set(b.host_verdicts)):
        verdict_a, verdict_b = a.host_verdicts[host], b.host_verdicts[host]
        if host in measured_hosts and (verdict_a == verdict_b or host in intra_moved):
            continue  # its measurements' rows say it; a host row when its verdict moved for another check
        moved = _moved(checks_a.get(host, {}), checks_b.get(host, {}))
        if moved and moved <= changed_links.get(host, set()):
            continue  # only its pairs check moved, for a link that changed: the link's row says it
        worsened = _worsened(checks_a.get(host, {}), checks_b.get(host, {}))
        change = Change("host", host, "", verdict_before=verdict_a, verdict_after=verdict_b, checks=worsened)
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


def _checks_by_host(snapshot: Snapshot) -> dict[str, dict[str, str]]:
    by_host: dict[str, dict[str, str]] = {}
    for (host, name), status in snapshot.host_checks.items():
        by_host.setdefault(host, {})[name] = status
    return by_host


def _verdict(
    snapshot: Snapshot, checks: dict[str, dict[str, str]], kind: str, subject: str, collective: str
) -> str | None:
    if kind == "intra":
        prefix = f"intra/{collective}/"
        statuses = [s for name, s in checks.get(subject, {}).items() if name.startswith(prefix)]
        return max(statuses, key=lambda status: RANK.get(status, 0)) if statuses else None
    if kind == "pair":
        return snapshot.pair_status.get((subject, collective))
    return None


def _link_state(snapshot: Snapshot, label: str, collective: str, status: str | None) -> str | None:
    """The pair's result in this run (`slow`, `failed`), and `(bad link)` where it was one."""
    result = snapshot.pair_results.get((label, collective)) or status
    if (label, collective) in snapshot.bad_links:
        return f"{result or '-'} (bad link)"
    return result


def _moved(before: dict[str, str], after: dict[str, str]) -> set[str]:
    """A host's checks whose status differs between the runs (one present in one run only too)."""
    return {name for name in set(before) | set(after) if before.get(name) != after.get(name)}


def _worse(before: str | None, after: str | None) -> bool:
    return before is not None and after is not None and RANK.get(after, 0) > RANK.get(before, 0)


def _worsened(before: dict[str, str], after: dict[str, str]) -> tuple[str, ...]:
    """A host's checks whose status is worse in B than in A (a new check counts from pass)."""
    return tuple(
        sorted(name for name, status in after.items() if RANK.get(status, 0) > RANK.get(before.get(name), 0))
    )
