"""The traps a new user falls into on the command line, each answered with one line and exit code 2
before anything runs: a project directory without bench.yml, a malformed `-e`, a history database
named with a typo."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from collbench_py.exitcodes import ExitCode
from tests.collbench_cli import REPO, collbench
from tests.rundir_factory import RunSpec, build_run_dir


def test_a_project_dir_without_bench_yml_is_refused_not_replaced_by_the_installed_checkout(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    results = tmp_path / "results"
    result = collbench(
        "run", "--project-dir", str(empty), "-i", "inventory/localhost.yml",
        "-e", f"collbench_results_dir={results}", timeout=60,
    )  # fmt: skip
    assert result.returncode == ExitCode.BAD_INPUT
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"collbench run: --project-dir {empty}: no bench.yml there")
    assert result.stdout == "" and not results.exists()  # nothing ran, nothing was written


def test_a_project_dir_from_the_environment_is_held_to_the_same_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from collbench_py.ansible_run import RunnerError, find_project_dir  # noqa: PLC0415

    monkeypatch.setenv("COLLBENCH_PROJECT_DIR", str(tmp_path))
    monkeypatch.chdir(REPO)  # the current directory holds bench.yml: it must not be taken instead
    with pytest.raises(RunnerError, match=f"COLLBENCH_PROJECT_DIR {tmp_path}: no bench.yml there"):
        find_project_dir(None)
    assert find_project_dir(str(REPO)) == REPO  # the option still wins over the variable
    monkeypatch.delenv("COLLBENCH_PROJECT_DIR")
    assert find_project_dir(None) == REPO


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("{bad", "YAML parsing failed"),
        ('a=1 b="x', "failed at splitting arguments"),
        ("collbench_iters", "expected key=value, a YAML/JSON mapping or @FILE"),
        ("[1, 2]", "expected key=value, a YAML/JSON mapping or @FILE"),
        ("@/nonexistent/vars.yml", "no such file"),
        ("./vars.yml", "a file is given as @./vars.yml"),
    ],
)
def test_a_malformed_extra_var_is_named_as_such_not_as_a_bad_inventory(value: str, reason: str) -> None:
    result = collbench("run", "-i", "inventory/localhost.yml", "-e", value, timeout=60)
    assert result.returncode == ExitCode.BAD_INPUT
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"collbench run: bad -e value {value!r}: {reason}"), line
    assert "inventory" not in line


def test_well_formed_extra_vars_pass_the_check(tmp_path: Path) -> None:
    from collbench_py.ansible_run import check_extra_vars  # noqa: PLC0415

    var_file = tmp_path / "vars.yml"
    var_file.write_text("collbench_iters: 2\n")
    check_extra_vars(["a=1 b=2", '{"collbench_phases": ["intra"]}', f"@{var_file}", ""])


# ---- the history database: a typo must not start an empty history ------------------------------------


@pytest.fixture
def a_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("COLLBENCH_DB", raising=False)
    results = tmp_path / "results"
    results.mkdir()
    return build_run_dir(results, RunSpec(hosts=["node1", "node2"]))


def report(run_dir: Path, *args: str, env: dict[str, str] | None = None):
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    return subprocess.run(
        [sys.executable, "-m", "collbench_py", "report", str(run_dir), *args],
        check=False, cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_a_named_history_database_that_does_not_exist_is_refused(a_run: Path, tmp_path: Path) -> None:
    typo = tmp_path / "histroy.sqlite"
    by_option = report(a_run, "--db", str(typo))
    assert by_option.returncode == ExitCode.BAD_INPUT
    assert by_option.stderr.splitlines() == [
        f"collbench report: --db {typo}: no history database there; check the path, or pass --new-db "
        "to start a new history there"
    ]
    by_variable = report(a_run, env={"COLLBENCH_DB": str(typo)})
    assert by_variable.returncode == ExitCode.BAD_INPUT
    assert by_variable.stderr.startswith(f"collbench report: $COLLBENCH_DB {typo}: no history database there")
    # Refused before anything was judged or written: no empty history, no report.
    assert not typo.exists() and not (a_run / "report").exists()


def test_a_new_history_database_is_made_on_request_and_said_once(a_run: Path, tmp_path: Path) -> None:
    fresh = tmp_path / "nightly.sqlite"
    first = report(a_run, "--db", str(fresh), "--new-db")
    assert first.returncode == ExitCode.OK, first.stderr
    assert fresh.is_file()
    assert f"history: new database {fresh}: this run is its first" in first.stdout.splitlines()[-1]
    again = report(a_run, "--db", str(fresh))  # now it exists: used as it is, nothing said
    assert again.returncode == ExitCode.OK and "new database" not in again.stdout


def test_the_default_history_database_is_made_with_a_line_saying_so(a_run: Path) -> None:
    default = a_run.parent / "history.sqlite"
    first = report(a_run)
    assert first.returncode == ExitCode.OK, first.stderr
    assert default.is_file() and f"history: new database {default}" in first.stdout
    assert "new database" not in report(a_run).stdout


def test_the_bundle_refuses_a_misspelt_history_database_as_the_report_does(
    a_run: Path, tmp_path: Path
) -> None:
    """The bundle carries a report made with the history: a typo must not start an empty one there."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    typo = tmp_path / "histroy.sqlite"
    out = tmp_path / "bundle.tar.gz"
    proc = subprocess.run(
        [sys.executable, "-m", "collbench_py", "bundle", str(a_run), "--db", str(typo),
         "--bundle-out", str(out)],
        check=False, cwd=REPO, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == ExitCode.BAD_INPUT, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"collbench bundle: --db {typo}: no history database there")
    assert not typo.exists() and not out.exists()
