"""Plots as base64 PNG, built with matplotlib's object API (no pyplot state: safe headless).

Drawing a figure to PNG is most of a plot's cost. Inside `drawn_beside()` (the report's files
being written meanwhile) each figure is drawn by one forked helper process and `_png` returns a
`Pending` that `resolved` turns into the text; a figure the helper cannot draw is drawn here.

Cost grows with what is drawn, not with the fleet: the fleet plots draw the median and a
percentile band instead of one line per host, and only non-passing hosts get lines of
their own (labelled up to MAX_LABELLED) and a plot of their own (up to MAX_HOST_PLOTS);
no host x host heatmap above HEATMAP_MAX_HOSTS hosts.
"""

from __future__ import annotations

import base64
import io
import math
import multiprocessing
import os
import statistics
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

from collbench_py.child_processes import end_with_parent
from collbench_py.verdicts import HostVerdict, Report
from collbench_py.verdicts.bandwidth import human_size

RED, ORANGE, GREEN, GREY, BLUE = "#c62828", "#ef6c00", "#2e7d32", "#9e9e9e", "#1565c0"
MAX_LABELLED = 8
MAX_HOST_PLOTS = 12
# A host x host matrix is readable up to this many hosts; beyond it the report shows the worst pairs
# as a sorted table instead (report/render.py), and pair_heatmap draws nothing.
HEATMAP_MAX_HOSTS = 32
DPI = 96


class Pending:
    """A figure handed to the helper process; `text()` waits for its PNG (drawn here on failure)."""

    __slots__ = ("figure", "future")

    def __init__(self, figure: Figure, future: Future[str]) -> None:
        self.figure, self.future = figure, future

    def text(self) -> str:
        try:
            return self.future.result()
        except Exception:  # the helper died or could not take the figure: the plot still comes
            return _draw(self.figure)


Png = str | Pending
_HELPER: list[ProcessPoolExecutor] = []


@contextmanager
def drawn_beside() -> Iterator[None]:
    """Figures made meanwhile are drawn by one forked process, in parallel with the caller.

    The process starts here: entered while the caller is still small (before a run is loaded),
    it shares no page the caller writes later. A fork of a process holding a parsed fleet had
    every page the caller then touched copied (4,000 hosts: +300 MiB). Nested, the outer one
    draws."""
    if _HELPER:
        yield
        return
    helper = ProcessPoolExecutor(
        1,
        mp_context=multiprocessing.get_context("fork"),
        initializer=end_with_parent,
        initargs=(os.getpid(),),
    )
    helper.submit(int).result()  # started now, not at the first figure
    _HELPER.append(helper)
    try:
        yield
    finally:
        _HELPER.remove(helper)
        helper.shutdown(wait=True, cancel_futures=True)


def resolved(value: Any) -> Any:
    """`value` (a template's context: dicts and lists) with every Pending plot replaced by its text."""
    if isinstance(value, Pending):
        return value.text()
    if isinstance(value, dict):
        return {key: resolved(item) for key, item in value.items()}
    if isinstance(value, list):
        return [resolved(item) for item in value]
    return value


def _png(fig: Figure) -> Png:
    if not _HELPER:
        return _draw(fig)
    try:
        return Pending(fig, _HELPER[-1].submit(_draw, fig))
    except Exception:  # a helper that broke earlier: drawn here
        return _draw(fig)


def _draw(fig: Figure) -> str:
    buffer = io.BytesIO()
    # Fixed margins, no bbox_inches="tight": that draws every figure twice.
    fig.savefig(buffer, format="png", dpi=DPI)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _size_axis(ax) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=4, numticks=8))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(_size_label))  # a function, not a lambda: a figure is pickled
    # Sizes such as "256MiB" side by side overlap on a narrow plot: slanted, they never touch.
    ax.tick_params(axis="x", labelrotation=40)
    for label in ax.get_xticklabels():
        label.set_horizontalalignment("right")
        label.set_rotation_mode("anchor")
    ax.set_xlabel("message size")
    ax.set_ylabel("busbw (GB/s)")
    ax.grid(True, which="major", alpha=0.3)


def _size_label(x: float, _position: int | None) -> str:
    return _short_size(x)


def _short_size(x: float) -> str:
    if x <= 0:
        return ""
    size = round(x)
    text = human_size(size)
    return text.replace(" ", "") if text.endswith(("B", "iB")) else f"{x:g}"


_CURVES: dict[tuple[int, str], dict[int, tuple[float, float, float]]] = {}


_FLAGGED: dict[int, dict[str, dict[str, tuple[HostVerdict, bool]]]] = {}


def reset_cache() -> None:
    _CURVES.clear()
    _FLAGGED.clear()


def flagged_hosts(report: Report, collective: str) -> list[tuple[HostVerdict, bool]]:
    """The hosts with a failed or suspect check of `collective` inside the node and a series of it,
    in the report's order, each with whether one failed. Every host's checks are read once for all
    the collectives (4,000 hosts: 110,000 checks, read once per collective before)."""
    if id(report) not in _FLAGGED:
        found: dict[str, dict[str, tuple[HostVerdict, bool]]] = defaultdict(dict)
        for verdict in report.hosts.values():
            for check in verdict.checks:
                parts = check.name.split("/", 2)
                if check.status in ("fail", "warn") and parts[0] == "intra" and len(parts) == 3:
                    hosts = found[parts[1]]
                    failed = hosts[verdict.host][1] if verdict.host in hosts else False
                    hosts[verdict.host] = (verdict, failed or check.status == "fail")
        _FLAGGED[id(report)] = found
    return [
        (verdict, failed)
        for verdict, failed in _FLAGGED[id(report)].get(collective, {}).values()
        if (verdict.host, collective) in report.series
    ]


def fleet_curve(report: Report, collective: str) -> dict[int, tuple[float, float, float]]:
    """Per size: (10th percentile, median, 90th percentile) of busbw over hosts (computed once)."""
    key = (id(report), collective)
    if key not in _CURVES:
        _CURVES[key] = _fleet_curve(report, collective)
    return _CURVES[key]


def _fleet_curve(report: Report, collective: str) -> dict[int, tuple[float, float, float]]:
    by_size: dict[int, list[float]] = defaultdict(list)
    for (host, coll), points in report.series.items():
        if coll == collective and host in report.hosts:
            for size, bw in points:
                by_size[size].append(bw)
    out = {}
    for size, values in sorted(by_size.items()):
        values.sort()
        out[size] = (_quantile(values, 0.1), statistics.median(values), _quantile(values, 0.9))
    return out


def _quantile(values: list[float], q: float) -> float:
    position = (len(values) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    return values[low] + (values[high] - values[low]) * (position - low)


def _threshold(report: Report, ax, collective: str) -> None:
    profile = report.profile
    expectation = profile.expectations.get(collective) if profile else None
    if profile is None or expectation is None:
        return
    line = expectation.busbw * profile.pass_fraction
    ax.axhline(
        line,
        color=RED,
        linestyle="--",
        linewidth=1.2,
        label=f"profile pass line {line:.3g} GB/s ({profile.name})",
    )
    ax.plot(
        [expectation.size],
        [expectation.busbw],
        marker="*",
        color=RED,
        markersize=9,
        linestyle="none",
        label=f"expected {expectation.busbw:g} GB/s at {human_size(expectation.size)}",
    )


def fleet_plot(report: Report, collective: str) -> Png:
    curve = fleet_curve(report, collective)
    fig = Figure(figsize=(7.2, 3.6), layout="constrained")
    ax = fig.subplots()
    sizes = list(curve)
    if sizes:
        ax.fill_between(
            sizes,
            [curve[s][0] for s in sizes],
            [curve[s][2] for s in sizes],
            color=GREY,
            alpha=0.3,
            label="fleet 10th-90th percentile",
        )
        ax.plot(sizes, [curve[s][1] for s in sizes], color="black", linewidth=1.6, label="fleet median")
    for i, (verdict, failed) in enumerate(flagged_hosts(report, collective)[:40]):
        points = report.series[(verdict.host, collective)]
        color = RED if failed else ORANGE
        label = f"{verdict.host} ({'failed' if failed else 'suspect'})" if i < MAX_LABELLED else None
        ax.plot([p[0] for p in points], [p[1] for p in points], color=color, linewidth=1.3, label=label)
    stat = report.stats.get(("intra", collective))
    if stat is not None and stat.sizes:
        ax.axvspan(
            min(stat.sizes) / 1.2, max(stat.sizes) * 1.2, color=BLUE, alpha=0.08, label="reference sizes"
        )
    _threshold(report, ax, collective)
    _size_axis(ax)
    ax.set_title(f"{collective}: busbw vs message size, {len(report.hosts)} hosts")
    ax.legend(fontsize=7, loc="upper left")
    return _png(fig)


def host_plot(report: Report, verdict: HostVerdict) -> Png | None:
    collectives = [c for c in report.collectives if (verdict.host, c) in report.series]
    if not collectives:
        return None
    columns = min(3, len(collectives))
    rows = math.ceil(len(collectives) / columns)
    fig = Figure(figsize=(3.4 * columns, 2.6 * rows))
    axes = fig.subplots(rows, columns, squeeze=False)
    color = RED if verdict.verdict == "failed" else ORANGE if verdict.verdict == "warned" else GREEN
    for ax, collective in zip(axes.flat, collectives, strict=False):
        curve = fleet_curve(report, collective)
        sizes = list(curve)
        ax.plot(sizes, [curve[s][1] for s in sizes], color="black", linewidth=1.2, label="fleet median")
        points = report.series[(verdict.host, collective)]
        ax.plot(
            [p[0] for p in points], [p[1] for p in points], color=color, linewidth=1.6, label=verdict.host
        )
        _threshold(report, ax, collective)
        _size_axis(ax)
        ax.set_title(collective, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.xaxis.label.set_size(7)
        ax.yaxis.label.set_size(7)
    for ax in list(axes.flat)[len(collectives) :]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=6, loc="upper left")
    _small_plots_layout(fig, rows, columns, max(ax.get_ylim()[1] for ax in axes.flat))
    return _png(fig)


def _small_plots_layout(fig: Figure, rows: int, columns: int, top_value: float) -> None:
    """Fixed margins, in inches, for what each 3.4 x 2.6 in plot carries (7-point ticks of up to four
    digits, slanted sizes, a 9-point title): up to 12 such figures per report, and a constrained
    layout measured every label of every plot again for each (60 % of their time). Wider tick
    labels (10,000 GB/s and up: no link reaches it) get the constrained layout, which makes room."""
    if top_value >= 10_000:
        fig.set_layout_engine("constrained")
        return
    width, height = 3.4 * columns, 2.6 * rows
    fig.subplots_adjust(
        left=0.6 / width,
        right=1 - 0.1 / width,
        bottom=0.62 / height,
        top=1 - 0.25 / height,
        wspace=0.6 / (3.4 - 0.7),
        hspace=0.87 / (2.6 - 0.87),
    )


def worst_relative(report: Report) -> dict[str, tuple[float, str]]:
    """Per host: its worst busbw as % of the fleet median, over intra collectives and the pairs
    blamed on it (a bad node's pairs; both ends of a pair neither a node nor a link explains), and
    what that was. A bad link's pairs are the link's: its ends are not ranked down for them."""
    worst: dict[str, tuple[float, str]] = {}

    def offer(host: str, pct: float, what: str) -> None:
        if host not in worst or pct < worst[host][0]:
            worst[host] = (pct, what)

    for (kind, collective), stat in report.stats.items():
        if kind == "intra" and stat.median:
            for host, value in stat.values.items():
                offer(host, 100 * value / stat.median, collective)
    for pair in report.pairs:
        stat = report.stats.get(("pair", pair.collective))
        if pair.status == "ok" or pair.cause in ("link", "launcher") or stat is None or not stat.median:
            continue
        pct = 0.0 if pair.busbw is None else 100 * pair.busbw / stat.median
        blamed = [pair.cause[5:]] if pair.cause and pair.cause.startswith("node ") else list(pair.hosts)
        for host in blamed:
            offer(host, pct, f"pair {pair.label}")
    return worst


def bandwidth_status(verdict: HostVerdict) -> str:
    """fail, warn or pass over the bandwidth checks only (not facts or topology)."""
    statuses = {
        c.status
        for c in verdict.checks
        if c.name.startswith("pairs/") or c.name.endswith(("/fleet", "/profile", "/run"))
    }
    return "fail" if "fail" in statuses else "warn" if "warn" in statuses else "pass"


def ranking_plot(report: Report) -> Png | None:
    """Hosts by their worst bandwidth relative to the fleet: the bad node stands out."""
    worst = worst_relative(report)
    if not worst:
        return None
    ordered = sorted(worst.items(), key=lambda kv: kv[1][0])
    colors = [
        {"fail": RED, "warn": ORANGE}.get(bandwidth_status(report.hosts[h]), GREEN)
        if h in report.hosts
        else GREY
        for h, _ in ordered
    ]
    drop_line = 100 * (1 - report.min_drop)
    if len(ordered) <= 40:
        fig = Figure(figsize=(7.2, 0.9 + 0.26 * len(ordered)), layout="constrained")
        ax = fig.subplots()
        names = [short_name(h) for h, _ in reversed(ordered)]
        values = [v[0] for _, v in reversed(ordered)]
        ax.barh(names, values, color=list(reversed(colors)))
        for y, (_, (pct, what)) in enumerate(reversed(ordered)):
            ax.text(pct + 1, y, f"{pct:.0f} % {what}", va="center", fontsize=7)
        ax.tick_params(axis="y", labelsize=8)
        ax.set_xlabel("worst busbw, % of the fleet median (intra, and pairs blamed on the host)", fontsize=9)
        ax.axvline(100, color="black", linewidth=1)
        ax.axvline(
            drop_line,
            color=RED,
            linestyle="--",
            linewidth=1,
            label=f"-{report.min_drop:.0%}: smallest drop that counts",
        )
        ax.set_xlim(0, max(130, max(values) * 1.25))
    else:
        fig = Figure(figsize=(7.2, 3.2), layout="constrained")
        ax = fig.subplots()
        ax.scatter(range(len(ordered)), [v[0] for _, v in ordered], c=colors, s=8)
        for i, (host, (pct, what)) in enumerate(ordered[:MAX_LABELLED]):
            if host in report.hosts and bandwidth_status(report.hosts[host]) != "pass":
                ax.annotate(
                    f"{short_name(host)} ({what})",
                    (i, pct),
                    fontsize=7,
                    xytext=(5, -3),
                    textcoords="offset points",
                )
        ax.set_xlabel(f"{len(ordered)} hosts, worst first")
        ax.set_ylabel("worst busbw, % of fleet median")
        ax.axhline(100, color="black", linewidth=1)
        ax.axhline(
            drop_line,
            color=RED,
            linestyle="--",
            linewidth=1,
            label=f"-{report.min_drop:.0%}: smallest drop that counts",
        )
    ax.set_title("Hosts by their worst bandwidth (red: a bandwidth check failed)")
    ax.legend(fontsize=7, loc="lower right")
    return _png(fig)


def _verdict_color(verdict: str) -> str:
    return {"failed": RED, "warned": ORANGE, "unreachable": GREY}.get(verdict, GREEN)


# Heatmap colours by share of the pair baseline: at or below 80 % is red (a link at half speed is
# dark red, never a pale yellow), 80-95 % orange to yellow, from 95 % green. Grey: not measured.
HEATMAP_BOUNDS = (0, 50, 80, 90, 95, 1000)
HEATMAP_COLOURS = ("#7f0000", "#d32f2f", "#fb8c00", "#c0ca33", "#43a047")
NOT_MEASURED = "#bdbdbd"
NAME_WIDTH = 22


def short_name(name: str, width: int = NAME_WIDTH) -> str:
    """A long host name shortened in its middle (the start and the number at its end stay)."""
    if len(name) <= width:
        return name
    keep = width - 1
    return name[: keep - keep // 2] + "…" + name[-(keep // 2) :]


def pair_heatmap(report: Report, collective: str) -> Png | None:
    """Host x host busbw (% of the pair baseline), up to HEATMAP_MAX_HOSTS hosts; None beyond.

    Every judged host has a row: one without a measured pair of the collective is a grey row,
    labelled so, rather than missing from the matrix."""
    results = [p for p in report.pairs if p.collective == collective]
    if not results:
        return None
    stat = report.stats.get(("pair", collective))
    baseline = stat.median if stat else None
    measured = {h for p in results if p.busbw is not None or p.status == "failed" for h in p.hosts}
    hosts = sorted({h for p in results for h in p.hosts} | set(report.hosts))
    if len(hosts) > HEATMAP_MAX_HOSTS:
        return None
    index = {h: i for i, h in enumerate(hosts)}
    n = len(hosts)
    grid = [[math.nan] * n for _ in range(n)]
    for p in results:
        a, b = p.hosts
        if a in index and b in index and p.status != "launcher":
            value = 0.0 if p.busbw is None else (100 * p.busbw / baseline if baseline else math.nan)
            grid[index[a]][index[b]] = grid[index[b]][index[a]] = value
    size = min(9.0, 2.5 + 0.32 * n)
    fig = Figure(figsize=(size + 1.6, size + 0.6), layout="constrained")
    ax = fig.subplots()
    cmap = ListedColormap(HEATMAP_COLOURS).with_extremes(bad=NOT_MEASURED)
    norm = BoundaryNorm(HEATMAP_BOUNDS, cmap.N)
    image = ax.imshow(grid, cmap=cmap, norm=norm)
    labels = [short_name(h) + ("" if h in measured else " (no pair)") for h in hosts]
    fontsize = 7 if n > 16 else 9
    ax.set_xticks(range(n), labels, rotation=60, ha="right", rotation_mode="anchor", fontsize=fontsize)
    ax.set_yticks(range(n), labels, fontsize=fontsize)
    if n <= 12:
        for p in results:
            a, b = p.hosts
            text = "failed" if p.busbw is None else f"{p.busbw:.3g}"
            dark = not grid[index[a]][index[b]] >= HEATMAP_BOUNDS[2]
            for i, j in ((index[a], index[b]), (index[b], index[a])):
                ax.text(j, i, text, ha="center", va="center", fontsize=8, color="white" if dark else "black")
    bar = fig.colorbar(image, ax=ax, label="% of the pair baseline (grey: not measured)", shrink=0.8)
    bar.set_ticks([25, 65, 85, 92.5, 97.5], labels=["<50", "50-80", "80-90", "90-95", ">=95"])
    ax.set_title(f"{collective} between host pairs, GB/s", fontsize=10)
    return _png(fig)
