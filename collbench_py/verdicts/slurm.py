"""Nodes Slurm listed as unusable (down, drained, not responding): not measured, never judged.

They are neither passed nor failed and stay out of the host counts. One fleet check names them with
Slurm's reasons: a note when they merely belong to the partition (a fleet always has a drained node
somewhere), a warning when the user named them in the node list (an acceptance run of named nodes
where one is drained must not pass silently; with --strict it exits 3).
"""

from __future__ import annotations

from collbench_py.rundir.load import NotMeasured, RunDir
from collbench_py.verdicts.model import Check

CHECK_NAME = "slurm/not-measured"
NAMED_IN_REASON = 10
EVIDENCE_LINES = 200


def describe(node: NotMeasured) -> str:
    """`node4 (down): bad-gpu`, the line every output uses."""
    state = f" ({node.state})" if node.state else ""
    return f"{node.host}{state}: {node.reason}"


def not_measured_check(run: RunDir) -> Check | None:
    nodes = run.not_measured
    if not nodes:
        return None
    named = [n for n in nodes if n.named]
    listed = ", ".join(describe(n) for n in nodes[:NAMED_IN_REASON])
    more = f" and {len(nodes) - NAMED_IN_REASON} more" if len(nodes) > NAMED_IN_REASON else ""
    reason = (
        f"{len(nodes)} node(s) not measured, unusable in Slurm (neither passed nor failed): {listed}{more}"
    )
    if named:
        reason += f"; {len(named)} of them named in the node list to benchmark"
    evidence = tuple(describe(n) for n in nodes[:EVIDENCE_LINES])
    return Check(CHECK_NAME, "warn" if named else "note", reason, None, evidence)
