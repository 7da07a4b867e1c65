"""p2pBandwidthLatencyTest and rocm-bandwidth-test: matrices found by name, devices, peer access."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from collbench_py.parsers import matrices
from collbench_py.parsers.models import Matrix, ParsedFile, ParseError

CORPUS = Path(__file__).parents[1] / "data" / "corpus"
P2P_5090 = CORPUS / "other" / "p2pBandwidthLatencyTest-2x-rtx5090-no-p2p.txt"
ROCM_MI210 = CORPUS / "other" / "rocm-bandwidth-test-archer2-4xMI210-plus-4cpu.txt"

# 4x V100-SXM2 on JUWELS, from ginkgo-project/ginkgo issue #164 (the output as posted, cut after the
# connectivity matrix): every pair CAN access its peer; TAB after the row id.
P2P_V100 = """\
[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]
Device: 0, Tesla V100-SXM2-16GB, pciBusID: 5d, pciDeviceID: 0, pciDomainID:0
Device: 1, Tesla V100-SXM2-16GB, pciBusID: 5e, pciDeviceID: 0, pciDomainID:0
Device: 2, Tesla V100-SXM2-16GB, pciBusID: 88, pciDeviceID: 0, pciDomainID:0
Device: 3, Tesla V100-SXM2-16GB, pciBusID: 89, pciDeviceID: 0, pciDomainID:0
Device=0 CAN Access Peer Device=1
Device=0 CAN Access Peer Device=2
Device=0 CAN Access Peer Device=3
Device=1 CAN Access Peer Device=0
Device=1 CAN Access Peer Device=2
Device=1 CAN Access Peer Device=3
Device=2 CAN Access Peer Device=0
Device=2 CAN Access Peer Device=1
Device=2 CAN Access Peer Device=3
Device=3 CAN Access Peer Device=0
Device=3 CAN Access Peer Device=1
Device=3 CAN Access Peer Device=2

***NOTE: In case a device doesn't have P2P access to other one, it falls back to normal memcopy procedure.
So you can see lesser Bandwidth (GB/s) and unstable Latency (us) in those cases.

P2P Connectivity Matrix
     D\\D     0     1     2     3
     0\t     1     1     1     1
     1\t     1     1     1     1
     2\t     1     1     1     1
     3\t     1     1     1     1
"""


def by_name(parsed: ParsedFile, name: str) -> Matrix:
    found = [m for m in parsed.matrices if m.name == name]
    assert len(found) == 1, f"{name!r} in {[m.name for m in parsed.matrices]}"
    return found[0]


def test_p2p_matrices_by_name() -> None:
    parsed = matrices.parse(P2P_5090.read_text(), P2P_5090.name)
    assert parsed.kind == "p2p-bandwidth-latency"
    assert by_name(parsed, "P2P Connectivity Matrix").values == ((1.0, 0.0), (0.0, 1.0))
    unidirectional = by_name(parsed, "Unidirectional P2P=Disabled Bandwidth Matrix")
    assert unidirectional.unit == "GB/s" and unidirectional.values[1][0] == 38.92
    assert by_name(parsed, "Bidirectional P2P=Enabled Bandwidth Matrix").values[0][1] == 43.19
    gpu = by_name(parsed, "P2P=Disabled Latency Matrix GPU")
    cpu = by_name(parsed, "P2P=Disabled Latency Matrix CPU")
    assert (gpu.unit, gpu.values[0][1], cpu.unit, cpu.values[0][1]) == ("us", 12.83, "us", 5.91)
    assert by_name(parsed, "P2P=Enabled Latency (P2P Writes) Matrix CPU").values[1][0] == 5.64


def test_p2p_devices_and_peer_access() -> None:
    parsed = matrices.parse(P2P_V100, "v100.txt")
    assert [d["bus_id"] for d in parsed.info["devices"]] == [
        "0000:5d:00",
        "0000:5e:00",
        "0000:88:00",
        "0000:89:00",
    ]
    assert parsed.info["devices"][0]["name"] == "Tesla V100-SXM2-16GB"
    assert parsed.info["peer_access"]["2"] == {"0": True, "1": True, "3": True}
    (connectivity,) = parsed.matrices
    assert connectivity.values == ((1.0,) * 4,) * 4 and connectivity.unit is None


def test_rocm_matrices_and_devices() -> None:
    parsed = matrices.parse(ROCM_MI210.read_text(), ROCM_MI210.name)
    assert parsed.kind == "rocm-bandwidth-test"
    assert by_name(parsed, "Inter-Device Numa Distance").values[4][5] == 15
    unidirectional = by_name(parsed, "Unidirectional copy peak bandwidth")
    assert unidirectional.unit == "GB/s" and unidirectional.values[7][7] == 1051.212
    assert unidirectional.values[0][:4] == (None,) * 4
    devices = parsed.info["devices"]
    assert [d["type"] for d in devices] == ["cpu"] * 4 + ["gpu"] * 4
    assert devices[4] == {
        "id": 4,
        "name": None,
        "type": "gpu",
        "uuid": "GPU-ab43b63dec8adaf3",
        "bus_id": "c9:0.0",
    }


def test_sniff_claims_no_other_corpus_sample() -> None:
    mine = {P2P_5090.name, ROCM_MI210.name}
    others = [p for p in CORPUS.glob("*/*.txt") if p.name not in mine]
    assert len(others) > 30
    assert [p.name for p in others if matrices.sniff(p.read_text(errors="replace"))] == []


def test_foreign_text_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="not p2pBandwidthLatencyTest"):
        matrices.parse("GPU0\tX\tNV18\n", "topo.txt")


def test_sniff_is_cheap_on_a_large_foreign_log() -> None:
    nccl = (CORPUS / "nccl-tests" / "hgx-h100-2node-16rank-mpi-warnings-interleaved-16GiB.txt").read_text()
    big = nccl * (12_000_000 // len(nccl) + 1)
    start = time.perf_counter()
    assert matrices.sniff(big) is None
    rate = len(big) / (time.perf_counter() - start) / 1e6
    assert rate >= 20, f"sniff reads {rate:.0f} MB/s"
