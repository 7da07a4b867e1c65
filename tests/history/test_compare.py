"""`collbench compare`, `collbench history` and `collbench baseline` through the command line."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from collbench_py import cli, history
from collbench_py.exitcodes import ExitCode
from tests.history.test_history import HOSTS, counts, judged, make_run
from tests.rundir_factory import RunSpec, make_facts, set_logged_nccl

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _commands(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every history command registered (whether or not cli.COMMANDS lists them yet), no $COLLBENCH_DB."""
    wanted = (*cli.COMMANDS, "history", "compare", "baseline")
    monkeypatch.setattr(cli, "COMMANDS", tuple(dict.fromkeys(wanted)))
    monkeypatch.delenv("COLLBENCH_DB", raising=False)


@pytest.fixture(scope="module")
def nights(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """results/ with three reported nights: healthy, healthy, node3 at 85 %; and their run ids."""
    results = tmp_path_factory.mktemp("history") / "results"
    specs = [
        RunSpec(hosts=HOSTS, pairs="all"),
        RunSpec(hosts=HOSTS, pairs="all"),
        RunSpec(hosts=HOSTS, pairs="all", host_scale={"node3": 0.85}),
    ]
    ids = [history.record(judged(make_run(results, i, s))).run.run_id for i, s in enumerate(specs, start=1)]
    return results, ids


def collbench(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(err: str, command: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"collbench {command}: ")
    assert "Traceback" not in err
    return lines[0]


def test_compare_shows_the_slower_node_with_its_verdict_change(nights, capsys) -> None:
    results, ids = nights
    db = results / "history.sqlite"
    code, out, _ = collbench(capsys, "compare", ids[0], ids[2], "--db", db)
    assert code == ExitCode.FAILED
    worse = [line for line in out.splitlines() if line.startswith("WORSE")]
    assert len(worse) == 1
    assert worse[0].split()[1:4] == ["intra", "node3", "all_reduce"]
    # The intra row carries the host's intra-node checks; they explain its verdict, so no host row.
    assert "-15.0%" in worse[0] and worse[0].endswith("pass -> fail")
    assert out.rstrip().endswith("1 worse")


def test_a_slow_link_is_a_pair_change_not_an_intra_node_one(tmp_path: Path, capsys) -> None:
    results = tmp_path / "results"
    link = {("node1", "node4"): 0.5}
    ids = [
        make_run(results, night, RunSpec(hosts=HOSTS, pairs="all", pair_scale=scale)).name
        for night, scale in ((1, {}), (2, link))
    ]
    code, out, err = collbench(capsys, "compare", results / ids[0], results / ids[1])
    assert code == ExitCode.FAILED and err == ""
    rows = [line.split() for line in out.splitlines() if line.startswith("WORSE")]
    assert ["intra"] not in [row[1:2] for row in rows], out  # no intra-node row blamed for the link
    link = next(row for row in rows if row[1] == "link")  # the conclusion's bad link, its own row
    assert link[2] == "node1--node4" and "-50.0%" in link and " ".join(link[-5:]) == "ok -> slow (bad link)"
    # Where a host's verdict moves for the link, its row names the check that moved it.
    for row in (row for row in rows if row[1] == "host"):
        assert row[2] in ("node1", "node4") and row[-1] == "(pairs/all_reduce)", row


def test_runs_given_newest_first_are_compared_with_a_warning(nights, capsys) -> None:
    results, ids = nights
    code, _, err = collbench(capsys, "compare", ids[2], ids[0], "--db", results / "history.sqlite")
    assert code == ExitCode.OK  # as asked: B is the older run, so node3 got faster
    assert err.splitlines() == [
        f"collbench compare: warning: RUN_A {ids[2]} started 2026-11-03 21:51Z, after RUN_B {ids[0]} "
        "(2026-11-01 21:51Z): the changes below read from the newer run back to the older; give the "
        "earlier run first"
    ]
    _, _, in_order = collbench(capsys, "compare", ids[0], ids[2], "--db", results / "history.sqlite")
    assert in_order == ""


def test_runs_that_share_no_host_are_refused(tmp_path: Path, capsys) -> None:
    results = tmp_path / "results"
    a = make_run(results, 1, RunSpec(hosts=HOSTS))
    b = make_run(results, 2, RunSpec(hosts=["gpu1", "gpu2"]))
    code, out, err = collbench(capsys, "compare", a, b)
    assert code == ExitCode.BAD_INPUT and out == ""
    assert one_line_error(err, "compare") == (
        f"collbench compare: RUN_A ({a.name}: node1, node2, node3 and 1 more) and RUN_B ({b.name}: gpu1, "
        "gpu2) share no host: nothing to compare"
    )


def test_compare_reads_run_directories_without_a_database(nights, capsys, tmp_path: Path) -> None:
    results, ids = nights
    code, out, _ = collbench(
        capsys, "compare", results / ids[1], results / ids[2], "--db", tmp_path / "absent.sqlite"
    )
    assert code == ExitCode.FAILED
    assert f"from {results / ids[1]}" in out
    assert any(line.startswith("WORSE") and "node3" in line for line in out.splitlines())
    assert not (tmp_path / "absent.sqlite").exists()


def test_compare_of_two_healthy_nights_finds_nothing_worse(nights, capsys) -> None:
    results, ids = nights
    db = results / "history.sqlite"
    code, out, _ = collbench(capsys, "compare", ids[0][:8], results / ids[1], "--db", db)  # a unique prefix
    assert code == ExitCode.OK
    assert "WORSE" not in out
    assert "nothing got worse" in out
    assert "node1--node2" not in out
    code, out, _ = collbench(capsys, "compare", ids[0], ids[1], "--all", "--db", db)
    assert sum("node1--node2" in line for line in out.splitlines()) == 1  # --all lists unchanged links too


def test_compare_shows_facts_that_changed(tmp_path: Path, capsys) -> None:
    results = tmp_path / "results"
    a = make_run(results, 1, RunSpec(hosts=HOSTS))
    # The whole fleet moved to a newer NCCL: no host is odd, but the change is shown. The version
    # is the one the logs say they loaded.
    upgraded = {h: make_facts(h, nccl="2.27.3") for h in HOSTS}
    b = make_run(results, 2, RunSpec(hosts=HOSTS, facts=upgraded))
    set_logged_nccl(a, "2.26.2")
    set_logged_nccl(b, "2.27.3")
    code, out, _ = collbench(capsys, "compare", a, b)
    assert code == ExitCode.OK
    changed = [line for line in out.splitlines() if "nccl_version: 2.26.2 -> 2.27.3" in line]
    assert changed == [f"  {h} nccl_version: 2.26.2 -> 2.27.3" for h in HOSTS]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nosuchrun", "{id0}"], "no run 'nosuchrun' in"),
        (["2026110", "{id0}"], "is ambiguous"),
        (["./missing-dir", "{id0}"], "./missing-dir: no such run directory"),
        (["{id0}", "{id0}"], "are the same run"),
    ],
)
def test_compare_bad_runs_are_one_line_errors(nights, capsys, argv: list[str], message: str) -> None:
    results, ids = nights
    args = [a.format(id0=ids[0]) for a in argv]
    code, _, err = collbench(capsys, "compare", *args, "--db", results / "history.sqlite")
    assert code == ExitCode.BAD_INPUT
    assert message in one_line_error(err, "compare")


def test_history_prints_busbw_over_time_and_plots_it(nights, capsys, tmp_path: Path) -> None:
    results, ids = nights
    plot = tmp_path / "node3.png"
    code, out, _ = collbench(capsys, "history", "node3", "--db", results / "history.sqlite", "--plot", plot)
    assert code == ExitCode.OK
    lines = out.splitlines()
    assert lines[0].startswith("node3 all_reduce (intra-node) busbw at 16 GiB, 3 runs in ")
    rows = {line.split()[0]: line.split() for line in lines if line.startswith("2026")}
    assert list(rows) == ids
    assert rows[ids[0]][3] == "469.2" and rows[ids[2]][3] == "398.8"
    assert rows[ids[2]][4] == "-15.0%"
    assert "failed (not in baselines)" in " ".join(rows[ids[2]])
    assert plot.read_bytes()[:8] == PNG_MAGIC and plot.stat().st_size > 10_000


def test_history_of_a_link_at_a_chosen_size(nights, capsys) -> None:
    results, _ = nights
    db = results / "history.sqlite"
    code, out, _ = collbench(
        capsys, "history", "node4--node1", "--size", "1G", "--collective", "all_reduce", "--db", db
    )
    assert code == ExitCode.OK
    assert out.startswith("node1--node4 all_reduce (link) busbw at 1 GiB, 3 runs")
    assert sum(line.startswith("2026") for line in out.splitlines()) == 3


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["node9"], "no host 'node9' in"),
        (["node1--node9"], "no link 'node1--node9' in"),
        (["node3", "--collective", "all_gather"], "node3 has no all_gather measurements"),
        (["node3", "--size", "3G"], "node3 has no busbw at 3 GiB"),
        (["node3", "--plot", "node3.svg"], "the plot is a PNG file"),
    ],
)
def test_history_bad_input_is_one_line(nights, capsys, argv: list[str], message: str) -> None:
    results, _ = nights
    code, _, err = collbench(capsys, "history", *argv, "--db", results / "history.sqlite")
    assert code == ExitCode.BAD_INPUT
    assert message in one_line_error(err, "history")


def test_not_a_database_missing_database_and_other_urls(tmp_path: Path, capsys) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n" * 50)
    cases = [
        (text, "is not a usable history database"),
        (tmp_path / "absent.sqlite", "no history database at"),
        ("postgresql://db.example/collbench", "only sqlite:///PATH databases are built in"),
        (tmp_path, "is a directory, not a history database"),
    ]
    for db, message in cases:
        for argv in (["history", "node1"], ["compare", "a", "b"], ["baseline", "--show"]):
            code, _, err = collbench(capsys, *argv, "--db", db)
            assert code == ExitCode.BAD_INPUT, (argv, db)
            assert message in one_line_error(err, argv[0])
    assert not (tmp_path / "absent.sqlite").exists()
    assert text.read_text().startswith("not a database")


def test_baseline_freeze_show_and_use(tmp_path: Path, capsys) -> None:
    results = tmp_path / "results"
    db = results / "history.sqlite"
    ids = [history.record(judged(make_run(results, n, RunSpec(hosts=HOSTS)))).run.run_id for n in (1, 2)]
    code, out, _ = collbench(capsys, "baseline", "--show", "--db", db)
    assert code == ExitCode.OK and "no frozen baseline" in out
    code, out, _ = collbench(capsys, "baseline", "--last", "2", "--name", "accepted", "--db", db)
    assert code == ExitCode.OK
    assert "baseline 'accepted' frozen" in out and "4 hosts and links" in out
    code, out, _ = collbench(capsys, "baseline", "--show", "--db", db)
    assert "* accepted" in out
    code, out, _ = collbench(capsys, "baseline", "--show", "--name", "accepted", "--db", db)
    assert f"runs {ids[0]}, {ids[1]}" in out
    node2 = next(line.split() for line in out.splitlines() if line.startswith("intra  node2"))
    assert node2[3:5] == ["16", "GiB"] and node2[5] == "469.2" and node2[-1] == "2"

    slow = judged(make_run(results, 3, RunSpec(hosts=HOSTS, host_scale={"node2": 0.85})))
    report = history.record(slow)
    own = next(c for c in report.hosts["node2"].checks if c.name == "history/intra/all_reduce")
    assert own.status == "fail" and "baseline 'accepted' median (2 runs)" in own.reason

    code, _, _ = collbench(capsys, "baseline", "--drop", "--name", "accepted", "--db", db)
    assert code == ExitCode.OK
    code, out, _ = collbench(capsys, "baseline", "--show", "--db", db)
    assert "no frozen baseline" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--runs", "nosuchrun"], "no run 'nosuchrun' in"),
        (["--show", "--name", "nosuch"], "no frozen baseline named 'nosuch'"),
        (["--drop", "--name", "nosuch"], "no frozen baseline named 'nosuch'"),
        (["--last", "2", "--name", "rolling"], "'rolling' names the rolling baseline"),
    ],
)
def test_baseline_bad_input_is_one_line(nights, capsys, argv: list[str], message: str) -> None:
    results, _ = nights
    before = counts(results / "history.sqlite")
    code, _, err = collbench(capsys, "baseline", *argv, "--db", results / "history.sqlite")
    assert code == ExitCode.BAD_INPUT
    assert message in one_line_error(err, "baseline")
    assert counts(results / "history.sqlite") == before


def test_a_baseline_of_unhealthy_samples_only_is_refused(tmp_path: Path, capsys) -> None:
    results = tmp_path / "results"
    db = results / "history.sqlite"
    history.record(
        judged(make_run(results, 1, RunSpec(hosts=HOSTS, unreachable=dict.fromkeys(HOSTS, "ssh: timeout"))))
    )
    code, _, err = collbench(capsys, "baseline", "--last", "1", "--db", db)
    assert code == ExitCode.BAD_INPUT
    assert "hold no healthy measurements" in one_line_error(err, "baseline")
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT COUNT(*) FROM baselines").fetchone() == (0,)
