"""Read the history back: one subject's busbw over time, and a whole run as a snapshot to compare.

A snapshot is built from the same rows whether the run comes from the database or from a run
directory judged on the spot, so `collbench compare` treats both alike.
"""

from __future__ import annotations

import difflib
from collections import defaultdict
from dataclasses import dataclass, field

from collbench_py.history.records import RunRecords
from collbench_py.history.retention import SERIES, SUMMARIES, night_of, night_text
from collbench_py.history.store import HistoryError, Store, has_table


@dataclass(frozen=True)
class Point:
    run_id: str
    started_at: str
    busbw: float | None
    healthy: bool
    verdict: str | None  # the host's verdict, or the pair's status, in that run


@dataclass(frozen=True)
class Snapshot:
    run_id: str
    started_at: str
    source: str  # the database path, or the run directory
    host_verdicts: dict[str, str | None]
    pair_status: dict[tuple[str, str], str]  # (label, collective) -> pass, warn, fail
    values: dict[tuple[str, str, str], dict[int, float]]  # (kind, subject, collective) -> size -> busbw
    facts: dict[str, dict[str, str | None]] = field(default_factory=dict)
    host_checks: dict[tuple[str, str], str] = field(default_factory=dict)  # (host, check) -> pass, warn, fail
    # (label, collective) -> the pair's result as judged: ok, suspect, slow, failed, launcher
    pair_results: dict[tuple[str, str], str] = field(default_factory=dict)
    # (label, collective) of the pairs the run's conclusion called a bad link (the stored
    # `cause: link`): the link's fault, not its ends'
    bad_links: frozenset[tuple[str, str]] = frozenset()


def subject_kind(subject: str) -> tuple[str, str]:
    """`HOST` -> ("intra", HOST); `A--B` -> ("pair", "A--B" with the names sorted)."""
    if "--" in subject:
        a, _, b = subject.partition("--")
        if not a or not b:
            raise HistoryError(f"{subject!r}: a link is HOSTA--HOSTB")
        return "pair", "--".join(sorted((a, b)))
    return "intra", subject


def _summarised(store: Store, sql: str, params: tuple) -> list[tuple]:
    """`sql` over the night summaries (retention.py), or nothing in a database without them."""
    return store.query(sql, params) if has_table(store, SUMMARIES) else []


# A subject's raw rows, found run by run: the runs table first, then for each run the range of the
# measurements' primary key (run_id, kind, subject, ...) that holds them. The measurements have no
# index by subject (store.py, schema 4), and SQLite keeps the tables in the order a CROSS JOIN names
# them, so it never reads the whole table; a server database plans the same join on its own.
_SUBJECT_ROWS = (
    "FROM runs r CROSS JOIN measurements m WHERE m.run_id = r.run_id AND m.kind = ? AND m.subject = ?"
)


def check_subject(store: Store, kind: str, subject: str) -> None:
    if store.query(f"SELECT 1 {_SUBJECT_ROWS} LIMIT 1", (kind, subject)):
        return
    if _summarised(store, f"SELECT 1 FROM {SERIES} WHERE kind = ? AND subject = ? LIMIT 1", (kind, subject)):
        return
    known = [
        r[0]
        for r in store.query(
            "SELECT DISTINCT m.subject FROM runs r CROSS JOIN measurements m "
            "WHERE m.run_id = r.run_id AND m.kind = ?",
            (kind,),
        )
    ]
    known = sorted(
        {*known, *(r[0] for r in _summarised(store, f"SELECT subject FROM {SERIES} WHERE kind = ?", (kind,)))}
    )
    what = "link" if kind == "pair" else "host"
    close = difflib.get_close_matches(subject, known, n=3, cutoff=0.5)
    if close:
        hint = f"; did you mean {', '.join(close)}?"
    elif known:
        hint = f"; {len(known)} {what}s are known, e.g. {', '.join(sorted(known)[:3])}"
    else:
        hint = f"; it holds no {what} measurements"
    raise HistoryError(f"no {what} {subject!r} in {store.path}{hint}")


def collectives_of(store: Store, kind: str, subject: str) -> list[str]:
    rows = store.query(f"SELECT DISTINCT m.collective {_SUBJECT_ROWS}", (kind, subject))
    rows += _summarised(
        store, f"SELECT collective FROM {SERIES} WHERE kind = ? AND subject = ?", (kind, subject)
    )
    return sorted({r[0] for r in rows})


def sizes_of(store: Store, kind: str, subject: str, collective: str) -> list[int]:
    rows = store.query(
        f"SELECT DISTINCT m.size {_SUBJECT_ROWS} AND m.collective = ?", (kind, subject, collective)
    )
    rows += _summarised(
        store,
        f"SELECT DISTINCT size FROM {SUMMARIES} s JOIN {SERIES} USING (series) "
        "WHERE kind = ? AND subject = ? AND collective = ?",
        (kind, subject, collective),
    )
    return sorted({int(r[0]) for r in rows})


def newest_size(store: Store, kind: str, subject: str, collective: str) -> int | None:
    """The largest size measured in the subject's newest run with this collective (its newest
    summarised night when its raw rows are gone)."""
    rows = store.query(
        f"SELECT MAX(m.size) {_SUBJECT_ROWS} AND m.collective = ? AND m.busbw IS NOT NULL "
        "GROUP BY r.started_at, r.run_id ORDER BY r.started_at DESC, r.run_id DESC LIMIT 1",
        (kind, subject, collective),
    ) or _summarised(
        store,
        f"SELECT MAX(size) FROM {SUMMARIES} JOIN {SERIES} USING (series) "
        "WHERE kind = ? AND subject = ? AND collective = ? GROUP BY night ORDER BY night DESC LIMIT 1",
        (kind, subject, collective),
    )
    return int(rows[0][0]) if rows else None


def series(store: Store, kind: str, subject: str, collective: str, *, size: int, last: int) -> list[Point]:
    """busbw at `size` in each run that measured it, oldest first (the newest `last` runs); before the
    raw rows, one point per summarised night (its median; `verdict` says how many runs it holds)."""
    if kind == "pair":
        verdict_sql = (
            "(SELECT v.status FROM verdicts v WHERE v.run_id = m.run_id AND v.scope = 'pair' "
            "AND v.subject = m.subject AND v.name = 'pairs/' || m.collective)"
        )
    else:
        verdict_sql = "(SELECT h.verdict FROM hosts h WHERE h.run_id = m.run_id AND h.host = m.subject)"
    rows = store.query(
        f"SELECT m.run_id, r.started_at, m.busbw, m.healthy, {verdict_sql} "
        f"{_SUBJECT_ROWS} AND m.collective = ? AND m.size = ? "
        "ORDER BY r.started_at DESC, r.run_id DESC LIMIT ?",
        (kind, subject, collective, size, last),
    )
    points = [Point(r[0], r[1], r[2], bool(r[3]), r[4]) for r in rows]
    if len(points) < last:
        before = night_of(points[-1].started_at) if points else 1 << 40
        for night, median, n in _summarised(
            store,
            f"SELECT night, median, n FROM {SUMMARIES} JOIN {SERIES} USING (series) "
            "WHERE kind = ? AND subject = ? AND collective = ? AND size = ? AND night < ? "
            "ORDER BY night DESC LIMIT ?",
            (kind, subject, collective, size, before, last - len(points)),
        ):
            day = night_text(night)
            runs = store.query(
                "SELECT run_id, started_at FROM runs WHERE started_at >= ? AND started_at < ? "
                "ORDER BY started_at, run_id",
                (day, night_text(night + 1)),
            )
            run_id, started = runs[0] if len(runs) == 1 else (f"{day} ({len(runs)} runs)", f"{day}T00:00:00Z")
            points.append(Point(run_id, started, median, True, f"night summary of {n} run(s)"))
    return points[::-1]


def snapshot_from_db(store: Store, run_id: str) -> Snapshot:
    head = store.query("SELECT run_id, started_at FROM runs WHERE run_id = ?", (run_id,))
    if not head:
        raise HistoryError(f"no run {run_id!r} in {store.path}")
    hosts = store.query("SELECT host, verdict FROM hosts WHERE run_id = ?", (run_id,))
    verdicts = store.query(
        "SELECT subject, name, status, reason FROM verdicts WHERE run_id = ? AND scope = 'pair'", (run_id,)
    )
    checks = store.query(
        "SELECT subject, name, status FROM verdicts WHERE run_id = ? AND scope = 'host' AND seq > 0",
        (run_id,),
    )
    measurements = store.query(
        "SELECT kind, subject, collective, size, busbw FROM measurements WHERE run_id = ?", (run_id,)
    )
    facts = store.query("SELECT host, key, value FROM facts WHERE run_id = ?", (run_id,))
    return _snapshot(head[0][0], head[0][1], str(store.path), hosts, verdicts, measurements, facts, checks)


def snapshot_from_records(records: RunRecords, source: str) -> Snapshot:
    return _snapshot(
        records.run[0],
        records.run[1],
        source,
        [(h[1], h[4]) for h in records.hosts],
        [(v[2], v[4], v[5], v[6]) for v in records.verdicts if v[1] == "pair"],
        [m[1:6] for m in records.measurements],
        [f[1:] for f in records.facts],
        [(v[2], v[4], v[5]) for v in records.verdicts if v[1] == "host" and v[3] > 0],
    )


def _snapshot(  # noqa: PLR0917 - the rows of each table, in order
    run_id: str,
    started_at: str,
    source: str,
    hosts: list,
    pair_verdicts: list,
    measurements: list,
    facts: list,
    host_checks: list = (),
) -> Snapshot:
    values: dict[tuple[str, str, str], dict[int, float]] = defaultdict(dict)
    for kind, subject, collective, size, busbw in measurements:
        if busbw is not None:
            values[(kind, subject, collective)][int(size)] = float(busbw)
    host_facts: dict[str, dict[str, str | None]] = defaultdict(dict)
    for host, key, value in facts:
        host_facts[host][key] = value
    results: dict[tuple[str, str], str] = {}
    bad_links: set[tuple[str, str]] = set()
    for label, name, _status, reason in pair_verdicts:
        key = (label, name.removeprefix("pairs/"))
        result, cause = _pair_reason(reason or "")
        if result:
            results[key] = result
        if cause == "link":
            bad_links.add(key)
    return Snapshot(
        run_id=run_id,
        started_at=started_at,
        source=source,
        host_verdicts=dict(hosts),
        pair_status={
            (label, name.removeprefix("pairs/")): status for label, name, status, _ in pair_verdicts
        },
        values=dict(values),
        facts=dict(host_facts),
        host_checks={(host, name): status for host, name, status in host_checks},
        pair_results=results,
        bad_links=frozenset(bad_links),
    )


def _pair_reason(reason: str) -> tuple[str | None, str | None]:
    """(result, cause) of a stored pair reason, `all_reduce slow: 234.3 GB/s, cause: link`."""
    words = reason.partition(":")[0].split()
    result = words[1] if len(words) == 2 else None
    _, found, cause = reason.rpartition(", cause: ")
    return result, cause.strip() if found else None
