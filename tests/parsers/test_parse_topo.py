"""`nvidia-smi topo -m` and `rocm-smi --showtopo`: real corpus samples, and the same samples mangled
the way pastes mangle them (tabs expanded to spaces, tabs dropped so cells run together, CRLF line
ends, the old layout that named NICs `mlx5_N` in the matrix itself).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from collbench_py.parsers import detect, topo
from collbench_py.parsers.models import ParseError, Topology

CORPUS = Path(__file__).parents[1] / "data" / "corpus"
TOPO = CORPUS / "topo"
TABBED = sorted(p for p in TOPO.glob("*.txt") if "\t" in p.read_text())
DGX = TOPO / "dgx-a100-nv12-10nics-tabs-numa.txt"
SGLANG = TOPO / "hgx-h100-nv18-8nics-gpu-numa-id-spaces-sglang.txt"
MI300X = TOPO / "rocm-smi-showtopo-mi300x-8gpu-xgmi-lowpower-warning.txt"
_CELL = re.compile(r"^(?:X|NV\d+|PIX|PXB|PHB|NODE|SYS)$")


def _topology(text: str) -> Topology:
    parsed = topo.parse(text, "topo.txt")
    assert parsed.topology is not None
    return parsed.topology


@pytest.mark.parametrize("sample", TABBED, ids=lambda p: p.stem)
def test_tabs_expanded_to_spaces_read_the_same(sample: Path) -> None:
    text = sample.read_text()
    assert _topology("\n".join(line.expandtabs(8) for line in text.splitlines())) == _topology(text)


@pytest.mark.parametrize("sample", TABBED, ids=lambda p: p.stem)
def test_crlf_line_ends_read_the_same(sample: Path) -> None:
    text = sample.read_text()
    assert _topology(text.replace("\n", "\r\n")) == _topology(text)


def _glue(text: str) -> str:
    """Drop the separators between link cells, keep one space before the affinity cells."""
    out = []
    for line in text.splitlines():
        cells = line.split("\t")
        if cells[0].startswith(("GPU", "NIC")) and len(cells) > 2:
            n = next(i for i, c in enumerate(cells[1:], 1) if not _CELL.match(c.strip()))
            rest = [c for c in cells[n:] if c.strip()]
            line = " ".join([cells[0], "".join(cells[1:n]), *rest])
        out.append(line)
    return "\n".join(out)


def test_cells_run_together_are_read_by_their_vocabulary() -> None:
    text = DGX.read_text()
    glued = _glue(text)
    assert "NV12NV12PXBPXBSYSSYSSYS" in glued
    assert _topology(glued) == _topology(text)


def test_dgx_links_cover_every_gpu_and_nic_pair() -> None:
    t = _topology(DGX.read_text())
    labels = [*t.gpus, *t.nics]
    assert len(labels) == 18
    for row in labels:
        assert list(t.links[row]) == labels
        assert t.links[row][row] == "X"
        for col in labels:
            assert t.links[row][col] == t.links[col][row]


def test_old_layout_naming_nics_in_the_matrix() -> None:
    # Drivers before the NIC legend printed the device names as row and column labels.
    text = DGX.read_text().split("\nLegend:")[0]
    old = re.sub(r"NIC(\d+)", r"mlx5_\1", text)
    t = _topology(old)
    assert t.gpus == tuple(f"GPU{i}" for i in range(8))
    assert t.nics["mlx5_9"] == "mlx5_9"
    assert t.links["GPU0"]["mlx5_0"] == "PXB"
    assert t.links["mlx5_8"]["mlx5_9"] == "PIX"


def test_an_empty_cpu_affinity_keeps_the_numa_column() -> None:
    lines = SGLANG.read_text().splitlines()
    i = next(i for i, line in enumerate(lines) if line.startswith("GPU0"))
    lines[i] = lines[i].replace("0-47,96-143", " " * len("0-47,96-143"))
    t = _topology("\n".join(lines))
    assert t.cpu_affinity["GPU0"] is None
    assert t.numa_affinity["GPU0"] == "0"
    assert t.gpu_numa_id["GPU0"] is None
    assert t.cpu_affinity["GPU1"] == "0-47,96-143"


def test_a_real_empty_cpu_affinity_leaves_the_numa_column_in_place() -> None:
    # Slurm gave the job CPUs of socket 0 only: GPU4-7 print no CPU affinity, but their NUMA node.
    t = _topology((TOPO / "a100-pcie-8gpu-slurm-cpuset-empty-cpu-affinity-dask-cuda.txt").read_text())
    assert [t.cpu_affinity[f"GPU{i}"] for i in (3, 4, 7)] == ["0-15,56-71", None, None]
    assert [t.numa_affinity[f"GPU{i}"] for i in (3, 4, 7)] == ["0", "1", "1"]
    assert t.links["GPU6"]["NIC0"] == "PHB" and t.links["GPU4"]["GPU5"] == "NV12"


def test_single_gpu_without_legend() -> None:
    text = "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t0-15\t0\t\tN/A\n"
    assert detect(text) == "nvidia-smi-topo"
    t = _topology(text)
    assert (t.gpus, t.links, t.cpu_affinity, t.numa_affinity) == (
        ("GPU0",),
        {"GPU0": {"GPU0": "X"}},
        {"GPU0": "0-15"},
        {"GPU0": "0"},
    )


def test_rocm_links_use_x_on_the_diagonal_and_keep_the_raw_matrices() -> None:
    t = _topology(MI300X.read_text())
    assert t.links["GPU3"]["GPU3"] == "X"
    assert t.links["GPU3"]["GPU4"] == "XGMI"
    assert t.matrices["weight"]["GPU3"]["GPU3"] == "0"
    assert t.matrices["numa"]["GPU5"] == {"node": "1", "affinity": "1"}
    assert set(t.matrices) == {"weight", "hops", "numa"}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "No devices were found\n",
        "Failed to initialize NVML: Driver/library version mismatch\n",
        "\tGPU0\tGPU1\n",  # a header with no rows
    ],
)
def test_no_matrix_is_one_clear_error(text: str) -> None:
    assert topo.sniff(text) is None
    with pytest.raises(ParseError):
        topo.parse(text, "topo.txt")


@pytest.mark.parametrize(
    "sample",
    sorted(p for p in CORPUS.glob("*/*.txt") if p.parent.name != "topo"),
    ids=lambda p: f"{p.parent.name}/{p.stem}",
)
def test_other_outputs_are_not_claimed(sample: Path) -> None:
    assert topo.sniff(sample.read_text(errors="replace")) is None


def test_a_topology_printed_inside_an_nccl_tests_log_is_left_to_that_log() -> None:
    log = (CORPUS / "nccl-tests" / "cscs-gh200-2node-v2.18.2-version-header.txt").read_text()
    assert topo.sniff(DGX.read_text() + "\n" + log) is None
