"""`collbench compare` on links: a link that became bad, or recovered, is a `link` row of its own
(from the runs' pairs conclusion, as the history stores it), never a change of its ends."""

from __future__ import annotations

from pathlib import Path

import pytest

from collbench_py import history
from collbench_py.exitcodes import ExitCode
from collbench_py.history.query import snapshot_from_records
from collbench_py.history.records import records_of
from tests.history.test_compare import _commands, collbench  # noqa: F401 - the fixture registers the commands
from tests.history.test_history import HOSTS, judged, make_run
from tests.rundir_factory import RunSpec

LINK = ("node1", "node4")
FAILED_LINK_LOG = "inter/pairs/node1--node4/all_reduce.log"


def rows_of(out: str) -> list[list[str]]:
    """The table's rows, split on runs of two spaces or more (cells hold single spaces)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("kind"))
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip() or line.startswith("("):
            break
        cells = [c.strip() for c in line.split("  ") if c.strip()]
        rows.append(cells if line.startswith("WORSE") else ["", *cells])
    return rows


@pytest.fixture(scope="module")
def nights(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """Recorded nights: healthy; node1--node4 at half speed; healthy again; node1--node4's launch failed."""
    results = tmp_path_factory.mktemp("links") / "results"
    specs = [
        RunSpec(hosts=HOSTS, pairs="all"),
        RunSpec(hosts=HOSTS, pairs="all", pair_scale={LINK: 0.5}),
        RunSpec(hosts=HOSTS, pairs="all"),
        RunSpec(hosts=HOSTS, pairs="all", launch_status={FAILED_LINK_LOG: ("failed", 1)}),
    ]
    ids = [history.record(judged(make_run(results, i, s))).run.run_id for i, s in enumerate(specs, start=1)]
    return results, ids


def test_a_link_that_became_bad_is_its_own_worse_row(nights, capsys) -> None:
    results, ids = nights
    code, out, err = collbench(capsys, "compare", ids[0], ids[1], "--db", results / "history.sqlite")
    assert code == ExitCode.FAILED and err == ""
    rows = rows_of(out)
    worse = [r for r in rows if r[0] == "WORSE"]
    assert len(worse) == 1, out
    assert worse[0][1:4] == ["link", "node1--node4", "all_reduce"]
    assert worse[0][-2:] == ["-50.0%", "ok -> slow (bad link)"]
    assert not [r for r in rows if r[1] in ("host", "pair", "intra")], out  # its ends are not changes
    assert out.rstrip().endswith("1 worse")


def test_a_link_whose_launch_failed_reads_ok_to_failed(nights, capsys) -> None:
    results, ids = nights
    code, out, _ = collbench(capsys, "compare", ids[2], ids[3], "--db", results / "history.sqlite")
    assert code == ExitCode.FAILED
    worse = [r for r in rows_of(out) if r[0] == "WORSE"]
    assert [r[1:3] for r in worse] == [["link", "node1--node4"]], out
    assert worse[0][-1] == "ok -> failed (bad link)"


def test_a_link_that_recovered_is_its_own_row_and_not_worse(nights, capsys) -> None:
    results, ids = nights
    code, out, _ = collbench(capsys, "compare", results / ids[1], results / ids[2])
    assert code == ExitCode.OK
    rows = rows_of(out)
    assert [r[1:3] for r in rows] == [["link", "node1--node4"]], out
    assert rows[0][0] == "" and rows[0][-1] == "slow (bad link) -> ok"
    assert out.rstrip().endswith("nothing got worse")


def test_the_database_and_the_run_directory_give_the_same_links(nights) -> None:
    results, ids = nights
    report = judged(results / ids[1])
    assert [f.subject for f in report.links_failed] == ["node1--node4"]
    snapshot = snapshot_from_records(records_of(report), "dir")
    assert snapshot.bad_links == {("node1--node4", "all_reduce")}
    assert snapshot.pair_results[("node1--node4", "all_reduce")] == "slow"


def test_an_unresolved_pair_is_not_read_back_as_a_bad_link(tmp_path: Path) -> None:
    # Three hosts, node3 measured with node1 only: its one slow pair cannot be pinned on a link.
    spec = RunSpec(
        hosts=["node1", "node2", "node3"],
        pairs=[("node1", "node2"), ("node1", "node3")],
        launch_status={"inter/pairs/node1--node3/all_reduce.log": ("failed", 1)},
    )
    report = judged(make_run(tmp_path / "results", 1, spec))
    assert [f.subject for f in report.unresolved] == ["node1--node3"] and not report.links_failed
    assert snapshot_from_records(records_of(report), "dir").bad_links == frozenset()


def test_the_ends_of_a_link_that_changed_get_no_host_row(tmp_path: Path, capsys) -> None:
    # Pairs only: every host gets a host row (no intra-node rows to carry it), but not for the link.
    results = tmp_path / "results"
    ids = [
        make_run(results, night, RunSpec(hosts=HOSTS, intra={}, pairs="all", pair_scale=scale)).name
        for night, scale in ((1, {}), (2, {LINK: 0.5}))
    ]
    code, out, _ = collbench(capsys, "compare", results / ids[0], results / ids[1], "--all")
    assert code == ExitCode.FAILED
    rows = rows_of(out)
    assert ["WORSE", "link", "node1--node4"] in [r[:3] for r in rows], out
    hosts = {r[2] for r in rows if r[1] == "host"}
    assert hosts == {"node2", "node3"}, out
