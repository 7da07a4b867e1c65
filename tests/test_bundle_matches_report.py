"""The acceptance bundle says what `collbench report` says, on run directories with each kind of evidence
(PCIe links under load, an adaptive plan with re-measured pairs, nodes Slurm could not give, a host
with another topology, an nccl-tests `-J` file and launcher output, a history baseline).

For each run, `collbench report` runs first while every file it opens is recorded (an audit hook),
then `collbench bundle` with the same options. The bundle's exit code and results.json must equal the
report's, verdict for verdict, and every file the report opened inside the run directory must be in
the archive: the list the bundle packs (rundir.evidence_files) is exactly what the report read.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sys
import tarfile
from pathlib import Path
from typing import Any

from collbench_py import cli
from collbench_py.ansible_run import PlaybookOutcome, PlaybookRequest
from collbench_py.cli import cmd_run
from collbench_py.rundir.load import evidence_files, load_run_dir
from tests.report.test_report_plan import _adaptive_spec
from tests.rundir_factory import (
    H100_LOG,
    H100_TOPO_12NICS,
    RUN_ID,
    RunSpec,
    build_run_dir,
    gpu_link_csv,
    make_facts,
    nccl_tests_json,
)
from tests.slurm.test_slurm_not_measured import UNUSABLE, with_slurm

HOSTS = ["node1", "node2", "node3", "node4"]
TOP = f"collbench-acceptance-{RUN_ID}"

_opened: list[str] | None = None


def _record_opens(event: str, args: tuple[Any, ...]) -> None:
    if _opened is not None and event == "open" and isinstance(args[0], (str, os.PathLike)):
        _opened.append(os.path.realpath(args[0]))


sys.addaudithook(_record_opens)


def collbench(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = cli.main(list(argv))
    return code, out.getvalue()


def report_reading(run: Path, out: Path, *options: str) -> tuple[int, set[str]]:
    """`collbench report` on `run`, and the files it opened inside the run directory (relative)."""
    global _opened  # noqa: PLW0603 - the audit hook cannot be removed, only told to stop recording
    _opened = []
    try:
        code, printed = collbench("report", str(run), "--out", str(out), *options)
    finally:
        opened, _opened = _opened, None
    assert code in (0, 1, 3), printed
    root = os.path.realpath(run) + os.sep
    return code, {p.removeprefix(root) for p in opened if p.startswith(root) and os.path.isfile(p)}


def bundle(run: Path, archive: Path, *options: str) -> tuple[int, Path, list[str]]:
    code, printed = collbench("bundle", str(run), "--bundle-out", str(archive), *options)
    assert archive.is_file(), printed
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        tar.extractall(archive.parent / "unpacked", filter="data")
    return code, archive.parent / "unpacked" / TOP, names


def results_of(path: Path) -> dict[str, Any]:
    results = json.loads(path.read_text(encoding="utf-8"))
    results.pop("generated_at")  # the one field that differs between two reports of one run
    return results


def agree(run: Path, tmp: Path, *options: str) -> tuple[int, dict[str, Any], Path]:
    """Report, then bundle, of `run` with `options`; asserts that they agree and that every file the
    report read is in the archive. Returns the exit code, the results and the unpacked bundle."""
    code, read = report_reading(run, tmp / "report", *options)
    bundle_code, top, names = bundle(run, tmp / "bundle" / "b.tar.gz", *options)
    assert bundle_code == code
    report, bundled = results_of(tmp / "report" / "results.json"), results_of(top / "report" / "results.json")
    # Verdict for verdict first (a readable failure), then the whole document.
    assert {h["host"]: h["verdict"] for h in bundled["hosts"]} == {
        h["host"]: h["verdict"] for h in report["hosts"]
    }
    assert [(h["host"], h["checks"]) for h in bundled["hosts"]] == [
        (h["host"], h["checks"]) for h in report["hosts"]
    ]
    assert bundled["summary"] == report["summary"] and bundled["summary"]["exit_code"] == code
    assert bundled == report
    info = json.loads((top / "bundle.json").read_text(encoding="utf-8"))
    assert info["exit_code"] == code and info["verdict"] == {0: "passed", 1: "failed", 3: "warnings"}[code]
    packed = {n.removeprefix(f"{TOP}/run/") for n in names if n.startswith(f"{TOP}/run/")}
    assert read <= packed, f"read by the report but not in the bundle: {sorted(read - packed)}"
    assert set(evidence_files(load_run_dir(run))) == read
    return code, report, top


def test_pcie_under_load_fails_in_the_bundle_as_in_the_report(tmp_path: Path) -> None:
    links = {h: {"all_reduce": gpu_link_csv(make_facts(h))} for h in HOSTS}
    links["node2"] = {"all_reduce": gpu_link_csv(make_facts("node2"), width=8)}  # x8 of x16 under load
    run = build_run_dir(tmp_path / "results", RunSpec(hosts=HOSTS, gpu_links=links, pairs="all"))
    code, report, top = agree(run, tmp_path, "--no-history")
    assert code == 1
    node2 = next(h for h in report["hosts"] if h["host"] == "node2")
    assert node2["verdict"] == "failed" and "x8 of x16" in " ".join(node2["reasons"])
    assert (top / "run" / "hosts" / "node2" / "intra" / "gpu-link-all_reduce.csv").is_file()


def test_an_adaptive_run_keeps_the_plans_decisions_and_re_measured_pairs(tmp_path: Path) -> None:
    hosts = [f"node{i:02d}" for i in range(12)]
    spec, _ = _adaptive_spec(hosts, ("node03",))
    assert spec.plan is not None and ("bad node", "node03") in {
        (d.kind, d.subject) for d in spec.plan.decisions
    }
    run = build_run_dir(tmp_path / "results", spec)
    remeasured = sorted(p.relative_to(run).as_posix() for p in run.glob("inter/pairs/*/round*/*.log"))
    assert remeasured, "the schedule measured no pair twice"
    code, report, top = agree(run, tmp_path, "--no-history")
    assert code == 1
    plan = "inter/pairs/plan.json"
    assert json.loads((top / "run" / plan).read_text()) == json.loads((run / plan).read_text())
    assert all((top / "run" / rel).is_file() for rel in remeasured)
    assert "node03" in json.dumps(report["plan"])


def test_nodes_slurm_could_not_give_warn_in_the_bundle_as_in_the_report(tmp_path: Path) -> None:
    run = with_slurm(
        build_run_dir(tmp_path / "results", RunSpec(hosts=HOSTS[:3])),
        {"job_id": "4242", "partition": "gpu", "unusable": [dict(UNUSABLE[0], named=True), *UNUSABLE[1:]]},
    )
    code, report, top = agree(run, tmp_path, "--no-history", "--strict")
    assert code == 3
    assert json.loads((top / "run" / "manifest.json").read_text())["slurm"]["unusable"][0]["host"] == "node4"
    assert "node4" in json.dumps(report)


def test_topology_json_results_and_launcher_output_travel_with_the_verdict(tmp_path: Path) -> None:
    spec = RunSpec(hosts=HOSTS, topo_override={"node4": H100_TOPO_12NICS}, pairs=[("node1", "node2")])
    run = build_run_dir(tmp_path / "results", spec)
    intra = run / "hosts" / "node1" / "intra"
    (intra / "all_reduce.json").write_text(nccl_tests_json(H100_LOG, factor=0.5), encoding="utf-8")
    (intra / "launcher-node1.out").write_text("launching 8 ranks on node1\n", encoding="utf-8")
    _, report, top = agree(run, tmp_path, "--no-history")
    node1 = next(h for h in report["hosts"] if h["host"] == "node1")
    assert node1["verdict"] == "failed"  # its rows come from the -J file, at half the bandwidth
    for rel in (
        "hosts/node4/topo.txt",
        "hosts/node1/intra/all_reduce.json",
        "hosts/node1/intra/launcher-node1.out",
    ):
        assert (top / "run" / rel).is_file(), rel


def test_the_history_baseline_the_report_used_is_the_bundles(tmp_path: Path, monkeypatch) -> None:
    """Two healthy nights, then node3 15 % slower: inside the fleet's band, failed only against its own
    history. The bundle's verdict is the report's, and it carries those history checks."""
    monkeypatch.delenv("COLLBENCH_DB", raising=False)
    db = tmp_path / "history.sqlite"
    nights = [RunSpec(hosts=HOSTS, pairs="all")] * 2 + [
        RunSpec(hosts=HOSTS, pairs="all", host_scale={"node3": 0.85})
    ]
    for night, spec in enumerate(nights, start=1):
        run = build_run_dir(tmp_path / f"night{night}", spec)
        manifest = json.loads((run / "manifest.json").read_text())
        manifest.update(
            run_id=f"202611{night:02d}T215100Z-{night:06x}", started_at=f"2026-11-{night:02d}T21:51:00Z"
        )
        (run / "manifest.json").write_text(json.dumps(manifest))
        run = run.rename(run.parent / manifest["run_id"])
        if night < len(nights):
            assert (
                collbench(
                    "report", str(run), "--out", str(tmp_path / f"r{night}"), "--db", str(db), "--new-db"
                )[0]
                == 0
            )
    global TOP  # noqa: PLW0603 - this run has its own id
    saved, TOP = TOP, f"collbench-acceptance-{manifest['run_id']}"
    try:
        code, report, top = agree(run, tmp_path, "--db", str(db))
    finally:
        TOP = saved
    assert code == 1
    node3 = next(h for h in report["hosts"] if h["host"] == "node3")
    assert [c["status"] for c in node3["checks"] if c["name"] == "history/intra/all_reduce"] == ["fail"]
    info = json.loads((top / "bundle.json").read_text())
    assert {(c["host"], c["name"], c["status"]) for c in info["history_checks"]} >= {
        ("node3", "history/intra/all_reduce", "fail")
    }
    assert "check(s) against the history" in (top / "README.txt").read_text()
    # Without the history, the provider reproduces every check but those against the history.
    run_copy = shutil.copytree(top / "run", tmp_path / "copy")
    collbench("report", str(run_copy), "--out", str(tmp_path / "again"), "--no-history")
    again = results_of(tmp_path / "again" / "results.json")

    def checks(results: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
        return [
            (h["host"], [c for c in h["checks"] if not c["name"].startswith("history")])
            for h in results["hosts"]
        ]

    assert checks(again) == checks(report)


def test_a_healthy_fleet_passes_strict_in_the_bundle_as_in_the_report(tmp_path: Path) -> None:
    links = {h: {"all_reduce": gpu_link_csv(make_facts(h))} for h in HOSTS}
    run = build_run_dir(tmp_path / "results", RunSpec(hosts=HOSTS, gpu_links=links, pairs="all"))
    code, _, _ = agree(run, tmp_path, "--no-history", "--profile", "h100-sxm")
    assert code in (0, 3)  # whatever the report says, the bundle says; see test_healthy_fleet for 0


def test_a_slow_link_is_judged_the_same_in_both(tmp_path: Path) -> None:
    spec = RunSpec(hosts=HOSTS, pairs="all", pair_scale={("node2", "node3"): 0.5})
    run = build_run_dir(tmp_path / "results", spec)
    code, _, _ = agree(run, tmp_path, "--no-history")
    assert code == 1


def test_run_acceptance_exits_with_the_reports_verdict(tmp_path: Path, monkeypatch) -> None:
    """`collbench run --acceptance`: the playbook's report step (here the real report, as the playbook
    runs it) fails the host whose GPUs ran at x8 of x16; the bundle written after it says the same,
    and so does the exit code."""
    links = {h: {"all_reduce": gpu_link_csv(make_facts(h))} for h in HOSTS}
    links["node3"] = {"all_reduce": gpu_link_csv(make_facts("node3"), width=8)}
    run = build_run_dir(tmp_path / "results", RunSpec(hosts=HOSTS, gpu_links=links))
    monkeypatch.delenv("COLLBENCH_DB", raising=False)

    def playbook(request: PlaybookRequest, *_: Any, **__: Any) -> PlaybookOutcome:
        report_args = request.collbench_vars.get("collbench_report_args", [])
        code, printed = collbench("report", str(run), *report_args)
        return PlaybookOutcome(0, "successful", RUN_ID, run, code, tuple(printed.splitlines()), (), (), 1.0)

    monkeypatch.setattr(cmd_run, "run_playbook", playbook)
    code, printed = collbench("run", "-i", "node1,", "--acceptance", "h100-sxm", "--progress", "lines")
    assert code == 1, printed
    assert "acceptance bundle:" in printed and "verdict failed" in printed
    archive = run / "acceptance" / f"{TOP}.tar.gz"
    with tarfile.open(archive) as tar:
        bundled = json.load(tar.extractfile(f"{TOP}/report/results.json"))
    node3 = next(h for h in bundled["hosts"] if h["host"] == "node3")
    assert node3["verdict"] == "failed" and bundled["summary"]["exit_code"] == 1
    assert results_of(run / "report" / "results.json")["hosts"] == bundled["hosts"]
