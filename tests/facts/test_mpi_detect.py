"""Where a node's MPI is (collbench_py.facts.mpi): Debian, RHEL and HPC-X layouts, and this machine's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from collbench_py.facts.mpi import MpiInstall, detect_mpi, files_to_check, parse_ompi_info_paths

REPO = Path(__file__).resolve().parents[2]
DEBIAN_OMPI_INFO = (REPO / "tests/data/ompi-info/debian12-openmpi-4.1.4.txt").read_text()
DEBIAN_OMPI = "/usr/lib/x86_64-linux-gnu/openmpi"
RHEL_OMPI_INFO = """path:prefix:/usr/lib64/openmpi
path:exec_prefix:/usr/lib64/openmpi
path:bindir:/usr/lib64/openmpi/bin
path:libdir:/usr/lib64/openmpi/lib
path:incdir:/usr/include/openmpi-x86_64
path:pkglibdir:/usr/lib64/openmpi/lib/openmpi
"""
HPCX_OMPI_INFO = """path:prefix:/opt/hpcx/ompi
path:bindir:/opt/hpcx/ompi/bin
path:libdir:/opt/hpcx/ompi/lib
path:incdir:/opt/hpcx/ompi/include
"""


def layout(mpiruns: dict[str, str | None], files: set[str]) -> set[str]:
    """Of the paths the node is asked about, those this layout has."""
    return {path for path in files_to_check(mpiruns) if path in files}


def test_ompi_info_paths_are_read_from_real_output() -> None:
    paths = parse_ompi_info_paths(DEBIAN_OMPI_INFO)
    assert paths["prefix"] == "/usr"
    assert paths["incdir"] == f"{DEBIAN_OMPI}/include" and paths["libdir"] == f"{DEBIAN_OMPI}/lib"


def test_debian_mpirun_on_the_path_with_headers_under_the_triplet() -> None:
    mpiruns = {"/usr/bin/mpirun": DEBIAN_OMPI_INFO}
    existing = layout(mpiruns, {f"{DEBIAN_OMPI}/include/mpi.h", f"{DEBIAN_OMPI}/lib/libmpi.so"})
    assert detect_mpi("/usr/bin/mpirun", mpiruns, existing) == MpiInstall(
        mpirun="/usr/bin/mpirun",
        prefix="/usr",
        home=DEBIAN_OMPI,
        include=f"{DEBIAN_OMPI}/include",
        lib=f"{DEBIAN_OMPI}/lib",
    )


def test_rhel_mpirun_off_the_path_with_headers_elsewhere() -> None:
    mpirun = "/usr/lib64/openmpi/bin/mpirun"
    mpiruns = {mpirun: RHEL_OMPI_INFO}
    existing = layout(mpiruns, {"/usr/include/openmpi-x86_64/mpi.h", "/usr/lib64/openmpi/lib/libmpi.so"})
    found = detect_mpi(None, mpiruns, existing)
    assert found == MpiInstall(
        mpirun=mpirun,
        prefix="/usr/lib64/openmpi",
        home="/usr/lib64/openmpi",  # has lib/ but not include/: the build links the two together
        include="/usr/include/openmpi-x86_64",
        lib="/usr/lib64/openmpi/lib",
    )


def test_rhel_without_ompi_info_falls_back_to_the_tree_around_mpirun() -> None:
    mpirun = "/usr/lib64/openmpi/bin/mpirun"
    existing = {"/usr/lib64/openmpi/lib/libmpi.so"}
    found = detect_mpi(None, {mpirun: None}, existing)
    assert found is not None
    assert (found.prefix, found.include, found.lib) == ("/usr/lib64/openmpi", None, "/usr/lib64/openmpi/lib")


def test_hpcx_is_one_tree_and_the_user_home_wins_over_the_path() -> None:
    mpirun = "/opt/hpcx/ompi/bin/mpirun"
    mpiruns = {"/usr/bin/mpirun": DEBIAN_OMPI_INFO, mpirun: HPCX_OMPI_INFO}
    files = {f"{DEBIAN_OMPI}/include/mpi.h", f"{DEBIAN_OMPI}/lib/libmpi.so", mpirun}
    files |= {"/opt/hpcx/ompi/include/mpi.h", "/opt/hpcx/ompi/lib/libmpi.so"}
    existing = {path for path in files_to_check(mpiruns, "/opt/hpcx/ompi") if path in files}
    hpcx = MpiInstall(
        mpirun=mpirun,
        prefix="/opt/hpcx/ompi",
        home="/opt/hpcx/ompi",
        include="/opt/hpcx/ompi/include",
        lib="/opt/hpcx/ompi/lib",
    )
    assert detect_mpi("/usr/bin/mpirun", mpiruns, existing, home="/opt/hpcx/ompi/") == hpcx
    # without the override the PATH's comes first; with the PATH's lacking headers, HPC-X's
    assert detect_mpi("/usr/bin/mpirun", mpiruns, existing).mpirun == "/usr/bin/mpirun"
    no_dev = existing - {f"{DEBIAN_OMPI}/include/mpi.h"}
    assert detect_mpi("/usr/bin/mpirun", mpiruns, no_dev) == hpcx


def test_no_mpirun_is_none() -> None:
    assert detect_mpi(None, {}, set()) is None


@pytest.mark.skipif(shutil.which("ompi_info") is None, reason="Open MPI is not installed on this machine")
def test_the_facts_role_finds_this_machines_open_mpi(tmp_path: Path) -> None:
    """The role's probe and the package's choice on a real Debian Open MPI, through ansible-playbook."""
    result = tmp_path / "mpi.json"
    inventory = tmp_path / "inventory.yml"
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "collbench_test_result": str(result),
    }
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"node": host}}}))
    env = {
        **os.environ,
        "ANSIBLE_HOME": str(REPO / ".ansible"),
        "ANSIBLE_LOCAL_TEMP": str(REPO / ".ansible" / "tmp"),
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_NOCOLOR": "1",
    }
    playbook = REPO / "tests" / "playbooks" / "detect_mpi.yml"
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(playbook)]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    mpi = json.loads(result.read_text())
    assert mpi["mpirun"] == shutil.which("mpirun")
    prefix = parse_ompi_info_paths(
        subprocess.check_output(["ompi_info", "--path", "all", "--parsable"], text=True)
    )
    assert mpi["prefix"] == prefix["prefix"]
    assert Path(mpi["include"], "mpi.h").is_file() and Path(mpi["lib"], "libmpi.so").exists()
    assert Path(mpi["home"], "include") == Path(mpi["include"]) and Path(mpi["home"], "lib") == Path(
        mpi["lib"]
    )
    version = subprocess.run([mpi["mpirun"], "--version"], capture_output=True, text=True, check=True).stdout
    assert "Open MPI" in version
