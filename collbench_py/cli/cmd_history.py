"""`collbench history HOST|HOSTA--HOSTB|HOST:COMPONENT`: a host's or a link's busbw, or one component's
measurements (a GPU, a GPU pair, an NVLink, an HCA), over time, as a table and a plot."""

from __future__ import annotations

import argparse
import statistics
from datetime import datetime
from pathlib import Path

from matplotlib.figure import Figure

from collbench_py.cli.common import (
    add_db_argument,
    add_raw_nights_argument,
    fail,
    parse_size,
    positive,
    stamp,
    table,
)
from collbench_py.exitcodes import ExitCode
from collbench_py.history import HistoryError, Retention, Store, open_store, prune
from collbench_py.history.node_parts import (
    ComponentPoint,
    component_series,
    metrics_of,
    split_subject,
    unknown_component,
)
from collbench_py.history.query import (
    Point,
    check_subject,
    collectives_of,
    newest_size,
    series,
    sizes_of,
    subject_kind,
)
from collbench_py.verdicts.bandwidth import human_size

COMMAND = "history"
COLOURS = ("#1565c0", "#2e7d32", "#6a1b9a", "#ef6c00", "#00838f", "#5d4037")
UNHEALTHY = "#c62828"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        COMMAND,
        help="a host's or a link's busbw, or one component's measurements, over time",
        description=(
            "Print a host's intra-node busbw (or a link's, HOSTA--HOSTB) in every stored run, oldest first, "
            "and optionally plot it; HOST:COMPONENT (node2:gpu3--gpu5, node2:gpu3, node3:mlx5_2) prints "
            "what the node checks measured of one component; --prune applies the retention policy. "
            "Exit 0, or 2 for an unknown host, component or database."
        ),
    )
    parser.add_argument(
        "subject",
        metavar="HOST|HOSTA--HOSTB|HOST:COMPONENT",
        nargs="?",
        help="a host name, two joined by --, or a host and one of its components "
        "(gpu3, gpu3--gpu5, mlx5_2, rail2)",
    )
    parser.add_argument(
        "--prune",
        action="store_true",
        help="instead of a subject: apply the retention policy now (summarise and remove the raw rows of "
        "the nights before the newest --history-raw-nights), as `collbench report` does after each run",
    )
    add_raw_nights_argument(parser)
    parser.add_argument("--collective", metavar="C", help="only this collective (default: every one)")
    parser.add_argument(
        "--metric",
        metavar="M",
        help="HOST:COMPONENT only: only this metric, e.g. d2d_read_ce (default: every one)",
    )
    parser.add_argument(
        "--size", metavar="S", type=parse_size, help="message size, e.g. 1G (default: the largest measured)"
    )
    parser.add_argument(
        "--last", metavar="N", type=positive, default=30, help="the newest N runs (default 30)"
    )
    parser.add_argument(
        "--plot", metavar="FILE.png", type=Path, help="also draw busbw over time into FILE.png"
    )
    add_db_argument(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    if args.prune or args.subject is None:
        return _prune(args)
    if args.plot is not None and args.plot.suffix.lower() != ".png":
        return fail(COMMAND, f"{args.plot}: the plot is a PNG file (name it .png)")
    try:
        with open_store(args.db) as store:
            component = _component(store, args)
            if component is not None:
                return _component_history(store, *component, args)
            if args.metric is not None:
                raise HistoryError("--metric is for HOST:COMPONENT; a host or a link has --collective")
            kind, subject = subject_kind(args.subject)
            check_subject(store, kind, subject)
            collectives = collectives_of(store, kind, subject)
            if args.collective is not None:
                if args.collective not in collectives:
                    raise HistoryError(
                        f"{subject} has no {args.collective} measurements (it has {', '.join(collectives)})"
                    )
                collectives = [args.collective]
            histories: dict[str, tuple[int, list[Point]]] = {}
            sizes = sizes_of(store, kind, subject, collectives[0])
            for collective in collectives:
                size = args.size or newest_size(store, kind, subject, collective)
                if size is None:
                    continue
                points = series(store, kind, subject, collective, size=size, last=args.last)
                if points:
                    histories[collective] = (size, points)
            source = store.path
    except HistoryError as exc:
        return fail(COMMAND, exc)
    if not histories:
        measured = ", ".join(human_size(s) for s in sizes[-6:])
        size_text = human_size(args.size) if args.size else "any size"
        return fail(COMMAND, f"{subject} has no busbw at {size_text} in {source} (largest sizes: {measured})")
    what = "link" if kind == "pair" else "intra-node"
    for collective, (size, points) in histories.items():
        print(f"{subject} {collective} ({what}) busbw at {human_size(size)}, {len(points)} runs in {source}")
        print("\n".join(_table(points)))
        print()
    if args.plot is not None:
        try:
            _plot(subject, what, histories, args.plot)
        except OSError as exc:
            return fail(COMMAND, f"cannot write {args.plot}: {exc.strerror or exc}")
        print(f"plot: {args.plot}")
    return ExitCode.OK


def _prune(args: argparse.Namespace) -> int:
    if args.subject is not None or not args.prune:
        return fail(COMMAND, "give either a subject (HOST, HOSTA--HOSTB, HOST:COMPONENT) or --prune")
    if args.history_raw_nights == 0:
        return fail(COMMAND, "--prune with --history-raw-nights 0 would keep every row: nothing to do")
    try:
        with open_store(args.db) as store:
            pruned = prune(store, Retention(raw_nights=args.history_raw_nights))
            path = store.path
    except HistoryError as exc:
        return fail(COMMAND, exc)
    print(
        f"history: {path}: {pruned.runs} run(s) older than the newest {args.history_raw_nights} night(s) "
        f"summarised ({pruned.rows} measurement rows into {pruned.summaries} summary rows)"
    )
    return ExitCode.OK


def _table(points: list[Point]) -> list[str]:
    healthy = [p.busbw for p in points if p.healthy and p.busbw is not None]
    median = statistics.median(healthy) if healthy else None
    rows = []
    for p in points:
        value = "-" if p.busbw is None else f"{p.busbw:.4g}"
        versus = "" if p.busbw is None or not median else f"{p.busbw / median - 1 + 0.0:+.1%}"
        verdict = (p.verdict or "") + ("" if p.healthy else " (not in baselines)")
        rows.append([p.run_id, stamp(p.started_at), value, versus, verdict])
    return table(["run", "started", "busbw GB/s", "vs median", "verdict"], rows)


def _plot(subject: str, what: str, histories: dict[str, tuple[int, list[Point]]], path: Path) -> None:
    fig = Figure(figsize=(9, 4.5))
    ax = fig.add_subplot()
    for index, (collective, (size, points)) in enumerate(histories.items()):
        drawn = [p for p in points if p.busbw is not None]
        times = [_when(p.started_at) for p in drawn]
        ax.plot(
            times,
            [p.busbw for p in drawn],
            marker="o",
            color=COLOURS[index % len(COLOURS)],
            label=f"{collective} at {human_size(size)}",
        )
        _mark_unhealthy(ax, drawn, lambda p: p.busbw, first=index == 0)
    ax.set_title(f"{subject}: {what} busbw per run")
    ax.set_ylabel("busbw (GB/s)")
    top = max((p.busbw or 0.0 for _, points in histories.values() for p in points), default=0.0)
    ax.set_ylim(0, top * 1.12 or 1.0)
    ax.set_xlabel("run start (UTC)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower left", fontsize="small")
    fig.autofmt_xdate()
    fig.savefig(path, format="png", dpi=96, bbox_inches="tight")


def _mark_unhealthy(ax, points, value, first: bool) -> None:
    """Cross the points of runs kept out of baselines; the legend names them once."""
    bad = [p for p in points if not p.healthy]
    if bad:
        ax.scatter(
            [_when(p.started_at) for p in bad],
            [value(p) for p in bad],
            marker="x",
            s=80,
            color=UNHEALTHY,
            zorder=3,
            label="not healthy (kept out of baselines)" if first else None,
        )


def _when(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))


def _component(store: Store, args: argparse.Namespace) -> tuple[str, str] | None:
    """(host, component) for HOST:COMPONENT; None for a host or a link (a stored host of that name
    keeps its meaning, whatever it contains)."""
    text = args.subject
    if ":" not in text:
        return None
    try:
        if store.query("SELECT 1 FROM measurements WHERE subject = ? LIMIT 1", (subject_kind(text)[1],)):
            return None
    except HistoryError:
        pass  # not a link either (`node2:--gpu5`): said as an unknown component below
    found = split_subject(store, text)
    if found is None:
        raise unknown_component(store, text)
    if args.collective is not None or args.size is not None:
        raise HistoryError("--collective and --size are for a host or a link; a component has --metric")
    return found


def _component_history(store: Store, host: str, component: str, args: argparse.Namespace) -> int:
    measured = metrics_of(store, host, component)
    if args.metric is not None:
        chosen = [(kind, metric) for kind, metric in measured if metric == args.metric]
        if not chosen:
            names = ", ".join(sorted({metric for _, metric in measured}))
            raise HistoryError(f"{host}:{component} has no {args.metric} measurements (it has {names})")
        measured = chosen
    histories = {
        (kind, metric): component_series(store, host, kind, component, metric, last=args.last)
        for kind, metric in measured
    }
    for (kind, metric), points in histories.items():
        unit = next((p.unit for p in reversed(points) if p.unit), "")
        label = kind.replace("_", " ")
        print(f"{host} {label} {component} {metric} ({unit}), {len(points)} runs in {store.path}")
        print("\n".join(_component_table(points, unit)))
        print()
    if args.plot is not None:
        try:
            _plot_component(f"{host}:{component}", histories, args.plot)
        except OSError as exc:
            return fail(COMMAND, f"cannot write {args.plot}: {exc.strerror or exc}")
        print(f"plot: {args.plot}")
    return ExitCode.OK


def _component_table(points: list[ComponentPoint], unit: str) -> list[str]:
    healthy = [p.value for p in points if p.healthy and p.value is not None]
    median = statistics.median(healthy) if healthy else None
    rows = []
    for p in points:
        value = "-" if p.value is None else f"{p.value:.4g}"
        versus = "" if p.value is None or not median else f"{p.value / median - 1 + 0.0:+.1%}"
        verdict = (p.verdict or "") + ("" if p.healthy else " (not in baselines)")
        rows.append([p.run_id, stamp(p.started_at), value, versus, verdict.strip()])
    return table(["run", "started", unit or "value", "vs median", "history"], rows)


def _plot_component(subject: str, histories: dict[tuple[str, str], list[ComponentPoint]], path: Path) -> None:
    fig = Figure(figsize=(9, 4.5))
    ax = fig.add_subplot()
    units = set()
    for index, ((_, metric), points) in enumerate(histories.items()):
        drawn = [p for p in points if p.value is not None]
        unit = next((p.unit for p in drawn if p.unit), "")
        units.add(unit)
        ax.plot(
            [_when(p.started_at) for p in drawn],
            [p.value for p in drawn],
            marker="o",
            color=COLOURS[index % len(COLOURS)],
            label=f"{metric} ({unit})" if unit else metric,
        )
        _mark_unhealthy(ax, drawn, lambda p: p.value, first=index == 0)
    ax.set_title(f"{subject}: per run")
    ax.set_ylabel(units.pop() if len(units) == 1 else "value (unit in the legend)")
    top = max((p.value or 0.0 for points in histories.values() for p in points), default=0.0)
    ax.set_ylim(0, top * 1.12 or 1.0)
    ax.set_xlabel("run start (UTC)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower left", fontsize="small")
    fig.autofmt_xdate()
    fig.savefig(path, format="png", dpi=96, bbox_inches="tight")
