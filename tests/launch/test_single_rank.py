"""One rank measures no link: the real single-H100 runs (tests/data/gpu-captures) get no bandwidth
verdict, no fleet statistics, and their in-place figures (a no-op timed) are never used.

A launch recorded `skipped` is never judged, even when it wrote a log.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from collbench_py.parsers import parse_file
from collbench_py.rundir.load import Launch, LogData, launch_ranks, load_run_dir
from collbench_py.verdicts import Report, judge
from tests.rundir_factory import RunSpec, build_run_dir

CAPTURES = Path(__file__).parents[1] / "data" / "gpu-captures"
NCCL_TESTS_RUN = CAPTURES / "run-nccl-tests-1GiB"  # 1 MiB to 1 GiB, the wheel's NCCL 2.28.9
SYSTEM_NCCL_RUN = CAPTURES / "run-default-inventory-system-nccl"  # 1 MiB to 64 MiB, system NCCL 2.28.3
TORCH_RUN = CAPTURES / "run-torch-1GiB"
REAL_RUNS = (NCCL_TESTS_RUN, SYSTEM_NCCL_RUN, TORCH_RUN)
ONE_RANK = "one rank: nothing crosses a link; set more GPUs or use pairs"
H100_FACTS = json.loads((NCCL_TESTS_RUN / "hosts" / "gpu1" / "facts.json").read_text())


def intra_log(run: Path, collective: str) -> Path:
    (host,) = (p.name for p in (run / "hosts").iterdir())
    return run / "hosts" / host / "intra" / f"{collective}.log"


def judged_copy(tmp_path: Path, run: Path) -> Report:
    """The real run directory, judged from a copy (the report writes nothing into the fixture)."""
    copy = tmp_path / run.name
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("report"))
    return judge(load_run_dir(copy))


@pytest.mark.parametrize("run", REAL_RUNS, ids=lambda p: p.name)
def test_a_real_single_gpu_run_gets_no_bandwidth_verdict(tmp_path: Path, run: Path) -> None:
    report = judged_copy(tmp_path, run)
    (verdict,) = report.hosts.values()
    assert report.stats == {}, report.stats  # no fleet statistics from one rank
    assert verdict.busbw == {} and verdict.z == {}  # nothing shown in the hosts table either
    names = [c.name for c in verdict.checks]
    assert not [n for n in names if n.endswith(("/fleet", "/profile", "/line-rate"))], names
    note = next(c for c in verdict.checks if c.name == "intra/one-rank")
    assert note.status == "note" and note.reason.startswith(ONE_RANK)
    for collective in ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast"):
        assert collective in note.reason
    fleet = [c for c in report.fleet_checks if c.name == "intra/one-rank"]
    assert len(fleet) == 1 and ONE_RANK in fleet[0].reason
    assert verdict.verdict == "passed"  # the launches ran fine: a note, not a failure


@pytest.mark.parametrize("run", (NCCL_TESTS_RUN, SYSTEM_NCCL_RUN), ids=lambda p: p.name)
def test_one_rank_in_place_figures_are_never_used(tmp_path: Path, run: Path) -> None:
    """broadcast's in-place columns on one rank reach 10^5-10^6 GB/s; the series keeps the
    out-of-place half alone (a device-local copy, below 2000 GB/s on this H100)."""
    report = judged_copy(tmp_path, run)
    (host,) = report.hosts
    (parsed,) = parse_file(intra_log(run, "broadcast")).runs
    assert max(row.ip.busbw for row in parsed.rows if row.ip) > 1e4  # the no-op is there in the log
    # The report reads the -J JSON beside the log, which prints more digits than the text table.
    series = report.series[(host, "broadcast")]
    assert [size for size, _ in series] == [row.size for row in parsed.rows]
    assert [bw for _, bw in series] == pytest.approx(
        [row.oop.busbw for row in parsed.rows], rel=0.01, abs=0.01
    )
    assert max(bw for _, bw in report.series[(host, "broadcast")]) < 2000


def test_a_fleet_of_single_gpu_hosts_gets_no_random_z_scores(tmp_path: Path) -> None:
    """Four real one-rank broadcast runs of the same H100 (two pipeline runs, a direct run, the
    torch benchmark): their in-place figures scatter over 10^4-10^6 GB/s. Compared, they would give
    z-scores of noise; no host may be judged against the others."""
    sources = {
        "node1": intra_log(NCCL_TESTS_RUN, "broadcast"),
        "node2": intra_log(SYSTEM_NCCL_RUN, "broadcast"),
        "node3": CAPTURES / "nccl-tests-2.19.6-h100-1gpu-broadcast.txt",
        "node4": intra_log(TORCH_RUN, "broadcast"),
    }
    spec = RunSpec(
        hosts=list(sources),
        intra={},
        intra_override={host: {"broadcast": log} for host, log in sources.items()},
        topo=CAPTURES / "h100-1gpu-topo-m.txt",
        facts={host: {**H100_FACTS, "hostname": host, "inventory_hostname": host} for host in sources},
        parameters={"gpus_per_host": 1},
    )
    report = judge(load_run_dir(build_run_dir(tmp_path, spec)))
    assert ("intra", "broadcast") not in report.stats
    # node2's logs loaded the system NCCL 2.28.3: a version warning, never a bandwidth one
    problems = [(h.host, c.name) for h in report.hosts.values() for c in h.problems]
    assert problems == [("node2", "facts/versions")], problems
    for verdict in report.hosts.values():
        assert not any(c.name == "intra/broadcast/fleet" for c in verdict.checks)
        assert any(c.name == "intra/one-rank" for c in verdict.checks)


def test_ranks_come_from_the_log_else_from_the_manifest() -> None:
    run = parse_file(intra_log(NCCL_TESTS_RUN, "all_reduce")).runs[0]
    launch = Launch("intra", ("gpu1",), "all_reduce", "hosts/gpu1/intra/all_reduce.log")
    assert launch_ranks(LogData(launch, True, (run,)), {"gpus_per_host": 8}) == 1  # the log wins
    crashed = LogData(launch, True)  # no header was printed: the manifest tells
    assert launch_ranks(crashed, {"gpus_per_host": 1}) == 1
    assert launch_ranks(crashed, {"gpus_per_host": 8}) == 8
    pair = Launch("pair", ("a", "b"), "all_reduce", "inter/pairs/a--b/all_reduce.log")
    assert launch_ranks(LogData(pair, True), {"gpus_per_host": 1}) == 2
    assert launch_ranks(crashed, {}) is None


def test_a_one_rank_launch_known_only_from_the_manifest_is_not_judged(tmp_path: Path) -> None:
    """The same rule when the log does not say its ranks: the manifest's hosts x gpus_per_host."""
    copy = tmp_path / "run"
    shutil.copytree(NCCL_TESTS_RUN, copy, ignore=shutil.ignore_patterns("report"))
    log = copy / "hosts" / "gpu1" / "intra" / "broadcast.log"
    # Without its `#  Rank  0` line and NCCL's `nranks 1` INFO lines, the log does not say.
    told = re.compile(r"Rank  0|nranks", re.IGNORECASE)
    log.write_text("".join(line for line in log.read_text().splitlines(True) if not told.search(line)))
    log.with_suffix(".json").unlink()  # the -J JSON beside it says its ranks too
    loaded = load_run_dir(copy)
    broadcast = next(lg for lg in loaded.logs if lg.launch.collective == "broadcast")
    assert broadcast.run is not None and broadcast.run.rows
    assert broadcast.run.nranks is None and not broadcast.run.devices
    report = judge(loaded)
    assert ("intra", "broadcast") not in report.stats


def test_a_launch_recorded_skipped_is_never_judged(tmp_path: Path) -> None:
    """nccl-tests' sendrecv ran on one rank and wrote its log, but the run recorded it skipped:
    the report says skip and uses none of its numbers (no series, no data check, no note)."""
    report = judged_copy(tmp_path, NCCL_TESTS_RUN)
    assert intra_log(NCCL_TESTS_RUN, "sendrecv").stat().st_size > 0
    checks = {c.name: c for c in report.hosts["gpu1"].checks}
    assert checks["intra/sendrecv/run"].status == "skip"
    assert [name for name in checks if name.startswith("intra/sendrecv/")] == ["intra/sendrecv/run"]
    assert ("gpu1", "sendrecv") not in report.series
    assert "sendrecv" not in report.collectives
    assert "sendrecv" not in checks["intra/one-rank"].reason


def test_a_skipped_multi_rank_launch_is_left_out_of_the_fleet(tmp_path: Path) -> None:
    """Five hosts of real 16-rank logs, one host's launch recorded skipped at half speed: it is
    not compared, so it neither fails nor moves the fleet's median."""
    hosts = [f"node{i}" for i in range(1, 6)]
    spec = RunSpec(
        hosts=hosts,
        host_scale={"node3": 0.5},
        launch_status={"hosts/node3/intra/all_reduce.log": ("skipped", 0)},
    )
    report = judge(load_run_dir(build_run_dir(tmp_path, spec)))
    stat = report.stats[("intra", "all_reduce")]
    assert "node3" not in stat.values and stat.n == 4
    assert report.hosts["node3"].verdict == "passed"
    assert not any(c.name == "intra/all_reduce/fleet" for c in report.hosts["node3"].checks)


def test_a_skipped_pair_launch_is_left_out_of_the_pair_statistics(tmp_path: Path) -> None:
    hosts = [f"node{i}" for i in range(1, 6)]
    spec = RunSpec(
        hosts=hosts,
        pairs="all",
        pair_scale={("node2", "node4"): 0.3},
        launch_status={"inter/pairs/node2--node4/all_reduce.log": ("skipped", 0)},
    )
    report = judge(load_run_dir(build_run_dir(tmp_path, spec)))
    stat = report.stats[("pair", "all_reduce")]
    assert "node2--node4" not in stat.values and stat.n == 9
    assert {p.label for p in report.pairs} == {f"{a}--{b}" for a in hosts for b in hosts if a < b} - {
        "node2--node4"
    }
    assert {h.verdict for h in report.hosts.values()} == {"passed"}
