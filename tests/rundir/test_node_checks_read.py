"""hosts/<host>/node/ read with the run directory's defences: a link out of the run directory or a
file past the size cap is a note, not read; a bad checks.json is a note, not a traceback; an
unknown status is no pass; the node files are evidence."""

from __future__ import annotations

import json
import os
from pathlib import Path

from collbench_py.cli import main
from collbench_py.rundir import load
from collbench_py.rundir.load import evidence_files, load_run_dir
from collbench_py.verdicts import judge
from tests.nodecheck_factory import NodeSpec, add_node_checks
from tests.rundir_factory import RunSpec, build_run_dir

HOSTS = ["node1", "node2", "node3"]


def _run(tmp_path: Path) -> Path:
    return add_node_checks(build_run_dir(tmp_path, RunSpec(hosts=HOSTS)), {})


def test_no_node_directory_is_no_node_checks(tmp_path: Path) -> None:
    run = load_run_dir(build_run_dir(tmp_path, RunSpec(hosts=HOSTS)))
    assert all(h.node_checks is None for h in run.hosts.values())
    assert judge(run).components is None


def test_a_node_file_linking_out_of_the_run_directory_is_not_read(tmp_path: Path) -> None:
    root = _run(tmp_path / "run")
    outside = tmp_path / "secret.txt"
    outside.write_text((root / "hosts/node1/node/nvbandwidth.txt").read_text())
    target = root / "hosts/node1/node/nvbandwidth.txt"
    target.unlink()
    os.symlink(outside, target)
    run = load_run_dir(root)
    assert run.hosts["node1"].node_checks.matrices == ()
    assert any("hosts/node1/node/nvbandwidth.txt links out of the run directory" in n for n in run.notes)
    assert "hosts/node1/node/nvbandwidth.txt" not in evidence_files(run)
    # what ran but left nothing readable is said, not passed
    check = next(c for c in judge(run).hosts["node1"].checks if c.name == "node/gpu_matrix")
    assert check.status == "warn"


def test_a_node_file_past_the_size_cap_is_not_read(tmp_path: Path, monkeypatch) -> None:
    root = _run(tmp_path)
    monkeypatch.setattr(load, "HOST_FILE_MAX_BYTES", 4096)
    run = load_run_dir(root)
    assert run.hosts["node2"].node_checks.matrices == ()
    assert any("hosts/node2/node/nvbandwidth.txt is" in n and "too large" in n for n in run.notes)


def test_a_broken_checks_json_is_a_note_and_the_report_still_writes(tmp_path: Path, capsys) -> None:
    root = _run(tmp_path)
    (root / "hosts/node3/node/checks.json").write_text("{not json")
    run = load_run_dir(root)
    assert run.hosts["node3"].node_checks.checks == ()
    assert any("hosts/node3/node/checks.json: not JSON" in n for n in run.notes)
    check = next(c for c in judge(run).hosts["node3"].checks if c.name.startswith("node/"))
    assert check.status == "warn"
    assert main(["report", str(root)]) in (0, 1)
    assert "Traceback" not in capsys.readouterr().err


def test_an_unknown_status_is_read_as_failed_not_passed(tmp_path: Path) -> None:
    root = _run(tmp_path)
    path = root / "hosts/node1/node/checks.json"
    document = json.loads(path.read_text())
    document["checks"][0]["status"] = "fine"
    path.write_text(json.dumps(document))
    run = load_run_dir(root)
    assert run.hosts["node1"].node_checks.checks[0].status == "failed"
    check = next(c for c in judge(run).hosts["node1"].checks if c.name == "node/gpu_matrix")
    assert check.status == "warn"


def test_the_node_files_are_evidence(tmp_path: Path) -> None:
    root = add_node_checks(build_run_dir(tmp_path, RunSpec(hosts=HOSTS)), {"node2": NodeSpec()})
    files = evidence_files(load_run_dir(root))
    for name in ("checks.json", "nvbandwidth.txt", "nvlink-status.txt", "ibstat.txt", "loopback-mlx5_7.txt"):
        assert f"hosts/node2/node/{name}" in files
