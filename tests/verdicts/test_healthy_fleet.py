"""A healthy multi-node H100 fleet passes with no warning; one host degraded fails that host alone.

The run directory is built from real logs and captures (tests/data/fleet/README.md names each):
pairs ran a real 2-node H100 ring all_reduce and a real 2-node alltoall, every host has the HGX H100
topology with 8 GPU NICs and 4 storage NICs, and its facts were read at idle, when nvidia-smi shows
the PCIe link at gen 1. Each of these once failed or warned a healthy fleet.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from collbench_py.cli import main
from collbench_py.exitcodes import ExitCode
from collbench_py.report.conclusion import tickets
from collbench_py.report.machine import head
from collbench_py.rundir.load import load_run_dir, parse_gpu_links
from collbench_py.rundir.planfile import PlanRecord, PlanRound
from collbench_py.verdicts import Report, judge
from tests.rundir_factory import (
    CORPUS,
    H100_LOG,
    H100_TOPO_12NICS,
    RunSpec,
    build_run_dir,
    gpu_link_csv,
    make_facts,
)

DATA = Path(__file__).parents[1] / "data"
A3MEGA_ALL_REDUCE = (
    DATA / "extra" / "nccl-tests-issues" / "gcp-a3mega-2node-16rank-header-lost-hash-first-device-line.txt"
)
ALLTOALL_2NODE = CORPUS / "nccl-tests" / "alltoall-v2.18.3-2node-16rank-inplace-NA-mpi-noise-in-table.txt"
IDLE_PCIE = DATA / "fleet" / "l40s-8gpu-idle-pcie-query.csv"
UNDER_LOAD = DATA / "fleet" / "h100-pcie-under-load-gpu-link.csv"
HOSTS = ["node01", "node02", "node03", "node04"]


def idle_pcie() -> tuple[int, int]:
    """(gen, width) every GPU of the real idle capture shows: gen 1, full width."""
    with IDLE_PCIE.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f, skipinitialspace=True))
    gens = {int(r["pcie.link.gen.current"]) for r in rows}
    widths = {int(r["pcie.link.width.current"]) for r in rows}
    assert len(gens) == 1 and len(widths) == 1
    return gens.pop(), widths.pop()


def h100_facts(name: str) -> dict:
    """An HGX H100 read at idle: PCIe gen 5 x16 links showing the idle gen, 12 InfiniBand ports
    named as the topology's NIC legend (mlx5_0..mlx5_11), of which 8 are next to a GPU."""
    gen, width = idle_pcie()
    return make_facts(name, pcie=(gen, 5, width, 16), ib_ports=12, ib_rate=400)


def fleet(**changes) -> RunSpec:
    spec = RunSpec(
        hosts=HOSTS,
        intra={"all_reduce": H100_LOG},
        topo=H100_TOPO_12NICS,
        facts={h: h100_facts(h) for h in HOSTS},
        pairs="all",
        pair_log=A3MEGA_ALL_REDUCE,
        pair_collectives=("all_reduce", "alltoall"),
        pair_log_override={"alltoall": ALLTOALL_2NODE},
        rename_hosts=True,
    )
    for key, value in changes.items():
        setattr(spec, key, value)
    return spec


def judged(tmp_path: Path, spec: RunSpec) -> Report:
    return judge(load_run_dir(build_run_dir(tmp_path, spec)))


def _problems(report: Report) -> list[tuple[str, str, str]]:
    return [(h.host, c.name, c.reason) for h in report.hosts.values() for c in h.problems] + [
        ("fleet", c.name, c.reason) for c in report.fleet_checks if c.status in ("warn", "fail")
    ]


def test_a_healthy_h100_fleet_passes_with_no_warning(tmp_path: Path) -> None:
    report = judged(tmp_path, fleet())
    assert report.profile is not None and report.profile.name == "h100-sxm"
    assert _problems(report) == []
    assert report.exit_code(strict=True) == ExitCode.OK
    # The fabric bar comes from the 8 NICs next to a GPU, not the 12 ports: 0.9 x 0.8 x 400 GB/s.
    fabric = next(c for c in report.fleet_checks if c.name == "pairs/all_reduce")
    assert fabric.status == "pass" and "288 GB/s needed" in fabric.reason
    assert "PIX/PXB to a GPU in topo -m (8 of 12" in fabric.reason
    # alltoall has no NIC-line bar, and the report says why.
    alltoall = next(c for c in report.fleet_checks if c.name == "pairs/alltoall/bar")
    assert alltoall.status == "note" and "judged against the other pairs only" in alltoall.reason
    # results.json states each pair bar with its source.
    bars = head(report, 0)["profile"]["inter"]["collectives"]
    assert bars["all_reduce"]["basis"] == "nic_line" and bars["all_reduce"]["fraction"] == 0.8
    assert bars["alltoall"]["basis"] == bars["sendrecv"]["basis"] == "fleet"
    # Idle PCIe is a note, not a verdict.
    pcie = next(c for c in report.hosts["node01"].checks if c.name == "facts/pcie")
    assert pcie.status == "note" and "gen 1 of 5" in pcie.reason and "at idle" in pcie.reason


def test_the_same_fleet_under_load_at_full_pcie_passes(tmp_path: Path) -> None:
    # What a real H100 showed under load (tests/data/fleet), for each GPU of each host.
    (real,), _ = parse_gpu_links(UNDER_LOAD.read_text(encoding="utf-8"))
    assert (real.gen, real.gen_max, real.width, real.width_max) == (5, 5, 16, 16)
    links = {h: {"all_reduce": gpu_link_csv(h100_facts(h), gen=real.gen, width=real.width)} for h in HOSTS}
    report = judged(tmp_path, fleet(gpu_links=links))
    assert _problems(report) == []
    pcie = next(c for c in report.hosts["node02"].checks if c.name == "facts/pcie")
    assert pcie.status == "pass" and "under load" in pcie.reason


@pytest.mark.parametrize("collective", ["all_reduce", "alltoall"])
def test_one_host_at_80_percent_fails_that_host_alone(tmp_path: Path, collective: str) -> None:
    slow = "node03"
    others = [h for h in HOSTS if h != slow]
    scale = {tuple(sorted((slow, h))): 0.8 for h in others}
    spec = fleet(pair_scale=scale, pair_collectives=(collective,))
    report = judged(tmp_path, spec)
    assert [h.host for h in report.hosts.values() if h.verdict != "passed"] == [slow]
    failed = [c for c in report.hosts[slow].checks if c.status == "fail"]
    assert [c.name for c in failed] == [f"pairs/{collective}"]
    reason = failed[0].reason
    assert "bad node" in reason and f"{collective} pair median" in reason and "slow below" in reason
    assert report.exit_code(strict=False) == ExitCode.FAILED
    for host in others:
        assert report.hosts[host].verdict == "passed", _problems(report)


# ---- a bad link: the link fails, neither of its ends ---------------------------------------------------

BAD_LINK = ("node01", "node03")


@pytest.fixture(scope="module")
def bad_link_fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Report, int, str]:
    """The healthy fleet with one link's pairs (every collective) at half speed, reported by the CLI."""
    spec = fleet(pair_scale={BAD_LINK: 0.5})
    run = build_run_dir(tmp_path_factory.mktemp("badlink"), spec)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["report", str(run)])
    return run, judge(load_run_dir(run)), code, out.getvalue()


def test_a_bad_link_fails_the_link_not_its_hosts(bad_link_fleet) -> None:
    _, report, code, stdout = bad_link_fleet
    assert [h.host for h in report.hosts.values() if h.verdict != "passed"] == [], _problems(report)
    assert report.count("failed") == 0
    links = report.links_failed
    assert sorted((f.subject, f.collective) for f in links) == [
        ("node01--node03", "all_reduce"),
        ("node01--node03", "alltoall"),
    ]
    for f in links:
        assert f.hosts == BAD_LINK and f.source == "logs"
        assert "node01: 2 of its 3 pairs normal; node03: 2 of its 3 pairs normal" in f.reason
        assert [p.label for p in f.pairs] == ["node01--node03"] and f.pairs[0].status == "slow"
    assert report.unresolved == [] and report.conclusion.of("bad node") == []
    assert code == report.exit_code(strict=False) == ExitCode.FAILED
    # The console's first screen: 0 failed hosts, the link counted and named with both ends.
    lines = stdout.splitlines()
    assert (
        lines[0].startswith("collbench report")
        and ": 0 failed, 0 unreachable, 0 warned, 4 passed" in lines[0]
    )
    assert "; 1 link(s) failed" in lines[0]
    # One link, slow in both collectives: one link to ticket, a line per collective below.
    assert lines[2].startswith(
        "pairs conclusion: 0 bad nodes, 1 bad link to ticket (node01--node03), 0 unresolved"
    )
    assert "BAD LINK    node01--node03 (all_reduce, logs)" in stdout
    assert "165 GB/s slow (pair median 331 GB/s)" in stdout  # measured against what
    for end in BAD_LINK:
        check = next(c for c in report.hosts[end].checks if c.name == "pairs/all_reduce")
        assert check.status == "note" and "one end of bad link node01--node03" in check.reason


def test_a_bad_link_in_every_machine_output(bad_link_fleet) -> None:
    run, _, _, _ = bad_link_fleet
    out = run / "report"
    doc = json.loads((out / "results.json").read_text())
    assert doc["summary"]["failed"] == 0 and doc["summary"]["links_failed"] == 1
    assert doc["summary"]["exit_code"] == 1
    assert doc["links"]["counts"] == {"bad_nodes": 0, "bad_links": 1, "unresolved": 0}
    assert [(f["subject"], f["collective"]) for f in doc["links"]["bad_links"]] == [
        ("node01--node03", "all_reduce"),
        ("node01--node03", "alltoall"),
    ]
    first = doc["links"]["bad_links"][0]
    assert first["hosts"] == list(BAD_LINK) and first["action"] == "ticket the link"
    assert first["logs"] == [first["pairs"][0]["log"]] and (run / first["logs"][0]).is_file()
    assert {h["verdict"] for h in doc["hosts"]} == {"passed"}
    # junit.xml: one failed testcase per link, none for a host.
    suite = ET.parse(out / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    failed = [
        (c.get("classname"), c.get("name")) for c in suite.iter("testcase") if c.find("failure") is not None
    ]
    assert sorted(failed) == [
        ("link", "pairs/all_reduce/node01--node03"),
        ("link", "pairs/alltoall/node01--node03"),
    ]
    assert suite.get("failures") == "2"
    # metrics.prom: the link as a sample with both ends, and the counts by kind.
    families = {f.name: f for f in text_string_to_metric_families((out / "metrics.prom").read_text())}
    links = families["collbench_link_failed"].samples
    assert {(s.labels["host_a"], s.labels["host_b"], s.labels["collective"]) for s in links} == {
        ("node01", "node03", "all_reduce"),
        ("node01", "node03", "alltoall"),
    }
    kinds = {s.labels["kind"]: s.value for s in families["collbench_pairs_findings"].samples}
    assert kinds == {"bad node": 0, "bad link": 1, "unresolved": 0}
    assert {s.value for s in families["collbench_host_verdict"].samples} == {0}
    # hosts.csv: each end names its link; its verdict stays passed.
    with (out / "hosts.csv").open(encoding="utf-8") as f:
        rows = {r["host"]: r for r in csv.DictReader(f)}
    assert rows["node01"]["bad_links"] == "node01--node03 (all_reduce) | node01--node03 (alltoall)"
    assert rows["node02"]["bad_links"] == "" and rows["node01"]["verdict"] == "passed"


def test_a_bad_link_has_a_ticket_to_paste(bad_link_fleet) -> None:
    run, report, _, _ = bad_link_fleet
    doc = json.loads((run / "report" / "results.json").read_text())
    # One link slow in two collectives: one cable, one ticket naming both measurements.
    (ticket,) = doc["tickets"]
    assert ticket["kind"] == "bad link" and ticket["hosts"] == list(BAD_LINK)
    assert ticket["collectives"] == ["all_reduce", "alltoall"]
    assert ticket["title"].endswith("bad link node01--node03: check the cable, switch ports, route")
    body = ticket["body"]
    stat = report.stats[("pair", "all_reduce")]
    slow = next(p for p in report.pairs if p.label == "node01--node03" and p.collective == "all_reduce")
    # What was measured against what: the pair's busbw, its share of the baseline, the bar.
    assert f"- node01--node03: {slow.busbw:.3g} GB/s (50 % of the baseline), slow" in body
    assert f"pair baseline (median of each host's median pair) {stat.median:.3g} GB/s" in body
    assert "Measured (busbw at" in body and "GiB" in body
    # On which hardware (GPU identity from facts.json) and with which evidence files.
    assert "- node01: 8x NVIDIA H100 80GB HBM3 (GPU UUIDs: GPU-node01-0," in body
    assert "- node03: 8x NVIDIA H100 80GB HBM3" in body and "HCAs mlx5_0:1 Active" in body
    assert f"- {slow.log}" in body and "- hosts/node01/facts.json" in body
    assert body.count("Hardware:") == 1 and "**bad link node01--node03, alltoall**" in body
    assert "- inter/pairs/node01--node03/alltoall.log" in body
    markdown = (run / "report" / "tickets.md").read_text()
    assert ticket["title"] in markdown and body in markdown
    # A serial, where the facts carry one, is named instead of the UUID.
    facts = json.loads((run / "hosts" / "node03" / "facts.json").read_text())
    facts["gpus"][0]["serial"] = "1654922001234"
    (run / "hosts" / "node03" / "facts.json").write_text(json.dumps(facts))
    again = judge(load_run_dir(run))
    body = tickets(again)[0]["body"]
    assert "GPU serials: 1654922001234, GPU-node03-1" in body


def test_a_bad_link_on_the_first_screen_of_the_html_and_markdown(bad_link_fleet) -> None:
    run, _, _, _ = bad_link_fleet
    html = (run / "report" / "index.html").read_text()
    top = html[: html.index("<h2>")]
    assert 'id="links-tile"><div class="n">1</div>links failed' in top
    assert 'data-kind="bad link" data-subject="node01--node03"' in top
    assert "pairs conclusion: 0 bad nodes, 1 bad link to ticket (node01--node03)" in top
    assert "<h3>Needs attention</h3>" in top and "ticket text" in top
    markdown = (run / "report" / "report.md").read_text()
    head = markdown[: markdown.index("## Hosts")]
    assert "**1 link(s) failed**" in head and "**BAD LINK node01 -- node03** (all\\_reduce, logs)" in head


def test_the_plan_and_the_logs_make_one_conclusion(tmp_path: Path) -> None:
    """4 hosts, round robin (3 rounds), node04's pairs at half speed; the plan recorded no decision.
    The console says the conclusion once, and its count is the table's."""
    rounds = [[("node01", "node02"), ("node03", "node04")], [("node01", "node03"), ("node02", "node04")]]
    rounds.append([("node01", "node04"), ("node02", "node03")])
    plan = PlanRecord(
        schedule="round-robin",
        collective="all_reduce",
        size_bytes=17179869184,
        k=3,
        localisation_rounds=0,
        seed="0",
        hosts=tuple(HOSTS),
        groups={},
        rounds=tuple(PlanRound(n, "round-robin", tuple(ps), {}) for n, ps in enumerate(rounds, start=1)),
        decisions=(),
        log=(),
        finished=True,
    )
    slow = {p: 0.5 for ps in rounds for p in ps if "node04" in p}
    spec = fleet(pair_rounds=rounds, round_scale=dict.fromkeys((1, 2, 3), slow), plan=plan)
    spec.pair_collectives = ("all_reduce",)
    run = build_run_dir(tmp_path, spec)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["report", str(run)])
    lines = out.getvalue().splitlines()
    assert code == 1
    said = [line for line in lines if "bad link" in line and "unresolved" in line]
    assert len(said) == 1, lines
    assert said[0].startswith("pairs conclusion: 1 bad node to drain (node04), 0 bad links, 0 unresolved")
    assert "from the pair plan's decisions (round-robin, 3 rounds, all_reduce)" in said[0]
    header = next(i for i, line in enumerate(lines) if line.startswith("HOST "))
    table = [line.split() for line in lines[header + 1 :] if line.startswith("node")]
    failed = [row[0] for row in table if row[1] == "FAILED"]
    assert failed == ["node04"] and "bad node: all 3 of its pairs" in lines[header + 1]
    doc = json.loads((run / "report" / "results.json").read_text())
    assert doc["links"]["counts"] == {"bad_nodes": 1, "bad_links": 0, "unresolved": 0}
    assert [f["subject"] for f in doc["links"]["bad_nodes"]] == ["node04"]
    assert doc["summary"]["failed"] == 1
    plan_note = next(c for c in doc["fleet"]["checks"] if c["name"] == "pairs/all_reduce/plan")
    assert "bad node(s)" not in plan_note["reason"] and "decided: no decision" in plan_note["reason"]
    html = (run / "report" / "index.html").read_text()
    assert html.count("0 bad node(s)") == 0 and "1 bad node to drain (node04)" in html


def test_a_slow_pair_with_a_lone_end_is_unresolved_not_a_link(tmp_path: Path) -> None:
    """node04 was measured with node03 only: a slow node03--node04 is node04 or the link, which one
    pair cannot tell. Listed as unresolved (exit 1), node04 not cleared, node03 cleared by its others."""
    pairs = [("node01", "node02"), ("node01", "node03"), ("node02", "node03"), ("node03", "node04")]
    spec = fleet(pair_rounds=[pairs], pair_scale={("node03", "node04"): 0.5})
    spec.pair_collectives = ("all_reduce",)
    report = judged(tmp_path, spec)
    (found,) = report.unresolved
    assert (found.subject, found.source) == ("node03--node04", "logs")
    assert "one end has no other pair" in found.reason and "known-good node" in found.reason
    assert report.links_failed == [] and report.count("failed") == 0
    pairs_check = {
        h: next(c for c in v.checks if c.name == "pairs/all_reduce") for h, v in report.hosts.items()
    }
    assert pairs_check["node04"].status == "warn" and "not cleared" in pairs_check["node04"].reason
    assert (
        pairs_check["node03"].status == "note"
        and "cleared by its other pairs" in pairs_check["node03"].reason
    )
    assert report.exit_code(strict=False) == ExitCode.FAILED
