"""The node checks in every report output: results.json's `node_checks` section, junit testcases
(classname "node.<host>"), metrics.prom series per component, and the HTML's GPU matrix heatmaps
(each failing node's, and the fleet median of its SKU and topology), per-HCA loopback bars and the
per-node check table with what was skipped and why."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict
from typing import Any

from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.figure import Figure

from collbench_py.nodechecks.nodedir import Measurement
from collbench_py.parsers.models import Matrix
from collbench_py.parsers.perftest import peak_gbits
from collbench_py.report.plots import (
    GREEN,
    GREY,
    HEATMAP_BOUNDS,
    HEATMAP_COLOURS,
    NOT_MEASURED,
    ORANGE,
    RED,
    Png,
    _png,
)
from collbench_py.verdicts import Report
from collbench_py.verdicts.components import ComponentFinding
from collbench_py.verdicts.model import Check
from collbench_py.verdicts.node_components import check_title

D2D = "device_to_device_memcpy_read_ce"
MAX_NODE_PLOTS = 8  # failing nodes drawn; the rest are in the tables


def finding_json(f: ComponentFinding) -> dict[str, Any]:
    return {
        "host": f.host,
        "kind": f.kind,
        "id": f.id,
        "severity": f.severity,
        "action": f.action,
        "reason": f.reason,
        "measured": f.measured,
        "unit": f.unit,
        "against": asdict(f.against) if f.against else None,
        "bus_id": f.bus_id,
        "serial": f.serial,
        "evidence": list(f.evidence),
    }


def node_checks_json(report: Report) -> dict[str, Any]:
    """results.json's `node_checks` (docs/report-schema.md); empty lists where no node checks ran."""
    components = report.components
    if components is None:
        return {"hosts": {}, "measurements": [], "findings": []}
    hosts = {
        name: {
            "checks": [
                {
                    "name": c.name,
                    "status": c.status,
                    "note": c.note,
                    "argv": list(c.argv),
                    "rc": c.rc,
                    "seconds": c.seconds,
                    "files": list(c.files),
                }
                for c in record.checks
            ],
            "perftest": record.perftest,
        }
        for name, record in sorted(components.records.items())
    }
    return {
        "hosts": hosts,
        "measurements": [asdict(m) for m in components.measurements],
        "findings": [finding_json(f) for f in components.findings],
    }


def is_node_check(check: Check) -> bool:
    return check.name.startswith("node/")


def junit_cases(report: Report) -> list[tuple[str, Check]]:
    """One testcase per component finding ("<kind> <id>") and per node check ("check <name>"),
    classname "node.<host>"; a skipped check is a skipped testcase."""
    components = report.components
    if components is None:
        return []
    cases: list[tuple[str, Check]] = []
    for f in components.findings:
        reason = f"{f.reason} - {f.action}"
        cases.append((f"node.{f.host}", Check(f"{f.kind} {f.id}", f.severity, reason, f.host, f.evidence)))
    for name, record in sorted(components.records.items()):
        for c in record.checks:
            status = {"ok": "pass", "skipped": "skip"}.get(c.status, "warn")
            reason = f"{check_title(c.name)}: {c.status}" + (f" ({c.note})" if c.note else "")
            cases.append((f"node.{name}", Check(f"check {c.name}", status, reason, name)))
    return cases


def metrics_lines(report: Report, labels) -> list[str]:
    """collbench_component_value{host,kind,id,metric} and
    collbench_component_finding{host,kind,id,severity}."""
    lines = [
        "# HELP collbench_component_value A node check's measurement of one component (unit by metric).",
        "# TYPE collbench_component_value gauge",
    ]
    components = report.components
    if components is not None:
        lines += [
            "collbench_component_value"
            + labels(host=m.host, kind=m.kind, id=m.id, metric=m.metric)
            + f" {m.value:.6g}"
            for m in components.measurements
            if _worth_a_series(m)
        ]
    lines += [
        "# HELP collbench_component_finding A component a node check found bad (1), by severity.",
        "# TYPE collbench_component_finding gauge",
    ]
    if components is not None:
        lines += [
            "collbench_component_finding"
            + labels(host=f.host, kind=f.kind, id=f.id, severity=f.severity)
            + " 1"
            for f in components.findings
        ]
    return lines


def _worth_a_series(m: Measurement) -> bool:
    """A Prometheus series per GPU pair, GPU, port and HCA; NVLink speeds and counters that did not
    grow (18 links x 4 per GPU) stay in results.json: 576 series a node for nothing to alert on."""
    if m.metric == "link_speed":
        return False
    return not (m.metric.endswith("_growth") and m.value == 0)


def matrix_heatmap(matrix: Matrix, reference: Matrix | None, title: str) -> Png:
    """A GPU x GPU matrix, each cell coloured by its % of the reference's cell (the fleet median)
    or of the matrix's own median, its GB/s written in."""
    own = [v for row in matrix.values for v in row if v is not None]
    middle = sorted(own)[len(own) // 2] if own else math.nan
    grid = []
    for r, row in enumerate(matrix.values):
        cells = []
        for c, value in enumerate(row):
            ref = reference.values[r][c] if reference is not None and r < len(reference.values) else middle
            cells.append(math.nan if value is None or not ref else 100 * value / ref)
        grid.append(cells)
    fig = Figure(figsize=(5.4, 4.6), layout="constrained")
    ax = fig.subplots()
    cmap = ListedColormap(HEATMAP_COLOURS).with_extremes(bad=NOT_MEASURED)
    image = ax.imshow(grid, cmap=cmap, norm=BoundaryNorm(HEATMAP_BOUNDS, cmap.N))
    ax.set_xticks(range(len(matrix.col_labels)), [f"GPU{c}" for c in matrix.col_labels], fontsize=8)
    ax.set_yticks(range(len(matrix.row_labels)), [f"GPU{r}" for r in matrix.row_labels], fontsize=8)
    for r, row in enumerate(matrix.values):
        for c, value in enumerate(row):
            if value is not None:
                dark = not grid[r][c] >= HEATMAP_BOUNDS[2]
                ax.text(
                    c,
                    r,
                    f"{value:.0f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white" if dark else "black",
                )
    bar = fig.colorbar(image, ax=ax, shrink=0.8, label="% of the fleet median cell")
    bar.set_ticks([25, 65, 85, 92.5, 97.5], labels=["<50", "50-80", "80-90", "90-95", ">=95"])
    ax.set_title(title, fontsize=9)
    return _png(fig)


def hca_bars(report: Report) -> Png | None:
    """Per HCA: the fleet's median loopback as a bar, its lowest node as a whisker, and each HCA
    with a finding as a red (fail) or orange (warn) dot named by its host; the profile's line dashed.
    One bar per HCA name, so the plot costs the same for 4 nodes or 4,000."""
    components = report.components
    if components is None:
        return None
    values: dict[str, list[float]] = {}
    for record in components.records.values():
        for hca, run in record.loopback.items():
            value = peak_gbits(run)
            if value is not None:
                values.setdefault(hca, []).append(value)
    if not values:
        return None
    names = sorted(values, key=lambda name: (len(name), name))
    medians = [statistics.median(values[name]) for name in names]
    lows = [m - min(values[name]) for name, m in zip(names, medians, strict=True)]
    fig = Figure(figsize=(min(12.0, 3 + 0.5 * len(names)), 3.6), layout="constrained")
    ax = fig.subplots()
    ax.bar(
        range(len(names)),
        medians,
        color=GREEN,
        yerr=[lows, [0] * len(names)],
        capsize=3,
        label="fleet median",
    )
    flagged = [f for f in components.findings if f.kind == "hca" and f.measured is not None and f.id in names]
    for f in flagged[:MAX_NODE_PLOTS]:
        x = names.index(f.id)
        ax.plot(x, f.measured, "o", color=RED if f.severity == "fail" else ORANGE)
        ax.annotate(f.host, (x, f.measured), textcoords="offset points", xytext=(6, -3), fontsize=7)
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=8)
    line = report.profile.node.hca_loopback_gbits if report.profile else None
    if line:
        ax.axhline(line, color=GREY, linestyle="--", label=f"line {line:g} Gb/s")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_ylabel("loopback Gb/s")
    ax.set_title(f"HCA loopback (ib_write_bw to its own host), {len(components.records)} nodes", fontsize=10)
    return _png(fig)


def html_context(report: Report, with_plots: bool = True) -> dict[str, Any] | None:
    """What index.html shows of the node checks; None where none ran."""
    components = report.components
    if components is None:
        return None
    failing = sorted({f.host for f in components.findings if f.severity == "fail"})
    heatmaps, medians = [], []
    for key, members in sorted(components.groups.items()):
        median = components.fleet_medians.get(key)
        if median is not None and with_plots and len(members) > 1:
            medians.append(
                {
                    "group": key,
                    "nodes": len(members),
                    "png": matrix_heatmap(median, None, f"fleet median, {key}"),
                }
            )
        for host in members:
            matrix = components.records[host].matrix(D2D)
            if host in failing and matrix is not None and with_plots and len(heatmaps) < MAX_NODE_PLOTS:
                title = f"{host}: {D2D} (GB/s)"
                heatmaps.append({"host": host, "png": matrix_heatmap(matrix, median, title)})
    rows = []
    for host, record in sorted(components.records.items()):
        for c in record.checks:
            rows.append(
                {
                    "host": host,
                    "check": check_title(c.name),
                    "status": c.status,
                    "note": c.note or "",
                    "seconds": "" if c.seconds is None else f"{c.seconds:.1f}",
                }
            )
    perftest = sorted(
        {
            f"{h}: perftest {r.perftest.get('source', '?')}"
            for h, r in components.records.items()
            if r.perftest and not r.perftest.get("gpudirect")
        }
    )
    return {
        "findings": [{**finding_json(f), "against_text": _against(f)} for f in components.findings],
        "heatmaps": heatmaps,
        "medians": medians,
        "hca_bars": hca_bars(report) if with_plots else None,
        "checks": rows,
        "without_gpudirect": perftest,
    }


def _against(f: ComponentFinding) -> str:
    if f.against is None:
        return ""
    value = "" if f.against.value is None else f"{f.against.value:g} {f.unit or ''}".strip()
    nodes = f" over {f.against.nodes} nodes" if f.against.nodes else ""
    return f"{f.against.basis} {value}{nodes}: {f.against.source}"


def attention(report: Report) -> list[dict[str, str]]:
    """The components for the first screen's "needs attention": host, component, what to do."""
    if report.components is None:
        return []
    return [
        {
            "host": f.host,
            "component": f"{f.kind} {f.id}",
            "severity": f.severity,
            "action": f.action,
            "reason": f.reason,
        }
        for f in report.components.findings
    ]


def ticket_lines(report: Report, host: str) -> list[str]:
    """The components of `host` for its ticket: one line each, with the repair."""
    if report.components is None:
        return []
    lines = []
    for f in report.components.of_host(host):
        ids = ", ".join(
            x for x in (f"bus {f.bus_id}" if f.bus_id else "", f"serial {f.serial}" if f.serial else "") if x
        )
        lines.append(
            f"- {f.kind} {f.id}{f' ({ids})' if ids else ''}: {f.reason} - {f.action} ({_against(f)})"
        )
    return lines
