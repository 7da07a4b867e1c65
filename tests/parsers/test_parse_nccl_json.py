"""nccl-tests `-J` JSON and rccl-tests `-Z json|csv` output files.

No nccl-tests JSON file produced by a real run could be found published anywhere, so the `-J`
inputs here are built by `write_nccl_tests_json`, which reproduces what nccl-tests' own writer
(src/util.cu, tags v2.17.3 to v2.19.6) prints: compact JSON, doubles as `%lf`, `root` as a `%6i`
string, booleans as the strings "true"/"false", the keys misspelled `average_bus_bandwidith` /
`bandwidith` up to v2.17.8, `per_iter` blocks in format versions 2 and 3, and the whole process
environment under `env`. The numbers are those of two real corpus text logs (nccl-tests 2.18.2 and
2.17.8 on GH200 nodes), read from the logs themselves. rccl-tests inputs follow rccl-tests'
`Reporter::writeFile` (a JSON list, or CSV with quoted strings); the JSON Lines form is a real
sample from the corpus.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from collbench_py.parsers import detect, nccl_json, nccl_text, parse_text
from collbench_py.parsers.models import ParseError

CORPUS = Path(__file__).parents[1] / "data" / "corpus"
V2_18 = CORPUS / "nccl-tests" / "cscs-gh200-2node-v2.18.2-version-header.txt"
V2_17_CORRUPT = CORPUS / "nccl-tests" / "gh200-2node-v2.17.8-wrong-nonzero-FAILED-trailing-test-failure.txt"
SECRET = "hunter2-do-not-leak"
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)" + r"\s+(\S+)" * 8 + r"\s*$")
_DEVICE = re.compile(r"#\s+Rank\s+(\d+) Group\s+(\d+) Pid\s+(\d+) on\s+(\S+) device\s+(\d+) \[(\S+)\] (.+)$")


# ---- a writer that prints what nccl-tests' util.cu prints ------------------------------------------


def _value(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return '"true"' if v else '"false"'
    if isinstance(v, float):
        return f"{v:f}" if math.isfinite(v) else '"nan"'
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("/", "\\/") + '"'
    if isinstance(v, list):
        return "[" + ",".join(_value(x) for x in v) + "]"
    return "{" + ",".join(f"{_value(k)}:{_value(x)}" for k, x in v.items()) + "}"


def read_text_log(path: Path) -> dict[str, Any]:
    """Rows, devices, versions and summary of a real nccl-tests text log."""
    text = path.read_text()
    rows, devices = [], []
    for line in text.splitlines():
        if m := _ROW.match(line):
            rows.append(m.groups())
        elif m := _DEVICE.search(line):
            devices.append(m.groups())
    return {
        "rows": rows,
        "devices": devices,
        "nccl_code": int(re.search(r"nccl-library=(\d+)", text).group(1)),
        "oob": int(re.search(r"Out of bounds values : (\d+)", text).group(1)),
        "avg": float(re.search(r"Avg bus bandwidth\s+: (\S+)", text).group(1)),
        "program": re.search(r"Collective test starting: (\S+)", text).group(1),
    }


def write_nccl_tests_json(
    log: dict[str, Any], version: int = 1, misspelled: bool = False, ngpus: int = 1
) -> str:
    def half(t: str, alg: str, bus: str, wrong: str) -> dict[str, Any]:
        out = {"time": float(t), "alg_bw": float(alg), "bus_bw": float(bus)}
        return {**out, "nwrong": None if wrong == "N/A" else float(wrong)}

    config: dict[str, Any] = {
        "nthreads": 1,
        "ngpus": ngpus,
        "minimum_bytes": int(log["rows"][0][0]),
        "maximum_bytes": int(log["rows"][-1][0]),
        "step_factor": 2,
        "warmup_iters": 1,
        "iterations": 20,
        "aggregated_iterations": 1,
        "validation": 1,
        "graph": 0,
        "blocking_collectives": False,
    }
    if version >= 2:
        config["per_iter_timing"] = True
    if version >= 3:
        config["per_iter_skip"] = 0
    config["parallel_init"] = False
    config["devices"] = [
        {
            "rank": int(rank),
            "group": int(group),
            "pid": int(pid),
            "hostname": host,
            "device": int(dev),
            "device_hex": bus,
            "device_info": name,
        }
        for rank, group, pid, host, dev, bus, name in log["devices"]
    ]
    results = []
    for size, count, dtype, redop, root, *cells in log["rows"]:
        result = {
            "size": int(size),
            "count": int(count),
            "type": dtype,
            "redop": redop,
            "root": f"{int(root):6d}",
        }
        result["out_of_place"] = half(*cells[:4])
        if version >= 2:
            result["out_of_place_per_iter"] = {
                "skipped_iterations": 0,
                "min_us": float(cells[0]),
                "times_us": [1.5],
            }
        result["in_place"] = half(*cells[4:])
        result.update(actual_iterations=20, experiment_name="")
        results.append(result)
    avg_key, bw_key = (
        ("average_bus_bandwidith", "bandwidith") if misspelled else ("average_bus_bandwidth", "bandwidth")
    )
    doc = {
        "version": version,
        "start_time": "2026-11-21 21:51:00",
        "args": [
            f"/opt/nccl-tests/build/{log['program']}",
            "-b",
            "8",
            "-e",
            "128M",
            "-f",
            "2",
            "-J",
            "out.json",
        ],
        "env": [
            "HOME=/root",
            f"AWS_SECRET_ACCESS_KEY={SECRET}",
            "NCCL_IB_HCA=mlx5_0,mlx5_1",
            "PATH=/usr/bin:/bin",
        ],
        "nccl_version": log["nccl_code"],
        "config": config,
        "results": results,
        "out_of_bounds": {"count": log["oob"], "okay": log["oob"] == 0},
        avg_key: {bw_key: log["avg"], "okay": "unchecked"},
        "errors": [""],
        "end_time": "2026-11-21 21:51:09",
    }
    return _value(doc)


@pytest.fixture(scope="module")
def ok_log() -> dict[str, Any]:
    return read_text_log(V2_18)


@pytest.fixture(scope="module")
def corrupt_log() -> dict[str, Any]:
    return read_text_log(V2_17_CORRUPT)


def _no_secret(parsed: Any) -> None:
    dumped = json.dumps(parsed.to_dict())
    assert SECRET not in dumped
    assert "AWS_SECRET_ACCESS_KEY" not in dumped
    assert "NCCL_IB_HCA" not in dumped


# ---- nccl-tests -J ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2, 3])
def test_a_complete_file_gives_the_rows_of_the_text_log(ok_log: dict[str, Any], version: int) -> None:
    text = write_nccl_tests_json(ok_log, version=version)
    assert detect(text) == "nccl-tests"
    parsed = parse_text(text, "all_reduce.json")
    assert parsed.kind == "nccl-tests"
    (run,) = parsed.runs
    assert (run.collective, run.nccl_version, run.nranks) == ("all_reduce", "2.30.7", 2)
    assert run.hosts == ("nid007106", "nid007109")
    assert run.devices[1].name == "NVIDIA GH200 120GB"
    assert run.devices[1].bus_id == "0009:01:00"
    assert run.devices[1].pid == 24926
    assert (run.status, run.oob, run.avg_busbw, run.errors) == ("ok", 0, 14.9966, ())
    assert len(run.rows) == 8
    row = run.rows[5]
    assert (row.size, row.count, row.dtype, row.redop, row.root) == (33554432, 8388608, "float", "sum", -1)
    assert (row.oop.time_us, row.oop.algbw, row.oop.busbw, row.oop.wrong) == (1537.62, 21.82, 21.82, 0)
    assert (row.ip.time_us, row.ip.algbw, row.ip.busbw, row.ip.wrong) == (1538.74, 21.81, 21.81, 0)
    assert run.params["iterations"] == 20
    assert run.params["json_version"] == version
    assert "-J" in run.params["args"]
    _no_secret(parsed)


def test_misspelled_summary_keys_and_wrong_elements_fail_the_run(corrupt_log: dict[str, Any]) -> None:
    text = write_nccl_tests_json(corrupt_log, version=1, misspelled=True)
    assert '"average_bus_bandwidith":{"bandwidith":4.799950' in text
    (run,) = parse_text(text, "all_reduce.json").runs
    assert run.avg_busbw == pytest.approx(4.79995)
    assert run.nccl_version == "2.29.2"
    assert run.oob == 4
    assert run.status == "failed"
    row = next(r for r in run.rows if r.size == 1048576)
    assert (row.oop.wrong, row.ip.wrong) == (96, 32)
    assert any("128 wrong elements" in w for w in run.warnings)


@pytest.mark.parametrize("source", [V2_18, V2_17_CORRUPT], ids=lambda p: p.stem)
def test_rows_match_the_text_parser(source: Path) -> None:
    """The same run, read from its text log and from its JSON, gives the same records."""
    try:
        from_text = nccl_text.parse(source.read_text(), source.name).runs[0]
    except ParseError as exc:
        pytest.skip(f"text parser not available: {exc}")
    misspelled = "v2.17" in source.name
    json_text = write_nccl_tests_json(read_text_log(source), misspelled=misspelled)
    from_json = parse_text(json_text, "x.json").runs[0]
    for field in ("collective", "nccl_version", "nranks", "hosts", "rows", "avg_busbw", "oob", "status"):
        assert getattr(from_json, field) == getattr(from_text, field), field


def test_one_device_entry_per_process_counts_all_its_gpus(ok_log: dict[str, Any]) -> None:
    # with -g 4 the writer keeps only the first `Rank` line of each process
    (run,) = parse_text(write_nccl_tests_json(ok_log, ngpus=4), "x.json").runs
    assert run.nranks == 8


@pytest.mark.parametrize(
    "cut",
    [
        '"env":["HOME=\\/root","AWS_SECRET_ACCESS_KEY=hunt',  # inside the environment
        '"config":{"nthreads":1,"ngpus":1,"minimum_b',  # inside the config
        '"size":16777216,"count":4194304,"type":"float","redop":"sum","root":"    -1",'
        '"out_of_place":{"time":840.3',  # inside a result
        '"in_place":{"time":841.250000,"alg_bw":19.940000,"bus_bw":19.940000,"nwrong":0.000000}',
        '"out_of_bounds":{"count":0,"okay":"true"}',  # the summary half written
    ],
)
def test_an_unterminated_file_keeps_what_was_written(ok_log: dict[str, Any], cut: str) -> None:
    full = write_nccl_tests_json(ok_log)
    assert cut in full, cut
    text = full[: full.index(cut) + len(cut)]
    assert detect(text) == "nccl-tests"
    parsed = parse_text(text, "all_reduce.json")
    (run,) = parsed.runs
    assert run.status == "incomplete"
    assert any("unterminated" in w for w in parsed.warnings)
    # every result the writer began is kept, the last one with what it had
    assert [r.size for r in run.rows] == [int(s) for s in re.findall(r'"size":(\d+)', text)]
    assert all(r.ip is not None for r in run.rows[:-1])
    _no_secret(parsed)


def test_a_file_closed_after_an_early_error_is_incomplete(ok_log: dict[str, Any]) -> None:
    # From v2.18.5 the writer closes what is open, writing null for a key left without its value.
    full = write_nccl_tests_json(ok_log)
    at = full.index('"in_place"', full.index('"size":4194304'))
    text = full[:at] + '"in_place":null}]}'
    (run,) = parse_text(text, "x.json").runs
    assert run.status == "incomplete"
    assert [r.size for r in run.rows] == [1048576, 2097152, 4194304]
    assert run.rows[-1].ip is None
    assert run.rows[-1].oop.busbw == 8.81


def test_errors_fail_the_run_but_an_empty_message_does_not(ok_log: dict[str, Any]) -> None:
    text = write_nccl_tests_json(ok_log)
    assert parse_text(text, "x.json").runs[0].status == "ok"
    failing = text.replace('"errors":[""]', '"errors":["NCCL WARN NET\\/IB : Got completion with error 12"]')
    (run,) = parse_text(failing, "x.json").runs
    assert run.status == "failed"
    assert run.errors[0].message == "NCCL WARN NET/IB : Got completion with error 12"


def test_a_failed_bandwidth_check_fails_the_run(ok_log: dict[str, Any]) -> None:
    text = write_nccl_tests_json(ok_log).replace('"okay":"unchecked"', '"okay":"false"')
    assert parse_text(text, "x.json").runs[0].status == "failed"


def test_a_numbered_file_says_the_path_existed(ok_log: dict[str, Any]) -> None:
    parsed = parse_text(write_nccl_tests_json(ok_log), "results/all_reduce.json.1")
    assert any("already existed" in w for w in parsed.warnings)
    assert not parse_text(write_nccl_tests_json(ok_log), "results/all_reduce.json").warnings


def test_rccl_tests_binary_writing_the_nccl_layout_is_rccl(ok_log: dict[str, Any]) -> None:
    text = write_nccl_tests_json(ok_log).replace("\\/nccl-tests\\/", "\\/rccl-tests\\/")
    assert detect(text) == "rccl-tests"
    assert parse_text(text, "x.json").runs[0].tool == "rccl-tests"


@pytest.mark.parametrize(
    ("code", "version"), [(22902, "2.29.2"), (23007, "2.30.7"), (2804, "2.8.4"), (0, None)]
)
def test_nccl_version_codes(code: int, version: str | None) -> None:
    assert nccl_json._version_string(code) == version


# ---- rccl-tests -Z json / csv ----------------------------------------------------------------------

RCCL_JSON_LIST = """[
{"numCycle":0, "name":"AllGather", "nodes":2, "ranks":2, "ranksPerNode":1, "gpusPerRank":8, "size":1048576, \
"type":"float", "redop":"none", "inPlace":0, "time":52.310000, "algBw":20.045000, "busBw":18.792000, \
"wrong":"0"},
{"numCycle":0, "name":"AllGather", "nodes":2, "ranks":2, "ranksPerNode":1, "gpusPerRank":8, "size":1048576, \
"type":"float", "redop":"none", "inPlace":1, "time":nan, "algBw":inf, "busBw":18.100000, "wrong":"N/A"}
]
"""

RCCL_CSV = """numCycle,collective,gpus,size,type,redop,inplace,time,algbw,busbw,#wrong
0,"AlltoAll",8,1024,"float","sum",0,30.120000,0.034000,0.029750,"0"
0,"AlltoAll",8,1024,"float","sum",1,31.000000,0.033000,0.028875,"N/A"
0,"AlltoAll",8,2048,"float","sum",0,30.500000,0.067000,0.058625,"7"
0,"AlltoAll",8,2048,"float","sum",1,30.900000,0.066000,0.057750,"0"
"""


def test_rccl_json_list_with_mpi_keys_and_nonfinite_numbers() -> None:
    assert detect(RCCL_JSON_LIST) == "rccl-tests"
    (run,) = parse_text(RCCL_JSON_LIST, "out.json").runs
    assert (run.collective, run.nranks, run.status, run.tool) == ("all_gather", 16, "ok", "rccl-tests")
    (row,) = run.rows
    assert (row.size, row.redop, row.oop.busbw, row.oop.wrong) == (1048576, None, 18.792, 0)
    assert (row.ip.time_us, row.ip.algbw, row.ip.busbw, row.ip.wrong) == (None, None, 18.1, None)


def test_rccl_csv() -> None:
    assert detect(RCCL_CSV) == "rccl-tests"
    (run,) = parse_text(RCCL_CSV, "out.csv").runs
    assert (run.collective, run.nranks, run.status) == ("alltoall", 8, "failed")
    assert [r.size for r in run.rows] == [1024, 2048]
    assert run.rows[0].ip.wrong is None
    assert run.rows[1].oop.wrong == 7
    assert run.params["format"] == "csv"


def test_rccl_jsonl_real_sample_cut_short() -> None:
    text = (CORPUS / "rccl-tests" / "rccl-tests-jsonl-output-file-sample-pr93.txt").read_text()
    (run,) = parse_text(text + '{"#wrong":"0","algBw":0.19', "out.json").runs
    assert run.status == "incomplete"
    assert len(run.rows) == 3


# ---- what is not ours ------------------------------------------------------------------------------


@pytest.mark.parametrize("sample", sorted((CORPUS / "nccl-tests").glob("*.txt")), ids=lambda p: p.stem)
def test_text_logs_are_not_claimed(sample: Path) -> None:
    assert nccl_json.sniff(sample.read_text(errors="replace")) is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n",
        '{"nvbandwidth": "0.7", "testcases": []}',
        '[{"name": "x"}]',
        "size,count\n1,2\n",
        "{ this is not json",
    ],
)
def test_other_text_is_not_claimed(text: str) -> None:
    assert nccl_json.sniff(text) is None
    with pytest.raises(ParseError):
        nccl_json.parse(text, "x")


def test_a_file_cut_right_after_its_head_is_an_empty_incomplete_run() -> None:
    parsed = nccl_json.parse('{"version":1,"start_time":"2026', "x.json")
    (run,) = parsed.runs
    assert (run.status, run.rows, run.nranks) == ("incomplete", (), None)
    assert any("unterminated" in w for w in parsed.warnings)


def test_a_lone_carriage_return_in_rccl_records_is_a_clean_parse_error() -> None:
    # Found by mutating the real JSON Lines sample: csv raised its own error with a traceback.
    sample = CORPUS / "rccl-tests" / "rccl-tests-jsonl-output-file-sample-pr93.txt"
    lines = sample.read_text().splitlines(keepends=True)
    mutated = " 3: " + "".join([*lines[:2], "\r*x\n", *lines[2:]])
    with pytest.raises(ParseError, match="rccl-tests"):
        parse_text(mutated)


def test_a_denormal_time_is_not_taken_for_a_row_that_agrees(ok_log: dict[str, Any]) -> None:
    """size / 1e-308 s is inf, and inf is within any tolerance of inf: such a row must not pass the
    algbw ~ size / time check."""
    doc = json.loads(write_nccl_tests_json(ok_log, version=3))
    (result,) = [r for r in _results(doc) if r["size"] == 33554432]
    result["out_of_place"]["time"] = 1.1125369292536007e-308
    (run,) = parse_text(json.dumps(doc), "all_reduce.json").runs
    assert 33554432 not in {row.size for row in run.rows if row.oop.time_us == 1.1125369292536007e-308}
    assert all(row.oop.time_us is None or row.oop.time_us > 1e-300 for row in run.rows)


def _results(doc: Any) -> list[dict[str, Any]]:
    """The result records of a -J document, wherever its version puts them."""
    found = []
    if isinstance(doc, dict):
        if "out_of_place" in doc and "size" in doc:
            return [doc]
        for value in doc.values():
            found += _results(value)
    elif isinstance(doc, list):
        for value in doc:
            found += _results(value)
    return found
