"""Rules of the verdicts that a test must hold: each test here fails when its rule is changed.

Run directories are built from real corpus logs and topologies (tests/rundir_factory.py); where a rule
needs a log no corpus file shows (an out-of-bounds count with no wrong row, NCCL_P2P_DISABLE set), one
line of a real log is changed, and the test says which.
"""

from __future__ import annotations

from pathlib import Path

from collbench_py.parsers import parse_file
from collbench_py.rundir.load import load_run_dir
from collbench_py.verdicts import Check, Options, Report, judge
from collbench_py.verdicts.pairs import blame_nodes
from collbench_py.verdicts.stats import reference_sizes, series
from tests.rundir_factory import CORPUS, GH200_WRONG, H100_LOG, H100_TOPO, RunSpec, build_run_dir, make_facts

HOSTS = [f"node{i}" for i in range(1, 6)]
LEONARDO = CORPUS / "nccl-tests" / "sendrecv-nthread2-info-interleaved-destroy-lines-a100-leonardo.txt"


def judged(tmp_path: Path, spec: RunSpec, **kwargs: object) -> Report:
    return judge(load_run_dir(build_run_dir(tmp_path, spec)), **kwargs)  # type: ignore[arg-type]


def check(report: Report, host: str, name: str) -> Check:
    matches = [c for c in report.hosts[host].checks if c.name == name]
    assert matches, f"{host} has no check {name}: {[c.name for c in report.hosts[host].checks]}"
    return matches[0]


def changed_log(tmp_path: Path, source: Path, old: str, new: str) -> Path:
    text = source.read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / f"changed-{source.name}"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


# ---- pairs: a bad node is one whose EVERY pair is bad ------------------------------------------------


def test_a_node_with_most_but_not_all_pairs_bad_is_not_a_bad_node() -> None:
    hosts = HOSTS
    pairs = [(a, b) for i, a in enumerate(hosts) for b in hosts[i + 1 :]]
    bad = {("node1", "node3"), ("node2", "node3"), ("node3", "node4")}  # node3--node5 is fine
    assert blame_nodes(pairs, bad) == {}
    assert blame_nodes(pairs, bad | {("node3", "node5")}) == dict.fromkeys(
        bad | {("node3", "node5")}, "node3"
    )


def test_three_slow_pairs_of_four_are_three_bad_links(tmp_path: Path) -> None:
    slow = {("node1", "node3"): 0.3, ("node2", "node3"): 0.3, ("node3", "node4"): 0.3}
    report = judged(tmp_path, RunSpec(hosts=HOSTS, pairs="all", pair_scale=slow))
    causes = {p.label: p.cause for p in report.pairs if p.status != "ok"}
    assert causes == dict.fromkeys(("node1--node3", "node2--node3", "node3--node4"), "link")
    assert "bad link" in check(report, "node3", "pairs/all_reduce").reason


# ---- pairs: the baseline is the median of each host's median pair -----------------------------------


def test_a_bad_node_does_not_drag_the_pair_baseline_down(tmp_path: Path) -> None:
    """4 hosts, node1 at 70 % on its 3 pairs of 6: the plain median of pairs would sit at 85 % and
    leave node1 only 18 % below it (under a 20 % minimum drop); the baseline stays the healthy value."""
    hosts = HOSTS[:4]
    slow = {("node1", h): 0.7 for h in hosts[1:]}
    report = judged(
        tmp_path, RunSpec(hosts=hosts, pairs="all", pair_scale=slow), options=Options(min_drop=0.2)
    )
    stat = report.stats[("pair", "all_reduce")]
    healthy = stat.values["node2--node3"]
    assert stat.median == healthy
    assert check(report, "node1", "pairs/all_reduce").status == "fail"
    assert "bad node: all 3 of its pairs" in check(report, "node1", "pairs/all_reduce").reason


# ---- reference sizes: measured by at least half the logs ---------------------------------------------


def test_a_reference_size_needs_half_the_logs() -> None:
    sizes = [size for size, _ in series(parse_file(H100_LOG).runs[0])]
    top, below = sizes[-1], sizes[:-1]
    # 4 logs: the largest size measured by 2 (half) counts; by 1 it does not.
    half = [sizes, sizes, below, below]
    assert reference_sizes(half, 256 << 20, 3) == (tuple(sizes[-3:]), False)
    one = [sizes, below, below, below]
    assert reference_sizes(one, 256 << 20, 3) == (tuple(below[-3:]), False)
    assert top not in reference_sizes(one, 256 << 20, 3)[0]


# ---- facts ------------------------------------------------------------------------------------------


def test_an_infiniband_port_down_or_slow_is_not_a_pass(tmp_path: Path) -> None:
    down = make_facts("node2")
    down["ib"][3]["state"] = "Down"
    slow = make_facts("node4")
    slow["ib"][5]["rate_gbps"] = 200
    report = judged(tmp_path, RunSpec(hosts=HOSTS, facts={"node2": down, "node4": slow}))
    assert check(report, "node2", "facts/ib").status == "warn"
    assert "mlx5_3 port 1 Down" in check(report, "node2", "facts/ib").reason
    assert check(report, "node4", "facts/ib").status == "warn"
    assert (
        "mlx5_5 port 1 at 200 Gb/s where the fleet runs 400 Gb/s" in check(report, "node4", "facts/ib").reason
    )
    assert check(report, "node1", "facts/ib").status == "pass"


def test_a_gpu_model_unlike_the_fleet_is_flagged(tmp_path: Path) -> None:
    other = make_facts("node5", gpu_name="NVIDIA H100 PCIe")
    report = judged(tmp_path, RunSpec(hosts=HOSTS, facts={"node5": other}))
    gpus = check(report, "node5", "facts/gpus")
    assert gpus.status == "warn"
    assert "GPU model NVIDIA H100 PCIe where 4 of 5 hosts have NVIDIA H100 80GB HBM3" in gpus.reason
    assert check(report, "node1", "facts/gpus").status == "pass"


def _without_gpu7(tmp_path: Path) -> Path:
    """The real H100 topology with GPU7's row and column taken out (a GPU fallen off the bus)."""
    lines = H100_TOPO.read_text(encoding="utf-8").splitlines()
    header = next(i for i, line in enumerate(lines) if "GPU7" in line)
    column = lines[header].split().index("GPU7")
    out = []
    for i, line in enumerate(lines):
        fields = line.split()
        if fields and fields[0] == "GPU7":
            continue
        if i == header:
            fields.pop(column)
            line = "\t" + "\t".join(fields)
        elif fields and fields[0].startswith(("GPU", "NIC")) and len(fields) > column + 1:
            fields.pop(column + 1)
            line = "\t".join(fields)
        out.append(line)
    path = tmp_path / "topo-no-gpu7.txt"
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


def test_a_gpu_missing_from_the_topology_fails(tmp_path: Path) -> None:
    topo = _without_gpu7(tmp_path)
    report = judged(tmp_path / "run", RunSpec(hosts=HOSTS, topo_override={"node3": topo}))
    node3 = check(report, "node3", "topology")
    assert node3.status == "fail", node3.reason
    assert "GPU7 missing" in node3.reason
    assert check(report, "node1", "topology").status == "pass"


# ---- log checks --------------------------------------------------------------------------------------


def test_out_of_bounds_values_fail_the_data_check_without_any_wrong_row(tmp_path: Path) -> None:
    """The real H100 log with its out-of-bounds line changed from `0 OK` to `3 FAILED` (every #wrong 0)."""
    oob = changed_log(tmp_path, H100_LOG, "Out of bounds values : 0 OK", "Out of bounds values : 3 FAILED")
    report = judged(tmp_path / "run", RunSpec(hosts=HOSTS, intra_override={"node2": {"all_reduce": oob}}))
    data = check(report, "node2", "intra/all_reduce/data")
    assert data.status == "fail"
    assert "out of bounds values: 3" in data.reason
    assert "#wrong" not in data.reason
    assert check(report, "node1", "intra/all_reduce/data").status == "pass"


def test_wrong_rows_fail_the_data_check_without_out_of_bounds(tmp_path: Path) -> None:
    """The real GH200 log with wrong rows, its out-of-bounds line changed to `0 OK`: the rows alone fail."""
    wrong = changed_log(
        tmp_path, GH200_WRONG, "Out of bounds values : 4 FAILED", "Out of bounds values : 0 OK"
    )
    report = judged(
        tmp_path / "run",
        RunSpec(
            hosts=HOSTS[:3], intra={"all_reduce": H100_LOG}, intra_override={"node2": {"all_reduce": wrong}}
        ),
    )
    data = check(report, "node2", "intra/all_reduce/data")
    assert data.status == "fail"
    assert "#wrong nonzero in" in data.reason
    assert "out of bounds" not in data.reason
    assert any("96" in line.split() for line in data.evidence)  # the row itself is quoted
    assert report.hosts["node2"].verdict == "failed"


def test_nccl_p2p_disable_in_a_log_is_a_transport_warning(tmp_path: Path) -> None:
    """The real Leonardo A100 log (NCCL_DEBUG=INFO) with its `NCCL_P2P_LEVEL set by environment to NVL`
    line changed to `NCCL_P2P_DISABLE set by environment to 1`."""
    disabled = changed_log(
        tmp_path,
        LEONARDO,
        "NCCL_P2P_LEVEL set by environment to NVL",
        "NCCL_P2P_DISABLE set by environment to 1",
    )
    spec = RunSpec(
        hosts=HOSTS[:3], intra={"sendrecv": LEONARDO}, intra_override={"node3": {"sendrecv": disabled}}
    )
    report = judged(tmp_path / "run", spec)
    transport = check(report, "node3", "transport")
    assert transport.status == "warn"
    assert "NCCL_P2P_DISABLE is set" in transport.reason
    assert any("NCCL_P2P_DISABLE set by environment to 1" in line for line in transport.evidence)
    assert not [c for c in report.hosts["node1"].checks if c.name == "transport" and c.status != "pass"]
