"""The report at 16 hosts with long names: a link at half speed looks bad in the heatmap, a host with
no pair is a grey row, an InfiniBand port down reaches the top of every output, long host names keep
the host table one line per host (in a real headless Chromium), and the plots' labels fit."""

from __future__ import annotations

import base64
import contextlib
import io
import itertools
import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.image import imread

from collbench_py.cli import main
from collbench_py.report import plots
from collbench_py.rundir.load import load_run_dir
from collbench_py.verdicts import judge
from tests.rundir_factory import H100_TOPO_12NICS, RunSpec, build_run_dir, make_facts

NAMES = [f"h100-sxm5-rack07-compute-node{i:02d}" for i in range(1, 17)]
LINK = (NAMES[1], NAMES[4])
NO_PAIR = NAMES[15]
PORT_DOWN = NAMES[6]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _spec(**changes) -> RunSpec:
    facts = {h: make_facts(h, gpu_name="NVIDIA H100 80GB HBM3 SXM5 Hopper", ib_ports=12) for h in NAMES}
    facts[PORT_DOWN]["ib"][3]["state"] = "Down"
    pairs = [(a, b) for i, a in enumerate(NAMES[:15]) for b in NAMES[i + 1 : 15]]  # none with NO_PAIR
    spec = RunSpec(hosts=NAMES, facts=facts, topo=H100_TOPO_12NICS, pairs=pairs, pair_scale={LINK: 0.5})
    for key, value in changes.items():
        setattr(spec, key, value)
    return spec


@pytest.fixture(scope="module")
def fleet16(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    run = build_run_dir(tmp_path_factory.mktemp("fleet16"), _spec())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["report", str(run)]) == 1  # the bad link
    return run, out.getvalue()


def _png(b64: str) -> np.ndarray:
    return imread(io.BytesIO(base64.b64decode(b64)))[..., :3]


def _count(pixels: np.ndarray, colour: str) -> int:
    return int((np.abs(pixels - np.array(to_rgb(colour))) < 0.02).all(axis=-1).sum())


def _red(pixels: np.ndarray) -> int:
    """Pixels of a red (dark or bright), as a person would call them: not orange, not yellow."""
    r, g, b = pixels[..., 0], pixels[..., 1], pixels[..., 2]
    return int(((r > 0.45) & (g < 0.3) & (b < 0.3)).sum())


def test_a_link_at_half_speed_is_red_in_the_heatmap(fleet16) -> None:
    run, _ = fleet16
    report = judge(load_run_dir(run))
    slow = _png(plots.pair_heatmap(report, "all_reduce") or "")
    # The same fleet with no slow link: the colour bar is the same, so the difference is the cells.
    healthy = build_run_dir(run.parent.parent / "healthy", _spec(pair_scale={}))
    calm = _png(plots.pair_heatmap(judge(load_run_dir(healthy)), "all_reduce") or "")
    assert _red(calm) < _red(slow)
    # Both cells of the link (its two triangles) are red, each a block of hundreds of pixels.
    assert _red(slow) - _red(calm) > 2 * 200, (_red(slow), _red(calm))
    pair = next(p for p in report.pairs if p.hosts == LINK)
    stat = report.stats[("pair", "all_reduce")]
    assert 0.45 < (pair.busbw or 0) / stat.median < 0.55  # the link is at half speed


def test_a_host_with_no_pair_is_a_grey_row(fleet16) -> None:
    run, _ = fleet16
    report = judge(load_run_dir(run))
    grey = _count(_png(plots.pair_heatmap(report, "all_reduce") or ""), plots.NOT_MEASURED)
    # Against the same fleet where every host has its pairs: only the diagonal is grey.
    root = run.parent.parent / "allpairs"
    full = build_run_dir(root, _spec(pairs="all"))
    complete = judge(load_run_dir(full))
    diagonal = _count(_png(plots.pair_heatmap(complete, "all_reduce") or ""), plots.NOT_MEASURED)
    # A row and a column of 16 cells, against 1 cell of the diagonal each: far more grey.
    assert grey > diagonal + 20 * diagonal / 16, (grey, diagonal)


def test_an_ib_port_down_reaches_the_top_of_every_output(fleet16) -> None:
    run, stdout = fleet16
    lines = stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("HOST "))
    top = "\n".join(lines[:header])
    assert f"ib ports  {PORT_DOWN}: InfiniBand: mlx5_3 port 1 Down" in top
    html = (run / "report" / "index.html").read_text()
    box = html[html.index('id="attention"') : html.index("</div>", html.index('id="attention"'))]
    assert PORT_DOWN in box and "mlx5_3 port 1 Down" in box
    markdown = (run / "report" / "report.md").read_text()
    attention = markdown[markdown.index("## Needs attention") : markdown.index("## Hosts")]
    assert "mlx5\\_3 port 1 Down" in attention


def test_the_port_is_named_even_behind_another_reason(tmp_path: Path) -> None:
    """The host's first reason is its slow intra-node bandwidth; the port still reaches the box."""
    run = build_run_dir(tmp_path, _spec(host_scale={PORT_DOWN: 0.5}))
    with contextlib.redirect_stdout(io.StringIO()):
        main(["report", str(run)])
    html = (run / "report" / "index.html").read_text()
    box = html[html.index('id="attention"') : html.index("</div>", html.index('id="attention"'))]
    item = next(li for li in box.split("<li") if PORT_DOWN in li and "failed" in li)
    assert "50% lower" in item or "lower" in item
    assert "also InfiniBand: mlx5_3 port 1 Down" in item


def test_long_host_names_are_cut_in_the_middle_with_the_full_name_on_hover(fleet16) -> None:
    run, _ = fleet16
    html = (run / "report" / "index.html").read_text()
    table = html[html.index('<table id="hosts">') : html.index("</table>", html.index('<table id="hosts">'))]
    for name in NAMES:
        short = plots.short_name(name, 28)
        assert len(short) == 28 and short.endswith(name[-10:])
        assert f'<td title="{name}"><a href="#host-{name}">{short}</a></td>' in table or (
            f'<td title="{name}">{short}</td>' in table
        )
    assert "#hosts td, #hosts th { white-space: nowrap; }" in html


@pytest.mark.browser
def test_host_rows_stay_one_line_in_a_browser(fleet16, tmp_path: Path) -> None:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (make setup installs Debian's chromium)")
    run, _ = fleet16
    probe = (
        "<script>window.addEventListener('load', () => {"
        "const rows = [...document.querySelectorAll('#hosts tbody tr')];"
        "document.body.dataset.rowmax = Math.max(...rows.map(r => r.getBoundingClientRect().height));"
        "document.body.dataset.rowmin = Math.min(...rows.map(r => r.getBoundingClientRect().height));"
        "});</script>"
    )
    probed = run / "report" / "probe.html"
    probed.write_text((run / "report" / "index.html").read_text().replace("</body>", probe + "</body>"))
    try:
        done = subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={tmp_path / 'profile'}",
                "--window-size=1000,2000",
                "--dump-dom",
                "--virtual-time-budget=5000",
                probed.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        probed.unlink()
    found = re.search(r'data-rowmax="([\d.]+)" data-rowmin="([\d.]+)"', done.stdout)
    # The page as the browser built it: the link's tile and its finding at the top.
    assert 'id="links-tile"><div class="n">1</div>links failed' in done.stdout
    assert f'data-kind="bad link" data-subject="{LINK[0]}--{LINK[1]}"' in done.stdout
    assert found, done.stderr[-2000:]
    tallest, lowest = float(found.group(1)), float(found.group(2))
    # The warned host's reason may wrap; the passed hosts' rows are all one line, like each other.
    assert lowest < 30, (tallest, lowest)
    assert tallest < 2.5 * lowest, (tallest, lowest)


def _overlaps(fig) -> list[tuple[str, str]]:
    """Pairs of x tick labels (per axes) whose drawn boxes intersect."""
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)  # constrained layout and rotation applied, as savefig does
    found = []
    for ax in fig.axes:
        labels = [t for t in ax.get_xticklabels() if t.get_text() and t.get_window_extent(renderer).width > 0]
        for a, b in itertools.pairwise(labels):
            box_a, box_b = a.get_window_extent(renderer), b.get_window_extent(renderer)
            angle = math.radians(a.get_rotation())
            if angle == 0:
                clash = box_a.overlaps(box_b)
            else:  # slanted labels are parallel strips: apart when their spacing across exceeds a line
                across = abs(box_b.x1 - box_a.x1) * math.sin(angle)
                clash = across < a.get_fontsize() * fig.dpi / 72
            if clash:
                found.append((a.get_text(), b.get_text()))
    return found


def test_plot_tick_labels_do_not_overlap(fleet16, monkeypatch: pytest.MonkeyPatch) -> None:
    run, _ = fleet16
    report = judge(load_run_dir(run))
    figures = []
    monkeypatch.setattr(plots, "_png", lambda fig: figures.append(fig) or "")
    plots.host_plot(report, report.hosts[PORT_DOWN])  # the narrow plot of one host: 16 B to 16 GiB
    plots.fleet_plot(report, "all_reduce")
    plots.pair_heatmap(report, "all_reduce")  # 16 long host names
    assert len(figures) == 3
    for fig in figures:
        assert _overlaps(fig) == []


NCCL_LOGS = Path(__file__).resolve().parents[1] / "data" / "corpus" / "nccl-tests"
SIX = {
    "all_reduce": NCCL_LOGS / "hgx-h100-2node-16rank-mpi-warnings-interleaved-16GiB.txt",
    "all_gather": NCCL_LOGS / "dgx-spark-gb10-2node-allgather-v2.18.3-x11-noise.txt",
    "alltoall": NCCL_LOGS / "alltoall-v2.18.3-2node-16rank-inplace-NA-mpi-noise-in-table.txt",
    "sendrecv": NCCL_LOGS / "sendrecv-nthread2-info-interleaved-destroy-lines-a100-leonardo.txt",
    "reduce_scatter": NCCL_LOGS / "cscs-gh200-2node-v2.18.2-version-header.txt",
    "broadcast": NCCL_LOGS / "skypilot-h200-2node-allgather-double-prefix.txt",
}


def _labels(ax, renderer) -> dict[str, list]:
    """An axes' drawn labels by kind: tick labels within its range, axis labels, title, legend."""
    ticks = {}
    for name, axis, limits in (("x", ax.xaxis, ax.get_xlim()), ("y", ax.yaxis, ax.get_ylim())):
        low, high = sorted(limits)
        ticks[name] = [t.label1 for t in axis.get_major_ticks() if low <= t.get_loc() <= high]
    legend = ax.get_legend().get_texts() if ax.get_legend() else []
    found = {
        "xticks": ticks["x"],
        "yticks": ticks["y"],
        "xlabel": [ax.xaxis.label],
        "ylabel": [ax.yaxis.label],
    }
    found |= {"title": [ax.title], "legend": list(legend)}
    return {
        kind: [t.get_window_extent(renderer) for t in texts if t.get_visible() and t.get_text()]
        for kind, texts in found.items()
    }


def _crowded(fig) -> list[str]:
    """What a reader could not read: a label past the figure's edge, an axis label on its own tick
    labels, or one plot's labels on another plot (its frame or its labels)."""
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    width, height = fig.bbox.width, fig.bbox.height
    axes = [ax for ax in fig.axes if ax.get_visible()]
    labels = {ax: _labels(ax, renderer) for ax in axes}
    problems = []
    for ax, kinds in labels.items():
        name = ax.get_title()
        for kind, boxes in kinds.items():
            if any(b.x0 < -1 or b.y0 < -1 or b.x1 > width + 1 or b.y1 > height + 1 for b in boxes):
                problems.append(f"{name}: {kind} past the edge")
        for label, ticks in (("xlabel", "xticks"), ("ylabel", "yticks")):
            if any(a.overlaps(b) for a in kinds[label] for b in kinds[ticks]):
                problems.append(f"{name}: {label} on its tick labels")
        for other in axes:
            if other is ax:
                continue
            theirs = [other.bbox, *(b for boxes in labels[other].values() for b in boxes)]
            mine = [b for kind, boxes in kinds.items() if kind != "legend" for b in boxes]
            if any(a.overlaps(b) for a in mine for b in theirs):
                problems.append(f"{name}: labels on the plot {other.get_title()}")
    return problems


@pytest.mark.parametrize(
    ("collectives", "scale"),
    [(6, 1.0), (2, 1.0), (6, 1e-4), (4, 1e3)],
    ids=["six-h100", "two", "gloo-small", "beyond-any-link"],
)
def test_a_host_s_plots_keep_every_label_inside_and_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, collectives: int, scale: float
) -> None:
    """Fixed margins (a constrained layout costs 60 % of these plots): they must fit what a host's
    plots carry, from busbw in thousandths of a GB/s to four digits; five digits and more (no link
    reaches 10,000 GB/s) get a constrained layout, which fits them too."""
    hosts = [f"node{i}" for i in range(1, 6)]
    spec = RunSpec(
        hosts=hosts,
        intra=dict(list(SIX.items())[:collectives]),
        host_scale={h: scale * (0.5 if h == "node3" else 1.0) for h in hosts},
    )
    report = judge(load_run_dir(build_run_dir(tmp_path, spec)))
    figures = []
    monkeypatch.setattr(plots, "_png", lambda fig: figures.append(fig) or "")
    plots.host_plot(report, report.hosts["node3"])
    (fig,) = figures
    assert sum(ax.get_visible() for ax in fig.axes) == collectives
    assert _crowded(fig) == []
    assert _overlaps(fig) == []
