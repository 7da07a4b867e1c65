"""The rails between nodes in every output: results.json `rails`, junit testcases, metrics.prom
series, the first lines of "needs attention" and of the tickets, and the host x rail heatmap.

The verdicts judged them (verdicts/rail_findings.py, `Report.rails`); here they are only put into
words and data. A run without rail checks has an empty section and no testcase, series or plot.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.figure import Figure

from collbench_py.report.plots import HEATMAP_BOUNDS, HEATMAP_COLOURS, Png, _png, short_name
from collbench_py.verdicts import Check, Report
from collbench_py.verdicts.rail_findings import RailFinding, RailPlan, nic_name, without_name

# Rows of the heatmap: beyond this many hosts, only those a finding names or with a slow rail.
HEATMAP_MAX_HOSTS = 48


def _rails(report: Report) -> RailPlan:
    return report.rails if report.rails is not None else RailPlan()


def rails_json(report: Report) -> dict[str, Any]:
    """results.json's `rails`: each host's rail map, every rail measurement, the findings (empty
    lists when the run had no rail checks)."""
    rails = _rails(report)
    return {
        "hosts": {
            host: [{"index": r.index, "hca": r.hca, "gpu": r.gpu} for r in listed]
            for host, listed in sorted(rails.hosts.items())
        },
        "reference_gbits": rails.reference,
        "slow_below_gbits": rails.slow_below,
        "measurements": [
            {"round": m.round, "pair": list(m.pair), "rail": m.rail, "gbits": m.gbits, "status": m.status}
            for m in rails.measurements
        ],
        "findings": [finding_json(f) for f in rails.findings],
        "error": rails.error,
    }


def finding_json(f: RailFinding) -> dict[str, Any]:
    return {
        "kind": f.kind,
        "subject": f.subject,
        "host": f.host,
        "rail": f.rail,
        "hca": f.hca,
        "reason": f.reason,
        "repair": f.repair,
        "pairs": [list(p) for p in f.pairs],
        "witnesses": list(f.witnesses),
    }


def headline(f: RailFinding) -> str:
    """A finding in a few words: what is broken, where."""
    if f.kind == "bad nic":
        return f"{f.host}: {nic_name(f)}"
    if f.kind == "bad rail":
        return f"rail {f.rail}: its leaf switch (fabric-wide)"
    return f"{f.subject}: unresolved"


def junit_cases(report: Report) -> list[tuple[str, Check]]:
    """A failing testcase per finding, `rail.<host>.rail<k>` (bad NIC, unresolved on a host) or
    `rail.rail<k>` (bad rail); one passing testcase per pair measured rail by rail with none."""
    rails = _rails(report)
    cases: list[tuple[str, Check]] = []
    for f in rails.findings:
        classname = f"rail.{f.host}" if f.host else "rail"
        text = f"{f.kind}: {headline(f)}: {f.reason}; {f.repair}"
        cases.append((classname, Check(f"rail{f.rail}", "fail", text, f.host, f.witnesses)))
    named = {p for f in rails.findings for p in f.pairs}
    by_pair: dict[tuple[str, str], list] = {}
    for m in rails.measurements:
        by_pair.setdefault(m.pair, []).append(m)
    for pair, measured in sorted(by_pair.items()):
        if pair in named:
            continue
        values = ", ".join(
            f"rail {m.rail} {'failed' if m.gbits is None else f'{m.gbits:.4g} Gb/s'} ({m.status})"
            for m in measured
        )
        cases.append(("rail.pairs", Check(f"{pair[0]}--{pair[1]}", "pass", values)))
    return cases


def metrics_lines(report: Report, labels: Callable[..., str]) -> list[str]:
    """`collbench_rail_gbits{host,peer,rail}`: the lowest measurement per host rail (a rail whose
    every measurement failed has no sample); `collbench_rail_finding{kind,host,rail}` 1 each."""
    rails = _rails(report)
    lines = [
        "# HELP collbench_rail_gbits Lowest ib_write_bw Gb/s measured on a host's rail, and its peer.",
        "# TYPE collbench_rail_gbits gauge",
    ]
    for (host, rail), (value, peer) in sorted(rails.lowest().items()):
        if value is not None:
            lines.append("collbench_rail_gbits" + labels(host=host, peer=peer, rail=rail) + f" {value:.6g}")
    lines += [
        "# HELP collbench_rail_finding A rail finding: bad nic (host, rail), bad rail (rail), unresolved.",
        "# TYPE collbench_rail_finding gauge",
    ]
    lines += [
        "collbench_rail_finding" + labels(kind=f.kind, host=f.host or "", rail=f.rail) + " 1"
        for f in rails.findings
    ]
    return lines


def attention(report: Report) -> list[dict[str, Any]]:
    """The rail findings for the top of "needs attention": what, where, the repair."""
    return [
        {
            "kind": f.kind,
            "subject": f.subject,
            "host": f.host,
            "headline": headline(f),
            "reason": without_name(f),
            "repair": f.repair,
            "witnesses": list(f.witnesses),
        }
        for f in _rails(report).findings
    ]


def console_lines(report: Report) -> list[str]:
    """The rail findings, first on the console."""
    found = _rails(report).findings
    if not found:
        return []
    lines = [f"rail findings: {len(found)} (first: they explain the slow pairs below)"]
    for f in found:
        lines.append(f"  {f.kind.upper():<10}  {headline(f)}: {without_name(f)}; {f.repair}")
    return [*lines, ""]


def tickets(report: Report) -> list[dict[str, Any]]:
    """One ticket per rail finding that names a part to repair (a NIC, a leaf)."""
    rails = _rails(report)
    out = []
    for f in rails.findings:
        if f.kind == "unresolved":
            continue
        measured = [
            m for m in rails.measurements if m.rail == f.rail and (f.host is None or f.host in m.pair)
        ]
        body = [
            f"Run {report.run.run_id} ({report.run.started_at or '?'}), measured rail by rail "
            "(ib_write_bw NIC k <-> NIC k, all rails at once) by the pair plan.",
            "",
            f"**{f.kind} {f.subject}**: {f.reason}",
            "",
            f"Repair: {f.repair}.",
            "",
            f"Measured on rail {f.rail} (Gb/s):",
            *[f"- round {m.round}: {m.label}: {_gbits(m.gbits)} ({m.status})" for m in measured],
            *[f"- witness {w}" for w in f.witnesses],
        ]
        if rails.reference is not None:
            body.append(
                f"Against: the night's rail reference (median) {rails.reference:.4g} Gb/s; slow below "
                f"{rails.slow_below:.4g} Gb/s."
            )
        body += [
            "",
            "Evidence (relative to the run directory):",
            "- inter/pairs/plan.json",
            "- inter/pairs/rails.json",
        ]
        out.append(
            {
                "kind": f.kind,
                "subject": f.subject,
                "hosts": [f.host] if f.host else [],
                "collectives": [],
                "title": f"[collbench {report.run.run_id}] {f.kind} {headline(f)}: {f.repair}",
                "body": "\n".join(body) + "\n",
            }
        )
    return out


def _gbits(value: float | None) -> str:
    return "failed" if value is None else f"{value:.4g}"


def grid_of(rails: RailPlan) -> tuple[list[str], int, list[list[float]]]:
    """The heatmap's rows (hosts), rail count and cells: % of the night's reference of the lowest
    measurement per host rail, 0 for a rail whose every measurement failed, NaN where not measured."""
    lowest = rails.lowest()
    if not lowest:
        return [], 0, []
    named = {f.host for f in rails.findings if f.host}
    hosts = sorted({h for h, _ in lowest})
    if len(hosts) > HEATMAP_MAX_HOSTS:
        slow = {h for (h, _k), (v, _) in lowest.items() if v is None or v < (rails.slow_below or 0)}
        hosts = sorted(named | slow)[:HEATMAP_MAX_HOSTS] or hosts[:HEATMAP_MAX_HOSTS]
    count = max(k for _, k in lowest) + 1
    grid = [[math.nan] * count for _ in hosts]
    for i, host in enumerate(hosts):
        for k in range(count):
            if (host, k) in lowest:
                value = lowest[(host, k)][0]
                grid[i][k] = (
                    0.0 if value is None else 100 * value / rails.reference if rails.reference else math.nan
                )
    return hosts, count, grid


def heatmap(report: Report) -> Png | None:
    """Host x rail: the lowest Gb/s measured per host rail, coloured by its % of the night's
    reference (the bounds of the pair heatmap); cells never measured are blank. None without rail
    measurements."""
    rails = _rails(report)
    hosts, count, grid = grid_of(rails)
    if not hosts:
        return None
    lowest = rails.lowest()
    fig = Figure(figsize=(2.8 + 0.7 * count, 1.4 + 0.32 * len(hosts)), layout="constrained")
    ax = fig.subplots()
    cmap = ListedColormap(HEATMAP_COLOURS).with_extremes(bad="white")  # never measured: a blank cell
    image = ax.imshow(grid, cmap=cmap, norm=BoundaryNorm(HEATMAP_BOUNDS, cmap.N), aspect="auto")
    hcas = {h: {r.index: r.hca for r in rails.hosts.get(h, ())} for h in hosts}
    ax.set_xticks(range(count), [f"rail {k}" for k in range(count)], fontsize=8)
    ax.set_yticks(range(len(hosts)), [short_name(h) for h in hosts], fontsize=8)
    if len(hosts) * count <= 200:
        for i, host in enumerate(hosts):
            for k in range(count):
                if (host, k) in lowest:
                    value = lowest[(host, k)][0]
                    text = "failed" if value is None else f"{value:.3g}"
                    if hcas[host].get(k):
                        text += f"\n{hcas[host][k]}"
                    dark = not grid[i][k] >= HEATMAP_BOUNDS[2]
                    ax.text(
                        k, i, text, ha="center", va="center", fontsize=7, color="white" if dark else "black"
                    )
    bar = fig.colorbar(image, ax=ax, label="% of the rail reference (blank: not measured)", shrink=0.8)
    bar.set_ticks([25, 65, 85, 92.5, 97.5], labels=["<50", "50-80", "80-90", "90-95", ">=95"])
    reference = f"{rails.reference:.4g} Gb/s" if rails.reference is not None else "none"
    ax.set_title(f"lowest ib_write_bw per host rail, Gb/s (reference {reference})", fontsize=9)
    return _png(fig)
