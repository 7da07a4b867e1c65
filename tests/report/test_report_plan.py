"""The pair plan (inter/pairs/plan.json) in `collbench report`: its suspects and witnesses first in
every output, its decisions in the verdicts, a damaged plan a note; no host x host matrix at fleet
scale; rows held packed equal to the parsed ones.

The run directories are real corpus logs (tests/rundir_factory.py); the plan comes from a real
Planner run over the busbw those logs carry."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import pickle
import re
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from collbench_py.cli import main
from collbench_py.history.records import size_summary
from collbench_py.parsers import parse_text
from collbench_py.report import plots, render
from collbench_py.rundir import results_rows
from collbench_py.rundir.load import COMMON_MASK, ROW_INTS, PackedRows, Points, load_run_dir
from collbench_py.rundir.planfile import PLAN_PATH, PlanDecision, PlanWitness, write_plan
from collbench_py.rundir.results_rows import rows_json
from collbench_py.verdicts import judge
from collbench_py.verdicts.stats import reference_sizes, series, value_at
from tests.rundir_factory import CORPUS, H100_LOG, RunSpec, build_run_dir, plan_record, run_planner

HOSTS = [f"node{i:02d}" for i in range(40)]  # above plots.HEATMAP_MAX_HOSTS
BAD_NODES = ("node07", "node23")


def _reference(log: Path) -> float:
    run = max(parse_text(log.read_text(encoding="utf-8")).runs, key=lambda r: len(r.rows))
    points = series(run)
    sizes, _ = reference_sizes([[s for s, _ in points]], 256 << 20, 3)
    value = value_at(points, sizes)
    assert value is not None
    return value


def _adaptive_spec(hosts: list[str], bad_nodes: tuple[str, ...], seed: int = 1) -> tuple[RunSpec, tuple]:
    """The run the adaptive schedule leaves: a real Planner over the busbw the scaled logs carry."""
    from collbench_py.pairs.planner import initial_rounds  # noqa: PLC0415

    first = initial_rounds(hosts, seed=seed)[0]
    link = next(p for p in first if not set(p) & set(bad_nodes))
    base = _reference(H100_LOG)
    jitter = [1.0, 0.99, 1.01, 0.995, 1.005]

    def factor(number: int, pair: tuple[str, str]) -> float:
        slow = 0.5 if set(pair) & set(bad_nodes) else 0.6 if pair == link else 1.0
        return slow * jitter[(number + hosts.index(pair[0])) % len(jitter)]

    planner = run_planner(hosts, lambda number, pair: base * factor(number, pair), seed=seed)
    spec = RunSpec(
        hosts=hosts,
        pair_rounds=[list(p) for p in planner.rounds],
        round_scale={n: {p: factor(n, p) for p in ps} for n, ps in enumerate(planner.rounds, start=1)},
        plan=plan_record(planner),
    )
    return spec, link


def _report(run: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["report", str(run)])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def adaptive(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple[str, str], int, str]:
    spec, link = _adaptive_spec(HOSTS, BAD_NODES)
    assert spec.plan is not None
    kinds = {(d.kind, d.subject) for d in spec.plan.decisions}
    assert kinds == {("bad node", "node07"), ("bad node", "node23"), ("bad link", f"{link[0]}--{link[1]}")}
    run = build_run_dir(tmp_path_factory.mktemp("plan"), spec)
    code, stdout, _ = _report(run)
    return run, link, code, stdout


def test_console_shows_the_pairs_conclusion_and_witnesses_first(adaptive) -> None:
    _, link, code, stdout = adaptive
    assert code == 1
    lines = stdout.splitlines()
    # 2 bad nodes failed; the link is counted as a link, its ends are not among the failed hosts.
    assert lines[0].startswith("collbench report") and ": 2 failed," in lines[0]
    assert "; 1 link(s) failed" in lines[0]
    header = next(i for i, line in enumerate(lines) if line.startswith("HOST "))
    said = next(i for i, line in enumerate(lines) if line.startswith("pairs conclusion:"))
    assert said < header
    assert (
        f"2 bad nodes to drain (node07, node23), 1 bad link to ticket ({link[0]}--{link[1]}), 0 unresolved"
        in lines[said]
    )
    assert "from the pair plan's decisions (adaptive" in lines[said]
    decided = [line.split()[:3] for line in lines[said + 1 : header] if line.strip()]
    assert decided == [
        ["BAD", "NODE", "node07"],
        ["BAD", "NODE", "node23"],
        ["BAD", "LINK", f"{link[0]}--{link[1]}"],
    ]
    node07 = next(line for line in lines[said + 1 : header] if "node07 (" in line)
    assert re.search(r"node0?\d*--node07|node07--node\d+", node07) and "(slow)" in node07
    # Said once: no second count of the plan's own anywhere on the screen.
    assert sum("bad link" in line and "unresolved" in line for line in lines) == 1
    rows = [line.split()[0] for line in lines[header + 1 :] if line.startswith("node")]
    assert rows[:2] == ["node07", "node23"]
    for end in link:
        assert not any(line.startswith(end) and "FAILED" in line for line in lines[header + 1 :])


def test_verdicts_take_the_plans_decisions(adaptive) -> None:
    run, link, _, _ = adaptive
    doc = json.loads((run / "report" / "results.json").read_text())
    pairs_check = {
        h["host"]: next(c for c in h["checks"] if c["name"] == "pairs/all_reduce") for h in doc["hosts"]
    }
    for node in BAD_NODES:
        assert pairs_check[node]["status"] == "fail"
        assert pairs_check[node]["reason"].startswith("bad node (pair plan): bad node " + node)
        assert any("(slow)" in line for line in pairs_check[node]["evidence"])
    for end in link:
        assert pairs_check[end]["status"] == "note", pairs_check[end]
        assert f"one end of bad link {link[0]}--{link[1]}" in pairs_check[end]["reason"]
    partners = {h for p in doc["pairs"] for h in p["hosts"] if set(p["hosts"]) & set(BAD_NODES)}
    for partner in partners - set(BAD_NODES) - set(link):
        assert pairs_check[partner]["status"] == "pass", pairs_check[partner]
    causes = {tuple(p["hosts"]): p["cause"] for p in doc["pairs"] if p["status"] == "slow"}
    assert causes[link] == "link"
    assert {c for pair, c in causes.items() if pair != link} == {"node node07", "node node23"}
    failed = {h["host"] for h in doc["hosts"] if h["verdict"] == "failed"}
    assert failed == set(BAD_NODES)
    (bad_link,) = doc["links"]["bad_links"]
    assert (bad_link["hosts"], bad_link["source"]) == (list(link), "plan")
    assert bad_link["witnesses"] and all("round" in w for w in bad_link["witnesses"])
    assert doc["summary"]["links_failed"] == 1 and doc["summary"]["exit_code"] == 1


def test_results_json_puts_the_plan_before_the_hosts(adaptive) -> None:
    run, link, _, _ = adaptive
    doc = json.loads((run / "report" / "results.json").read_text())
    keys = list(doc)
    assert keys.index("plan") < keys.index("fleet") < keys.index("hosts")
    plan = doc["plan"]
    assert [(d["kind"], d["subject"]) for d in plan["decisions"]] == [
        ("bad node", "node07"),
        ("bad node", "node23"),
        ("bad link", f"{link[0]}--{link[1]}"),
    ]
    witness = plan["decisions"][2]["witnesses"][1]
    assert witness["pair"] == f"{link[0]}--{link[1]}" and witness["status"] == "slow"
    assert witness["log"] == f"inter/pairs/{link[0]}--{link[1]}/round{witness['round']}/all_reduce.log"
    assert (run / witness["log"]).is_file()
    rounds = len(plan["rounds"])
    assert rounds >= 4 and [r["kind"] for r in plan["rounds"]] == ["initial"] * 3 + ["localisation"] * (
        rounds - 3
    )
    assert plan["log"][-1].startswith(f"done after {rounds} rounds")


def test_junit_and_metrics_list_the_plans_suspects_first(adaptive) -> None:
    run, link, _, _ = adaptive
    suite = ET.parse(run / "report" / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    order = list(dict.fromkeys(c.get("classname") for c in suite.findall("testcase")))
    assert order[:3] == ["link", "node07", "node23"]
    failures = {
        (c.get("classname"), c.get("name"))
        for c in suite.findall("testcase")
        if c.find("failure") is not None
    }
    assert {(h, "pairs/all_reduce") for h in BAD_NODES} <= failures
    assert ("link", f"pairs/all_reduce/{link[0]}--{link[1]}") in failures
    assert not {(h, "pairs/all_reduce") for h in link} & failures
    text = (run / "report" / "metrics.prom").read_text()
    families = list(text_string_to_metric_families(text))
    assert families[0].name == "collbench_pair_plan_decision"
    decided = {(s.labels["kind"], s.labels["subject"]) for s in families[0].samples}
    assert decided == {("bad node", "node07"), ("bad node", "node23"), ("bad link", f"{link[0]}--{link[1]}")}
    rounds = next(f for f in families if f.name == "collbench_pair_plan_rounds")
    planned = json.loads((run / PLAN_PATH).read_text())["rounds"]
    assert rounds.samples[0].value == len(planned) >= 4


def test_html_shows_the_plan_first_and_no_matrix_above_the_limit(adaptive) -> None:
    run, link, _, _ = adaptive
    html = (run / "report" / "index.html").read_text()
    assert html.index('id="plan"') < html.index('id="attention"') < html.index('id="hosts"')
    subjects = re.findall(r'<div class="decision" data-kind="([^"]+)" data-subject="([^"]+)">', html)
    assert subjects == [("bad node", "node07"), ("bad node", "node23"), ("bad link", f"{link[0]}--{link[1]}")]
    details = html[html.index('<details id="plan-rounds">') :]
    assert details.index('id="plan-round-table"') < details.index("</details>")
    assert "heatmap" not in html  # 40 hosts > plots.HEATMAP_MAX_HOSTS
    table = html[html.index('id="worst-pairs-all_reduce"') :]
    table = table[: table.index("</table>")]
    first = re.findall(r"<tr><td>([\w-]+)</td>", table)
    assert len(first) == render.MAX_WORST_PAIRS
    # lowest busbw first: the bad nodes' pairs (half speed), then the bad link (60 %)
    bad_node_pairs = [p for p in first if set(p.split("--")) & set(BAD_NODES)]
    assert first[: len(bad_node_pairs)] == bad_node_pairs
    assert first[len(bad_node_pairs)] == f"{link[0]}--{link[1]}"


@pytest.mark.parametrize("hosts", [plots.HEATMAP_MAX_HOSTS, plots.HEATMAP_MAX_HOSTS + 1])
def test_heatmap_only_up_to_the_limit(tmp_path: Path, hosts: int) -> None:
    names = [f"n{i:02d}" for i in range(hosts)]
    run = build_run_dir(tmp_path, RunSpec(hosts=names, pairs=list(itertools.pairwise(names))))
    report = judge(load_run_dir(run))
    drawn = plots.pair_heatmap(report, "all_reduce")
    section = render.context(report, tmp_path, 0, with_plots=False)["pair_sections"][0]
    assert (drawn is not None) == (hosts <= plots.HEATMAP_MAX_HOSTS)
    assert section["heatmap"] == (hosts <= plots.HEATMAP_MAX_HOSTS)
    assert bool(section["worst"]) == (hosts > plots.HEATMAP_MAX_HOSTS)


def test_host_table_and_sections_are_bounded(adaptive, monkeypatch: pytest.MonkeyPatch) -> None:
    run, link, _, _ = adaptive
    report = judge(load_run_dir(run))
    monkeypatch.setattr(render, "HOST_ROWS_ALL", 10)
    monkeypatch.setattr(render, "HOST_ROWS_PASSED", 3)
    monkeypatch.setattr(render, "PASSED_SECTIONS_UP_TO", 10)
    ctx = render.context(report, run / "report", 1, with_plots=False)
    rows = [h["name"] for h in ctx["hosts"] if h["row"]]
    # The 2 failed hosts and the first 3 that passed: a bad link's ends pass (the link is listed
    # in the conclusion at the top).
    assert rows[:2] == ["node07", "node23"]
    assert len(rows) == 2 + 3
    assert ctx["hosts_unlisted"] == len(HOSTS) - 5
    assert {h["name"] for h in ctx["hosts"] if h["section"]} == set(BAD_NODES)
    assert [f["subject"] for f in ctx["conclusion"]["bad_links"]] == [f"{link[0]}--{link[1]}"]


DAMAGES = {
    "not json": b"{ this is not json",
    "another schema": json.dumps({"schema": 2}).encode(),
    "unknown decision kind": None,  # built below from a real plan
    "a list": b"[1, 2, 3]",
    "nested too deeply": b"[" * 100_000 + b"]" * 100_000,
}


@pytest.fixture(scope="module")
def small_plan(tmp_path_factory: pytest.TempPathFactory):
    hosts = [f"node{i}" for i in range(1, 9)]
    spec, _ = _adaptive_spec(hosts, ("node3",), seed=2)
    return hosts, spec


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_plan_is_a_note_and_the_pairs_are_judged_from_their_logs(
    tmp_path: Path, small_plan, damage: str
) -> None:
    _, spec = small_plan
    run = build_run_dir(tmp_path, spec)
    path = run / PLAN_PATH
    if DAMAGES[damage] is None:
        data = json.loads(path.read_text())
        data["decisions"][0]["kind"] = "haunted node"
        path.write_text(json.dumps(data))
    else:
        path.write_bytes(DAMAGES[damage])
    code, stdout, stderr = _report(run)
    assert code == 1 and "Traceback" not in stderr
    assert "pair plan not used (" in stdout and str(run) not in stdout.split("\n\n")[1]
    doc = json.loads((run / "report" / "results.json").read_text())
    assert set(doc["plan"]) == {"error"} and PLAN_PATH in doc["plan"]["error"]
    assert any("the pair plan is not used" in c["reason"] for c in doc["fleet"]["checks"])
    html = (run / "report" / "index.html").read_text()
    assert "Pair plan not used" in html
    node3 = next(h for h in doc["hosts"] if h["host"] == "node3")
    check = next(c for c in node3["checks"] if c["name"] == "pairs/all_reduce")
    assert check["status"] == "fail" and check["reason"].startswith("bad node: all ")  # from the logs


def test_a_plan_linked_out_of_the_run_is_not_read(tmp_path: Path, small_plan) -> None:
    _, spec = small_plan
    run = build_run_dir(tmp_path / "a", spec)
    outside = tmp_path / "plan.json"
    (run / PLAN_PATH).rename(outside)
    (run / PLAN_PATH).symlink_to(outside)
    code, stdout, stderr = _report(run)
    assert code == 1 and "Traceback" not in stderr
    assert "links out of the run directory" in stdout


def test_the_plans_decisions_and_the_logs_never_contradict(tmp_path: Path, small_plan) -> None:
    """A plan's bad node fails that node even where the logs alone would not; an unresolved pair
    is judged from the logs (healthy here: both ends pass); a pair the logs judge slow that the
    plan decided nothing about still fails."""
    hosts, spec = small_plan
    assert spec.plan is not None
    healthy = replace(spec, plan=None, pair_scale={}, round_scale={})
    witness = PlanWitness(1, ("node1", "node2"), 1.0, "slow")
    decisions = (
        PlanDecision("bad node", "node5", (("node1", "node5"),), (witness,), "bad node node5: planted"),
        PlanDecision(
            "unresolved", "node6--node7", (("node6", "node7"),), (witness,), "unresolved node6--node7"
        ),
    )
    run = build_run_dir(tmp_path, replace(healthy, round_scale={1: {spec.pair_rounds[0][0]: 0.5}}))
    write_plan(run, replace(spec.plan, decisions=decisions))
    report = judge(load_run_dir(run))
    check = {h: next(c for c in v.checks if c.name == "pairs/all_reduce") for h, v in report.hosts.items()}
    assert check["node5"].status == "fail" and check["node5"].reason.startswith("bad node (pair plan)")
    for end in ("node6", "node7"):
        assert check[end].status == "pass", check[end]
    slow = spec.pair_rounds[0][0]
    undecided = [h for h in slow if h not in ("node5", "node6", "node7")]
    for host in undecided:
        assert check[host].status == "note", check[host]
        assert f"one end of bad link {'--'.join(slow)}" in check[host].reason
    (link,) = report.links_failed
    assert link.hosts == tuple(slow) and link.source == "logs"
    assert "the pair plan decided nothing about it" in link.reason
    passed = set(hosts) - {"node5", *slow}
    assert all(check[h].status == "pass" for h in passed)


def test_packed_rows_equal_the_parsed_ones_on_every_corpus_log() -> None:
    packed = 0
    for path in sorted((CORPUS / "nccl-tests").glob("*.txt")) + sorted((CORPUS / "rccl-tests").glob("*.txt")):
        for run in parse_text(path.read_text(encoding="utf-8", errors="replace"), file=path.name).runs:
            rows = PackedRows.of(run.rows)
            packed += isinstance(rows, PackedRows)
            assert tuple(rows) == run.rows, path.name
            assert [rows[i] for i in range(-len(rows), len(rows))] == [*run.rows, *run.rows], path.name
            assert tuple(pickle.loads(pickle.dumps(rows))) == run.rows
    assert packed > 20


def test_rows_that_cannot_be_packed_exactly_stay_as_they_are() -> None:
    run = max(parse_text(H100_LOG.read_text(encoding="utf-8")).runs, key=lambda r: len(r.rows))
    huge = (replace(run.rows[0], size=2**70), *run.rows[1:])
    assert PackedRows.of(huge) is huge
    odd = (replace(run.rows[0], oop=replace(run.rows[0].oop, busbw=3)), *run.rows[1:])  # an int, not a float
    assert PackedRows.of(odd) is odd


def test_packed_rows_keep_none_apart_from_zero() -> None:
    """A value the tool printed as N/A (None) comes back None, not 0; each field on its own."""
    run = max(parse_text(H100_LOG.read_text(encoding="utf-8")).runs, key=lambda r: len(r.rows))
    row = run.rows[0]
    variants = [replace(row, count=None), replace(row, root=None), replace(row, ip=None)]
    for name in ("time_us", "algbw", "busbw", "wrong", "error"):
        variants += [replace(row, oop=replace(row.oop, **{name: None}))]
        variants += [replace(row, ip=replace(row.ip, **{name: None}))]
    variants += [replace(row, oop=replace(row.oop, error=0.5, wrong=0))]
    rows = PackedRows.of(tuple(variants))
    assert isinstance(rows, PackedRows)
    assert tuple(rows) == tuple(variants)
    assert [rows[i] for i in range(len(rows))] == variants


def _same_odd_rows(run: Any) -> list[Any]:
    """`run` with every row changed the same way (a whole log of rows that are not the common case:
    alltoall and sendrecv print no in-place #wrong), and one with a size printed twice."""
    changes = [
        lambda r: replace(r, ip=None),
        lambda r: replace(r, ip=replace(r.ip, wrong=None)),
        lambda r: replace(r, ip=replace(r.ip, busbw=None)),
        lambda r: replace(r, oop=replace(r.oop, busbw=None, algbw=None)),
        lambda r: replace(r, oop=replace(r.oop, busbw=None, wrong=None), ip=replace(r.ip, time_us=None)),
        lambda r: replace(r, oop=replace(r.oop, busbw=None), ip=replace(r.ip, busbw=None, wrong=None)),
        lambda r: replace(r, oop=replace(r.oop, wrong=None), ip=None),
    ]
    runs = [replace(run, rows=tuple(map(change, run.rows))) for change in changes]
    return [*runs, replace(runs[1], rows=(*runs[1].rows, runs[1].rows[-1]))]


def _one_odd_mask(rows: PackedRows) -> bool:
    masks = rows.columns()[0][ROW_INTS - 1 :: ROW_INTS]
    return len(set(masks)) == 1 and masks[0] != COMMON_MASK


def test_series_of_packed_rows_is_the_series_of_its_rows() -> None:
    """stats.series reads a PackedRows from its arrays (no Row made): the same points as from the
    rows themselves, with and without the in-place half, on every corpus log and on rows with N/A."""
    run = max(parse_text(H100_LOG.read_text(encoding="utf-8")).runs, key=lambda r: len(r.rows))
    row = run.rows[-1]
    odd = [replace(row, ip=None), replace(row, oop=replace(row.oop, busbw=None))]
    odd += [
        replace(row, ip=replace(row.ip, busbw=None)),
        replace(row, size=row.size + 1, oop=replace(row.oop, busbw=None), ip=replace(row.ip, busbw=None)),
    ]
    runs = [replace(run, rows=(*run.rows, *odd))]
    runs += [replace(run, rows=(*run.rows, replace(row, oop=replace(row.oop, wrong=3))))]
    runs += [replace(run, rows=(replace(row, ip=replace(row.ip, wrong=1)), *run.rows))]
    # #wrong not checked (-c 0): in no half, or only in place, or only where there is no in-place half.
    unchecked = replace(row, oop=replace(row.oop, wrong=None), ip=replace(row.ip, wrong=None))
    runs += [replace(run, rows=(unchecked, unchecked))]
    runs += [replace(run, rows=(unchecked, replace(unchecked, ip=replace(row.ip, wrong=0))))]
    runs += [replace(run, rows=(unchecked, replace(unchecked, ip=None)))]
    runs += _same_odd_rows(run)
    for path in sorted((CORPUS / "nccl-tests").glob("*.txt")):
        runs += parse_text(path.read_text(encoding="utf-8", errors="replace"), file=path.name).runs
    packed = odd = 0
    for plain in runs:
        rows = PackedRows.of(plain.rows)
        packed += isinstance(rows, PackedRows)
        odd += isinstance(rows, PackedRows) and _one_odd_mask(rows)
        if isinstance(rows, PackedRows):
            assert rows.sizes() == [r.size for r in plain.rows]
            wrong = any(h is not None and h.wrong for r in plain.rows for h in (r.oop, r.ip))
            assert rows.any_wrong() == wrong
            checked = any(h is not None and h.wrong is not None for r in plain.rows for h in (r.oop, r.ip))
            assert rows.any_checked() == checked
        for in_place in (True, False):
            assert series(replace(plain, rows=rows), in_place) == series(plain, in_place)
            assert series(replace(plain, rows=rows), in_place) == series(plain, in_place)  # once kept
            if isinstance(rows, PackedRows):  # one copy, however often the verdicts and figures ask
                packed_run = replace(plain, rows=rows)
                assert series(packed_run, in_place) is series(packed_run, in_place)
    assert packed > 20
    assert odd >= 7


def test_points_read_as_the_tuple_of_their_points() -> None:
    """A log's series held in arrays reads, compares and pickles as the plain tuple of its points."""
    plain = ((4096, 0.255), (1 << 32, 40.995000000000005), (1 << 33, 41.5))
    points = Points((s for s, _ in plain), (v for _, v in plain))
    assert points == plain
    assert plain == points
    assert points == list(plain)
    assert points != plain[:2]
    assert points != ((4096, 0.255), (1 << 32, 40.995), (1 << 33, 41.5))
    assert tuple(points) == plain
    assert len(points) == 3
    assert points[0] == plain[0]
    assert points[-1] == plain[-1]
    assert points[1:] == plain[1:]
    assert dict(points) == dict(plain)
    assert hash(points) == hash(plain)
    assert pickle.loads(pickle.dumps(points)) == plain
    with pytest.raises(IndexError):
        points[3]


def test_history_summary_of_packed_rows_is_the_summary_of_its_rows() -> None:
    """What the history keeps per size (median busbw, algbw, time; summed #wrong), read from the
    arrays: the same as from the rows, on every corpus log and on rows with N/A or #wrong."""
    run = max(parse_text(H100_LOG.read_text(encoding="utf-8")).runs, key=lambda r: len(r.rows))
    row = run.rows[-1]
    odd = [replace(row, ip=None), replace(row, oop=replace(row.oop, busbw=None, algbw=None))]
    odd += [replace(row, ip=replace(row.ip, time_us=None, wrong=None), oop=replace(row.oop, wrong=2))]
    odd += [replace(row, size=row.size + 1, oop=replace(row.oop, busbw=None, wrong=None), ip=None)]
    runs = [replace(run, rows=(*run.rows, *odd)), *_same_odd_rows(run)]
    for path in sorted((CORPUS / "nccl-tests").glob("*.txt")) + sorted((CORPUS / "rccl-tests").glob("*.txt")):
        runs += parse_text(path.read_text(encoding="utf-8", errors="replace"), file=path.name).runs
    packed = one_odd_mask = 0
    for plain in runs:
        rows = PackedRows.of(plain.rows)
        if isinstance(rows, PackedRows):
            packed += 1
            one_odd_mask += _one_odd_mask(rows)
            assert rows.size_summary() == size_summary(plain.rows)
    assert packed > 20
    assert one_odd_mask >= 7


def test_results_json_rows_of_packed_rows_are_those_of_its_rows() -> None:
    """results.json writes a packed row with every value from the arrays: the same text as from
    the Row, on every corpus log, and on rows that are not the common case (N/A, no in-place)."""
    run = max(parse_text(H100_LOG.read_text(encoding="utf-8")).runs, key=lambda r: len(r.rows))
    row = run.rows[-1]
    odd = [replace(row, ip=None), replace(row, oop=replace(row.oop, busbw=float("inf")))]
    odd += [replace(row, count=None), replace(row, ip=replace(row.ip, time_us=float("nan"), wrong=None))]
    runs = [replace(run, rows=(*run.rows, *odd))]
    for path in sorted((CORPUS / "nccl-tests").glob("*.txt")) + sorted((CORPUS / "rccl-tests").glob("*.txt")):
        runs += parse_text(path.read_text(encoding="utf-8", errors="replace"), file=path.name).runs
    common, FAST = 0, {COMMON_MASK, COMMON_MASK | 1 << 12}  # every value; no #wrong in place
    for plain in runs:
        rows = PackedRows.of(plain.rows)
        if isinstance(rows, PackedRows):
            common += sum(1 for m in rows.columns()[0][ROW_INTS - 1 :: ROW_INTS] if m in FAST)
            assert list(rows_json(rows)) == list(rows_json(plain.rows))
    assert common > 300


def _noise_outputs(run: Path) -> tuple[Any, list, str, list[str]]:
    doc = json.loads((run / "report" / "results.json").read_text())
    families = [
        f
        for f in text_string_to_metric_families((run / "report" / "metrics.prom").read_text())
        if f.name == "collbench_pair_plan_noise"
    ]
    html = (run / "report" / "index.html").read_text()
    plan_checks = [c["reason"] for c in doc["fleet"]["checks"] if c["name"].endswith("/plan")]
    return doc["plan"].get("noise"), families, html, plan_checks


def test_the_nights_pair_noise_reaches_every_output(adaptive) -> None:
    """The noise the plan measured (plan.json) in results.json, metrics.prom (read by prometheus_client),
    the HTML plan section and the plan's fleet note: the yardstick of the mean test, shown."""
    run, _, _, _ = adaptive
    measured = json.loads((run / PLAN_PATH).read_text())["noise"]
    assert 0 < measured < 0.05  # the fixture's jitter: +-1 % around the healthy figure
    noise, families, html, plan_checks = _noise_outputs(run)
    assert noise == measured
    assert len(families) == 1 and len(families[0].samples) == 1
    assert families[0].samples[0].value == pytest.approx(measured, rel=1e-5)
    assert families[0].samples[0].labels == {"collective": "all_reduce"}
    shown = f"the night's pair noise {measured * 100:.2f} % of the fleet"
    assert shown in html
    assert plan_checks and f"the night's pair noise {measured:.2%} of the fleet" in plan_checks[0]


def test_a_plan_without_measured_noise_shows_none(tmp_path: Path, small_plan) -> None:
    """An older plan.json (or one stopped before its initial rounds ended) has no noise: no sample
    of 0, no line."""
    _, spec = small_plan
    run = build_run_dir(tmp_path, spec)
    path = run / PLAN_PATH
    data = json.loads(path.read_text())
    data.pop("noise", None)
    path.write_text(json.dumps(data))
    _report(run)
    noise, families, html, plan_checks = _noise_outputs(run)
    assert noise is None and families == []
    assert "the night's pair noise" not in html
    assert plan_checks and "pair noise" not in plan_checks[0]


@pytest.mark.parametrize(
    ("value", "as_printed"),
    [
        (355.9, True),
        (0.123456, True),  # six decimals: round(value, 6) is the same float
        (-0.0, True),
        (123456789.5, True),
        (1234567890123.25, True),  # above 2**33: round(value, 6) is the value
        (0.1234567, False),  # seven decimals: results.json holds 0.123457
        (2 / 3, False),
        (1.2345e-05, False),  # an exponent: results.json holds 1.2e-05
        (float("nan"), False),
        (float("inf"), False),
    ],
)
def test_results_json_rows_written_a_column_at_a_time_round_as_a_row_at_a_time(
    value: float, as_printed: bool
) -> None:
    """A packed run's records are made a column at a time only where every float's repr is what
    results.json holds (rounded to 6 places, null where not finite); any other value sends the run
    to the row-at-a-time writer. Either way, the text is the Row's."""
    run = max(parse_text(H100_LOG.read_text(encoding="utf-8")).runs, key=lambda r: len(r.rows))
    row = run.rows[-1]
    plain = (*run.rows[:-1], replace(row, oop=replace(row.oop, busbw=value)))
    packed = PackedRows.of(plain)
    assert isinstance(packed, PackedRows)
    assert (results_rows._whole_rows("", packed) is not None) is as_printed
    written = list(rows_json(packed))
    assert written == list(rows_json(plain))
    assert json.loads("{" + written[-1][1:])["oop"]["busbw"] == results_rows.number(value)
