"""Frozen baselines: the median and MAD of chosen runs, stored, so later reports judge against them.

A frozen baseline keeps its numbers even when its runs age out of the rolling window, and it
is what to freeze again after a deliberate change (new driver, new fabric) that made every
host a little slower or faster. Only healthy samples count (see regressions.py).
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from dataclasses import dataclass

from collbench_py.history.records import now
from collbench_py.history.regressions import stat_of
from collbench_py.history.store import HistoryError, Store


@dataclass(frozen=True)
class BaselineInfo:
    name: str
    created_at: str
    description: str
    runs: tuple[str, ...]
    values: int  # (kind, subject, collective, size) entries
    subjects: int


def resolve_run(store: Store, ref: str) -> str:
    """A run id stored in the database, named in full or by a unique prefix."""
    exact = store.query("SELECT run_id FROM runs WHERE run_id = ?", (ref,))
    if exact:
        return exact[0][0]
    like = ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    found = [r[0] for r in store.query("SELECT run_id FROM runs WHERE run_id LIKE ? ESCAPE '\\'", (like,))]
    if len(found) == 1:
        return found[0]
    if found:
        raise HistoryError(f"run id {ref!r} is ambiguous in {store.path}: {', '.join(sorted(found)[:5])}")
    raise HistoryError(f"no run {ref!r} in {store.path}")


def last_runs(store: Store, count: int) -> list[str]:
    rows = store.query("SELECT run_id FROM runs ORDER BY started_at DESC, run_id DESC LIMIT ?", (count,))
    return [r[0] for r in rows]


def freeze(store: Store, name: str, run_ids: list[str]) -> BaselineInfo:
    """Store the per-size median and MAD of every subject's healthy samples in `run_ids` as `name`."""
    if not run_ids:
        raise HistoryError(f"{store.path} holds no runs to freeze a baseline from")
    marks = ", ".join("?" for _ in run_ids)
    samples: dict[tuple[str, str, str, int], list[float]] = defaultdict(list)
    for kind, subject, collective, size, busbw in store.query(
        f"SELECT kind, subject, collective, size, busbw FROM measurements "
        f"WHERE healthy = 1 AND busbw > 0 AND run_id IN ({marks})",
        run_ids,
    ):
        samples[(kind, subject, collective, size)].append(busbw)
    if not samples:
        raise HistoryError(f"runs {', '.join(run_ids)} hold no healthy measurements to freeze")
    description = f"{len(run_ids)} runs, {min(run_ids)} .. {max(run_ids)}"
    try:
        with store.write() as cursor:
            for table in ("baselines", "baseline_runs", "baseline_values"):
                cursor.execute(f"DELETE FROM {table} WHERE name = ?", (name,))
            cursor.execute(
                "INSERT INTO baselines (name, created_at, description) VALUES (?, ?, ?)",
                (name, now(), description),
            )
            cursor.executemany(
                "INSERT INTO baseline_runs (name, run_id) VALUES (?, ?)", [(name, r) for r in run_ids]
            )
            cursor.executemany(
                "INSERT INTO baseline_values (name, kind, subject, collective, size, median, mad, n) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (name, *key, stat.median, stat.mad, stat.n)
                    for key, values in sorted(samples.items())
                    for stat in [stat_of(values)]
                ],
            )
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"{store.path}: cannot store baseline {name!r} ({exc})") from None
    return baseline_info(store, name)


def drop(store: Store, name: str) -> None:
    baseline_info(store, name)  # raises when unknown
    with store.write() as cursor:
        for table in ("baselines", "baseline_runs", "baseline_values"):
            cursor.execute(f"DELETE FROM {table} WHERE name = ?", (name,))


def baseline_info(store: Store, name: str) -> BaselineInfo:
    head = store.query("SELECT name, created_at, description FROM baselines WHERE name = ?", (name,))
    if not head:
        known = [r[0] for r in store.query("SELECT name FROM baselines ORDER BY name")]
        hint = f" (known: {', '.join(known)})" if known else " (none frozen yet)"
        raise HistoryError(f"no frozen baseline named {name!r} in {store.path}{hint}")
    runs = tuple(
        r[0] for r in store.query("SELECT run_id FROM baseline_runs WHERE name = ? ORDER BY run_id", (name,))
    )
    values, subjects = store.query(
        "SELECT COUNT(*), COUNT(DISTINCT kind || ' ' || subject) FROM baseline_values WHERE name = ?", (name,)
    )[0]
    return BaselineInfo(head[0][0], head[0][1], head[0][2], runs, int(values), int(subjects))


def all_baselines(store: Store) -> list[BaselineInfo]:
    """Newest first: the first is the one reports use unless told otherwise."""
    names = store.query("SELECT name FROM baselines ORDER BY created_at DESC, name DESC")
    return [baseline_info(store, r[0]) for r in names]
