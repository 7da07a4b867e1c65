"""The report of a real run on one H200 (tests/data/gpu-captures/h200-1gpu/run-node-checks): the node
checks as they ran there - the GPU matrix measured (host to device and back), NVLink and the RDMA
checks skipped with the node's own reasons - read back from results.json, junit.xml and metrics.prom."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from collbench_py.cli import main

RUN = Path(__file__).resolve().parents[1] / "data" / "gpu-captures" / "h200-1gpu" / "run-node-checks"


@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    run = tmp_path_factory.mktemp("h200") / "run"
    shutil.copytree(RUN, run, ignore=shutil.ignore_patterns("report"))
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["report", str(run), "--no-history"])
    return run / "report", code


def test_the_real_h200_node_checks_in_results_json(reported: tuple[Path, int]) -> None:
    out, code = reported
    assert code == 0
    doc = json.loads((out / "results.json").read_text())
    section = doc["node_checks"]
    measured = {(m["id"], m["metric"]): m["value"] for m in section["measurements"] if m["host"] == "gpu1"}
    assert measured == {("gpu0", "h2d_ce"): pytest.approx(55.0835), ("gpu0", "d2h_ce"): pytest.approx(55.228)}
    assert section["findings"] == []
    checks = {c["name"]: c for c in section["hosts"]["gpu1"]["checks"]}
    assert checks["gpu_matrix"]["status"] == "ok"
    assert checks["nvlink"]["status"] == "skipped" and "lists no link" in checks["nvlink"]["note"]
    assert checks["loopback"]["status"] == "skipped"
    assert section["hosts"]["gpu1"]["perftest"]["source"] == "none"
    assert [h["verdict"] for h in doc["hosts"]] == ["passed"]


def test_the_real_h200_node_checks_in_junit_and_metrics(reported: tuple[Path, int]) -> None:
    out, _ = reported
    cases = ET.parse(out / "junit.xml").getroot().iter("testcase")
    node_cases = {c.get("name"): c for c in cases if c.get("classname") == "node.gpu1"}
    assert node_cases, "no node.gpu1 testcase"
    skipped = [name for name, case in node_cases.items() if case.find("skipped") is not None]
    assert skipped and not [c for c in node_cases.values() if c.find("failure") is not None]
    values = {
        (s.labels["id"], s.labels["metric"]): s.value
        for family in text_string_to_metric_families((out / "metrics.prom").read_text())
        for s in family.samples
        if s.name == "collbench_component_value"
    }
    assert values[("gpu0", "h2d_ce")] == pytest.approx(55.0835)
