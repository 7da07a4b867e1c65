"""The node checks in every report output, each read by a real consumer: json for results.json,
xml.etree for junit.xml, prometheus_client's parser for metrics.prom, html.parser and matplotlib's
PNG reader for index.html."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest
from matplotlib.image import imread
from prometheus_client.parser import text_string_to_metric_families

from collbench_py.cli import main
from tests.nodecheck_factory import NodeSpec, add_node_checks, degrade_pair
from tests.rundir_factory import RunSpec, build_run_dir

HOSTS = ["node1", "node2", "node3", "node4"]
FINDING_KEYS = {
    "host", "kind", "id", "severity", "action", "reason", "measured", "unit", "against", "bus_id", "serial",
    "evidence",
}  # fmt: skip


@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """node2: link GPU3--GPU5 slow; node3: mlx5_2's loopback low; node4: no RDMA device (skipped)."""
    root = build_run_dir(tmp_path_factory.mktemp("nodes"), RunSpec(hosts=HOSTS))
    add_node_checks(
        root,
        {
            "node2": NodeSpec(cells=degrade_pair("3", "5")),
            "node3": NodeSpec(loopback={"mlx5_2": 300.0}),
            "node4": NodeSpec(skipped={"nic": "no RDMA device (/sys/class/infiniband is empty)"}),
        },
    )
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["report", str(root)])
    return root, code


def test_results_json_node_checks_section_is_the_contract(reported) -> None:
    run, code = reported
    assert code == 1
    section = json.loads((run / "report" / "results.json").read_text())["node_checks"]
    assert set(section) == {"hosts", "measurements", "findings"}
    assert set(section["hosts"]) == set(HOSTS)
    assert set(section["hosts"]["node4"]) == {"checks", "perftest"}
    skipped = [c for c in section["hosts"]["node4"]["checks"] if c["status"] == "skipped"]
    assert skipped and all(c["note"].startswith("no RDMA device") for c in skipped)
    findings = section["findings"]
    assert [(f["host"], f["kind"], f["id"]) for f in findings] == [
        ("node2", "nvlink", "gpu3--gpu5"),
        ("node3", "hca", "mlx5_2"),
    ]
    assert all(set(f) == FINDING_KEYS for f in findings)
    assert findings[1]["against"] == {
        "basis": "profile",
        "value": 380,
        "source": findings[1]["against"]["source"],
        "nodes": None,
    }
    measured = {(m["host"], m["kind"], m["id"], m["metric"]): m for m in section["measurements"]}
    slow = measured[("node2", "gpu_pair", "gpu3--gpu5", "d2d_read_ce")]
    healthy = measured[("node1", "gpu_pair", "gpu3--gpu5", "d2d_read_ce")]["value"]
    assert slow["unit"] == "GB/s" and slow["value"] == pytest.approx(healthy * 0.6, abs=0.01)
    assert ("node2", "gpu_pair", "gpu3--gpu5", "d2d_read_ce_rev") in measured
    assert measured[("node3", "hca", "mlx5_2", "loopback")]["value"] == 300.0
    assert measured[("node1", "gpu", "gpu0", "h2d_ce")]["unit"] == "GB/s"
    assert measured[("node1", "nvlink", "gpu1:link7", "crc_growth")]["value"] == 0
    assert not [m for m in section["measurements"] if m["host"] == "node4" and m["kind"] == "hca"]


def test_junit_has_a_testcase_per_component_finding_and_per_check(reported) -> None:
    run, _ = reported
    suite = ET.parse(run / "report" / "junit.xml").getroot().find("testsuite")
    cases = {(c.get("classname"), c.get("name")): c for c in suite.iter("testcase")}
    link = cases[("node.node2", "nvlink gpu3--gpu5")]
    assert link.find("failure") is not None
    assert cases[("node.node3", "hca mlx5_2")].find("failure") is not None
    assert cases[("node.node1", "check gpu_matrix")].find("failure") is None
    skipped = cases[("node.node4", "check loopback:mlx5_0")].find("skipped")
    assert skipped is not None and "no RDMA device" in skipped.get("message")
    # node checks are under node.<host>, not repeated under the host's own classname
    assert not [
        c for c in suite.iter("testcase") if c.get("classname") in HOSTS and c.get("name").startswith("node/")
    ]


def test_metrics_have_component_values_and_findings(reported) -> None:
    run, _ = reported
    families = {
        f.name: f for f in text_string_to_metric_families((run / "report" / "metrics.prom").read_text())
    }
    found = {
        (s.labels["host"], s.labels["kind"], s.labels["id"], s.labels["severity"]): s.value
        for s in families["collbench_component_finding"].samples
    }
    assert found == {("node2", "nvlink", "gpu3--gpu5", "fail"): 1, ("node3", "hca", "mlx5_2", "fail"): 1}
    values = {
        (s.labels["host"], s.labels["kind"], s.labels["id"], s.labels["metric"]): s.value
        for s in families["collbench_component_value"].samples
    }
    assert values[("node3", "hca", "mlx5_2", "loopback")] == 300.0
    assert values[("node1", "port", "mlx5_0:1", "port_rate")] == 400.0
    assert values[("node2", "gpu_pair", "gpu3--gpu5", "d2d_read_ce")] < 300
    # no series for each of the 144 NVLinks' speed and unchanged counters of a node
    assert not [key for key in values if key[1] == "nvlink"]


class _Page(HTMLParser):
    """The attention list's items, every image by id, the node-check table's rows."""

    def __init__(self) -> None:
        super().__init__()
        self.where: list[str] = []
        self.attention: list[str] = []
        self.images: dict[str, str] = {}
        self.rows: list[list[str]] = []
        self._text: list[str] | None = None

    def handle_starttag(self, tag, attrs) -> None:
        attrs = dict(attrs)
        if attrs.get("id"):
            self.where.append(attrs["id"])
        if tag == "img" and attrs.get("id"):
            self.images[attrs["id"]] = attrs["src"].partition("base64,")[2]
        if tag == "li" and "attention" in self.where[-3:]:
            self._text = []
        if tag == "tr" and self.where and self.where[-1] == "node-check-table":
            self.rows.append([])

    def handle_endtag(self, tag) -> None:
        if tag == "li" and self._text is not None:
            self.attention.append(" ".join("".join(self._text).split()))
            self._text = None

    def handle_data(self, data) -> None:
        if self._text is not None:
            self._text.append(data)
        elif self.rows and self.where and self.where[-1] == "node-check-table" and data.strip():
            self.rows[-1].append(data.strip())


def _red_cells(b64: str) -> int:
    pixels = imread(io.BytesIO(base64.b64decode(b64)), format="png")[..., :3]
    red = (pixels[..., 0] > 0.7) & (pixels[..., 1] < 0.3) & (pixels[..., 2] < 0.3)
    return int(red.sum())


def test_html_names_the_components_first_and_draws_their_matrix(reported) -> None:
    run, _ = reported
    page = _Page()
    page.feed((run / "report" / "index.html").read_text())
    # each component first, with its repair, before the hosts' own lines
    assert page.attention[0].startswith("ticket node2 nvlink gpu3--gpu5:")
    assert page.attention[1].startswith("ticket node3 hca mlx5_2:")
    # a heatmap for each failing node with a GPU matrix, and the fleet median's
    assert "gpu-matrix-node2" in page.images and "gpu-matrix-median-1" in page.images
    assert "gpu-matrix-node1" not in page.images
    # the slow pair's two cells are red beyond the colour bar's swatch that both images have
    assert _red_cells(page.images["gpu-matrix-node2"]) > _red_cells(page.images["gpu-matrix-median-1"]) + 200
    assert _red_cells(page.images["hca-bars"]) > 0  # node3's mlx5_2, a red dot below the line
    skipped = [row for row in page.rows if row[:1] == ["node4"] and "skipped" in row]
    assert skipped and all(any("no RDMA device" in cell for cell in row) for row in skipped)


def test_tickets_name_the_component_and_its_evidence(reported) -> None:
    run, _ = reported
    tickets = (run / "report" / "tickets.md").read_text()
    assert "node3: hca mlx5_2 (ticket)" in tickets
    assert "- hosts/node3/node/loopback-mlx5_2.txt" in tickets
    assert "node2: nvlink gpu3--gpu5 (ticket)" in tickets
    assert "node4" not in tickets  # skipped is no finding, and no ticket
