"""`collbench parse` on the node-check kinds (perftest, NVLink, IB ports, dcgmi diag): each sample of
their corpus folders is detected from its content and prints as JSON, CSV and a table; the records'
fields are the documented ones."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import re
from pathlib import Path

import pytest

from collbench_py.parsers import dcgm, ibports, nvlink, perftest
from tests.collbench_cli import collbench

DATA = Path(__file__).parents[1] / "data"
FOLDERS = ("perftest", "nvlink", "ib", "dcgm")
SAMPLES = sorted(path for folder in FOLDERS for path in (DATA / "corpus" / folder).glob("*.txt"))
DOC = Path(__file__).parents[2] / "docs" / "parse-json.md"
RECORDS = (
    perftest.PerftestRun,
    perftest.PerftestRow,
    nvlink.NvlinkGpu,
    nvlink.NvlinkLink,
    nvlink.DcgmiLinks,
    ibports.IbPort,
    dcgm.DiagTest,
)


def _expected_kind(sample: Path) -> str:
    return json.loads((DATA / "expected" / sample.parent.name / f"{sample.stem}.json").read_text())["kind"]


def test_every_folder_has_samples() -> None:
    assert {sample.parent.name for sample in SAMPLES} == set(FOLDERS)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_sample_prints_in_every_format(sample: Path) -> None:
    kind = _expected_kind(sample)
    as_json = collbench("parse", "--format", "json", str(sample))
    assert (as_json.returncode, as_json.stderr) == (0, "")
    [parsed] = json.loads(as_json.stdout)
    assert parsed["kind"] == kind
    assert parsed["records"] or parsed["topology"]

    as_csv = collbench("parse", "--format", "csv", str(sample))
    assert (as_csv.returncode, as_csv.stderr) == (0, "")
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    if parsed["records"]:
        assert rows and {row["kind"] for row in rows} == {kind}
        assert {row["file"] for row in rows} == {str(sample)}

    as_table = collbench("parse", str(sample))
    assert (as_table.returncode, as_table.stderr) == (0, "")
    assert as_table.stdout.startswith(f"{sample}  ({kind})\n")
    assert "(nothing to show)" not in as_table.stdout


def test_kinds_mixed_in_one_call_keep_their_own_csv_columns() -> None:
    ports = DATA / "corpus/ib/cx5-rdma-link-show-and-ibdev2netdev-2-ports-up.txt"
    links = DATA / "corpus/nvlink/gke-a3-h100-1gpu-pod-nvlink-status-tab-indent.txt"
    result = collbench("parse", "--format", "csv", str(ports), str(links))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    headers = [line for line in lines if line.startswith("file,kind,")]
    assert headers == [
        "file,kind," + ",".join(ibports.IbPort.CSV_FIELDS),
        "file,kind," + ",".join(nvlink.NvlinkGpu.CSV_FIELDS),
    ]
    assert len(lines) == 2 + 2 + 18


def test_a_file_of_none_of_these_kinds_stays_bad_input(tmp_path: Path) -> None:
    # Words of every kind, none of their structure: no title, header, GPU line, CA or table.
    text = "ib_write_bw finished; nvidia-smi nvlink said Link 0 ok; ibstat State: Active; dcgmi diag Pass\n"
    other = tmp_path / "notes.txt"
    other.write_text(text)
    result = collbench("parse", "--format", "json", str(other))
    assert result.returncode == 2
    assert result.stderr.strip() == f"collbench: {other}: not a recognised benchmark or topology output"
    assert json.loads(result.stdout) == []


@pytest.mark.parametrize("record", RECORDS, ids=lambda cls: cls.__name__)
def test_every_record_field_is_documented(record: type) -> None:
    section = re.search(rf"^### `?{record.__name__}`?\n(.*?)(?=^##|\Z)", DOC.read_text(), re.M | re.S)
    assert section, f"docs/parse-json.md has no section for {record.__name__}"
    documented = set(re.findall(r"^\| `(\w+)` \|", section.group(1), re.M))
    assert documented == {field.name for field in dataclasses.fields(record)}


def test_no_benchmark_or_topology_sample_is_claimed_by_a_node_check_parser() -> None:
    others = [p for p in (DATA / "corpus").glob("*/*.txt") if p.parent.name not in FOLDERS]
    others += [p for p in (DATA / "extra").glob("*/*") if not p.name.endswith(".meta.md")]
    assert len(others) > 60
    for sample in others:
        text = sample.read_text(encoding="utf-8", errors="replace")
        claims = [module.__name__ for module in (perftest, nvlink, ibports, dcgm) if module.sniff(text)]
        assert not claims, f"{sample.name} claimed by {claims}"
