"""The build decisions of the nvbandwidth and perftest roles (collbench_py.facts.check_tools), on
the probe's real report format (collbench_py/node/toolchain_probe.py, run here for real)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from collbench_py.facts.check_tools import (
    CMAKE_DEFINE,
    CONFIGURE_ARG,
    cuda_architectures,
    cuda_probe_request,
    nvbandwidth_build,
    nvml_include,
    perftest_build,
)

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "collbench_py" / "node" / "toolchain_probe.py"
# nvidia-smi --query-gpu=compute_cap --format=csv,noheader on a real 8x H100 node
H100_CAPS = "9.0\n" * 8


def fake_cuda(root: Path) -> Path:
    home = root / "cuda"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "nvcc").write_text("#!/bin/sh\n")
    return home


def probed(settings: dict, smi: str | None = None) -> dict:
    """The probe run for real on `settings`' request; nvidia-smi's answer put in as a node's would be."""
    request = cuda_probe_request(settings, want_gpus=False)
    done = subprocess.run(
        [sys.executable, str(PROBE), json.dumps(request)], capture_output=True, text=True, check=True
    )
    report = json.loads(done.stdout)
    report["nvidia_smi"] = None if smi is None else {"rc": 0, "stdout": smi}
    return {"rc": 0, "stdout": json.dumps(report)}


def test_architectures_are_the_compute_capabilities_present() -> None:
    assert cuda_architectures(H100_CAPS) == "90"
    assert cuda_architectures("8.0\n9.0\n8.0\n") == "80;90"
    assert cuda_architectures("") == ""
    # nvidia-smi's failure text is no capability
    assert (
        cuda_architectures("NVIDIA-SMI has failed because it couldn't communicate with the driver.\n") == ""
    )


def test_nvbandwidth_builds_for_the_gpus_present(tmp_path: Path) -> None:
    home = fake_cuda(tmp_path)
    settings = {
        "cuda_home": "",
        "cuda_home_candidates": ["/no/cuda", str(home)],
        "cmake_extra_args": ["-DX=1"],
    }
    decided = nvbandwidth_build(settings, probed(settings, H100_CAPS))
    assert decided["build"] is True and decided["note"] is None
    assert decided["cuda_home"] == str(home)
    assert decided["cmake_args"][:3] == (
        f"-DCMAKE_CUDA_COMPILER={home}/bin/nvcc",
        "-DCMAKE_CUDA_ARCHITECTURES=90",
        "-DCMAKE_BUILD_TYPE=Release",
    )
    assert decided["cmake_args"][-1] == "-DX=1"  # the user's, last: they win


def test_an_explicit_architecture_overrides_and_builds_without_a_gpu(tmp_path: Path) -> None:
    home = fake_cuda(tmp_path)
    settings = {"cuda_home": str(home), "cuda_architectures": "80;90"}
    decided = nvbandwidth_build(settings, probed(settings, H100_CAPS))
    assert decided["build"] and decided["architectures"] == "80;90"
    no_gpu = nvbandwidth_build(settings, probed(settings, None))
    assert no_gpu["build"] and no_gpu["architectures"] == "80;90"


def test_nvbandwidth_is_not_built_without_a_gpu_or_a_toolkit(tmp_path: Path) -> None:
    home = fake_cuda(tmp_path)
    settings = {"cuda_home": str(home)}
    no_gpu = nvbandwidth_build(settings, probed(settings, ""))
    assert no_gpu["build"] is False and no_gpu["note"].startswith("no NVIDIA GPU seen")
    assert "collbench_nvbandwidth_cuda_architectures" in no_gpu["note"]
    # a toolkit given is the only place looked in (no candidates, no /usr/local/cuda-*)
    settings = {"cuda_home": str(tmp_path / "none"), "cuda_home_candidates": [str(home)]}
    no_cuda = nvbandwidth_build(settings, probed(settings, H100_CAPS))
    assert no_cuda["build"] is False and no_cuda["cmake_args"] == ()
    assert no_cuda["note"].startswith(f"no CUDA toolkit (bin/nvcc) in {tmp_path / 'none'}/: ")
    # the probe did not run (no Python on the node): nothing found, not a failure
    assert nvbandwidth_build(settings, {"rc": 127, "stdout": ""})["build"] is False


def test_nvml_h_is_needed_and_a_directory_given_reaches_the_compilers(tmp_path: Path) -> None:
    home = fake_cuda(tmp_path)
    settings = {"cuda_home": str(home), "cuda_architectures": "90"}
    assert nvml_include(settings, probed(settings)) == f"{home}/include"
    missing = nvbandwidth_build(settings, probed(settings), nvml_found=False)
    assert missing["build"] is False and missing["note"].startswith(f"no nvml.h in {home}/include/: ")
    settings["nvml_include"] = "/opt/nvml/include/"
    assert nvml_include(settings, probed(settings)) == "/opt/nvml/include"
    given = nvbandwidth_build(settings, probed(settings))
    assert "-DCMAKE_CXX_FLAGS=-I/opt/nvml/include" in given["cmake_args"]
    assert "-DCMAKE_CUDA_FLAGS=-I/opt/nvml/include" in given["cmake_args"]


def test_perftest_gets_cuda_for_gpudirect_where_the_toolkit_is(tmp_path: Path) -> None:
    home = fake_cuda(tmp_path)
    settings = {
        "cuda_home": "",
        "cuda_home_candidates": [str(home)],
        "configure_extra_args": ["--disable-ibv_wr_api"],
    }
    decided = perftest_build(settings, probed(settings), True, ["mlx5_0"])
    assert decided["build"] and decided["configure_args"] == (
        f"CUDA_H_PATH={home}/include/cuda.h",
        "--disable-ibv_wr_api",
    )
    settings["cuda_home"] = str(tmp_path / "none")
    without = perftest_build(settings, probed(settings), True, ["mlx5_0"])
    assert without["build"] and without["configure_args"] == ("--disable-ibv_wr_api",)


def test_perftest_is_not_built_without_verbs_or_a_device(tmp_path: Path) -> None:
    settings = {"cuda_home": str(fake_cuda(tmp_path))}
    no_verbs = perftest_build(settings, probed(settings), False, ["mlx5_0"])
    assert no_verbs["build"] is False and no_verbs["note"].startswith("no libibverbs headers")
    no_device = perftest_build(settings, probed(settings), True, [])
    assert no_device["build"] is False and no_device["note"].startswith("no RDMA device")
    anyway = perftest_build({**settings, "build_without_device": "true"}, probed(settings), True, [])
    assert anyway["build"] is True


@pytest.mark.parametrize(
    ("arg", "good"),
    [
        ("-DCMAKE_CXX_FLAGS=-I/opt/x", True),
        ("-DCMAKE_BUILD_TYPE:STRING=Debug", True),
        ("CMAKE_BUILD_TYPE=Debug", False),
        ("-D=1", False),
        ("--build", False),
    ],
)
def test_cmake_arguments_are_cache_entries(arg: str, good: bool) -> None:
    assert bool(CMAKE_DEFINE.match(arg)) is good


@pytest.mark.parametrize(
    ("arg", "good"),
    [
        ("--disable-ibv_wr_api", True),
        ("--prefix=/opt/perftest", True),
        ("CUDA_H_PATH=/usr/local/cuda/include/cuda.h", True),
        ("; rm -rf /", False),
        ("-x", False),
    ],
)
def test_configure_arguments_are_options_or_variables(arg: str, good: bool) -> None:
    assert bool(CONFIGURE_ARG.match(arg)) is good
