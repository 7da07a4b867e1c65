"""results.json's `results`: every parsed row of every log, one JSON record a line.

At fleet scale (650,000 rows, 240 MB of JSON for 4,000 hosts) the records cost seconds of a core.
Made in the report's process after the parse, they held up everything after them; made by the parse
workers, they slowed the parse, both cores being busy then. So they are made beside the report's
verdicts and history, on the core those leave idle: each parse worker appends its logs' runs (each
run's record prefix and its packed rows, pickled) to a spool file as it parses them
(`spool_log_runs`, through rundir.load.load_run_dir_with), and a child process forked before the
parse (`RowsBeside`) turns them into the records, in log order, while the report judges the run.
results.json then copies its text after the head: the same bytes as `write_rows` writes.
Nothing here imports the report's modules: a parse worker loads this alone.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import shutil
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import IO, Any, NamedTuple

from collbench_py.child_processes import ReadyChild
from collbench_py.parsers.models import Half, Row, Run
from collbench_py.rundir.load import COMMON_MASK, ROW_FLOATS, ROW_INTS, LogData, PackedRows

_FIRST, _NEXT = "\n  ", ",\n  "


def number(value: float | None) -> float | None:
    """A float as results.json holds it: rounded to 6 places, None where not finite."""
    return None if value is None or not math.isfinite(value) else round(value, 6)


class Segment(NamedTuple):
    """Where one log's spooled runs lie in a parse worker's spool file."""

    path: str
    offset: int
    length: int


def log_records(log: LogData) -> Iterator[str]:
    """Each record of `log`'s rows, without the separator before it."""
    return chain.from_iterable(_records(prefix, run.rows) for prefix, run in _prefixed_runs(log))


def _prefixed_runs(log: LogData) -> Iterator[tuple[str, Run]]:
    """Each run of `log` with the start of its records: what the log and the run say of every row."""
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
        yield prefix, run


def _records(prefix: str, rows: Sequence[Row]) -> list[str]:
    whole = _whole_rows(prefix, rows)
    return whole if whole is not None else [prefix + row for row in _rows_one_at_a_time(rows)]


def write_rows(logs: Iterable[LogData], out: IO[str]) -> None:
    """The records of every log, each on its own line, as results.json holds them."""
    first = True
    for log in logs:
        for record in log_records(log):
            out.write((_FIRST if first else _NEXT) + record)
            first = False


def spool_log_runs(spool: str, log: LogData) -> Segment | None:
    """Append `log`'s runs with rows (each run's record prefix and its rows) to this process's file
    in the private directory `spool` (a parse worker's own: one writer each); where they lie, or
    None for a log without rows. Pickled: about a fifth of what making the records costs."""
    runs = [(prefix, run.rows) for prefix, run in _prefixed_runs(log) if len(run.rows)]
    if not runs:
        return None
    data = pickle.dumps(runs, protocol=pickle.HIGHEST_PROTOCOL)
    path = os.path.join(spool, f"runs.{os.getpid()}")
    with open(path, "ab") as out:
        offset = out.tell()
        out.write(data)
    return Segment(path, offset, len(data))


def records_of_spool(segments: Sequence[Segment | None], out: IO[bytes]) -> None:
    """The records of the spooled runs in log order, as `write_rows` writes them."""
    first = True
    with contextlib.ExitStack() as opened:
        files: dict[str, IO[bytes]] = {}
        for segment in segments:
            if segment is None:
                continue
            source = files.get(segment.path)
            if source is None:
                source = files[segment.path] = opened.enter_context(Path(segment.path).open("rb"))
            source.seek(segment.offset)
            data = source.read(segment.length)
            if len(data) != segment.length:
                raise OSError(f"{segment.path}: the spooled runs end early")
            # The spool is this report's own (a directory only its user can read), written by its workers.
            for prefix, rows in pickle.loads(data):
                text = _NEXT.join(_records(prefix, rows))
                out.write(((_FIRST if first else _NEXT) + text).encode("utf-8"))
                first = False


@dataclass
class RowsBeside(ReadyChild):
    """A child process that makes results.json's records from the spooled runs (`go`) while the
    report goes on; `copy_into` waits for them. Forked before the parse (child_processes.ReadyChild)."""

    @classmethod
    def ready(cls, spool: str) -> RowsBeside | None:
        """Forked now; None where fork is not available or no process is to spare (the report then
        writes the records itself, after its head)."""
        forked = cls._fork(_make_records, (spool,), "collbench-rows")
        return None if forked is None else cls(*forked)

    def go(self, segments: Sequence[Segment | None]) -> None:
        """The parse is done: the child makes the records of `segments`, in their order."""
        self._release(list(segments))

    def copy_into(self, out: IO[bytes]) -> bool:
        """Wait for the child and copy its records to `out`; False where it made none (it failed or
        died: the caller writes them from the parsed logs, the same bytes)."""
        self._release(None)
        _, made, _ = self._answer()
        if made is None:
            return False
        with open(made, "rb") as text:
            shutil.copyfileobj(text, out, 1 << 20)
        return True

    def stop(self) -> None:
        """No records wanted (the report failed, or has copied them): the child ends now, not
        once it has made them."""
        self._release(None)
        if self.process is not None:
            if self.receive is not None:  # its answer is not wanted
                self.process.terminate()
            self._answer()


def _make_records(segments: list[Segment | None] | None, spool: str) -> str | None:
    """In the child: the records of `segments` in a file of `spool`, its path; None where there
    were none to make or they could not be made."""
    if segments is None:
        return None
    made = os.path.join(spool, "records.json")
    try:
        with open(made, "wb") as out:
            records_of_spool(segments, out)
    except BaseException:  # whatever it is, the report writes the records itself instead
        return None
    return made


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
