"""The all_reduce_bench.py / torch-dist-bench.py parser on real outputs beyond the corpus samples."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from collbench_py.parsers import torch_bench
from collbench_py.parsers.models import ParseError

CORPUS = Path(__file__).parents[1] / "data" / "corpus"
TABLE_8XH200 = (CORPUS / "torch-bench" / "stas-allreduce-bench-new-table-8xH200-32KiB-16GiB.txt").read_text()
TABLE_KB = (CORPUS / "torch-bench" / "stas-allreduce-bench-old-readme-KB-MB-GB-labels.txt").read_text()

# all_reduce_bench.py on 4x H100 80GB HBM3 with its Environment block, as quoted in a public blog post on
# NCCL benchmarking ("Here is a smaller benchmark from the ml-engineering scripts").
ENVIRONMENT_4XH100 = """\
Environment:
- software: torch=2.7.0, cuda=12.8, nccl=(2, 26, 2)
- hardware: _CudaDeviceProperties(name='NVIDIA H100 80GB HBM3', major=9, minor=0, total_memory=81089MB, \
multi_processor_count=132, uuid=4dbfbb99-983a-79af-8527-ca9f0c139426, L2_cache_size=50MB)

The average bandwidth of all_reduce over 4 ranks (5 warmups / 20 trials):

| payload |    busbw   |    algbw   |
| ------: | ---------: | ---------: |
|   32KiB |   1.18GBps |   0.79GBps |
|   64KiB |   2.44GBps |   1.63GBps |
|  128KiB |   4.72GBps |   3.15GBps |
|  256KiB |   9.66GBps |   6.44GBps |
|  512KiB |  18.84GBps |  12.56GBps |
|    1MiB |  34.50GBps |  23.00GBps |
|    2MiB |  60.60GBps |  40.40GBps |
|    4MiB |  99.65GBps |  66.43GBps |
|    8MiB | 154.14GBps | 102.76GBps |
|   16MiB | 208.99GBps | 139.33GBps |
|   32MiB | 258.95GBps | 172.63GBps |
|   64MiB | 293.25GBps | 195.50GBps |
|  128MiB | 317.31GBps | 211.54GBps |
|  256MiB | 335.62GBps | 223.75GBps |
|  512MiB | 345.78GBps | 230.52GBps |
|    1GiB | 355.72GBps | 237.15GBps |
|    2GiB | 360.91GBps | 240.61GBps |
|    4GiB | 363.27GBps | 242.18GBps |
|    8GiB | 365.21GBps | 243.47GBps |
|   16GiB | 366.99GBps | 244.66GBps |
"""

# The legacy 3-line blocks with the `(std: Z)` variant, from a public README of CSCS todi runs
# (2 nodes, 8 ranks).
LEGACY_WITH_STD = """\
The average bandwidth of all_reduce with a 4.0GB payload (20 trials, 8 ranks):
 algbw: 2.019 GBps (16.1 Gbps)
 busbw: 3.533 GBps (28.3 Gbps)
```
with the nccl plugin
```
The average bandwidth of all_reduce with a 4.0GB payload (20 trials, 8 ranks):
 algbw: 52.186 GBps (std: 0.013) (417.5 Gbps)
 busbw: 91.325 GBps (730.6 Gbps)
"""


def test_environment_block_gives_versions_device_and_ranks() -> None:
    (run,) = torch_bench.parse(ENVIRONMENT_4XH100, "blog.txt").runs
    assert run.nccl_version == "2.26.2"
    assert run.nranks == 4
    assert run.params["torch"] == "2.7.0" and run.params["cuda"] == "12.8"
    assert run.params["device"]["name"] == "NVIDIA H100 80GB HBM3"
    assert run.params["device"]["multi_processor_count"] == "132"
    assert (run.params["warmups"], run.params["trials"]) == (5, 20)
    assert run.params["nranks_implied"] == 4
    assert len(run.rows) == 20
    last = run.rows[-1]
    assert (last.size, last.oop.busbw, last.oop.algbw, last.oop.time_us) == (2**34, 366.99, 244.66, None)


def test_legacy_blocks_one_run_each_and_std_kept() -> None:
    first, second = torch_bench.parse(LEGACY_WITH_STD, "todi.md").runs
    assert first.rows[0].size == 4_000_000_000  # M*N*4/1e9 printed as "4.0GB"
    assert (first.rows[0].oop.algbw, first.rows[0].oop.busbw) == (2.019, 3.533)
    assert (second.rows[0].oop.algbw, second.rows[0].oop.busbw) == (52.186, 91.325)
    assert second.params["algbw_std"] == 0.013 and "algbw_std" not in first.params
    assert first.nranks == second.nranks == 8 and second.params["trials"] == 20


@pytest.mark.parametrize(("prefix", "hosts"), [("[node7:0]:", ("node7",)), ("[default0]:", ())])
def test_torchrun_prefixes_keep_the_rows(prefix: str, hosts: tuple[str, ...]) -> None:
    prefixed = "".join(prefix + line for line in TABLE_8XH200.splitlines(keepends=True))
    (plain,) = torch_bench.parse(TABLE_8XH200, "a").runs
    (run,) = torch_bench.parse(prefixed, "b").runs
    assert run.rows == plain.rows and len(run.rows) == 20
    assert run.hosts == hosts


def test_kb_labels_mean_powers_of_two_and_gib_per_second() -> None:
    # The same numbers relabelled KiB (as the 2026 README did) and the KB-era ones are both taken as
    # printed; only the KB-era run warns that its GBps were really GiB/s.
    relabelled = TABLE_KB.replace("KB |", "KiB |").replace("MB |", "MiB |").replace("GB |", "GiB |")
    (kb,) = torch_bench.parse(TABLE_KB, "kb").runs
    (kib,) = torch_bench.parse(relabelled, "kib").runs
    assert [row.size for row in kb.rows] == [row.size for row in kib.rows] == [2**x for x in range(15, 35)]
    for old, new in zip(kb.rows, kib.rows, strict=True):
        assert old.oop.busbw == new.oop.busbw
    assert len(kb.warnings) == 1 and "GiB/s" in kb.warnings[0] and kib.warnings == ()


def test_latency_columns_become_time_us() -> None:
    # Rendered from torch-dist-bench.py's print_results() format strings (no public output of that
    # generation yet): blank bandwidth cells below --min-busbw-payload, latency in microseconds.
    text = """\
The average bandwidth and the per-call latency of all_to_all over 8 ranks (at least 5 warmups / 20 trials, \
up to 10 queued calls per trial):

| payload |    busbw   |    algbw   | latency median |    p99    |    mean   | calls |
| ------: | ---------: | ---------: | -------------: | --------: | --------: | ----: |
|      8B |            |            |         21.4us |    30.2us |    22.0us |  1000 |
|    1MiB |  40.00GBps |  45.71GBps |         22.9us |    31.0us |    23.5us |  1000 |
"""
    (run,) = torch_bench.parse(text, "t").runs
    assert run.collective == "alltoall" and run.params["collective_name"] == "all_to_all"
    assert [(r.size, r.oop.time_us, r.oop.busbw) for r in run.rows] == [(8, 21.4, None), (2**20, 22.9, 40.0)]
    assert run.nranks == 8 and run.params["queued_calls"] == 10


def test_sniff_claims_no_other_corpus_sample() -> None:
    others = [p for p in CORPUS.glob("*/*.txt") if p.parent.name != "torch-bench"]
    assert len(others) > 30
    claimed = [p.name for p in others if torch_bench.sniff(p.read_text(errors="replace"))]
    assert claimed == []


def test_text_without_results_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match=r"no all_reduce_bench\.py result"):
        torch_bench.parse("algbw: GBps but nothing else\n", "x.txt")


def test_sniff_is_cheap_on_a_large_foreign_log() -> None:
    nccl = (CORPUS / "nccl-tests" / "hgx-h100-2node-16rank-mpi-warnings-interleaved-16GiB.txt").read_text()
    big = nccl * (12_000_000 // len(nccl) + 1)
    start = time.perf_counter()
    assert torch_bench.sniff(big) is None
    rate = len(big) / (time.perf_counter() - start) / 1e6
    assert rate >= 20, f"sniff reads {rate:.0f} MB/s"
