"""Rail by rail: which NIC, which leaf, named from pairs measured one rail at a time.

On a rail-optimised fabric NIC k of every node sits on leaf switch k, and a 2-node collective uses
every rail at once: one slow rail drags the whole pair. A pair measured rail by rail (ib_write_bw,
NIC k <-> NIC k) says which rail; who is at fault follows from which pairs share the slow rail.
Pure functions over what was measured and the pair-level known-good set (planner.judge):

  reference    median of every rail measurement of the night (Gb/s) between two known-good hosts
               (the rail sample), failed ones excluded; of every one when there are none. Only
               suspects are read besides the sample, so on a large fleet their reads outnumber
               the sample's and their median would be a slow figure.
  slow rail    below (1 - rail_min_drop) x reference (a port passes at 90 % of its line, as
               NVIDIA's certification does); a failed client counts as slow.
  a reading    the rails of one pair in one round: "all slow" (every rail slow: the node and link
               rules apply, no rail decision), "one slow" (rail k slow, the others normal),
               "mixed" (some slow, some not), "ok".
  BAD RAIL k   rail k alone slow in >= 3 pairwise host-disjoint pairs of known-good hosts: the
               leaf of rail k (a slow leaf slows every pair alike, so no pair looks slow against
               the fleet, and the rail sample reads it). Known-good ends only: bad NICs on the
               same rail of three suspects are three host-disjoint slow pairs too. Blames no host
               and no NIC.
  BAD NIC X:k  rail k alone slow with >= 2 distinct known-good partners of X, and every reading
               of X with a known-good partner is that one: X's NIC k, its cable or transceiver,
               its switch port. Not on a bad rail.
  bad node     a bad-node candidate slow on every rail with >= 2 known-good partners: the node
               stands, the rail readings are its witnesses.
  UNRESOLVED   a candidate read with >= 2 known-good partners that fits neither (slow rails that
               change from partner to partner, several slow rails); and whatever slow rail no
               rule explains when no round is left: "X:railk" when one host is in every
               such reading of rail k, else "railk".
  pending      a bad-node candidate, or an end of an unexplained slow reading whose partner there
               was known-good, read with fewer than 2 known-good partners: the next round pairs it
               with another.
"""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

Pair = tuple[str, str]
RailStatus = Literal["ok", "slow", "failed"]
ReadingKind = Literal["all slow", "one slow", "mixed", "ok"]
FindingKind = Literal["bad nic", "bad rail", "bad node", "unresolved"]

DEFAULT_RAIL_MIN_DROP = 0.1
DEFAULT_RAIL_SAMPLE = 4
BAD_RAIL_PAIRS = 3  # host-disjoint pairs that make a leaf
BAD_NIC_PARTNERS = 2  # distinct known-good partners that make a NIC


@dataclass(frozen=True)
class RailMeasurement:
    round: int
    pair: Pair
    rail: int
    gbits: float | None  # None: that rail's client failed


@dataclass(frozen=True)
class RailReading:
    """A rail measurement judged against the night's reference."""

    round: int
    pair: Pair
    rail: int
    gbits: float | None
    status: RailStatus

    @property
    def bad(self) -> bool:
        return self.status != "ok"

    def __str__(self) -> str:
        value = "failed" if self.gbits is None else f"{self.gbits:.0f} Gb/s"
        return f"{self.pair[0]}--{self.pair[1]} rail {self.rail} {value} ({self.status}, round {self.round})"


@dataclass(frozen=True)
class Reading:
    """Every rail of one pair in one round."""

    round: int
    pair: Pair
    rails: tuple[RailReading, ...]  # by rail index

    @property
    def slow(self) -> tuple[int, ...]:
        return tuple(r.rail for r in self.rails if r.bad)

    @property
    def kind(self) -> ReadingKind:
        slow = self.slow
        if not slow:
            return "ok"
        if len(slow) == len(self.rails):
            return "all slow"
        return "one slow" if len(slow) == 1 else "mixed"

    def partner(self, host: str) -> str:
        return self.pair[1] if self.pair[0] == host else self.pair[0]


@dataclass(frozen=True)
class RailFinding:
    kind: FindingKind
    subject: str  # "node3:rail2", "rail1", or the node
    host: str | None
    rail: int | None
    hca: str | None
    readings: tuple[Reading, ...]  # the witnesses
    reason: str


@dataclass(frozen=True)
class RailJudgement:
    reference: float | None
    readings: tuple[Reading, ...]
    findings: tuple[RailFinding, ...]  # decided: bad rails, bad nics, candidates settled
    pending: tuple[str, ...]  # hosts to read with another known-good partner
    if_stopped: tuple[RailFinding, ...]  # what is left open when no round is left

    def finding_of(self, host: str) -> RailFinding | None:
        return next((f for f in self.findings if f.host == host and f.kind != "bad rail"), None)


def rail_reference(measurements: Iterable[RailMeasurement]) -> float | None:
    """Median Gb/s of every rail measurement but the failed ones; None when none measured."""
    values = [m.gbits for m in measurements if m.gbits is not None]
    return statistics.median(values) if values else None


def rail_status(gbits: float | None, reference: float | None, min_drop: float) -> RailStatus:
    if gbits is None:
        return "failed"
    if reference is None or reference <= 0:
        return "ok"
    return "slow" if gbits < (1 - min_drop) * reference else "ok"


def readings(
    measurements: Iterable[RailMeasurement], min_drop: float, known_good: frozenset[str] = frozenset()
) -> tuple[float | None, list[Reading]]:
    """The reference and every pair's rails of every round, judged."""
    measurements = list(measurements)
    between_good = [m for m in measurements if set(m.pair) <= known_good]
    reference = rail_reference(between_good)
    if reference is None:
        reference = rail_reference(measurements)
    grouped: dict[tuple[int, Pair], list[RailReading]] = defaultdict(list)
    for m in measurements:
        status = rail_status(m.gbits, reference, min_drop)
        grouped[(m.round, m.pair)].append(RailReading(m.round, m.pair, m.rail, m.gbits, status))
    return reference, [
        Reading(number, pair, tuple(sorted(rs, key=lambda r: r.rail)))
        for (number, pair), rs in sorted(grouped.items())
    ]


def disjoint_pairs(candidates: Sequence[Reading], need: int) -> list[Reading]:
    """`need` readings whose pairs share no host, if there are (greedy first, then every choice
    of `need` among a few dozen); fewer otherwise (the greedy pick)."""
    picked: list[Reading] = []
    used: set[str] = set()
    for r in candidates:
        if not set(r.pair) & used:
            picked.append(r)
            used.update(r.pair)
    if len(picked) >= need or len(candidates) > 40:
        return picked
    for choice in itertools.combinations(candidates, need):
        hosts = [h for r in choice for h in r.pair]
        if len(set(hosts)) == len(hosts):
            return list(choice)
    return picked


def judge_rails(
    measurements: Iterable[RailMeasurement],
    known_good: frozenset[str],
    candidates: Iterable[str] = (),
    *,
    min_drop: float = DEFAULT_RAIL_MIN_DROP,
    hcas: Mapping[str, Mapping[int, str]] | None = None,
) -> RailJudgement:
    """Apply the rules above. `candidates`: hosts that met the bad-node rule and wait for their
    rails before they are named."""
    candidates = frozenset(candidates)
    reference, all_readings = readings(measurements, min_drop, known_good)
    words = _Words(reference, min_drop, hcas or {})
    findings: list[RailFinding] = []

    bad_rails: set[int] = set()
    for rail in sorted({r.rail for reading in all_readings for r in reading.rails}):
        # Between known-good hosts only: three bad NICs on one rail are three host-disjoint pairs too.
        alone = [
            r
            for r in all_readings
            if r.kind == "one slow" and r.slow == (rail,) and set(r.pair) <= known_good
        ]
        witnesses = disjoint_pairs(alone, BAD_RAIL_PAIRS)
        if len(witnesses) >= BAD_RAIL_PAIRS:
            bad_rails.add(rail)
            findings.append(words.bad_rail(rail, witnesses))

    mine: dict[str, list[Reading]] = defaultdict(list)  # host -> its readings with known-good partners
    for reading in all_readings:
        for host in reading.pair:
            if reading.partner(host) in known_good:
                mine[host].append(reading)

    def partners(host: str) -> set[str]:
        return {r.partner(host) for r in mine[host]}

    def beyond(reading: Reading) -> frozenset[int]:
        """Its slow rails that no bad rail explains."""
        return frozenset(reading.slow) - bad_rails

    settled: set[str] = set()
    for host in sorted(mine):
        ws = mine[host]
        if len(partners(host)) < BAD_NIC_PARTNERS:
            continue
        slow = {beyond(r) for r in ws}
        if len(slow) == 1 and len(rail := next(iter(slow))) == 1 and all(r.kind != "all slow" for r in ws):
            (k,) = rail
            findings.append(words.bad_nic(host, k, ws))
            settled.add(host)
        elif host in candidates:
            if all(r.kind == "all slow" for r in ws):
                findings.append(words.node_stands(host, ws))
            else:
                findings.append(words.unresolved_host(host, ws, bad_rails))
            settled.add(host)

    # What the findings explain: a bad rail every reading of its rail, a NIC its host's rail.
    nics = {(f.host, f.rail) for f in findings if f.kind == "bad nic"}
    unresolved_hosts = {f.host for f in findings if f.kind == "unresolved"}

    def unexplained(reading: Reading) -> list[int]:
        if reading.kind in ("ok", "all slow") or set(reading.pair) & unresolved_hosts:
            return []
        return [
            k for k in reading.slow if k not in bad_rails and not any((h, k) in nics for h in reading.pair)
        ]

    pending = {h for h in candidates if h not in settled}
    open_readings: dict[int, list[Reading]] = defaultdict(list)
    for reading in all_readings:
        slow = unexplained(reading)
        if not slow or set(reading.pair) & pending:  # a waiting candidate answers for its readings
            continue
        for k in slow:
            open_readings[k].append(reading)
        # An end read with a known-good partner is the suspect; fewer than 2 such partners: read again.
        pending.update(
            h
            for h in reading.pair
            if reading.partner(h) in known_good and h not in settled and len(partners(h)) < BAD_NIC_PARTNERS
        )
    if_stopped = [words.left_open(rail, rs, known_good) for rail, rs in sorted(open_readings.items())]
    for host in sorted(h for h in candidates if h not in settled):
        # A candidate whose rails could not be read with two partners: the node rule stands unless
        # a reading already shows one rail apart.
        ws = mine[host]
        if any(r.kind in ("one slow", "mixed") for r in ws):
            if_stopped.append(words.unresolved_host(host, ws, bad_rails))
        else:
            if_stopped.append(words.node_stands(host, ws))
    return RailJudgement(
        reference, tuple(all_readings), tuple(findings), tuple(sorted(pending)), tuple(if_stopped)
    )


@dataclass(frozen=True)
class _Words:
    """The reasons a human acts on."""

    reference: float | None
    min_drop: float
    hcas: Mapping[str, Mapping[int, str]]

    def nic(self, host: str, rail: int) -> str:
        hca = self.hcas.get(host, {}).get(rail)
        return f"{host} NIC {hca} of rail {rail}" if hca else f"{host} NIC of rail {rail}"

    def hca(self, host: str, rail: int) -> str | None:
        return self.hcas.get(host, {}).get(rail)

    def tail(self) -> str:
        if self.reference is None:
            return ""
        return (
            f"; reference {self.reference:.0f} Gb/s (median of the night's rail reads), "
            f"slow below {1 - self.min_drop:.0%} of it"
        )

    def bad_nic(self, host: str, rail: int, ws: list[Reading]) -> RailFinding:
        slow = ", ".join(f"{r.partner(host)} ({_gbits(_rail(r, rail))}, round {r.round})" for r in ws)
        others = [x for r in ws for x in r.rails if x.rail != rail and x.gbits is not None]
        indices = ", ".join(str(i) for i in sorted({x.rail for x in others}))
        span = _span([x.gbits for x in others if x.gbits is not None])
        reason = (
            f"{self.nic(host, rail)}: slow with {slow} while its rails {indices} read {span} with them"
            f"{self.tail()}; check the NIC, its cable or transceiver, its leaf-{rail} switch port"
        )
        return RailFinding(
            "bad nic", f"{host}:rail{rail}", host, rail, self.hca(host, rail), tuple(ws), reason
        )

    def bad_rail(self, rail: int, ws: list[Reading]) -> RailFinding:
        slow = "; ".join(str(_rail(r, rail)) for r in ws)
        others = [x.gbits for r in ws for x in r.rails if x.rail != rail and x.gbits is not None]
        reason = (
            f"rail {rail}: slow in {len(ws)} pairs that share no host ({slow}) while their other rails "
            f"read {_span(others)}{self.tail()}; check the leaf switch of rail {rail} and its uplinks, "
            "not the nodes"
        )
        return RailFinding("bad rail", f"rail{rail}", None, rail, None, tuple(ws), reason)

    def node_stands(self, host: str, ws: list[Reading]) -> RailFinding:
        if ws:
            seen = "; ".join(
                f"{r.partner(host)} round {r.round}: {_span([x.gbits for x in r.rails])}" for r in ws
            )
            why = f"slow on every rail with its known-good partners ({seen})"
        else:
            why = "its rails were not read with a known-good partner"
        return RailFinding("bad node", host, host, None, None, tuple(ws), why + self.tail())

    def unresolved_host(self, host: str, ws: list[Reading], bad_rails: set[int]) -> RailFinding:
        seen = "; ".join(
            f"{r.partner(host)} round {r.round}: "
            + (f"slow rail(s) {', '.join(map(str, r.slow))}" if r.slow else "every rail normal")
            for r in ws
        )
        slow = {k for r in ws for k in r.slow} - bad_rails
        rail = next(iter(slow)) if len(slow) == 1 else None
        subject = f"{host}:rail{rail}" if rail is not None else host
        reason = (
            f"unresolved {subject}: its rails read differently from partner to partner "
            f"({seen or 'no reading'}): a flapping port, or more than one fault{self.tail()}"
        )
        hca = self.hca(host, rail) if rail is not None else None
        return RailFinding("unresolved", subject, host, rail, hca, tuple(ws), reason)

    def left_open(self, rail: int, rs: list[Reading], known_good: frozenset[str]) -> RailFinding:
        common = set.intersection(*(set(r.pair) for r in rs))
        if len(common) > 1:  # one pair: its end that is not known-good, if one is not
            common -= known_good
        host = min(common) if len(common) == 1 else None
        subject = f"{host}:rail{rail}" if host else f"rail{rail}"
        seen = "; ".join(str(_rail(r, rail)) for r in rs)
        reason = (
            f"unresolved {subject}: rail {rail} slow ({seen}) in fewer pairs than name a NIC "
            f"({BAD_NIC_PARTNERS} known-good partners) or a leaf ({BAD_RAIL_PAIRS} pairs that share no host)"
            f"{self.tail()}"
        )
        hca = self.hca(host, rail) if host else None
        return RailFinding("unresolved", subject, host, rail, hca, tuple(rs), reason)


def _rail(reading: Reading, rail: int) -> RailReading:
    return next(r for r in reading.rails if r.rail == rail)


def _gbits(reading: RailReading) -> str:
    return "failed" if reading.gbits is None else f"{reading.gbits:.0f} Gb/s"


def _span(values: Iterable[float | None]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "nothing (failed)"
    low, high = min(values), max(values)
    return f"{low:.0f} Gb/s" if round(low) == round(high) else f"{low:.0f}-{high:.0f} Gb/s"
