"""Host pairs: tell a bad node (all its pairs slow) from a bad link (one pair slow) from a slow fabric.

Each pair's busbw at the reference size is compared with a baseline that a bad node cannot
drag down: the median over hosts of each host's median pair. A pair is bad when it is far
below that baseline, or when its launch failed. Then, greedily, a host whose every remaining
pair is bad (at least two) is a bad node and explains those pairs; what stays unexplained is
a bad link. With an absolute expectation (verdicts/fabric.py: for ring collectives the profile's
fraction of the line rate of the NICs NCCL uses), a baseline below it means the whole fabric is slow.

With a pair plan (inter/pairs/plan.json, the adaptive schedule's decisions, collbench_py.pairplan)
for the collective, the plan names the cause of the pairs it decided about: it measured again and
paired suspects with known-good nodes, which one night's logs judged together cannot. The two never
contradict each other: the plan's bad node fails that node, its bad link fails both ends, and
the pairs it decided leave the greedy count. What the plan left unresolved (a node slow with too
few partners to convict, as every node of a 3-host round robin is; a flapping pair) is judged from
the logs alone, as a pair the plan decided nothing about is (a failure is never dropped because
the plan missed it, and a healthy partner of a slow node is not failed because the plan could not
tell them apart); the plan's section still lists it with its witnesses.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from collbench_py.planfile import PlanDecision, PlanRecord, PlanWitness
from collbench_py.profiles import Profile
from collbench_py.rundir import Host, LogData
from collbench_py.verdicts.bandwidth import sizes_text
from collbench_py.verdicts.fabric import PairBar, nccl_ib_hca, pair_bar
from collbench_py.verdicts.model import Check, FleetStat, Options, PairResult
from collbench_py.verdicts.stats import SEVERE_DROP, band, reference_sizes, robust_scale, series, value_at


def judge_pairs(  # noqa: PLR0917 - one call site
    collective: str,
    logs: list[LogData],
    hosts: dict[str, Host],
    profile: Profile | None,
    options: Options,
    min_drop: float,
    parameters: Mapping[str, Any] | None = None,
    launcher_failed: Collection[str] = frozenset(),
    plan: PlanRecord | None = None,
) -> tuple[list[PairResult], dict[str, Check], list[Check], FleetStat | None]:
    """Pair results, one check per host involved, fleet-level checks, and the statistics.

    `plan` is the run's pair plan; its decisions count when it judged this collective.
    `parameters` are the manifest's: the launch environment may name the HCAs NCCL uses.
    A pair whose launch failed before its ranks ran (its log in `launcher_failed`) measured
    nothing about the pair: its status and cause are `launcher`, and it blames no node or link."""
    name = f"pairs/{collective}"
    points = {log.launch.log: series(log.run) for log in logs if _measured(log)}
    sizes, fallback = reference_sizes(
        ([s for s, _ in p] for p in points.values()), options.reference_min_bytes, options.reference_sizes
    )
    values: dict[str, float] = {}
    for log in logs:
        value = value_at(points.get(log.launch.log, []), sizes)
        if value is not None and value > 0:
            values[log.launch.log] = value
    per_host: dict[str, list[float]] = defaultdict(list)
    for log in logs:
        if log.launch.log in values:
            for h in log.launch.hosts:
                per_host[h].append(values[log.launch.log])
    stat = None
    baseline = scale = None
    if per_host:
        host_medians = {h: statistics.median(v) for h, v in per_host.items()}
        baseline = statistics.median(host_medians.values())
        scale = robust_scale(host_medians.values(), baseline, options.mad_floor)
        stat = FleetStat(
            kind="pair",
            collective=collective,
            sizes=sizes,
            fallback=fallback,
            median=baseline,
            scale=scale,
            n=len(values),
            values={_label(log): values[log.launch.log] for log in logs if log.launch.log in values},
            z={
                _label(log): (values[log.launch.log] - baseline) / scale
                for log in logs
                if log.launch.log in values
            },
        )
    relative = stat is not None and len(values) >= options.min_fleet
    results: list[PairResult] = []
    for log in sorted(logs, key=lambda lg: lg.launch.hosts):
        pair = (log.launch.hosts[0], log.launch.hosts[-1])
        value = values.get(log.launch.log)
        if log.launch.status == "skipped":
            continue
        if value is None and log.launch.log in launcher_failed:
            results.append(PairResult(pair, collective, None, "launcher", None, "launcher", log.launch.log))
            continue
        if value is None:
            results.append(PairResult(pair, collective, None, "failed", None, None, log.launch.log))
            continue
        z = (value - baseline) / scale if baseline and scale else None
        status = "ok"
        if relative and z is not None and baseline:
            drop = (baseline - value) / baseline
            status = {"fail": "slow", "warn": "suspect", "pass": "ok"}[
                band(z, drop, options.z_suspect, options.z_fail, min_drop)
            ]
        results.append(PairResult(pair, collective, value, status, z, None, log.launch.log))

    decisions = (
        tuple(d for d in plan.decisions if d.kind != "unresolved")
        if plan is not None and plan.collective == collective
        else ()
    )
    results = _attribute(results, _plan_causes(decisions))
    fleet_checks: list[Check] = []
    if plan is not None and plan.collective == collective:
        fleet_checks.append(plan_summary_check(name, plan))
    involved = [hosts[h] for h in sorted({h for log in logs for h in log.launch.hosts}) if h in hosts]
    bar = pair_bar(collective, profile, involved, nccl_ib_hca(logs, parameters or {}))
    fabric = _fabric_check(name, collective, stat, bar, sizes)
    if fabric is not None:
        fleet_checks.append(fabric)
    if stat is not None and stat.fallback:
        fleet_checks.append(
            Check(name, "note", f"no pair measured {collective} at >= 256 MiB; scored at {sizes_text(sizes)}")
        )
    slow_below = _slow_below(baseline, scale, options, min_drop) if relative else None
    host_checks = _host_checks(
        name,
        [r for r in results if r.status != "launcher"],
        _baseline_text(collective, baseline, slow_below),
        fabric,
        decisions,
        hosts,
    )
    return results, host_checks, fleet_checks, stat


def _plan_causes(decisions: Iterable[PlanDecision]) -> dict[tuple[str, str], str]:
    """The cause the plan gives each pair it decided about: node <host>, link, or unresolved."""
    causes: dict[tuple[str, str], str] = {}
    for d in decisions:
        cause = (
            f"node {d.subject}" if d.kind == "bad node" else "link" if d.kind == "bad link" else "unresolved"
        )
        for pair in d.pairs:
            causes.setdefault(tuple(sorted(pair)), cause)  # type: ignore[arg-type]
    return causes


def plan_summary_check(name: str, plan: PlanRecord) -> Check:
    """What the plan did, in one line: a note, or a warning when it stopped before its end."""
    kinds = {
        kind: sum(d.kind == kind for d in plan.decisions) for kind in ("bad node", "bad link", "unresolved")
    }
    by_kind = {
        kind: sum(r.kind == kind for r in plan.rounds) for kind in ("initial", "localisation", "round-robin")
    }
    rounds = ", ".join(f"{n} {kind}" for kind, n in by_kind.items() if n)
    measured = sum(len(r.pairs) for r in plan.rounds)
    text = (
        f"pair plan ({plan.schedule}, {len(plan.rounds)} rounds{': ' + rounds if rounds else ''}, "
        f"{measured} pair measurements of {plan.collective}): {kinds['bad node']} bad node(s), "
        f"{kinds['bad link']} bad link(s), {kinds['unresolved']} unresolved"
    )
    if plan.finished:
        return Check(f"{name}/plan", "note", text)
    return Check(
        f"{name}/plan",
        "warn",
        text + "; the plan did not finish (the run stopped before its last round): its decisions so far "
        "are used, the other slow pairs are judged from the logs",
    )


def witness_line(w: PlanWitness) -> str:
    value = "failed" if w.busbw is None else f"{w.busbw:.3g} GB/s"
    return f"round {w.round}: {w.pair[0]}--{w.pair[1]} {value} ({w.status})"


def _plan_check(name: str, host: str, decision: PlanDecision, logs: tuple[str, ...]) -> Check:
    what = {"bad node": "bad node", "bad link": "bad link", "unresolved": "unresolved"}[decision.kind]
    lead = f"{what} (pair plan)"
    if decision.kind == "unresolved":
        lead += ": slow pair(s) the plan could not pin on a node or a link, so neither end is cleared"
    return Check(
        name,
        "fail",
        f"{lead}: {decision.reason}",
        host,
        tuple(witness_line(w) for w in decision.witnesses),
        logs[0] if logs else None,
    )


def _decisions_by_host(decisions: Iterable[PlanDecision]) -> dict[str, list[PlanDecision]]:
    """Each host's decisions, its own first: a bad node is its subject; a bad link and an
    unresolved pair concern both ends; an unresolved node, the node."""
    mine: dict[str, list[PlanDecision]] = defaultdict(list)
    order = {"bad node": 0, "bad link": 1, "unresolved": 2}
    for d in sorted(decisions, key=lambda d: order[d.kind]):
        for host in d.subject.split("--") if "--" in d.subject else [d.subject]:
            mine[host].append(d)
    return mine


def _measured(log: LogData) -> bool:
    return log.run is not None and log.run.status == "ok" and log.launch.status not in ("failed", "timeout")


def _label(log: LogData) -> str:
    return "--".join(log.launch.hosts)


def _attribute(results: list[PairResult], planned: Mapping[tuple[str, str], str]) -> list[PairResult]:
    """Name the cause of each bad pair: the plan's where it decided about the pair, else a bad node
    where all that node's remaining pairs are bad (the plan's pairs left out of the count)."""
    bad = {r.hosts for r in results if r.status in ("slow", "failed")}
    # A failed launch is the worst; otherwise the further below the fleet, the worse.
    worst = {r.hosts: math.inf if r.busbw is None else -(r.z or 0.0) for r in results}
    nodes = blame_nodes([r.hosts for r in results if r.hosts not in planned], bad, worst)
    out = []
    for r in results:
        if r.status in ("slow", "failed"):
            cause = planned.get(r.hosts) or (f"node {nodes[r.hosts]}" if r.hosts in nodes else "link")
            out.append(PairResult(r.hosts, r.collective, r.busbw, r.status, r.z, cause, r.log))
        else:
            out.append(r)
    return out


def blame_nodes(
    pairs: Iterable[tuple[str, str]],
    bad: set[tuple[str, str]],
    severity: Mapping[tuple[str, str], float] | None = None,
) -> dict[tuple[str, str], str]:
    """The node each bad pair is blamed on: one whose every remaining pair (two or more) is bad.

    Repeated until no node qualifies; a blamed node's pairs leave the count, so a second bad
    node is still found. Between nodes with as many bad pairs, the one whose bad pairs are the
    worst (`severity`, larger is worse) goes first. A bad pair with no node to blame is the
    link's own.
    """
    remaining = set(pairs)
    severity = severity or {}
    nodes: dict[tuple[str, str], str] = {}
    while True:
        counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # host -> [bad, total]
        for pair in remaining:
            for h in pair:
                counts[h][1] += 1
                counts[h][0] += pair in bad
        ranked = [
            (-b, -statistics.median(severity.get(p, 0.0) for p in remaining if h in p), h)
            for h, (b, total) in counts.items()
            if b >= 2 and b == total
        ]
        if not ranked:
            return nodes
        *_, node = min(ranked)
        for pair in [p for p in remaining if node in p]:
            if pair in bad:
                nodes[pair] = node
            remaining.discard(pair)


def _describe(r: PairResult) -> str:
    if r.busbw is None:
        return f"{r.label} failed"
    return f"{r.label} {r.busbw:.3g} GB/s"


def _slow_below(
    baseline: float | None, scale: float | None, options: Options, min_drop: float
) -> float | None:
    """The busbw under which a pair is slow (stats.band's fail line, in GB/s): far below the
    median in robust z and by more than the minimum drop, or half the median and an outlier."""
    if not baseline or not scale:
        return None
    far = min(baseline * (1 - min_drop), baseline + options.z_fail * scale)
    halved = min(baseline * (1 - max(min_drop, SEVERE_DROP)), baseline + options.z_suspect * scale)
    return max(far, halved)


def _baseline_text(collective: str, baseline: float | None, slow_below: float | None) -> str:
    if not baseline:
        return f"no {collective} pair measured"
    text = f"{collective} pair median {baseline:.3g} GB/s"
    return text + (f", slow below {slow_below:.3g} GB/s" if slow_below else "")


def _host_checks(  # noqa: PLR0917 - one call site
    name: str,
    results: list[PairResult],
    base: str,
    fabric: Check | None,
    decisions: Iterable[PlanDecision] = (),
    known: Collection[str] = (),
) -> dict[str, Check]:
    by_host: dict[str, list[PairResult]] = defaultdict(list)
    for r in results:
        for h in r.hosts:
            by_host[h].append(r)
    planned = _decisions_by_host(decisions)
    checks: dict[str, Check] = {}
    # A host of the plan that the run does not have gets no verdict (the run's notes name it).
    for host in sorted(set(by_host) | (set(planned) & set(known))):
        mine = by_host.get(host, [])
        bad = [r for r in mine if r.status in ("slow", "failed")]
        suspect = [r for r in mine if r.status == "suspect"]
        own = [r for r in bad if r.cause == f"node {host}"]
        links = [r for r in bad if r.cause == "link"]
        others = [r for r in bad if r.cause and r.cause.startswith("node ") and r not in own]
        # An intermittent node's pairs (the plan's unresolved node) are that node's question.
        others += [r for r in bad if r.cause == "unresolved" and host not in planned]
        logs = tuple(r.log for r in bad if r.log)
        if host in planned:
            # The plan's decision about this host; pairs the plan did not decide about that the logs
            # judge bad are named too, so that nothing measured is dropped.
            check = _plan_check(name, host, planned[host][0], logs)
            undecided = [
                r for r in bad if r.cause in ("link", f"node {host}") and not _in_decisions(r, planned[host])
            ]
            if undecided:
                more = "; also slow, not among the plan's decisions: " + "; ".join(
                    _describe(r) for r in undecided
                )
                check = Check(check.name, check.status, check.reason + more, host, check.evidence, check.log)
            checks[host] = check
        elif own:
            listed = "; ".join(_describe(r) for r in own)
            reason = (
                f"bad node: all {len(own)} of its pairs are slow or failed ({listed}; {base}) while its "
                "partners are normal with other hosts: the node itself (NIC, PCIe, its switch port), "
                "not one link"
            )
            checks[host] = Check(name, "fail", reason, host, logs)
        elif links:
            listed = "; ".join(_describe(r) for r in links)
            normal = len(mine) - len(bad)
            alone = [r for r in links if _only_pair(r, by_host)]
            hint = (
                " (one endpoint has no other pair: node or link)"
                if alone
                else ": both ends are normal on their other pairs, so the link (cable, switch port, route), "
                "not a node"
            )
            reason = (
                f"bad link: {listed} ({base}); {normal} of this host's {len(mine)} pairs are normal{hint}"
            )
            if decisions:
                reason += "; the pair plan decided nothing about it, judged from the logs"
            checks[host] = Check(name, "fail", reason, host, logs)
        elif fabric is not None and fabric.status == "fail":
            checks[host] = Check(name, "fail", "fabric uniformly slow: " + fabric.reason, host)
        elif suspect:
            listed = "; ".join(_describe(r) for r in suspect)
            checks[host] = Check(name, "warn", f"pair(s) below the others: {listed} ({base})", host)
        else:
            note = ""
            if others:
                names = sorted({h for r in others for h in r.hosts if h != host})
                note = "; slow pairs with " + ", ".join(names) + " are theirs"
            checks[host] = Check(name, "pass", f"{len(mine)} pair(s) normal ({base}){note}", host)
    return checks


def _in_decisions(r: PairResult, decisions: list[PlanDecision]) -> bool:
    return any(tuple(sorted(p)) == r.hosts for d in decisions for p in d.pairs)


def _only_pair(r: PairResult, by_host: dict[str, list[PairResult]]) -> bool:
    return any(len(by_host[h]) == 1 for h in r.hosts)


def _fabric_check(
    name: str,
    collective: str,
    stat: FleetStat | None,
    bar: PairBar | None,
    sizes: tuple[int, ...],
) -> Check | None:
    """Every pair slow alike: only an absolute expectation can tell. It is the collective's own:
    ring collectives against the line rate of the NICs NCCL uses, the others against their own
    figure or, without one, only against each other (a note says so)."""
    if stat is None or bar is None:
        return None
    if bar.threshold is None:
        return Check(f"{name}/bar", "note", f"{bar.text}; judged against the other pairs only")
    text = f"pair {collective} median {stat.median:.3g} GB/s at {sizes_text(sizes)} vs {bar.text}"
    if stat.median >= bar.threshold:
        return Check(name, "pass", text)
    return Check(name, "fail", "every pair alike, so not one node or link: the fabric is slow: " + text)
