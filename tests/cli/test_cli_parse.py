"""`collbench parse` end to end: the real command on real corpus files, and on bad input.

The command runs both in a fresh interpreter (`python -m collbench_py`, as users and Ansible
call it) and in-process through `main([...])`.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from collbench_py import __version__
from collbench_py.cli import COMMANDS, main
from collbench_py.exitcodes import ExitCode
from collbench_py.parsers import models, parse_file
from collbench_py.parsers.formats import CSV_FIELDS

ROOT = Path(__file__).parents[2]
CORPUS = sorted((ROOT / "tests" / "data" / "corpus").glob("*/*.txt"))
NCCL_SAMPLE = ROOT / "tests/data/corpus/nccl-tests/cscs-gh200-2node-v2.18.2-version-header.txt"
TOPO_SAMPLE = ROOT / "tests/data/corpus/topo/dgx-a100-nv12-10nics-tabs-numa.txt"
FAILED_SAMPLE = ROOT / "tests/data/corpus/nccl-tests/rtx5090-2gpu-test-nccl-failure-after-header.txt"
DOC = ROOT / "docs" / "parse-json.md"


def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "collbench_py", *args],
        input=stdin,
        capture_output=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _fields(cls: type) -> set[str]:
    return {field.name for field in dataclasses.fields(cls)}


def _csv_lines_expected(parsed: list[dict]) -> int:
    """One line per (run, row, half); a run without rows still gets one line."""
    total = 0
    for item in parsed:
        for run in item["runs"]:
            halves = sum(1 + (row["ip"] is not None) for row in run["rows"])
            total += halves or 1
    return total


# --- good input ---------------------------------------------------------------------------


def test_json_of_the_whole_corpus_has_the_documented_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(capsys, "parse", "--format", "json", *map(str, CORPUS))
    assert (code, err) == (ExitCode.OK, "")
    parsed = json.loads(out)
    assert [item["file"] for item in parsed] == [str(path) for path in CORPUS]
    for item in parsed:
        assert set(item) == _fields(models.ParsedFile)
        assert item["kind"] in models.KINDS
        for run in item["runs"]:
            assert set(run) == _fields(models.Run)
            assert run["status"] in ("ok", "failed", "incomplete")
            for row in run["rows"]:
                assert set(row) == _fields(models.Row)
                assert set(row["oop"]) == _fields(models.Half)
                assert row["ip"] is None or set(row["ip"]) == _fields(models.Half)
            for error in run["errors"]:
                assert set(error) == _fields(models.RunError)
            for device in run["devices"]:
                assert set(device) == _fields(models.Device)
        if item["topology"] is not None:
            assert set(item["topology"]) == _fields(models.Topology)
        for matrix in item["matrices"]:
            assert set(matrix) == _fields(models.Matrix)
    kinds = {item["kind"] for item in parsed}
    assert {"nccl-tests", "nvidia-smi-topo", "torch-bench"} <= kinds
    assert sum(len(run["rows"]) for item in parsed for run in item["runs"]) > 100


def test_json_is_exactly_to_dict_in_a_fresh_interpreter() -> None:
    result = cli("parse", "--format", "json", str(NCCL_SAMPLE), str(TOPO_SAMPLE))
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""
    expected = [json.loads(json.dumps(parse_file(p).to_dict())) for p in (NCCL_SAMPLE, TOPO_SAMPLE)]
    assert json.loads(result.stdout) == expected
    run = expected[0]["runs"][0]
    assert run["collective"] == "all_reduce" and run["nranks"] == 2 and len(run["rows"]) == 8


def test_csv_has_one_line_per_run_row_and_half(capsys: pytest.CaptureFixture[str]) -> None:
    # The node-check kinds have columns of their own (tests/cli/test_parse_node_checks_cli.py).
    files = [str(path) for path in CORPUS if path.parent.name not in ("perftest", "nvlink", "ib", "dcgm")]
    _, out_json, _ = run_main(capsys, "parse", "--format", "json", *files)
    parsed = json.loads(out_json)
    code, out, err = run_main(capsys, "parse", "--format", "csv", *files)
    assert (code, err) == (ExitCode.OK, "")
    reader = csv.DictReader(io.StringIO(out))
    assert tuple(reader.fieldnames or ()) == CSV_FIELDS
    lines = list(reader)
    assert len(lines) == _csv_lines_expected(parsed) > 100
    # Line by line, in order: the run's fields and the half's numbers, as the JSON has them.
    expected = [
        (item, run_index, run, row, half)
        for item in parsed
        for run_index, run in enumerate(item["runs"])
        for row, half in (
            [(row, half) for row in run["rows"] for half in ("oop", "ip") if row[half] is not None]
            or [(None, "")]
        )
    ]
    for line, (item, run_index, run, row, half) in zip(lines, expected, strict=True):
        assert (line["file"], line["kind"], int(line["run"])) == (item["file"], item["kind"], run_index)
        assert (line["status"], line["hosts"]) == (run["status"], " ".join(run["hosts"]))
        assert line["collective"] == (run["collective"] or "")
        assert line["half"] == half
        if row is not None:
            assert int(line["size"]) == row["size"]
            for field in ("time_us", "algbw", "busbw"):
                value = row[half][field]
                assert (float(line[field]) if line[field] else None) == value
    # Topology and matrix files have no runs, hence no CSV lines.
    assert not any(line["file"] == str(TOPO_SAMPLE) for line in lines)


def test_table_shows_runs_and_topology(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(capsys, "parse", str(NCCL_SAMPLE), str(TOPO_SAMPLE), str(FAILED_SAMPLE))
    assert (code, err) == (ExitCode.OK, "")
    assert "run 0: all_reduce  2 ranks  hosts: nid007106 nid007109  status: ok" in out
    assert re.search(r"134217728  \(128 MiB\)\s+22\.86\s+22\.88\s+0/0", out)
    assert re.search(r"^\s+GPU0\s+X\s+NV12", out, re.M)
    assert "status: failed" in out or "status: incomplete" in out


def test_failed_run_is_data_not_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(capsys, "parse", "--format", "json", str(FAILED_SAMPLE))
    assert (code, err) == (ExitCode.OK, "")
    [item] = json.loads(out)
    assert item["runs"][0]["status"] in ("failed", "incomplete")


def test_standard_input(capsys: pytest.CaptureFixture[str]) -> None:
    result = cli("parse", "--format", "json", "-", stdin=NCCL_SAMPLE.read_bytes())
    assert result.returncode == 0, result.stderr
    [from_stdin] = json.loads(result.stdout)
    _, out, _ = run_main(capsys, "parse", "--format", "json", str(NCCL_SAMPLE))
    [from_file] = json.loads(out)
    assert from_stdin["file"] == "-"
    assert from_stdin["runs"] == from_file["runs"]


@pytest.mark.parametrize("name", ["all_reduce.json.0", "all_reduce.log.1", "noextension"])
def test_kind_comes_from_content_not_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    # nccl-tests -J never overwrites: it writes <path>.0, <path>.1, ...
    copy = tmp_path / name
    shutil.copy(NCCL_SAMPLE, copy)
    code, out, err = run_main(capsys, "parse", "--format", "json", str(copy))
    assert (code, err) == (ExitCode.OK, "")
    assert json.loads(out)[0]["kind"] == "nccl-tests"


def test_kind_option_matches_detection(capsys: pytest.CaptureFixture[str]) -> None:
    _, detected, _ = run_main(capsys, "parse", "--format", "json", str(TOPO_SAMPLE))
    code, forced, err = run_main(
        capsys, "parse", "--format", "json", "--kind", "nvidia-smi-topo", str(TOPO_SAMPLE)
    )
    assert (code, err) == (ExitCode.OK, "")
    assert json.loads(forced) == json.loads(detected)


# --- bad input ----------------------------------------------------------------------------


def _bad_inputs(tmp_path: Path) -> dict[str, Path]:
    rng = random.Random(1)
    paths = {
        "missing": tmp_path / "no-such.log",
        "directory": tmp_path / "a-directory",
        "empty": tmp_path / "empty.log",
        "random bytes": tmp_path / "random.bin",
        "jpeg": tmp_path / "photo.jpg",
        "not a benchmark": tmp_path / "notes.txt",
    }
    paths["directory"].mkdir()
    paths["empty"].write_bytes(b"")
    paths["random bytes"].write_bytes(rng.randbytes(64 * 1024))
    paths["jpeg"].write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01" + rng.randbytes(8192))
    # A real text file that is not a benchmark output: this repository's pyproject.
    shutil.copy(ROOT / "pyproject.toml", paths["not a benchmark"])
    return paths


@pytest.mark.parametrize("case", ["missing", "directory", "empty", "random bytes", "jpeg", "not a benchmark"])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, case: str) -> None:
    path = _bad_inputs(tmp_path)[case]
    result = cli("parse", "--format", "json", str(path))
    stderr = result.stderr.decode()
    assert result.returncode == ExitCode.BAD_INPUT
    assert "Traceback" not in stderr
    assert stderr.endswith("\n") and stderr.count("\n") == 1, stderr
    assert stderr.startswith(f"collbench: {path}: ")
    assert json.loads(result.stdout) == []


def test_good_files_are_printed_even_when_others_are_bad(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = _bad_inputs(tmp_path)
    code, out, err = run_main(
        capsys, "parse", "--format", "csv", str(bad["missing"]), str(NCCL_SAMPLE), str(bad["jpeg"])
    )
    assert code == ExitCode.BAD_INPUT
    assert err.splitlines() == [
        f"collbench: {bad['missing']}: no such file or directory",
        f"collbench: {bad['jpeg']}: not a recognised benchmark or topology output",
    ]
    assert len(list(csv.DictReader(io.StringIO(out)))) == 16  # 8 sizes x 2 halves


def test_unexpected_error_is_one_line_without_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # No real input is known to break a parser (the fuzz tests look for one); simulate a bug.
    def broken(*args, **kwargs):
        raise KeyError("bug")

    monkeypatch.setattr("collbench_py.cli.cmd_parse.parse_text", broken)
    monkeypatch.delenv("COLLBENCH_DEBUG", raising=False)
    code, _, err = run_main(capsys, "parse", "--format", "json", str(NCCL_SAMPLE))
    assert code == ExitCode.BAD_INPUT
    assert err.count("\n") == 1 and "KeyError" in err and "Traceback" not in err
    monkeypatch.setattr("collbench_py.cli.cmd_parse.write_json", broken)
    code, _, err = run_main(capsys, "parse", "--format", "json", str(NCCL_SAMPLE))
    assert code == ExitCode.BAD_INPUT
    assert err == "collbench: KeyError: 'bug' (COLLBENCH_DEBUG=1 for details)\n"
    monkeypatch.setenv("COLLBENCH_DEBUG", "1")
    code, _, err = run_main(capsys, "parse", "--format", "json", str(NCCL_SAMPLE))
    assert code == ExitCode.BAD_INPUT and "Traceback" in err


def test_usage_errors_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(capsys, "--version")[:2] == (0, f"collbench {__version__}\n")
    code, _, err = run_main(capsys)
    assert code == ExitCode.BAD_INPUT and "usage:" in err
    code, _, err = run_main(capsys, "parse", "--format", "xml", str(NCCL_SAMPLE))
    assert code == ExitCode.BAD_INPUT and "invalid choice" in err


def main_in_a_new_python(*argv: str) -> tuple[int, set[str], str]:
    """`main(argv)` in a new interpreter: its exit code, the modules loaded when it returned, and
    what it printed on stdout."""
    code = (
        "import json, sys; from collbench_py.cli import main; rc = main(sys.argv[1:]); "
        "print(json.dumps([rc, sorted(sys.modules)]), file=sys.stderr)"
    )
    command = [sys.executable, "-c", code, *argv]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    rc, modules = json.loads(result.stderr.strip().splitlines()[-1])
    return rc, set(modules), result.stdout


def test_version_alone_imports_no_command() -> None:
    # The preflight role asks for the version on every run: the commands' modules (the report's,
    # pandas' callers) are not imported for it.
    rc, modules, out = main_in_a_new_python("--version")
    assert out.splitlines() == [f"collbench {__version__}"], out
    assert (rc, sorted(m for m in modules if m.startswith("collbench_py.cli.cmd_"))) == (0, [])


def test_parse_imports_no_other_command() -> None:
    # `collbench parse` runs once per log in some pipelines: it must not pay for matplotlib or SSH.
    rc, modules, _ = main_in_a_new_python("parse", "--format", "json", str(NCCL_SAMPLE))
    heavy = [m for m in ("matplotlib", "paramiko", "ansible_runner", "pandas") if m in modules]
    assert (rc, heavy) == (0, [])


def test_every_command_module_is_registered(capsys: pytest.CaptureFixture[str]) -> None:
    modules = {path.stem.removeprefix("cmd_") for path in (ROOT / "collbench_py").glob("cmd_*.py")}
    assert modules <= set(COMMANDS), f"add {sorted(modules - set(COMMANDS))} to cli.COMMANDS"
    _, out, _ = run_main(capsys, "--help")
    for name in modules:
        assert re.search(rf"^    {name} ", out, re.M), f"{name} missing from --help"


def test_closed_pipe_is_not_a_traceback() -> None:
    # `collbench parse ... | head -1`: enough output to fill the pipe, then the reader leaves.
    args = [sys.executable, "-m", "collbench_py", "parse", "--format", "csv", *map(str, CORPUS * 20)]
    with subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline().startswith(b"file,kind,")
        proc.stdout.close()
        stderr = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 0
    assert "Traceback" not in stderr and "Exception" not in stderr


# --- documentation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "record",
    [
        models.ParsedFile,
        models.Run,
        models.Row,
        models.Half,
        models.RunError,
        models.Device,
        models.Topology,
        models.Matrix,
    ],
    ids=lambda cls: cls.__name__,
)
def test_every_json_field_is_documented(record: type) -> None:
    text = DOC.read_text()
    section = re.search(rf"^### `?{record.__name__}`?\n(.*?)(?=^##|\Z)", text, re.M | re.S)
    assert section, f"docs/parse-json.md has no section for {record.__name__}"
    documented = set(re.findall(r"^\| `(\w+)` \|", section.group(1), re.M))
    assert documented == _fields(record)


def test_the_documented_examples_are_real_output() -> None:
    examples = re.findall(r"```json\n(.*?)```", DOC.read_text(), re.S)
    assert examples, "docs/parse-json.md has no JSON example"
    for example in examples:
        shown = json.loads(example)
        result = cli("parse", "--format", "json", *(item["file"] for item in shown))
        assert json.loads(result.stdout) == shown
