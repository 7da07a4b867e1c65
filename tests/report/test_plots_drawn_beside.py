"""The pages' figures drawn by a helper process while the report writes its other files
(report/plots.py, `drawn_beside`): the same PNG bytes as drawn in the report's own process, every
image of index.html a PNG, and a figure the helper cannot draw (it cannot be pickled, the helper
died) drawn in the report's process instead."""

from __future__ import annotations

import base64
import os
import re
import signal
from pathlib import Path

import pytest
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from collbench_py.report import plots
from collbench_py.report.make import make_report
from collbench_py.rundir.load import load_run_dir
from collbench_py.verdicts import Report, judge
from tests.rundir_factory import RunSpec, build_run_dir

HOSTS = [f"node{i}" for i in range(1, 7)]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = RunSpec(hosts=HOSTS, host_scale={"node3": 0.5}, pairs="all", pair_scale={("node1", "node2"): 0.5})
    return build_run_dir(tmp_path_factory.mktemp("beside"), spec)


@pytest.fixture(scope="module")
def report(run_dir: Path) -> Report:
    return judge(load_run_dir(run_dir))


def _figures(report: Report) -> list[plots.Png | None]:
    return [
        plots.host_plot(report, report.hosts["node3"]),
        plots.fleet_plot(report, "all_reduce"),
        plots.pair_heatmap(report, "all_reduce"),
        plots.ranking_plot(report),
    ]


def _helper_pids() -> set[int]:
    return set(plots._HELPER[-1]._processes or {})  # which process drew them


def test_figures_drawn_beside_are_the_bytes_drawn_here(report: Report) -> None:
    here = _figures(report)
    assert all(isinstance(png, str) for png in here)
    with plots.drawn_beside():
        pending = _figures(report)
        assert all(isinstance(png, plots.Pending) for png in pending)
        beside = [png.text() for png in pending if isinstance(png, plots.Pending)]
        assert _helper_pids() - {os.getpid()}  # drawn by another process
    assert beside == here
    assert all(base64.b64decode(png).startswith(PNG_MAGIC) for png in beside)


def test_a_figure_that_cannot_be_pickled_is_drawn_here() -> None:
    fig = Figure(figsize=(3, 2))
    ax = fig.subplots()
    ax.plot([1, 2, 3], [3, 1, 2])
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"<{x:g}>"))  # a lambda: not picklable
    with plots.drawn_beside():
        pending = plots._png(fig)
        assert isinstance(pending, plots.Pending)
        drawn = pending.text()
    assert drawn == plots._draw(fig)


def test_figures_are_drawn_here_when_the_helper_dies(report: Report) -> None:
    here = _figures(report)
    with plots.drawn_beside():
        first = plots.fleet_plot(report, "all_reduce")
        assert isinstance(first, plots.Pending)
        first.text()
        for pid in _helper_pids():
            os.kill(pid, signal.SIGKILL)
        later = _figures(report)
        texts = [png.text() if isinstance(png, plots.Pending) else png for png in later]
    assert texts == here


def test_every_image_of_the_written_pages_is_a_png(run_dir: Path, tmp_path: Path) -> None:
    made = make_report(run_dir, tmp_path / "report")
    html = (made.out_dir / "index.html").read_text(encoding="utf-8")
    images = re.findall(r'src="data:image/png;base64,([^"]*)"', html)
    assert len(images) >= 4  # the fleet plots, the ranking, a host's own plot, the pair heatmap
    assert all(base64.b64decode(image).startswith(PNG_MAGIC) for image in images)
    assert "Pending" not in html
