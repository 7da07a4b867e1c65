"""Host pairs: tell a bad node (all its pairs slow) from a bad link (one pair slow) from a slow fabric.

Each pair's busbw at the reference size is compared with a baseline that a bad node cannot
drag down: the median over hosts of each host's median pair. A pair is bad when it is far
below that baseline, or when its launch failed. Then, greedily, a host whose every remaining
pair is bad (at least two) is a bad node and explains those pairs; what stays unexplained is
a bad link. With an absolute expectation (verdicts/fabric.py: for ring collectives the profile's
fraction of the line rate of the NICs NCCL uses), a baseline below it means the whole fabric is slow.

With a pair plan (inter/pairs/plan.json, the adaptive schedule's decisions, collbench_py.pairs.planner)
for the collective, the plan names the cause of the pairs it decided about: it measured again and
paired suspects with known-good nodes, which one night's logs judged together cannot. The two never
contradict each other, and they make one conclusion (`conclude`): the plan's bad nodes and bad links,
then what the logs show about every pair the plan did not decide. A bad node fails that node; a bad
link is a finding of its own (the run fails, exit 1) and neither of its ends is failed for it, each
gets a note naming the link. What the plan left unresolved (a node slow with too few partners to
convict, as every node of a 3-host round robin is; a flapping pair) is judged from the logs alone, as
a pair the plan decided nothing about is (a failure is never dropped because the plan missed it, and
a healthy partner of a slow node is not failed because the plan could not tell them apart); where the
logs would call such a pair a link, it stays unresolved, as a slow pair with an end that has no other
pair does.

Rails (verdicts/rail_findings.py): a slow pair that the plan's rail measurements explain (one
host's NIC of rail k, or rail k's leaf) is that finding's. It counts towards no bad node and is no
bad link: the NIC's host fails for its NIC (named there), its partners pass, a bad rail fails no host.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace
from typing import Any

from collbench_py.profiles import Profile
from collbench_py.rundir.load import Host, LogData
from collbench_py.rundir.planfile import PlanDecision, PlanRecord, PlanWitness
from collbench_py.verdicts.bandwidth import sizes_text
from collbench_py.verdicts.fabric import PairBar, nccl_ib_hca, pair_bar
from collbench_py.verdicts.model import Check, Finding, FleetStat, Options, PairResult
from collbench_py.verdicts.rail_findings import RailFinding, RailPlan, explained_by, nic_name, pair_causes
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
    rails: RailPlan | None = None,
) -> tuple[list[PairResult], dict[str, Check], list[Check], FleetStat | None, list[Finding]]:
    """Pair results, one check per host involved, fleet-level checks, the statistics, and the
    conclusion (bad nodes, bad links, unresolved; `conclude`).

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
        tuple(d for d in plan.decisions if d.kind != "unresolved" and not _about_a_rail(d))
        if plan is not None and plan.collective == collective
        else ()
    )
    # The rails' causes first: a pair a NIC or a leaf explains is not a node's or a link's.
    results = _attribute(results, {**_plan_causes(decisions), **pair_causes(rails)})
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
    base = _baseline_text(collective, baseline, slow_below)
    judged = [r for r in results if r.status != "launcher"]
    unresolved = (
        tuple(d for d in plan.decisions if d.kind == "unresolved" and not _about_a_rail(d))
        if plan is not None and plan.collective == collective
        else ()
    )
    findings = conclude(collective, judged, base, decisions, unresolved, (baseline, slow_below, sizes))
    host_checks = _host_checks(name, judged, base, fabric, findings, hosts, rails)
    return results, host_checks, fleet_checks, stat, findings


def _about_a_rail(d: PlanDecision) -> bool:
    """A decision about a NIC or a leaf: the rails' (verdicts/rail_findings.py), not a pair's."""
    return d.kind in ("bad nic", "bad rail") or getattr(d, "rail", None) is not None


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
    # Its counts are not a conclusion of their own: the pairs conclusion (`conclude`) says it once.
    decided = ", ".join(f"{n} {kind}" for kind, n in kinds.items() if n) or "no decision"
    text = (
        f"pair plan ({plan.schedule}, {len(plan.rounds)} rounds{': ' + rounds if rounds else ''}, "
        f"{measured} pair measurements of {plan.collective}"
        + ("" if plan.noise is None else f", the night's pair noise {plan.noise:.2%} of the fleet")
        + f") decided: {decided}; the pairs conclusion joins its decisions with what the logs show"
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


def conclude(  # noqa: PLR0917 - one call site
    collective: str,
    results: list[PairResult],
    base: str,
    decisions: Iterable[PlanDecision] = (),
    unresolved: Iterable[PlanDecision] = (),
    figures: tuple[float | None, float | None, tuple[int, ...]] = (None, None, ()),
) -> list[Finding]:
    """The pairs' one conclusion for a collective: each bad pair explained by one finding.

    The plan's bad nodes and bad links first (it measured again, with known-good partners); then,
    from the logs, the nodes whose every remaining pair is bad, the links between hosts normal
    elsewhere, and what neither can tell: a slow pair with an end that has no other pair, or a pair
    the plan left unresolved that the logs would call a link."""
    baseline, slow_below, sizes = figures
    bad = [r for r in results if r.status in ("slow", "failed")]
    by_host: dict[str, list[PairResult]] = defaultdict(list)
    for r in results:
        for h in r.hosts:
            by_host[h].append(r)
    findings: list[Finding] = []
    decided: set[tuple[str, str]] = set()
    for d in decisions:
        pairs = {tuple(sorted(p)) for p in d.pairs}
        decided |= pairs  # type: ignore[arg-type]
        hosts = tuple(d.subject.split("--")) if "--" in d.subject else (d.subject,)
        findings.append(
            Finding(
                d.kind,  # type: ignore[arg-type]
                d.subject,
                hosts,
                collective,
                "plan",
                d.reason,
                tuple(r for r in bad if r.hosts in pairs),
                tuple(witness_line(w) for w in d.witnesses),
                baseline,
                slow_below,
                sizes,
            )
        )
    left_unresolved = {tuple(sorted(p)): d for d in unresolved for p in d.pairs}
    nodes: dict[str, list[PairResult]] = defaultdict(list)
    for r in bad:
        if r.hosts in decided or _rail_cause(r.cause):
            continue  # a rail finding (a NIC, a leaf) explains it
        if r.cause and r.cause.startswith("node "):
            nodes[r.cause[5:]].append(r)
            continue
        plan_could_not = left_unresolved.get(r.hosts)
        if plan_could_not is not None or _only_pair(r, by_host):
            why = (
                f"the pair plan could not tell: {plan_could_not.reason}"
                if plan_could_not is not None
                else "one end has no other pair, so node or link cannot be told apart"
            )
            findings.append(
                Finding(
                    "unresolved",
                    r.label,
                    r.hosts,
                    collective,
                    "plan" if plan_could_not is not None else "logs",
                    f"{_describe(r)} ({base}); {why}: re-pair each end with a known-good node",
                    (r,),
                    tuple(witness_line(w) for w in plan_could_not.witnesses) if plan_could_not else (),
                    baseline,
                    slow_below,
                    sizes,
                )
            )
            continue
        ends = "; ".join(
            f"{h}: {sum(x.status not in ('slow', 'failed') for x in by_host[h])} of its "
            f"{len(by_host[h])} pairs normal"
            for h in r.hosts
        )
        findings.append(
            Finding(
                "bad link",
                r.label,
                r.hosts,
                collective,
                "logs",
                f"{_describe(r)} ({base}); both ends are normal on their other pairs ({ends}): the link "
                "(cable, switch port, route), not a node"
                + ("; the pair plan decided nothing about it, judged from the logs" if decided else ""),
                (r,),
                (),
                baseline,
                slow_below,
                sizes,
            )
        )
    for node, mine in sorted(nodes.items()):
        listed = "; ".join(_describe(r) for r in mine)
        planned = next(
            (i for i, f in enumerate(findings) if f.kind == "bad node" and f.subject == node), None
        )
        if planned is not None:
            # The plan's bad node: its other slow pairs are named too, so nothing measured is dropped.
            f = findings[planned]
            findings[planned] = replace(
                f,
                reason=f"{f.reason}; also slow, not among the plan's decisions: {listed}",
                pairs=f.pairs + tuple(mine),
            )
            continue
        findings.append(
            Finding(
                "bad node",
                node,
                (node,),
                collective,
                "logs",
                f"all {len(mine)} of its pairs are slow or failed ({listed}; {base}) while its partners are "
                "normal with other hosts: the node itself (NIC, PCIe, its switch port), not one link",
                tuple(mine),
                (),
                baseline,
                slow_below,
                sizes,
            )
        )
    order = {"bad node": 0, "bad link": 1, "unresolved": 2}
    return sorted(findings, key=lambda f: (order[f.kind], f.subject))


def _rail_cause(cause: str | None) -> bool:
    return cause is not None and cause.startswith(("nic ", "rail "))


def _host_checks(  # noqa: PLR0917 - one call site
    name: str,
    results: list[PairResult],
    base: str,
    fabric: Check | None,
    findings: list[Finding],
    known: Collection[str] = (),
    rails: RailPlan | None = None,
) -> dict[str, Check]:
    """Each host's pairs check, from the conclusion: a bad node fails; an end of a bad link is not
    failed for it (a note names the link); an end of an unresolved pair is not cleared (a warning)."""
    by_host: dict[str, list[PairResult]] = defaultdict(list)
    for r in results:
        for h in r.hosts:
            by_host[h].append(r)
    # Each host's partners named bad nodes, read once: a fleet has thousands of passing hosts.
    bad_nodes_paired: dict[str, set[str]] = defaultdict(set)
    for f in findings:
        if f.kind == "bad node":
            for r in f.pairs:
                for h in r.hosts:
                    bad_nodes_paired[h].add(f.subject)
    concerning: dict[str, list[Finding]] = defaultdict(list)
    for f in findings:
        for h in f.hosts:
            concerning[h].append(f)
    checks: dict[str, Check] = {}
    # A host of the plan that the run does not have gets no verdict (the run's notes name it).
    for host in sorted(set(by_host) | (set(concerning) & set(known))):
        mine = by_host.get(host, [])
        own = [f for f in concerning[host] if f.kind == "bad node"]
        # An end that is normal on its other pairs is cleared of a pair the logs could not pin (the
        # other end has no other pair); the plan's unresolved pairs clear neither end.
        unresolved = [
            f
            for f in concerning[host]
            if f.kind == "unresolved" and (f.source == "plan" or not _cleared(host, f, mine))
        ]
        links = [f for f in concerning[host] if f.kind == "bad link"]
        cleared = [f for f in concerning[host] if f.kind == "unresolved" and f not in unresolved]
        suspect = [r for r in mine if r.status == "suspect"]
        if own:
            f = own[0]
            lead = "bad node (pair plan)" if f.source == "plan" else "bad node"
            checks[host] = Check(name, "fail", f"{lead}: {f.reason}", host, f.witnesses, _first(f.logs))
            continue
        leaf = next(iter(rails.of("bad rail")), None) if rails is not None else None
        if fabric is not None and fabric.status == "fail" and leaf is None:
            checks[host] = Check(name, "fail", "fabric uniformly slow: " + fabric.reason, host)
            continue
        by_rail = [r for r in mine if r.status in ("slow", "failed") and _rail_cause(r.cause)]
        if by_rail or (fabric is not None and fabric.status == "fail"):
            checks[host] = Check(name, "note", _rail_note(host, by_rail, rails, leaf), host)
            continue
        on_links = _on_links(host, links)
        if unresolved:
            listed = "; ".join(f.reason for f in unresolved)
            reason = f"slow pair not pinned on a node or a link, so this end is not cleared: {listed}"
            checks[host] = Check(name, "warn", reason + on_links, host, (), _first(unresolved[0].logs))
        elif suspect:
            listed = "; ".join(_describe(r) for r in suspect)
            checks[host] = Check(name, "warn", f"pair(s) below the others: {listed} ({base}){on_links}", host)
        elif links or cleared:
            normal = sum(r.status not in ("slow", "failed") for r in mine)
            reason = f"{normal} of {len(mine)} pair(s) normal ({base}){on_links}"
            if cleared:
                names = ", ".join(f.subject for f in cleared)
                reason += f"; slow {names} is unresolved, and this end is cleared by its other pairs"
            checks[host] = Check(name, "note", reason, host)
        else:
            note = ""
            theirs = sorted(bad_nodes_paired.get(host, ()))
            if theirs:
                note = "; slow pairs with " + ", ".join(theirs) + " are theirs"
            checks[host] = Check(name, "pass", f"{len(mine)} pair(s) normal ({base}){note}", host)
    return checks


def _rail_note(host: str, slow: list[PairResult], rails: RailPlan | None, leaf: RailFinding | None) -> str:
    """A host's slow pairs that a rail finding explains: its own NIC (failed by the rails check),
    a partner's NIC, or a leaf; none of them is this host's as a node."""
    parts = []
    for r in slow:
        f = explained_by(r.cause, rails)
        if f is None:
            continue
        if f.kind == "bad nic" and f.host == host:
            parts.append(f"{_describe(r)}: its own {nic_name(f)} (the rails check names it), not the node")
        elif f.kind == "bad nic":
            parts.append(f"{_describe(r)}: {f.host}'s {nic_name(f)}, not this host's")
        else:
            parts.append(f"{_describe(r)}: rail {f.rail}'s leaf switch, fabric-wide")
    if not parts and leaf is not None:
        parts.append(f"every pair slow alike: rail {leaf.rail}'s leaf switch (fabric-wide), not this host's")
    return "slow pair(s) explained by the rail measurements: " + "; ".join(parts)


def _cleared(host: str, finding: Finding, mine: list[PairResult]) -> bool:
    others = [r for r in mine if r not in finding.pairs]
    return bool(others) and all(r.status == "ok" for r in others)


def _first(logs: tuple[str, ...]) -> str | None:
    return logs[0] if logs else None


def _on_links(host: str, links: list[Finding]) -> str:
    """The bad links a host is one end of: named, and said to be the link's, not the host's."""
    if not links:
        return ""
    names = ", ".join(f.subject for f in links)
    return (
        f"; one end of bad link {names}: the link's fault (cable, switch port, route), ticketed as a "
        f"link, not {host}'s"
    )


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
