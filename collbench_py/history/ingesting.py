"""The night's ingest beside its regressions: a child process writes the measurement rows while the
regressions are found.

A 4,000-host night is 672,000 measurement rows, 3-4 s of inserts, and the regressions read only the
runs stored before it. So `history.record` forks a child that opens its own connection, begins the
run's one write transaction and inserts those rows while the parent finds the regressions (SQLite in
WAL mode: the parent's reads go on, and see none of it). The parent then sends the rest: the run's
digest, its other rows (the verdicts carry the findings) and the subjects the findings left
unhealthy; the child corrects the healthy column of the rows that changed, writes the rest, and
commits when the parent, told it is written, says so. The database ends as `writer.ingest` leaves
it, in one transaction: a parent that gives up or dies first, or a child that dies, leaves it as it
was. A run already stored (a report run again) is written only
once the parent has compared digests, as `ingest` does.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import sqlite3
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import Any

from collbench_py.history.records import (
    MeasurementRows,
    facts_rows,
    measured_digest,
    measurement_rows,
    records_of,
)
from collbench_py.history.store import BUSY_TIMEOUT_S, HistoryError, open_store
from collbench_py.history.writer import Ingested, insert_facts, insert_measurements, redacted, write_records
from collbench_py.rundir.load import RunDir
from collbench_py.verdicts import Report

_UNCHANGED = "unchanged"  # the parent's answer when the stored digest is this run's
_COMMIT = "commit"  # the parent's answer to the written rows
_HANG_S = 2 * BUSY_TIMEOUT_S  # how long a child told to stop may take to roll back


@dataclass
class Ingesting:
    """An ingest under way in a child process (`start`), finished with `finish` or `abandon`."""

    process: Any  # multiprocessing.Process of the fork context
    pipe: Connection
    url: str

    @classmethod
    def start(cls, url: str, report: Report) -> Ingesting | None:
        """Fork the writer; None where fork is not available or no process can be started (then the
        caller ingests in its own process)."""
        if "fork" not in multiprocessing.get_all_start_methods():
            return None
        rows = measurement_rows(report)  # made here, once: the regressions use the same rows
        context = multiprocessing.get_context("fork")
        pipe, child_end = context.Pipe()
        process = context.Process(
            target=_child, args=(url, rows, report.run, child_end, pipe), name="collbench-ingest"
        )
        try:
            process.start()
        except OSError:
            pipe.close()
            child_end.close()
            return None
        child_end.close()  # the child's end: EOF here if the child dies without answering
        return cls(process, pipe, url)

    def finish(self, report: Report, node_checks: Any = None) -> Ingested:
        """Send the rest of the run (`report` with its findings merged) and wait for the commit."""
        try:
            begun = self._answer()
            if isinstance(begun, str):  # the child could not begin (its error)
                raise HistoryError(begun)
            stored, measured = begun
            records = redacted(records_of(report, node_checks, measured))
            if stored is not None and records.matches(stored[0]):
                self.pipe.send(_UNCHANGED)
                return Ingested(records.run[0], "unchanged", len(records.measurements), int(stored[1]))
            unhealthy = records.measurements.unhealthy  # type: ignore[attr-defined]
            # A new run's facts are in already (the child wrote them beside the regressions).
            rest = replace(
                records, measurements=(), earlier_digest=None, facts=() if stored is None else records.facts
            )
            self.pipe.send((rest, unhealthy))
            written = self._answer()
            if isinstance(written, str):
                raise HistoryError(written)
            self.pipe.send(_COMMIT)  # only a parent still here has the run committed
            committed = self._answer()
            if isinstance(committed, str):
                raise HistoryError(committed)
        finally:
            self._close()
        return written

    def abandon(self) -> None:
        """Leave the database as it was: the child rolls back when the pipe closes."""
        self._close()

    def _answer(self) -> Any:
        try:
            return self.pipe.recv()
        except (EOFError, OSError):  # the child died before it answered (killed, out of memory)
            self.process.join()
            raise HistoryError(
                f"{self.url}: the history writer ended with code {self.process.exitcode} before it was done"
            ) from None

    def _close(self) -> None:
        self.pipe.close()
        # A child that was inserting notices the closed pipe once it is done; one that hangs past
        # that (a lock held elsewhere) is stopped: SQLite rolls its transaction back.
        self.process.join(_HANG_S)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join()


def _child(url: str, rows: MeasurementRows, run: RunDir, pipe: Connection, parents_end: Connection) -> None:
    """Begin the run's transaction, insert its measurement rows and facts if it is new, then write
    what the parent sends; answer the outcome, or one line of what went wrong."""
    parents_end.close()  # else the pipe stays open here when the parent is gone: no EOF, no rollback
    try:
        with open_store(url) as store, store.write() as cursor:
            stored = cursor.execute(
                "SELECT content_hash, revision FROM runs WHERE run_id = ?", (rows.run_id,)
            ).fetchone()
            if stored is None:
                insert_measurements(cursor, rows)
                insert_facts(cursor, facts_rows(run))  # they do not depend on the findings
            pipe.send((stored, measured_digest(rows)))  # the rows' part of the digest, worked out here
            where = _rows_of_subjects(rows) if stored is None else {}
            message = pipe.recv()  # EOFError when the parent gave up: the transaction rolls back
            if message == _UNCHANGED:  # nothing was written: the same run is stored
                return
            records, unhealthy = message
            final = MeasurementRows(rows.run_id, rows.measured, unhealthy)
            if stored is None:
                _correct_health(cursor, rows, final, where)
            outcome = write_records(
                cursor, replace(records, measurements=final), stored, measured=stored is None
            )
            pipe.send(outcome)
            if pipe.recv() != _COMMIT:  # EOFError when the parent is gone: the transaction rolls back
                raise EOFError
        pipe.send(None)  # committed
    except EOFError:
        pass  # the parent gave up or is gone: nothing was committed, and nobody to tell
    except HistoryError as exc:
        _say(pipe, str(exc))
    except sqlite3.DatabaseError as exc:
        _say(pipe, f"{url}: cannot record run {rows.run_id} ({exc})")
    except BaseException as exc:  # whatever it is, the parent says it once
        _say(pipe, f"{url}: the history writer failed: {exc}")
    finally:
        pipe.close()


def _rows_of_subjects(rows: MeasurementRows) -> dict[str, list[int]]:
    """Each subject's positions in the measured rows (made while the parent finds the regressions)."""
    where: dict[str, list[int]] = {}
    for position, measured in enumerate(rows.measured):
        where.setdefault(measured[1], []).append(position)
    return where


def _correct_health(
    cursor: sqlite3.Cursor, inserted: MeasurementRows, final: MeasurementRows, where: dict[str, list[int]]
) -> None:
    """The rows whose healthy column the findings changed (a regression found now keeps its subject out
    of later baselines), updated by primary key; `where`: each subject's positions in the rows."""
    changed = inserted.unhealthy ^ final.unhealthy
    subjects = {entry if isinstance(entry, str) else entry[1] for entry in changed}
    updates = []
    for position in sorted({p for subject in subjects for p in where.get(subject, ())}):
        measured = inserted.measured[position]
        healthy = final.healthy(measured)
        if healthy != inserted.healthy(measured):
            updates.append((healthy, final.run_id, *measured[:4]))
    cursor.executemany(
        "UPDATE measurements SET healthy = ? "
        "WHERE run_id = ? AND kind = ? AND subject = ? AND collective = ? AND size = ?",
        updates,
    )


def _say(pipe: Connection, line: str) -> None:
    with contextlib.suppress(OSError):  # the parent is gone: nobody to tell
        pipe.send(line)
