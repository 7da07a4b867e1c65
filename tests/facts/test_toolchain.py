"""The nccl-tests toolchain (collbench_py.facts.toolchain) decided from the node probe's real reports.

The reports are what collbench_py/node/toolchain_probe.py prints: captured on this machine
(tests/data/toolchain-probe/: CUDA 13 in /usr/local/cuda, the nvidia-nccl-cu13 wheel, no GPU), or
printed here by the real probe over a scratch tree of toolkit directories.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from collbench_py.facts.toolchain import (
    Settings,
    decide,
    decide_fact,
    gencode_flags,
    gpu_targets,
    nccl_versions,
    node_pythons,
    probe_request,
)

REPO = Path(__file__).resolve().parents[2]
PROBE = REPO / "collbench_py" / "node" / "toolchain_probe.py"
CAPTURE = json.loads((REPO / "tests/data/toolchain-probe/cpu-box-cuda13-nccl-wheel.json").read_text())
REPORT = CAPTURE["report"]
WHEEL = "/work/main/.venv/lib/python3.11/site-packages/nvidia/nccl"  # as captured
H100_COMPUTE_CAP = (REPO / "tests/data/gpu-captures/h100-1gpu-compute-cap.csv").read_text()
DEFAULTS = yaml.safe_load((REPO / "roles/nccl_tests/defaults/main.yml").read_text())
# Debian's Open MPI (collbench_py.facts.mpi on tests/data/ompi-info/debian12-openmpi-4.1.4.txt) and RHEL's.
DEBIAN_MPI = {
    "mpirun": "/usr/bin/mpirun",
    "prefix": "/usr",
    "home": "/usr/lib/x86_64-linux-gnu/openmpi",
    "include": "/usr/lib/x86_64-linux-gnu/openmpi/include",
    "lib": "/usr/lib/x86_64-linux-gnu/openmpi/lib",
}
RHEL_MPI = {
    "mpirun": "/usr/lib64/openmpi/bin/mpirun",
    "prefix": "/usr/lib64/openmpi",
    "home": "/usr/lib64/openmpi",
    "include": "/usr/include/openmpi-x86_64",
    "lib": "/usr/lib64/openmpi/lib",
}


def settings(**overrides: Any) -> Settings:
    """The role's defaults, the captured Pythons, and what a test changes."""
    data = {k.removeprefix("collbench_nccl_tests_"): v for k, v in DEFAULTS.items()}
    data["pythons"] = CAPTURE["request"]["pythons"]
    return Settings.from_dict({**data, **overrides})


def run_probe(request: dict[str, Any]) -> dict[str, Any]:
    """The real node program, run as the role runs it (python -c, the request as argument)."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE.read_text(), json.dumps(request)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(done.stdout)


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def system_nccl(root: Path, version: str) -> Path:
    """A NCCL's headers with the wheel's real nccl.h, its version set to `version`."""
    spec = importlib.util.find_spec("nvidia.nccl")
    assert spec is not None and spec.submodule_search_locations
    header = (Path(next(iter(spec.submodule_search_locations))) / "include" / "nccl.h").read_text()
    for name, value in zip(("MAJOR", "MINOR", "PATCH"), version.split("."), strict=True):
        header = re.sub(rf"^#define NCCL_{name} \d+$", f"#define NCCL_{name} {value}", header, flags=re.M)
    (root / "include").mkdir(parents=True)
    (root / "include" / "nccl.h").write_text(header)
    return root


# ------------------------------------------------------------------ the captured report


def test_the_captured_report_builds_against_the_wheel_with_links() -> None:
    chain = decide(settings(), REPORT, DEBIAN_MPI)
    assert chain.vendor == "nvidia" and chain.suite == "nccl-tests"
    assert chain.homes == {
        "cuda": "/usr/local/cuda",
        "rocm": "",
        "nccl": WHEEL,
        "rccl": "",
        "mpi": DEBIAN_MPI["home"],
    }
    assert chain.nccl is not None
    assert (chain.nccl.home, chain.nccl.version, chain.nccl.passed_over) == (WHEEL, "2.32.3", ())
    assert chain.nccl.source == "pip wheel of /work/main/.venv/bin/python"
    # the wheel ships libnccl.so.2 only: NCCL_HOME is the directory of links
    assert chain.link_nccl and not chain.link_mpi
    assert chain.make_args == (
        "MPI=1",
        f"MPI_HOME={DEBIAN_MPI['home']}",
        "CUDA_HOME=/usr/local/cuda",
        "NCCL_HOME=/var/tmp/collbench/nccl-tests/nccl-home",
    )  # no GPU here: nvidia-smi is not installed (rc 127), the Makefile's own gencode
    assert chain.ld_library_path == f"{WHEEL}/lib:/usr/local/cuda/lib64:{DEBIAN_MPI['lib']}"
    assert chain.problems == ()


def test_the_request_asks_for_what_the_role_needs() -> None:
    assert probe_request(settings()) == CAPTURE["request"]
    given = probe_request(settings(cuda_home="/opt/cuda-12/", nccl_home="/opt/nccl", gencode="-gencode=x"))
    assert given["dirs"][:2] == ["/opt/cuda-12", "/opt/rocm"]  # the given path alone, no trailing slash
    assert given["globs"] == [] and given["pythons"] == []  # no toolkit search, no wheel asked for
    assert given["nvidia_smi"] is False and given["rocm_agents"] is True
    prebuilt = probe_request(settings(source="prebuilt"))
    assert prebuilt["nvidia_smi"] is False and prebuilt["rocm_agents"] is False
    amd = probe_request(settings(vendor="amd"))
    assert amd["pythons"] == [] and amd["nvidia_smi"] is False and amd["rocm_agents"] is True
    assert probe_request(settings(probe_timeout_s="30"))["timeout"] == 30.0


def test_the_nodes_pythons_run_first_blanks_and_auto_left_out() -> None:
    raw = ["", "/venv/bin/python", "auto_silent", "/venv/bin/python", "/usr/bin/python3"]
    assert node_pythons(settings(pythons=raw)) == ["/venv/bin/python", "/usr/bin/python3"]
    assert node_pythons(settings(pythons=["", "auto"])) == ["python3"]


# ------------------------------------------------------------------ where each home is


def test_a_given_home_is_the_only_place_looked_in() -> None:
    chain = decide(settings(cuda_home="/usr/local/cuda-13.0/"), REPORT, DEBIAN_MPI)
    assert chain.homes["cuda"] == "/usr/local/cuda-13.0"
    missing = decide(settings(cuda_home="/no/cuda"), REPORT, DEBIAN_MPI)
    assert missing.problems == (
        "CUDA toolkit (bin/nvcc) not found in /no/cuda/: set collbench_nccl_tests_cuda_home",
    )


def test_the_first_candidate_with_the_file_wins_then_the_versioned_toolkits() -> None:
    listed = decide(
        settings(cuda_home_candidates=["/opt/cuda", "/usr/local/cuda-13.0", "/usr/local/cuda"]), REPORT, None
    )
    assert listed.homes["cuda"] == "/usr/local/cuda-13.0"
    # none of the configured candidates: /usr/local/cuda-*, highest version first
    report = {**REPORT, "globbed": {"/usr/local/cuda-*": ["/usr/local/cuda-12.4", "/usr/local/cuda-13.0"]}}
    report["files"] = ["/usr/local/cuda-12.4/bin/nvcc", "/usr/local/cuda-13.0/bin/nvcc", *REPORT["files"][2:]]
    assert (
        decide(settings(cuda_home_candidates=["/opt/cuda"]), report, None).homes["cuda"]
        == "/usr/local/cuda-13.0"
    )


def test_the_wheel_is_found_before_a_system_nccl(tmp_path: Path) -> None:
    system = system_nccl(tmp_path / "system-nccl", "2.28.3")
    request = probe_request(
        settings(nccl_home_candidates=[str(system)], pythons=[sys.executable, "/usr/bin/python3"])
    )
    chain = decide(
        settings(nccl_home_candidates=[str(system)], pythons=[sys.executable]), run_probe(request), None
    )
    spec = importlib.util.find_spec("nvidia.nccl")
    assert spec is not None and spec.submodule_search_locations
    wheel = next(iter(spec.submodule_search_locations)).rstrip("/")
    assert chain.nccl is not None and chain.nccl.home == wheel
    assert chain.nccl.source == f"pip wheel of {sys.executable}"
    assert chain.nccl.passed_over == (f"{system} (2.28.3)",)
    # no wheel in the node's Pythons: the system NCCL, said to be one
    alone = decide(settings(nccl_home_candidates=[str(system)]), run_probe({"dirs": [str(system)]}), None)
    assert alone.nccl is not None and (alone.nccl.home, alone.nccl.source) == (str(system), "system")
    assert not alone.link_nccl  # headers only, no library listed: no links made for it
    given = decide(settings(nccl_home=str(system)), run_probe({"dirs": [str(system)]}), None)
    assert given.nccl is not None and given.nccl.source == "collbench_nccl_tests_nccl_home"


def test_the_nccl_version_comes_from_its_header() -> None:
    assert nccl_versions(REPORT["nccl_headers"]) == {WHEEL: "2.32.3"}
    lines = [
        "#define NCCL_MAJOR 2",
        "#define NCCL_MINOR 28",
        "#define NCCL_PATCH 3",
        '#define NCCL_SUFFIX ""',
    ]
    assert nccl_versions({"/a": lines, "/b": lines[:2]}) == {"/a": "2.28.3"}  # /b: no patch, no version
    report = {
        **REPORT,
        "files": [*REPORT["files"], "/usr/include/nccl.h"],
        "nccl_headers": {**REPORT["nccl_headers"], "/usr": lines[:2]},
    }
    chain = decide(settings(), report, None)
    assert chain.nccl is not None and chain.nccl.passed_over == ("/usr (version unknown)",)


# ------------------------------------------------------------------ vendor and flags


def test_the_suite_is_rccl_tests_where_rocm_is_found_and_cuda_is_not(tmp_path: Path) -> None:
    rocm = tmp_path / "rocm"
    executable(rocm / "bin" / "hipcc", "#!/bin/sh\n")
    (rocm / "include" / "rccl").mkdir(parents=True)
    (rocm / "include" / "rccl" / "rccl.h").write_text("")
    # what rocm_agent_enumerator prints on a 4x MI300X node: the CPU, then each GPU
    executable(
        rocm / "bin" / "rocm_agent_enumerator",
        "#!/bin/sh\nprintf 'gfx000\\ngfx942\\ngfx942\\ngfx942\\ngfx942\\n'\n",
    )
    chosen = settings(
        rocm_path_candidates=[str(rocm)], cuda_home_candidates=["/nowhere"], nccl_home_candidates=[]
    )
    report = run_probe({**probe_request(chosen), "globs": []})
    chain = decide(chosen, report, DEBIAN_MPI)
    assert (chain.vendor, chain.suite, chain.gpu_targets) == ("amd", "rccl-tests", "gfx942")
    assert chain.homes["rocm"] == chain.homes["rccl"] == str(rocm)
    assert chain.make_args == (
        "MPI=1",
        f"MPI_HOME={DEBIAN_MPI['home']}",
        f"HIP_HOME={rocm}",
        f"ROCM_PATH={rocm}",
        f"NCCL_HOME={rocm}",
        "GPU_TARGETS=gfx942",
    )
    assert chain.ld_library_path == f"{rocm}/lib:{DEBIAN_MPI['lib']}"
    assert chain.nccl is None and chain.problems == ()
    # a CUDA toolkit beside it: nvidia, unless the vendor is said
    with_cuda = {**report, "files": [*report["files"], "/usr/local/cuda/bin/nvcc"]}
    assert decide(settings(rocm_path_candidates=[str(rocm)]), with_cuda, None).vendor == "nvidia"
    assert decide(settings(vendor="amd", rocm_path_candidates=[str(rocm)]), with_cuda, None).vendor == "amd"


def test_gencode_is_one_sass_per_compute_capability_and_ptx_of_the_highest() -> None:
    assert (
        gencode_flags(H100_COMPUTE_CAP)
        == "-gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90"
    )
    mixed = "9.0\n8.0\n 9.0 \n[N/A]\n10.0\n"
    assert gencode_flags(mixed) == (
        "-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90 "
        "-gencode=arch=compute_100,code=sm_100 -gencode=arch=compute_100,code=compute_100"
    )
    assert gencode_flags("") == ""
    report = {**REPORT, "nvidia_smi": {"rc": 0, "stdout": H100_COMPUTE_CAP}}
    assert "NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90" in (
        decide(settings(), report, None).make_args
    )
    assert decide(settings(gencode="-gencode=arch=compute_80,code=sm_80"), report, None).gencode == (
        "-gencode=arch=compute_80,code=sm_80"
    )


def test_gpu_targets_leave_out_the_cpu_agent() -> None:
    assert gpu_targets("gfx000\ngfx90a\ngfx942\ngfx90a\nnot-a-target\n") == "gfx90a,gfx942"
    assert gpu_targets("gfx000\n") == ""


def test_an_mpi_whose_headers_are_apart_is_linked() -> None:
    rhel = decide(settings(), REPORT, RHEL_MPI)
    assert rhel.link_mpi
    assert "MPI_HOME=/var/tmp/collbench/nccl-tests/mpi-home" in rhel.make_args
    assert not decide(settings(mpi=False), REPORT, RHEL_MPI).link_mpi
    assert "MPI=1" not in decide(settings(mpi=False), REPORT, RHEL_MPI).make_args


def test_a_nccl_with_libnccl_so_is_used_as_it_is() -> None:
    report = {**REPORT, "files": [*REPORT["files"], f"{WHEEL}/lib/libnccl.so"]}
    chain = decide(settings(), report, DEBIAN_MPI)
    assert not chain.link_nccl and f"NCCL_HOME={WHEEL}" in chain.make_args
    # a system NCCL in /usr with libnccl.so.2 only: the links, whatever else sits under /usr/lib
    usr = {"files": ["/usr/lib/cuda/bin/nvcc", "/usr/include/nccl.h", "/usr/lib/libnccl.so.2"]}
    assert decide(settings(nccl_home="/usr"), usr, DEBIAN_MPI).link_nccl


def test_extra_make_arguments_come_last_and_system_library_dirs_are_left_out() -> None:
    chain = decide(
        settings(make_extra_args=["DEBUG=1"], cuda_home_candidates=["/usr"]),
        {**REPORT, "files": ["/usr/bin/nvcc", *REPORT["files"]]},
        {**DEBIAN_MPI, "lib": "/usr/lib64"},
    )
    assert chain.make_args[-1] == "DEBUG=1"
    # CUDA in /usr and MPI in /usr/lib64: the loader finds them without a path
    assert chain.ld_library_path == f"{WHEEL}/lib"


# ------------------------------------------------------------------ what is missing


def test_each_missing_piece_is_named_with_its_variable() -> None:
    nothing: dict[str, Any] = {}
    chain = decide(settings(nccl_home_candidates=["/nowhere"], pythons=["/usr/bin/python3"]), nothing, None)
    assert chain.problems == (
        "MPI (include/mpi.h and lib/libmpi.so) not found: no mpirun: install the MPI development files"
        " or set collbench_mpi_home or collbench_nccl_tests_mpi_home",
        "CUDA toolkit (bin/nvcc) not found in /usr/local/cuda/, /opt/cuda/, /usr/lib/cuda/, /usr/:"
        " set collbench_nccl_tests_cuda_home",
        "NCCL headers (include/nccl.h) not found in /nowhere/ nor in a nvidia-nccl wheel of /usr/bin/python3:"
        " set collbench_nccl_tests_nccl_home",
    )
    no_header = {**DEBIAN_MPI, "include": None}
    assert decide(settings(), REPORT, no_header).problems == (
        "MPI (include/mpi.h and lib/libmpi.so) not found: /usr/bin/mpirun has no mpi.h: install the MPI"
        " development files or set collbench_mpi_home or collbench_nccl_tests_mpi_home",
    )
    no_lib = {**DEBIAN_MPI, "lib": None}
    assert "/usr/bin/mpirun has no libmpi.so" in decide(settings(), REPORT, no_lib).problems[0]
    assert decide(settings(nccl_home="/no/nccl"), REPORT, DEBIAN_MPI).problems == (
        "NCCL headers (include/nccl.h) not found in /no/nccl/: set collbench_nccl_tests_nccl_home",
    )
    assert decide(settings(vendor="amd", rocm_path="/no/rocm", mpi=False), REPORT, None).problems == (
        "ROCm (bin/hipcc) not found in /no/rocm/: set collbench_nccl_tests_rocm_path",
        "RCCL headers (include/rccl/rccl.h) not found in /no/rocm/: set collbench_nccl_tests_nccl_home",
    )


def test_prebuilt_binaries_need_no_toolchain() -> None:
    assert decide(settings(source="prebuilt"), {}, None).problems == ()


def test_a_probe_that_did_not_run_finds_nothing() -> None:
    raw = {k.removeprefix("collbench_nccl_tests_"): v for k, v in DEFAULTS.items()}
    for result in (
        {"rc": 127, "stdout": ""},
        {"rc": 0, "stdout": "not json"},
        {"rc": 0, "stdout": "[]"},
        None,
    ):
        fact = decide_fact(raw, result, DEBIAN_MPI)
        assert fact["homes"]["cuda"] == "" and fact["problems"][0].startswith(
            "CUDA toolkit (bin/nvcc) not found"
        )
    fact = decide_fact(raw, {"rc": 0, "stdout": json.dumps(REPORT)}, DEBIAN_MPI)
    assert fact["make_args"][0] == "MPI=1" and isinstance(
        fact["make_args"], list
    )  # a list, as Jinja adds lists
    json.dumps(fact)


# ------------------------------------------------------------------ the node program itself


def test_the_probe_reports_versioned_toolkits_and_header_versions(tmp_path: Path) -> None:
    for version in ("12.4", "13.0"):
        executable(tmp_path / f"cuda-{version}" / "bin" / "nvcc", "#!/bin/sh\n")
    os.symlink(tmp_path / "cuda-13.0", tmp_path / "cuda-latest")  # a link is not another toolkit
    system = system_nccl(tmp_path / "nccl", "2.27.3")
    report = run_probe({"dirs": [str(system), "/nowhere"], "globs": [f"{tmp_path}/cuda-*"]})
    assert report["globbed"] == {f"{tmp_path}/cuda-*": [f"{tmp_path}/cuda-12.4", f"{tmp_path}/cuda-13.0"]}
    assert (
        f"{tmp_path}/cuda-13.0/bin/nvcc" in report["files"] and f"{system}/include/nccl.h" in report["files"]
    )
    assert nccl_versions(report["nccl_headers"]) == {str(system): "2.27.3"}
    assert report["nvidia_smi"] is None and report["rocm_agents"] == {}  # not asked


def test_a_hung_program_is_an_answer_not_a_hang(tmp_path: Path) -> None:
    """A Python that never answers (as nvidia-smi on a GPU that fell off the bus) times out: rc 124."""
    hung = executable(tmp_path / "python-hung", "#!/bin/sh\nexec sleep 30\n")
    report = run_probe({"pythons": [str(hung), "/no/python"], "timeout": 0.5})
    assert report["wheels"] == [
        {"python": str(hung), "rc": 124, "dirs": []},
        {"python": "/no/python", "rc": 127, "dirs": []},
    ]


def test_a_bad_request_is_one_message_and_exit_2() -> None:
    done = subprocess.run(
        [sys.executable, str(PROBE), "{not json"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("toolchain_probe: REQUEST_JSON expected") and "Traceback" not in done.stderr


@pytest.mark.parametrize("name", ["toolchain_probe.py", "facts_probe.py", "mpi_probe.py"])
def test_the_node_programs_run_on_the_oldest_python_they_promise(name: str) -> None:
    """Python 3.6 on the node: no `from __future__ import annotations`, no walrus, standard library only."""
    text = (REPO / "collbench_py" / "node" / name).read_text()
    assert "from __future__" not in text and ":=" not in text
    assert not re.search(r"^\s*(from|import) collbench_py", text, re.M)
