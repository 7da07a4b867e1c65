"""Verdicts: judge a loaded run directory, host by host and link by link, with reasons and evidence.

`judge(run)` returns a `Report`: one `HostVerdict` per host (passed, warned, failed,
unreachable, each with its checks), fleet-level checks, the fleet statistics per collective
and the pair results. Renderers only format what is here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from collbench_py.exitcodes import ExitCode
from collbench_py.profiles import Profile, ProfileError, choose_profile, fleet_shape, load_profile
from collbench_py.redact import redact_text
from collbench_py.rundir.load import LogData, RunDir, launch_ranks
from collbench_py.verdicts import (
    bandwidth,
    fabric,
    facts,
    gpudirect,
    launcher,
    logs,
    node_components,
    pairs,
    rail_findings,
    slurm,
    topology,
)
from collbench_py.verdicts.model import (
    SEVERITY,
    VERDICT_ORDER,
    Check,
    Finding,
    FleetStat,
    HostVerdict,
    Options,
    PairResult,
    PairsConclusion,
    verdict_of,
)
from collbench_py.verdicts.stats import series

__all__ = [
    "Check",
    "Finding",
    "FleetStat",
    "HostVerdict",
    "Options",
    "PairResult",
    "PairsConclusion",
    "ProfileError",
    "Report",
    "judge",
]


@dataclass(frozen=True)
class Report:
    run: RunDir
    profile: Profile | None
    profile_reason: str
    options: Options
    min_drop: float
    hosts: dict[str, HostVerdict]  # worst first
    fleet_checks: tuple[Check, ...]
    stats: dict[tuple[str, str], FleetStat]  # (kind, collective) -> statistics
    pairs: tuple[PairResult, ...]
    conclusion: PairsConclusion = field(default_factory=PairsConclusion)  # bad nodes, links, unresolved
    topology_references: dict[str, dict[tuple[str, str], str]] = field(default_factory=dict)
    series: dict[tuple[str, str], Sequence[tuple[int, float]]] = field(default_factory=dict)  # (host, coll)
    components: node_components.ComponentReport | None = None  # the node checks, judged; None: none ran
    rails: rail_findings.RailPlan | None = None  # the pair plan's rail measurements and decisions; None: none

    @property
    def collectives(self) -> list[str]:
        return sorted({c for kind, c in self.stats if kind == "intra"} | {c for _, c in self.series})

    def count(self, verdict: str) -> int:
        return sum(1 for h in self.hosts.values() if h.verdict == verdict)

    @property
    def fleet_status(self) -> str:
        worst = max((SEVERITY[c.status] for c in self.fleet_checks), default=0)
        return "fail" if worst == 3 else "warn" if worst == 2 else "pass"

    @property
    def links_failed(self) -> list[Finding]:
        """Bad links: each a fault of its own (exit 1), neither end failed for it."""
        return self.conclusion.of("bad link")

    @property
    def unresolved(self) -> list[Finding]:
        """Slow pairs pinned on neither a node nor a link: something measured is wrong (exit 1)."""
        return self.conclusion.of("unresolved")

    def exit_code(self, strict: bool) -> ExitCode:
        failed = self.count("failed") or self.count("unreachable") or self.fleet_status == "fail"
        if failed or self.links_failed or self.unresolved:
            return ExitCode.FAILED
        if strict and (self.count("warned") or self.fleet_status == "warn"):
            return ExitCode.WARNINGS
        return ExitCode.OK


def judge(run: RunDir, profile_arg: str | None = None, options: Options | None = None) -> Report:
    options = options or Options()
    profile, profile_reason = _profile(run, profile_arg)
    min_drop = options.min_drop if options.min_drop is not None else (profile.min_drop if profile else 0.05)
    checks: dict[str, list[Check]] = {name: [] for name in run.hosts}
    fleet_checks: list[Check] = [Check("run", "warn", note) for note in run.notes]
    if run.status != "complete":
        fleet_checks.append(Check("run", "warn", _unfinished(run)))

    for host in run.hosts.values():
        if host.status == "unreachable":
            checks[host.name].append(
                Check("reachable", "fail", f"unreachable: {host.reason or 'no reason given'}", host.name)
            )
        elif host.status != "ok":
            reason = f"host {host.status} during the run: {host.reason or 'no reason given'}"
            checks[host.name].append(Check("reachable", "fail", reason, host.name))

    intra: dict[str, dict[str, LogData]] = defaultdict(dict)
    for log in run.logs_of("intra"):
        if log.launch.hosts and log.launch.collective:
            intra[log.launch.collective][log.launch.hosts[0]] = log
    transports: dict[str, list[tuple[str, str]]] = defaultdict(list)
    all_series: dict[tuple[str, str], Sequence[tuple[int, float]]] = {}
    stats: dict[tuple[str, str], FleetStat] = {}

    one_rank: dict[str, list[str]] = defaultdict(list)  # host -> its one-rank collectives
    for collective, by_host in sorted(intra.items()):
        # A launch recorded skipped is never judged; a one-rank launch measures no link.
        measured = {
            host: log
            for host, log in by_host.items()
            if log.launch.status != "skipped" and launch_ranks(log, run.parameters) != 1
        }
        stat = bandwidth.fleet_stat("intra", collective, measured, options)
        if stat is not None:
            stats[("intra", collective)] = stat
            if stat.fallback:
                fleet_checks.append(_fallback_note("intra", collective, stat, options))
        for host, log in by_host.items():
            if host not in checks:
                continue
            base = f"intra/{collective}"
            checks[host].append(logs.run_check(log, f"{base}/run", host))
            if log.launch.status == "skipped":
                continue
            data = logs.data_check(log, f"{base}/data", host)
            if data is not None:
                checks[host].append(data)
            for finding in logs.transport_findings(log, run.hosts[host]):
                transports[host].append(finding)
            all_series[(host, collective)] = series(log.run, in_place=host in measured)
            if host not in measured:
                one_rank[host].append(collective)
                continue
            if stat is not None and log.run is not None and log.run.status == "ok":
                checks[host].append(bandwidth.fleet_check(stat, host, options, min_drop, log.launch.log))
                note = bandwidth.line_rate_note(profile, collective, log, stat.values.get(host, 0.0), host)
                if note is not None:
                    checks[host].append(note)
            if profile is not None:
                against = bandwidth.profile_check(profile, collective, log, host, options)
                if against is not None:
                    checks[host].append(against)

    for host, collectives in one_rank.items():
        checks[host].append(bandwidth.one_rank_note(host, collectives))
    if one_rank:
        fleet_checks.append(bandwidth.one_rank_fleet_note(sorted(one_rank), len(run.hosts)))

    # Launches across hosts that ended before their ranks ran: the launcher's, not the hosts' or links'.
    launcher_failures = {
        log.launch.log: (log, failure)
        for log in run.logs
        if log.launch.kind in ("all", "pair") and (failure := launcher.of_log(log, run.ssh_hops)) is not None
    }
    pair_results: list[PairResult] = []
    findings: list[Finding] = []
    rails = rail_findings.read_rail_plan(run.path)
    by_collective: dict[str, list[LogData]] = defaultdict(list)
    for log in run.logs_of("pair"):
        if len(log.launch.hosts) == 2 and log.launch.collective and log.launch.status != "skipped":
            by_collective[log.launch.collective].append(log)
    if run.plan is not None:  # its decisions count even where its pairs' logs are missing
        by_collective.setdefault(run.plan.collective, [])
    for collective, pair_logs in sorted(by_collective.items()):
        results, host_checks, pair_fleet, stat, found = pairs.judge_pairs(
            collective,
            pair_logs,
            run.hosts,
            profile,
            options,
            min_drop,
            parameters=run.parameters,
            launcher_failed=set(launcher_failures),
            plan=run.plan,
            rails=rails,
        )
        pair_results += results
        findings += found
        fleet_checks += pair_fleet
        if stat is not None:
            stats[("pair", collective)] = stat
        for host, check in host_checks.items():
            checks.setdefault(host, []).append(check)
        for log in pair_logs:
            label = "--".join(log.launch.hosts)
            data = logs.data_check(log, f"pairs/{collective}/data", None)
            for host in log.launch.hosts:
                if host in run.hosts:
                    transports[host] += logs.transport_findings(log, run.hosts[host])
                if data is not None and data.status == "fail":
                    reason = f"pair {label}: {data.reason}"
                    checks.setdefault(host, []).append(
                        Check(data.name, "fail", reason, host, data.evidence, data.log)
                    )
    _two_node_note(run, by_collective, fleet_checks)
    if rails is not None:
        # A bad NIC fails its host with the port named; a bad rail is the fabric's (exit 1).
        for host, rail_checks in rail_findings.host_checks(rails, set(run.hosts)).items():
            checks.setdefault(host, []).extend(rail_checks)
        fleet_checks += rail_findings.fleet_checks(rails)
    ib_hca = fabric.hca_check(run.hosts.values(), [*run.logs_of("pair"), *run.logs_of("all")], run.parameters)
    fleet_checks += [ib_hca] if ib_hca is not None else []
    fleet_checks += gpudirect.gpudirect_checks(run.hosts, [*run.logs_of("pair"), *run.logs_of("all")])

    for log in run.logs_of("all"):
        collective = log.launch.collective or "unknown"
        failure = launcher_failures.get(log.launch.log, (None, None))[1]
        fleet_checks.append(logs.run_check(log, f"all/{collective}/run", None, launcher_failure=failure))
        if log.launch.status == "skipped":
            continue
        data = logs.data_check(log, f"all/{collective}/data", None)
        if data is not None:
            fleet_checks.append(data)
        for error in (e for r in log.runs for e in r.errors if e.host):
            host = _host_named(run, error.host or "")
            if host is not None:
                reason = (
                    f"named in the all-hosts {collective} failure: {error.kind}: {redact_text(error.message)}"
                )
                checks[host].append(
                    Check(f"all/{collective}", "fail", reason, host, log.tail[-4:], log.launch.log)
                )

    launcher_check = launcher.fleet_check(
        {launcher.label_of(log): (log, failure) for log, failure in launcher_failures.values()}, run.ssh_hops
    )
    if launcher_check is not None:
        fleet_checks.append(launcher_check)

    topo_checks, diffs, references = topology.judge_topology(run.hosts)
    for host, check in topo_checks.items():
        checks[host].append(check)
    for host, fact_checks in facts.judge_facts(
        run.hosts, profile, named_profile=profile_arg is not None
    ).items():
        checks[host] += fact_checks
    naming = _logs_naming(run)
    for host in run.hosts.values():
        backend = bandwidth.gloo_on_gpus(host, naming.get(host.name, []), profile)
        if backend is not None:
            checks[host.name].append(backend)
    for host, found in transports.items():
        if host in checks:
            checks[host].append(_transport_check(host, found))

    components = node_components.judge_components(run.hosts, profile, min_drop, options.min_fleet)
    if components is not None:
        for host, node_checks in node_components.host_checks(components).items():
            checks.setdefault(host, []).extend(node_checks)

    if intra:
        for host in run.hosts.values():
            has_any = any(host.name in by_host for by_host in intra.values())
            if host.status == "ok" and not has_any:
                checks[host.name].append(
                    Check("intra", "fail", "no intra-node results for this host", host.name)
                )

    verdicts = {
        name: HostVerdict(
            host=name,
            inventory_hostname=run.hosts[name].inventory_hostname if name in run.hosts else name,
            verdict=verdict_of(
                host_checks, reachable=run.hosts.get(name) is None or run.hosts[name].status != "unreachable"
            ),
            checks=tuple(host_checks),
            busbw={
                c: s.values[name] for (kind, c), s in stats.items() if kind == "intra" and name in s.values
            },
            z={c: s.z[name] for (kind, c), s in stats.items() if kind == "intra" and name in s.z},
            topology_diff=diffs.get(name, {}),
        )
        for name, host_checks in checks.items()
    }
    ordered = dict(
        sorted(verdicts.items(), key=lambda kv: (VERDICT_ORDER[kv[1].verdict], _worst_z(kv[1]), kv[0]))
    )
    if not run.hosts:
        fleet_checks.append(Check("run", "fail", "the manifest lists no hosts"))
    not_measured = slurm.not_measured_check(run)
    if not_measured is not None:
        fleet_checks.append(not_measured)
    return Report(
        run=run,
        profile=profile,
        profile_reason=profile_reason,
        options=options,
        min_drop=min_drop,
        hosts=ordered,
        fleet_checks=tuple(fleet_checks),
        stats=stats,
        pairs=tuple(pair_results),
        conclusion=PairsConclusion(tuple(findings)),
        topology_references=references,
        series=all_series,
        components=components,
        rails=rails,
    )


def _worst_z(verdict: HostVerdict) -> float:
    return min(verdict.z.values(), default=0.0)


def _profile(run: RunDir, profile_arg: str | None) -> tuple[Profile | None, str]:
    shape = fleet_shape((h.facts for h in run.hosts.values()), topology.nvlink(run.hosts))
    # A profile's intra figures may hold for some GPU counts only: take those of the fleet's count.
    gpus = shape.gpu_count if shape is not None else run.parameters.get("gpus_per_host")
    gpus = gpus if isinstance(gpus, int) and not isinstance(gpus, bool) else None
    if profile_arg:
        profile = load_profile(profile_arg).for_gpus(gpus)
        return profile, f"named on the command line ({profile.origin})"
    if shape is None:
        return None, "no facts: no profile chosen, absolute checks skipped"
    profile = choose_profile(shape)
    if profile is None:
        return (
            None,
            f"no shipped profile fits {shape.describe()}: absolute checks skipped (pass --profile FILE)",
        )
    return profile.for_gpus(gpus), f"chosen from the facts: {shape.describe()}"


def _fallback_note(kind: str, collective: str, stat: FleetStat, options: Options) -> Check:
    reason = (
        f"{collective}: no size >= {bandwidth.human_size(options.reference_min_bytes)} was measured, so the "
        f"reference size falls back to the largest present, {bandwidth.sizes_text(stat.sizes)}; "
        "small messages measure latency more than bandwidth"
    )
    return Check(f"{kind}/{collective}/reference", "note", reason)


def _unfinished(run: RunDir) -> str:
    """What the manifest's status says about a run that did not complete."""
    if run.status == "interrupted":
        when = f" at {run.finished_at}" if run.finished_at else ""
        return f"the run did not complete: it was interrupted{when}; what was measured before is judged"
    if run.status == "running":
        return (
            "the run did not complete: its manifest still says `running` (the controller stopped before "
            "the end, or the run is still going); what was measured so far is judged"
        )
    return f"the run did not complete (manifest status: {run.status})"


def _two_node_note(run: RunDir, by_collective: dict[str, list[LogData]], fleet_checks: list[Check]) -> None:
    algo = str(run.parameters.get("nccl_algo_pairs") or "")
    if "all_reduce" in by_collective and algo.lower() != "ring" and run.backend not in ("torch",):
        fleet_checks.append(
            Check(
                "pairs/all_reduce/algorithm",
                "note",
                "pair all_reduce ran without NCCL_ALGO=Ring: on 2 nodes NCCL's tree inflates busbw, "
                "so pair numbers are not comparable to the network's line rate",
            )
        )


def _logs_naming(run: RunDir) -> dict[str, list[LogData]]:
    """Per host, the logs of every launch that ran on it and was not recorded skipped (one pass:
    a scan of every log per host took minutes at 4,000 hosts)."""
    naming: dict[str, list[LogData]] = defaultdict(list)
    for log in run.logs:
        if log.launch.status != "skipped":
            for host in dict.fromkeys(log.launch.hosts):
                naming[host].append(log)
    return naming


def _host_named(run: RunDir, name: str) -> str | None:
    for host in run.hosts.values():
        facts_name = (host.facts or {}).get("hostname")
        if name in (host.name, host.inventory_hostname, facts_name):
            return host.name
    return None


def _transport_check(host: str, found: list[tuple[str, str]]) -> Check:
    if not found:
        return Check("transport", "pass", "no transport warnings in its logs", host)
    reasons = list(dict.fromkeys(reason for reason, _ in found))
    evidence = tuple(dict.fromkeys(line for _, line in found))
    return Check("transport", "warn", "; ".join(reasons), host, evidence)
