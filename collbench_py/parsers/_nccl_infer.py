"""What a log does not say but its rows do: the collective, the number of ranks, a non-MPI build.

nccl-tests prints, per row, `size` (bytes of the whole buffer), `count` (elements per rank for the
gathering collectives), and busbw = algbw x a factor of the collective and of n ranks
(doc/PERFORMANCE.md): 2(n-1)/n for all_reduce; (n-1)/n for all_gather, reduce_scatter, alltoall,
gather, scatter; 1 for broadcast, reduce, sendrecv. In-place alltoall and sendrecv are never
validated (`#wrong` is `N/A` there while out-of-place shows a number). Rooted collectives print
a root >= 0; the gathering ones print `none` (or nothing) as redop.
"""

from __future__ import annotations

from collections.abc import Sequence

from collbench_py.parsers._nccl_table import DTYPE_SIZES
from collbench_py.parsers.models import Row

# Collectives whose `count` is per rank: size = count * element size * nranks.
PER_RANK_COUNT = frozenset(("all_gather", "reduce_scatter", "alltoall", "gather", "scatter", "hypercube"))
_FACTOR_N_MINUS_1_OVER_N = frozenset(("all_gather", "reduce_scatter", "alltoall", "gather", "scatter"))


def _reference_row(rows: Sequence[Row]) -> Row | None:
    """The row whose printed bandwidths carry the least rounding: the largest out-of-place algbw."""
    best = None
    for row in rows:
        algbw = row.oop.algbw
        if algbw and row.oop.busbw is not None and (best is None or algbw > best.oop.algbw):  # type: ignore[operator]
            best = row
    return best


def busbw_ratio(rows: Sequence[Row]) -> tuple[float, float] | None:
    """(busbw / algbw, its rounding tolerance) from the best row, or None when no row tells."""
    row = _reference_row(rows)
    if row is None or row.oop.algbw is None or row.oop.busbw is None or row.oop.algbw < 0.5:
        return None
    algbw, busbw = row.oop.algbw, row.oop.busbw
    ratio = busbw / algbw
    # Both values print with two decimals: +-0.005 each.
    tolerance = ratio * (0.0051 / algbw + (0.0051 / busbw if busbw else 0.0)) + 1e-9
    return ratio, tolerance


def count_multiple(rows: Sequence[Row]) -> int | None:
    """size / (count * element size) when it is a whole number (1: count is the whole buffer)."""
    for row in sorted(rows, key=lambda r: -r.size):
        size_of = DTYPE_SIZES.get(row.dtype or "")
        if not size_of or not row.count or row.size <= 0:
            continue
        per_rank = row.count * size_of
        if row.size % per_rank == 0:
            return row.size // per_rank
        return None
    return None


def _close(a: float, b: float, tolerance: float) -> bool:
    return abs(a - b) <= tolerance


def nranks_from_ratio(collective: str | None, ratio: float, tolerance: float) -> int | None:
    """n from busbw/algbw: 2(n-1)/n for all_reduce, (n-1)/n for the gathering collectives."""
    if ratio <= tolerance:
        return 1 if collective in (None, "all_reduce", *_FACTOR_N_MINUS_1_OVER_N) else None
    if collective in (None, "all_reduce") and ratio > 1 + tolerance and ratio < 2:
        n = round(2 / (2 - ratio))
        return n if _close(2 * (n - 1) / n, ratio, tolerance) else None
    if collective in (None, *_FACTOR_N_MINUS_1_OVER_N) and ratio < 1 - tolerance:
        n = round(1 / (1 - ratio))
        return n if n > 1 and _close((n - 1) / n, ratio, tolerance) else None
    return None


def infer_nranks(collective: str | None, rows: Sequence[Row]) -> tuple[int | None, str]:
    """(nranks, how it was found) from the rows alone."""
    if collective in PER_RANK_COUNT:
        k = count_multiple(rows)
        if k:
            return k, "size / (count x element size)"
    found = busbw_ratio(rows)
    if found:
        n = nranks_from_ratio(collective, *found)
        if n:
            return n, "the busbw/algbw ratio"
    return None, ""


def infer_collective(rows: Sequence[Row], nranks: int | None) -> tuple[str | None, str]:
    """(collective, the evidence) from the rows; (None, why not) when they do not tell."""
    if not rows:
        return None, "no rows"
    has_op = any(r.redop for r in rows)
    rooted = any(r.root is not None and r.root >= 0 for r in rows)
    unvalidated_in_place = any(
        r.oop.wrong is not None and r.ip is not None and r.ip.wrong is None for r in rows
    )
    k = count_multiple(rows)
    found = busbw_ratio(rows)
    ratio, tolerance = found if found else (None, 0.0)
    if k is None:
        return None, "count and size do not match a known element size"
    if rooted:
        if k == 1:
            return ("reduce", "redop with a root") if has_op else ("broadcast", "a root and no redop")
        return None, "a root with a per-rank count: gather or scatter"
    if k == 1:
        if not has_op:
            return None, "one rank and no redop"
        if unvalidated_in_place:
            return "sendrecv", "count = size, in-place not validated"
        if ratio is not None and _close(ratio, 1.0, tolerance) and nranks not in (None, 2):
            return "sendrecv", "count = size, busbw = algbw"
        return "all_reduce", "redop, count = size, busbw/algbw"
    if has_op:
        return "reduce_scatter", "redop with a per-rank count"
    if ratio is not None and _close(ratio, 1.0, tolerance):
        return "hypercube", "per-rank count with busbw = algbw"
    if unvalidated_in_place:
        return "alltoall", "per-rank count, in-place not validated"
    return "all_gather", "per-rank count, no redop (alltoall prints the same with -c 0)"


def repeated_rows(rows: Sequence[Row]) -> bool:
    """Whether a size repeats with the same type, op and root: several processes wrote one table."""
    seen: set[tuple[int, str | None, str | None, int | None]] = set()
    for row in rows:
        key = (row.size, row.dtype, row.redop, row.root)
        if key in seen:
            return True
        seen.add(key)
    return False


NON_MPI_WARNING = (
    "several one-rank runs wrote into this log (repeated headers, `Rank 0` lines or sizes, nranks 1): "
    "the binary was probably built without MPI=1, so each process ran alone and the bandwidth is "
    "a single GPU's, not the job's"
)
