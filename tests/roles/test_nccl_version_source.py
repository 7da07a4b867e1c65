"""The NCCL the report names is the one the benchmark loaded, read from its logs, not torch's.

Real data: on the same H100, run-default-inventory-system-nccl's nccl-tests loaded the system NCCL
2.28.3 (`nccl-library=22803`) while facts.json's torch probe said 2.28.9 (torch's wheel);
run-nccl-tests-1GiB's loaded the wheel's 2.28.9.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from collbench_py.report.machine import head
from collbench_py.rundir.load import load_run_dir
from collbench_py.verdicts import Report, judge
from tests.rundir_factory import RunSpec, build_run_dir, make_facts

CAPTURES = Path(__file__).parents[1] / "data" / "gpu-captures"
SYSTEM_NCCL_RUN = CAPTURES / "run-default-inventory-system-nccl"  # host `localhost`
WHEEL_NCCL_RUN = CAPTURES / "run-nccl-tests-1GiB"  # host `gpu1`


def copy_run(tmp_path: Path, run: Path) -> Path:
    copy = tmp_path / run.name
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("report"))
    return copy


def versions_check(report: Report, host: str):
    return next(c for c in report.hosts[host].checks if c.name == "facts/versions")


def test_the_report_names_the_nccl_the_logs_loaded(tmp_path: Path) -> None:
    run = load_run_dir(copy_run(tmp_path, SYSTEM_NCCL_RUN))
    assert (
        json.loads((SYSTEM_NCCL_RUN / "hosts/localhost/facts.json").read_text())["nccl_version"] == "2.28.9"
    )
    host = run.hosts["localhost"]
    assert (host.nccl_from_logs, host.nccl_from_probe) == ("2.28.3", "2.28.9")
    report = judge(run)
    (summary,) = head(report, 0)["hosts"]
    assert summary["facts"]["nccl_version"] == "2.28.3"  # results.json, hosts.csv, the hosts table
    check = versions_check(report, "localhost")
    assert check.status == "pass"
    assert "NCCL 2.28.3 (as its benchmark logs loaded it; torch's own NCCL is 2.28.9)" in check.reason


def test_a_node_without_torch_still_gets_the_logs_nccl(tmp_path: Path) -> None:
    copy = copy_run(tmp_path, SYSTEM_NCCL_RUN)
    facts_path = copy / "hosts/localhost/facts.json"
    facts = json.loads(facts_path.read_text())
    facts.update(nccl_version=None, torch_version=None)  # what the facts role writes without torch
    facts_path.write_text(json.dumps(facts))
    report = judge(load_run_dir(copy))
    assert head(report, 0)["hosts"][0]["facts"]["nccl_version"] == "2.28.3"
    assert "NCCL 2.28.3 (as its benchmark logs loaded it)" in versions_check(report, "localhost").reason


def test_without_a_log_that_names_it_the_probe_is_kept_and_said_so(tmp_path: Path) -> None:
    copy = copy_run(tmp_path, SYSTEM_NCCL_RUN)
    shutil.rmtree(copy / "hosts/localhost/intra")
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["launches"] = []
    (copy / "manifest.json").write_text(json.dumps(manifest))
    report = judge(load_run_dir(copy))
    assert head(report, 0)["hosts"][0]["facts"]["nccl_version"] == "2.28.9"
    assert "NCCL 2.28.9 (torch's, from the facts probe" in versions_check(report, "localhost").reason


def test_a_host_whose_logs_loaded_another_nccl_is_flagged(tmp_path: Path) -> None:
    """Three hosts whose torch probes all say 2.28.9; one host's nccl-tests loaded 2.28.3."""
    fleet = tmp_path / "fleet"
    (fleet / "hosts").mkdir(parents=True)
    manifest = json.loads((WHEEL_NCCL_RUN / "manifest.json").read_text())
    manifest["hosts"], manifest["launches"] = {}, []
    sources = {"node1": (WHEEL_NCCL_RUN, "gpu1"), "node2": (WHEEL_NCCL_RUN, "gpu1")}
    sources["node3"] = (SYSTEM_NCCL_RUN, "localhost")
    for host, (run, name) in sources.items():
        shutil.copytree(run / "hosts" / name, fleet / "hosts" / host)
        facts = json.loads((fleet / "hosts" / host / "facts.json").read_text())
        assert facts["nccl_version"] == "2.28.9"
        (fleet / "hosts" / host / "facts.json").write_text(json.dumps({**facts, "inventory_hostname": host}))
        manifest["hosts"][host] = {"inventory_hostname": host, "status": "ok"}
        for log in sorted((fleet / "hosts" / host / "intra").glob("*.log")):
            manifest["launches"].append(
                {
                    "kind": "intra",
                    "hosts": [host],
                    "collective": log.stem,
                    "log": log.relative_to(fleet).as_posix(),
                    "status": "ok",
                    "rc": 0,
                }
            )
    (fleet / "manifest.json").write_text(json.dumps(manifest))
    report = judge(load_run_dir(fleet))
    drift = versions_check(report, "node3")
    assert drift.status == "warn"
    assert drift.reason.startswith("version drift: NCCL 2.28.3 (as its benchmark logs loaded it")
    assert drift.reason.endswith("where 2 of 3 hosts run 2.28.9")
    assert report.hosts["node3"].verdict == "warned"
    for host in ("node1", "node2"):
        assert versions_check(report, host).status == "pass"


def test_a_pair_log_names_the_nccl_of_the_host_that_printed_its_header(tmp_path: Path) -> None:
    """A pair log's header is rank 0's: its NCCL is the host whose device line says `Rank 0`
    (a real 2-node H100 log, NCCL 2.26.2); a host that was never rank 0 keeps its probe's."""
    hosts = ["node1", "node2", "node3"]
    spec = RunSpec(
        hosts=hosts,
        intra={},
        pairs="all",
        rename_hosts=True,
        facts={h: make_facts(h, nccl="2.27.3") for h in hosts},
    )
    run = load_run_dir(build_run_dir(tmp_path, spec))
    assert [(h.name, h.nccl_from_logs) for h in run.hosts.values()] == [
        ("node1", "2.26.2"),
        ("node2", "2.26.2"),
        ("node3", None),
    ]
    assert run.hosts["node3"].facts["nccl_version"] == "2.27.3"
