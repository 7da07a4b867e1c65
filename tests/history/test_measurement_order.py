"""The history's measurement rows (records._measurements): one per (kind, subject, collective,
size), in the order each was first measured; a subject measured again has its sizes replaced where
they stand and its new sizes added after everything before. The rows' order is part of the run's
digest, so a run reported again must give the same rows in the same order."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from collbench_py.history import records
from collbench_py.parsers import parse_text
from collbench_py.rundir.load import Launch, LogData, PackedRows

DATA = Path(__file__).parents[1] / "data"
ONE_GPU = DATA / "gpu-captures" / "nccl-tests-2.19.6-h100-1gpu-all_gather.txt"  # 8 B to 128 MiB... 28 sizes
SIXTEEN_RANKS = DATA / "corpus" / "nccl-tests" / "hgx-h100-2node-16rank-mpi-warnings-interleaved-16GiB.txt"


def _log(kind: str, hosts: tuple[str, ...], path: Path, scale: float = 1.0) -> LogData:
    run = parse_text(path.read_text(), path.name).runs[0]
    rows = PackedRows.of(run.rows)
    if scale != 1.0:  # the same sizes, another busbw: a later measurement of the subject
        halves = [
            (
                r,
                replace(
                    r.oop, time_us=r.oop.time_us / scale, algbw=r.oop.algbw * scale, busbw=r.oop.busbw * scale
                ),
            )
            for r in run.rows
        ]
        rows = PackedRows.of([replace(r, oop=oop) for r, oop in halves])
    launch = Launch(kind, hosts, "all_reduce", f"{kind}/{'-'.join(hosts)}.log")
    return LogData(launch, True, runs=(replace(run, rows=rows),))


def _by_dict(logs: list[LogData]) -> list[tuple]:
    """The rule written plainly: a dict keyed by (kind, subject, collective, size)."""
    out: dict[tuple, tuple] = {}
    for log in logs:
        launch = log.launch
        subject = launch.hosts[0] if launch.kind == "intra" else "--".join(sorted(launch.hosts))
        for size, *numbers in log.run.rows.size_summary():
            key = (launch.kind, subject, launch.collective, size)
            out[key] = (*key, *numbers)
    return list(out.values())


def _measured(logs: list[LogData]) -> list[tuple]:
    records.forget_measurements()
    return records._measurements(SimpleNamespace(run=SimpleNamespace(logs=tuple(logs))))


def test_a_subject_measured_again_keeps_its_place_and_adds_its_new_sizes_last() -> None:
    logs = [
        _log("pair", ("b", "a"), ONE_GPU),  # a--b: the small sizes first
        _log("intra", ("a",), SIXTEEN_RANKS),
        _log("pair", ("a", "b"), SIXTEEN_RANKS, 0.5),  # a--b again: shared sizes replaced, new ones last
        _log("pair", ("a", "b"), ONE_GPU, 0.25),  # and again
    ]
    small = {row.size for row in logs[0].run.rows}
    large = {row.size for row in logs[1].run.rows}
    assert small & large and large - small  # some sizes shared, some new
    rows = _measured(logs)
    assert rows == _by_dict(logs)
    pair = [row for row in rows if row[1] == "a--b"]
    assert [row[3] for row in pair[: len(small)]] == sorted(small)  # where a--b was first measured
    assert {row[3] for row in pair[len(small) :]} == large - small
    at = {row[3]: row for row in pair}
    last = {numbers[0]: numbers for numbers in logs[3].run.rows.size_summary()}
    third = {numbers[0]: numbers for numbers in logs[2].run.rows.size_summary()}
    first = {numbers[0]: numbers for numbers in logs[0].run.rows.size_summary()}
    for size in small & large:  # the last measurement of a size wins: the fourth log's
        assert last[size] != first[size]
        assert at[size] == ("pair", "a--b", "all_reduce", *last[size])
    for size in large - small:  # measured by the third log alone
        assert at[size] == ("pair", "a--b", "all_reduce", *third[size])
    assert len(rows) == len({(r[0], r[1], r[2], r[3]) for r in rows})


def test_each_subject_once_is_each_log_in_order() -> None:
    logs = [_log("intra", (h,), SIXTEEN_RANKS) for h in ("c", "a", "b")]
    rows = _measured(logs)
    assert rows == _by_dict(logs)
    assert [row[1] for row in rows[:: len(rows) // 3]] == ["c", "a", "b"]
