"""What the build check decides on the controller before any node is asked (collbench_py/facts/
build_check.py): which nodes need nvbandwidth or perftest, and which inputs cannot work, with the
messages the per-node assertions gave. (On nodes: tests/roles/test_build_check_role.py; the real
builds: tests/roles/test_check_tools_roles.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from collbench_py.facts.build_check import input_problem, needed, node_settings

REPO = Path(__file__).resolve().parents[2]


def defaults(tool: str) -> dict:
    """The role's defaults and the run's, by variable name, as the task passes them."""
    role = yaml.safe_load((REPO / "roles" / tool / "defaults" / "main.yml").read_text())
    run = yaml.safe_load((REPO / "roles" / "collbench_defaults" / "defaults" / "main.yml").read_text())
    return {**run, **role}


def settings(tool: str, **own: object) -> dict:
    return node_settings(
        tool,
        {f"collbench_{k}" if not k.startswith("collbench_") else k: v for k, v in own.items()},
        defaults(tool),
    )


@pytest.mark.parametrize(
    ("tool", "own", "wanted"),
    [
        ("nvbandwidth", {}, True),
        ("nvbandwidth", {"collbench_node_checks": False}, False),
        ("nvbandwidth", {"collbench_node_checks_gpu_matrix": "no"}, False),
        ("perftest", {}, True),
        # the NIC loopback off: the rail launches of the pairs phase still need it
        ("perftest", {"collbench_node_checks_nic": False}, True),
        ("perftest", {"collbench_node_checks_nic": False, "collbench_rails": "off"}, False),
        ("perftest", {"collbench_node_checks": False, "collbench_phases": ["intra", "all"]}, False),
        ("perftest", {"collbench_node_checks": False, "collbench_pairs": "none"}, False),
    ],
)
def test_which_nodes_need_the_tool(tool: str, own: dict, wanted: bool) -> None:
    assert needed(tool, settings(tool, **own)) is wanted


def test_good_inputs_are_let_through(tmp_path: Path) -> None:
    (tmp_path / "nvbandwidth.tar.gz").write_bytes(b"archive")
    assert input_problem("nvbandwidth", settings("nvbandwidth"), str(tmp_path)) is None
    assert (
        input_problem("perftest", settings("perftest", perftest_source="distribution"), str(tmp_path)) is None
    )
    # a relative archive is the playbook directory's
    tarball = settings("nvbandwidth", nvbandwidth_source="tarball", nvbandwidth_tarball="nvbandwidth.tar.gz")
    assert input_problem("nvbandwidth", tarball, str(tmp_path)) is None


@pytest.mark.parametrize(
    ("tool", "own", "said"),
    [
        (
            "nvbandwidth",
            {"nvbandwidth_source": "pip"},
            "collbench_nvbandwidth_source must be one of git, tarball, prebuilt (got 'pip')",
        ),
        (
            "perftest",
            {"perftest_source": "prebuilt"},
            "collbench_perftest_source is prebuilt: set collbench_perftest_prebuilt_dir "
            "(the binaries on the node)",
        ),
        (
            "nvbandwidth",
            {"nvbandwidth_source": "tarball"},
            "collbench_nvbandwidth_source is tarball: set collbench_nvbandwidth_tarball "
            "(the archive on the controller)",
        ),
        (
            "nvbandwidth",
            {"nvbandwidth_version": "0.8"},
            "collbench_nvbandwidth_version must be a tag like v0.8 or a full commit hash (got '0.8')",
        ),
        (
            "perftest",
            {"perftest_version": "v26.04.17"},
            "collbench_perftest_version must be a tag like 26.04.17 or a full commit hash (got 'v26.04.17')",
        ),
        (
            "nvbandwidth",
            {"nvbandwidth_cmake_extra_args": ["CMAKE_BUILD_TYPE=Debug"]},
            "collbench_nvbandwidth_cmake_extra_args must be -DNAME=value items "
            "(got ['CMAKE_BUILD_TYPE=Debug'])",
        ),
        (
            "nvbandwidth",
            {"nvbandwidth_cuda_architectures": "sm_90"},
            "collbench_nvbandwidth_cuda_architectures a list like 80;90 (got 'sm_90')",
        ),
        ("nvbandwidth", {"nvbandwidth_build_jobs": 0}, "collbench_nvbandwidth_build_jobs >= 1 (got 0)"),
        (
            "perftest",
            {"perftest_configure_extra_args": ["-g"]},
            "collbench_perftest_configure_extra_args must be --option[=value] or NAME=value items "
            "(got ['-g'])",
        ),
        ("perftest", {"perftest_make_jobs": "many"}, "collbench_perftest_make_jobs >= 1 (got many)"),
        (
            "perftest",
            {"perftest_source": "tarball", "perftest_tarball": "missing.tar.gz"},
            "collbench_perftest_tarball: /plays/missing.tar.gz is not a file on the controller",
        ),
    ],
)
def test_an_input_that_cannot_work_is_named(tool: str, own: dict, said: str) -> None:
    assert said in (input_problem(tool, settings(tool, **own), "/plays") or "")
