"""`collbench report` hands the run's node checks to the history: each component's measurements are
stored night by night, a GPU pair that drops is found against its own past, and
`collbench history HOST:gpuI--gpuJ` reads them back (run directories from real captures)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from collbench_py.cli import main
from tests.nodecheck_factory import NodeSpec, add_node_checks, degrade_pair
from tests.rundir_factory import RunSpec
from tests.test_frames import night

HOSTS = ["node1", "node2"]


@pytest.fixture(autouse=True)
def _no_database_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLLBENCH_DB", raising=False)


def _report(run_dir: Path, db: Path) -> dict:
    new = [] if db.exists() else ["--new-db"]
    with contextlib.redirect_stdout(io.StringIO()):
        main(["report", str(run_dir), "--db", str(db), *new])
    return json.loads((run_dir / "report" / "results.json").read_text())


def test_report_stores_components_and_finds_a_pair_that_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "history.sqlite"
    results = tmp_path / "results"
    for number in (1, 2, 3):
        run = night(results, number, RunSpec(hosts=HOSTS))
        # Night 3: node2's GPU3--GPU5 cells at 90 % of the other nights: above the profile's line
        # and within the fleet of two, so only its own history can tell.
        add_node_checks(run, {"node2": NodeSpec(cells=degrade_pair("3", "5", 0.9))} if number == 3 else {})
        doc = _report(run, db)
    names = {c["name"]: c for h in doc["hosts"] if h["host"] == "node2" for c in h["checks"]}
    dropped = [n for n in names if n.startswith("history/component/") and "gpu3--gpu5" in n]
    assert dropped, sorted(names)
    assert all(names[n]["status"] in {"warn", "fail"} for n in dropped)
    assert not [
        c["name"]
        for h in doc["hosts"]
        if h["host"] == "node1"
        for c in h["checks"]
        if c["name"].startswith("history/component/")
    ]

    capsys.readouterr()
    code = main(["history", "node2:gpu3--gpu5", "--db", str(db), "--metric", "d2d_read_ce"])
    out = capsys.readouterr().out
    assert code == 0
    rows = [line.split() for line in out.splitlines() if line.startswith("202611")]
    values = [float(row[3]) for row in rows]
    assert len(values) == 3 and values[0] == values[1], out
    assert values[2] == pytest.approx(values[0] * 0.9, abs=0.1)
    assert "fail" in rows[2] and "fail" not in rows[1], out
