"""nccl-tests `-J` JSON files, rccl-tests `-Z json` (JSON Lines or a list) and `-Z csv` output files.

They give the same records as the text parser: one `Run` with `Row`s. The `env` block of a `-J`
file is the whole process environment (tokens, passwords): it is never read into any record.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections import deque
from typing import Any

from collbench_py.parsers.models import (
    BUSBW_FACTORS,
    Device,
    Half,
    Kind,
    ParsedFile,
    ParseError,
    Row,
    Run,
    RunError,
    Status,
)

_FIRST_CHAR = re.compile(r"\S")
# What the nccl-tests writer always puts first: {"version":N,"start_time":...
_NCCL_HEAD = re.compile(r'\{\s*"version"\s*:\s*\d+\s*,\s*"start_time"\s*:')
_ARGS = re.compile(r'"args"\s*:\s*\[([^\]]*)\]')
# rccl-tests writes doubles with std::to_string: `nan`, `inf` are not JSON.
_BARE_NONFINITE = re.compile(r"(?<=[:\[,])\s*-?(?:nan|inf)\b", re.IGNORECASE)
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{},]')
_COPY_SUFFIX = re.compile(r"\.json\.(\d+)$")
_PROGRAM = re.compile(r"([a-z0-9_]+?)_perf(?:_mpi)?$")
_NCCL_NAMES = {
    "allreduce": "all_reduce",
    "allgather": "all_gather",
    "reducescatter": "reduce_scatter",
    "alltoall": "alltoall",
    "alltoallv": "alltoallv",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "sendrecv": "sendrecv",
    "gather": "gather",
    "scatter": "scatter",
    "hypercube": "hypercube",
}
# rccl-tests record keys, lower-cased, to ours
_RCCL_KEYS = {
    "name": "name",
    "collective": "name",
    "numcycle": "cycle",
    "size": "size",
    "type": "type",
    "redop": "redop",
    "inplace": "in_place",
    "time": "time",
    "algbw": "algbw",
    "busbw": "busbw",
    "#wrong": "wrong",
    "wrong": "wrong",
    "gpus": "gpus",
    "gpusperrank": "gpus_per_rank",
    "ranks": "ranks",
    "nodes": "nodes",
    "rankspernode": "ranks_per_node",
}


def sniff(text: str) -> Kind | None:
    first = _FIRST_CHAR.search(text, 0, 4096)
    if first is None:
        return None
    head = text[first.start() : first.start() + 4096]
    if head[0] in "{[":
        if '"busBw"' in head or '"algBw"' in head:
            return "rccl-tests"
        # `nccl_version` alone is not enough: a run directory's facts.json and collbench's own parse
        # output carry it too. Every -J file starts its object with `version` and `start_time`.
        if _NCCL_HEAD.match(head) or ('"nccl_version"' in head and '"start_time"' in head):
            return _tool_from_args(_args_in(head))
        return None
    header = head.split("\n", 1)[0].lower()
    if header.count(",") >= 4 and "busbw" in header and "algbw" in header and "size" in header:
        return "rccl-tests"
    return None


def parse(text: str, file: str) -> ParsedFile:
    kind = sniff(text)
    if kind is None:
        raise ParseError("not an nccl-tests JSON file nor an rccl-tests JSON/CSV output file")
    first = text[_FIRST_CHAR.search(text).start()]  # type: ignore[union-attr]
    if first in "{[" and ('"busBw"' in text[:4096] or '"algBw"' in text[:4096]):
        return _parse_rccl(text, file, "jsonl" if first == "{" else "json")
    if first not in "{[":
        return _parse_rccl(text, file, "csv")
    return _parse_nccl(text, file)


# ---- nccl-tests -J ---------------------------------------------------------------------------------


def _parse_nccl(text: str, file: str) -> ParsedFile:
    doc, cut_short = _load_json(text)
    if not isinstance(doc, dict):
        raise ParseError("nccl-tests JSON: the top level is not an object")
    warnings: list[str] = []
    if cut_short:
        warnings.append("JSON file is unterminated (the run stopped early): read what was written")
    copy = _COPY_SUFFIX.search(file)
    if copy:
        warnings.append(
            f"file name ends in .{copy.group(1)}: nccl-tests wrote here because the -J path already existed"
        )
    run = _nccl_run(doc, cut_short, warnings)
    return ParsedFile(file=file, kind=run.tool or "nccl-tests", runs=(run,), warnings=tuple(warnings))  # type: ignore[arg-type]


def _nccl_run(doc: dict[str, Any], cut_short: bool, warnings: list[str]) -> Run:
    args = [a for a in _as_list(doc.get("args")) if isinstance(a, str)]
    config = _as_dict(doc.get("config"))
    devices = tuple(_device(d) for d in _as_list(config.get("devices")) if isinstance(d, dict))
    rows = tuple(_nccl_row(r) for r in _as_list(doc.get("results")) if isinstance(r, dict) and "size" in r)
    # until v2.17.9 the writer spelled these keys `average_bus_bandwidith` / `bandwidith`
    avg = _as_dict(doc.get("average_bus_bandwidth", doc.get("average_bus_bandwidith")))
    oob = _as_dict(doc.get("out_of_bounds"))
    errors = tuple(
        RunError(kind="NCCL error", host=None, message=m.strip())
        for m in _as_list(doc.get("errors"))
        if isinstance(m, str) and m.strip()
    )
    per_process = (_int(config.get("nthreads")) or 1) * (_int(config.get("ngpus")) or 1)
    params: dict[str, Any] = {
        k: v for k, v in config.items() if k != "devices" and isinstance(v, (str, int, float))
    }
    params.update(
        {k: doc[k] for k in ("start_time", "end_time") if isinstance(doc.get(k), str)},
        json_version=doc.get("version"),
        args=args,
    )
    collective = _collective_from_program(args[0]) if args else None
    nranks = len(devices) * per_process if devices else None
    rows, dropped = checked_rows(rows, collective, nranks)
    warnings += dropped
    oob_count = _int(oob.get("count"))
    reasons = _failures(rows, oob_count, errors)
    if avg.get("okay") == "false":
        reasons.append("average bus bandwidth below the NCCL_TESTS_MIN_BW check")
    summary = bool(oob) and bool(avg)
    if not summary and not cut_short:
        warnings.append("no summary (out_of_bounds, average_bus_bandwidth): the run did not finish")
    status = _status(reasons, complete=summary and not cut_short and bool(rows) and not dropped)
    tool = _tool_from_args(args)
    return Run(
        collective=collective,
        nccl_version=_version_string(doc.get("nccl_version")),
        # each device entry is the first rank of one process (the writer parses one line per process)
        nranks=nranks,
        hosts=tuple(dict.fromkeys(d.host for d in devices if d.host)),
        rows=rows,
        avg_busbw=_num(avg.get("bandwidth", avg.get("bandwidith"))),
        oob=oob_count,
        status=status,
        errors=errors,
        tool=tool,
        devices=devices,
        params=params,
        warnings=tuple(warnings + reasons),
    )


def _nccl_row(r: dict[str, Any]) -> Row:
    return Row(
        size=_int(r.get("size")) or 0,
        count=_int(r.get("count")),
        dtype=r.get("type") if isinstance(r.get("type"), str) else None,
        redop=_redop(r.get("redop")),
        root=_int(r.get("root")),
        oop=_nccl_half(r.get("out_of_place")) or Half(),
        ip=_nccl_half(r.get("in_place")),
    )


def _nccl_half(h: Any) -> Half | None:
    if not isinstance(h, dict):
        return None
    return Half(
        time_us=_num(h.get("time", h.get("cpu_time"))),
        algbw=_num(h.get("alg_bw")),
        busbw=_num(h.get("bus_bw")),
        wrong=_int(h.get("nwrong")),
    )


def _device(d: dict[str, Any]) -> Device:
    return Device(
        rank=_int(d.get("rank")) or 0,
        host=d.get("hostname") or None,
        pid=_int(d.get("pid")),
        group=_int(d.get("group")),
        device=_int(d.get("device")),
        bus_id=d.get("device_hex") or None,
        name=d.get("device_info") or None,
    )


def _load_json(text: str) -> tuple[Any, bool]:
    """The document, and whether it had to be closed by hand (a run that died mid-write)."""
    try:
        return json.loads(text), False
    except json.JSONDecodeError:
        pass
    doc = _close_unterminated(text)
    if doc is None:
        raise ParseError("JSON output that cannot be read, even as a truncated file")
    return doc, True


def _close_unterminated(text: str) -> Any:
    """Cut at the last point where a value ended and close the open objects and lists."""
    stack: list[str] = []
    cuts: deque[tuple[int, str]] = deque(maxlen=64)
    for m in _TOKEN.finditer(text):
        tok = m.group()
        if tok[0] == '"':
            continue
        if tok in "{[":
            stack.append("}" if tok == "{" else "]")
            cuts.append((m.end(), "".join(reversed(stack))))
        elif tok in "}]":
            if not stack:
                break
            stack.pop()
            cuts.append((m.end(), "".join(reversed(stack))))
        else:
            cuts.append((m.start(), "".join(reversed(stack))))
    for end, closers in reversed(cuts):
        try:
            return json.loads(text[:end] + closers)
        except json.JSONDecodeError:
            continue
    return None


# ---- rccl-tests -Z json / csv ----------------------------------------------------------------------


def _parse_rccl(text: str, file: str, form: str) -> ParsedFile:
    records, cut_short = _rccl_records(text, form)
    groups: dict[tuple[Any, str | None], list[dict[str, Any]]] = {}
    for rec in records:
        groups.setdefault((rec.get("cycle"), rec.get("name")), []).append(rec)
    runs = tuple(_rccl_run(recs, form, cut_short) for recs in groups.values())
    if not runs:
        runs = (Run(status="incomplete", tool="rccl-tests", warnings=("no result records",)),)
    warnings = ("last line is cut short: dropped it",) if cut_short else ()
    return ParsedFile(file=file, kind="rccl-tests", runs=runs, warnings=warnings)


def _rccl_records(text: str, form: str) -> tuple[list[dict[str, Any]], bool]:
    raw: list[Any] = []
    cut_short = False
    if form == "csv":
        try:
            raw = list(csv.DictReader(io.StringIO(text)))
        except csv.Error as exc:  # e.g. a lone carriage return inside a field
            raise ParseError(f"not a readable rccl-tests CSV file: {exc}") from None
    elif form == "json":
        try:
            raw = _as_list(json.loads(_BARE_NONFINITE.sub("null", text)))
        except json.JSONDecodeError:
            raw, cut_short = _as_list(_close_unterminated(_BARE_NONFINITE.sub("null", text))), True
    else:
        lines = [line for line in text.splitlines() if line.strip()]
        try:  # one decoder call for the whole file; line by line only when a line is bad
            raw = json.loads("[" + ",".join(lines) + "]")
        except json.JSONDecodeError:
            for line in lines:
                try:
                    raw.append(json.loads(_BARE_NONFINITE.sub("null", line)))
                except json.JSONDecodeError:
                    cut_short = True
    records = []
    ours_of: dict[Any, str | None] = {}
    for item in raw:
        if not isinstance(item, dict):
            continue
        rec = {}
        for key, value in item.items():
            if key not in ours_of:
                ours_of[key] = _RCCL_KEYS.get(str(key).strip().lower())
            ours = ours_of[key]
            if ours:
                rec[ours] = value.strip() if isinstance(value, str) else value
        if "size" in rec:
            records.append(rec)
    return records, cut_short


def _rccl_run(recs: list[dict[str, Any]], form: str, cut_short: bool) -> Run:
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for rec in recs:
        key = (_int(rec.get("size")), rec.get("type"), rec.get("redop"))
        half = Half(
            time_us=_num(rec.get("time")),
            algbw=_num(rec.get("algbw")),
            busbw=_num(rec.get("busbw")),
            wrong=_int(rec.get("wrong")),
        )
        slot = rows.setdefault(key, {"rec": rec})
        slot["ip" if _int(rec.get("in_place")) == 1 else "oop"] = half
    built = tuple(
        Row(
            size=key[0] or 0,
            dtype=key[1] or None,
            redop=_redop(key[2]),
            oop=slot.get("oop") or Half(),
            ip=slot.get("ip"),
        )
        for key, slot in rows.items()
    )
    first = recs[0]
    gpus, ranks = _int(first.get("gpus_per_rank") or first.get("gpus")), _int(first.get("ranks"))
    collective = _collective_from_name(first.get("name"))
    nranks = (ranks or 1) * gpus if gpus else None
    built, warnings = checked_rows(built, collective, nranks)
    damaged = bool(warnings)
    halves = [r.ip is not None for r in built]
    if len(built) > 1 and halves[-1] is False and any(halves[:-1]):
        warnings.append("the last size has no in-place result while the others do: the file is cut short")
        cut_short = True
    reasons = _failures(built, None, ())
    return Run(
        collective=collective,
        nranks=nranks,
        rows=built,
        status=_status(reasons, complete=not cut_short and bool(built) and not damaged),
        tool="rccl-tests",
        params={"format": form, "cycle": first.get("cycle"), "nodes": _int(first.get("nodes"))},
        warnings=tuple(warnings + reasons),
    )


# ---- shared ----------------------------------------------------------------------------------------

# The writers print 2 to 6 decimals: agreement within this much plus this fraction.
_ABS_TOLERANCE = 0.011
_REL_TOLERANCE = 0.02


def _close(value: float, expected: float) -> bool:
    # An infinite expectation (a denormal time divides a size into inf) is near nothing: inf <= inf.
    return math.isfinite(expected) and abs(value - expected) <= _ABS_TOLERANCE + _REL_TOLERANCE * abs(
        expected
    )


def busbw_factor(collective: str | None, nranks: int | None) -> float | None:
    rule = BUSBW_FACTORS.get(collective or "")
    return rule(nranks) if rule and nranks else None


def checked_rows(
    rows: tuple[Row, ...], collective: str | None, nranks: int | None
) -> tuple[tuple[Row, ...], list[str]]:
    """The rows whose numbers agree with each other, and a warning naming what was dropped.

    A file's columns carry no units a parser could check, so a damaged or hand-edited file (two columns
    swapped, a value moved into the next key) would give plausible numbers: the tools compute algbw as
    size / time and busbw as algbw x the collective's factor, so a row where they disagree is dropped,
    never returned with wrong values. A size that is not a positive integer drops its row too."""
    factor = _run_factor(rows, busbw_factor(collective, nranks))
    kept = tuple(r for r in rows if r.size > 0 and all(_agrees(r.size, h, factor) for h in (r.oop, r.ip)))
    if len(kept) == len(rows):
        return rows, []
    return kept, [
        f"{len(rows) - len(kept)} result row(s) dropped: algbw or busbw does not follow from size and time "
        "(columns swapped or damaged)"
    ]


def _run_factor(rows: tuple[Row, ...], expected: float | None) -> float | None:
    """The busbw factor the rows follow: the collective's; when most rows disagree with it (the rank
    count was misread) the factor most rows share, so one wrong count never drops a whole run."""
    ratios = [
        h.busbw / h.algbw
        for r in rows
        for h in (r.oop, r.ip)
        if h is not None and h.algbw and h.busbw is not None and h.algbw >= 1
    ]
    if not ratios:
        return expected
    if expected is not None and sum(_close(ratio, expected) for ratio in ratios) * 2 >= len(ratios):
        return expected
    ratios.sort()
    return ratios[len(ratios) // 2]


def _agrees(size: int, half: Half | None, factor: float | None) -> bool:
    if half is None:
        return True
    values = (half.time_us, half.algbw, half.busbw, half.wrong)
    if any(v is not None and v < 0 for v in values) or (half.time_us is not None and half.time_us == 0):
        return False
    time, algbw = half.time_us, half.algbw
    if time is not None and algbw is not None and not _close(algbw, size / time / 1e3):
        return False
    return not (
        factor is not None
        and half.algbw is not None
        and half.busbw is not None
        and not _close(half.busbw, half.algbw * factor)
    )


def _failures(rows: tuple[Row, ...], oob: int | None, errors: tuple[RunError, ...]) -> list[str]:
    reasons = [f"error: {e.message}" for e in errors]
    if oob:
        reasons.append(f"{oob} out-of-bounds values")
    wrong = sum((r.oop.wrong or 0) + ((r.ip.wrong or 0) if r.ip else 0) for r in rows)
    if wrong:
        reasons.append(f"{wrong} wrong elements (#wrong)")
    return reasons


def _status(failures: list[str], complete: bool) -> Status:
    if failures:
        return "failed"
    return "ok" if complete else "incomplete"


def _tool_from_args(args: list[str]) -> Kind:
    return "rccl-tests" if any("rccl" in a.lower() for a in args[:1]) else "nccl-tests"


def _args_in(head: str) -> list[str]:
    m = _ARGS.search(head)
    return re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1)) if m else []


def _collective_from_program(program: str) -> str | None:
    m = _PROGRAM.search(program.rsplit("/", 1)[-1])
    return m.group(1) if m else None


def _collective_from_name(name: Any) -> str | None:
    if not isinstance(name, str) or not name:
        return None
    flat = re.sub(r"[^a-z0-9]", "", name.lower())
    return _NCCL_NAMES.get(flat) or re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _version_string(code: Any) -> str | None:
    code = _int(code)
    if not code:
        return None
    if code < 10000:  # NCCL before 2.9 encoded MAJOR*1000 + MINOR*100 + PATCH
        return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"
    return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"


def _redop(value: Any) -> str | None:
    if not isinstance(value, str) or value.strip().lower() in ("", "none"):
        return None
    return value.strip()


def _num(value: Any) -> float | None:
    """A finite number, or None (the writers print `nan`, `N/A`, or nothing)."""
    if type(value) is float:
        return value if math.isfinite(value) else None
    if type(value) is int:
        return float(value)
    if not isinstance(value, str):
        return None
    try:
        f = float(value)
    except ValueError:
        return None
    return f if math.isfinite(f) else None


def _int(value: Any) -> int | None:
    if type(value) is int:
        return value
    f = _num(value)
    return int(f) if f is not None else None


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
