"""The records a judgement produces: checks, per-host verdicts, fleet statistics, pairs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

CheckStatus = Literal["pass", "warn", "fail", "skip", "note"]
Verdict = Literal["passed", "warned", "failed", "unreachable"]

# Worst first: a host's verdict is its worst check.
SEVERITY = {"fail": 3, "warn": 2, "note": 1, "pass": 0, "skip": 0}
VERDICT_ORDER = {"failed": 0, "unreachable": 1, "warned": 2, "passed": 3}


@dataclass(frozen=True)
class Check:
    """One judgement with the reason a person can act on, and the raw lines it rests on."""

    name: str  # stable, e.g. "intra/all_reduce/fleet", "pairs/all_reduce", "topology"
    status: CheckStatus
    reason: str
    host: str | None = None  # None: about the fleet, not one host
    evidence: tuple[str, ...] = ()
    log: str | None = None  # the log it rests on, relative to the run directory


@dataclass(frozen=True)
class Options:
    reference_min_bytes: int = 256 * 1024**2
    reference_sizes: int = 3  # how many of the largest sizes >= reference_min_bytes to score
    z_suspect: float = -2.0
    z_fail: float = -5.0
    min_drop: float | None = None  # None: the profile's, else 5 %
    mad_floor: float = 0.01  # the spread never counts as less than 1 % of the median
    min_fleet: int = 3  # fewer hosts than this: no fleet-relative verdicts


@dataclass(frozen=True)
class FleetStat:
    """Robust statistics of one collective at its reference size(s) across hosts or pairs."""

    kind: str  # intra or pair
    collective: str
    sizes: tuple[int, ...]
    fallback: bool  # no size >= reference_min_bytes was measured: the largest size was used
    median: float
    scale: float  # 1.4826 * MAD, floored
    n: int
    values: dict[str, float] = field(default_factory=dict)  # host (or "a--b") -> busbw
    z: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PairResult:
    hosts: tuple[str, str]
    collective: str
    busbw: float | None  # at the reference size; None when the launch failed
    status: Literal["ok", "suspect", "slow", "failed", "launcher"]  # launcher: the launch never ran
    z: float | None = None
    cause: str | None = None  # "node <host>", "link", "fabric" for bad pairs
    log: str | None = None

    @property
    def label(self) -> str:
        return f"{self.hosts[0]}--{self.hosts[1]}"


@dataclass(frozen=True)
class HostVerdict:
    host: str
    inventory_hostname: str
    verdict: Verdict
    checks: tuple[Check, ...]
    busbw: dict[str, float] = field(default_factory=dict)  # intra collective -> busbw at reference
    z: dict[str, float] = field(default_factory=dict)
    topology_diff: dict[tuple[str, str], str] = field(default_factory=dict)  # cell -> fleet value

    @property
    def problems(self) -> list[Check]:
        """Failing, then warning checks: the reasons of the verdict."""
        bad = [c for c in self.checks if c.status in ("fail", "warn")]
        return sorted(bad, key=lambda c: -SEVERITY[c.status])


def verdict_of(checks: list[Check], reachable: bool) -> Verdict:
    if not reachable:
        return "unreachable"
    worst = max((SEVERITY[c.status] for c in checks), default=0)
    return "failed" if worst == 3 else "warned" if worst == 2 else "passed"


FindingKind = Literal["bad node", "bad link", "unresolved"]


@dataclass(frozen=True)
class Finding:
    """One item of the pairs conclusion: what to drain (a bad node), what to ticket (a bad link,
    with both ends) or what the run could not pin on either (unresolved). Each bad pair of a
    collective is explained by exactly one finding."""

    kind: FindingKind
    subject: str  # the node, or "a--b" for a link or an unresolved pair
    hosts: tuple[str, ...]  # the node, or both ends
    collective: str
    source: Literal["plan", "logs"]  # the pair plan decided it, or the logs judged it alone
    reason: str
    pairs: tuple[PairResult, ...] = ()  # the bad pairs it explains, as measured
    witnesses: tuple[str, ...] = ()  # the plan's witness lines (round, pair, busbw, status)
    baseline: float | None = None  # the pair median (GB/s) at the reference sizes
    slow_below: float | None = None  # the busbw under which a pair is slow
    sizes: tuple[int, ...] = ()  # the reference sizes

    @property
    def logs(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.log for p in self.pairs if p.log))


@dataclass(frozen=True)
class PairsConclusion:
    """The pairs' one conclusion for a run, computed once: every output renders this."""

    findings: tuple[Finding, ...] = ()
    plans: tuple[str, ...] = ()  # how each collective's conclusion was reached, one line each

    def of(self, kind: FindingKind) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    def subjects(self, kind: FindingKind) -> list[str]:
        """The distinct nodes or links of a kind: a link slow in two collectives is one link."""
        return list(dict.fromkeys(f.subject for f in self.of(kind)))

    @property
    def counts(self) -> dict[str, int]:
        return {kind: len(self.subjects(kind)) for kind in ("bad node", "bad link", "unresolved")}
