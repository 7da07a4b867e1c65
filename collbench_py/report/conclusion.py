"""The pairs conclusion as every output shows it: what to drain (bad nodes), what to ticket (bad
links, both ends and their witnesses), what is unresolved; and a ticket text for each bad node and
bad link, to paste into a provider's or a site's tracker.

Computed once by the verdicts (`Report.conclusion`); here it is only put into words and data.
"""

from __future__ import annotations

from typing import Any

from collbench_py.report import inside_nodes, rail_view
from collbench_py.verdicts import Finding, Report
from collbench_py.verdicts.bandwidth import sizes_text

CONSOLE_FINDINGS = 12
CONSOLE_WITNESSES = 4
KINDS = ("bad node", "bad link", "unresolved")
ACTION = {"bad node": "drain", "bad link": "ticket the link", "unresolved": "re-test"}


def headline(report: Report) -> str:
    """The conclusion in one line, with what to do about each kind."""
    counts = report.conclusion.counts
    names = {kind: ", ".join(report.conclusion.subjects(kind)[:6]) for kind in KINDS}
    parts = []
    for kind, label in (("bad node", "to drain"), ("bad link", "to ticket"), ("unresolved", "to re-test")):
        more = "" if counts[kind] <= 6 else ", ..."
        part = f"{counts[kind]} {kind}{'s' if counts[kind] != 1 and kind != 'unresolved' else ''}"
        if counts[kind]:
            part += f" {label} ({names[kind]}{more})"
        parts.append(part)
    return "pairs conclusion: " + ", ".join(parts)


def how(report: Report) -> str:
    """How the conclusion was reached: the plan's decisions and the logs, or the logs alone."""
    plan = report.run.plan
    if plan is None:
        return "judged from the pair logs"
    return (
        f"from the pair plan's decisions ({plan.schedule}, {len(plan.rounds)} rounds, {plan.collective}"
        f"{'' if plan.finished else ', NOT FINISHED'}) and, for every pair it did not decide, the logs"
    )


def console_lines(report: Report) -> list[str]:
    """The conclusion for the top of the console summary (nothing when no pair was measured)."""
    if not report.pairs and report.run.plan is None:
        return rail_view.console_lines(report)
    lines = [*rail_view.console_lines(report), f"{headline(report)}; {how(report)}"]
    if report.run.plan_error is not None:
        lines.append(f"  pair plan not used ({report.run.plan_error}); pairs judged from their logs")
    findings = report.conclusion.findings
    for f in findings[:CONSOLE_FINDINGS]:
        evidence = list(f.witnesses[:CONSOLE_WITNESSES]) or [
            _pair_text(p) for p in f.pairs[:CONSOLE_WITNESSES]
        ]
        total = len(f.witnesses) or len(f.pairs)
        more = f"; +{total - CONSOLE_WITNESSES} more" if total > CONSOLE_WITNESSES else ""
        # Measured against what: a number alone does not say it is slow.
        against = f" (pair median {f.baseline:.3g} GB/s)" if f.baseline and not f.witnesses else ""
        lines.append(
            f"  {f.kind.upper():<10}  {f.subject} ({f.collective}, {f.source}): "
            f"{'; '.join(evidence)}{more}{against}"
        )
    if len(findings) > CONSOLE_FINDINGS:
        lines.append(f"  ... and {len(findings) - CONSOLE_FINDINGS} more (tickets.md, results.json)")
    return [*lines, ""]


def subjects(report: Report) -> list[str]:
    """Hosts the conclusion holds to account (bad nodes, then the ends of unresolved pairs), in
    that order: the host lists show them first. A bad link's ends are not among them: the link
    is listed on its own."""
    return list(dict.fromkeys(h for f in report.conclusion.findings if f.kind != "bad link" for h in f.hosts))


def _pair_text(p: Any) -> str:
    return f"{p.label} failed" if p.busbw is None else f"{p.label} {p.busbw:.3g} GB/s {p.status}"


def finding_json(report: Report, f: Finding) -> dict[str, Any]:
    """A finding as plain data, its ticket text included."""
    return {
        "kind": f.kind,
        "subject": f.subject,
        "hosts": list(f.hosts),
        "collective": f.collective,
        "source": f.source,
        "action": ACTION[f.kind],
        "reason": f.reason,
        "pairs": [
            {"pair": p.label, "busbw": p.busbw, "status": p.status, "z": p.z, "log": p.log} for p in f.pairs
        ],
        "witnesses": list(f.witnesses),
        "baseline_busbw": f.baseline,
        "slow_below_busbw": f.slow_below,
        "reference_sizes": list(f.sizes),
        "logs": list(f.logs),
    }


def conclusion_json(report: Report) -> dict[str, Any]:
    """results.json's `links` section: the whole conclusion, bad links first by name."""
    c = report.conclusion
    return {
        "how": how(report),
        # Distinct nodes and links: a link slow in two collectives is one link with two findings.
        "counts": {
            "bad_nodes": c.counts["bad node"],
            "bad_links": c.counts["bad link"],
            "unresolved": c.counts["unresolved"],
        },
        "bad_links": [finding_json(report, f) for f in c.of("bad link")],
        "bad_nodes": [finding_json(report, f) for f in c.of("bad node")],
        "unresolved": [finding_json(report, f) for f in c.of("unresolved")],
    }


def tickets(report: Report) -> list[dict[str, Any]]:
    """One ticket per rail finding (a NIC, a leaf: first, they explain slow pairs), per bad node and
    per bad link (a link slow in two collectives is one cable, one ticket): a title and a Markdown
    body to paste."""
    groups: dict[tuple[str, str], list[Finding]] = {}
    out = rail_view.tickets(report)
    for f in [*report.conclusion.of("bad node"), *report.conclusion.of("bad link")]:
        groups.setdefault((f.kind, f.subject), []).append(f)
    for (kind, subject), found in groups.items():
        what = (
            "drain and check its NIC, PCIe, switch port"
            if kind == "bad node"
            else ("check the cable, switch ports, route")
        )
        out.append(
            {
                "kind": kind,
                "subject": subject,
                "hosts": list(found[0].hosts),
                "collectives": [f.collective for f in found],
                "title": f"[collbench {report.run.run_id}] {kind} {subject}: {what}",
                "body": ticket_body(report, found),
            }
        )
    return out + component_tickets(report)


def component_tickets(report: Report) -> list[dict[str, Any]]:
    """One ticket per host whose node checks found a failing component: each component named
    (GPU index, bus id, serial; link; HCA and port), what it measured against what, the repair."""
    components = report.components
    if components is None:
        return []
    out = []
    for host in sorted({f.host for f in components.findings if f.severity == "fail"}):
        failing = [f for f in components.of_host(host) if f.severity == "fail"]
        named = ", ".join(f"{f.kind} {f.id} ({f.action})" for f in failing[:4])
        more = f" and {len(failing) - 4} more" if len(failing) > 4 else ""
        info = report.run.hosts.get(host)
        body = [
            f"Run {report.run.run_id} ({report.run.started_at or '?'}), node checks of {host}.",
            "",
            "Components:",
            *inside_nodes.ticket_lines(report, host),
            "",
            f"Hardware: {hardware(report, host)}",
            "",
            "Evidence (relative to the run directory):",
        ]
        record = components.records.get(host)
        files = sorted({file for c in (record.checks if record else ()) for file in c.files})
        folder = info.name if info else host
        body += [f"- hosts/{folder}/node/{file}" for file in ["checks.json", *files]]
        out.append(
            {
                "kind": "component",
                "subject": host,
                "hosts": [host],
                "collectives": [],
                "title": f"[collbench {report.run.run_id}] {host}: {named}{more}",
                "body": "\n".join(body) + "\n",
            }
        )
    return out


def ticket_body(report: Report, found: list[Finding]) -> str:
    """What was measured against what (each collective that found it), on which hardware, with
    which evidence files."""
    run = report.run
    first = found[0]
    lines = [
        f"Run {run.run_id} ({run.started_at or '?'}), "
        f"{'collective' if len(found) == 1 else 'collectives'} {', '.join(f.collective for f in found)}.",
    ]
    for f in found:
        how_found = "decided by the pair plan" if f.source == "plan" else "judged from the pair logs"
        lines += [
            "",
            f"**{f.kind} {f.subject}, {f.collective}** ({how_found}): {f.reason}",
            "",
            "Measured (busbw at " + (sizes_text(f.sizes) if f.sizes else "the reference size") + "):",
        ]
        for p in f.pairs:
            value = "launch failed" if p.busbw is None else f"{p.busbw:.3g} GB/s"
            share = f" ({100 * p.busbw / f.baseline:.0f} % of the baseline)" if p.busbw and f.baseline else ""
            lines.append(f"- {p.label}: {value}{share}, {p.status}")
        lines += [f"- witness {w}" for w in f.witnesses]
        against = []
        if f.baseline:
            against.append(f"pair baseline (median of each host's median pair) {f.baseline:.3g} GB/s")
        if f.slow_below:
            against.append(f"slow below {f.slow_below:.3g} GB/s")
        if against:
            lines.append("Against: " + "; ".join(against) + ".")
    lines += ["", "Hardware:"]
    for host in first.hosts:
        lines.append(f"- {host}: {hardware(report, host)}")
    lines += ["", "Evidence (relative to the run directory):"]
    logs = list(dict.fromkeys(log for f in found for log in f.logs))
    lines += [f"- {log}" for log in logs] or ["- (no pair log: the plan's witnesses above)"]
    for host in first.hosts:
        info = run.hosts.get(host)
        if info is not None and info.facts:
            lines.append(f"- hosts/{info.name}/facts.json")
    return "\n".join(lines) + "\n"


def hardware(report: Report, host: str) -> str:
    """GPU model and serials (or UUIDs where no serial was read), board serial and HCAs, from facts."""
    info = report.run.hosts.get(host)
    facts = (info.facts if info else None) or {}
    if not facts:
        return "no facts.json"
    gpus = [g for g in facts.get("gpus") or [] if isinstance(g, dict)]
    parts = []
    for key in ("system_serial", "board_serial", "serial"):
        if facts.get(key):
            parts.append(f"{key.replace('_', ' ')} {facts[key]}")
    if gpus:
        ids = [str(g.get("serial") or g.get("uuid") or "?") for g in gpus]
        label = "serials" if any(g.get("serial") for g in gpus) else "UUIDs"
        parts.append(f"{len(gpus)}x {gpus[0].get('name')} (GPU {label}: {', '.join(ids)})")
    ports = [
        f"{p.get('device')}:{p.get('port')} {p.get('state')}"
        for p in facts.get("ib") or []
        if isinstance(p, dict)
    ]
    if ports:
        parts.append("HCAs " + ", ".join(ports))
    for key in ("driver_version", "nccl_version"):
        if facts.get(key):
            parts.append(f"{key.split('_')[0]} {facts[key]}")
    return "; ".join(parts) or "facts.json without GPU or HCA"


def tickets_markdown(report: Report) -> str:
    """tickets.md: every ticket, each ready to paste; the unresolved listed for a re-test."""
    lines = [f"# collbench {report.run.run_id}: tickets", "", headline(report) + ".", ""]
    for t in tickets(report):
        lines += [f"## {t['title']}", "", t["body"]]
    unresolved = report.conclusion.of("unresolved")
    if unresolved:
        lines += ["## Unresolved: re-pair each end with a known-good node", ""]
        lines += [f"- {f.subject} ({f.collective}): {f.reason}" for f in unresolved]
        lines.append("")
    if report.rails is not None and report.rails.of("unresolved"):
        lines += ["## Unresolved rails: re-test each with known-good partners", ""]
        lines += [f"- {f.subject}: {f.reason}" for f in report.rails.of("unresolved")]
        lines.append("")
    if not report.conclusion.findings and not component_tickets(report) and not rail_view.tickets(report):
        lines += ["No bad node, no bad link, no failing component: nothing to ticket.", ""]
    return "\n".join(lines)
