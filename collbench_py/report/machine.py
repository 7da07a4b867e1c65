"""Machine-readable outputs: results.json, hosts.csv, junit.xml, metrics.prom."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from collbench_py import __version__
from collbench_py.parsers.models import Half
from collbench_py.profiles import RING_COLLECTIVES, InterExpectation, Profile
from collbench_py.report import inside_nodes, rail_view
from collbench_py.report.conclusion import conclusion_json, subjects, tickets
from collbench_py.report.files import atomic_writer
from collbench_py.report.plan import ordered_decisions, plan_view
from collbench_py.rundir.results_rows import RowsBeside, write_rows
from collbench_py.rundir.results_rows import number as _number
from collbench_py.verdicts import Check, Report
from collbench_py.verdicts.slurm import describe

RESULTS_SCHEMA = 1
VERDICT_CODE = {"passed": 0, "warned": 1, "failed": 2, "unreachable": 3}


def _check(check: Check) -> dict[str, Any]:
    return {
        "name": check.name,
        "status": check.status,
        "reason": check.reason,
        "evidence": list(check.evidence),
        "log": check.log,
    }


def _half(half: Half | None) -> dict[str, Any] | None:
    if half is None:
        return None
    return {
        "time_us": _number(half.time_us),
        "algbw": _number(half.algbw),
        "busbw": _number(half.busbw),
        "wrong": half.wrong,
    }


def head(report: Report, exit_code: int) -> dict[str, Any]:
    """Everything but the rows: small enough to build in memory for any fleet."""
    run = report.run
    profile = report.profile
    return {
        "schema": RESULTS_SCHEMA,
        "generator": f"collbench {__version__}",
        "generated_at": datetime.now().astimezone().isoformat(timespec="seconds"),
        "run": {
            "run_id": run.run_id,
            "status": run.status,
            "started_at": run.started_at,
            "finished_at": run.finished_at,
            "backend": run.backend,
            "launcher": run.launcher,
            "collbench_version": run.collbench_version,
            "parameters": run.parameters,
        },
        "profile": None
        if profile is None
        else {
            "name": profile.name,
            "description": profile.description,
            "origin": profile.origin,
            "pass_fraction": profile.pass_fraction,
            "line_rate_gbs": profile.line_rate_gbs,
            "expectations": {
                c: {
                    "size": e.size,
                    "busbw": e.busbw,
                    "threshold": e.busbw * profile.pass_fraction,
                    "source": e.source,
                }
                for c, e in profile.expectations.items()
            },
            "inter": _inter(profile),
        },
        "profile_reason": report.profile_reason,
        "criteria": {
            "reference_min_bytes": report.options.reference_min_bytes,
            "reference_sizes": report.options.reference_sizes,
            "z_suspect": report.options.z_suspect,
            "z_fail": report.options.z_fail,
            "min_drop": report.min_drop,
            "min_fleet": report.options.min_fleet,
        },
        "summary": {
            "hosts": len(report.hosts),
            "passed": report.count("passed"),
            "warned": report.count("warned"),
            "failed": report.count("failed"),
            "unreachable": report.count("unreachable"),
            "links_failed": report.conclusion.counts["bad link"],
            "unresolved": report.conclusion.counts["unresolved"],
            "fleet_status": report.fleet_status,
            "exit_code": int(exit_code),
        },
        # The pairs conclusion: bad links (both ends, witnesses, evidence), bad nodes, unresolved;
        # computed once, from the plan's decisions where it decided and from the logs otherwise.
        "links": conclusion_json(report),
        # Rails between nodes: each host's rail map, every rail measurement, the NIC and leaf findings.
        "rails": rail_view.rails_json(report),
        # A ticket text per bad node and bad link (tickets.md has the same).
        "tickets": tickets(report),
        # The pair plan's suspects and their witnesses (every one), its rounds and log; null
        # without a plan, {"error": ...} when plan.json was there but not used.
        "plan": plan_view(report, bounded=False),
        "fleet": {
            "checks": [_check(c) for c in report.fleet_checks],
            "stats": [
                {
                    "kind": s.kind,
                    "collective": s.collective,
                    "reference_sizes": list(s.sizes),
                    "fallback": s.fallback,
                    "median": _number(s.median),
                    "scale": _number(s.scale),
                    "n": s.n,
                }
                for s in report.stats.values()
            ],
        },
        "hosts": [
            {
                "host": v.host,
                "inventory_hostname": v.inventory_hostname,
                "verdict": v.verdict,
                "reasons": [c.reason for c in v.problems],
                "busbw": {c: _number(x) for c, x in v.busbw.items()},
                "z": {c: _number(x) for c, x in v.z.items()},
                "facts": _facts_summary(report, v.host),
                "checks": [_check(c) for c in v.checks],
            }
            for v in report.hosts.values()
        ],
        "pairs": [
            {
                "hosts": list(p.hosts),
                "collective": p.collective,
                "busbw": _number(p.busbw),
                "status": p.status,
                "z": _number(p.z),
                "cause": p.cause,
                "log": p.log,
            }
            for p in report.pairs
        ],
    }


def with_not_measured(doc: dict[str, Any], report: Report) -> dict[str, Any]:
    """`not_measured` and `summary.not_measured`, in a run that had nodes Slurm could not give only:
    a run without them keeps the keys it always had."""
    if report.run.not_measured:
        doc["summary"]["not_measured"] = len(report.run.not_measured)
        doc["not_measured"] = not_measured_json(report)
    return doc


def not_measured_json(report: Report) -> list[dict[str, Any]]:
    """Nodes Slurm listed as unusable: not in `hosts` (never judged), each with Slurm's reason."""
    return [
        {"host": n.host, "state": n.state, "reason": n.reason, "named": n.named, "source": "slurm"}
        for n in report.run.not_measured
    ]


def _facts_summary(report: Report, host: str) -> dict[str, Any] | None:
    info = report.run.hosts.get(host)
    facts = info.facts if info else None
    if not facts:
        return None
    gpus = facts.get("gpus") or []
    return {
        "gpu_model": gpus[0].get("name") if gpus else None,
        "gpu_count": len(gpus),
        "driver_version": facts.get("driver_version"),
        "cuda_version": facts.get("cuda_version"),
        "nccl_version": facts.get("nccl_version"),
        "ib_ports": len(facts.get("ib") or []),
    }


def write_results_json(report: Report, path: Path, exit_code: int, rows: RowsBeside | None = None) -> None:
    """The head, then `results`: every parsed row of every log, copied from the records `rows` made
    beside the report (rundir.results_rows), or else written here from the parsed logs (the same
    bytes either way).

    A run of 4,000 hosts has 650,000 rows: each row is written from a prefix encoded once per
    log and its own numbers, as json.dumps would write it (`_row_json`), at a fraction of the cost."""
    doc = with_not_measured(head(report, exit_code), report)
    doc["node_checks"] = inside_nodes.node_checks_json(report)
    with atomic_writer(path) as out:
        out.writelines(head_chunks(doc))
        out.write(',\n "results": [')
        out.flush()  # the head before the copied bytes
        if rows is None or not rows.copy_into(out.buffer):  # type: ignore[attr-defined]
            write_rows(report.run.logs, out)
        out.write("\n ]\n}\n")


# The head's long lists, one element a line (as the rows are): json.dumps with an indent encodes in
# Python, about 1 s for the hosts of a 4,000-host run, the C encoder a quarter of that.
ONE_PER_LINE = ("hosts", "pairs")


def head_json(doc: dict[str, Any]) -> str:
    """`doc` as JSON: indented, but each element of its ONE_PER_LINE lists on a line of its own."""
    return "".join(head_chunks(doc)) + "\n}"


def head_chunks(doc: dict[str, Any]) -> Iterator[str]:
    """`head_json(doc)` but its closing brace, a piece at a time: the head of a 4,000-host run is
    25 MB, written as it is encoded rather than held whole (and copied) first."""
    yield "{\n "
    for i, (key, value) in enumerate(doc.items()):
        yield (",\n " if i else "") + f"{json.dumps(key)}: "
        if key in ONE_PER_LINE and isinstance(value, list) and value:
            yield "[\n  "
            for j, element in enumerate(value):
                yield f",\n  {json.dumps(element)}" if j else json.dumps(element)
            yield "\n ]"
        else:  # JSON strings hold no raw newline: each one is the layout's, indented one more
            yield json.dumps(value, indent=1).replace("\n", "\n ")


CSV_FIXED = (
    "host",
    "inventory_hostname",
    "verdict",
    "reasons",
    "gpu_model",
    "gpu_count",
    "driver_version",
    "cuda_version",
    "nccl_version",
    "ib_ports",
    "worst_pair_busbw",
    "bad_links",
)


def write_hosts_csv(report: Report, path: Path) -> None:
    collectives = report.collectives
    worst_pair: dict[str, float] = {}
    for pair in report.pairs:
        if pair.busbw is not None:
            for h in pair.hosts:
                worst_pair[h] = min(worst_pair.get(h, math.inf), pair.busbw)
    links: dict[str, list[str]] = {}
    for f in report.links_failed:
        for h in f.hosts:
            links.setdefault(h, []).append(f"{f.subject} ({f.collective})")
    fields = [*CSV_FIXED, *(f"busbw_{c}" for c in collectives), *(f"z_{c}" for c in collectives)]
    with atomic_writer(path, newline="") as out:
        writer = csv.DictWriter(out, fieldnames=fields)
        writer.writeheader()
        for v in report.hosts.values():
            facts = _facts_summary(report, v.host) or {}
            row: dict[str, Any] = {
                "host": v.host,
                "inventory_hostname": v.inventory_hostname,
                "verdict": v.verdict,
                "reasons": " | ".join(c.reason for c in v.problems),
                "worst_pair_busbw": _fmt(worst_pair.get(v.host)),
                # The bad links this host is one end of: the link's fault, not the host's verdict.
                "bad_links": " | ".join(links.get(v.host, [])),
                **{k: facts.get(k) for k in CSV_FIXED[4:10]},
            }
            for c in collectives:
                row[f"busbw_{c}"] = _fmt(v.busbw.get(c))
                row[f"z_{c}"] = _fmt(v.z.get(c))
            writer.writerow(row)


def _fmt(value: float | None) -> str:
    return "" if value is None or not math.isfinite(value) else f"{value:.6g}"


def _inter(profile: Profile) -> dict[str, Any]:
    """The pair bars: the ring collectives' NIC-line fraction and each collective's own entry."""
    pair_collectives = sorted(set(RING_COLLECTIVES) | set(profile.inter_own) | {"alltoall", "sendrecv"})
    return {
        "fraction_of_nic_line": profile.inter_fraction,
        "source": profile.inter_source,
        "collectives": {c: _bar(profile.inter_expectation(c)) for c in pair_collectives},
    }


def _bar(expectation: InterExpectation) -> dict[str, Any]:
    e = expectation
    return {"basis": e.basis, "fraction": e.fraction, "busbw": e.busbw, "source": e.source}


def write_junit(report: Report, path: Path) -> None:
    """One testcase per host and check (classname = host), one per bad link and unresolved pair
    (classname `link`), fleet checks under `fleet`."""
    # The conclusion's subjects first: CI tools that list failures in file order show them on top.
    first = [h for h in subjects(report) if h in report.hosts]
    named = set(first)
    hosts = [report.hosts[h] for h in first] + [v for v in report.hosts.values() if v.host not in named]
    # Rail findings first: a bad NIC or leaf explains slow pairs listed after it.
    cases: list[tuple[str, Check]] = rail_view.junit_cases(report)
    cases += link_cases(report)
    cases += [(v.host, c) for v in hosts for c in v.checks if not inside_nodes.is_node_check(c)]
    cases += inside_nodes.junit_cases(report)
    cases += [("fleet", c) for c in report.fleet_checks]
    cases += not_measured_cases(report)
    suite = {
        "name": f"collbench {report.run.run_id}",
        "tests": str(len(cases)),
        "failures": str(sum(1 for _, c in cases if c.status == "fail")),
        "errors": "0",
        "skipped": str(sum(1 for _, c in cases if c.status == "skip")),
        "timestamp": report.run.started_at or "",
    }
    with atomic_writer(path) as out:
        out.writelines(junit_xml(suite, cases))


def junit_xml(suite: dict[str, str], cases: list[tuple[str, Check]]) -> Iterator[str]:
    """junit.xml's text, a piece at a time: as ElementTree writes the same elements (ET.indent, then
    tostring), without building them: at 4,000 hosts its 110,000 elements took ElementTree a second."""
    yield '<?xml version="1.0" encoding="UTF-8"?>\n<testsuites name="collbench">\n'
    yield f"  <testsuite{_attributes(suite)}"
    if not cases:
        yield " />\n</testsuites>\n"
        return
    yield ">"
    for classname, check in cases:
        text = "\n".join([check.reason, *check.evidence])
        case = f"\n    <testcase{_attributes({'classname': classname, 'name': check.name})}"
        if check.status == "fail":
            message = _attributes({"message": check.reason[:500], "type": "collbench"})
            yield f"{case}>\n      <failure{message}{_element_text('failure', text)}\n    </testcase>"
        elif check.status == "skip":
            yield f"{case}>\n      <skipped{_attributes({'message': check.reason[:500]})} />\n    </testcase>"
        elif check.status in ("warn", "note"):
            said = f"{check.status.upper()}: {text}"
            yield f"{case}>\n      <system-out{_element_text('system-out', said)}\n    </testcase>"
        else:
            yield f"{case} />"
    yield "\n  </testsuite>\n</testsuites>\n"


def _attributes(values: dict[str, str]) -> str:
    return "".join(f' {name}="{_xml_attribute(value)}"' for name, value in values.items())


def _element_text(tag: str, text: str) -> str:
    """An element's end after its attributes: its text and closing tag, or " />" for no text."""
    return f">{_xml_text(text)}</{tag}>" if text else " />"


def _xml_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _xml_attribute(value: str) -> str:
    """An attribute's value escaped as ElementTree escapes it: line ends and tabs as references,
    so that a parser reads them back rather than normalising them to spaces."""
    return (
        _xml_text(value)
        .replace('"', "&quot;")
        .replace("\r", "&#13;")
        .replace("\n", "&#10;")
        .replace("\t", "&#09;")
    )


def link_cases(report: Report) -> list[tuple[str, Check]]:
    """A failed testcase per bad link and per unresolved pair, named after the pair."""
    return [
        (
            "link",
            Check(
                f"pairs/{f.collective}/{f.subject}",
                "fail",
                f"{f.kind}: {f.reason}",
                None,
                (*f.witnesses, *f.logs),
            ),
        )
        for f in [*report.links_failed, *report.unresolved]
    ]


def not_measured_cases(report: Report) -> list[tuple[str, Check]]:
    """One skipped testcase per node Slurm listed as unusable, its message Slurm's reason."""
    return [
        (n.host, Check("not-measured", "skip", f"not measured: {describe(n)}", n.host))
        for n in report.run.not_measured
    ]


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: Any) -> str:
    return "{" + ",".join(f'{k}="{_label(str(v))}"' for k, v in labels.items()) + "}"


def write_metrics(report: Report, path: Path) -> None:
    """Prometheus text format for node_exporter's textfile collector."""
    run_id = report.run.run_id
    lines = _plan_metrics(report)
    lines += [
        "# HELP collbench_busbw_gbytes_per_second Bus bandwidth at the reference size, intra-node, per host.",
        "# TYPE collbench_busbw_gbytes_per_second gauge",
    ]
    intra = {c: s for (kind, c), s in report.stats.items() if kind == "intra"}
    for v in report.hosts.values():
        for collective, value in sorted(v.busbw.items()):
            size = max(intra[collective].sizes) if collective in intra else 0
            lines.append(
                "collbench_busbw_gbytes_per_second"
                + _labels(host=v.host, collective=collective, size_bytes=size)
                + f" {value:.6g}"
            )
    lines += [
        "# HELP collbench_pair_busbw_gbytes_per_second Bus bandwidth at the reference size between 2 hosts.",
        "# TYPE collbench_pair_busbw_gbytes_per_second gauge",
    ]
    for pair in report.pairs:
        if pair.busbw is not None:
            lines.append(
                "collbench_pair_busbw_gbytes_per_second"
                + _labels(host_a=pair.hosts[0], host_b=pair.hosts[1], collective=pair.collective)
                + f" {pair.busbw:.6g}"
            )
    lines += [
        "# HELP collbench_host_verdict Verdict per host: 0 passed, 1 warned, 2 failed, 3 unreachable.",
        "# TYPE collbench_host_verdict gauge",
    ]
    lines += [
        "collbench_host_verdict" + _labels(host=v.host, verdict=v.verdict) + f" {VERDICT_CODE[v.verdict]}"
        for v in report.hosts.values()
    ]
    lines += [
        "# HELP collbench_hosts Hosts by verdict in the run.",
        "# TYPE collbench_hosts gauge",
    ]
    lines += [
        "collbench_hosts" + _labels(verdict=verdict) + f" {report.count(verdict)}" for verdict in VERDICT_CODE
    ]
    lines += link_metrics(report)
    lines += rail_view.metrics_lines(report, _labels)
    lines += not_measured_metrics(report)
    lines += inside_nodes.metrics_lines(report, _labels)
    started = _epoch(report.run.started_at)
    lines += [
        "# HELP collbench_run_timestamp_seconds Start of the benchmark run, Unix time.",
        "# TYPE collbench_run_timestamp_seconds gauge",
        "collbench_run_timestamp_seconds" + _labels(run_id=run_id) + f" {started:.0f}",
    ]
    with atomic_writer(path) as out:
        out.write("\n".join(lines) + "\n")


def link_metrics(report: Report) -> list[str]:
    """The pairs conclusion: a count per kind, and a sample of 1 per bad link (both ends as labels)
    and per unresolved pair."""
    counts = report.conclusion.counts
    lines = [
        "# HELP collbench_pairs_findings Findings of the pairs conclusion by kind: bad node, bad link, "
        "unresolved.",
        "# TYPE collbench_pairs_findings gauge",
    ]
    lines += [f"collbench_pairs_findings{_labels(kind=kind)} {n}" for kind, n in counts.items()]
    lines += [
        "# HELP collbench_link_failed A bad link: slow or failed between two hosts normal elsewhere.",
        "# TYPE collbench_link_failed gauge",
    ]
    lines += [
        "collbench_link_failed"
        + _labels(host_a=f.hosts[0], host_b=f.hosts[-1], collective=f.collective, source=f.source)
        + " 1"
        for f in report.links_failed
    ]
    lines += [
        "# HELP collbench_pair_unresolved A slow pair pinned on neither a node nor a link.",
        "# TYPE collbench_pair_unresolved gauge",
    ]
    return lines + [
        "collbench_pair_unresolved"
        + _labels(host_a=f.hosts[0], host_b=f.hosts[-1], collective=f.collective, source=f.source)
        + " 1"
        for f in report.unresolved
    ]


def not_measured_metrics(report: Report) -> list[str]:
    """A gauge of 1 per node Slurm listed as unusable, with its state and reason as labels; no
    collbench_host_verdict sample for it: it was not judged."""
    lines = [
        "# HELP collbench_host_not_measured Node not measured: unusable in Slurm (down, drained, ...).",
        "# TYPE collbench_host_not_measured gauge",
    ]
    return lines + [
        "collbench_host_not_measured" + _labels(host=n.host, state=n.state or "", reason=n.reason) + " 1"
        for n in report.run.not_measured
    ]


def _plan_metrics(report: Report) -> list[str]:
    """The pair plan's decisions first (one sample per decision), and its rounds."""
    plan = report.run.plan
    if plan is None:
        return []
    lines = [
        "# HELP collbench_pair_plan_decision A decision of the pair plan: 1 per bad node, bad link or "
        "unresolved subject.",
        "# TYPE collbench_pair_plan_decision gauge",
    ]
    lines += [
        "collbench_pair_plan_decision"
        + _labels(kind=d.kind, subject=d.subject, collective=plan.collective, witnesses=len(d.witnesses))
        + " 1"
        for d in ordered_decisions(plan)
    ]
    lines += [
        "# HELP collbench_pair_plan_rounds Rounds of pairs the plan ran.",
        "# TYPE collbench_pair_plan_rounds gauge",
        "collbench_pair_plan_rounds"
        + _labels(schedule=plan.schedule, finished=str(plan.finished).lower())
        + f" {len(plan.rounds)}",
    ]
    if plan.noise is not None:  # a plan that never finished its initial rounds measured none
        lines += [
            "# HELP collbench_pair_plan_noise The night's pair-to-pair noise the plan measured, a fraction "
            "of the fleet's busbw (1.4826 x MAD over the median).",
            "# TYPE collbench_pair_plan_noise gauge",
            "collbench_pair_plan_noise" + _labels(collective=plan.collective) + f" {plan.noise:.6g}",
        ]
    return lines


def _epoch(stamp: str | None) -> float:
    if not stamp:
        return 0.0
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
