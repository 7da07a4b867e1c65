"""index.html and report.md from Jinja2 templates (StrictUndefined; autoescape for HTML)."""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from collbench_py import __version__
from collbench_py.report import plots
from collbench_py.report.files import atomic_writer
from collbench_py.rundir import Host
from collbench_py.verdicts import HostVerdict, Report
from collbench_py.verdicts.bandwidth import human_size, sizes_text
from collbench_py.verdicts.topology import cells

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>|#!])")


def _md(value: Any) -> str:
    """Untrusted text in Markdown: no markup, no HTML, no table breaks, one line."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(str(value).split()))


def _gbs(value: float | None) -> str:
    return "" if value is None else f"{value:.3g}"


def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("collbench_py", "templates"),
        autoescape=select_autoescape(enabled_extensions=("html", "html.j2"), default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["md"] = _md
    env.filters["gbs"] = _gbs
    env.filters["size"] = human_size
    return env


def _href(out_dir: Path, run_dir: Path, rel: str | None) -> str | None:
    if not rel:
        return None
    return Path(os.path.relpath(run_dir / rel, out_dir)).as_posix()


def _topology_table(host: Host, verdict: HostVerdict) -> dict[str, Any] | None:
    topo = host.topology
    if topo is None:
        return None
    nic_label = {label: f"{label} ({dev})" for label, dev in topo.nics.items()}
    order = list(topo.gpus) + [n for n in topo.links if n not in topo.gpus]
    labels = [nic_label.get(n, n) for n in order]
    mine = cells(topo)
    affinity = ["CPU affinity", "NUMA affinity", "GPU NUMA ID"]
    affinity = [a for a in affinity if any((g, a) in mine for g in topo.gpus)]
    rows = []
    for label in labels:
        row = []
        for col in [*labels, *affinity]:
            key = (label, col)
            value = "X" if col == label else mine.get(key, "")
            fleet = verdict.topology_diff.get(key)
            row.append({"value": value, "fleet": fleet})
        rows.append({"label": label, "cells": row})
    return {"columns": [*labels, *affinity], "rows": rows}


def _logs_by_host(report: Report, out_dir: Path) -> dict[str, list[dict[str, str | None]]]:
    """Links to each host's raw logs (intra and pairs), built in one pass over the logs."""
    by_host: dict[str, list[dict[str, str | None]]] = {}
    for log in report.run.logs:
        if log.launch.kind == "all":
            continue
        label = f"{log.launch.kind} {log.launch.collective}"
        if log.launch.kind == "pair":
            label += " " + "--".join(log.launch.hosts)
        link = {"label": label, "href": _href(out_dir, report.run.path, log.launch.log)}
        for host in log.launch.hosts:
            by_host.setdefault(host, []).append(link)
    return by_host


def _facts(host: Host | None) -> dict[str, Any] | None:
    facts = host.facts if host else None
    if not facts:
        return None
    gpus = facts.get("gpus") or []
    pcie = sorted(
        {
            f"gen {g.get('pcie_gen_current')}/{g.get('pcie_gen_max')} x{g.get('pcie_width_current')}/"
            f"x{g.get('pcie_width_max')}"
            for g in gpus
        }
    )
    ib = [
        f"{p.get('device')}:{p.get('port')} {p.get('state')} {p.get('rate_gbps')} Gb/s"
        for p in facts.get("ib") or []
        if isinstance(p, dict)
    ]
    return {
        "gpus": f"{len(gpus)}x {gpus[0].get('name')}" if gpus else "no GPU",
        "driver": facts.get("driver_version") or "",
        "cuda": facts.get("cuda_version") or "",
        "nccl": facts.get("nccl_version") or "",
        "pcie": ", ".join(pcie),
        "ib": ", ".join(ib),
        "cpu": (facts.get("cpu") or {}).get("model") or "",
        "os": " ".join(str(v) for v in (facts.get("os") or {}).values() if v),
    }


def context(report: Report, out_dir: Path, exit_code: int, with_plots: bool = True) -> dict[str, Any]:
    run = report.run
    plots.reset_cache()
    collectives = report.collectives
    flagged = [v for v in report.hosts.values() if v.verdict != "passed"]
    plotted = {v.host for v in flagged[: plots.MAX_HOST_PLOTS]}
    hosts = []
    logs = _logs_by_host(report, out_dir)
    for verdict in report.hosts.values():
        info = run.hosts.get(verdict.host)
        hosts.append(
            {
                "name": verdict.host,
                "inventory_hostname": verdict.inventory_hostname,
                "verdict": verdict.verdict,
                "problems": verdict.problems,
                "checks": verdict.checks,
                "headline": verdict.problems[0].reason if verdict.problems else "all checks passed",
                "bandwidth": [
                    {
                        "collective": c,
                        "value": verdict.busbw.get(c),
                        "z": verdict.z.get(c),
                        "status": _status_of(verdict, f"intra/{c}/"),
                    }
                    for c in collectives
                ],
                "facts": _facts(info),
                "logs": logs.get(verdict.host, [])[:40],
                "plot": plots.host_plot(report, verdict) if with_plots and verdict.host in plotted else None,
                "topology": _topology_table(info, verdict) if info and verdict.topology_diff else None,
                "detailed": verdict.verdict != "passed",
            }
        )
    intra_stats = [s for (kind, _), s in sorted(report.stats.items()) if kind == "intra"]
    pair_collectives = sorted({p.collective for p in report.pairs})
    bad_pairs = [p for p in report.pairs if p.status != "ok"]
    all_logs = []
    for log in run.logs_of("all"):
        run_ = log.run
        last = run_.rows[-1] if run_ and run_.rows else None
        check = next(
            (c for c in report.fleet_checks if c.log == log.launch.log and c.name.endswith("/run")), None
        )
        all_logs.append(
            {
                "collective": log.launch.collective,
                "hosts": len(log.launch.hosts),
                "status": check.status if check else "pass",
                "reason": check.reason if check else "",
                "size": human_size(last.size) if last else "",
                "busbw": _gbs(last.oop.busbw) if last else "",
                "href": _href(out_dir, run.path, log.launch.log),
            }
        )
    worst = [
        {"host": v.host, "verdict": v.verdict, "reason": v.problems[0].reason if v.problems else ""}
        for v in flagged
    ]
    return {
        "version": __version__,
        "generated_at": datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "run": run,
        "exit_code": int(exit_code),
        "profile": report.profile,
        "profile_reason": report.profile_reason,
        "min_drop": report.min_drop,
        "options": report.options,
        "counts": {k: report.count(k) for k in ("failed", "warned", "unreachable", "passed")},
        "total": len(report.hosts),
        "worst": worst,
        "fleet_checks": [c for c in report.fleet_checks if c.status != "pass"],
        "collectives": collectives,
        "stats": [
            {
                "collective": s.collective,
                "sizes": sizes_text(s.sizes),
                "fallback": s.fallback,
                "median": s.median,
                "n": s.n,
                "threshold": report.profile.threshold(s.collective) if report.profile else None,
                "plot": plots.fleet_plot(report, s.collective) if with_plots else None,
            }
            for s in intra_stats
        ],
        "ranking": plots.ranking_plot(report) if with_plots else None,
        "hosts": hosts,
        "pair_sections": [
            {
                "collective": c,
                "plot": plots.pair_heatmap(report, c) if with_plots else None,
                "stat": report.stats.get(("pair", c)),
                "count": sum(1 for p in report.pairs if p.collective == c),
            }
            for c in pair_collectives
        ],
        "bad_pairs": [
            {
                "label": p.label,
                "collective": p.collective,
                "busbw": p.busbw,
                "status": p.status,
                "cause": p.cause,
                "href": _href(out_dir, run.path, p.log),
            }
            for p in bad_pairs
        ],
        "all_logs": all_logs,
        "not_measured": report.run.not_measured,
    }


def _status_of(verdict: HostVerdict, prefix: str) -> str:
    statuses = {c.status for c in verdict.checks if c.name.startswith(prefix)}
    for status in ("fail", "warn"):
        if status in statuses:
            return status
    return "pass"


def write_html_and_markdown(report: Report, out_dir: Path, exit_code: int) -> None:
    env = environment()
    ctx = context(report, out_dir, exit_code)
    with atomic_writer(out_dir / "index.html") as out:
        out.write(env.get_template("index.html.j2").render(**ctx))
    with atomic_writer(out_dir / "report.md") as out:
        out.write(env.get_template("report.md.j2").render(**ctx))
