"""The run a log's measurements are read from (LogData.run): the one with the most rows."""

from __future__ import annotations

from pathlib import Path

from collbench_py.parsers import parse_text
from collbench_py.rundir.load import Launch, LogData

DATA = Path(__file__).parents[1] / "data"
ONE_GPU = (DATA / "gpu-captures" / "nccl-tests-2.19.6-h100-1gpu-all_gather.txt").read_text()  # 28 rows
SIXTEEN_RANKS = (
    DATA / "corpus" / "nccl-tests" / "hgx-h100-2node-16rank-mpi-warnings-interleaved-16GiB.txt"
).read_text()
LAUNCH = Launch("intra", ("node1",), "all_reduce", "hosts/node1/intra/all_reduce.log")


def test_the_run_with_the_most_rows_whichever_comes_first() -> None:
    for text in (ONE_GPU + SIXTEEN_RANKS, SIXTEEN_RANKS + ONE_GPU):
        runs = parse_text(text, "all_reduce.log").runs
        assert sorted(len(run.rows) for run in runs) == [28, 32]
        measured = LogData(LAUNCH, True, runs=runs).run
        assert measured is not None and len(measured.rows) == 32 and measured.collective == "all_reduce"


def test_one_run_is_that_run_and_none_is_none() -> None:
    (run,) = parse_text(ONE_GPU, "all_gather.log").runs
    assert LogData(LAUNCH, True, runs=(run,)).run is run
    assert LogData(LAUNCH, False).run is None
