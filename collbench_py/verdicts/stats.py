"""Robust statistics over a fleet: median, MAD, z-scores, reference sizes."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from collbench_py.parsers.models import Row, Run
from collbench_py.rundir.load import PackedRows

MAD_TO_SIGMA = 1.4826  # MAD of a normal distribution times this is its standard deviation


def row_busbw(row: Row, in_place: bool = True) -> float | None:
    """busbw of a row: the mean of its out-of-place and in-place halves where both exist.

    in_place=False keeps the out-of-place half alone: with one rank the in-place columns time a
    no-op (0.2-17 us whatever the size), so their busbw says nothing about any hardware."""
    halves = (row.oop, row.ip) if in_place else (row.oop,)
    values = [h.busbw for h in halves if h is not None and h.busbw is not None]
    return sum(values) / len(values) if values else None


def series(run: Run | None, in_place: bool = True) -> Sequence[tuple[int, float]]:
    """(size, busbw) by size; a size printed twice keeps its median."""
    rows = run.rows if run else ()
    if isinstance(rows, PackedRows):  # read from its arrays, once: no Row made
        return rows.busbw_series(in_place)
    by_size: dict[int, list[float]] = {}
    for row in rows:
        value = row_busbw(row, in_place)
        if value is not None:
            by_size.setdefault(row.size, []).append(value)
    return tuple((size, statistics.median(v)) for size, v in sorted(by_size.items()))


def reference_sizes(
    size_sets: Iterable[Iterable[int]], min_bytes: int, count: int
) -> tuple[tuple[int, ...], bool]:
    """The largest sizes >= min_bytes that at least half the logs measured.

    Returns (sizes, fallback): with no such size, the largest common size alone, and True.
    """
    sets = [set(s) for s in size_sets]
    if not sets:
        return (), False
    seen = Counter(size for s in sets for size in s)
    common = sorted(size for size, n in seen.items() if n * 2 >= len(sets))
    large = [size for size in common if size >= min_bytes]
    if large:
        return tuple(large[-count:]), False
    return (tuple(common[-1:]), True) if common else ((), True)


def value_at(points: Iterable[tuple[int, float]], sizes: tuple[int, ...]) -> float | None:
    """The median busbw over the reference sizes this series has."""
    wanted = set(sizes)
    values = [bw for size, bw in points if size in wanted]
    return statistics.median(values) if values else None


def robust_scale(values: Iterable[float], center: float, floor_fraction: float) -> float:
    deviations = [abs(v - center) for v in values]
    mad = statistics.median(deviations) if deviations else 0.0
    return max(MAD_TO_SIGMA * mad, floor_fraction * abs(center), 1e-12)


def zscores(values: Mapping[str, float], center: float, scale: float) -> dict[str, float]:
    return {key: (value - center) / scale for key, value in values.items()}


# A value at half the median or less fails once it is also an outlier (z below the suspect line):
# with few hosts, one bad node's own numbers widen the MAD enough to keep its z above z_fail.
SEVERE_DROP = 0.5


def band(z: float, drop: float, z_suspect: float, z_fail: float, min_drop: float) -> str:
    """pass, warn or fail: both the z-score and the relative drop must cross the line."""
    if drop < min_drop:
        return "pass"
    if z < z_fail or (drop >= max(min_drop, SEVERE_DROP) and z < z_suspect):
        return "fail"
    return "warn" if z < z_suspect else "pass"
