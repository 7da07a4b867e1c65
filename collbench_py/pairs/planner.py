"""Adaptive pair schedule: a few rounds of random disjoint pairs, then each suspect re-paired with
known-good nodes until every slow pair is explained.

A full round robin measures every pair: n-1 rounds, 999 for 1,000 nodes (~8 h at ~30 s a round).
This plan runs `k` initial rounds (default 3) in which every node meets k different partners, then
at most `localisation_rounds` more (default 3) that involve only the suspects. A quiet night ends
after k rounds.

The rules, applied after every round to everything measured so far (`judge`):

  baseline     median of every pair busbw measured so far but those of a node already named bad;
               spread 1.4826 x MAD, never below 1 % of the median (verdicts/stats.py). The report
               takes the median of host medians; here a host has 3 pairs, and the spread of their
               medians would understate one pair's noise.
  slow pair    the report's fail line (stats.band): at least `min_drop` (5 %) below the median and
               z < -5, or half the median or less and z < -2. A failed launch counts as slow.
               `suspect` is stats.band's warn line.
  noise        the night's pair-to-pair noise, measured once the initial rounds are in: 1.4826 x MAD
               of their pairs' busbw over its median (a fraction of the fleet), never below
               NOISE_FLOOR. Recorded in plan.json.
  normal pair  every measurement of it passes stats.band.
  known-good   a node with >= 2 normal pairs.
  BAD NODE     slow with every partner: slow with >= 3 distinct partners, >= 2 of them known-good
               (two independent witnesses), and low with the others (suspect: a noisy measurement
               of a 20 % slower node can land just above the fail line), normal with none. Its
               slow pairs are explained by it.
  BAD LINK     a pair slow in both of two measurements (measured again to rule out a one-off),
               whose ends are both known-good and have no other unexplained slow pair.
  MEAN TEST    a node not named bad that has a suspect or slow pair and no failed one is
               judged on every read of it (its pairs with partners not named bad): the mean of the
               n reads over the baseline median, against stats.band's fail line with the noise of
               a mean, noise / sqrt(n). BAD NODE when that mean fails, every read lies within
               SAME_SLOWDOWN_Z noises of the mean (one slowdown explains them all: a bad link or an
               intermittent node leaves a read far off) and >= 2 distinct partners are known-good
               (the witnesses). Not named, with the mean below the warn line (z) and a slowdown
               of min_drop within one noise of the mean, it is paired again with known-good nodes
               it has not met, one new partner a round; what the last localisation round leaves
               there stays suspect: logged, never a decision.
               A pair slow in some reads and low in the others, both ends known-good and in no
               other unexplained slow pair, is judged the same way on its own reads (two at least,
               the witnesses its ends): BAD LINK when the mean fails, read again while it is open.
  UNRESOLVED   a pair slow in some of its measurements and normal in others (a flapping link or
               node); a node slow with >= 2 known-good partners and normal with another (an
               intermittent node, or more than one bad link); and whatever the last localisation
               round leaves open.

With rails (host -> rail indices; the rail rules are collbench_py/pairs/rails.py's):

  RAIL CHECK   a bad-node candidate (the BAD NODE rule met) with rails known is not named yet: it
               is read rail by rail (ib_write_bw NIC k <-> NIC k, every rail at once) with one
               clean known-good partner per localisation round, two partners at least. Every
               rail slow -> BAD NODE stands (rail witnesses added); one rail k slow, the others
               normal -> BAD NIC "host:railk" in its place (its slow pairs are explained by the
               NIC); anything else -> UNRESOLVED host. Out of rounds first: BAD NODE stands,
               unless a reading already showed one rail apart (UNRESOLVED).
  RAIL SAMPLE  the first localisation round also reads `rail_sample` (4) disjoint pairs of clean
               hosts, spread over the groups: a slow leaf slows every pair alike and only this
               shows it (BAD RAIL "railk": rail k alone slow in >= 3 host-disjoint pairs). An end
               of a sample pair with one rail slow is read again with another partner.
               A quiet night with rails takes k+1 rounds.
  ROUND ROBIN  with rails reads them too, after its rounds, in rounds of rail reads alone (the
               sample, then the candidates: at most `localisation_rounds`); without, it never
               adds a round.

A localisation round measures each link candidate again, and pairs each suspect (an end of an
unexplained slow pair that is not known-good, or a node the mean test has not settled) with a
known-good node in no slow pair that it has not met; hosts waiting for their rails are read with
clean hosts apart from those pairs. Which fleets get this plan by default:
collbench_py.pairs.schedule.default_pair_schedule.
"""

from __future__ import annotations

import itertools
import random
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from collbench_py.pairs.rails import (
    DEFAULT_RAIL_MIN_DROP,
    DEFAULT_RAIL_SAMPLE,
    RailFinding,
    RailJudgement,
    RailMeasurement,
    Reading,
    judge_rails,
)
from collbench_py.pairs.schedule import Pair, round_robin_pairs, round_robin_round
from collbench_py.verdicts.model import Options
from collbench_py.verdicts.stats import band, robust_scale

DEFAULT_MIN_DROP = 0.05  # the report's minimum drop when the profile sets none
DEFAULT_OPTIONS = Options()  # the report's z lines (-2, -5), MAD floor (1 %), min_fleet (3)
# The noise measured from a handful of pairs can come out near 0 (a MAD of identical values), and a
# mean test against ~0 noise would name a node for any drop past min_drop: never count less.
NOISE_FLOOR = 0.002  # 0.2 % of the fleet; healthy fabrics run at ~0.5-1 % (field notes)
SAME_SLOWDOWN_Z = 4.0  # a read further than this many noises from the node's mean: not one slowdown
PairStatus = Literal["ok", "suspect", "slow", "failed"]
DecisionKind = Literal["bad node", "bad link", "bad nic", "bad rail", "unresolved"]
DECISION_KINDS = ("bad node", "bad link", "bad nic", "bad rail", "unresolved")


def _pair(a: str, b: str) -> Pair:
    return (a, b) if a < b else (b, a)


def _label(pair: Pair) -> str:
    return f"{pair[0]}--{pair[1]}"


# ---------------------------------------------------------------------------------------------
# Initial rounds


def initial_rounds(
    hosts: Sequence[str], k: int = 3, groups: Mapping[str, str] | None = None, seed: int = 0
) -> list[list[Pair]]:
    """k rounds of disjoint pairs in which every node meets k different partners.

    With an odd count one host sits out each round, a different one each time (it meets k-1).
    With `groups` (host -> rack, leaf or rail) rounds alternate: same-group pairs, cross-group
    pairs, same-group... so a node gets partners of both kinds where the group sizes allow.
    The same hosts, groups and seed give the same rounds, whatever the order of `hosts`.
    """
    if len(set(hosts)) != len(hosts):
        duplicates = sorted({h for h in hosts if list(hosts).count(h) > 1})
        raise ValueError(f"duplicate host names: {', '.join(duplicates)}")
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    ordered = sorted(hosts)
    if len(ordered) - 1 + len(ordered) % 2 <= k:  # the round robin meets everyone in no more rounds
        return round_robin_pairs(ordered)
    rng = random.Random(seed)
    for _ in range(20):
        rounds = _try_initial_rounds(ordered, k, groups or {}, rng)
        if rounds is not None:
            return rounds
    return _circle_rounds(ordered, k, rng)  # small fleets where random pairing keeps colliding


def _try_initial_rounds(
    hosts: list[str], k: int, groups: Mapping[str, str], rng: random.Random
) -> list[list[Pair]] | None:
    met: dict[str, set[str]] = {h: set() for h in hosts}
    sat_out: set[str] = set()
    rounds = []
    for r in range(k):
        players = list(hosts)
        if len(players) % 2:
            sitter = rng.choice([h for h in hosts if h not in sat_out])
            sat_out.add(sitter)
            players.remove(sitter)
        kind = ("same", "cross")[r % 2] if groups else "any"
        pairs = _repair(_propose(players, kind, groups, rng), met, kind, groups, rng)
        if pairs is None:
            return None
        for a, b in pairs:
            met[a].add(b)
            met[b].add(a)
        rounds.append(sorted(_pair(a, b) for a, b in pairs))
    return rounds


def _propose(players: list[str], kind: str, groups: Mapping[str, str], rng: random.Random) -> list[Pair]:
    """A perfect matching of `players`, new partners not yet checked.

    same: hosts laid out group by group, neighbours paired (a boundary pair crosses where a
    group has an odd count). cross: the same layout paired with the host half the list away,
    which crosses groups whenever no group holds more than half the hosts."""
    if kind == "any":
        order = list(players)
        rng.shuffle(order)
        return [(order[i], order[i + 1]) for i in range(0, len(order), 2)]
    blocks: dict[str, list[str]] = defaultdict(list)
    for h in players:
        blocks[groups.get(h, "")].append(h)
    names = sorted(blocks)
    rng.shuffle(names)
    order = []
    for name in names:
        members = blocks[name]
        rng.shuffle(members)
        order.extend(members)
    if kind == "same":
        return [(order[i], order[i + 1]) for i in range(0, len(order), 2)]
    half = len(order) // 2
    return [(order[i], order[i + half]) for i in range(half)]


def _repair(
    pairs: list[Pair], met: Mapping[str, set[str]], kind: str, groups: Mapping[str, str], rng: random.Random
) -> list[Pair] | None:
    """Swap partners between two pairs until no pair repeats an earlier meeting; None if stuck.

    A swap that keeps both pairs of the round's kind (same / cross group) is preferred."""
    pairs = list(pairs)

    def new(a: str, b: str) -> bool:
        return b not in met[a]

    def of_kind(a: str, b: str) -> bool:
        return kind == "any" or (groups.get(a, "") == groups.get(b, "")) == (kind == "same")

    for i, (a, b) in enumerate(pairs):
        if new(a, b):
            continue
        others = [j for j in range(len(pairs)) if j != i]
        rng.shuffle(others)
        fallback = None
        for j in others:
            c, d = pairs[j]
            for x, y in (((a, d), (c, b)), ((a, c), (b, d))):
                if new(*x) and new(*y):
                    if of_kind(*x) and of_kind(*y):
                        fallback = (j, x, y)
                        break
                    fallback = fallback or (j, x, y)
            else:
                continue
            break
        if fallback is None:
            return None
        j, x, y = fallback
        pairs[i], pairs[j] = x, y
    return pairs


def _circle_rounds(hosts: list[str], k: int, rng: random.Random) -> list[list[Pair]]:
    """k rounds of the round robin over a shuffled order: always k distinct partners, groups ignored."""
    order = list(hosts)
    rng.shuffle(order)
    count = len(order) - 1 if len(order) % 2 == 0 else len(order)
    return [round_robin_round(order, r) for r in sorted(rng.sample(range(count), k))]


# ---------------------------------------------------------------------------------------------
# Judging what was measured


@dataclass(frozen=True)
class Measurement:
    round: int  # 1-based
    pair: Pair
    busbw: float | None  # GB/s at the reference size; None: the launch failed


@dataclass(frozen=True)
class Baseline:
    median: float
    scale: float  # 1.4826 x MAD, floored
    n: int

    def z(self, busbw: float) -> float:
        return (busbw - self.median) / self.scale


@dataclass(frozen=True)
class Witness:
    """One measurement a decision rests on, as judged when the decision was made."""

    round: int
    pair: Pair
    busbw: float | None
    status: PairStatus
    rail: int | None = None  # a rail witness: busbw None, gbits set (None too when it failed)
    gbits: float | None = None

    def __str__(self) -> str:
        if self.rail is not None:
            value = "failed" if self.gbits is None else f"{self.gbits:.0f} Gb/s"
            return f"{_label(self.pair)} rail {self.rail} {value} ({self.status}, round {self.round})"
        value = "failed" if self.busbw is None else f"{self.busbw:.3g} GB/s"
        return f"{_label(self.pair)} {value} ({self.status}, round {self.round})"


@dataclass(frozen=True)
class Decision:
    kind: DecisionKind
    subject: str  # the node, "a--b" for a link or an unresolved pair, "node3:rail2", "rail1"
    pairs: tuple[Pair, ...]  # the slow pairs it explains
    witnesses: tuple[Witness, ...]
    reason: str
    host: str | None = None  # a rail decision's host (none for a bad rail)
    rail: int | None = None
    hca: str | None = None  # the NIC of that rail when the rail map names it


@dataclass(frozen=True)
class MeanTest:
    """A node judged on the mean of every read of it (the MEAN TEST rule)."""

    subject: str  # the node, or "a--b" for a link
    reads: tuple[Witness, ...]
    mean: float  # the mean read over the baseline median
    noise: float  # the night's pair noise; the mean's is noise / sqrt(n)
    z: float  # (mean - 1) / (noise / sqrt(n))
    verdict: str  # stats.band of the mean: pass, warn or fail
    same_slowdown: bool  # every read within SAME_SLOWDOWN_Z noises of the mean
    witnesses: tuple[str, ...]  # the known-good partners among the reads
    named: bool  # the mean fails, one slowdown explains every read, >= 2 witnesses
    open: bool  # not named, and more reads could still name it: pair it again

    def text(self) -> str:
        n = len(self.reads)
        return (
            f"mean of {n} read{'s' if n > 1 else ''} {self.mean:.3g} of the fleet, noise "
            f"{self.noise / n**0.5:.2%} (the night's {self.noise:.2%} / sqrt {n}): z {self.z:.1f}"
        )


@dataclass(frozen=True)
class Judgement:
    """Everything measured so far, judged: decisions made, and what a next round should measure."""

    baseline: Baseline | None
    witnesses: tuple[Witness, ...]  # every measurement, judged
    decisions: tuple[Decision, ...]  # bad nodes, bad links, and pairs no more rounds can settle
    remeasure: tuple[Pair, ...]  # link candidates slow once: measure again
    suspects: tuple[str, ...]  # nodes to pair with known-good nodes
    open_pairs: tuple[Pair, ...]  # slow pairs not explained yet
    if_stopped: tuple[Decision, ...]  # what the open pairs become when no round is left
    known_good: frozenset[str]  # >= 2 normal pairs
    clean: frozenset[str]  # known-good and in no slow pair: the witnesses localisation uses
    # With rail checks: the bad-node candidates (named, or waiting for their rails) and bad NICs,
    # the rail rules' judgement, and the hosts to read rail by rail with another known-good partner.
    explained: frozenset[str] = frozenset()
    rails: RailJudgement | None = None
    rail_pending: tuple[str, ...] = ()
    # The mean tests of the nodes that read low; retest: those still open.
    means: tuple[MeanTest, ...] = ()
    retest: tuple[str, ...] = ()


def _bad_nodes(judgement: Judgement) -> frozenset[str]:
    """The hosts whose pairs leave the baseline: named bad, or waiting for their rails."""
    return judgement.explained | frozenset(d.subject for d in judgement.decisions if d.kind == "bad node")


def fleet_baseline(values: Iterable[float], options: Options) -> Baseline | None:
    """Median and robust spread of the pair busbw measured so far; None under options.min_fleet pairs."""
    values = list(values)
    if len(values) < options.min_fleet:
        return None
    median = statistics.median(values)
    return Baseline(median, robust_scale(values, median, options.mad_floor), len(values))


def measured_noise(values: Iterable[float]) -> float | None:
    """The pair-to-pair noise of a night, a fraction of the fleet: 1.4826 x MAD of the busbw over
    their median, floored at NOISE_FLOOR; None without three values to measure it from."""
    values = [v for v in values if v > 0]
    if len(values) < 3:
        return None
    median = statistics.median(values)
    return max(robust_scale((v / median for v in values), 1.0, 0.0), NOISE_FLOOR)


def pair_status(
    busbw: float | None, baseline: Baseline | None, options: Options, min_drop: float
) -> PairStatus:
    """The report's bands: slow (fail), suspect (warn), ok; failed when nothing was measured."""
    if busbw is None:
        return "failed"
    if baseline is None or baseline.median <= 0:
        return "ok"
    drop = (baseline.median - busbw) / baseline.median
    verdict = band(baseline.z(busbw), drop, options.z_suspect, options.z_fail, min_drop)
    return {"fail": "slow", "warn": "suspect", "pass": "ok"}[verdict]


def _summary(statuses: list[PairStatus]) -> str:
    """slow: every measurement bad; flapping: bad and not; normal: every one ok; else suspect."""
    bad = [s in ("slow", "failed") for s in statuses]
    if all(bad):
        return "slow"
    if any(bad):
        return "flapping"
    return "normal" if all(s == "ok" for s in statuses) else "suspect"


def judge(
    measurements: Iterable[Measurement],
    options: Options = DEFAULT_OPTIONS,
    min_drop: float = DEFAULT_MIN_DROP,
    known_bad: frozenset[str] = frozenset(),
    *,
    rails: Mapping[str, Sequence[int]] | None = None,
    rail_measurements: Iterable[RailMeasurement] = (),
    rail_min_drop: float = DEFAULT_RAIL_MIN_DROP,
    hcas: Mapping[str, Mapping[int, str]] | None = None,
    noise: float | None = None,
) -> Judgement:
    """Judge every measurement against the baseline of all of them but the pairs of `known_bad`
    nodes (named bad already: their slow pairs would widen the spread that judges the others),
    then apply the rules above; with `rails` (host -> rail indices) the rail rules
    (collbench_py/pairs/rails.py) too; with `noise` (the night's, measured_noise) the mean test."""
    measurements = list(measurements)
    baseline = fleet_baseline(
        (m.busbw for m in measurements if m.busbw is not None and not set(m.pair) & known_bad), options
    )
    witnesses = tuple(
        Witness(m.round, m.pair, m.busbw, pair_status(m.busbw, baseline, options, min_drop))
        for m in measurements
    )
    by_pair: dict[Pair, list[Witness]] = defaultdict(list)
    for w in witnesses:
        by_pair[w.pair].append(w)
    summary = {pair: _summary([w.status for w in ws]) for pair, ws in by_pair.items()}
    partners: dict[str, dict[str, str]] = defaultdict(dict)  # host -> partner -> pair summary
    for (a, b), s in summary.items():
        partners[a][b] = s
        partners[b][a] = s
    normal = {h: {p for p, s in ps.items() if s == "normal"} for h, ps in partners.items()}
    known_good = frozenset(h for h, ps in normal.items() if len(ps) >= 2)
    facts = _Facts(baseline, by_pair, summary, partners, normal, known_good)

    bad_nodes = sorted(h for h in partners if facts.is_bad_node(h))
    means = _mean_tests(
        facts, set(bad_nodes), known_bad | set(bad_nodes), noise=noise, options=options, min_drop=min_drop
    )
    facts = replace(facts, means={m.subject: m for m in means})
    bad_nodes = sorted([*bad_nodes, *(m.subject for m in means if m.named)])
    rail_judgement = None
    decisions: list[Decision] = []
    if rails:
        waiting = [h for h in bad_nodes if rails.get(h)]
        rail_judgement = judge_rails(
            rail_measurements, known_good, waiting, min_drop=rail_min_drop, hcas=hcas
        )
        decisions += [facts.from_rails(f) for f in rail_judgement.findings]
    named = {d.host or d.subject for d in decisions}  # the candidates the rail rules settled
    decisions += [facts.bad_node(h) for h in bad_nodes if h not in named and not (rails and rails.get(h))]
    decisions.sort(key=lambda d: (d.kind != "bad rail", d.subject))
    explained = set(bad_nodes) | {d.host for d in decisions if d.kind == "bad nic" and d.host}
    flagged = sorted(p for p, s in summary.items() if s in ("slow", "flapping") and not set(p) & explained)
    # An intermittent node's slow pairs are a question about that node, not about its partners:
    # they leave the count, so a partner's own bad link is still found.
    slow_partners = _partners_of(flagged)
    intermittent = sorted(h for h, ps in slow_partners.items() if facts.is_intermittent(h, ps))
    decisions += [facts.intermittent(h, slow_partners[h]) for h in intermittent]
    unexplained = [p for p in flagged if not set(p) & set(intermittent)]
    open_slow = _partners_of(unexplained)

    remeasure, suspects, open_pairs, left = [], set(), [], []
    settled = explained | set(intermittent)
    links = _link_tests(
        facts,
        (
            p
            for p, s in sorted(summary.items())
            if s == "flapping"
            and not set(p) & settled
            and set(p) <= known_good
            and open_slow.get(p[0], set()) <= {p[1]}
            and open_slow.get(p[1], set()) <= {p[0]}
        ),
        noise=noise,
        options=options,
        min_drop=min_drop,
    )
    for pair, test in links.items():
        if test.named:
            decisions.append(facts.bad_link_by_mean(pair, test))
        elif test.open:  # measured again; a flapping pair is still that when the rounds run out
            remeasure.append(pair)
            left.append(facts.flapping(pair))
    for pair in unexplained:
        a, b = pair
        if pair in links and (links[pair].named or links[pair].open):
            continue
        if summary[pair] == "flapping":
            decisions.append(facts.flapping(pair))
        elif {a, b} <= known_good and open_slow[a] == {b} and open_slow[b] == {a}:
            if len(by_pair[pair]) >= 2:
                decisions.append(facts.bad_link(pair))
            else:
                remeasure.append(pair)
                open_pairs.append(pair)
        else:
            suspects.update(h for h in pair if h not in known_good)
            open_pairs.append(pair)
    slow_somewhere = {h for w in witnesses if w.status in ("slow", "failed") for h in w.pair}
    if_stopped = [facts.left_open(pair) for pair in open_pairs] + left
    if rail_judgement is not None:
        if_stopped += [facts.from_rails(f) for f in rail_judgement.if_stopped]
    return Judgement(
        baseline,
        witnesses,
        tuple(decisions),
        tuple(remeasure),
        tuple(sorted(suspects)),
        tuple(open_pairs),
        tuple(if_stopped),
        known_good,
        known_good - slow_somewhere,
        frozenset(explained),
        rail_judgement,
        rail_judgement.pending if rail_judgement is not None else (),
        means + tuple(links.values()),
        tuple(m.subject for m in means if m.open and m.subject not in suspects),
    )


def _mean_tests(
    facts: _Facts,
    already: set[str],
    named: set[str] | frozenset[str],
    *,
    noise: float | None,
    options: Options,
    min_drop: float,
) -> tuple[MeanTest, ...]:
    """The MEAN TEST of every node not named with a low pair and no failed one. Known-good nodes
    too: at 2 % noise a read of a 7 % slower node lands under the 5 % minimum drop one time in six,
    and two such reads make it known-good. `already`: the nodes the BAD NODE rule named; `named`:
    those and the nodes named before this judgement (known_bad, tested again on their own reads),
    whose pairs measure them, not their partners."""
    baseline = facts.baseline
    if noise is None or baseline is None or baseline.median <= 0:
        return ()
    tests = []
    for host in sorted(facts.partners):
        if host in already:
            continue
        reads = tuple(
            w
            for partner in sorted(facts.partners[host])
            if partner not in named
            for w in facts.by_pair[_pair(host, partner)]
        )
        if not reads or any(w.busbw is None for w in reads) or all(w.status == "ok" for w in reads):
            continue
        witnesses = tuple(p for p in sorted(facts.partners[host]) if p not in named and p in facts.known_good)
        tests.append(
            mean_test(host, reads, witnesses, baseline, noise=noise, options=options, min_drop=min_drop)
        )
    return tuple(tests)


def mean_test(
    subject: str,
    reads: tuple[Witness, ...],
    witnesses: tuple[str, ...],
    baseline: Baseline,
    *,
    noise: float,
    options: Options,
    min_drop: float,
    least_reads: int = 1,
) -> MeanTest:
    """The mean of `reads` over the baseline median against stats.band's fail line, with the noise
    of a mean of n; named with >= 2 `witnesses` and >= `least_reads` reads."""
    values = [w.busbw / baseline.median for w in reads if w.busbw is not None]
    mean = statistics.fmean(values)
    error = noise / len(values) ** 0.5  # the noise of a mean of n
    z = (mean - 1) / error
    verdict = band(z, 1 - mean, options.z_suspect, options.z_fail, min_drop)
    same = all(abs(v - mean) <= SAME_SLOWDOWN_Z * noise for v in values)
    named = verdict == "fail" and same and len(witnesses) >= 2 and len(values) >= least_reads
    # Still open: below the warn line, and a slowdown of min_drop lies within one noise of the
    # mean. A 7 % slower node whose first reads average 4.9 % low is read again; a healthy node
    # with one unlucky read averages too close to the fleet to cost a round.
    still_open = not named and same and z < options.z_suspect and mean < 1 - min_drop + error
    return MeanTest(subject, reads, mean, noise, z, verdict, same, witnesses, named, still_open)


def _link_tests(
    facts: _Facts,
    pairs: Iterable[Pair],
    *,
    noise: float | None,
    options: Options,
    min_drop: float,
) -> dict[Pair, MeanTest]:
    """The MEAN TEST of each of `pairs` (slow in some reads and not in others, both ends known-good
    and in no other unexplained slow pair) on its own reads, with no failed one: a link slowed by a
    few percent reads slow, then just above the fail line. A pair never slow is not read again: at
    2 % noise a quiet night has a handful such, and each would cost a round."""
    baseline = facts.baseline
    if noise is None or baseline is None or baseline.median <= 0:
        return {}
    tests = {}
    for pair in pairs:
        reads = tuple(facts.by_pair[pair])
        if any(w.busbw is None for w in reads):
            continue
        # both ends normal with >= 2 others: the witnesses that it is neither end
        witnesses = tuple(pair)
        tests[pair] = mean_test(
            _label(pair),
            reads,
            witnesses,
            baseline,
            noise=noise,
            options=options,
            min_drop=min_drop,
            least_reads=2,
        )
    return tests


def rail_witnesses(found: Iterable[Reading]) -> tuple[Witness, ...]:
    return tuple(
        Witness(r.round, r.pair, None, r.status, r.rail, r.gbits) for reading in found for r in reading.rails
    )


def _partners_of(pairs: Iterable[Pair]) -> dict[str, set[str]]:
    partners: dict[str, set[str]] = defaultdict(set)
    for a, b in pairs:
        partners[a].add(b)
        partners[b].add(a)
    return partners


@dataclass(frozen=True)
class _Facts:
    """The judged measurements, with the rules that read them and the reasons they write."""

    baseline: Baseline | None
    by_pair: Mapping[Pair, list[Witness]]
    summary: Mapping[Pair, str]
    partners: Mapping[str, Mapping[str, str]]
    normal: Mapping[str, set[str]]
    known_good: frozenset[str]
    means: Mapping[str, MeanTest] = field(default_factory=dict)

    def is_bad_node(self, host: str) -> bool:
        mine = self.partners[host]
        slow = {p for p, s in mine.items() if s == "slow"}
        low_with_all = all(s in ("slow", "suspect") for s in mine.values())
        return low_with_all and len(slow) >= 3 and len(slow & self.known_good) >= 2

    def is_intermittent(self, host: str, slow_partners: set[str]) -> bool:
        """Slow with two or more known-good partners, normal with another: no single cause fits."""
        return len(slow_partners) >= 2 and slow_partners <= self.known_good and bool(self.normal.get(host))

    def bad_node(self, host: str) -> Decision:
        test = self.means.get(host)
        if test is not None and test.named:
            return self.bad_node_by_mean(test)
        mine = sorted(_pair(host, p) for p in self.partners[host])
        slow = [p for p in sorted(self.partners[host]) if self.partners[host][p] == "slow"]
        good = [p for p in slow if p in self.known_good]
        witnesses = tuple(w for pair in mine for w in self.by_pair[pair])
        low = f", below the baseline with the other {len(mine) - len(slow)}" if len(mine) > len(slow) else ""
        reason = (
            f"bad node {host}: slow with {len(slow)} of its {len(mine)} partners{low} "
            f"({'; '.join(str(w) for w in witnesses)}), normal with none; {len(good)} of the slow partners "
            f"known-good ({', '.join(good)}: normal with >= 2 others){self._baseline_text()}"
        )
        return Decision("bad node", host, tuple(mine), witnesses, reason)

    def bad_node_by_mean(self, test: MeanTest) -> Decision:
        reason = (
            f"bad node {test.subject}: {test.text()}, every read within {SAME_SLOWDOWN_Z:g} noises of the "
            f"mean ({'; '.join(str(w) for w in test.reads)}); {len(test.witnesses)} partners known-good "
            f"({', '.join(test.witnesses)}: normal with >= 2 others){self._baseline_text()}"
        )
        pairs = tuple(sorted({w.pair for w in test.reads}))
        return Decision("bad node", test.subject, pairs, test.reads, reason)

    def bad_link_by_mean(self, pair: Pair, test: MeanTest) -> Decision:
        normal = [w for h in pair for p in sorted(self.normal[h]) for w in self.by_pair[_pair(h, p)]]
        reason = (
            f"bad link {_label(pair)}: {test.text()}, every read within {SAME_SLOWDOWN_Z:g} noises of "
            f"the mean ({'; '.join(str(w) for w in test.reads)}) while both ends are normal with others "
            f"({'; '.join(str(w) for w in normal)}){self._baseline_text()}"
        )
        return Decision("bad link", _label(pair), (pair,), test.reads + tuple(normal), reason)

    def bad_link(self, pair: Pair) -> Decision:
        slow = self.by_pair[pair]
        normal = [w for h in pair for p in sorted(self.normal[h]) for w in self.by_pair[_pair(h, p)]]
        reason = (
            f"bad link {_label(pair)}: slow in all {len(slow)} measurements "
            f"({'; '.join(str(w) for w in slow)}) while both ends are normal with others "
            f"({'; '.join(str(w) for w in normal)}){self._baseline_text()}"
        )
        return Decision("bad link", _label(pair), (pair,), tuple(slow) + tuple(normal), reason)

    def flapping(self, pair: Pair) -> Decision:
        ws = self.by_pair[pair]
        slow = sum(w.status in ("slow", "failed") for w in ws)
        reason = (
            f"unresolved {_label(pair)}: slow in {slow} of {len(ws)} measurements "
            f"({'; '.join(str(w) for w in ws)}): a flapping link or node; keep history across nights"
            f"{self._baseline_text()}"
        )
        return Decision("unresolved", _label(pair), (pair,), tuple(ws), reason)

    def intermittent(self, host: str, slow_partners: set[str]) -> Decision:
        pairs = tuple(sorted(_pair(host, p) for p in slow_partners))
        slow = [w for pair in pairs for w in self.by_pair[pair]]
        normal = [w for p in sorted(self.normal[host]) for w in self.by_pair[_pair(host, p)]]
        reason = (
            f"unresolved {host}: slow with {len(slow_partners)} known-good partners "
            f"({'; '.join(str(w) for w in slow)}) and normal with others "
            f"({'; '.join(str(w) for w in normal)}): an intermittent node, or more than one bad link"
            f"{self._baseline_text()}"
        )
        return Decision("unresolved", host, pairs, tuple(slow + normal), reason)

    def left_open(self, pair: Pair) -> Decision:
        ws = [w for h in pair for p in sorted(self.partners[h]) for w in self.by_pair[_pair(h, p)]]
        ends = "; ".join(
            f"{h}: {len(self.normal[h])} normal pair(s), {'' if h in self.known_good else 'not '}known-good"
            for h in pair
        )
        reason = (
            f"unresolved {_label(pair)}: slow ({'; '.join(str(w) for w in self.by_pair[pair])}) and not "
            f"explained by the rounds measured ({ends}){self._baseline_text()}"
        )
        return Decision("unresolved", _label(pair), (pair,), tuple(ws), reason)

    def from_rails(self, finding: RailFinding) -> Decision:
        """A rail rule's finding as a decision: a candidate's node-level witnesses and slow pairs
        with its rail witnesses."""
        rail_ws = rail_witnesses(finding.readings)
        if finding.kind == "bad node":
            node = self.bad_node(finding.subject)
            reason = f"{node.reason}; rail by rail: {finding.reason}"
            return Decision("bad node", node.subject, node.pairs, node.witnesses + rail_ws, reason)
        host = finding.host
        if host is not None and host in self.partners:
            mine = tuple(sorted(_pair(host, p) for p, s in self.partners[host].items() if s != "normal"))
            pair_ws = tuple(w for pair in mine for w in self.by_pair[pair])
        else:
            mine, pair_ws = (), ()
        pairs = mine or tuple(sorted({r.pair for r in finding.readings}))
        reason = finding.reason
        if pair_ws:
            reason += f"; its pairs: {'; '.join(str(w) for w in pair_ws)}{self._baseline_text()}"
        return Decision(
            finding.kind, finding.subject, pairs, rail_ws + pair_ws, reason, host, finding.rail, finding.hca
        )

    def _baseline_text(self) -> str:
        if self.baseline is None:
            return ""
        return f"; baseline median {self.baseline.median:.3g} GB/s over {self.baseline.n} pairs"


# ---------------------------------------------------------------------------------------------
# The planner, round by round


class RoundRobinRounds(Sequence[list[Pair]]):
    """round_robin_pairs(hosts) as a sequence whose rounds are built when asked for (O(n) each)."""

    def __init__(self, hosts: Sequence[str]) -> None:
        self.hosts = list(hosts)
        n = len(self.hosts)
        self._count = 0 if n < 2 else n - 1 + n % 2

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._count))]
        if not -self._count <= index < self._count:
            raise IndexError(index)
        return round_robin_round(self.hosts, index % self._count)


class Planner:
    """Plans each round from what the last ones measured; the same object serves a real run and a
    simulator:

        planner = Planner(hosts, groups=leaf_of, seed=night, rails={"node1": [0, 1, 2, 3], ...})
        while (pairs := planner.next_round()) is not None:
            planner.record(
                {pair: busbw_or_None for pair in pairs},
                rails={p: {k: gbits_or_None for k in planner.rails_of(p)} for p in planner.rail_pairs},
            )
        planner.decisions, planner.log

    `rails` (host -> rail indices; None or {}: no rail checks, the plan of old) turns on the rail
    checks of an adaptive plan: the rail sample in the first localisation round, and bad-node
    candidates read rail by rail with known-good partners before they are named. `hcas` (host ->
    rail -> HCA) only names the NICs in the reasons.
    """

    def __init__(
        self,
        hosts: Sequence[str],
        *,
        k: int = 3,
        groups: Mapping[str, str] | None = None,
        seed: int | str = 0,
        localisation_rounds: int = 3,
        options: Options = DEFAULT_OPTIONS,
        min_drop: float = DEFAULT_MIN_DROP,
        round_robin: bool = False,
        rails: Mapping[str, Sequence[int]] | None = None,
        rail_sample: int = DEFAULT_RAIL_SAMPLE,
        rail_min_drop: float = DEFAULT_RAIL_MIN_DROP,
        hcas: Mapping[str, Mapping[int, str]] | None = None,
    ) -> None:
        self.hosts = sorted(hosts)
        self.groups = dict(groups or {})
        self.rails: dict[str, tuple[int, ...]] = {
            h: tuple(sorted(set(rails[h]))) for h in self.hosts if rails and rails.get(h)
        }
        self.rail_sample = rail_sample
        self.rail_min_drop = rail_min_drop
        self.hcas = {h: dict(v) for h, v in (hcas or {}).items()}
        self.rail_measurements: list[RailMeasurement] = []
        self.rail_rounds: list[list[Pair]] = []  # the rail pairs of every round measured
        # Round robin: every pair once, judged by the same rules, no localisation round (every
        # link is measured anyway). Its rounds are built one at a time (RoundRobinRounds).
        self.round_robin = round_robin
        self.initial: Sequence[list[Pair]] = (
            RoundRobinRounds(self.hosts) if round_robin else initial_rounds(self.hosts, k, groups, seed)
        )
        # Round robin measures every pair once and never pairs again; with rails it still reads them
        # after its rounds (the sample, then the bad-node candidates), in rounds of rail reads alone.
        self.localisation_rounds = 0 if round_robin and not self.rails else localisation_rounds
        self.options = options
        self.min_drop = min_drop
        self.measurements: list[Measurement] = []
        self.rounds: list[list[Pair]] = []  # measured so far
        self.log: list[str] = []
        self.judgement = judge([], options, min_drop)
        self.noise: float | None = None  # the night's pair noise, once the first rounds are measured
        self._rng = random.Random(f"{seed}:localise")
        self._planned: list[Pair] | None = None
        self._planned_rails: list[Pair] = []
        self._final: tuple[Decision, ...] | None = None
        self._logged: set[tuple[str, str]] = set()

    @property
    def first_kind(self) -> str:
        """What the rounds before any localisation are called: initial, or round-robin."""
        return "round-robin" if self.round_robin else "initial"

    @property
    def max_rounds(self) -> int:
        """The most rounds this plan can run: its first rounds and every localisation round."""
        return len(self.initial) + self.localisation_rounds

    @property
    def localised(self) -> int:
        return max(0, len(self.rounds) - len(self.initial))

    @property
    def finished(self) -> bool:
        return self._final is not None

    @property
    def decisions(self) -> tuple[Decision, ...]:
        """The final decisions once finished; before that, those made so far."""
        return self._final if self._final is not None else self.judgement.decisions

    def next_round(self) -> list[Pair] | None:
        """The pairs to run next, all at once; [] when the round only reads rails (rail_pairs);
        None when the plan is done."""
        if self._final is not None:
            return None
        if self._planned is None:
            if len(self.rounds) < len(self.initial):
                self._planned = self.initial[len(self.rounds)]
            elif self.localised < self.localisation_rounds:
                pairs = self._localisation_round()
                self._planned = pairs if pairs or self._planned_rails else None
        if self._planned is None:
            self._finish()
            return None
        return self._planned

    @property
    def rail_pairs(self) -> list[Pair]:
        """The planned round's pairs to read rail by rail (hosts apart from the nccl pairs')."""
        return list(self._planned_rails) if self._planned is not None else []

    def rails_of(self, pair: Pair) -> tuple[int, ...]:
        """The rails a pair is read on: those both hosts have."""
        a, b = pair
        return tuple(sorted(set(self.rails.get(a, ())) & set(self.rails.get(b, ()))))

    def record(
        self,
        results: Mapping[Pair, float | None],
        rails: Mapping[Pair, Mapping[int, float | None]] | None = None,
    ) -> Judgement:
        """Feed the busbw of every pair of the round next_round() gave (None: the launch failed), and
        the Gb/s of every rail of every rail pair (None: that rail's client failed; a rail left out
        counts as failed)."""
        if self._planned is None:
            raise ValueError("no round is planned: call next_round() first")
        got_rails = {_pair(*pair): dict(values) for pair, values in (rails or {}).items()}
        if set(got_rails) != set(self._planned_rails):
            missing = sorted(set(self._planned_rails) - set(got_rails))
            extra = sorted(set(got_rails) - set(self._planned_rails))
            raise ValueError(
                "a round's rail readings must cover its rail pairs exactly: "
                f"missing {', '.join(map(_label, missing)) or 'none'}; "
                f"not planned {', '.join(map(_label, extra)) or 'none'}"
            )
        for pair, values in got_rails.items():
            unknown = sorted(set(values) - set(self.rails_of(pair)))
            if unknown:
                raise ValueError(f"{_label(pair)}: rails {unknown} are not rails of both hosts")
        got = {_pair(*pair): value for pair, value in results.items()}
        if set(got) != set(self._planned):
            missing = sorted(set(self._planned) - set(got))
            extra = sorted(set(got) - set(self._planned))
            raise ValueError(
                "a round's results must cover its pairs exactly: "
                f"missing {', '.join(map(_label, missing)) or 'none'}; "
                f"not planned {', '.join(map(_label, extra)) or 'none'}"
            )
        number = len(self.rounds) + 1
        self.measurements.extend(Measurement(number, pair, got[pair]) for pair in self._planned)
        self.rail_measurements.extend(
            RailMeasurement(number, pair, k, got_rails[pair].get(k))
            for pair in self._planned_rails
            for k in self.rails_of(pair)
        )
        self.rounds.append(self._planned)
        self.rail_rounds.append(self._planned_rails)
        if self.noise is None and len(self.rounds) >= len(self.initial):
            # Measured from the first rounds alone: the later ones pair suspects on purpose.
            self.noise = measured_noise(
                m.busbw for m in self.measurements if m.round <= len(self.initial) and m.busbw is not None
            )
            if self.noise is not None:
                self.log.append(
                    f"round {number}: pair noise {self.noise:.2%} of the fleet "
                    f"(1.4826 x MAD of the {self.first_kind} rounds' pairs)"
                )
        self._planned = None
        self._planned_rails = []
        # A node once named bad stays out of the baseline: on a small fleet its pairs and a bad link's
        # are a third of all pairs, enough to widen the spread until neither looks slow any more.
        named = _bad_nodes(self.judgement)
        self.judgement = self._judge(named)
        if _bad_nodes(self.judgement) - named:
            named |= _bad_nodes(self.judgement)
            self.judgement = self._judge(named)
        self._log_round(number)
        return self.judgement

    def _judge(self, named: frozenset[str]) -> Judgement:
        return judge(
            self.measurements,
            self.options,
            self.min_drop,
            named,
            rails=self.rails,
            rail_measurements=self.rail_measurements,
            rail_min_drop=self.rail_min_drop,
            hcas=self.hcas,
            noise=self.noise,
        )

    def _localisation_round(self) -> list[Pair]:
        """Link candidates again; each suspect with a known-good node it has not met (not after a
        round robin: it met every node once); then the rail reads."""
        j = self.judgement
        busy: set[str] = set()
        pairs = []
        plan = []
        for a, b in () if self.round_robin else j.remeasure:
            if not {a, b} & busy:
                pairs.append((a, b))
                busy.update((a, b))
                plan.append(f"{a}--{b} again (link candidate)")
        met: dict[str, set[str]] = defaultdict(set)
        for m in self.measurements:
            met[m.pair[0]].add(m.pair[1])
            met[m.pair[1]].add(m.pair[0])
        pool = [h for h in self.hosts if h in j.clean]  # in no slow pair: outside every open question
        self._rng.shuffle(pool)
        tests = {m.subject: m for m in j.means}
        for suspect in () if self.round_robin else (*j.suspects, *j.retest):
            if suspect in busy:
                continue
            partner = next((g for g in pool if g not in busy and g not in met[suspect]), None)
            if partner is not None:
                pairs.append(_pair(suspect, partner))
                busy.update((suspect, partner))
                why = f" ({tests[suspect].text()})" if suspect in j.retest else ""
                plan.append(f"suspect {suspect} with known-good {partner}{why}")
        self._planned_rails = self._rail_round(busy, plan) if self.rails else []
        if plan:
            self.log.append(f"round {len(self.rounds) + 1} planned: " + "; ".join(plan))
        return sorted(pairs)

    def _rail_round(self, busy: set[str], plan: list[str]) -> list[Pair]:
        """Each host waiting for its rails with a known-good host it has not been read with; in the
        first localisation round, the rail sample: disjoint pairs of such hosts, spread over the
        groups (a slow leaf slows every pair alike: only a sample reads it). Partners are known-good
        and in no slow pair left unexplained (after a round robin every host met the bad node)."""
        j = self.judgement
        unexplained = {h for pair in j.open_pairs for h in pair} | set(j.explained)
        pool = [h for h in self.hosts if h in j.known_good and h not in unexplained]
        self._rng.shuffle(pool)
        rail_met: dict[str, set[str]] = defaultdict(set)
        for m in self.rail_measurements:
            rail_met[m.pair[0]].add(m.pair[1])
            rail_met[m.pair[1]].add(m.pair[0])
        pool = [h for h in pool if h in self.rails]
        pairs = []
        for host in j.rail_pending:
            if host in busy or host not in self.rails:
                continue
            partner = next((g for g in pool if g not in busy and g not in rail_met[host] and g != host), None)
            if partner is not None:
                pairs.append(_pair(host, partner))
                busy.update((host, partner))
                plan.append(f"rails of {host} with known-good {partner}")
        if self.localised == 0 and self.rail_sample > 0:
            free = [h for h in pool if h not in busy]
            by_group: dict[str, list[str]] = defaultdict(list)
            for h in free:
                by_group[self.groups.get(h, "")].append(h)
            # One host from each group in turn: consecutive hosts then sit in different groups.
            spread = [h for row in itertools.zip_longest(*by_group.values()) for h in row if h is not None]
            sample = [_pair(spread[i], spread[i + 1]) for i in range(0, len(spread) - 1, 2)][
                : self.rail_sample
            ]
            pairs += sample
            if sample:
                plan.append(f"rail sample {', '.join(map(_label, sorted(sample)))}")
        return sorted(pairs)

    def _finish(self) -> None:
        j = self.judgement
        self._final = j.decisions + j.if_stopped
        for d in j.if_stopped:
            self.log.append(d.reason)
        for test in j.means:
            if test.open:  # between the lines when the rounds ran out: logged, never failed
                short = (
                    f"{len(test.witnesses)} known-good partner(s), 2 needed"
                    if test.verdict == "fail"
                    else "above the fail line"
                )
                self.log.append(f"suspect {test.subject} left suspect: {test.text()}; {short}")
        counts = {kind: sum(d.kind == kind for d in self._final) for kind in DECISION_KINDS}
        rails = f"{counts['bad nic']} bad NIC(s), {counts['bad rail']} bad rail(s), " if self.rails else ""
        self.log.append(
            f"done after {len(self.rounds)} rounds ({len(self.rounds) - self.localised} {self.first_kind}, "
            f"{self.localised} localisation): "
            f"{counts['bad node']} bad node(s), {counts['bad link']} bad link(s), {rails}"
            f"{counts['unresolved']} unresolved"
        )

    def _log_round(self, number: int) -> None:
        j = self.judgement
        kind = self.first_kind if number <= len(self.initial) else "localisation"
        base = "no baseline yet"
        if j.baseline is not None:
            b = j.baseline
            base = f"baseline median {b.median:.3g} GB/s, spread {b.scale:.3g} over {b.n} pairs"
        flagged = [w for w in j.witnesses if w.round == number and w.status != "ok"]
        self.log.append(
            f"round {number} ({kind}, {len(self.rounds[-1])} pairs): {base}; "
            + ("; ".join(str(w) for w in flagged) if flagged else "no slow or suspect pair")
        )
        if self.rail_rounds[-1] and j.rails is not None:
            read = [x for r in j.rails.readings if r.round == number for x in r.rails]
            slow = [str(x) for x in read if x.bad]
            reference = (
                "no reference" if j.rails.reference is None else f"reference {j.rails.reference:.0f} Gb/s"
            )
            self.log.append(
                f"round {number} rails: {len(self.rail_rounds[-1])} pair(s), {len(read)} rail(s) read, "
                f"{reference}; " + ("; ".join(slow) if slow else "no slow rail")
            )
        for d in j.decisions:
            if (d.kind, d.subject) not in self._logged:
                self._logged.add((d.kind, d.subject))
                self.log.append(d.reason)
