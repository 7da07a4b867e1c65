"""The fleet plot's own lines: each host with a failed (red) or suspect (orange) check of the
collective inside the node, in the report's order; a passing host, or another collective's failure,
draws none."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from collbench_py.report import plots
from collbench_py.rundir.load import load_run_dir
from collbench_py.verdicts import Check, Report, judge
from tests.rundir_factory import GH200_WRONG, RunSpec, build_run_dir

HOSTS = [f"node{i}" for i in range(1, 9)]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    spec = RunSpec(
        hosts=HOSTS,
        host_scale={"node3": 0.5},  # its busbw far below the fleet's
        intra_override={"node2": {"all_reduce": GH200_WRONG}},  # wrong values
    )
    judged = judge(load_run_dir(build_run_dir(tmp_path_factory.mktemp("flagged"), spec)))
    # node5 suspect on all_reduce, node6 failed on another collective only; node3 failed, then suspect.
    node3, node5, node6 = judged.hosts["node3"], judged.hosts["node5"], judged.hosts["node6"]
    suspect = Check("intra/all_reduce/fleet", "warn", "below the fleet", "node5")
    after = Check("intra/all_reduce/later", "warn", "suspect after a failure", "node3")
    elsewhere = Check("intra/all_gather/fleet", "fail", "far below the fleet", "node6")
    hosts = {
        **judged.hosts,
        "node3": replace(node3, checks=[*node3.checks, after]),
        "node5": replace(node5, checks=[*node5.checks, suspect]),
        "node6": replace(node6, checks=[*node6.checks, elsewhere]),
    }
    return replace(judged, hosts=hosts)


def test_the_flagged_hosts_of_a_collective(report: Report) -> None:
    plots.reset_cache()
    flagged = [(verdict.host, failed) for verdict, failed in plots.flagged_hosts(report, "all_reduce")]
    assert sorted(flagged) == [("node2", True), ("node3", True), ("node5", False)]
    assert [host for host, _ in flagged] == [
        h for h in report.hosts if h in dict(flagged)
    ]  # the report's order
    assert ("node6", "all_gather") not in report.series  # the run measured all_reduce alone
    assert plots.flagged_hosts(report, "all_gather") == []  # no series of it: no line to draw
    assert plots.flagged_hosts(report, "broadcast") == []


def test_the_fleet_plot_draws_them_red_and_orange(report: Report, monkeypatch: pytest.MonkeyPatch) -> None:
    plots.reset_cache()
    figures = []
    monkeypatch.setattr(plots, "_png", lambda fig: figures.append(fig) or "")
    plots.fleet_plot(report, "all_reduce")
    (ax,) = figures[0].axes
    drawn = {line.get_label(): line.get_color() for line in ax.get_lines()}
    assert drawn["node2 (failed)"] == drawn["node3 (failed)"] == plots.RED
    assert drawn["node5 (suspect)"] == plots.ORANGE
    assert not any(label.startswith(("node1", "node4", "node6")) for label in drawn)


def test_a_new_report_is_read_again(report: Report, tmp_path: Path) -> None:
    plots.reset_cache()
    assert plots.flagged_hosts(report, "all_reduce")
    quiet = replace(report, hosts={h: replace(v, checks=[]) for h, v in report.hosts.items()})
    plots.reset_cache()  # as each report's pages do (render.context)
    assert plots.flagged_hosts(quiet, "all_reduce") == []
