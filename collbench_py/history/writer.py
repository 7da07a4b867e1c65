"""Put a judged run into the history, once.

The run id is the key. Ingesting a run whose rows are identical to what is stored changes
nothing (not even `ingested_at`). A run whose rows changed (the report was run again with
another profile or threshold, or the run directory gained logs after an interrupted run) replaces
what was stored, in the same single transaction, and its `revision` goes up by one.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Literal

from collbench_py.history.records import RunRecords, now, records_of
from collbench_py.history.store import RUN_TABLES, HistoryError, Store
from collbench_py.verdicts import Report

Outcome = Literal["added", "unchanged", "replaced"]


@dataclass(frozen=True)
class Ingested:
    run_id: str
    outcome: Outcome
    measurements: int
    revision: int


def ingest(store: Store, report: Report) -> Ingested:
    records = records_of(report)
    run_id = records.run[0]
    try:
        with store.write() as cursor:
            stored = cursor.execute(
                "SELECT content_hash, revision FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            if stored is not None and stored[0] == records.digest:
                return Ingested(run_id, "unchanged", len(records.measurements), int(stored[1]))
            revision = 1 if stored is None else int(stored[1]) + 1
            if stored is not None:
                for table in RUN_TABLES:
                    cursor.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
            _insert_run(cursor, records, revision)
            _insert_rows(cursor, records)
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"{store.path}: cannot record run {run_id} ({exc})") from None
    return Ingested(run_id, "added" if stored is None else "replaced", len(records.measurements), revision)


def _insert_run(cursor: sqlite3.Cursor, records: RunRecords, revision: int) -> None:
    cursor.execute(
        "INSERT INTO runs (run_id, started_at, finished_at, status, backend, launcher, collbench_version, "
        "parameters, fleet_status, exit_code, source_path, content_hash, ingested_at, revision) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (*records.run, records.digest, now(), revision),
    )


def _insert_rows(cursor: sqlite3.Cursor, records: RunRecords) -> None:
    cursor.executemany(
        "INSERT INTO hosts (run_id, host, inventory_hostname, status, verdict) VALUES (?, ?, ?, ?, ?)",
        records.hosts,
    )
    cursor.executemany(
        "INSERT INTO measurements (run_id, kind, subject, collective, size, busbw, algbw, time_us, wrong, "
        "healthy) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        records.measurements,
    )
    cursor.executemany(
        "INSERT INTO verdicts (run_id, scope, subject, seq, name, status, reason) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        records.verdicts,
    )
    cursor.executemany("INSERT INTO facts (run_id, host, key, value) VALUES (?, ?, ?, ?)", records.facts)
