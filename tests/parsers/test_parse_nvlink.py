"""NVLink rules: `<inactive>` is a link down, `-e` counters are kept per link and merge with `-s`,
dcgmi's letters map to states, `topo -p2p` is its own kind."""

from __future__ import annotations

from pathlib import Path

from collbench_py.parsers import detect, parse_text
from collbench_py.parsers.nvlink import DcgmiLinks, NvlinkGpu

CORPUS = Path(__file__).parents[1] / "data" / "corpus" / "nvlink"
H100 = (CORPUS / "gke-a3-h100-1gpu-pod-nvlink-status-tab-indent.txt").read_text()
DCGMI = (CORPUS / "dcgmi-nvlink-link-status-2x-h100-nvl-all-18-down.txt").read_text()
GPU_LINE = H100.splitlines()[0]


def _gpus(text: str) -> list[NvlinkGpu]:
    assert detect(text) == "nvidia-smi-nvlink"
    return list(parse_text(text, "x").records)


def test_an_inactive_link_is_down_with_no_speed() -> None:
    [gpu] = _gpus(H100.replace("\t Link 3: 26.562 GB/s", "\t Link 3: <inactive>"))
    link3 = gpu.links[3]
    assert (link3.state, link3.speed_gbs) == ("down", None)
    assert [link.link for link in gpu.links if link.state != "up"] == [3]
    assert (
        parse_text(H100.replace("\t Link 3: 26.562 GB/s", "\t Link 3: <inactive>"), "x").info["links_down"]
        == 1
    )


def test_every_link_up_gives_none_down() -> None:
    parsed = parse_text(H100, "x")
    assert parsed.info == {"gpus": 1, "links_down": 0}
    assert {link.speed_gbs for gpu in parsed.records for link in gpu.links} == {26.562}


# `nvidia-smi nvlink -e` prints, per GPU line, one `Link n: <Counter>: <value>` line per counter.
def _errors(crc_on_link_5: int) -> str:
    lines = [GPU_LINE]
    for link in range(18):
        crc = crc_on_link_5 if link == 5 else 0
        lines += [f"\t Link {link}: Replay Errors: 0", f"\t Link {link}: Recovery Errors: 0"]
        lines += [f"\t Link {link}: CRC Errors: {crc}"]
    return "\n".join(lines) + "\n"


def test_error_counters_are_kept_per_link_by_name() -> None:
    [gpu] = _gpus(_errors(crc_on_link_5=12))
    assert gpu.links[5].counters == {"replay_errors": 0, "recovery_errors": 0, "crc_errors": 12}
    assert gpu.links[4].counters["crc_errors"] == 0
    assert gpu.links[5].state is None  # -e alone says nothing of the state


def test_status_and_errors_in_one_file_merge_per_gpu_and_link() -> None:
    [gpu] = _gpus(H100 + _errors(crc_on_link_5=7))
    assert len(gpu.links) == 18
    assert (gpu.links[5].state, gpu.links[5].speed_gbs, gpu.links[5].counters["crc_errors"]) == (
        "up",
        26.562,
        7,
    )


def test_dcgmi_letters_map_to_states() -> None:
    text = DCGMI.replace(
        "    gpuId 1:\n        D D D D D D D D D D D D D D D D D D",
        "    gpuId 1:\n        U U U U U U U U U U U U U U U X D _",
    )
    assert detect(text) == "dcgmi-nvlink"
    parsed = parse_text(text, "x")
    gpu1 = parsed.records[1]
    assert isinstance(gpu1, DcgmiLinks)
    assert gpu1.states[-3:] == ("disabled", "down", "not-supported")
    assert gpu1.states.count("up") == 15
    assert (parsed.info["links_up"], parsed.info["links_down"]) == (15, 19)


def test_topo_p2p_is_its_own_kind_not_a_topology_matrix() -> None:
    text = (CORPUS / "topo-p2p-rw-2x-rtx5090-gns-tabs.txt").read_text()
    assert detect(text) == "nvidia-smi-topo-p2p"
    parsed = parse_text(text, "x")
    assert parsed.topology is not None
    assert parsed.topology.matrices["p2p"]["GPU0"]["GPU1"] == "GNS"
    assert parsed.info["legend"]["GNS"] == "GPU not supported"
    assert parse_text("$ nvidia-smi topo -p2p rw\n" + text, "x").info["mode"] == "rw"


def test_p2p_after_a_topo_matrix_stays_topology() -> None:
    both = (
        Path(__file__).parents[1]
        / "data/extra/topo-issues/2gpu-node-indented-markdown-wrapped-legend-plus-p2p-ns.txt"
    )
    assert detect(both.read_text()) == "nvidia-smi-topo"


def test_a_gpu_list_without_links_is_not_nvlink_output() -> None:
    assert detect(GPU_LINE + "\n" + GPU_LINE.replace("GPU 0", "GPU 1") + "\n") is None
