"""The nccl-tests text parser on real corpus logs, transformed the way real noise transforms them.

Each test starts from lines of a real sample (tests/data/corpus) and changes them only as a
launcher, a flag or an interleaving process would: prefixes added, a row cut in two around a real
`NCCL INFO` line, `-S` timestamps appended, `-I` columns inserted, `#wrong` printed with `%g`.
The parse of the transformed log must then agree with the parse of the original.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collbench_py.parsers import nccl_text
from collbench_py.parsers._nccl_table import DEFAULT_LAYOUT, parse_row, standard_row
from collbench_py.parsers.models import Half, ParseError, Row

CORPUS = Path(__file__).parents[1] / "data" / "corpus"
CSCS = "nccl-tests/cscs-gh200-2node-v2.18.2-version-header"
GH200_WRONG = "nccl-tests/gh200-2node-v2.17.8-wrong-nonzero-FAILED-trailing-test-failure"
RTX5090_INFO = "nccl-tests/rtx5090-2gpu-nccl-debug-info-warn-cuda-failure"
RTX5090_1GPU = "nccl-tests/rtx5090-1gpu-algbw-overflow-busbw-zero"
RCCL_COLON = "rccl-tests/rccl-rx7900xtx-old-colon-header-invalid-kernel-failure"
RCCL_VF = "rccl-tests/rccl-mi300x-vf-azure-8gpu-weird-version-no-group"

# Real lines from public NCCL_DEBUG=INFO logs and Open MPI output (not in the corpus samples).
IB_LINE = (
    "tpgds-aihub0008:207007:207007 [0] NCCL INFO Channel 00/0 : 1[1] -> 8[0] [receive] via NET/IB/0/GDRDMA"
)
IPC_LINE = "tpgds-aihub0008:207007:207007 [0] NCCL INFO Channel 00/0 : 8[0] -> 15[7] via P2P/IPC"
NVLS_LINE = "[1,3]<stdout>:test-nccl-efa-worker-0:23:75 [3] NCCL INFO Connected NVLS tree"
MPI_ABORT_LINE = (
    "mpirun noticed that process rank 14 with PID 4257 on node compute-0-2.local exited on signal 11 "
    "(Segmentation fault)."
)


def sample(name: str) -> str:
    return (CORPUS / f"{name}.txt").read_text()


def parsed_rows(text: str) -> list[list[Row]]:
    return [list(run.rows) for run in nccl_text.parse(text, "x").runs]


def is_row(line: str) -> bool:
    return line[:1] == " " and line.split(maxsplit=1)[0].isdigit() if line.strip() else False


def test_stacked_launcher_prefixes_are_stripped() -> None:
    original = sample(CSCS)
    prefixes = ["(head, rank=0, pid=3808) [1,0]<stdout>:", " 0: [1,0]<stdout>:", "[nid007106:0]:", "12: "]
    for prefix in prefixes:
        text = "\n".join(prefix + line for line in original.splitlines())
        got, want = nccl_text.parse(text, "x"), nccl_text.parse(original, "x")
        assert got.runs == want.runs, prefix


def test_a_row_split_by_an_interleaved_info_line_is_rejoined() -> None:
    original = sample(CSCS)
    info = sample(RTX5090_INFO).splitlines()[5]  # `GENOA-06:4766:4780 [0] NCCL INFO ncclMaxSharedMem ...`
    assert "NCCL INFO" in info
    out = []
    for line in original.splitlines():
        if is_row(line) and line.split()[0] == "33554432":
            cut = line.index("       0  ") + len("       0")  # after the out-of-place #wrong
            out += [line[:cut], info, line[cut:]]
        else:
            out.append(line)
    assert parsed_rows("\n".join(out)) == parsed_rows(original)


def test_an_info_line_glued_to_a_row_half_is_separated() -> None:
    """NCCL writes INFO to the same stdout buffer: the line lands right after the first half."""
    original = sample(RTX5090_1GPU)
    info = IPC_LINE
    out = []
    for line in original.splitlines():
        if is_row(line) and line.split()[0] == "131072":
            cut = line.index("      0  ") + len("      0")
            out += [line[:cut] + info, line[cut:]]
        else:
            out.append(line)
    parsed = nccl_text.parse("\n".join(out), "x")
    assert [list(r.rows) for r in parsed.runs] == parsed_rows(original)
    assert parsed.runs[0].transports == ("P2P/IPC",)


def test_a_row_cut_inside_a_number_is_rejoined() -> None:
    """A launcher forwards output in chunks: a chunk boundary can fall anywhere in a line."""
    original = sample(CSCS)
    out = []
    for line in original.splitlines():
        if is_row(line) and line.split()[0] == "8388608":
            out += [line[:60], MPI_ABORT_LINE.replace("mpirun noticed", "[nid007106:15784] help"), line[60:]]
        else:
            out.append(line)
    assert parsed_rows("\n".join(out)) == parsed_rows(original)


def test_report_timestamps_are_read_past() -> None:
    """`-S 1`: the header ends with `timestamp`, each row with `%21s` of `%Y-%m-%d %H:%M:%S`."""
    original = sample(CSCS)
    out = []
    for line in original.splitlines():
        if line.startswith("#       size"):
            line = line.rstrip() + "            timestamp"
        elif is_row(line):
            line = line + f"{'2026-01-23 10:11:12':>21}"
        out.append(line)
    assert parsed_rows("\n".join(out)) == parsed_rows(original)


def test_per_iteration_columns_are_read_by_name() -> None:
    """`-I 1`: four i_* columns after each half's #wrong; here min = max = p99 = the time, cv 0."""
    original = sample(CSCS)
    out = []
    for line in original.splitlines():
        if line.startswith("#       size"):
            names = line.split()
            line = " ".join([*names[:10], "i_min", "i_max", "i_p99", "i_cv%", *names[10:14]])
            line += " i_min i_max i_p99 i_cv%"
        elif is_row(line):
            t = line.split()
            extra1 = f"  {t[5]:>7}  {t[5]:>7}  {t[5]:>7}  {'0.00':>7}"
            extra2 = f"  {t[9]:>7}  {t[9]:>7}  {t[9]:>7}  {'0.00':>7}"
            line = "  ".join(t[:9]) + extra1 + "  " + "  ".join(t[9:]) + extra2
        out.append(line)
    assert parsed_rows("\n".join(out)) == parsed_rows(original)


def test_wrong_printed_in_g_notation_is_an_integer() -> None:
    text = sample(GH200_WRONG).replace(
        "2.20    2.20      96   492.81", f"2.20    2.20  {1048576:6g}   492.81"
    )
    assert "1.04858e+06" in text
    run = nccl_text.parse(text, "x").runs[0]
    row = next(r for r in run.rows if r.size == 1048576)
    assert row.oop.wrong == 1048580 and isinstance(row.oop.wrong, int)
    assert run.status == "failed"


def test_colon_style_header_of_old_rccl_tests() -> None:
    colon_header = sample(RCCL_COLON).splitlines()[0]
    assert colon_header.startswith("# nThreads: 1 nGpus: 2 nRanks: 1")
    lines = sample(RCCL_VF).splitlines()
    lines[0] = colon_header
    run = nccl_text.parse("\n".join(lines), "x").runs[0]
    assert run.params == {
        "nThread": 1, "nGpus": 2, "nRanks": 1, "minBytes": 8, "maxBytes": 134217728, "step": 2,
        "warmup iters": 5, "iters": 20, "validation": 1,
    }  # fmt: skip
    assert len(run.rows) == 25 and run.status == "ok" and run.nranks == 8


def test_rows_out_of_order_keep_file_order_and_warn_of_a_non_mpi_build() -> None:
    run = nccl_text.parse(
        sample("nccl-tests/non-mpi-build-16-independent-1rank-runs-interleaved-rows"), "x"
    ).runs[0]
    sizes = [r.size for r in run.rows]
    assert sizes[:4] == [134217728, 134217728, 536870912, 536870912]
    assert sizes.count(536870912) == 8
    assert any("built without MPI=1" in w and "single GPU" in w for w in run.warnings)


def test_headers_of_several_one_rank_processes_make_one_flagged_run() -> None:
    """A non-MPI build under mpirun: every process prints its own header and `Rank 0` line."""
    lines = sample(RTX5090_1GPU).splitlines()
    header, table = lines[:4], lines[4:]
    second = [line.replace("Pid   5092", "Pid   5093").replace("device  0", "device  1") for line in header]
    run_text = "\n".join(header[:1] + second[:1] + header[1:] + second[1:] + table)
    runs = nccl_text.parse(run_text, "x").runs
    assert len(runs) == 1
    assert len(runs[0].rows) == 25 and runs[0].nranks == 1
    assert any("built without MPI=1" in w for w in runs[0].warnings)


def test_a_single_gpu_run_is_not_flagged_as_non_mpi() -> None:
    run = nccl_text.parse(sample(RTX5090_1GPU), "x").runs[0]
    assert not any("MPI=1" in w for w in run.warnings)


def test_transports_and_settings_from_info_lines_anywhere() -> None:
    lines = sample(CSCS).splitlines()
    lines.insert(5, IB_LINE)
    lines.insert(12, "nid007106:15784:15790 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 0.")
    lines.insert(14, NVLS_LINE)
    run = nccl_text.parse("\n".join(lines), "x").runs[0]
    assert run.transports == ("NET/IB", "NVLS")
    assert run.settings == {"NCCL_IB_DISABLE": "0"}
    assert len(run.rows) == 8


def test_warn_lines_of_a_passing_run_are_warnings_not_errors() -> None:
    warn = next(line for line in sample(RTX5090_INFO).splitlines() if "NCCL WARN Could not find" in line)
    lines = sample(CSCS).splitlines()
    lines.insert(6, warn)
    run = nccl_text.parse("\n".join(lines), "x").runs[0]
    assert run.status == "ok" and run.errors == ()
    assert any("Could not find a path for pattern 4" in w for w in run.warnings)


def test_timeout_and_launcher_abort_fail_a_hung_run() -> None:
    """`%s: Test timeout (%ds) %s:%d` (common.cu) after the table header, then mpirun's report."""
    lines = [line for line in sample(CSCS).splitlines() if not is_row(line) and "Out of" not in line]
    lines = lines[: lines.index("# Avg bus bandwidth    : 14.9966 ")]
    text = "\n".join([*lines, "nid007106: Test timeout (300s) common.cu:526", MPI_ABORT_LINE])
    run = nccl_text.parse(text, "x").runs[0]
    assert run.status == "failed"
    assert [(e.kind, e.host) for e in run.errors] == [
        ("Test timeout", "nid007106"),
        ("mpi-abort", "compute-0-2.local"),
    ]


def test_a_header_without_summary_is_incomplete() -> None:
    text = "\n".join(
        line for line in sample(CSCS).splitlines() if "Out of" not in line and "Avg bus" not in line
    )
    text = text.split("# Collective test concluded")[0]
    run = nccl_text.parse(text, "x").runs[0]
    assert run.status == "incomplete" and len(run.rows) == 8


def test_min_bandwidth_check_failure_is_an_error() -> None:
    text = sample(CSCS).replace(
        "# Avg bus bandwidth    : 14.9966 ", "# Avg bus bandwidth    : 14.9966 FAILED"
    )
    run = nccl_text.parse(text, "x").runs[0]
    assert run.status == "failed" and run.errors[0].kind == "bandwidth check"


@pytest.mark.parametrize(
    "name",
    [
        "topo/dgx-a100-nv12-10nics-tabs-numa",
        "torch-bench/stas-allreduce-bench-new-table-8xH200-32KiB-16GiB",
        "torch-bench/stas-allreduce-bench-gke-a3mega-torchrun-prefix-zoneinfo-noise",
        "nvbandwidth/h800-8gpu-all-testcases-v0.2",
        "other/p2pBandwidthLatencyTest-2x-rtx5090-no-p2p",
        "rccl-tests/rccl-tests-jsonl-output-file-sample-pr93",
    ],
)
def test_other_outputs_are_not_sniffed_and_not_parsed(name: str) -> None:
    text = sample(name)
    assert nccl_text.sniff(text) is None
    with pytest.raises(ParseError):
        nccl_text.parse(text, "x")


def test_failure_lines_alone_are_sniffed() -> None:
    assert (
        nccl_text.sniff(sample("nccl-tests/gh200-8rank-test-cuda-failure-device-busy-interleaved"))
        == "nccl-tests"
    )
    assert nccl_text.sniff(sample(RCCL_COLON)) == "rccl-tests"


def test_fast_rows_equal_rows_built_the_ordinary_way() -> None:
    """The inline path for the common row and the header-driven path give the same records."""
    line = next(x for x in sample(CSCS).splitlines() if is_row(x))
    fast = standard_row(line.split())
    general = parse_row(line, line.split(), dataclasses.replace(DEFAULT_LAYOUT, standard=False))
    ordinary = Row(
        size=1048576, count=262144, dtype="float", redop="sum", root=-1,
        oop=Half(339.61, 3.09, 3.09, 0), ip=Half(335.85, 3.12, 3.12, 0),
    )  # fmt: skip
    assert fast == general == ordinary
    assert dataclasses.asdict(fast) == dataclasses.asdict(ordinary)  # type: ignore[arg-type]
    assert hash(fast.oop) == hash(ordinary.oop)  # type: ignore[union-attr]


def test_a_failure_with_no_header_still_makes_a_failed_run() -> None:
    failure = sample("nccl-tests/rtx5090-2gpu-test-nccl-failure-after-header").splitlines()[-6:]
    assert failure[0].startswith("GENOA-06: Test NCCL failure")
    runs = nccl_text.parse("\n".join(failure), "x").runs
    assert len(runs) == 1 and runs[0].status == "failed" and runs[0].rows == ()
    assert runs[0].collective == "all_reduce"  # from the trace's `all_reduce.cu:90`
    assert runs[0].errors[0].message.endswith("common.cu:1078, common.cu:891]")


def test_a_split_row_survives_info_from_a_host_named_with_digits() -> None:
    original = sample(CSCS)
    info = IB_LINE.replace("tpgds-aihub0008", "10-0-0-8")
    out = []
    for line in original.splitlines():
        if is_row(line) and line.split()[0] == "2097152":
            cut = line.index("       0  ") + len("       0")
            out += [line[:cut], info, line[cut:]]
        else:
            out.append(line)
    run = nccl_text.parse("\n".join(out), "x").runs[0]
    assert list(run.rows) == parsed_rows(original)[0]
    assert run.transports == ("NET/IB",)


_ALL_SAMPLES = sorted(CORPUS.glob("*/*.txt"))


@settings(max_examples=80, deadline=None)
@given(
    index=st.integers(0, len(_ALL_SAMPLES) - 1),
    cut=st.floats(0, 1),
    split_at=st.floats(0, 1),
    noise=st.sampled_from(["", "[1,0]<stdout>:", " 3: ", IB_LINE, MPI_ABORT_LINE, "#", "N/A", "\t"]),
)
def test_a_cut_or_mangled_real_log_parses_or_is_refused_cleanly(
    index: int, cut: float, split_at: float, noise: str
) -> None:
    """A log killed mid-write, or with a line broken by noise, gives records or ParseError only."""
    text = _ALL_SAMPLES[index].read_text(encoding="utf-8", errors="replace")
    text = text[: int(len(text) * cut)]
    at = int(len(text) * split_at)
    text = text[:at] + noise + "\n" + text[at:]
    try:
        parsed = nccl_text.parse(text, "x")
    except ParseError:
        return
    for run in parsed.runs:
        assert run.status in ("ok", "failed", "incomplete")
        assert all(isinstance(row.size, int) for row in run.rows)
    parsed.to_dict()


def test_the_project_torch_benchmark_names_itself() -> None:
    """collbench_torch_bench.py prints the nccl-tests format under its own first line."""
    lines = sample(CSCS).splitlines()
    lines[0] = "# collbench-torch-bench version 0.3.0 torch=2.13.0 backend=nccl nccl-library=22703"
    run = nccl_text.parse("\n".join(lines), "x").runs[0]
    assert (run.tool, run.tool_version, run.nccl_version) == ("collbench-torch-bench", "0.3.0", "2.27.3")
    assert run.params["backend"] == "nccl" and run.params["torch"] == "2.13.0"
    assert run.collective == "all_reduce" and len(run.rows) == 8 and run.status == "ok"


def test_an_infinite_wrong_count_drops_the_row_without_an_error() -> None:
    # A mutated real row with `inf` as #wrong once raised OverflowError out of the parser.
    sample = CORPUS / "nccl-tests" / "cscs-gh200-2node-v2.18.2-version-header.txt"
    text = sample.read_text()
    row = next(line for line in text.splitlines() if line.split()[:1] == ["1048576"])
    fields = row.split()
    broken = row.replace(f" {fields[8]} ", " inf ", 1) if fields[8] == "0" else row
    assert broken != row
    (run,) = nccl_text.parse(text.replace(row, broken), "x").runs
    assert 1048576 not in {r.size for r in run.rows}
    assert 33554432 in {r.size for r in run.rows}
