"""The nvbandwidth and perftest roles' decision whether to build (one controller task each,
action_plugins/collbench_build_check.py) in a real playbook on seven local nodes and one over ssh,
as playbooks/build.yml runs them (the decision for every node, then the phase wrapper where a node
builds or verifies): every node in the run that needs the tool is probed over its own connection
and told what check_tools decided (nothing to build, and why); a node whose node checks and rails
are off, or that has left the run, or that uses a distribution's binaries, is not probed; a node
that cannot be reached leaves the run as unreachable, and only it; a node without its own settings
has the role's defaults, not those of the node the task runs for. (The real builds, and inputs
refused with their messages: tests/roles/test_check_tools_roles.py.)"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.roles.local_playbook import PLAYBOOK_BIN, local_inventory, run_playbook

NODES = ("node1", "node2", "node3", "node4", "node5", "node6", "node7")

pytestmark = pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="ansible-playbook is not in this venv")


def playbook(tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    # node2 has what a build needs but a build tool: a toolkit (bin/nvcc), nvml.h and the verbs header
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    (cuda / "bin" / "nvcc").write_text("#!/bin/sh\nexit 0\n")
    (cuda / "bin" / "nvcc").chmod(0o755)
    (tmp_path / "nvml").mkdir()
    (tmp_path / "nvml" / "nvml.h").write_text("/* stand-in */\n")
    (tmp_path / "verbs.h").write_text("/* stand-in */\n")
    hosts = {
        "node1": {
            "collbench_nvbandwidth_cuda_home": "/no/cuda",
            "collbench_perftest_verbs_header": "/no/verbs.h",
        },
        "node2": {
            "collbench_nvbandwidth_cuda_home": str(cuda),
            "collbench_nvbandwidth_cuda_architectures": "90",
            "collbench_nvbandwidth_nvml_include": str(tmp_path / "nvml"),
            "collbench_nvbandwidth_build_tools": ["cat", "collbench-no-such-cmake"],
            "collbench_perftest_verbs_header": str(tmp_path / "verbs.h"),
            "collbench_perftest_build_without_device": True,
            "collbench_perftest_build_tools": ["collbench-no-such-make"],
        },
        "node3": {"collbench_node_checks": False, "collbench_rails": "off"},
        # nothing listens on port 9 here: the connection is refused
        "node4": {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 9},
        "node5": {},
        "node6": {
            "collbench_node_checks_gpu_matrix": False,
            "collbench_perftest_source": "distribution",
            "collbench_perftest_distribution_dir": "/no/bin",
        },
        "node7": {},  # the role's defaults, not node1's own values (node1 is the host the task runs for)
    }
    inventory = local_inventory(tmp_path / "hosts.yml", hosts, localhost=True)
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    extra = {"run_dir": str(run_dir), "collbench_probe_timeout_s": 20}
    return run_playbook("build_check.yml", inventory, extra), run_dir


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, dict]]:
    done, run_dir = playbook(tmp_path_factory.mktemp("build_check"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    left = {host: json.loads((run_dir / f"left-{host}.json").read_text()) for host in NODES}
    return done.stdout, left


def test_a_node_without_what_a_build_needs_is_told_why_nothing_is_built(ran) -> None:
    out, left = ran
    node1 = left["node1"]
    assert node1["standing"] == "in the run"
    assert (node1["nvbandwidth_bin"], node1["nvbandwidth_json"]) == ("", False)
    assert node1["nvbandwidth_note"].startswith(
        "no CUDA toolkit (bin/nvcc) in /no/cuda/: nvbandwidth is not built"
    )
    assert node1["perftest"]["source"] == "none" and node1["perftest"]["bin_dir"] == ""
    assert node1["perftest"]["note"].startswith("no libibverbs headers (infiniband/verbs.h)")
    flat = re.sub(r"\s+", " ", out)
    assert f"node1: {node1['nvbandwidth_note']}" in flat  # said in the run's output too


def test_a_node_that_would_build_but_lacks_a_build_tool_is_told_which(ran) -> None:
    _, left = ran
    node2 = left["node2"]
    assert node2["standing"] == "in the run" and node2["nvbandwidth_bin"] == ""
    # cat answers --version: a tool that is not there is named, and only it
    assert node2["nvbandwidth_note"].startswith("collbench-no-such-cmake not found on node2: install it")
    assert node2["perftest"]["note"] == (
        "collbench-no-such-make not found on node2: install autoconf, automake, libtool and make (with "
        "librdmacm-dev, libibumad-dev, libpci-dev), or use collbench_perftest_source prebuilt or distribution"
    )


def test_only_the_nodes_that_decide_here_are_probed_each_role_in_one_task(ran) -> None:
    out, left = ran
    for tool in ("nvbandwidth", "perftest"):
        probed = sorted(re.findall(rf"^{tool} build check: (\S+): (.*)$", out, re.M))
        expected = {
            "nvbandwidth": ["node1", "node2", "node4", "node7"],
            "perftest": ["node1", "node2", "node7"],
        }[tool]
        assert [host for host, _ in probed] == expected, probed
        assert out.count(f"TASK [{tool} : Decide on every node whether {tool} is built there]") == 1
    # switched off: nothing published; out of the run: left as it was; node6's perftest is the
    # distribution's, looked for where it said (not there: none, with a note)
    assert left["node3"]["nvbandwidth_bin"] is None and left["node3"]["perftest"] is None
    assert left["node5"]["standing"] == "an earlier phase" and left["node5"]["perftest"] is None
    assert left["node6"]["nvbandwidth_bin"] is None
    assert left["node6"]["perftest"]["source"] == "none"
    assert "perftest package is not installed" in left["node6"]["perftest"]["note"]


def test_a_node_that_cannot_be_reached_leaves_as_unreachable_and_alone(ran) -> None:
    out, left = ran
    assert left["node4"]["status"] == "unreachable", left["node4"]
    assert "Connection refused" in left["node4"]["standing"] or "port 9" in left["node4"]["standing"]
    assert re.search(r"node4 leaves the run: Data could not be sent to remote host .*Connection refused", out)
    assert left["node4"]["perftest"] is None  # out of the run: the next phase leaves it out
    assert [host for host in NODES if left[host]["status"]] == ["node4", "node5"]


def test_a_node_without_its_own_settings_has_the_roles_defaults(ran) -> None:
    _, left = ran
    # node1 runs the task and names its own toolkit: node7 looks where the role's defaults say
    assert "/no/cuda" not in left["node7"]["nvbandwidth_note"]
    assert left["node7"]["nvbandwidth_note"] != left["node1"]["nvbandwidth_note"]
