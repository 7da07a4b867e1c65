"""The nvbandwidth and perftest roles, run for real on the upstream archives.

Hosts are localhost under several inventory names (one per case), run in parallel by one
playbook (tests/playbooks/build_check_tools.yml). The real nvbandwidth v0.8 and perftest
26.04.17 archives (../shared/vendor/, read in place) are built once each, in the first play, for
one CUDA architecture (90); the later plays reuse them: the second run changes nothing, the
prebuilt directories are copies of those builds.

This machine has nvcc but no GPU driver: nvbandwidth links libcuda and libnvidia-ml, which only
a driver ships. The test gives the link stub libraries made from the real headers (cuda.h of the
toolkit, nvml.h of the nvidia-nvml-dev wheel), as the CUDA toolkit's own lib64/stubs are made:
every entry point, each returning an error. The binary then runs up to its first CUDA call.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.ansible_output import RECAP, Played, changed_tasks, ran_clean, skipped

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "tests" / "playbooks" / "build_check_tools.yml"
BIN = Path(sys.executable).parent
VENDOR = REPO.parent / "shared" / "vendor"
NVBANDWIDTH_ARCHIVE = VENDOR / "nvbandwidth-v0.8.tar.gz"
PERFTEST_ARCHIVE = VENDOR / "perftest-26.04.17.tar.gz"
RECORD = "Record the published facts"  # the test playbook's own task, after the roles
BUILD_TASKS = (
    "nvbandwidth : Build | cmake configure",
    "nvbandwidth : Build | cmake build",
    "perftest : Build | autogen.sh",
    "perftest : Build | configure",
    "perftest : Build | make",
)
PERFTEST_BINARIES = yaml.safe_load((REPO / "roles/perftest/defaults/main.yml").read_text())[
    "collbench_perftest_binaries"
]


def _nvcc() -> Path | None:
    found = shutil.which("nvcc") or next(iter(sorted(glob.glob("/usr/local/cuda*/bin/nvcc"))[-1:]), None)
    return Path(found) if found else None


def _cuda_header() -> Path | None:
    """cuda.h of the toolkit nvcc belongs to (nvcc may be a wrapper script on the PATH)."""
    for root in ("/usr/local/cuda", str(Path(_nvcc() or "/nonexistent").resolve().parents[1])):
        if (Path(root) / "include" / "cuda.h").is_file():
            return Path(root) / "include" / "cuda.h"
    return None


def _nvml_include() -> Path | None:
    spec = importlib.util.find_spec("nvidia.cu13")
    for path in (spec.submodule_search_locations or []) if spec else []:
        if (Path(path) / "include" / "nvml.h").is_file():
            return Path(path) / "include"
    return None


pytestmark = [
    pytest.mark.skipif(_nvcc() is None, reason="no nvcc (CUDA toolkit) on this machine"),
    pytest.mark.skipif(
        not (NVBANDWIDTH_ARCHIVE.is_file() and PERFTEST_ARCHIVE.is_file()),
        reason=f"the upstream archives are not in {VENDOR} (see its README.md)",
    ),
    # Real builds: started first, not left to finish alone.
    pytest.mark.long,
]


# The stubs' error texts: a caller prints them (a pointer left unset would be read as garbage).
ERROR_TEXTS = {
    "cuGetErrorString": (
        'int cuGetErrorString(int e, const char **s) { *s = "no GPU driver (stub)"; return 0; }\n'
    ),
    "cuGetErrorName": 'int cuGetErrorName(int e, const char **s) { *s = "CUDA_ERROR_STUB"; return 0; }\n',
    "nvmlErrorString": 'const char *nvmlErrorString(int e) { return "no GPU driver (stub)"; }\n',
}


def make_stubs(out: Path, nvml_include: Path) -> Path:
    """libcuda.so and libnvidia-ml.so with every function the headers declare, each failing."""
    out.mkdir(parents=True)
    for lib, header, prefix in (
        ("cuda", _cuda_header(), "cu"),
        ("nvidia-ml", nvml_include / "nvml.h", "nvml"),
    ):
        text = subprocess.run(
            ["gcc", "-E", "-P", "-x", "c", str(header)], capture_output=True, text=True, check=True
        ).stdout
        names = sorted(set(re.findall(rf"\b({prefix}[A-Z]\w*)\s*\(", text)) - set(ERROR_TEXTS))
        assert len(names) > 100, f"{header}: {len(names)} functions found"
        source = out / f"{lib}.c"
        # every call fails (999: unknown error), and the calls that name an error name it
        source.write_text(
            "".join(f"int {name}(void) {{ return 999; }}\n" for name in names)
            + "".join(body for name, body in ERROR_TEXTS.items() if name.startswith(prefix))
        )
        so = out / f"lib{lib}.so"
        subprocess.run(
            ["gcc", "-shared", "-fPIC", "-o", str(so), str(source), f"-Wl,-soname,lib{lib}.so.1"], check=True
        )
        (out / f"lib{lib}.so.1").symlink_to(so.name)
    return out


class Lab:
    """A scratch area: the stubs, the inventory, the playbook runs, the published facts."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.nvml_include = _nvml_include()
        self.stubs = make_stubs(root / "stubs", self.nvml_include) if self.nvml_include else None
        self.common = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "collbench_nvbandwidth_build_jobs": 2,
            "collbench_perftest_make_jobs": 2,
        }

    def host(self, name: str, role: str, **role_vars: object) -> dict[str, object]:
        # which tools the node needs, by its own settings as in a run (`role`: nvbandwidth,
        # perftest or both): the GPU matrix check wants nvbandwidth; the NIC loopback and the
        # rail launches want perftest
        needs = {
            "nvbandwidth": {"collbench_node_checks_nic": False, "collbench_rails": "off"},
            "perftest": {"collbench_node_checks_gpu_matrix": False},
        }.get(role, {})
        return {
            **needs,
            "collbench_test_role": role,
            "collbench_test_result": str(self.root / f"{name}.json"),
            "collbench_nvbandwidth_install_dir": str(self.root / name),
            "collbench_perftest_install_dir": str(self.root / name),
            **{f"collbench_{k}": v for k, v in role_vars.items()},
        }

    @property
    def nvbandwidth_node(self) -> dict[str, object]:
        """The real archive, one architecture; nvml.h from the wheel, the link against the stubs."""
        return self.host(
            "nvbandwidth_node",
            "nvbandwidth",
            nvbandwidth_source="tarball",
            nvbandwidth_tarball=str(NVBANDWIDTH_ARCHIVE),
            nvbandwidth_cuda_architectures="90",
            nvbandwidth_nvml_include=str(self.nvml_include),
            nvbandwidth_cmake_extra_args=[f"-DCMAKE_EXE_LINKER_FLAGS=-L{self.stubs}"],
        )

    @property
    def perftest_node(self) -> dict[str, object]:
        # no RDMA device here: built anyway, as for an image made without the hardware
        return self.host(
            "perftest_node",
            "perftest",
            perftest_source="tarball",
            perftest_tarball=str(PERFTEST_ARCHIVE),
            perftest_build_without_device=True,
        )

    def built_hosts(self) -> dict[str, dict[str, object]]:
        hosts = {"perftest_node": self.perftest_node}
        if self.stubs:
            hosts["nvbandwidth_node"] = self.nvbandwidth_node
        return hosts

    def play(self, hosts: dict[str, dict[str, object]], *args: str) -> Played:
        inventory = self.root / "inventory.yml"
        inventory.write_text(yaml.safe_dump({"all": {"vars": self.common, "hosts": hosts}}))
        env = {
            **os.environ,
            "ANSIBLE_HOME": str(REPO / ".ansible"),
            "ANSIBLE_LOCAL_TEMP": str(REPO / ".ansible" / "tmp"),
            "ANSIBLE_FORCE_COLOR": "0",
            "ANSIBLE_NOCOLOR": "1",
            "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
        }
        done = subprocess.run(
            [str(BIN / "ansible-playbook"), "-i", str(inventory), str(PLAYBOOK), *args],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=1500, check=False,
        )  # fmt: skip
        out = done.stdout + done.stderr
        recap = {
            m[1]: {"ok": int(m[2]), "changed": int(m[3]), "unreachable": int(m[4]), "failed": int(m[5])}
            for m in RECAP.finditer(out)
        }
        return done.returncode, out, recap

    def result(self, name: str) -> dict[str, object]:
        return json.loads((self.root / f"{name}.json").read_text())


# Each fixture is one play; they run in this order: first_build -> second_run -> bad_input.


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    return Lab(tmp_path_factory.mktemp("check_tools_roles"))


@pytest.fixture(scope="module")
def first_build(lab: Lab) -> tuple[Played, float]:
    """Both real builds at once, and the nodes where nothing is built."""
    hosts = {
        **lab.built_hosts(),
        # nvcc here, no GPU seen and no architecture given; no RDMA device: nothing to measure
        "no_gpu_node": lab.host(
            "no_gpu_node",
            "both",
            nvbandwidth_source="tarball",
            nvbandwidth_tarball=str(NVBANDWIDTH_ARCHIVE),
            perftest_source="tarball",
            perftest_tarball=str(PERFTEST_ARCHIVE),
        ),
        # a GPU architecture given, but the toolkit here (pip wheels) has no nvml.h
        "no_nvml_node": lab.host(
            "no_nvml_node",
            "nvbandwidth",
            nvbandwidth_source="tarball",
            nvbandwidth_tarball=str(NVBANDWIDTH_ARCHIVE),
            nvbandwidth_cuda_architectures="90",
            nvbandwidth_nvml_include="/no/nvml",
        ),
        # no CUDA toolkit, no libibverbs headers: nothing can be built
        "no_toolchain_node": lab.host(
            "no_toolchain_node",
            "both",
            nvbandwidth_cuda_home="/no/cuda",
            perftest_verbs_header="/no/infiniband/verbs.h",
            perftest_build_without_device=True,
        ),
        "distribution_node": lab.host("distribution_node", "perftest", perftest_source="distribution"),
        "no_package_node": lab.host(
            "no_package_node", "perftest", perftest_source="distribution", perftest_distribution_dir="/no/bin"
        ),
        # Rails off too: the rail checks of the pairs need perftest as well (the build play runs for them).
        "switched_off_node": {
            **lab.host("switched_off_node", "both"),
            "collbench_node_checks": False,
            "collbench_rails": "off",
        },
        # a build tool missing (as libtoolize on a real GPU node): no build, a note; not a failed node
        "no_build_tools_node": lab.host(
            "no_build_tools_node",
            "both",
            nvbandwidth_source="tarball",
            nvbandwidth_tarball=str(NVBANDWIDTH_ARCHIVE),
            nvbandwidth_cuda_architectures="90",
            nvbandwidth_nvml_include=str(lab.nvml_include or "/no/nvml"),
            nvbandwidth_build_tools=["cmake", "collbench-no-such-make"],
            perftest_source="tarball",
            perftest_tarball=str(PERFTEST_ARCHIVE),
            perftest_build_without_device=True,
            perftest_build_tools=["make", "collbench-no-such-libtoolize"],
        ),
    }
    started = time.monotonic()
    played = lab.play(hosts)
    return played, time.monotonic() - started


@pytest.fixture(scope="module")
def second_run(lab: Lab, first_build: tuple[Played, float]) -> Played:
    """The built hosts again (nothing to do), and the prebuilt directories, copies of their builds."""
    ran_clean(first_build[0], *lab.built_hosts())
    hosts = lab.built_hosts()
    perftest_copy = lab.root / "perftest-prebuilt"
    perftest_copy.mkdir()
    for binary in PERFTEST_BINARIES:
        shutil.copy2(Path(str(lab.result("perftest_node")["perftest"]["bin_dir"])) / binary, perftest_copy)
    hosts["perftest_prebuilt_node"] = lab.host(
        "perftest_prebuilt_node", "perftest", perftest_source="prebuilt",
        perftest_prebuilt_dir=str(perftest_copy),
    )  # fmt: skip
    if lab.stubs:
        nvbandwidth_copy = lab.root / "nvbandwidth-prebuilt"
        nvbandwidth_copy.mkdir()
        shutil.copy2(str(lab.result("nvbandwidth_node")["nvbandwidth_bin"]), nvbandwidth_copy)
        hosts["nvbandwidth_prebuilt_node"] = lab.host(
            "nvbandwidth_prebuilt_node",
            "nvbandwidth",
            nvbandwidth_source="prebuilt",
            nvbandwidth_prebuilt_dir=f"{nvbandwidth_copy}/",
        )
    return lab.play(hosts)


@pytest.fixture(scope="module")
def bad_input(lab: Lab, second_run: Played) -> Played:
    """One mistake per host: each must fail with one clear message, before any work."""
    missing = str(lab.root / "missing.tar.gz")
    # perftest binaries whose --help prints no options; an nvbandwidth linked against a library
    # of its own that is nowhere the loader looks (not the driver's: a broken build).
    mute = lab.root / "mute-perftest"
    mute.mkdir()
    for name in PERFTEST_BINARIES:
        (mute / name).write_text("#!/bin/sh\necho 'usage: see the manual'\nexit 1\n")
        (mute / name).chmod(0o755)
    unlinked = lab.root / "unlinked-nvbandwidth"
    (unlinked / "lib").mkdir(parents=True)
    (unlinked / "standin.c").write_text("int standin(void) { return 0; }\n")
    (unlinked / "main.c").write_text("int standin(void);\nint main(void) { return standin(); }\n")
    for argv in (["-shared", "-fPIC", "-o", "lib/libstandin.so", "standin.c"],
                 ["-o", "nvbandwidth", "main.c", "-Llib", "-lstandin"]):  # fmt: skip
        subprocess.run(["cc", *argv], cwd=unlinked, check=True, capture_output=True)
    hosts = {
        "pt_mute_prebuilt": lab.host("pt_mute_prebuilt", "perftest", perftest_source="prebuilt",
                                     perftest_prebuilt_dir=str(mute)),
        "nvb_unlinked": lab.host("nvb_unlinked", "nvbandwidth", nvbandwidth_source="prebuilt",
                                 nvbandwidth_prebuilt_dir=str(unlinked)),
        "nvb_no_archive": lab.host("nvb_no_archive", "nvbandwidth", nvbandwidth_source="tarball",
                                   nvbandwidth_tarball=missing),
        "pt_no_archive": lab.host("pt_no_archive", "perftest", perftest_source="tarball",
                                  perftest_tarball=missing),
        "nvb_bad_version": lab.host("nvb_bad_version", "nvbandwidth", nvbandwidth_version="0.8"),
        "pt_bad_version": lab.host("pt_bad_version", "perftest", perftest_version="v26.04.17"),
        "nvb_bad_cmake_arg": lab.host("nvb_bad_cmake_arg", "nvbandwidth",
                                      nvbandwidth_cmake_extra_args=["CMAKE_BUILD_TYPE=Debug"]),
        "pt_empty_prebuilt": lab.host("pt_empty_prebuilt", "perftest", perftest_source="prebuilt",
                                      perftest_prebuilt_dir=str(lab.root)),
        "nvb_empty_prebuilt": lab.host("nvb_empty_prebuilt", "nvbandwidth", nvbandwidth_source="prebuilt",
                                       nvbandwidth_prebuilt_dir=str(lab.root)),
    }  # fmt: skip
    return lab.play(hosts)


def test_the_real_nvbandwidth_builds_and_runs_to_its_first_cuda_call(
    lab: Lab, first_build: tuple[Played, float]
) -> None:
    if lab.stubs is None:
        pytest.skip("no nvml.h (the nvidia-nvml-dev wheel): nvbandwidth cannot compile here")
    played, took = first_build
    print(f"\nreal nvbandwidth v0.8 and perftest 26.04.17 built by the roles in {took:.0f} s (in parallel)")
    ran_clean(played, "nvbandwidth_node")
    facts = lab.result("nvbandwidth_node")
    binary = Path(str(facts["nvbandwidth_bin"]))
    assert binary == next((lab.root / "nvbandwidth_node" / "nvbandwidth").glob("tarball-*/build/nvbandwidth"))
    assert os.access(binary, os.X_OK)
    assert facts["nvbandwidth_json"] is True  # v0.8 has -j
    assert "GPU driver" in str(facts["nvbandwidth_note"])  # libcuda.so.1 is not on this machine
    stamp = json.loads(binary.parents[1].with_suffix(".stamp").read_text())
    assert stamp["source"].split()[:2] == ["tarball", NVBANDWIDTH_ARCHIVE.name]
    assert "-DCMAKE_CUDA_ARCHITECTURES=90" in stamp["cmake_args"]
    cache = (binary.parent / "CMakeCache.txt").read_text()
    assert re.search(r"^CMAKE_CUDA_ARCHITECTURES:\w+=90$", cache, re.M), "the architecture reached CMake"
    # It runs, against the stubs: its real help, then JSON output that stops at cuInit.
    env = {**os.environ, "LD_LIBRARY_PATH": str(lab.stubs)}
    helped = subprocess.run(
        [binary, "--help"], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    assert "nvbandwidth Version: v0.8" in helped.stdout and "--json" in helped.stdout
    ran = subprocess.run(
        [binary, "-j", "-t", "host_to_device_memcpy_ce"], capture_output=True, text=True, env=env, timeout=60,
        check=False,
    )  # fmt: skip
    printed = json.loads(ran.stdout)["nvbandwidth"]
    assert printed["version"] == "v0.8" and "no GPU driver (stub)" in printed["error"]
    assert "cuInit" in printed["error"]
    assert ran.returncode != 0


def test_the_real_perftest_builds_with_gpudirect(lab: Lab, first_build: tuple[Played, float]) -> None:
    played, _ = first_build
    ran_clean(played, "perftest_node")
    published = lab.result("perftest_node")["perftest"]
    bin_dir = Path(published["bin_dir"])
    assert bin_dir == next((lab.root / "perftest_node" / "perftest").glob("tarball-*"))
    assert published["source"] == "built" and published["note"].strip() == ""
    for binary in PERFTEST_BINARIES:
        assert os.access(bin_dir / binary, os.X_OK), binary
    stamp = json.loads(bin_dir.with_suffix(".stamp").read_text())
    assert stamp["source"].split()[:2] == ["tarball", PERFTEST_ARCHIVE.name]
    cuda_h = [a for a in stamp["configure_args"] if a.startswith("CUDA_H_PATH=")]
    assert cuda_h and Path(cuda_h[0].split("=", 1)[1]).is_file()
    # nvcc (and so cuda.h) is here: GPUDirect is in, as the binary's own help says
    helped = subprocess.run(
        [bin_dir / "ib_write_bw", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert "--use_cuda=" in helped.stdout + helped.stderr
    assert published["gpudirect"] is True
    # No RDMA device here: perftest says so itself.
    ran = subprocess.run(
        [bin_dir / "ib_write_bw", "-d", "mlx5_0"], capture_output=True, text=True, timeout=60, check=False
    )
    assert "Unable to find the Infiniband/RoCE device" in ran.stdout + ran.stderr


def test_a_node_without_what_a_build_needs_publishes_none_with_a_note(
    lab: Lab, first_build: tuple[Played, float]
) -> None:
    played, _ = first_build
    nothing = ("no_gpu_node", "no_toolchain_node", "no_nvml_node", "no_package_node", "no_build_tools_node")
    ran_clean(played, *nothing)
    no_gpu = lab.result("no_gpu_node")
    assert no_gpu["nvbandwidth_bin"] == "" and no_gpu["nvbandwidth_json"] is False
    assert str(no_gpu["nvbandwidth_note"]).startswith("no NVIDIA GPU seen (nvidia-smi)")
    assert no_gpu["perftest"]["source"] == "none" and no_gpu["perftest"]["bin_dir"] == ""
    assert no_gpu["perftest"]["note"].startswith("no RDMA device (/sys/class/infiniband is empty)")
    no_toolchain = lab.result("no_toolchain_node")
    assert no_toolchain["nvbandwidth_bin"] == ""
    assert str(no_toolchain["nvbandwidth_note"]).startswith("no CUDA toolkit (bin/nvcc) in /no/cuda/")
    assert no_toolchain["perftest"] == {
        "bin_dir": "",
        "gpudirect": False,
        "source": "none",
        "note": no_toolchain["perftest"]["note"],
    }
    assert no_toolchain["perftest"]["note"].startswith("no libibverbs headers (infiniband/verbs.h)")
    no_nvml = lab.result("no_nvml_node")
    assert no_nvml["nvbandwidth_bin"] == ""
    assert str(no_nvml["nvbandwidth_note"]).startswith("no nvml.h in /no/nvml/: nvbandwidth is not built")
    no_package = lab.result("no_package_node")["perftest"]
    assert no_package["source"] == "none" and "perftest package is not installed" in no_package["note"]
    # nothing unpacked or built for any of them
    no_tools = lab.result("no_build_tools_node")
    assert no_tools["perftest"]["source"] == "none" and no_tools["perftest"]["bin_dir"] == ""
    missing = "not found on no_build_tools_node"
    assert no_tools["perftest"]["note"].startswith(f"collbench-no-such-libtoolize {missing}")
    if lab.nvml_include:
        assert no_tools["nvbandwidth_bin"] == ""
        assert str(no_tools["nvbandwidth_note"]).startswith(f"collbench-no-such-make {missing}")
    assert not any((lab.root / n).exists() for n in nothing)
    _, out, _ = played
    for note in (no_gpu["nvbandwidth_note"], no_toolchain["perftest"]["note"]):
        assert str(note) in re.sub(r"\s+", " ", out)  # said in the run's output too


def test_the_distributions_perftest_is_used_without_gpudirect(
    lab: Lab, first_build: tuple[Played, float]
) -> None:
    played, _ = first_build
    ran_clean(played, "distribution_node")
    if not Path("/usr/bin/ib_write_bw").exists():
        pytest.skip("the Debian perftest package is not installed here")
    published = lab.result("distribution_node")["perftest"]
    assert published["source"] == "distribution" and published["bin_dir"] == "/usr/bin"
    # Debian's package is built without CUDA: no --use_cuda, and the report is told so
    assert published["gpudirect"] is False
    assert "distribution's perftest has no GPUDirect" in published["note"]


def test_switched_off_nothing_runs(lab: Lab, first_build: tuple[Played, float]) -> None:
    played, _ = first_build
    ran_clean(played, "switched_off_node")
    _, out, _ = played
    assert changed_tasks(out).get("switched_off_node") == [RECORD]
    # Of both roles, no task ran on it: each role's decision for every node ran once, on another
    # node, and left it out (the same reading finds the build's tasks on the node that built).
    blocks = re.split(r"^TASK \[(.+?)\] \**$", out, flags=re.M)

    def ran_on(host: str) -> list[str]:
        return [
            name
            for name, body in zip(blocks[1::2], blocks[2::2], strict=True)
            if re.search(rf"^(ok|changed): \[{host}\]", body, re.M)
            and name.startswith(("nvbandwidth : ", "perftest : "))
        ]

    assert "perftest : Build | make" in ran_on("perftest_node")
    assert ran_on("switched_off_node") == []
    facts = lab.result("switched_off_node")
    assert facts["nvbandwidth_bin"] is None and facts["perftest"] is None
    assert not (lab.root / "switched_off_node").exists()


def test_second_run_changes_nothing_and_prebuilt_directories_are_used(lab: Lab, second_run: Played) -> None:
    ran_clean(second_run, *lab.built_hosts(), "perftest_prebuilt_node")
    _, out, recap = second_run
    for host in lab.built_hosts():
        assert recap[host]["changed"] == 0, changed_tasks(out).get(host)
        for task in BUILD_TASKS:
            if task.split(" : ")[0] == host.split("_")[0]:
                assert skipped(out, task, host), (task, host, out[-5000:])
    published = lab.result("perftest_prebuilt_node")["perftest"]
    assert published == {
        "bin_dir": str(lab.root / "perftest-prebuilt"),
        "gpudirect": True,
        "source": "prebuilt",
        "note": published["note"],
    }
    assert changed_tasks(out).get("perftest_prebuilt_node") == [RECORD]
    if lab.stubs:
        ran_clean(second_run, "nvbandwidth_prebuilt_node")
        facts = lab.result("nvbandwidth_prebuilt_node")
        assert facts["nvbandwidth_bin"] == str(lab.root / "nvbandwidth-prebuilt" / "nvbandwidth")
        assert facts["nvbandwidth_json"] is True
    assert not (lab.root / "perftest_prebuilt_node").exists()  # nothing unpacked or built


def test_bad_input_fails_with_one_clear_message(lab: Lab, bad_input: Played) -> None:
    rc, out, recap = bad_input
    assert rc == 2, out[-5000:]
    assert all(counts["failed"] == 1 for counts in recap.values()), recap
    flat = re.sub(r"\s+", " ", out)
    missing = lab.root / "missing.tar.gz"
    for said in (
        f"collbench_nvbandwidth_tarball: {missing} is not a file on the controller",
        f"collbench_perftest_tarball: {missing} is not a file on the controller",
        "collbench_nvbandwidth_version must be a tag like v0.8 or a full commit hash (got '0.8')",
        "collbench_perftest_version must be a tag like 26.04.17 or a full commit hash (got 'v26.04.17')",
        "collbench_nvbandwidth_cmake_extra_args must be -DNAME=value items (got ['CMAKE_BUILD_TYPE=Debug'])",
        f"collbench_perftest_prebuilt_dir: no ib_write_bw in {lab.root} on pt_empty_prebuilt",
        f"collbench_nvbandwidth_prebuilt_dir: no nvbandwidth in {lab.root} or {lab.root}/build "
        "on nvb_empty_prebuilt",
        f"pt_mute_prebuilt: {lab.root}/mute-perftest/ib_write_bw --help exited 1 without its options: "
        "usage: see the manual",
        "nvb_unlinked: nvbandwidth cannot load libstandin.so",
    ):
        assert said in flat, said
    assert "Traceback" not in out
    assert not any((lab.root / host).exists() for host in recap)
