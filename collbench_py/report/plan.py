"""The pair plan (inter/pairs/plan.json) as the HTML, Markdown and results.json show it: its
decisions and their witnesses, then its rounds and its log. What the run concludes from it and
the logs together is report/conclusion.py's, said once.

Bounded for any fleet: the HTML and Markdown list at most MAX_DECISIONS_LISTED decisions with at
most MAX_WITNESSES_LISTED witnesses each, and the last MAX_LOG_LINES lines of the plan's log;
results.json carries every decision and witness.
"""

from __future__ import annotations

from typing import Any

from collbench_py.rundir.planfile import PlanDecision, PlanRecord, link_name
from collbench_py.verdicts import Report

MAX_DECISIONS_LISTED = 100
MAX_WITNESSES_LISTED = 12
MAX_LOG_LINES = 400
KIND_ORDER = {"bad node": 0, "bad link": 1, "unresolved": 2}


def ordered_decisions(plan: PlanRecord) -> list[PlanDecision]:
    """Bad nodes, then bad links, then unresolved; by subject within each."""
    return sorted(plan.decisions, key=lambda d: (KIND_ORDER.get(d.kind, 3), d.subject))


def decision_hosts(decision: PlanDecision) -> list[str]:
    """The hosts a decision fails: a node, or both ends of a link or an unresolved pair."""
    return decision.subject.split("--") if "--" in decision.subject else [decision.subject]


def _witness(w: Any, logs: dict[tuple[tuple[str, str], int | None], str]) -> dict[str, Any]:
    pair = tuple(sorted(w.pair))
    return {
        "round": w.round,
        "pair": link_name(pair),
        "busbw": w.busbw,
        "status": w.status,
        "log": logs.get((pair, w.round)) or logs.get((pair, None)),
    }


def _pair_logs(report: Report) -> dict[tuple[tuple[str, str], int | None], str]:
    """Each pair log of the plan's collective by (pair, round); (pair, None) for its first."""
    plan = report.run.plan
    found: dict[tuple[tuple[str, str], int | None], str] = {}
    for log in report.run.logs:
        launch = log.launch
        if (
            launch.kind != "pair"
            or len(launch.hosts) != 2
            or plan is None
            or launch.collective != plan.collective
        ):
            continue
        pair = tuple(sorted(launch.hosts))
        found.setdefault((pair, launch.round), launch.log)  # type: ignore[arg-type]
        found.setdefault((pair, None), launch.log)  # type: ignore[arg-type]
    return found


def plan_view(report: Report, bounded: bool = True) -> dict[str, Any] | None:
    """The plan as plain data (None without a plan and without a note about one).

    bounded: the lists a page shows are cut (see the module's limits); unbounded: everything."""
    run = report.run
    plan = run.plan
    if plan is None:
        return None if run.plan_error is None else {"error": run.plan_error}
    logs = _pair_logs(report)
    decisions = ordered_decisions(plan)
    shown = decisions[:MAX_DECISIONS_LISTED] if bounded else decisions
    verdicts = {h: v.verdict for h, v in report.hosts.items()}
    counts = {kind: sum(d.kind == kind for d in decisions) for kind in KIND_ORDER}
    rounds = []
    for r in plan.rounds:
        slow = {
            tuple(sorted(w.pair))
            for d in plan.decisions
            for w in d.witnesses
            if w.round == r.number and w.status in ("slow", "failed")
        }
        rounds.append(
            {
                "number": r.number,
                "kind": r.kind,
                "pairs": len(r.pairs),
                "measured": len(r.busbw),
                "failed_launches": sum(v is None for v in r.busbw.values()),
                "slow_witnesses": len(slow),
            }
        )
    log_lines = list(plan.log[-MAX_LOG_LINES:] if bounded else plan.log)
    return {
        "error": None,
        "schedule": plan.schedule,
        "collective": plan.collective,
        "size_bytes": plan.size_bytes,
        "k": plan.k,
        "localisation_rounds": plan.localisation_rounds,
        "seed": plan.seed,
        "noise": plan.noise,
        "hosts": len(plan.hosts),
        "groups": len(set(plan.groups.values())),
        "finished": plan.finished,
        "counts": counts,
        "decisions": [
            {
                "kind": d.kind,
                "subject": d.subject,
                "hosts": decision_hosts(d),
                "verdicts": {h: verdicts.get(h) for h in decision_hosts(d)},
                "pairs": [link_name(tuple(sorted(p))) for p in d.pairs],
                "reason": d.reason,
                "witnesses": [
                    _witness(w, logs)
                    for w in (d.witnesses[:MAX_WITNESSES_LISTED] if bounded else d.witnesses)
                ],
                "witnesses_total": len(d.witnesses),
            }
            for d in shown
        ],
        "decisions_total": len(decisions),
        "rounds": rounds,
        "log": log_lines,
        "log_total": len(plan.log),
    }
