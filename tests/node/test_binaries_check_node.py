"""collbench_py/node/binaries_check.py, run as the tool roles run it: its text given to `python -c`, the
request as JSON in argv, one JSON object back. The binaries are real: a program linked against a
shared library of its own, built here with the C compiler, so ldd resolves it or says it cannot."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROGRAM = (REPO / "collbench_py" / "node" / "binaries_check.py").read_text()
OPTION = "--use_cuda="  # stands for an option compiled into a tool (perftest's GPUDirect)


def check(request: dict, *, rc: int = 0) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, json.dumps(request)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == rc and "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout) if rc == 0 else {"stderr": done.stderr}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tool/build/{a_perf, b_perf} linked against tool/lib/libstandin.so; a_perf prints its arguments."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("no C compiler (the set-up installs g++)")
    root = tmp_path_factory.mktemp("binaries")
    (root / "lib").mkdir()
    (root / "build").mkdir()
    (root / "standin.c").write_text("int standin(void) { return 7; }\n")
    (root / "main.c").write_text(
        '#include <stdio.h>\nint standin(void);\nstatic const char *option = "' + OPTION + '";\n'
        "int main(int argc, char **argv) {\n"
        '  for (int i = 1; i < argc; i++) printf("%s\\n", argv[i]);\n'
        "  return standin() == 7 && option[0] == '-' ? 0 : 1;\n}\n"
    )
    run = lambda *argv: subprocess.run(argv, check=True, cwd=root, capture_output=True)  # noqa: E731
    run(cc, "-shared", "-fPIC", "-o", "lib/libstandin.so", "standin.c")
    for name in ("a_perf", "b_perf"):
        run(cc, "-o", f"build/{name}", "main.c", "-Llib", "-lstandin")
    return root


def request(root: Path, **extra: object) -> dict:
    return {
        "dirs": [str(root), str(root / "build")],
        "binaries": ["a_perf", "b_perf"],
        "timeout": 30,
        **extra,
    }


def test_the_first_directory_holding_the_first_binary_is_used(built: Path) -> None:
    answer = check(request(built))
    assert answer == {"dir": str(built / "build"), "missing": [], "ldd": None, "ran": None, "contains": None}


def test_nothing_found_is_said_and_nothing_more_is_looked_at(tmp_path: Path) -> None:
    answer = check(request(tmp_path, ldd=True, run=["--help"]))
    assert answer == {
        "dir": None,
        "missing": ["a_perf", "b_perf"],
        "ldd": None,
        "ran": None,
        "contains": None,
    }


def test_a_binary_not_executable_is_missing_and_a_link_to_one_counts(built: Path, tmp_path: Path) -> None:
    tree = tmp_path / "tool"
    shutil.copytree(built / "build", tree)
    (tree / "b_perf").chmod(0o644)
    assert check(request(tree))["missing"] == ["b_perf"]
    (tree / "b_perf").unlink()
    (tree / "b_perf").symlink_to(built / "build" / "b_perf")
    assert check(request(tree))["missing"] == []
    (tree / "a_perf").chmod(0o644)  # the first one missing: no ldd, no run
    answer = check(request(tree, ld_library_path=str(built / "lib"), ldd=True, run=[]))
    assert answer["missing"] == ["a_perf"] and answer["ldd"] is None and answer["ran"] is None


def test_ldd_runs_under_the_library_path_given(built: Path) -> None:
    resolved = check(request(built, ld_library_path=str(built / "lib"), ldd=True))["ldd"]
    assert resolved["rc"] == 0
    assert f"libstandin.so => {built / 'lib' / 'libstandin.so'}" in resolved["stdout"]
    unresolved = check(request(built, ldd=True))["ldd"]
    assert [line.strip() for line in unresolved["stdout"].splitlines() if "not found" in line] == [
        "libstandin.so => not found"
    ]


def test_a_script_in_front_of_the_binary_is_no_dynamic_executable(tmp_path: Path) -> None:
    wrapper = tmp_path / "a_perf"
    wrapper.write_text('#!/bin/sh\nexec /opt/site/a_perf "$@"\n')
    wrapper.chmod(0o755)
    answer = check({"dirs": [str(tmp_path)], "binaries": ["a_perf"], "ldd": True})
    assert answer["ldd"]["rc"] != 0 and "not a dynamic executable" in answer["ldd"]["stderr"]


def test_the_binary_is_run_under_the_library_path_and_searched_for_an_option(built: Path) -> None:
    lib = str(built / "lib")
    answer = check(request(built, ld_library_path=lib, run=["--size", "x y"], contains=OPTION))
    assert answer["ran"] == {"rc": 0, "stdout": "--size\nx y\n", "stderr": ""}
    assert answer["contains"] is True
    assert check(request(built, contains="--use_rocm="))["contains"] is False
    # Without the library path the loader cannot start it: its complaint is the answer.
    ran = check(request(built, run=[]))["ran"]
    assert ran["rc"] == 127 and "libstandin.so" in ran["stderr"]


def test_a_binary_that_hangs_is_stopped_at_the_timeout(tmp_path: Path) -> None:
    hangs = tmp_path / "a_perf"
    hangs.write_text("#!/bin/sh\nexec sleep 30\n")
    hangs.chmod(0o755)
    answer = check({"dirs": [str(tmp_path)], "binaries": ["a_perf"], "run": [], "timeout": 0.5})
    assert answer["ran"] == {"rc": 124, "stdout": "", "stderr": "timed out after 0.5 s"}


@pytest.mark.parametrize("bad", ["", "[]", '{"dirs": []}', '{"binaries": ["a"]}', "{"])
def test_a_bad_request_is_one_line_and_exit_2(bad: str) -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM, bad], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("usage: binaries_check.py REQUEST_JSON (") and done.stderr.count("\n") == 1
