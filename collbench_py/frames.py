"""Runs, the history and verdicts as pandas DataFrames, for analysis in a notebook.

    import collbench_py as cb
    rows = cb.read_run("results/20261121T215100Z-3f9a2c")     # one row per measured half-row
    nights = cb.read_history(host="node3", collective="all_reduce")
    checks = cb.read_verdicts("results/20261121T215100Z-3f9a2c")

Each frame is built from what the report itself reads (collbench_py.rundir.load_run_dir, the
history database, verdicts.judge): nothing is parsed a second way. docs/python-api.md lists the
columns, their types and units.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from collbench_py.history.query import check_subject, subject_kind
from collbench_py.history.store import HistoryError, open_store
from collbench_py.rundir.load import load_run_dir
from collbench_py.verdicts import judge
from collbench_py.verdicts.model import PairResult

__all__ = ["HistoryError", "read_history", "read_run", "read_verdicts"]

RUN_COLUMNS = (
    "run_id",
    "kind",
    "round",
    "hosts",
    "host_a",
    "host_b",
    "collective",
    "size",
    "count",
    "dtype",
    "redop",
    "in_place",
    "time_us",
    "algbw",
    "busbw",
    "wrong",
    "log",
    "log_run",
)
# Columns that may be missing (a launch outside a schedule has no round, `N/A` has no #wrong):
# nullable integers, so one missing value does not turn the column into floats.
_NULLABLE_INTS = ("round", "count", "wrong", "log_run")

HISTORY_COLUMNS = (
    "run_id",
    "started_at",
    "kind",
    "subject",
    "host_a",
    "host_b",
    "collective",
    "size",
    "busbw",
    "algbw",
    "time_us",
    "wrong",
    "healthy",
    "verdict",
)
VERDICT_COLUMNS = (
    "run_id",
    "scope",
    "subject",
    "check",
    "status",
    "reason",
    "log",
    "verdict",
    "busbw",
    "z",
    "cause",
)


def read_run(run_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """One row per measurement of a run directory: each half (out of place, in place) of each
    result row of each log, as results.json lists them. Raises RunDirError for what is not a run."""
    run = load_run_dir(Path(run_dir))
    records = [
        (
            run.run_id,
            launch.kind,
            launch.round,
            subject,
            host_a,
            host_b,
            launch.collective or parsed.collective,
            row.size,
            row.count,
            row.dtype,
            row.redop,
            in_place,
            half.time_us,
            half.algbw,
            half.busbw,
            half.wrong,
            launch.log,
            index,
        )
        for log in run.logs
        for launch, (subject, host_a, host_b) in [(log.launch, _subject(log.launch.kind, log.launch.hosts))]
        for index, parsed in enumerate(log.runs)
        for row in parsed.rows
        for in_place, half in ((False, row.oop), (True, row.ip))
        if half is not None
    ]
    frame = pd.DataFrame.from_records(records, columns=list(RUN_COLUMNS))
    return frame.astype({**dict.fromkeys(_NULLABLE_INTS, "Int64"), "size": "int64", "in_place": "bool"})


def _subject(kind: str, hosts: tuple[str, ...]) -> tuple[str, str | None, str | None]:
    """`hosts`, `host_a`, `host_b` of a launch, named as the history names its subject."""
    if kind == "pair" and len(hosts) == 2:
        a, b = sorted(hosts)
        return f"{a}--{b}", a, b
    if kind == "intra" and hosts:
        return hosts[0], hosts[0], None
    if kind == "all":
        return "all", None, None
    return ",".join(hosts), None, None


def read_history(
    db: str | os.PathLike[str] | None = None,
    host: str | None = None,
    collective: str | None = None,
    since: str | datetime | None = None,
) -> pd.DataFrame:
    """One row per stored measurement (run, launch kind, subject, collective, size), oldest run
    first. `db`: a path or sqlite:///PATH (None: $COLLBENCH_DB, else results/history.sqlite);
    `host`: a host, `A--B` for a link, or `all`; `since`: runs started at or after it (UTC when
    it names no zone). Raises HistoryError for a missing database or an unknown host or link."""
    where, params = ["m.run_id = r.run_id"], []
    with open_store(db) as store:
        if host is not None:
            kind, subject = ("all", "all") if host == "all" else subject_kind(host)
            if kind != "all":
                check_subject(store, kind, subject)
            where.append("m.kind = ? AND m.subject = ?")
            params += [kind, subject]
        if collective is not None:
            where.append("m.collective = ?")
            params.append(collective)
        if since is not None:
            where.append("r.started_at >= ?")
            params.append(_utc_text(since))
        frame = pd.read_sql_query(
            "SELECT m.run_id, r.started_at, m.kind, m.subject, m.collective, m.size, m.busbw, m.algbw, "
            "m.time_us, m.wrong, m.healthy, "
            # The host's verdict in that run, or the link's status for that collective.
            "CASE m.kind WHEN 'pair' THEN v.status WHEN 'intra' THEN h.verdict END AS verdict "
            # Runs first: a host's rows are then one range of the measurements' primary key per run.
            "FROM runs r CROSS JOIN measurements m "
            "LEFT JOIN hosts h ON h.run_id = m.run_id AND h.host = m.subject "
            "LEFT JOIN verdicts v ON v.run_id = m.run_id AND v.scope = 'pair' AND v.subject = m.subject "
            "AND v.name = 'pairs/' || m.collective "
            f"WHERE {' AND '.join(where)} "
            "ORDER BY r.started_at, m.run_id, m.kind, m.subject, m.collective, m.size",
            store.connection,
            params=params,
        )
    pair, ends = frame["kind"] == "pair", frame["subject"].str.split("--", n=1)
    frame["host_a"] = ends.str[0].where(pair | (frame["kind"] == "intra"))
    frame["host_b"] = ends.str[1].where(pair)
    frame["started_at"] = pd.to_datetime(frame["started_at"], utc=True)
    frame = frame.astype({"size": "int64", "wrong": "Int64", "healthy": "bool"})
    return frame[list(HISTORY_COLUMNS)]


def _utc_text(since: str | datetime) -> str:
    """`since` as the history writes its start times (YYYY-mm-ddTHH:MM:SSZ, compared as text)."""
    moment = pd.Timestamp(since)
    moment = moment.tz_localize(UTC) if moment.tzinfo is None else moment.tz_convert(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def read_verdicts(run_dir: str | os.PathLike[str], profile: str | None = None) -> pd.DataFrame:
    """One row per check the report makes of a run: every check of every host, one per pair
    measured (its status as results.json gives it: ok, suspect, slow, failed, launcher), and the
    fleet's checks. Raises RunDirError or ProfileError for bad input, as `collbench report` does."""
    run = load_run_dir(Path(run_dir))
    report = judge(run, profile_arg=profile)
    hosts = [
        (run.run_id, "host", v.host, c.name, c.status, c.reason, c.log, v.verdict, None, None, None)
        for v in report.hosts.values()
        for c in v.checks
    ]
    pairs = [
        (
            *(run.run_id, "pair", p.label, f"pairs/{p.collective}", p.status, _pair_reason(p), p.log),
            *(None, p.busbw, p.z, p.cause),
        )
        for p in report.pairs
    ]
    fleet = [
        (run.run_id, "fleet", "fleet", c.name, c.status, c.reason, c.log, None, None, None, None)
        for c in report.fleet_checks
    ]
    frame = pd.DataFrame.from_records(hosts + pairs + fleet, columns=list(VERDICT_COLUMNS))
    return frame.astype({"busbw": "float64", "z": "float64"})


def _pair_reason(pair: PairResult) -> str:
    busbw = "no busbw" if pair.busbw is None else f"{pair.busbw:.4g} GB/s"
    cause = f", cause: {pair.cause}" if pair.cause else ""
    return f"{pair.collective} {pair.status}: {busbw}{cause}"
