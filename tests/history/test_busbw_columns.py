"""Each stored run's busbw columns (history/columns.py) hold exactly the rows the rolling baseline
may read from the measurements table, and go with those rows: a run reported again, a run pruned."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

from collbench_py import history
from collbench_py.history import HistoryOptions, Retention, open_store, prune
from collbench_py.history.columns import read_columns
from tests.history.test_history import HOSTS, judged, make_run
from tests.rundir_factory import RunSpec

BASELINE_READY = (
    "SELECT collective, subject, size, busbw FROM measurements "
    "WHERE run_id = ? AND kind = ? AND healthy = 1 AND busbw > 0"
)


def decoded(db: Path, run_id: str, kind: str) -> tuple[list[tuple], int]:
    """The column's (collective, subject, size, busbw) where busbw is a number, and its length."""
    with open_store(db) as store:
        column = read_columns(store, kind, [run_id])[run_id]
    layout = column.layout
    rows = [
        (layout.collectives[c], layout.subjects[s], layout.sizes[z], value)
        for (c, s, z), value in zip(layout.positions.tolist(), column.busbw.tolist(), strict=True)
        if not math.isnan(value)
    ]
    return rows, len(column.busbw)


def query(db: Path, sql: str, params: tuple = ()) -> list[tuple]:
    with sqlite3.connect(db) as connection:
        return connection.execute(sql, params).fetchall()


def unused_layouts(db: Path) -> int:
    return query(
        db, "SELECT COUNT(*) FROM busbw_layouts WHERE layout NOT IN (SELECT layout FROM busbw_columns)"
    )[0][0]


def test_each_run_s_columns_hold_exactly_the_rows_a_baseline_may_read(tmp_path: Path) -> None:
    """Night 2: node4 unreachable (its rows are not healthy); night 3: node3 at 85 % (a regression
    makes its rows unhealthy) and one pair at 60 % (a slow pair). Every run and kind has a column as
    long as its rows, whose numbers are exactly the healthy rows above 0; nights alike share a layout."""
    results = tmp_path / "results"
    specs = [
        RunSpec(hosts=HOSTS, pairs="all"),
        RunSpec(hosts=HOSTS, pairs="all", unreachable={"node4": "ssh: connect to host node4: timed out"}),
        RunSpec(hosts=HOSTS, pairs="all", host_scale={"node3": 0.85}, pair_scale={("node1", "node2"): 0.6}),
        RunSpec(hosts=HOSTS, pairs="all"),
    ]
    reports = [history.record(judged(make_run(results, i, spec))) for i, spec in enumerate(specs, start=1)]
    assert reports[2].hosts["node3"].verdict == "failed"
    db = results / "history.sqlite"
    left_out = 0
    for report in reports:
        run_id = report.run.run_id
        kinds = [
            k for (k,) in query(db, "SELECT DISTINCT kind FROM measurements WHERE run_id = ?", (run_id,))
        ]
        assert {"intra", "pair"} <= set(kinds)
        for kind in kinds:
            rows, length = decoded(db, run_id, kind)
            assert sorted(rows) == sorted(query(db, BASELINE_READY, (run_id, kind))), (run_id, kind)
            everything = query(
                db, "SELECT COUNT(*) FROM measurements WHERE run_id = ? AND kind = ?", (run_id, kind)
            )
            assert length == everything[0][0]
            left_out += length - len(rows)
        assert {k for (k,) in query(db, "SELECT kind FROM busbw_columns WHERE run_id = ?", (run_id,))} == set(
            kinds
        )
    unhealthy = query(db, "SELECT COUNT(*) FROM measurements WHERE healthy = 0 OR NOT busbw > 0")[0][0]
    assert left_out == unhealthy > 0
    # Nights 1 and 4 measured the same series in the same order: one layout for both, per kind.
    first, last = (reports[i].run.run_id for i in (0, 3))
    assert query(
        db, "SELECT kind, layout FROM busbw_columns WHERE run_id = ? ORDER BY kind", (first,)
    ) == query(db, "SELECT kind, layout FROM busbw_columns WHERE run_id = ? ORDER BY kind", (last,))
    assert unused_layouts(db) == 0


def test_a_run_reported_again_or_pruned_takes_its_columns_and_their_unused_layouts_with_it(
    tmp_path: Path,
) -> None:
    results = tmp_path / "results"
    for night in (1, 2):
        history.record(judged(make_run(results, night, RunSpec(hosts=HOSTS))))
    second = make_run(results, 3, RunSpec(hosts=HOSTS, host_scale={"node2": 0.97}, pairs="all"))
    assert history.record(judged(second)).hosts["node2"].verdict == "passed"
    db = results / "history.sqlite"
    run_id = judged(second).run.run_id
    before = query(db, "SELECT kind, layout, busbw FROM busbw_columns WHERE run_id = ?", (run_id,))
    # Reported again with a tighter threshold: node2's 3 % drop is now a regression, its rows unhealthy.
    again = history.record(judged(second), options=HistoryOptions(min_drop=0.02, fail_drop=0.02, z_fail=0.0))
    assert again.hosts["node2"].verdict == "failed"
    after = query(db, "SELECT kind, layout, busbw FROM busbw_columns WHERE run_id = ?", (run_id,))
    assert [row[:2] for row in after] == [row[:2] for row in before] and after != before
    assert sorted(decoded(db, run_id, "intra")[0]) == sorted(query(db, BASELINE_READY, (run_id, "intra")))
    assert unused_layouts(db) == 0
    # The same run id reported from a directory that holds one host fewer and no pairs: other
    # series, another layout; the pairs' layout it replaced, used by no other run, is gone.
    fewer = make_run(tmp_path / "elsewhere", 3, RunSpec(hosts=HOSTS[:3]))
    assert judged(fewer).run.run_id == run_id
    history.record(judged(fewer), db=str(db))
    assert query(db, "SELECT layout FROM busbw_columns WHERE run_id = ? AND kind = 'intra'", (run_id,)) != [
        row[1:2] for row in before if row[0] == "intra"
    ]
    assert sorted(decoded(db, run_id, "intra")[0]) == sorted(query(db, BASELINE_READY, (run_id, "intra")))
    assert unused_layouts(db) == 0
    # Another fleet on night 5 (another layout), then nights 1 to 3 pruned: their layout goes with them.
    history.record(judged(make_run(results, 5, RunSpec(hosts=HOSTS[:3]))))
    assert query(db, "SELECT COUNT(DISTINCT layout) FROM busbw_columns")[0][0] == 2
    with open_store(db) as store:
        pruned = prune(store, Retention(raw_nights=1))
    assert pruned.runs == 3
    assert query(db, "SELECT DISTINCT run_id FROM busbw_columns") == query(
        db, "SELECT DISTINCT run_id FROM measurements"
    )
    assert len(query(db, "SELECT DISTINCT run_id FROM busbw_columns")) == 1
    assert query(db, "SELECT COUNT(*) FROM busbw_layouts")[0][0] == 1
    assert unused_layouts(db) == 0
