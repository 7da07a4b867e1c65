"""The short per-host table printed on stdout (the playbook shows it): the pairs conclusion first
(what to drain, what to ticket, what is unresolved), then bad hosts (those it names first), by name."""

from __future__ import annotations

from collbench_py.report.conclusion import console_lines, subjects
from collbench_py.verdicts import Report
from collbench_py.verdicts.slurm import describe

MAX_PASSED_LISTED = 20
MAX_NOT_MEASURED_LISTED = 10
REASON_WIDTH = 150


def summary_lines(report: Report, out_dir: str) -> list[str]:
    collectives = report.collectives[:6]
    width = max([4, *(len(h) for h in report.hosts)])
    lines = [
        f"collbench report {report.run.run_id}: {report.count('failed')} failed, "
        f"{report.count('unreachable')} unreachable, {report.count('warned')} warned, "
        f"{report.count('passed')} passed of {len(report.hosts)} hosts"
        + f"; {report.conclusion.counts['bad link']} link(s) failed"
        + (f", {report.conclusion.counts['unresolved']} unresolved" if report.unresolved else "")
        + (f" (profile {report.profile.name})" if report.profile else ""),
        "",
        *console_lines(report),
        *ports_lines(report),
        f"{'HOST':<{width}}  {'VERDICT':<11}  "
        + "  ".join(f"{c[:12]:>12}" for c in collectives)
        + "  REASON",
    ]
    first = [report.hosts[h] for h in subjects(report) if h in report.hosts]
    named = {v.host for v in first}
    passed = [v for v in report.hosts.values() if v.verdict == "passed" and v.host not in named]
    shown = first + [v for v in report.hosts.values() if v.verdict != "passed" and v.host not in named]
    shown += passed if len(passed) <= MAX_PASSED_LISTED else []
    for v in shown:
        marker = {"failed": "FAILED", "unreachable": "UNREACHABLE", "warned": "warned"}.get(
            v.verdict, "passed"
        )
        cells = "  ".join(f"{v.busbw[c]:>12.3g}" if c in v.busbw else f"{'-':>12}" for c in collectives)
        reason = v.problems[0].reason if v.problems else ""
        if len(reason) > REASON_WIDTH:
            reason = reason[: REASON_WIDTH - 1] + "…"
        lines.append(f"{v.host:<{width}}  {marker:<11}  {cells}  {reason}".rstrip())
    if len(passed) > MAX_PASSED_LISTED:
        lines.append(f"... and {len(passed)} hosts passed (all in hosts.csv)")
    if collectives:
        lines.append(f"(busbw in GB/s at the reference size; columns: {', '.join(collectives)})")
    lines += not_measured_lines(report)
    fleet = [c for c in report.fleet_checks if c.status in ("fail", "warn")]
    lines += [f"fleet {c.status}: {c.reason}" for c in fleet[:5]]
    lines.append(f"report: {out_dir}/index.html")
    return lines


def ports_not_active(report: Report) -> list[dict[str, str]]:
    """Hosts whose InfiniBand facts check found a port down or slow: named at the top of every
    output, whatever else the host's first reason is."""
    return [
        {"host": v.host, "status": c.status, "reason": c.reason}
        for v in report.hosts.values()
        for c in v.checks
        if c.name == "facts/ib" and c.status in ("fail", "warn")
    ]


def ports_lines(report: Report) -> list[str]:
    """InfiniBand ports down or slow (facts), named above the table whatever the host's first reason."""
    found = ports_not_active(report)
    lines = [f"ib ports  {p['host']}: {p['reason']}" for p in found[:MAX_NOT_MEASURED_LISTED]]
    if len(found) > MAX_NOT_MEASURED_LISTED:
        lines.append(f"... and {len(found) - MAX_NOT_MEASURED_LISTED} more hosts with ports down or slow")
    return [*lines, ""] if lines else []


def not_measured_lines(report: Report) -> list[str]:
    """The nodes Slurm listed as unusable, with its reasons: neither passed nor failed."""
    nodes = report.run.not_measured
    lines = [f"not measured  {describe(n)}" for n in nodes[:MAX_NOT_MEASURED_LISTED]]
    if len(nodes) > MAX_NOT_MEASURED_LISTED:
        lines.append(f"... and {len(nodes) - MAX_NOT_MEASURED_LISTED} more not measured (in results.json)")
    return lines
