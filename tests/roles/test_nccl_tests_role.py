"""The nccl_tests role, run for real: git, tarball and prebuilt sources, a real nvcc build.

The nccl-tests source cannot be fetched here, so the role builds a stand-in tree with the
nccl-tests Makefile interface (tests/data/standin-nccl-tests) whose binaries are a real
CUDA + NCCL + MPI program, linked against the NCCL of the `nvidia-nccl-cu13` wheel. Hosts are
localhost under several inventory names (one per source mode), run in parallel by one playbook.

Builds are what this module spends its time on, so each build from scratch is made once, all of
them in the first play (git, tarball, and the real nccl-tests source), and the later plays reuse
them: the second run and check mode change nothing, a new git version rebuilds one host, and the
hosts that find the NCCL wheel themselves share the build tarball_node made with it given.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml

from tests.ansible_output import RECAP, Played, changed_tasks, ran_clean, skipped

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "tests" / "data" / "standin-nccl-tests"
PLAYBOOK = REPO / "tests" / "playbooks" / "build_nccl_tests.yml"
BIN = Path(sys.executable).parent
GENCODE = "-gencode=arch=compute_90,code=sm_90"  # one architecture keeps the build short
RECORD = "Record the published facts"  # the test playbook's own task, after the role


def _nvcc() -> str | None:
    found = shutil.which("nvcc") or sorted(glob.glob("/usr/local/cuda*/bin/nvcc"))
    return found if isinstance(found, str) else (found[-1] if found else None)


pytestmark = [
    pytest.mark.skipif(_nvcc() is None, reason="no nvcc (CUDA toolkit) on this machine"),
    # The suite's longest module (real builds): started first, not left to finish alone.
    pytest.mark.long,
]


def _nccl_wheel() -> Path:
    spec = importlib.util.find_spec("nvidia.nccl")
    assert spec is not None and spec.submodule_search_locations, "the nvidia-nccl-cu13 wheel is not installed"
    return Path(next(iter(spec.submodule_search_locations)))


def _nccl_version(lib: Path) -> str:
    """What the real library says, asked directly."""
    code = ctypes.c_int()
    assert ctypes.CDLL(str(lib)).ncclGetVersion(ctypes.byref(code)) == 0
    return f"{code.value // 10000}.{code.value % 10000 // 100}.{code.value % 100}"


def _git(*args: str, cwd: Path) -> str:
    ident = [
        "-c",
        "user.name=collbench",
        "-c",
        "user.email=collbench@localhost",
        "-c",
        "init.defaultBranch=main",
    ]
    out = subprocess.run(["git", *ident, *args], cwd=cwd, check=True, capture_output=True, text=True)
    return out.stdout.strip()


class Lab:
    """A scratch area: the git repository, the tarball, the inventory, the playbook runs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.wheel = _nccl_wheel()
        self.expected_nccl = _nccl_version(self.wheel / "lib" / "libnccl.so.2")
        # git: a bare repository with two tags; v2 changes what the binaries print.
        work = root / "work"
        shutil.copytree(STANDIN, work)
        _git("init", "-q", cwd=work)
        _git("add", "-A", cwd=work)
        _git("commit", "-q", "-m", "stand-in v1", cwd=work)
        (work / "src" / "release.h").write_text('#define STANDIN_RELEASE "v1"\n')
        _git("commit", "-q", "-am", "release v1", cwd=work)
        _git("tag", "v1", cwd=work)
        self.v1 = _git("rev-parse", "HEAD", cwd=work)
        (work / "src" / "release.h").write_text('#define STANDIN_RELEASE "v2"\n')
        _git("commit", "-q", "-am", "release v2", cwd=work)
        _git("tag", "v2", cwd=work)
        self.v2 = _git("rev-parse", "HEAD", cwd=work)
        _git("clone", "-q", "--bare", str(work), str(root / "standin.git"), cwd=root)
        # tarball: the tree under one top directory, as GitHub's archives have it
        self.tarball = root / "standin-nccl-tests.tar.gz"
        with tarfile.open(self.tarball, "w:gz") as tar:
            tar.add(STANDIN, arcname="nccl-tests-standin")
        self.common = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "collbench_nccl_tests_gencode": GENCODE,
            "collbench_nccl_tests_make_jobs": 2,
        }

    def host(self, name: str, **role_vars: object) -> dict[str, object]:
        return {
            "collbench_nccl_tests_install_dir": str(self.root / name),
            "collbench_test_result": str(self.root / f"{name}.json"),
            **{f"collbench_nccl_tests_{k}": v for k, v in role_vars.items()},
        }

    @property
    def git_node(self) -> dict[str, object]:
        # NCCL found among candidates (detection), the wheel's directory one of them
        return self.host(
            "git_node",
            source="git",
            git_repo=f"file://{self.root / 'standin.git'}",
            version="v1",
            nccl_home_candidates=["/nonexistent/nccl", str(self.wheel)],
        )

    @property
    def tarball_node(self) -> dict[str, object]:
        return self.host(
            "tarball_node", source="tarball", tarball=str(self.tarball), nccl_home=str(self.wheel)
        )

    def play(
        self, hosts: dict[str, dict[str, object]], *args: str
    ) -> tuple[int, str, dict[str, dict[str, int]]]:
        inventory = self.root / "inventory.yml"
        inventory.write_text(yaml.safe_dump({"all": {"vars": self.common, "hosts": hosts}}))
        env = {
            **os.environ,
            "ANSIBLE_HOME": str(REPO / ".ansible"),
            "ANSIBLE_LOCAL_TEMP": str(REPO / ".ansible" / "tmp"),
            "XDG_CACHE_HOME": str(self.root / "xdg"),
            "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
            "ANSIBLE_NOCOLOR": "1",
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        argv = [str(BIN / "ansible-playbook"), "-i", str(inventory), str(PLAYBOOK), "--tags", "build", *args]
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900, check=False)
        out = proc.stdout + proc.stderr
        recap = {
            m[1]: dict(zip(("ok", "changed", "unreachable", "failed"), map(int, m.groups()[1:]), strict=True))
            for m in RECAP.finditer(out)
        }
        return proc.returncode, out, recap

    def result(self, name: str) -> dict[str, str]:
        return json.loads((self.root / f"{name}.json").read_text())

    def run_binary(self, name: str, binary: str = "all_reduce_perf") -> str:
        facts = self.result(name)
        env = {**os.environ, "LD_LIBRARY_PATH": facts["ld_library_path"]}
        proc = subprocess.run(
            [f"{facts['bindir']}/{binary}"], capture_output=True, text=True, env=env, check=True
        )
        return proc.stdout


# Upstream nccl-tests v2.19.6, unmodified, beside the checkout (provenance in its README.md).
VENDOR_ARCHIVE = REPO.parent / "shared" / "vendor" / "nccl-tests-v2.19.6.tar.gz"
BUILD_TASKS = ("nccl_tests : Build | make", "nccl_tests : Build | Remove the previous build")
MAKE = "nccl_tests : Build | make"
REAL_BINARIES = yaml.safe_load((REPO / "roles/nccl_tests/defaults/main.yml").read_text())[
    "collbench_nccl_tests_binaries"
]

# The builds are the module's cost (one nvcc build each): every build from scratch is made once,
# in one play, and the later plays reuse them. Each fixture is one play; they run in this order:
# first_build -> second_run -> check_run -> second_build.


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    return Lab(tmp_path_factory.mktemp("nccl_tests_role"))


@pytest.fixture(scope="module")
def real_node(lab: Lab) -> dict[str, object] | None:
    """The real nccl-tests source in tarball mode, when its archive is beside the checkout."""
    if not VENDOR_ARCHIVE.is_file():
        return None
    # Only the binaries the role checks and the benchmarks run (upstream's Makefile builds 11, and
    # a command-line variable overrides its list): the source, the flags and the links are the
    # same, the build about half as long.
    return lab.host(
        "real_node",
        source="tarball",
        tarball=str(VENDOR_ARCHIVE),
        nccl_home=str(lab.wheel),
        make_extra_args=[f"BIN_FILES_LIST={' '.join(b.removesuffix('_perf') for b in REAL_BINARIES)}"],
    )


def hosts_built(lab: Lab, real_node: dict[str, object] | None) -> dict[str, dict[str, object]]:
    return {
        "git_node": lab.git_node,
        "tarball_node": lab.tarball_node,
        **({"real_node": real_node} if real_node else {}),
    }


@pytest.fixture(scope="module")
def first_build(lab: Lab, real_node: dict[str, object] | None) -> tuple[Played, float]:
    """Every build from scratch at once: git at v1, the stand-in tarball, the real source."""
    started = time.monotonic()
    played = lab.play(hosts_built(lab, real_node))
    return played, time.monotonic() - started


@pytest.fixture(scope="module")
def second_run(lab: Lab, first_build: tuple[Played, float], real_node: dict[str, object] | None) -> Played:
    """The same hosts again (nothing to do), and prebuilt_node for the first time."""
    ran_clean(first_build[0], "tarball_node")
    prebuilt = lab.root / "prebuilt-tree"
    shutil.copytree(Path(lab.result("tarball_node")["bindir"]), prebuilt / "build")
    prebuilt_node = lab.host(
        "prebuilt_node", source="prebuilt", prebuilt_dir=str(prebuilt), nccl_home=str(lab.wheel)
    )
    # Three that must fail, each with its own message: no binaries in the directory given, one
    # binary not executable, and NCCL nowhere the library path of the launches reaches.
    (lab.root / "prebuilt-empty").mkdir()
    shutil.copytree(prebuilt, lab.root / "prebuilt-noexec")
    (lab.root / "prebuilt-noexec" / "build" / "sendrecv_perf").chmod(0o644)
    broken = {
        "prebuilt_empty": lab.host(
            "prebuilt_empty", source="prebuilt", prebuilt_dir=str(lab.root / "prebuilt-empty")
        ),
        "prebuilt_noexec": lab.host(
            "prebuilt_noexec",
            source="prebuilt",
            prebuilt_dir=str(lab.root / "prebuilt-noexec"),
            nccl_home=str(lab.wheel),
        ),
        "prebuilt_no_nccl": {
            **lab.host(
                "prebuilt_no_nccl",
                source="prebuilt",
                prebuilt_dir=str(prebuilt),
                nccl_home_candidates=["/nowhere"],
            ),
            "ansible_python_interpreter": "/usr/bin/python3",  # no nvidia-nccl wheel there
        },
    }
    return lab.play({**hosts_built(lab, real_node), "prebuilt_node": prebuilt_node, **broken})


@pytest.fixture(scope="module")
def check_run(lab: Lab, second_run: Played) -> Played:
    """--check: git_node asked for v2, a fresh host, and three with bad input."""
    git_v2 = {**lab.git_node, "collbench_nccl_tests_version": "v2"}
    fresh = lab.host("fresh_node", source="tarball", tarball=str(lab.tarball), nccl_home=str(lab.wheel))
    no_archive = lab.host("no_archive", source="tarball", tarball=str(lab.root / "missing.tar.gz"))
    # NCCL nowhere: not among the candidates, and no wheel in the node's Python (the system one)
    no_nccl = {
        **lab.host("no_nccl", source="tarball", tarball=str(lab.tarball), nccl_home_candidates=["/nowhere"]),
        "ansible_python_interpreter": "/usr/bin/python3",
    }
    no_rocm = lab.host(
        "no_rocm", vendor="amd", source="tarball", tarball=str(lab.tarball), rocm_path="/no/rocm"
    )
    hosts = {
        "git_node": git_v2,
        "fresh_node": fresh,
        "no_archive": no_archive,
        "no_nccl": no_nccl,
        "no_rocm": no_rocm,
    }
    return lab.play(hosts, "--check")


SYSTEM_NCCL = "2.28.3"  # what a real H100 image had in /usr beside the wheel's newer NCCL


def _system_nccl(root: Path) -> Path:
    """A system NCCL's headers (the wheel's nccl.h, an older version): a candidate the wheel must beat."""
    home = root / "system-nccl"
    (home / "include").mkdir(parents=True)
    major, minor, patch = SYSTEM_NCCL.split(".")
    header = (_nccl_wheel() / "include" / "nccl.h").read_text()
    for name, value in (("MAJOR", major), ("MINOR", minor), ("PATCH", patch)):
        header = re.sub(rf"^#define NCCL_{name} \d+$", f"#define NCCL_{name} {value}", header, flags=re.M)
    (home / "include" / "nccl.h").write_text(header)
    return home


WHEEL_HOSTS = ("wheel_node", "run_python_node")


@pytest.fixture(scope="module")
def second_build(lab: Lab, check_run: Played) -> Played:
    """git_node at v2 (a rebuild); tarball_node again; and two hosts that must find the NCCL wheel
    themselves, in tarball_node's install directory: when detection takes the wheel, the build
    they want is the one tarball_node made with the wheel given (same source, same make
    arguments), so nothing is built for them."""
    system = _system_nccl(lab.root)
    candidates = {"source": "tarball", "tarball": str(lab.tarball), "nccl_home_candidates": [str(system)]}
    shared = {"install_dir": str(lab.root / "tarball_node")}
    ansible_python = lab.host("wheel_node", **candidates, **shared)
    # Ansible runs the system Python (no wheel); the run's Python (preflight's collbench_node) has it.
    run_python = {
        **lab.host("run_python_node", **candidates, **shared),
        "ansible_python_interpreter": "/usr/bin/python3",
        "collbench_node": {"python": sys.executable},
    }
    git_v2 = {**lab.git_node, "collbench_nccl_tests_version": "v2"}
    return lab.play(
        {
            "git_node": git_v2,
            "tarball_node": lab.tarball_node,
            "wheel_node": ansible_python,
            "run_python_node": run_python,
        }
    )


def test_git_and_tarball_build_real_binaries(lab: Lab, first_build: tuple[Played, float]) -> None:
    played, _ = first_build
    ran_clean(played, "git_node", "tarball_node")
    recap = played[2]
    assert recap["git_node"]["changed"] > 0 and recap["tarball_node"]["changed"] > 0
    for name, release in (("git_node", "v1"), ("tarball_node", "stand-in")):
        facts = lab.result(name)
        assert facts["suite"] == "nccl-tests"
        assert facts["bindir"] == str(next((lab.root / name / "nccl-tests").glob("*/build")))
        for binary in ("all_reduce_perf", "all_gather_perf", "reduce_scatter_perf", "alltoall_perf",
                       "broadcast_perf", "sendrecv_perf"):  # fmt: skip
            assert os.access(f"{facts['bindir']}/{binary}", os.X_OK)
        printed = lab.run_binary(name)
        assert f"standin all_reduce_perf release {release}\n" in printed
        assert (
            f"nccl library {lab.expected_nccl} " in printed
        )  # from the wheel's libnccl.so.2, loaded for real
        assert "mpi Open MPI" in printed  # built with MPI=1 against the detected MPI_HOME
        assert f"gencode {GENCODE}\n" in printed
    stamp = json.loads(Path(lab.result("git_node")["bindir"]).parent.with_suffix(".stamp").read_text())
    assert stamp["source"].split() == ["git", f"file://{lab.root / 'standin.git'}", "v1", lab.v1]
    assert "MPI=1" in stamp["make_args"] and f"NVCC_GENCODE={GENCODE}" in stamp["make_args"]
    # the wheel has no libnccl.so: the build linked through a directory of links
    assert f"NCCL_HOME={lab.root / 'git_node' / 'nccl-tests' / 'nccl-home'}" in stamp["make_args"]


def test_second_run_changes_nothing_and_prebuilt_is_used_as_is(lab: Lab, second_run: Played) -> None:
    ran_clean(second_run, "git_node", "tarball_node", "prebuilt_node")
    _, out, recap = second_run
    assert recap["git_node"]["changed"] == 0 and recap["tarball_node"]["changed"] == 0
    # prebuilt_node runs for the first time: only the test's own record of the facts is new
    assert changed_tasks(out).get("prebuilt_node") == [RECORD]
    prebuilt = lab.root / "prebuilt-tree"
    assert lab.result("prebuilt_node")["bindir"] == str(prebuilt / "build")
    assert f"nccl library {lab.expected_nccl} " in lab.run_binary("prebuilt_node", "sendrecv_perf")
    assert not (lab.root / "prebuilt_node").exists()  # nothing built or unpacked for prebuilt binaries


def test_prebuilt_binaries_that_cannot_run_fail_with_what_is_wrong(lab: Lab, second_run: Played) -> None:
    _, out, recap = second_run
    assert all(
        recap[host]["failed"] == 1 for host in ("prebuilt_empty", "prebuilt_noexec", "prebuilt_no_nccl")
    )
    empty = lab.root / "prebuilt-empty"
    assert (
        f"collbench_nccl_tests_prebuilt_dir: no all_reduce_perf in {empty} or {empty}/build on prebuilt_empty"
        in out
    )
    assert (
        f"prebuilt_noexec: missing or not executable in {lab.root}/prebuilt-noexec/build: sendrecv_perf"
        in out
    )
    unresolved = re.search(r"prebuilt_no_nccl: all_reduce_perf cannot load (.*?) \(library path", out)
    assert unresolved and unresolved[1].startswith("libnccl.so.2 => not found"), out[-3000:]
    assert "set collbench_nccl_tests_nccl_home or collbench_nccl_tests_cuda_home" in out


def test_check_mode_changes_nothing_and_bad_input_fails_clearly(lab: Lab, check_run: Played) -> None:
    rc, out, recap = check_run
    assert rc == 2, out[-5000:]  # some hosts failed
    assert recap["git_node"]["failed"] == 0 and recap["fresh_node"]["failed"] == 0
    assert recap["git_node"]["changed"] > 0  # it would check out v2 and rebuild ...
    assert "release v1" in lab.run_binary("git_node")  # ... but did not
    assert _git("rev-parse", "HEAD", cwd=lab.root / "git_node" / "nccl-tests" / "git") == lab.v1
    assert not (lab.root / "fresh_node").exists()
    # bad input: one clear message each, before any work
    assert all(recap[host]["failed"] == 1 for host in ("no_archive", "no_nccl", "no_rocm"))
    missing = lab.root / "missing.tar.gz"
    assert f"collbench_nccl_tests_tarball: {missing} is not a file on the controller" in out
    assert (
        "no_nccl: NCCL headers (include/nccl.h) not found in /nowhere/ nor in a nvidia-nccl wheel of "
        "/usr/bin/python3: set collbench_nccl_tests_nccl_home" in out
    )
    assert "no_rocm: ROCm (bin/hipcc) not found in /no/rocm/: set collbench_nccl_tests_rocm_path" in out
    assert not any((lab.root / host).exists() for host in ("no_archive", "no_nccl", "no_rocm"))


def test_new_version_rebuilds_only_what_changed(lab: Lab, second_build: Played) -> None:
    ran_clean(second_build, "git_node", "tarball_node")
    _, out, recap = second_build
    assert recap["git_node"]["changed"] > 0 and recap["tarball_node"]["changed"] == 0
    assert not skipped(out, MAKE, "git_node") and skipped(out, MAKE, "tarball_node")
    assert "standin all_reduce_perf release v2\n" in lab.run_binary("git_node")
    stamp = json.loads(Path(lab.result("git_node")["bindir"]).parent.with_suffix(".stamp").read_text())
    assert stamp["source"].split()[2:] == ["v2", lab.v2]


# ---------------------------------------------------------------- NCCL from the node's pip wheel


def test_the_wheel_of_the_nodes_python_is_found_before_a_system_nccl(lab: Lab, second_build: Played) -> None:
    """No collbench_nccl_tests_nccl_home: the NCCL wheel of the node's Python is found, ahead of a
    system NCCL among the candidates, whether that Python is Ansible's or collbench_node.python;
    and the build it wants is tarball_node's, made with the wheel given, so nothing is rebuilt."""
    ran_clean(second_build, *WHEEL_HOSTS)
    _, out, _ = second_build
    system = lab.root / "system-nccl"
    links = lab.root / "tarball_node" / "nccl-tests" / "nccl-home"
    built = json.loads(Path(lab.result("tarball_node")["bindir"]).parent.with_suffix(".stamp").read_text())
    assert f"NCCL_HOME={links}" in built["make_args"]
    for name in WHEEL_HOSTS:
        said = f"{name}: NCCL {lab.expected_nccl} in {lab.wheel} (pip wheel of {sys.executable}); "
        assert said + f"also found, not used: {system} ({SYSTEM_NCCL})" in out, out[-5000:]
        # the same stamp (suite, source, make arguments) as tarball_node's: no make, nothing changed
        assert skipped(out, MAKE, name), out[-5000:]
        assert changed_tasks(out).get(name) == [RECORD]
        assert lab.result(name)["bindir"] == lab.result("tarball_node")["bindir"]
        assert (links / "include").resolve() == lab.wheel / "include"
        assert f"nccl library {lab.expected_nccl} " in lab.run_binary(name)
        assert lab.result(name)["ld_library_path"].split(":")[0] == str(lab.wheel / "lib")


# ---------------------------------------------------------------- the real nccl-tests source


def test_the_real_nccl_tests_source_builds_against_the_detected_mpi(
    lab: Lab, real_node: dict[str, object] | None, first_build: tuple[Played, float]
) -> None:
    if real_node is None:
        pytest.skip(
            f"the nccl-tests source archive is not at {VENDOR_ARCHIVE} (see ../shared/vendor/README.md)"
        )
    played, took = first_build
    print(f"\nreal nccl-tests 2.19.6 built by the role in {took:.0f} s (with the stand-in builds)")
    # nvcc is here (the module is skipped otherwise): a failed build fails
    ran_clean(played, "real_node")
    facts = lab.result("real_node")
    assert facts["suite"] == "nccl-tests"
    stamp = json.loads(Path(facts["bindir"]).parent.with_suffix(".stamp").read_text())
    mpi_home = subprocess.check_output(["ompi_info", "--path", "incdir", "--parsable"], text=True)
    assert "MPI=1" in stamp["make_args"] and f"NVCC_GENCODE={GENCODE}" in stamp["make_args"]
    assert stamp["make_args"][-1].startswith("BIN_FILES_LIST=")  # extra arguments reach make, last
    assert sorted(p.name for p in Path(facts["bindir"]).glob("*_perf")) == sorted(REAL_BINARIES)
    # the MPI the launches use (collbench_mpi): Debian's Open MPI tree, where include/ and lib/ sit
    assert f"MPI_HOME={Path(mpi_home.strip().split(':', 2)[2]).parent}" in stamp["make_args"]
    env = {**os.environ, "LD_LIBRARY_PATH": facts["ld_library_path"]}
    for binary in ("all_reduce_perf", "all_gather_perf", "reduce_scatter_perf", "alltoall_perf",
                   "broadcast_perf", "sendrecv_perf"):  # fmt: skip
        path = f"{facts['bindir']}/{binary}"
        ldd = subprocess.run(["ldd", path], capture_output=True, text=True, env=env, check=True).stdout
        assert "not found" not in ldd, ldd
        assert re.search(r"^\s*libmpi\.so\.\d+ => /\S+", ldd, re.M), ldd
        libnccl = re.search(r"^\s*libnccl\.so\.2 => (\S+)", ldd, re.M)
        assert libnccl and Path(libnccl[1]).resolve() == (lab.wheel / "lib" / "libnccl.so.2").resolve(), ldd
    # No GPU here: the binary prints its header, then stops at the first CUDA call.
    run = subprocess.run(
        [f"{facts['bindir']}/all_reduce_perf", "-b", "8", "-e", "8"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    printed = run.stdout + run.stderr
    assert "# nccl-tests version 2.19.6 " in printed, printed
    assert "cudaErrorInsufficientDriver" in printed or "CUDA driver version is insufficient" in printed, (
        printed
    )
    assert run.returncode != 0


def test_the_real_source_second_run_changes_nothing(
    real_node: dict[str, object] | None, first_build: tuple[Played, float], second_run: Played
) -> None:
    if real_node is None:
        pytest.skip(f"the nccl-tests source archive is not at {VENDOR_ARCHIVE}")
    ran_clean(first_build[0], "real_node")
    ran_clean(second_run, "real_node")
    _, out, recap = second_run
    assert recap["real_node"]["changed"] == 0, changed_tasks(out)
    assert not any(task in changed_tasks(out).get("real_node", []) for task in BUILD_TASKS)
    assert skipped(out, MAKE, "real_node"), out[-5000:]
