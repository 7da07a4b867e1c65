"""`collbench report` on damaged run directories: the damaged parts are reported, never a traceback.

A run directory built from real corpus logs (tests/rundir_factory.py) gets one kind of damage per host,
so one report run checks them all; damage to the manifest itself, which stops the report, is checked
case by case in-process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from collbench_py import cli
from tests.rundir_factory import H100_LOG, RunSpec, build_run_dir

HOSTS = [f"node{i}" for i in range(1, 11)]
REPORT = [sys.executable, "-m", "collbench_py", "report"]
GARBAGE = bytes(range(256)) * 64 + os.urandom(16384)


def intra_log(run: Path, host: str) -> Path:
    return run / "hosts" / host / "intra" / "all_reduce.log"


def damage(run: Path) -> dict[str, str]:
    """One kind of damage per host; returns host -> what the report must say about it."""
    expect: dict[str, str] = {}
    intra_log(run, "node1").unlink()
    expect["node1"] = "all_reduce.log is missing"
    intra_log(run, "node2").write_bytes(b"")
    expect["node2"] = "not readable as a benchmark output"
    intra_log(run, "node3").write_bytes(GARBAGE)
    expect["node3"] = "not readable as a benchmark output"
    # A real log whose table is cut by one 20 MB line with no newline.
    text = H100_LOG.read_text(encoding="utf-8")
    middle = len(text) // 2
    intra_log(run, "node4").write_text(text[:middle] + "x" * 20_000_000 + text[middle:], encoding="utf-8")
    expect["node4"] = "node4"  # noise around the table: the rows still count
    (run / "hosts" / "node5" / "facts.json").write_bytes(b"")
    expect["node5"] = "node5/facts.json is not valid JSON"
    (run / "hosts" / "node6" / "facts.json").write_bytes(GARBAGE)
    expect["node6"] = "node6/facts.json is not valid JSON"
    # Valid JSON, but not an object.
    (run / "hosts" / "node7" / "facts.json").write_text("[1, 2, 3]", encoding="utf-8")
    expect["node7"] = "node7"
    (run / "hosts" / "node8" / "topo.txt").write_bytes(GARBAGE)
    expect["node8"] = "topo.txt not readable"
    (run / "hosts" / "node9" / "topo.txt").write_bytes(b"")
    expect["node9"] = "topo.txt is empty"
    # A log that is a directory.
    log = intra_log(run, "node10")
    log.unlink()
    log.mkdir()
    expect["node10"] = "all_reduce.log is missing"
    return expect


@pytest.fixture(scope="module")
def damaged(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[str, str], subprocess.CompletedProcess]:
    run = build_run_dir(tmp_path_factory.mktemp("damaged"), RunSpec(hosts=HOSTS))
    expect = damage(run)
    # A stray file where a host directory should be, and a launch entry of every wrong type.
    (run / "hosts" / "stray").write_bytes(GARBAGE)
    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    manifest["launches"] += [
        {"kind": "intra", "hosts": "node1", "log": 7},
        {"kind": 3, "hosts": None, "collective": ["x"], "log": "hosts/node1/intra/../../../../etc/passwd"},
        "not a launch",
        None,
    ]
    manifest["hosts"]["ghost"] = "not an entry"
    (run / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    done = subprocess.run([*REPORT, str(run)], capture_output=True, text=True, timeout=300, check=False)
    return run, expect, done


def test_damaged_parts_are_reported_without_a_traceback(
    damaged: tuple[Path, dict[str, str], subprocess.CompletedProcess],
) -> None:
    run, expect, done = damaged
    assert "Traceback" not in done.stderr + done.stdout
    assert done.returncode == 1, done.stderr  # hosts failed: a verdict, not a crash
    results = json.loads((run / "report" / "results.json").read_text(encoding="utf-8"))
    hosts = {h["host"]: h for h in results["hosts"]}
    fleet = json.dumps(results["fleet"]["checks"])
    for host, needle in expect.items():
        said = json.dumps(hosts[host]) + fleet
        assert needle in said, f"{host}: {needle!r} not in {said[:1500]}"
    # A damaged log fails its host's run check, with the reason; the summary names them too.
    for host in ("node1", "node2", "node3", "node10"):
        assert any(line.startswith(host + " ") and "FAILED" in line for line in done.stdout.splitlines())
        (check,) = [c for c in hosts[host]["checks"] if c["name"] == "intra/all_reduce/run"]
        assert check["status"] == "fail", (host, check)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "no manifest.json"),
        (b"", "not valid JSON"),
        (GARBAGE, "not valid JSON"),
        (b'{"schema": 1, "hosts": ', "not valid JSON"),
        (b"[1, 2, 3]", "not a run manifest"),
        (b'{"schema": 1, "hosts": []}', "not a run manifest"),
        (b'{"schema": 99, "hosts": {}}', "schema 99"),
        (b'{"schema": 1, "hosts": {}, "launches": {"a": 1}, "status": []}', None),
    ],
    ids=["missing", "empty", "binary", "cut", "list", "hosts-list", "schema", "wrong-types"],
)
def test_damaged_manifest_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, says: str | None
) -> None:
    run = build_run_dir(tmp_path, RunSpec(hosts=["node1", "node2"]))
    if content is None:
        (run / "manifest.json").unlink()
    else:
        (run / "manifest.json").write_bytes(content)
    code = cli.main(["report", str(run), "--out", str(tmp_path / "out")])
    _, err = capsys.readouterr()
    assert "Traceback" not in err
    # An unexpected exception is caught by the CLI with a hint to debug it: never what we want here.
    assert "COLLBENCH_DEBUG" not in err, err
    if says is None:  # readable enough: the report is written from what there is
        assert code in (0, 1), err
        return
    assert code == 2
    assert len(err.splitlines()) == 1, err
    assert says in err
    assert not (tmp_path / "out").exists()
