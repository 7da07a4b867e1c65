"""The history database: where it lives, its schema, and write transactions that never half-happen.

SQLite by default (standard library `sqlite3`). The schema is kept portable so a server
database can take its place (see docs/history.md): plain SQL types (TEXT, BIGINT, DOUBLE
PRECISION, SMALLINT, BLOB), an explicit primary key on every table, no AUTOINCREMENT or rowid, no
foreign-key cascades (children are deleted explicitly), timestamps as ISO 8601 UTC text, JSON
as TEXT, arrays as BLOB. The only SQLite-specific settings are the pragmas in `_connect` and the
WITHOUT ROWID of the summaries table (see SUMMARY_SCHEMA).

Safety with several writers (two nightly jobs): WAL journal, a busy timeout, and every write in
one `BEGIN IMMEDIATE` transaction, so a writer waits for the lock instead of failing, and a
crash or an exception in the middle rolls back to the previous state.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

SCHEMA_VERSION = 5
DEFAULT_DB = Path("results") / "history.sqlite"
DB_FILENAME = "history.sqlite"
ENV_DB = "COLLBENCH_DB"
BUSY_TIMEOUT_S = 60.0

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (key TEXT NOT NULL PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE IF NOT EXISTS runs (
        run_id TEXT NOT NULL PRIMARY KEY,
        started_at TEXT NOT NULL,
        finished_at TEXT,
        status TEXT NOT NULL,
        backend TEXT,
        launcher TEXT,
        collbench_version TEXT,
        parameters TEXT NOT NULL,
        fleet_status TEXT,
        exit_code SMALLINT,
        source_path TEXT,
        content_hash TEXT NOT NULL,
        ingested_at TEXT NOT NULL,
        revision BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS hosts (
        run_id TEXT NOT NULL,
        host TEXT NOT NULL,
        inventory_hostname TEXT NOT NULL,
        status TEXT NOT NULL,
        verdict TEXT,
        PRIMARY KEY (run_id, host))""",
    """CREATE TABLE IF NOT EXISTS measurements (
        run_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        subject TEXT NOT NULL,
        collective TEXT NOT NULL,
        size BIGINT NOT NULL,
        busbw DOUBLE PRECISION,
        algbw DOUBLE PRECISION,
        time_us DOUBLE PRECISION,
        wrong BIGINT,
        healthy SMALLINT NOT NULL,
        PRIMARY KEY (run_id, kind, subject, collective, size))""",
    """CREATE TABLE IF NOT EXISTS verdicts (
        run_id TEXT NOT NULL,
        scope TEXT NOT NULL,
        subject TEXT NOT NULL,
        seq BIGINT NOT NULL,
        name TEXT NOT NULL,
        status TEXT NOT NULL,
        reason TEXT NOT NULL,
        PRIMARY KEY (run_id, scope, subject, seq))""",
    """CREATE TABLE IF NOT EXISTS facts (
        run_id TEXT NOT NULL,
        host TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT,
        PRIMARY KEY (run_id, host, key))""",
    """CREATE TABLE IF NOT EXISTS baselines (
        name TEXT NOT NULL PRIMARY KEY,
        created_at TEXT NOT NULL,
        description TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS baseline_runs (
        name TEXT NOT NULL,
        run_id TEXT NOT NULL,
        PRIMARY KEY (name, run_id))""",
    """CREATE TABLE IF NOT EXISTS baseline_values (
        name TEXT NOT NULL,
        kind TEXT NOT NULL,
        subject TEXT NOT NULL,
        collective TEXT NOT NULL,
        size BIGINT NOT NULL,
        median DOUBLE PRECISION NOT NULL,
        mad DOUBLE PRECISION NOT NULL,
        n BIGINT NOT NULL,
        PRIMARY KEY (name, kind, subject, collective, size))""",
)
# Schema 2: what the node checks measured per component (a GPU, a GPU pair, an NVLink, an HCA).
COMPONENT_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS component_measurements (
        run_id TEXT NOT NULL,
        host TEXT NOT NULL,
        kind TEXT NOT NULL,
        component TEXT NOT NULL,
        metric TEXT NOT NULL,
        value DOUBLE PRECISION,
        unit TEXT,
        healthy SMALLINT NOT NULL,
        PRIMARY KEY (run_id, host, kind, component, metric))""",
    "CREATE INDEX IF NOT EXISTS component_measurements_by_component "
    "ON component_measurements (host, component, metric)",
)
# Schema 3: what the retention policy keeps of a night once its raw rows age out (history/retention.py):
# per series (kind, subject, collective) a dictionary id, and per series, night and size the median,
# spread (MAD), lowest value and count of the night's healthy busbw. `night` is the UTC day number
# (days since 1970-01-01) and `low` is NULL when it equals the median (one run that night): a year
# of a 4,000-host fleet is some 50 million rows, so every byte of a row counts. WITHOUT ROWID keeps
# one b-tree per table instead of a table and its primary-key index (a server database: a
# clustered primary key).
SUMMARY_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS summary_series (
        series BIGINT NOT NULL PRIMARY KEY,
        kind TEXT NOT NULL,
        subject TEXT NOT NULL,
        collective TEXT NOT NULL)""",
    "CREATE UNIQUE INDEX IF NOT EXISTS summary_series_by_subject "
    "ON summary_series (kind, collective, subject)",
    """CREATE TABLE IF NOT EXISTS measurement_summaries (
        series BIGINT NOT NULL,
        night BIGINT NOT NULL,
        size BIGINT NOT NULL,
        median DOUBLE PRECISION NOT NULL,
        spread DOUBLE PRECISION NOT NULL,
        low DOUBLE PRECISION,
        n BIGINT NOT NULL,
        PRIMARY KEY (series, night, size)) WITHOUT ROWID""",
)
# Schema 4: no (kind, collective, subject) index on the measurements. Keeping it up doubled the cost
# of a night's insert and of the pruned night's delete (a 4,000-host night: 672,000 rows each); a
# subject's rows are found run by run through the primary key instead (history/query.py), one
# range of it per run that still has raw rows.
DROPPED_SUBJECT_INDEX = ("DROP INDEX IF EXISTS measurements_by_subject",)
# Schema 5: each run's baseline-ready busbw as one array per launch kind, and the layouts that say
# which (collective, subject, size) each value is, stored once for the runs that share one
# (history/columns.py): the rolling baseline reads the newest runs from them, not row by row.
# BLOB: BYTEA on PostgreSQL.
COLUMN_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS busbw_layouts (
        layout TEXT NOT NULL PRIMARY KEY,
        names TEXT NOT NULL,
        positions BLOB NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS busbw_columns (
        run_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        layout TEXT NOT NULL,
        busbw BLOB NOT NULL,
        PRIMARY KEY (run_id, kind))""",
)
# Each schema version's statements on top of the one before: a database at version N is brought to
# SCHEMA_VERSION by running MIGRATIONS[N + 1 ...] in one transaction.
MIGRATIONS = {2: COMPONENT_SCHEMA, 3: SUMMARY_SCHEMA, 4: DROPPED_SUBJECT_INDEX, 5: COLUMN_SCHEMA}
RUN_TABLES = ("measurements", "busbw_columns", "component_measurements", "verdicts", "facts", "hosts", "runs")


class HistoryError(Exception):
    """The history database cannot be used (one line for the user)."""


@dataclass(frozen=True)
class Store:
    """An open history database."""

    path: Path
    connection: sqlite3.Connection

    def query(self, sql: str, params: tuple | list = ()) -> list[tuple]:
        try:
            return self.connection.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"{self.path}: {exc}") from None

    @contextmanager
    def write(self) -> Iterator[sqlite3.Cursor]:
        """One write transaction: all of it is committed, or none of it."""
        cursor = self.connection.cursor()
        try:
            cursor.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise HistoryError(f"{self.path}: cannot start a write ({exc})") from None
        try:
            yield cursor
        except BaseException:
            self.connection.rollback()
            raise
        self.connection.commit()

    def close(self) -> None:
        self.connection.close()


def db_path(url: str | os.PathLike[str] | None, default: Path | None = None) -> Path:
    """A path or an `sqlite:///PATH` URL; None: $COLLBENCH_DB, else `default`, else results/history.sqlite."""
    if url is None:
        url = os.environ.get(ENV_DB) or default or DEFAULT_DB
    text = os.fspath(url)
    if "://" not in text:
        return Path(text)
    parsed = urlparse(text)
    if parsed.scheme != "sqlite" or parsed.netloc:
        raise HistoryError(f"{text}: only sqlite:///PATH databases are built in (or a plain file path)")
    # As SQLAlchemy spells it: sqlite:///relative/path, sqlite:////absolute/path.
    return Path(unquote(parsed.path[1:]) or DEFAULT_DB)


@contextmanager
def open_store(url: str | os.PathLike[str] | None = None, create: bool = False) -> Iterator[Store]:
    """Open the database; with `create`, make it (and its directory) when it does not exist yet."""
    path = db_path(url)
    if path.is_dir():
        raise HistoryError(f"{path} is a directory, not a history database")
    if not path.exists():
        if not create:
            raise HistoryError(f"no history database at {path} (`collbench report` writes one)")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise HistoryError(f"cannot create {path.parent}: {exc.strerror or exc}") from None
    store = Store(path, _connect(path))
    try:
        _prepare(store, create)
        yield store
    finally:
        store.close()


def _connect(path: Path) -> sqlite3.Connection:
    try:
        # isolation_level=None: no implicit transactions; `Store.write` opens them explicitly.
        connection = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        connection.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        # WAL: readers never block the writer; a crashed writer leaves its frames uncommitted.
        mode = _journal_mode_wal(connection)
        connection.execute("PRAGMA synchronous = NORMAL")
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"{path} is not a usable history database ({exc})") from None
    if mode is None or str(mode[0]).lower() != "wal":
        # Network filesystems refuse WAL: concurrent writers would not be safe there.
        connection.close()
        raise HistoryError(
            f"{path}: the WAL journal is not available here; keep the database on a local disk"
        )
    return connection


def _journal_mode_wal(connection: sqlite3.Connection) -> tuple | None:
    """`PRAGMA journal_mode = WAL`, waited for like any other lock: SQLite answers it `database is
    locked` at once, without its busy handler, while another process turns a new database to WAL
    (two nightly reports that find no database, say)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            return connection.execute("PRAGMA journal_mode = WAL").fetchone()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _prepare(store: Store, create: bool) -> None:
    tables = {row[0] for row in store.query("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "runs" not in tables:
        if tables or not create:
            raise HistoryError(
                f"{store.path} is an SQLite database but not a collbench history (no runs table)"
            )
        with store.write() as cursor:
            for statement in (*SCHEMA, *COMPONENT_SCHEMA, *SUMMARY_SCHEMA, *COLUMN_SCHEMA):
                cursor.execute(statement)
            cursor.execute(
                "INSERT INTO meta (key, value) SELECT 'schema_version', ? "
                "WHERE NOT EXISTS (SELECT 1 FROM meta WHERE key = 'schema_version')",
                (str(SCHEMA_VERSION),),
            )
    version = _schema_version(store)
    if version is not None and 1 <= version < SCHEMA_VERSION:
        _upgrade(store, create)
        version = _schema_version(store)
    if version is None or not 1 <= version <= SCHEMA_VERSION:
        found = "none" if version is None else version
        raise HistoryError(f"{store.path}: history schema {found}, this collbench reads {SCHEMA_VERSION}")


def _schema_version(store: Store) -> int | None:
    rows = store.query("SELECT value FROM meta WHERE key = 'schema_version'")
    return int(rows[0][0]) if rows and str(rows[0][0]).isdigit() else None


def _upgrade(store: Store, create: bool) -> None:
    """Bring an older database to this schema in one transaction (a crash leaves the old one whole).

    Upgrades only add tables (and drop an index), so an older database read without upgrading (a
    read-only file opened by `collbench history`) still answers every question it can: the new
    tables read as empty."""
    try:
        with store.write() as cursor:
            # Read again inside the lock: another writer may have upgraded it meanwhile.
            stored = cursor.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            for version in range(int(stored[0]) + 1, SCHEMA_VERSION + 1):
                for statement in MIGRATIONS[version]:
                    cursor.execute(statement)
            cursor.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
    except (HistoryError, sqlite3.DatabaseError) as exc:
        if create:
            raise HistoryError(f"{store.path}: cannot upgrade the history schema ({exc})") from None


def has_table(store: Store, name: str) -> bool:
    return bool(store.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)))


def database_to_create(db: str | None, new_db: bool, default: Path) -> Path | None:
    """The history database `collbench report` will write, when it does not exist yet (None when it
    does). One named by --db or $COLLBENCH_DB that does not exist is refused (HistoryError) unless
    --new-db asks for it: a typo there would start an empty history, and every regression against
    the old one would go unseen from then on. The default one, next to the run directories, is
    simply made."""
    source, named = ("--db", db) if db is not None else (f"${ENV_DB}", os.environ.get(ENV_DB) or None)
    path = db_path(named, default=default)
    if path.exists():
        return None
    if named is not None and not new_db:
        raise HistoryError(
            f"{source} {named}: no history database there; check the path, or pass --new-db to start "
            "a new history there"
        )
    return path


def created_line(path: Path) -> str:
    """Said once, when a run is the first one in a history database."""
    return (
        f"history: new database {path}: this run is its first; regressions against a host's own "
        "history are found from the next run on"
    )
