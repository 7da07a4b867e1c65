"""The nvbandwidth parser on real outputs of versions the corpus lacks (v0.2 waiver, v0.9, v0.10)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from collbench_py.parsers import nvbandwidth
from collbench_py.parsers.models import ParseError

CORPUS = Path(__file__).parents[1] / "data" / "corpus"

# v0.10.0 on 7 GPUs, from a public GitHub-hosted session log (banner, then one bidirectional testcase that
# prints three matrices with suffixed SUM keys; only the last has a COEFFICIENT_OF_VARIATION line).
V010_BIDIRECTIONAL = """\
nvbandwidth Version: v0.10.0
Built from Git version: v0.10

CUDA Runtime Version: 13.3 (13030)
CUDA Driver Version (API): 13.3 (13030)
Driver Version: 610.57.04

Running device_to_device_bidirectional_memcpy_read_ce.
memcpy CE GPU(row) <-> GPU(column) Read1 bandwidth (GB/s)
           0         1         2         3         4         5         6
 0       N/A    760.10    761.11    761.11    760.17    760.10    761.18
 1    760.10       N/A    760.31    760.24    760.91    760.24    759.23
 2    761.11    760.31       N/A    760.78    761.18    760.17    761.18
 3    761.11    760.24    760.78       N/A    760.71    760.51    760.44
 4    760.17    760.91    761.18    760.71       N/A    760.78    761.79
 5    760.10    760.24    760.17    760.51    760.78       N/A    760.64
 6    761.18    759.23    761.18    760.44    761.79    760.64       N/A

SUM device_to_device_bidirectional_memcpy_read_ce_read1 31945.78

memcpy CE GPU(row) <-> GPU(column) Read2 bandwidth (GB/s)
           0         1         2         3         4         5         6
 0       N/A    761.11    761.25    760.44    760.51    759.57    760.37
 1    761.11       N/A    760.17    759.63    759.36    759.63    758.63
 2    761.25    760.17       N/A    760.51    760.37    759.57    760.37
 3    760.44    759.63    760.51       N/A    759.77    760.64    760.71
 4    760.51    759.36    760.37    759.77       N/A    759.57    759.36
 5    759.57    759.63    759.57    760.64    759.57       N/A    760.51
 6    760.37    758.63    760.37    760.71    759.36    760.51       N/A

SUM device_to_device_bidirectional_memcpy_read_ce_read2 31924.12

memcpy CE GPU(row) <-> GPU(column) Total bandwidth (GB/s)
           0         1         2         3         4         5         6
 0       N/A   1521.22   1522.36   1521.55   1520.68   1519.67   1521.55
 1   1521.22       N/A   1520.48   1519.87   1520.28   1519.87   1517.86
 2   1522.36   1520.48       N/A   1521.28   1521.55   1519.74   1521.55
 3   1521.55   1519.87   1521.28       N/A   1520.48   1521.15   1521.15
 4   1520.68   1520.28   1521.55   1520.48       N/A   1520.34   1521.15
 5   1519.67   1519.87   1519.74   1521.15   1520.34       N/A   1521.15
 6   1521.55   1517.86   1521.55   1521.15   1521.15   1521.15       N/A

SUM device_to_device_bidirectional_memcpy_read_ce_total 63869.90
COEFFICIENT_OF_VARIATION device_to_device_bidirectional_memcpy_read_ce_total 0.00
"""

# v0.9 on an RTX 5060 Ti behind a PCIe riser, from a public benchmark README: the host name line above the
# device list, PCI ids in the device line, the closing NOTE.
V09_HOSTNAME = """\
nvbandwidth Version: v0.9
Built from Git version: v0.9

CUDA Runtime Version: 13030
CUDA Driver Version: 13030
Driver Version: 610.43.02

archlinux
Device 0: NVIDIA GeForce RTX 5060 Ti (00000000:01:00)

Running host_to_device_bidirectional_memcpy_ce.
memcpy CE CPU(row) <-> GPU(column) bandwidth (GB/s)
           0
 0     18.00

SUM host_to_device_bidirectional_memcpy_ce 18.00

Running host_to_device_bidirectional_memcpy_sm.
memcpy SM CPU(row) <-> GPU(column) bandwidth (GB/s)
           0
 0     21.99

SUM host_to_device_bidirectional_memcpy_sm 21.99

NOTE: The reported results may not reflect the full capabilities of the platform.
Performance can vary with software drivers, hardware clocks, and system topology.
"""

# v0.2 waiving a testcase (NVIDIA/nvbandwidth issue #13, 2x RTX 2080 Ti without P2P).
V02_WAIVED = """\
$ ./nvbandwidth -t device_to_device_memcpy_write_ce
nvbandwidth Version: v0.2
Built from Git version: 6cefdda

NOTE: This tool reports current measured bandwidth on your system.
Additional system-specific tuning may be required to achieve maximal peak bandwidth.

CUDA Runtime Version: 12010
CUDA Driver Version: 12000
Driver Version: 525.125.06

Device 0: NVIDIA GeForce RTX 2080 Ti
Device 1: NVIDIA GeForce RTX 2080 Ti

Waiving device_to_device_memcpy_write_ce.
"""


def test_suffixed_sums_name_the_matrices_of_one_testcase() -> None:
    parsed = nvbandwidth.parse(V010_BIDIRECTIONAL, "v010.log")
    names = [m.name for m in parsed.matrices]
    base = "device_to_device_bidirectional_memcpy_read_ce"
    assert names == [f"{base}_read1", f"{base}_read2", f"{base}_total"]
    total = parsed.matrices[2]
    assert total.unit == "GB/s" and total.sum == 63869.90
    assert total.values[0][1] == 1521.22 and total.values[6][1] == 1517.86
    assert all(total.values[i][i] is None for i in range(7))
    assert parsed.info["coefficient_of_variation"] == {f"{base}_total": 0.0}
    assert parsed.info["titles"][f"{base}_read1"].endswith("Read1 bandwidth (GB/s)")
    assert (parsed.info["cuda_runtime_version"], parsed.info["cuda_driver_version"]) == (13030, 13030)
    assert parsed.info["version"] == "v0.10.0" and parsed.info["driver_version"] == "610.57.04"
    assert parsed.runs == ()


def test_hostname_line_and_pci_ids() -> None:
    parsed = nvbandwidth.parse(V09_HOSTNAME, "v09.log")
    assert parsed.info["hostname"] == "archlinux"
    assert parsed.info["devices"] == [
        {"id": 0, "name": "NVIDIA GeForce RTX 5060 Ti", "bus_id": "00000000:01:00"}
    ]
    assert [(m.name, m.values, m.sum) for m in parsed.matrices] == [
        ("host_to_device_bidirectional_memcpy_ce", ((18.0,),), 18.0),
        ("host_to_device_bidirectional_memcpy_sm", ((21.99,),), 21.99),
    ]


def test_waived_testcase_is_recorded_not_an_error() -> None:
    parsed = nvbandwidth.parse(V02_WAIVED, "waived.log")
    assert parsed.matrices == ()
    assert parsed.info["testcase_status"] == {"device_to_device_memcpy_write_ce": "Waived"}
    assert len(parsed.info["devices"]) == 2


def test_json_output() -> None:
    # Shaped as json_output.cpp (v0.8) writes it; the device strings are those of NVIDIA/nvbandwidth PR #54.
    document = {
        "nvbandwidth": {
            "CUDA Runtime Version": 13000,
            "Driver Version": "580.105.08",
            "GPU Device list": [
                "0: NVIDIA GB200 (00000008:06:00): (n179-067-085)",
                "1: NVIDIA GB200 (00000009:06:00): (n179-067-085)",
            ],
            "git_version": "v0.8",
            "testcases": [
                {
                    "bandwidth_description": "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)",
                    "bandwidth_matrix": [["N/A", "750.5"], ["751", "N/A"]],
                    "name": "device_to_device_memcpy_write_ce",
                    "status": "Passed",
                    "sum": 1501.5,
                },
                {"name": "device_to_device_memcpy_read_ce", "status": "Waived"},
            ],
            "version": "v0.8",
        }
    }
    text = "[1,0]<stdout>: launcher noise\n" + json.dumps(document, indent=8)
    assert nvbandwidth.sniff(json.dumps(document)) == "nvbandwidth"
    parsed = nvbandwidth.parse(text, "nvb.json")
    (matrix,) = parsed.matrices
    assert (matrix.name, matrix.unit, matrix.sum) == ("device_to_device_memcpy_write_ce", "GB/s", 1501.5)
    assert matrix.values == ((None, 750.5), (751.0, None))
    assert parsed.info["devices"][1] == {
        "id": 1,
        "name": "NVIDIA GB200",
        "bus_id": "00000009:06:00",
        "host": "n179-067-085",
    }
    assert parsed.info["testcase_status"]["device_to_device_memcpy_read_ce"] == "Waived"


def test_sniff_claims_no_other_corpus_sample() -> None:
    others = [p for p in CORPUS.glob("*/*.txt") if p.parent.name != "nvbandwidth"]
    assert len(others) > 30
    assert [p.name for p in others if nvbandwidth.sniff(p.read_text(errors="replace"))] == []


def test_text_without_banner_or_matrix_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="no nvbandwidth banner"):
        nvbandwidth.parse("Running something.\nSUM x_ce 1.0\n", "x.txt")


def test_sniff_is_cheap_on_a_large_foreign_log() -> None:
    nccl = (CORPUS / "nccl-tests" / "hgx-h100-2node-16rank-mpi-warnings-interleaved-16GiB.txt").read_text()
    big = nccl * (12_000_000 // len(nccl) + 1)
    start = time.perf_counter()
    assert nvbandwidth.sniff(big) is None
    rate = len(big) / (time.perf_counter() - start) / 1e6
    assert rate >= 20, f"sniff reads {rate:.0f} MB/s"
