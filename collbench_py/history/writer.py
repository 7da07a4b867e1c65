"""Put a judged run into the history, once.

The run id is the key. Ingesting a run whose rows are identical to what is stored changes
nothing (not even `ingested_at`). A run whose rows changed (the report was run again with
another profile or threshold, or the run directory gained logs after an interrupted run) replaces
what was stored, in the same single transaction, and its `revision` goes up by one.

Text that may quote a log or an environment (verdict reasons, the run's parameters) is redacted
(collbench_py.redact) on its way in, whatever the caller did before.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from collbench_py.history.columns import columns_of, drop_unused_layouts, write_columns
from collbench_py.history.records import MeasurementRows, RunRecords, now, records_of
from collbench_py.history.store import RUN_TABLES, HistoryError, Store
from collbench_py.redact import redact_text, redact_value
from collbench_py.verdicts import Report

Outcome = Literal["added", "unchanged", "replaced"]


@dataclass(frozen=True)
class Ingested:
    run_id: str
    outcome: Outcome
    measurements: int
    revision: int


def ingest(store: Store, report: Report, node_checks: Any = None) -> Ingested:
    """Store the run; `node_checks` is its node checks section (None: the one the report carries)."""
    records = redacted(records_of(report, node_checks))
    run_id = records.run[0]
    try:
        with store.write() as cursor:
            stored = cursor.execute(
                "SELECT content_hash, revision FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            if stored is not None and records.matches(stored[0]):
                return Ingested(run_id, "unchanged", len(records.measurements), int(stored[1]))
            revision = 1 if stored is None else int(stored[1]) + 1
            if stored is not None:
                for table in RUN_TABLES:
                    cursor.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
                drop_unused_layouts(cursor)
            _insert_run(cursor, records, revision)
            _insert_rows(cursor, records)
            _insert_columns(cursor, records)
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
    cursor.executemany(
        "INSERT INTO component_measurements (run_id, host, kind, component, metric, value, unit, healthy) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        records.components,
    )


def _insert_columns(cursor: sqlite3.Cursor, records: RunRecords) -> None:
    """The run's busbw columns (history/columns.py), from the rows just inserted."""
    write_columns(cursor, records.run[0], columns_of(*_measured(records.measurements)))


def _measured(rows: Sequence[tuple]) -> tuple[Sequence[tuple], set]:
    """The rows without their run id and healthy column, and the (kind, subject, collective) that
    are not healthy: what history.columns.columns_of takes."""
    if isinstance(rows, MeasurementRows):
        return rows.measured, rows.unhealthy
    return [row[1:-1] for row in rows], {row[1:4] for row in rows if not row[-1]}


# Column positions: `parameters` in the runs row, `reason` in a verdicts row (history.store's schema).
_PARAMETERS = 7
_REASON = 6


def redacted(records: RunRecords) -> RunRecords:
    """The records with secrets taken out of verdict reasons and the run's parameters."""
    run = list(records.run)
    if isinstance(run[_PARAMETERS], str):
        run[_PARAMETERS] = json.dumps(redact_value(json.loads(run[_PARAMETERS])), sort_keys=True)
    # Each distinct reason once: a fleet's checks repeat their reasons (4,000 hosts: some 126,000
    # verdict rows, a few hundred distinct reasons), and redaction is a pure function of the text.
    clean = {
        reason: redact_text(reason)
        for reason in {row[_REASON] for row in records.verdicts if isinstance(row[_REASON], str)}
    }
    verdicts = tuple(
        (*row[:_REASON], clean[row[_REASON]], *row[_REASON + 1 :]) if isinstance(row[_REASON], str) else row
        for row in records.verdicts
    )
    return replace(records, run=tuple(run), verdicts=verdicts)
