"""Retention: raw rows for the recent nights, per-night summaries of each series beyond them.

A 4,000-host night adds about 670,000 measurement rows (some 170 MB); a year of them would be some
60 GB. So a run's raw rows are kept for `raw_nights` nights (counted back from the newest stored
run, not from the clock: a fleet that pauses keeps its raw history). Once a run's night falls out
of that window, its healthy busbw becomes, per series (kind, subject, collective), night and size,
a summary row: the median, the spread (MAD), the lowest value and the count of that night's
samples. Only the sizes a regression can be judged at are summarised: from `summary_min_bytes` up
(the reference sizes start there), and each series' largest size (the fallback when a series has
none that large). Then the run's measurement rows and verdicts go, and its facts too unless they
are the newest a host has (facts drift compares against them). The run itself (its `runs` and
`hosts` rows) stays, and so do the node checks' component rows.

The rolling baseline (regressions.py) reads a subject's raw runs first and its summaries for the
nights before them, one night one sample, so a subject keeps its baseline after its raw rows are
gone. With one run a night (the nightly job) a summary is exact: the median of one sample is that
sample. Unhealthy samples are not summarised: they never feed a baseline.
"""

from __future__ import annotations

import sqlite3
import statistics
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date, timedelta

from collbench_py.history.columns import COLUMNS, drop_unused_layouts
from collbench_py.history.store import HistoryError, Store, has_table

SUMMARIES = "measurement_summaries"
SERIES = "summary_series"
RAW_NIGHTS = 14  # 14 nights of a 4,000-host fleet raw: ~2.4 GB; the rolling baseline reads 10
SUMMARY_MIN_BYTES = 256 * 1024**2  # as HistoryOptions.reference_min_bytes
_EPOCH = date(1970, 1, 1)


@dataclass(frozen=True)
class Retention:
    raw_nights: int = RAW_NIGHTS  # 0: keep every raw row, summarise nothing
    summary_min_bytes: int = SUMMARY_MIN_BYTES


@dataclass(frozen=True)
class Pruned:
    runs: int  # runs whose raw rows were summarised and removed
    rows: int  # measurement rows removed
    summaries: int  # summary rows written


@dataclass(frozen=True, slots=True)
class Summary:
    median: float
    spread: float  # median absolute deviation
    low: float
    n: int


def night_of(started_at: str) -> int:
    """The UTC day number (days since 1970-01-01) of a stored `started_at` (YYYY-mm-ddTHH:MM:SSZ)."""
    return (date.fromisoformat(started_at[:10]) - _EPOCH).days


def night_text(night: int) -> str:
    return (_EPOCH + timedelta(days=night)).isoformat()


def summarise(values: list[float]) -> Summary:
    median = statistics.median(values)
    return Summary(median, statistics.median(abs(v - median) for v in values), min(values), len(values))


def merged(old: Summary, values: list[float]) -> Summary:
    """A stored night summary with more samples of that night (a run reported after its night was
    summarised): the old samples stand in as `n` copies of their median, their low and spread kept."""
    new = summarise([*([old.median] * old.n), *values])
    return Summary(new.median, max(new.spread, old.spread), min(new.low, old.low), new.n)


def kept_sizes(sizes: Iterable[int], floor: int) -> set[int]:
    """The sizes of one series a summary keeps: from `floor` up, and the largest."""
    ordered = sorted(sizes)
    return {s for s in ordered if s >= floor} | set(ordered[-1:])


def prune(store: Store, retention: Retention | None = None) -> Pruned:
    """Summarise and remove the raw rows of every run older than the window, in one transaction."""
    retention = retention or Retention()
    if retention.raw_nights <= 0 or not has_table(store, SUMMARIES):
        return Pruned(0, 0, 0)
    newest = store.query("SELECT MAX(started_at) FROM runs")[0][0]
    if newest is None:
        return Pruned(0, 0, 0)
    cutoff = night_text(night_of(newest) - retention.raw_nights + 1) + "T00:00:00Z"
    old = store.query(
        "SELECT run_id, started_at FROM runs r WHERE started_at < ? AND ("
        " EXISTS (SELECT 1 FROM measurements m WHERE m.run_id = r.run_id)"
        " OR EXISTS (SELECT 1 FROM verdicts v WHERE v.run_id = r.run_id)"
        " OR EXISTS (SELECT 1 FROM facts f WHERE f.run_id = r.run_id))"
        " ORDER BY started_at DESC, run_id DESC",
        (cutoff,),
    )
    if not old:
        return Pruned(0, 0, 0)
    by_night: dict[int, list[str]] = defaultdict(list)
    for run_id, started_at in old:
        by_night[night_of(started_at)].append(run_id)
    try:
        with store.write() as cursor:
            written = sum(
                _summarise_night(cursor, night, runs, retention.summary_min_bytes)
                for night, runs in sorted(by_night.items())
            )
            removed = 0
            for run_id, _ in old:
                removed += cursor.execute("DELETE FROM measurements WHERE run_id = ?", (run_id,)).rowcount
                cursor.execute(f"DELETE FROM {COLUMNS} WHERE run_id = ?", (run_id,))
                cursor.execute("DELETE FROM verdicts WHERE run_id = ?", (run_id,))
            drop_unused_layouts(cursor)
            _prune_facts(cursor, [r for r, _ in old], cutoff)
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"{store.path}: cannot prune the history ({exc})") from None
    return Pruned(len(old), removed, written)


def _summarise_night(cursor: sqlite3.Cursor, night: int, run_ids: list[str], floor: int) -> int:
    marks = ", ".join("?" for _ in run_ids)
    samples: dict[tuple[str, str, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    # The sizes from the floor up, then each series' largest where that is below the floor (SQLite
    # gives a bare column the value of the row MAX picked): a 4,000-host night has 670,000 rows,
    # 150,000 of them kept.
    large = (
        f"SELECT kind, subject, collective, size, busbw FROM measurements "
        f"WHERE run_id IN ({marks}) AND size >= ? AND healthy = 1 AND busbw > 0"
    )
    small = (
        f"SELECT kind, subject, collective, MAX(size), busbw FROM measurements "
        f"WHERE run_id IN ({marks}) AND healthy = 1 AND busbw > 0 "
        "GROUP BY run_id, kind, subject, collective HAVING MAX(size) < ?"
    )
    for query in (large, small):  # row by row, not fetched whole: the pruning runs beside the report
        for kind, subject, collective, size, busbw in cursor.execute(query, (*run_ids, floor)):
            samples[(kind, subject, collective)][size].append(busbw)
    if not samples:
        return 0
    ids = _series_ids(cursor, samples.keys())
    existing = _existing(cursor, night)

    made = 0

    def summaries() -> Iterator[tuple[int, int, int, float, float, float | None, int]]:
        # In primary-key order (series, night, size), made as they are inserted: not held as a list.
        nonlocal made
        for key in sorted(samples, key=ids.__getitem__):
            series, by_size = ids[key], samples[key]
            for size in sorted(kept_sizes(by_size, floor)):
                values = by_size[size]
                before = existing.get((series, size))
                made += 1
                if before is None and len(values) == 1:  # one run that night: the sample itself
                    yield (series, night, size, values[0], 0.0, None, 1)
                    continue
                summary = summarise(values) if before is None else merged(before, values)
                low = None if summary.low == summary.median else summary.low
                yield (series, night, size, summary.median, summary.spread, low, summary.n)

    cursor.executemany(
        f"INSERT OR REPLACE INTO {SUMMARIES} (series, night, size, median, spread, low, n) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        summaries(),
    )
    return made


def _existing(cursor: sqlite3.Cursor, night: int) -> dict[tuple[int, int], Summary]:
    """Summaries already stored for this night (only a run reported late has any). Looked up series
    by series in the primary key: `WHERE night = ?` alone reads the whole table, a year of a
    4,000-host fleet some 50 million rows, every night."""
    out = {}
    for series, size, median, spread, low, n in cursor.execute(
        f"SELECT series, size, median, spread, low, n FROM {SUMMARIES} "
        f"WHERE series IN (SELECT series FROM {SERIES}) AND night = ?",
        (night,),
    ):
        out[(series, size)] = Summary(median, spread, median if low is None else low, n)
    return out


def _series_ids(
    cursor: sqlite3.Cursor, keys: Iterable[tuple[str, str, str]]
) -> dict[tuple[str, str, str], int]:
    ids = {
        (kind, subject, collective): series
        for series, kind, subject, collective in cursor.execute(
            f"SELECT series, kind, subject, collective FROM {SERIES}"
        )
    }
    new = sorted(set(keys) - ids.keys())
    if new:
        start = cursor.execute(f"SELECT COALESCE(MAX(series), 0) FROM {SERIES}").fetchone()[0] + 1
        added = {key: start + offset for offset, key in enumerate(new)}
        cursor.executemany(
            f"INSERT INTO {SERIES} (series, kind, subject, collective) VALUES (?, ?, ?, ?)",
            [(series, *key) for key, series in added.items()],
        )
        ids.update(added)
    return ids


def _prune_facts(cursor: sqlite3.Cursor, old_runs: list[str], cutoff: str) -> None:
    """Remove the facts of the old runs (newest first), except each host's newest facts."""
    # Whether a host has facts in a run inside the window: looked up host by host in the primary
    # key (run_id, host, key), newest run first, not by reading every fact of the window (a
    # 4,000-host fleet: some 1.6 million rows, to learn the same 4,000 names).
    window = [
        run_id
        for (run_id,) in cursor.execute(
            "SELECT run_id FROM runs WHERE started_at >= ? ORDER BY started_at DESC, run_id DESC", (cutoff,)
        )
    ]
    newer: dict[str, bool] = {}

    def has_newer(host: str) -> bool:
        if host not in newer:
            newer[host] = any(
                cursor.execute(
                    "SELECT 1 FROM facts WHERE run_id = ? AND host = ? LIMIT 1", (run_id, host)
                ).fetchone()
                for run_id in window
            )
        return newer[host]

    for run_id in old_runs:  # newest first
        hosts = sorted(
            {h for (h,) in cursor.execute("SELECT DISTINCT host FROM facts WHERE run_id = ?", (run_id,))}
        )
        cursor.executemany(
            "DELETE FROM facts WHERE run_id = ? AND host = ?", [(run_id, h) for h in hosts if has_newer(h)]
        )
        newer.update(dict.fromkeys(hosts, True))


def summary_samples(
    store: Store, kind: str, collective: str, wanted: dict[str, int], before_night: int
) -> dict[str, dict[int, list[Summary]]]:
    """Per subject of `wanted` (subject -> how many nights it still needs): the summaries of its
    newest nights before `before_night`, newest first, at most that many nights."""
    if not wanted or not has_table(store, SUMMARIES):
        return {}
    ids = {
        subject: series
        for series, subject in store.query(
            f"SELECT series, subject FROM {SERIES} WHERE kind = ? AND collective = ?", (kind, collective)
        )
        if subject in wanted
    }
    out: dict[str, dict[int, list[Summary]]] = {}
    for subject, series in sorted(ids.items()):
        nights: list[int] = []
        by_size: dict[int, list[Summary]] = defaultdict(list)
        for night, size, median, spread, low, n in store.query(
            f"SELECT night, size, median, spread, low, n FROM {SUMMARIES} "
            "WHERE series = ? AND night < ? ORDER BY night DESC",
            (series, before_night),
        ):
            if not nights or nights[-1] != night:
                if len(nights) == wanted[subject]:
                    break
                nights.append(night)
            by_size[size].append(Summary(median, spread, median if low is None else low, n))
        if by_size:
            out[subject] = dict(by_size)
    return out
