"""Rows, halves, devices, runs and files made without their dataclass `__init__`; integers, remembered.

A frozen dataclass's generated `__init__` sets each field with a call of `object.__setattr__`:
for the hundreds of thousands of rows of a nightly run that is the largest single cost of a
parse. These constructors fill the new record's `__dict__` directly, in field order (so the
record's dict shares its keys with every other record of its class), and give records equal to
the ones `__init__` makes. The check below keeps them in step with models.py.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, TypeVar

from collbench_py.parsers.models import Device, Half, ParsedFile, Row, Run

_new = object.__new__


class _Ints(dict[str, int]):
    """`INTS[token]` is `int(token)`, remembered: int() of a string costs three dict lookups.

    The sizes and counts of a sweep, the roots and the ranks repeat in every log of a run. At
    most _MAX_INTS tokens are kept; others are converted each time.
    """

    def __missing__(self, token: str) -> int:
        value = int(token)  # a ValueError goes to the caller, as int()'s would
        if len(self) < _MAX_INTS:
            self[token] = value
        return value


_MAX_INTS = 8192
INTS = _Ints()


def new_half(
    time_us: float | None,
    algbw: float | None,
    busbw: float | None,
    wrong: int | None,
    error: float | None = None,
) -> Half:
    record = _new(Half)
    values = record.__dict__
    values["time_us"] = time_us
    values["algbw"] = algbw
    values["busbw"] = busbw
    values["wrong"] = wrong
    values["error"] = error
    return record


def new_row(  # noqa: PLR0917 - positional, as the dataclass's __init__ takes them
    size: int,
    count: int | None,
    dtype: str | None,
    redop: str | None,
    root: int | None,
    oop: Half,
    ip: Half | None,
) -> Row:
    record = _new(Row)
    values = record.__dict__
    values["size"] = size
    values["count"] = count
    values["dtype"] = dtype
    values["redop"] = redop
    values["root"] = root
    values["oop"] = oop
    values["ip"] = ip
    return record


def new_device(  # noqa: PLR0917 - positional, as the dataclass's __init__ takes them
    rank: int,
    host: str | None,
    pid: int | None,
    group: int | None,
    device: int | None,
    bus_id: str | None,
    name: str | None,
) -> Device:
    record = _new(Device)
    values = record.__dict__
    values["rank"] = rank
    values["host"] = host
    values["pid"] = pid
    values["group"] = group
    values["device"] = device
    values["bus_id"] = bus_id
    values["name"] = name
    return record


_RECORD_FIELDS = {cls: tuple(f.name for f in fields(cls)) for cls in (Run, ParsedFile)}
_R = TypeVar("_R", Run, ParsedFile)


def new_record(cls: type[_R], **values: Any) -> _R:
    """A Run or a ParsedFile from every one of its fields, by name and in field order.

    Once per run and per file, the generated `__init__` (one call per field, default factories)
    cost as much as reading ten lines. Naming every field is checked: none is left unset.
    """
    if tuple(values) != _RECORD_FIELDS[cls]:
        raise TypeError(f"{cls.__name__} needs every field, in order: {', '.join(_RECORD_FIELDS[cls])}")
    record = _new(cls)
    record.__dict__.update(values)
    return record


_FIELDS = {
    Half: ("time_us", "algbw", "busbw", "wrong", "error"),
    Row: ("size", "count", "dtype", "redop", "root", "oop", "ip"),
    Device: ("rank", "host", "pid", "group", "device", "bus_id", "name"),
}
for _cls, _names in _FIELDS.items():
    if tuple(f.name for f in fields(_cls)) != _names:  # a field added to models.py: add it here too
        raise ImportError(f"collbench_py.parsers._nccl_records is out of step with models.{_cls.__name__}")
