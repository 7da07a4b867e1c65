"""The facts parsers on real tool outputs (tests/data/facts-real/, each with its source in README.md),
and the torch probe run for real on this machine's torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from collbench_py.facts.hostfacts import (
    cuda_version,
    host_facts,
    parse_ibstat,
    parse_ibv_devinfo,
    parse_torch_probe,
)
from collbench_py.facts.probe_fleet import probe_list

REAL = Path(__file__).parents[1] / "data" / "facts-real"
REPO = Path(__file__).resolve().parents[2]


def sample(name: str) -> str:
    return (REAL / name).read_text(encoding="utf-8")


def test_every_sample_names_its_source() -> None:
    readme = (REAL / "README.md").read_text(encoding="utf-8")
    for path in REAL.glob("*.txt"):
        row = next(line for line in readme.splitlines() if line.startswith(f"| {path.name} |"))
        assert "https://" in row, path.name


def test_ibstat_of_connectx7_ndr_ports() -> None:
    ports = parse_ibstat(sample("ibstat-connectx7-ndr-400.txt"))
    assert ports == [
        {"device": "mlx5_0", "port": 1, "state": "Active", "rate_gbps": 400, "link_layer": "InfiniBand"},
        {"device": "mlx5_1", "port": 1, "state": "Active", "rate_gbps": 400, "link_layer": "InfiniBand"},
    ]


def test_ibstat_port_down_keeps_its_state_and_rate() -> None:
    ports = parse_ibstat(sample("ibstat-connectx6-hdr-one-port-down.txt"))
    assert [(p["device"], p["state"], p["rate_gbps"]) for p in ports] == [
        ("mlx5_0", "Active", 200),
        ("mlx5_1", "Down", 10),
    ]


def test_the_ibstat_rate_reaches_the_facts() -> None:
    facts = host_facts({"hostname": "n1", "ibstat": sample("ibstat-connectx7-ndr-400.txt")})
    assert [p["rate_gbps"] for p in facts["ib"]] == [400, 400]


def test_ibv_devinfo_of_a_connectx7_port_down() -> None:
    ports = parse_ibv_devinfo(sample("ibv_devinfo-connectx7-port-down.txt"))
    assert ports == [
        {"device": "mlx5_0", "port": 1, "state": "Down", "rate_gbps": None, "link_layer": "InfiniBand"}
    ]


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("nvidia-smi-450-cuda-11.0.txt", "11.0"),
        ("nvidia-smi-550-cuda-12.4.txt", "12.4"),
        ("nvidia-smi-610-cuda-umd-13.3.txt", "13.3"),
    ],
)
def test_cuda_version_from_the_nvidia_smi_header(name: str, version: str) -> None:
    assert cuda_version(sample(name)) == version


def test_the_torch_probe_on_this_machines_torch() -> None:
    script = (REPO / "collbench_py" / "node" / "torch_probe.py").read_text(encoding="utf-8")
    # the facts task gives the node's Python the program in collbench_py/node/, as text
    argv = next(argv for name, argv in probe_list(sys.executable, None, script) if name == "torch")
    assert argv == [sys.executable, "-c", script]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=True)
    import torch  # noqa: PLC0415 - heavy, only here

    found = parse_torch_probe(done.stdout)
    assert found["torch"] == torch.__version__
    assert found["cuda"] == torch.version.cuda
    assert found["devices"] == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    facts = host_facts({"hostname": "n1", "torch": done.stdout})
    assert facts["torch_version"] == torch.__version__
