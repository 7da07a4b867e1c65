"""Rails in the history: each host rail's lowest Gb/s per run, `collbench history node3:rail2`.

Two runs from tests/rail_factory.py (real nccl-tests pair logs, a real ib_write_bw figure): a
healthy night, then a night where node3's NIC of rail 2 runs at half speed."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from collbench_py import history
from collbench_py.rundir.load import load_run_dir
from collbench_py.verdicts import judge
from tests.history.test_compare import collbench, one_line_error
from tests.rail_factory import bad_nic_run, healthy_gbits, healthy_run


@pytest.fixture(autouse=True)
def _no_database_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLLBENCH_DB", raising=False)


@pytest.fixture(scope="module")
def two_nights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rails")
    results = root / "results"
    results.mkdir()
    for night, build in ((1, healthy_run), (2, bad_nic_run)):
        made = build(root / f"build-{night}")
        manifest = json.loads((made / "manifest.json").read_text())
        run_id = f"202611{night:02d}T215100Z-{night:06x}"
        manifest.update(run_id=run_id, started_at=f"2026-11-{night:02d}T21:51:00Z")
        (made / "manifest.json").write_text(json.dumps(manifest))
        shutil.move(made, results / run_id)
        history.record(judge(load_run_dir(results / run_id)))
    return results / "history.sqlite"


def test_history_of_a_host_rail(two_nights: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = collbench(capsys, "history", "node3:rail2", "--db", two_nights)
    assert (code, err) == (0, "")
    assert f"node3 rail rail2 gbits (Gb/s), 2 runs in {two_nights}" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("202611")]
    assert [r[0] for r in rows] == ["20261101T215100Z-000001", "20261102T215100Z-000002"]
    assert float(rows[0][3]) == pytest.approx(healthy_gbits(), rel=0.01)
    assert float(rows[1][3]) == pytest.approx(healthy_gbits() * 0.45, rel=0.01)  # the lowest of two
    # The NIC the run itself found bad never becomes its own baseline.
    assert "(not in baselines)" in " ".join(rows[1])
    _, other, _ = collbench(capsys, "history", "node3:rail1", "--db", two_nights)
    other_rows = [line.split() for line in other.splitlines() if line.startswith("202611")]
    assert len(other_rows) == 2 and "(not in baselines)" not in " ".join(other_rows[1])


def test_rail_rows_healthy_flags(two_nights: Path) -> None:
    with sqlite3.connect(two_nights) as db:
        rows = dict(
            db.execute(
                "SELECT run_id || ' ' || host || ' ' || component, healthy FROM component_measurements "
                "WHERE kind = 'rail'"
            ).fetchall()
        )
    assert rows["20261102T215100Z-000002 node3 rail2"] == 0
    assert rows["20261101T215100Z-000001 node3 rail2"] == 1
    # A partner's lowest value on that rail was measured against the bad NIC: not a baseline either;
    # a host rail no finding touches is.
    assert rows["20261102T215100Z-000002 node1 rail2"] == 0
    assert rows["20261102T215100Z-000002 node2 rail2"] == 1
    assert rows["20261102T215100Z-000002 node3 rail1"] == 1


def test_an_unknown_rail_is_one_clear_message(two_nights: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = collbench(capsys, "history", "node3:rail9", "--db", two_nights)
    assert code == 2
    assert "node3 has no component 'rail9'" in one_line_error(err, "history")
