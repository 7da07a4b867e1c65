"""The result table of an nccl-tests log: the column layout read from the header names, rows from lines.

Columns are found by their names in the `# size count type redop root time algbw busbw #wrong ...`
line, never by position, so every generation reads the same way: the pre-2.13 `error` column, the
`-I` per-iteration columns, the `-S` timestamp, tables without `redop`/`root`, and look-alikes that
print the in-place group first (mscclpp-test). Fields are split on whitespace: a value wider than
its column (algbw `1777718.25` on one rank, an 11-digit size) still reads right.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from collbench_py.parsers._nccl_records import INTS, new_half, new_row
from collbench_py.parsers.models import Half, Row

_new = object.__new__

# Element sizes of the type names nccl-tests and its forks print, for count-versus-size checks.
DTYPE_SIZES = {
    "int8": 1, "uint8": 1, "char": 1, "f8e4m3": 1, "f8e5m2": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
    "half": 2, "bfloat16": 2, "fp16": 2, "bf16": 2,
    "int32": 4, "uint32": 4, "int": 4, "float": 4,
    "int64": 8, "uint64": 8, "double": 8,
}  # fmt: skip

_NUMERIC_START = frozenset("-+.0123456789")
_TOKEN = re.compile(r"\S+")
_HALF_NAMES = {"time": "time", "cputime": "time", "algbw": "algbw", "busbw": "busbw",
               "#wrong": "wrong", "wrong": "wrong", "error": "error"}  # fmt: skip
_STANDARD_HALF = ("time", "algbw", "busbw", "wrong")
_ERROR_HALF = ("time", "algbw", "busbw", "error")  # before nccl-tests 2.13


@dataclass(frozen=True)
class Layout:
    """Where each value of a row is, from the column header line."""

    prefix: tuple[str, ...]  # names after size and count, before the first time column
    halves: tuple[tuple[str, tuple[str, ...]], ...]  # ("oop"|"ip", field names) in print order
    timestamp: bool = False  # `-S`: a date and a time after the last half
    header: str = ""  # the header line, for rows whose other half is blank (see _printed_group)
    standard: bool = False  # the current nccl-tests table: rows can take the fast path

    @property
    def half_len(self) -> int:
        return len(self.halves[0][1])


_STANDARD_PREFIX = ("type", "redop", "root")
_STANDARD_HALVES = (("oop", _STANDARD_HALF), ("ip", _STANDARD_HALF))
DEFAULT_LAYOUT = Layout(prefix=_STANDARD_PREFIX, halves=_STANDARD_HALVES, standard=True)


def group_order(line: str) -> tuple[str, ...]:
    """The order of the `out-of-place` / `in-place` group labels above the column names."""
    oop, ip = line.find("out-of-place"), line.find("in-place")
    if oop < 0:
        return ("ip",) if ip >= 0 else ()
    if ip < 0:
        return ("oop",)
    return ("ip", "oop") if ip < oop else ("oop", "ip")


@functools.lru_cache(maxsize=256)  # the same header line in every log of a run; a Layout is frozen
def layout_from_header(line: str, order: tuple[str, ...] = ()) -> Layout | None:
    """The layout named by a `size count type ...` header line (its `#` optional), or None."""
    names = line.split()
    if names and names[0].startswith("#"):
        names[0] = names[0][1:]
        if not names[0]:
            del names[0]
    if len(names) < 4 or names[0] != "size" or names[1] != "count":
        return None
    starts = [i for i, name in enumerate(names) if name in ("time", "cputime")]
    if not starts:
        return None
    prefix = tuple(names[2 : starts[0]])
    halves: list[list[str]] = []
    timestamp = False
    for name in names[starts[0] :]:
        if name in ("time", "cputime"):
            halves.append([])
        if name == "timestamp":
            timestamp = True
        else:
            halves[-1].append(_HALF_NAMES.get(name, "extra"))
    if len({len(h) for h in halves}) != 1:
        return None
    if len(halves) == 1:
        order = ("oop",)  # the only half a tool runs is reported as `oop` (docs/parse-json.md)
    elif len(order) != len(halves):
        order = ("oop", "ip") if len(halves) == 2 else ()
    if not order:
        return None
    placed = tuple(zip(order, (tuple(h) for h in halves), strict=True))
    return Layout(
        prefix=prefix,
        halves=placed,
        timestamp=timestamp,
        header=line,
        standard=prefix == _STANDARD_PREFIX and placed == _STANDARD_HALVES and not timestamp,
    )


def _wrong(token: str) -> int | None:
    if token == "N/A":
        return None
    try:
        return int(token)
    except ValueError:
        pass
    try:
        return int(float(token.rstrip("*")))  # `%g` prints large counts as `1.04858e+06`
    except OverflowError as error:  # `inf`: no count, a row that cannot be read, as `nan`'s
        raise ValueError(token) from error


def _half(values: list[str], names: tuple[str, ...]) -> Half:
    if names == _STANDARD_HALF:
        return new_half(float(values[0]), float(values[1]), float(values[2]), _wrong(values[3]))
    if names == _ERROR_HALF:
        error = values[3]
        return new_half(float(values[0]), float(values[1]), float(values[2]), None,
                        None if error == "N/A" else float(error))  # fmt: skip
    fields: dict[str, float | int | None] = {"time_us": None, "algbw": None, "busbw": None, "wrong": None}
    for token, name in zip(values, names, strict=True):
        if name == "time":
            fields["time_us"] = float(token)
        elif name in ("algbw", "busbw"):
            fields[name] = float(token)
        elif name == "wrong":
            fields["wrong"] = _wrong(token)
        elif name == "error":
            fields["error"] = None if token == "N/A" else float(token)
    return Half(**fields)  # type: ignore[arg-type]


# What parse_row returns for the first part of a row whose remaining values are on a later line.
FRAGMENT = "fragment"


def standard_row(tokens: list[str]) -> Row | None:
    """The common row, `size count type redop root` and two 4-value halves, read without loops."""
    size, count, dtype, redop, root, t1, a1, b1, w1, t2, a2, b2, w2 = tokens
    if dtype[0] in _NUMERIC_START or redop[0] in _NUMERIC_START:
        return None
    # Most of a parse is this function: the records are filled here as new_half and new_row
    # fill them, without the three calls.
    try:
        oop, ip, row = _new(Half), _new(Half), _new(Row)
        values = oop.__dict__
        values["time_us"], values["algbw"], values["busbw"] = float(t1), float(a1), float(b1)
        values["wrong"], values["error"] = 0 if w1 == "0" else _wrong(w1), None
        values = ip.__dict__
        values["time_us"], values["algbw"], values["busbw"] = float(t2), float(a2), float(b2)
        values["wrong"], values["error"] = 0 if w2 == "0" else _wrong(w2), None
        values = row.__dict__
        values["size"], values["count"], values["dtype"] = INTS[size], INTS[count], dtype
        values["redop"], values["root"] = None if redop == "none" else redop, INTS[root]
        values["oop"], values["ip"] = oop, ip
    except ValueError:
        return None
    return row


def _looks_like_timestamp(date: str, time: str) -> bool:
    return len(date) == 10 and date[4] == "-" and time.count(":") == 2


def parse_row(line: str, tokens: list[str], layout: Layout, allow_partial: bool = False) -> Row | str | None:
    """A Row from the whitespace-split `tokens` of `line`; FRAGMENT for a row's first part; else None.

    `allow_partial` turns a row that has only its first-printed half into a Row (a fragment
    whose continuation never came).
    """
    n = len(tokens)
    if n == 13 and layout.standard:
        row = standard_row(tokens)
        if row is not None:
            return row
    if n < 3:
        return None
    try:
        size = INTS[tokens[0]]
        count = INTS[tokens[1]]
    except ValueError:
        return None
    dtype = redop = None
    root = None
    i = 2
    for name in layout.prefix:
        if i >= n:
            return FRAGMENT
        token = tokens[i]
        numeric = token[0] in _NUMERIC_START
        if name == "type":
            if not numeric:
                dtype, i = token, i + 1
        elif name == "redop":
            # An empty redop (old all_gather, hypercube, mccl-tests) leaves the root next.
            if not numeric:
                redop, i = (None if token == "none" else token), i + 1
        elif name == "root":
            if numeric and "." not in token:
                try:
                    root, i = INTS[token], i + 1
                except ValueError:
                    return None
        else:
            i += 1
    rest = n - i
    if rest >= 2 and _looks_like_timestamp(tokens[-2], tokens[-1]):
        rest -= 2  # `-S`: the date and time printed after the last half
    halves = layout.halves
    width = len(halves[0][1])
    oop = ip = None
    try:
        if rest == width * len(halves):
            for place, names in halves:  # each half's values, in the order they are printed
                half = _half(tokens[i : i + width], names)
                i += width
                if place == "oop":
                    oop = half
                else:
                    ip = half
        elif rest == width and len(halves) == 2:
            k = _printed_group(line, i, layout)
            if k == 0 and not allow_partial:
                return FRAGMENT
            place, names = halves[k]
            half = _half(tokens[i : i + width], names)
            if place == "oop":
                oop = half
            else:
                ip = half
        elif rest < width * len(halves) and all(
            t[0] in _NUMERIC_START or t == "N/A" for t in tokens[i : i + rest]
        ):
            return FRAGMENT
        else:
            return None
    except (ValueError, IndexError):
        return None
    if oop is None:
        oop = Half()  # only the in-place group printed: out-of-place stays empty
    return new_row(size, count, dtype, redop, root, oop, ip)


def _printed_group(line: str, first_value: int, layout: Layout) -> int:
    """Which group a row's only half sits under, by where its time value ends (blank groups)."""
    columns = [m.end() for m in _TOKEN.finditer(layout.header) if m.group() in ("time", "cputime")]
    if len(columns) != len(layout.halves):
        return 0
    for k, match in enumerate(_TOKEN.finditer(line)):
        if k == first_value:
            end = match.end()
            return min(range(len(columns)), key=lambda h: abs(columns[h] - end))
    return 0


def is_continuation(tokens: list[str], layout: Layout) -> bool:
    """Whether a line holds only the values that complete a pending row fragment."""
    return 0 < len(tokens) <= layout.half_len * len(layout.halves) + 2 and all(
        t[0] in _NUMERIC_START or t == "N/A" for t in tokens
    )
