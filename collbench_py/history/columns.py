"""Each run's baseline-ready busbw as one column per launch kind: how the rolling baseline reads
the newest runs of a large fleet.

The rolling baseline takes the newest runs' healthy busbw at a few sizes of every subject. From
the measurements table that is a walk over every row of each run (a 4,000-host night: 672,000
rows; ten runs: ~3.5 s). So the writer also stores, in the same transaction, per run and kind:

- `busbw_columns`: the busbw of the run's rows of that kind in one array, NaN where the row may
  not feed a baseline (not healthy, missing, or not above 0: what the baseline's query leaves out);
- `busbw_layouts`: which (collective, subject, size) each position holds, stored once for every
  run that shares it (a nightly fleet measures the same series in the same order every night).

They are derived from the measurement rows and removed with them: a cache, never the record. A
run without one (stored before schema 5), or with one that does not decode, is read from the
measurements table as before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from collbench_py.history.store import Store, has_table

COLUMNS = "busbw_columns"
LAYOUTS = "busbw_layouts"
_POSITION = "<i4"  # each row's indices into the layout's collectives, subjects and sizes
_VALUE = "<f8"


@dataclass(frozen=True)
class Column:
    """One run's rows of one kind, as the two tables store them."""

    kind: str
    layout: str  # sha256 of `names` and `positions`
    names: str  # JSON: {"collectives": [...], "subjects": [...], "sizes": [...]}, each sorted
    positions: bytes  # per row three int32: its collective, subject and size in `names`
    busbw: bytes  # per row a float64


def columns_of(measured: Sequence[tuple], unhealthy: set) -> list[Column]:
    """The columns of a run's measurement rows (kind, subject, collective, size, busbw, ...) and
    its unhealthy keys (records.MeasurementRows: a subject, or a (kind, subject, collective))."""
    if not measured:
        return []
    import numpy as np  # noqa: PLC0415  (only a history pays for it)

    kinds, subjects, collectives, sizes = ([row[i] for row in measured] for i in range(4))
    values = np.array([row[4] for row in measured], dtype=np.float64)  # None -> NaN
    if unhealthy:
        sick = [
            s in unhealthy or (k, s, c) in unhealthy
            for k, s, c in zip(kinds, subjects, collectives, strict=True)
        ]
        values[np.array(sick, dtype=bool)] = np.nan
    values[~(values > 0)] = np.nan
    kind_names, kind_codes = _codes(kinds)
    coded = [_codes(column) for column in (collectives, subjects, sizes)]
    out = []
    for code, kind in enumerate(kind_names):
        rows = np.flatnonzero(kind_codes == code)
        names: dict[str, list] = {}
        local = []
        for key, (all_names, codes) in zip(("collectives", "subjects", "sizes"), coded, strict=True):
            used = np.unique(codes[rows])
            ordered = sorted(all_names[u] for u in used)
            at = {name: i for i, name in enumerate(ordered)}
            lookup = np.zeros(len(all_names), dtype=np.int64)
            lookup[used] = [at[all_names[u]] for u in used]
            names[key] = ordered
            local.append(lookup[codes[rows]])
        text = json.dumps(names, separators=(",", ":"))
        positions = np.stack(local, axis=1).astype(_POSITION).tobytes()
        layout = hashlib.sha256(text.encode() + positions).hexdigest()
        out.append(Column(kind, layout, text, positions, values[rows].astype(_VALUE).tobytes()))
    return out


def _codes(values: Sequence[Any]) -> tuple[list, Any]:
    """The distinct values in first-seen order, and each value's index among them."""
    import numpy as np  # noqa: PLC0415

    index: dict[Any, int] = {}
    codes = np.fromiter((index.setdefault(v, len(index)) for v in values), dtype=np.int64, count=len(values))
    return list(index), codes


def write_columns(cursor: Any, run_id: str, columns: list[Column]) -> None:
    """Insert a run's columns (its earlier ones already deleted), each layout once."""
    for column in columns:
        cursor.execute(
            f"INSERT INTO {LAYOUTS} (layout, names, positions) SELECT ?, ?, ? "
            f"WHERE NOT EXISTS (SELECT 1 FROM {LAYOUTS} WHERE layout = ?)",
            (column.layout, column.names, column.positions, column.layout),
        )
        cursor.execute(
            f"INSERT INTO {COLUMNS} (run_id, kind, layout, busbw) VALUES (?, ?, ?, ?)",
            (run_id, column.kind, column.layout, column.busbw),
        )


def drop_unused_layouts(cursor: Any) -> None:
    """Remove the layouts no run's column points to any more (its run replaced or pruned)."""
    cursor.execute(f"DELETE FROM {LAYOUTS} WHERE layout NOT IN (SELECT layout FROM {COLUMNS})")


@dataclass(frozen=True)
class Layout:
    """A decoded layout: per row its collective, subject and size code, and the names of the codes."""

    collectives: list[str]
    subjects: list[str]
    sizes: list[int]
    positions: Any  # int64 array, one row of three codes per position


@dataclass(frozen=True)
class RunColumn:
    layout: Layout
    layout_id: str
    busbw: Any  # float64 array, NaN where the row may not feed a baseline


def read_columns(store: Store, kind: str, run_ids: list[str]) -> dict[str, RunColumn]:
    """The runs' columns of `kind` that are stored and decode whole; the others are not in it."""
    if not run_ids or not has_table(store, COLUMNS):
        return {}
    import numpy as np  # noqa: PLC0415

    marks = ", ".join("?" for _ in run_ids)
    sql = f"SELECT run_id, layout, busbw FROM {COLUMNS} WHERE kind = ? AND run_id IN ({marks})"
    stored = store.query(sql, (kind, *run_ids))
    layouts: dict[str, Layout | None] = {}
    out: dict[str, RunColumn] = {}
    for run_id, layout_id, blob in stored:
        if layout_id not in layouts:
            found = store.query(f"SELECT names, positions FROM {LAYOUTS} WHERE layout = ?", (layout_id,))
            layouts[layout_id] = _decoded(*found[0]) if found else None
        layout = layouts[layout_id]
        if layout is None or not isinstance(blob, bytes) or len(blob) != 8 * len(layout.positions):
            continue
        out[run_id] = RunColumn(layout, layout_id, np.frombuffer(blob, dtype=_VALUE))
    return out


def _decoded(names: Any, positions: Any) -> Layout | None:
    """The layout, or None where it does not decode into codes within its names."""
    import numpy as np  # noqa: PLC0415

    try:
        parsed = json.loads(names)
        collectives, subjects, sizes = parsed["collectives"], parsed["subjects"], parsed["sizes"]
    except (TypeError, ValueError, KeyError):
        return None
    if not isinstance(positions, bytes) or len(positions) % 12:
        return None
    codes = np.frombuffer(positions, dtype=_POSITION).reshape(-1, 3).astype(np.int64)
    bounds = np.array([len(collectives), len(subjects), len(sizes)])
    if len(codes) and ((codes < 0).any() or (codes >= bounds).any()):
        return None
    return Layout(collectives, subjects, sizes, codes)


class JudgedReader:
    """Runs' columns narrowed to the (collective, size) pairs wanted, as the four columns
    (collectives, subjects, sizes, busbw) the measurements query would return, minus its order:
    the rows of runs that share a layout and are healthy at every wanted position come as the
    same key tuples, so they compare equal at once."""

    def __init__(self, wanted: list[tuple[str, int]]) -> None:
        self.wanted = wanted
        self._keys: dict[str, tuple[Any, tuple, tuple, tuple]] = {}  # layout id -> mask, key columns

    def columns(self, column: RunColumn) -> list[tuple]:
        import numpy as np  # noqa: PLC0415

        if column.layout_id not in self._keys:
            layout = column.layout
            coll_at = {name: i for i, name in enumerate(layout.collectives)}
            size_at = {size: i for i, size in enumerate(layout.sizes)}
            wanted_codes = [
                coll_at[c] * len(layout.sizes) + size_at[size]
                for c, size in self.wanted
                if c in coll_at and size in size_at
            ]
            positions = layout.positions
            mask = np.isin(positions[:, 0] * len(layout.sizes) + positions[:, 2], wanted_codes)
            self._keys[column.layout_id] = (mask, *self._key_columns(layout, mask))
        mask, collectives, subjects, sizes = self._keys[column.layout_id]
        values = column.busbw[mask]
        present = ~np.isnan(values)
        if present.all():
            return [collectives, subjects, sizes, tuple(values.tolist())]
        keep = np.flatnonzero(present)
        return [
            tuple(collectives[i] for i in keep),
            tuple(subjects[i] for i in keep),
            tuple(sizes[i] for i in keep),
            tuple(values[keep].tolist()),
        ]

    @staticmethod
    def _key_columns(layout: Layout, mask: Any) -> tuple[tuple, tuple, tuple]:
        codes = layout.positions[mask]
        return (
            tuple(layout.collectives[i] for i in codes[:, 0].tolist()),
            tuple(layout.subjects[i] for i in codes[:, 1].tolist()),
            tuple(layout.sizes[i] for i in codes[:, 2].tolist()),
        )
