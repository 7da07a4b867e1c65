"""Rail findings in `collbench report`, read by real consumers: results.json (json), junit.xml
(xml.etree), metrics.prom (prometheus_client's parser), index.html (html.parser, the heatmap
decoded by matplotlib), tickets.md. Rail findings come first in "needs attention" and the tickets.

Run directories: tests/rail_factory.py (real nccl-tests pair logs, a real ib_write_bw figure)."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import math
import xml.etree.ElementTree as ET
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest
from matplotlib.image import imread
from prometheus_client.parser import text_string_to_metric_families

from collbench_py.cli import main
from collbench_py.report import rail_view
from collbench_py.rundir.load import load_run_dir
from collbench_py.verdicts import judge
from tests.rail_factory import bad_nic_run, bad_rail_run, healthy_gbits, healthy_run


def _report(run: Path) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["report", str(run)])
    return code, out.getvalue()


@pytest.fixture(scope="module")
def nic(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    run = bad_nic_run(tmp_path_factory.mktemp("nic"))
    return (run, *_report(run))


@pytest.fixture(scope="module")
def leaf(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    run = bad_rail_run(tmp_path_factory.mktemp("leaf"))
    return (run, *_report(run))


@pytest.fixture(scope="module")
def nic_and_link(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    """The bad NIC and, as well, a failed link node6--node8 that the pair logs name."""
    run = bad_nic_run(tmp_path_factory.mktemp("nic-link"), failed_link=("node6", "node8"))
    return (run, *_report(run))


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    run = healthy_run(tmp_path_factory.mktemp("healthy"))
    return (run, *_report(run))


def _results(run: Path) -> dict:
    return json.loads((run / "report" / "results.json").read_text())


def test_results_json_rails_section(nic) -> None:
    run, code, _ = nic
    assert code == 1
    rails = _results(run)["rails"]
    assert rails["hosts"]["node3"][2] == {"index": 2, "hca": "mlx5_2", "gpu": 2}
    slow = [m for m in rails["measurements"] if m["status"] == "slow"]
    assert {(tuple(m["pair"]), m["rail"]) for m in slow} == {(("node1", "node3"), 2), (("node3", "node5"), 2)}
    assert sorted(m["gbits"] for m in slow) == pytest.approx(
        [healthy_gbits() * 0.45, healthy_gbits() * 0.5], rel=0.01
    )
    [finding] = rails["findings"]
    assert finding["kind"] == "bad nic" and finding["subject"] == "node3:rail2"
    assert (finding["host"], finding["rail"], finding["hca"]) == ("node3", 2, "mlx5_2")
    assert len(finding["witnesses"]) == 8
    hosts = {h["host"]: h for h in _results(run)["hosts"]}
    assert hosts["node3"]["verdict"] == "failed" and hosts["node3"]["reasons"][0].startswith(
        "NIC mlx5_2 of rail 2"
    )
    assert not any("bad node" in r for h in hosts.values() for r in h["reasons"])
    assert {hosts[p]["verdict"] for p in ("node1", "node4", "node5")} == {"passed"}


def test_results_json_rails_empty_without_rail_checks(tmp_path: Path) -> None:
    from tests.rundir_factory import RunSpec, build_run_dir  # noqa: PLC0415

    run = build_run_dir(tmp_path, RunSpec(hosts=["a1", "a2", "a3"], pairs="all"))
    _report(run)
    rails = _results(run)["rails"]
    assert rails["hosts"] == {} and rails["measurements"] == [] and rails["findings"] == []


def _cases(run: Path) -> dict[str, ET.Element]:
    root = ET.parse(run / "report" / "junit.xml").getroot()
    return {f"{c.get('classname')}.{c.get('name')}": c for c in root.iter("testcase")}


def test_junit_bad_nic_and_bad_rail_cases(nic, leaf) -> None:
    cases = _cases(nic[0])
    failure = cases["rail.node3.rail2"].find("failure")
    assert failure is not None and "NIC mlx5_2 of rail 2" in failure.get("message", "")
    # Pairs measured rail by rail that no finding explains: a passing case each.
    assert cases["rail.pairs.node2--node4"].find("failure") is None
    assert "rail.pairs.node1--node3" not in cases  # its finding's case says it
    # The rail findings' cases come first in the file.
    first = next(iter(ET.parse(nic[0] / "report" / "junit.xml").getroot().iter("testcase")))
    assert first.get("classname") == "rail.node3"
    leaf_cases = _cases(leaf[0])
    assert leaf_cases["rail.rail1"].find("failure") is not None
    assert not [k for k in leaf_cases if k.startswith("rail.node")]


def _families(run: Path) -> dict:
    text = (run / "report" / "metrics.prom").read_text()
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_metrics_rail_series(nic, leaf, healthy) -> None:
    families = _families(nic[0])
    values = {(s.labels["host"], s.labels["rail"]): s for s in families["collbench_rail_gbits"].samples}
    # The lowest measurement per host rail, with the peer it was measured with.
    assert values[("node3", "2")].value == pytest.approx(healthy_gbits() * 0.45, rel=0.01)
    assert values[("node3", "2")].labels["peer"] == "node5"
    assert values[("node1", "2")].value == pytest.approx(healthy_gbits() * 0.5, rel=0.01)
    assert values[("node3", "1")].value == pytest.approx(healthy_gbits(), rel=0.01)
    found = [
        (s.labels["kind"], s.labels["host"], s.labels["rail"])
        for s in families["collbench_rail_finding"].samples
    ]
    assert found == [("bad nic", "node3", "2")]
    leaf_found = _families(leaf[0])["collbench_rail_finding"].samples
    assert [(s.labels["kind"], s.labels["host"], s.labels["rail"]) for s in leaf_found] == [
        ("bad rail", "", "1")
    ]
    assert not _families(healthy[0])["collbench_rail_finding"].samples


class _Page(HTMLParser):
    """The attention list's items and every image by id."""

    def __init__(self) -> None:
        super().__init__()
        self.where: list[str] = []
        self.attention: list[str] = []
        self.images: dict[str, str] = {}
        self._text: list[str] | None = None

    def handle_starttag(self, tag, attrs) -> None:
        attrs = dict(attrs)
        if attrs.get("id"):
            self.where.append(attrs["id"])
        if tag == "img" and attrs.get("id"):
            self.images[attrs["id"]] = attrs["src"].partition("base64,")[2]
        if tag == "li" and "attention" in self.where[-3:]:
            self._text = []

    def handle_endtag(self, tag) -> None:
        if tag == "li" and self._text is not None:
            self.attention.append(" ".join("".join(self._text).split()))
            self._text = None

    def handle_data(self, data) -> None:
        if self._text is not None:
            self._text.append(data)


def _page(run: Path) -> _Page:
    page = _Page()
    page.feed((run / "report" / "index.html").read_text())
    return page


def test_html_rail_findings_first_in_needs_attention(nic, nic_and_link, leaf, healthy) -> None:
    page = _page(nic[0])
    assert "rail-heatmap" in page.images
    page = _page(nic_and_link[0])
    assert page.attention[0].startswith("bad nic node3 node3: NIC mlx5_2 of rail 2:")
    assert "switch port on the leaf of rail 2" in page.attention[0]
    assert any(item.startswith("bad link node6 -- node8") for item in page.attention[1:])
    leaf_page = _page(leaf[0])
    assert leaf_page.attention[0].startswith("bad rail rail 1: its leaf switch (fabric-wide)")
    assert "rail-heatmap" in _page(healthy[0]).images
    assert not any(item.startswith("bad ") for item in _page(healthy[0]).attention)


def test_report_md_rail_findings_first_in_needs_attention(nic_and_link) -> None:
    text = (nic_and_link[0] / "report" / "report.md").read_text()
    items = [line for line in text.split("## Needs attention", 1)[1].splitlines() if line.startswith("- ")]
    assert items[0].startswith("- **BAD NIC node3: NIC mlx5\\_2 of rail 2**")
    assert any(item.startswith("- **BAD LINK node6 -- node8**") for item in items[1:])


def _red_pixels(b64: str) -> int:
    pixels = imread(io.BytesIO(base64.b64decode(b64)), format="png")[..., :3]
    # the two lowest bands: #7f0000 (< 50 %) and #d32f2f (50-80 %)
    red = (pixels[..., 0] > 0.45) & (pixels[..., 1] < 0.3) & (pixels[..., 2] < 0.3)
    return int(red.sum())


def test_heatmap_paints_the_slow_host_rail(nic) -> None:
    """The same hosts and rails with node3's rail 2 healthy: only the slow cell adds red."""
    report = judge(load_run_dir(nic[0]))
    assert report.rails is not None
    mended = replace(
        report.rails,
        measurements=tuple(
            replace(m, gbits=healthy_gbits(), status="ok") if m.status == "slow" else m
            for m in report.rails.measurements
        ),
    )
    slow = rail_view.heatmap(report)
    fine = rail_view.heatmap(replace(report, rails=mended))
    assert slow is not None and fine is not None
    assert _red_pixels(slow) > _red_pixels(fine) + 200


def test_heatmap_cells_not_measured_are_blank(nic) -> None:
    report = judge(load_run_dir(nic[0]))
    assert report.rails is not None
    # node2 measured only with node4 and only rails 0, 1: rails 2 and 3 never measured.
    partial = replace(
        report.rails,
        measurements=tuple(m for m in report.rails.measurements if "node2" not in m.pair or m.rail < 2),
    )
    hosts, count, grid = rail_view.grid_of(partial)
    row = grid[hosts.index("node2")]
    assert count == 4 and not math.isnan(row[0]) and math.isnan(row[2]) and math.isnan(row[3])
    assert grid[hosts.index("node3")][2] == pytest.approx(45, abs=1)


def test_tickets_rail_first(nic_and_link, leaf) -> None:
    tickets = (nic_and_link[0] / "report" / "tickets.md").read_text()
    titles = [line for line in tickets.splitlines() if line.startswith("## ")]
    assert "bad nic node3: NIC mlx5_2 of rail 2" in titles[0] and "cable or transceiver" in titles[0]
    assert "bad link node6--node8" in titles[1]
    doc = _results(nic_and_link[0])
    assert [t["kind"] for t in doc["tickets"]] == ["bad nic", "bad link"]
    assert doc["tickets"][0]["hosts"] == ["node3"]
    leaf_first = next(
        line
        for line in (leaf[0] / "report" / "tickets.md").read_text().splitlines()
        if line.startswith("## ")
    )
    assert "bad rail rail 1: its leaf switch" in leaf_first


def test_console_names_the_rail_finding_before_the_pairs(nic) -> None:
    _, _, stdout = nic
    lines = stdout.splitlines()
    rail = next(i for i, line in enumerate(lines) if line.startswith("rail findings:"))
    pairs = next(i for i, line in enumerate(lines) if line.startswith("pairs conclusion:"))
    assert rail < pairs
    assert lines[rail + 1].split()[:4] == ["BAD", "NIC", "node3:", "NIC"]
