"""results.json's `results`: every parsed row of every log, one JSON record a line.

The report writes them after its head; at fleet scale (650,000 rows for 4,000 hosts) that took a
core for seconds after the parse, so the report has each parse worker write its logs' records to a
spool file as it parses them (`spool_log_rows`, through rundir.load.load_run_dir_with) and copies
them into results.json in log order (`copy_rows`): the same bytes as `write_rows` writes.
Nothing here imports the report's modules: a parse worker loads this alone.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from pathlib import Path
from typing import IO, Any, NamedTuple

from collbench_py.parsers.models import Half, Row
from collbench_py.rundir.load import COMMON_MASK, ROW_FLOATS, ROW_INTS, LogData, PackedRows

_FIRST, _NEXT = "\n  ", ",\n  "


def number(value: float | None) -> float | None:
    """A float as results.json holds it: rounded to 6 places, None where not finite."""
    return None if value is None or not math.isfinite(value) else round(value, 6)


class Segment(NamedTuple):
    """Where one log's records lie in a spool file: each record there starts with ",\n  "."""

    path: str
    offset: int
    length: int


def log_records(log: LogData) -> Iterator[str]:
    """Each record of `log`'s rows, without the separator before it."""
    return chain.from_iterable(_records_by_run(log))


def _records_by_run(log: LogData) -> Iterator[list[str]]:
    launch = log.launch
    for index, run in enumerate(log.runs):
        prefix = _COMPACT.encode(
            {
                "log": launch.log,
                "launch": launch.kind,
                "hosts": list(launch.hosts),
                "host": launch.hosts[0] if launch.kind == "intra" and launch.hosts else None,
                "collective": launch.collective or run.collective,
                "run": index,
                "nranks": run.nranks,
            }
        )[:-1]
        whole = _whole_rows(prefix, run.rows)
        yield whole if whole is not None else [prefix + row for row in _rows_one_at_a_time(run.rows)]


def write_rows(logs: Iterable[LogData], out: IO[str]) -> None:
    """The records of every log, each on its own line, as results.json holds them."""
    first = True
    for log in logs:
        for record in log_records(log):
            out.write((_FIRST if first else _NEXT) + record)
            first = False


def spool_log_rows(spool: str, log: LogData) -> Segment | None:
    """Append `log`'s records to this process's file in the directory `spool` (a parse worker's
    own: one writer each); where they lie, or None for a log without rows."""
    data = "".join(_NEXT + _NEXT.join(records) for records in _records_by_run(log) if records).encode("utf-8")
    if not data:
        return None
    path = os.path.join(spool, f"rows.{os.getpid()}")
    with open(path, "ab") as out:
        offset = out.tell()
        out.write(data)
    return Segment(path, offset, len(data))


def copy_rows(segments: Sequence[Segment | None], out: IO[bytes]) -> None:
    """The spooled records in log order, as `write_rows` writes them (the first without its comma)."""
    first = True
    with contextlib.ExitStack() as opened:
        files: dict[str, IO[bytes]] = {}
        for segment in segments:
            if segment is None:
                continue
            source = files.get(segment.path)
            if source is None:
                source = files[segment.path] = opened.enter_context(Path(segment.path).open("rb"))
            skip = 1 if first else 0
            source.seek(segment.offset + skip)
            data = source.read(segment.length - skip)
            if len(data) != segment.length - skip:
                raise OSError(f"{segment.path}: the spooled results end early")
            out.write(data)
            first = False


_COMPACT = json.JSONEncoder(separators=(",", ":"))
_TEXTS: dict[str | None, str] = {}


def _text_json(value: str | None) -> str:
    if value not in _TEXTS:
        if len(_TEXTS) > 1024:  # dtypes and ops repeat; anything else is not kept
            return _COMPACT.encode(value)
        _TEXTS[value] = _COMPACT.encode(value)
    return _TEXTS[value]


def _value_json(value: float | int | None) -> str:
    """A number as json.dumps writes `number(value)` (or an int as it is); null for None and
    for what is not finite."""
    if value is None:
        return "null"
    if type(value) is int:
        return str(value)
    value = number(value)
    return "null" if value is None else repr(float(value))


def _half_json(half: Half | None) -> str:
    if half is None:
        return "null"
    return (
        f'{{"time_us":{_value_json(half.time_us)},"algbw":{_value_json(half.algbw)},'
        f'"busbw":{_value_json(half.busbw)},"wrong":{_value_json(half.wrong)}}}'
    )


def rows_json(rows: Sequence[Row]) -> Iterator[str]:
    """`_row_json` of each row: a packed run a column at a time where it can be (`_whole_rows`),
    else one row at a time."""
    whole = _whole_rows("", rows)
    return iter(whole) if whole is not None else _rows_one_at_a_time(rows)


def _rows_one_at_a_time(rows: Sequence[Row]) -> Iterator[str]:
    """`_row_json` of each row; a packed row with every value it writes (the common case) is written
    from the arrays, without making its Row: a 4,000-host run has 650,000 of them."""
    if not isinstance(rows, PackedRows):
        yield from map(_row_json, rows)
        return
    ints, floats, texts = rows.columns()
    for i in range(len(rows)):
        size, count, root, oop_wrong, ip_wrong, mask = ints[i * ROW_INTS : (i + 1) * ROW_INTS]
        if mask & ~_FAST_MASKS:  # a value other than an error column or a #wrong is N/A
            yield _row_json(rows[i])
            continue
        t1, a1, b1, _, t2, a2, b2, _ = floats[i * ROW_FLOATS : (i + 1) * ROW_FLOATS]
        oop_wrong = "null" if mask & _OOP_WRONG_NONE else oop_wrong
        ip_wrong = "null" if mask & _IP_WRONG_NONE else ip_wrong
        yield (
            f',"size":{size},"count":{count},"dtype":{_text_json(texts[2 * i])},'
            f'"redop":{_text_json(texts[2 * i + 1])},"root":{root},'
            f'"oop":{{"time_us":{_float_json(t1)},"algbw":{_float_json(a1)},"busbw":{_float_json(b1)},'
            f'"wrong":{oop_wrong}}},"ip":{{"time_us":{_float_json(t2)},"algbw":{_float_json(a2)},'
            f'"busbw":{_float_json(b2)},"wrong":{ip_wrong}}}}}'
        )


# The mask bits rows_json writes from the arrays: the error columns (not written) and #wrong N/A.
_OOP_WRONG_NONE, _IP_WRONG_NONE = 1 << 7, 1 << 12
_FAST_MASKS = COMMON_MASK | _OOP_WRONG_NONE | _IP_WRONG_NONE


# A row record after its prefix, every value given as its JSON text (rows_json's fast case).
_ROW_TEMPLATE = (
    ',"size":%s,"count":%s,"dtype":%s,"redop":%s,"root":%s,'
    '"oop":{"time_us":%s,"algbw":%s,"busbw":%s,"wrong":%s},'
    '"ip":{"time_us":%s,"algbw":%s,"busbw":%s,"wrong":%s}}'
)
_FLOAT_COLUMNS = (0, 1, 2, 4, 5, 6)  # time_us, algbw, busbw of each half (the errors are not written)
# Where a finite float's repr has at most 6 decimals and no exponent, round(value, 6) is the same
# float (below 2**33 the float is the decimal it prints to within half a unit in its last place,
# < 0.5e-6; above, its exact value's nearest 6-decimal neighbour lies within half a unit), so
# _float_json is its repr. Anything else (more decimals, 1.5e-05, nan, inf) is left to _float_json.
# The reprs are checked together: each digit made a "d", then searched.
_DIGITS_AS_D = bytes.maketrans(b"0123456789", b"dddddddddd")


def _printed(column: list[float]) -> list[str] | None:
    """Each float's _float_json text, or None where one is not its plain repr."""
    texts = list(map(float.__repr__, column))
    shape = ",".join(texts).encode().translate(_DIGITS_AS_D)
    if b".ddddddd" in shape or b"e" in shape or b"n" in shape:
        return None
    return texts


def _whole_rows(prefix: str, rows: Sequence[Row]) -> list[str] | None:
    """Every record of a packed run, `prefix` and each row's `rows_json` text, made a column at a
    time (a 4,000-host run has 650,000 rows: written one value at a time, they cost the parse
    workers seconds); None where a row or a value is not the common case."""
    if not isinstance(rows, PackedRows):
        return None
    ints, floats, texts = rows.columns()
    count = len(texts) // 2
    if not count:
        return []
    masks = ints[5::ROW_INTS]
    distinct = set(masks)
    if any(mask & ~_FAST_MASKS for mask in distinct):
        return None
    columns = []
    for k in _FLOAT_COLUMNS:
        printed = _printed(floats[k::ROW_FLOATS])
        if printed is None:
            return None
        columns.append(printed)
    wrong: list[list[Any]] = []
    for at, none_bit in ((3, _OOP_WRONG_NONE), (4, _IP_WRONG_NONE)):
        values: list[Any] = ints[at::ROW_INTS]
        if len(distinct) == 1:
            wrong.append(["null"] * count if masks[0] & none_bit else values)
        else:
            wrong.append(
                ["null" if mask & none_bit else value for mask, value in zip(masks, values, strict=True)]
            )
    time1, algbw1, busbw1, time2, algbw2, busbw2 = columns
    template = prefix.replace("%", "%%") + _ROW_TEMPLATE
    return [
        template % values
        for values in zip(
            ints[0::ROW_INTS],
            ints[1::ROW_INTS],
            map(_text_json, texts[0::2]),
            map(_text_json, texts[1::2]),
            ints[2::ROW_INTS],
            time1,
            algbw1,
            busbw1,
            wrong[0],
            time2,
            algbw2,
            busbw2,
            wrong[1],
            strict=True,
        )
    ]


def _float_json(value: float) -> str:
    """`_value_json` of a float."""
    return repr(round(value, 6)) if math.isfinite(value) else "null"


def _row_json(row: Row) -> str:
    """`,"size":...,"ip":{...}}`: the rest of a result record after its prefix."""
    return (
        f',"size":{_value_json(row.size)},"count":{_value_json(row.count)},"dtype":{_text_json(row.dtype)},'
        f'"redop":{_text_json(row.redop)},"root":{_value_json(row.root)},'
        f'"oop":{_half_json(row.oop)},"ip":{_half_json(row.ip)}}}'
    )
