"""index.html and report.md from Jinja2 templates (StrictUndefined; autoescape for HTML).

What grows with the fleet is bounded, so a 4,000-host report stays a page (hosts.csv and
results.json keep every host and pair):
- the pair plan's suspects and witnesses come first (report/plan.py bounds them);
- the host table lists every host up to HOST_ROWS_ALL hosts; beyond, every host that did not pass
  and the first HOST_ROWS_PASSED that did;
- per host details: every host that did not pass (up to MAX_DETAILED, worst first); the collapsed
  sections of passed hosts only up to PASSED_SECTIONS_UP_TO hosts;
- the pair heatmap up to plots.HEATMAP_MAX_HOSTS hosts; beyond, the MAX_WORST_PAIRS worst pairs
  as a sorted table; the table of non-normal pairs holds at most MAX_BAD_PAIRS, worst first.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from collbench_py import __version__
from collbench_py.report import inside_nodes, plots, rail_view
from collbench_py.report.conclusion import KINDS, finding_json, headline, how, subjects, tickets
from collbench_py.report.console import ports_not_active
from collbench_py.report.files import atomic_writer
from collbench_py.report.plan import MAX_WITNESSES_LISTED, plan_view
from collbench_py.rundir.load import Host
from collbench_py.verdicts import HostVerdict, PairResult, Report
from collbench_py.verdicts.bandwidth import human_size, sizes_text
from collbench_py.verdicts.topology import cells

HOST_ROWS_ALL = 500
HOST_ROWS_PASSED = 100
MAX_DETAILED = 200
PASSED_SECTIONS_UP_TO = 200
MAX_WORST_PAIRS = 50
MAX_BAD_PAIRS = 200
MAX_ATTENTION = 50
HOST_NAME_WIDTH = 28  # the host table's names, cut in the middle beyond (the full name on hover)

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>|#!])")


def _md(value: Any) -> str:
    """Untrusted text in Markdown: no markup, no HTML, no table breaks, one line."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(str(value).split()))


def _gbs(value: float | None) -> str:
    return "" if value is None else f"{value:.3g}"


def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("collbench_py.report", "templates"),
        autoescape=select_autoescape(enabled_extensions=("html", "html.j2"), default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["md"] = _md
    env.filters["gbs"] = _gbs
    env.filters["size"] = human_size
    env.filters["short"] = lambda name: plots.short_name(name, HOST_NAME_WIDTH)
    return env


def _href(out_dir: Path, run_dir: Path, rel: str | None) -> str | None:
    """The link from a page in `out_dir` to `rel`, a path in the run directory."""
    if not rel:
        return None
    if os.path.isabs(rel) or ".." in rel.split("/"):
        return Path(os.path.relpath(run_dir / rel, out_dir)).as_posix()
    # relpath is lexical: the run directory's path from out_dir is worked out once (30,000 logs
    # at 4,000 hosts, each relpath two getcwd calls and two normalisations), each log joined to it.
    return os.path.normpath(os.path.join(_run_dir_from(str(out_dir), str(run_dir), os.getcwd()), rel))


@functools.lru_cache(maxsize=16)
def _run_dir_from(out_dir: str, run_dir: str, cwd: str) -> str:  # cwd: part of the key (relative paths)
    return os.path.relpath(run_dir, out_dir)


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


def _logs_by_host(report: Report, out_dir: Path, wanted: set[str]) -> dict[str, list[dict[str, str | None]]]:
    """Links to each host's raw logs (intra and pairs), built in one pass over the logs."""
    by_host: dict[str, list[dict[str, str | None]]] = {}
    for log in report.run.logs:
        if log.launch.kind == "all" or not wanted.intersection(log.launch.hosts):
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
    first = [h for h in subjects(report) if h in report.hosts]
    named = set(first)
    ordered = [report.hosts[h] for h in first] + [v for v in report.hosts.values() if v.host not in named]
    flagged = [v for v in ordered if v.verdict != "passed"]
    plotted = {v.host for v in flagged[: plots.MAX_HOST_PLOTS]}
    listed = _listed_hosts(ordered)
    detailed = {v.host for v in flagged[:MAX_DETAILED]}
    sections = len(report.hosts) <= PASSED_SECTIONS_UP_TO
    hosts = []
    logs = _logs_by_host(report, out_dir, listed)
    for verdict in ordered:
        if verdict.host not in listed and verdict.host not in detailed:
            continue
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
                "detailed": verdict.host in detailed,
                "row": verdict.host in listed,
                "section": verdict.host in detailed or sections,
            }
        )
    intra_stats = [s for (kind, _), s in sorted(report.stats.items()) if kind == "intra"]
    pair_collectives = sorted({p.collective for p in report.pairs})
    bad_pairs = _worst_pairs([p for p in report.pairs if p.status != "ok"], report)
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
        {"host": v.host, "verdict": v.verdict, "reason": _attention_reason(v)}
        for v in flagged[:MAX_ATTENTION]
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
        "conclusion": _conclusion(report, out_dir),
        "total": len(report.hosts),
        "worst": worst,
        "worst_total": len(flagged),
        # Ports down or slow of hosts the list above does not show (it names them with the host).
        "ports": [p for p in ports_not_active(report) if p["host"] not in {w["host"] for w in worst}][
            :MAX_ATTENTION
        ],
        "plan": _plan_with_links(report, out_dir),
        # Rail findings first in "needs attention": a NIC or a leaf explains slow pairs below it.
        "rails": rail_view.attention(report)[:MAX_ATTENTION],
        "rail_heatmap": rail_view.heatmap(report) if with_plots else None,
        "rail_measured": bool(report.rails and report.rails.measurements),
        "components": inside_nodes.attention(report)[:MAX_ATTENTION],
        "node_checks": inside_nodes.html_context(report, with_plots),
        "hosts_unlisted": len(report.hosts) - len(listed),
        "sections_of_passed": sections,
        "limits": {"heatmap": plots.HEATMAP_MAX_HOSTS, "detailed": MAX_DETAILED},
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
        "pair_sections": [_pair_section(report, c, out_dir, with_plots) for c in pair_collectives],
        "bad_pairs": [
            {
                "label": p.label,
                "collective": p.collective,
                "busbw": p.busbw,
                "status": p.status,
                "cause": p.cause,
                "href": _href(out_dir, run.path, p.log),
            }
            for p in bad_pairs[:MAX_BAD_PAIRS]
        ],
        "bad_pairs_total": len(bad_pairs),
        "all_logs": all_logs,
        "not_measured": report.run.not_measured,
    }


def _attention_reason(verdict: HostVerdict) -> str:
    """The first reason, and an InfiniBand port problem behind it named too."""
    problems = verdict.problems
    if not problems:
        return ""
    ib = next((c for c in problems[1:] if c.name == "facts/ib"), None)
    return problems[0].reason + (f"; also {ib.reason}" if ib is not None else "")


def _conclusion(report: Report, out_dir: Path) -> dict[str, Any] | None:
    """The pairs conclusion for the top of the page: what to drain, ticket, re-test; with links
    to each finding's logs and its ticket text."""
    if not report.pairs and report.run.plan is None:
        return None
    texts = {(t["kind"], t["subject"]): t for t in tickets(report)}
    found: dict[str, list[dict[str, Any]]] = {kind: [] for kind in KINDS}
    for f in report.conclusion.findings:
        item = finding_json(report, f)
        # Bounded on a page (results.json and tickets.md have every witness and log).
        item["witnesses"] = item["witnesses"][:MAX_WITNESSES_LISTED]
        item["logs"] = item["logs"][:MAX_WITNESSES_LISTED]
        item["log_links"] = [
            {"log": log, "href": _href(out_dir, report.run.path, log)} for log in item["logs"]
        ]
        item["ticket"] = texts.get((f.kind, f.subject))
        found[f.kind].append(item)
    return {
        "headline": headline(report),
        "how": how(report),
        "counts": report.conclusion.counts,
        "bad_nodes": found["bad node"][:MAX_ATTENTION],
        "bad_links": found["bad link"][:MAX_ATTENTION],
        "unresolved": found["unresolved"][:MAX_ATTENTION],
    }


def _plan_with_links(report: Report, out_dir: Path) -> dict[str, Any] | None:
    view = plan_view(report)
    for decision in (view or {}).get("decisions") or []:
        for witness in decision["witnesses"]:
            witness["href"] = _href(out_dir, report.run.path, witness["log"])
    return view


def _listed_hosts(ordered: list[HostVerdict]) -> set[str]:
    """The hosts of the host table: all of a small fleet; beyond, the ones that did not pass and
    the first HOST_ROWS_PASSED that did."""
    if len(ordered) <= HOST_ROWS_ALL:
        return {v.host for v in ordered}
    passed = [v.host for v in ordered if v.verdict == "passed"][:HOST_ROWS_PASSED]
    return {v.host for v in ordered if v.verdict != "passed"} | set(passed)


def _severity(pair: PairResult, report: Report) -> float:
    """Smaller is worse: a failed launch first, then busbw as a fraction of the pair baseline."""
    if pair.busbw is None:
        return -1.0
    stat = report.stats.get(("pair", pair.collective))
    return pair.busbw / stat.median if stat and stat.median else pair.busbw


def _worst_pairs(pairs: list[PairResult], report: Report) -> list[PairResult]:
    return sorted(pairs, key=lambda p: (_severity(p, report), p.collective, p.hosts))


def _pair_section(report: Report, collective: str, out_dir: Path, with_plots: bool) -> dict[str, Any]:
    """One collective's pairs: the heatmap of a small fleet, the worst pairs' table beyond."""
    results = [p for p in report.pairs if p.collective == collective]
    hosts = len({h for p in results for h in p.hosts})
    heatmap = hosts <= plots.HEATMAP_MAX_HOSTS
    stat = report.stats.get(("pair", collective))
    worst = [] if heatmap else _worst_pairs([p for p in results if p.status != "launcher"], report)
    return {
        "collective": collective,
        "plot": plots.pair_heatmap(report, collective) if with_plots and heatmap else None,
        "stat": stat,
        "count": len(results),
        "hosts": hosts,
        "heatmap": heatmap,
        "worst": [
            {
                "label": p.label,
                "busbw": p.busbw,
                "percent": None
                if p.busbw is None or not stat or not stat.median
                else 100 * p.busbw / stat.median,
                "status": p.status,
                "cause": p.cause,
                "href": _href(out_dir, report.run.path, p.log),
            }
            for p in worst[:MAX_WORST_PAIRS]
        ],
    }


def _status_of(verdict: HostVerdict, prefix: str) -> str:
    statuses = {c.status for c in verdict.checks if c.name.startswith(prefix)}
    for status in ("fail", "warn"):
        if status in statuses:
            return status
    return "pass"


@dataclass(frozen=True)
class Pages:
    """index.html and report.md, their context made and their figures perhaps still being drawn
    (plots.drawn_beside): `write` waits for them."""

    out_dir: Path
    ctx: dict[str, Any]

    def write(self) -> None:
        env = environment()
        ctx = plots.resolved(self.ctx)
        with atomic_writer(self.out_dir / "index.html") as out:
            out.write(env.get_template("index.html.j2").render(**ctx))
        with atomic_writer(self.out_dir / "report.md") as out:
            out.write(env.get_template("report.md.j2").render(**ctx))


def start_pages(report: Report, out_dir: Path, exit_code: int) -> Pages:
    return Pages(out_dir, context(report, out_dir, exit_code))
