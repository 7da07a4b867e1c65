"""The traps a new user falls into on the command line, each answered with one line and exit code 2
before anything runs: a project directory without bench.yml, a malformed `-e`."""

from __future__ import annotations

from pathlib import Path

import pytest

from collbench_py.exitcodes import ExitCode
from tests.cli import REPO, collbench


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
    from collbench_py.runner import RunnerError, find_project_dir  # noqa: PLC0415

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
    from collbench_py.runner import check_extra_vars  # noqa: PLC0415

    var_file = tmp_path / "vars.yml"
    var_file.write_text("collbench_iters: 2\n")
    check_extra_vars(["a=1 b=2", '{"collbench_phases": ["intra"]}', f"@{var_file}", ""])
