"""Slurm hostlists and sinfo output (collbench_py/slurm/nodes.py) and the inventory script on real captures.

The sinfo captures in tests/data/slurm/ come from the Slurm test cluster (see their README.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from collbench_py.slurm.nodes import (
    SlurmInputError,
    ansible_inventory,
    expand_hostlist,
    missing_nodes,
    parse_sinfo,
    sinfo_argv,
)

REPO = Path(__file__).resolve().parents[2]
CAPTURES = REPO / "tests" / "data" / "slurm"
SCRIPT = REPO / "inventory" / "slurm_inventory.py"


def capture(name: str) -> str:
    return (CAPTURES / name).read_text()


def by_name(text: str) -> dict:
    return {node.name: node for node in parse_sinfo(text)}


# ---- hostlists ------------------------------------------------------------------------------------------


def test_zero_padding_follows_the_lower_bound() -> None:
    names = expand_hostlist("gpu[001-128]")
    assert len(names) == 128
    assert names[:2] == ["gpu001", "gpu002"] and names[-1] == "gpu128"
    assert expand_hostlist("n[08-10]") == ["n08", "n09", "n10"]
    assert expand_hostlist("n[9-11]") == ["n9", "n10", "n11"]  # no leading zero: no padding


def test_commas_inside_brackets_do_not_split_hosts() -> None:
    assert expand_hostlist("a[1-3,5],b7") == ["a1", "a2", "a3", "a5", "b7"]
    assert expand_hostlist("a[1,3-4],b[01-02],c") == ["a1", "a3", "a4", "b01", "b02", "c"]


def test_every_bracket_of_a_name_is_expanded() -> None:
    assert expand_hostlist("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert expand_hostlist("rack[1-2]-gpu[08,10].dc") == [
        "rack1-gpu08.dc",
        "rack1-gpu10.dc",
        "rack2-gpu08.dc",
        "rack2-gpu10.dc",
    ]


def test_plain_names_and_duplicates() -> None:
    assert expand_hostlist("node7") == ["node7"]
    assert expand_hostlist(" a1, a2 ") == ["a1", "a2"]
    assert expand_hostlist("a[1-2],a2,a1") == ["a1", "a2"]


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("a[1-3", "'[' without ']'"),
        ("a1-3]", "']' without '['"),
        ("a[[1-2]]", "cannot nest"),
        ("a[3-1]", "runs backwards"),
        ("a[x-y]", "not a number or a range"),
        ("a[]", "not a number or a range"),
        ("a,,b", "empty host name"),
        ("", "empty host name"),
    ],
)
def test_bad_hostlists_say_what_is_wrong(expression: str, message: str) -> None:
    with pytest.raises(SlurmInputError) as raised:
        expand_hostlist(expression)
    assert message in str(raised.value) and repr(expression) in str(raised.value)


# ---- sinfo ----------------------------------------------------------------------------------------------


def test_real_capture_usable_and_unusable_nodes() -> None:
    nodes = by_name(capture("sinfo-gpu.txt"))
    assert [name for name, node in nodes.items() if node.usable] == ["node1", "node2", "node3", "node8"]
    assert {name: node.unusable_because for name, node in nodes.items() if not node.usable} == {
        "node4": "bad-gpu | GPU 3 fell off the bus (Xid 79)",  # the separator inside the reason survives
        "node5": "busbw low, recheck",
        "node6": "maintenance",
        "node7": "Not responding",
    }
    assert nodes["node5"].state == "draining" and nodes["node7"].state == "down*"


def test_real_capture_fields() -> None:
    node = by_name(capture("sinfo-gpu.txt"))["node2"]
    assert (node.state, node.cpus, node.memory_mb, node.gres) == ("mixed", 2, 500, "gpu:8")
    assert node.partitions == ("gpu",)  # the default partition's "*" is not part of its name
    assert node.reason == ""  # sinfo prints "none"


def test_not_responding_is_unusable_without_a_reason() -> None:
    node = by_name(capture("sinfo-gpu-not-responding.txt"))["node7"]
    assert node.state == "idle*" and node.reason == ""
    assert not node.usable
    assert node.unusable_because == "Slurm state idle* (not responding)"


def test_a_node_in_two_partitions_is_listed_once() -> None:
    text = capture("sinfo-all-partitions.txt")
    assert len(text.splitlines()) == 10
    nodes = parse_sinfo(text)
    assert [node.name for node in nodes] == [f"node{k}" for k in range(1, 9)]
    assert nodes[0].partitions == ("gpu", "debug")


def test_nodes_of_an_expression_that_slurm_does_not_know() -> None:
    listed = parse_sinfo(capture("sinfo-nodes-expression.txt"))
    missing = missing_nodes(expand_hostlist("node[3-5,9]"), listed, why="not in Slurm")
    assert [(node.name, node.usable, node.unusable_because) for node in missing] == [
        ("node9", False, "not in Slurm")
    ]


@pytest.mark.parametrize(
    ("state", "usable"),
    [
        ("idle~", True),  # powered down by power saving: Slurm powers it up for a job
        ("mixed#", True),  # powering up
        ("completing", True),
        ("drained*", False),
        ("fail", False),
        ("idle$", False),  # maintenance reservation
        ("idle@", False),  # reboot pending
        ("mixed+drain", False),  # a form this module does not know: not trusted
        ("future", False),
    ],
)
def test_state_flags(state: str, usable: bool) -> None:
    # A line of the real capture with only the state changed.
    line = capture("sinfo-gpu.txt").splitlines()[0].replace("|idle|", f"|{state}|")
    node = parse_sinfo(line)[0]
    assert node.usable is usable
    if not usable:
        assert node.unusable_because.startswith(f"Slurm state {state} (")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("node1|idle|2|500\n", "line 1: .* has 4 fields, expected 7"),
        ("node1|idle|2|500|gpu:8|gpu*|none\nnode[2-3]|idle|2|500|gpu:8|gpu*|none\n", "line 2: .*-N"),
        ("node1||2|500|gpu:8|gpu*|none\n", "no state"),
        ("node1|idle|two|500|gpu:8|gpu*|none\n", "CPUs 'two' is not a number"),
    ],
)
def test_bad_sinfo_output_says_which_line(text: str, message: str) -> None:
    with pytest.raises(SlurmInputError, match=message):
        parse_sinfo(text)


def test_sinfo_command() -> None:
    assert sinfo_argv("gpu", "gpu[01-04]") == [
        "sinfo",
        "--noheader",
        "--Node",
        "--format=%N|%T|%c|%m|%G|%P|%E",
        "--partition=gpu",
        "--nodes=gpu[01-04]",
    ]


# ---- the inventory ----------------------------------------------------------------------------------------


def test_inventory_groups_from_real_capture() -> None:
    listing = ansible_inventory(parse_sinfo(capture("sinfo-gpu.txt")))
    assert listing["gpu_nodes"] == {"hosts": ["node1", "node2", "node3", "node8"]}
    assert listing["slurm_unusable"] == {"hosts": ["node4", "node5", "node6", "node7"]}
    hostvars = listing["_meta"]["hostvars"]
    assert hostvars["node6"]["collbench_slurm_reason"] == "maintenance"
    assert "collbench_slurm_reason" not in hostvars["node1"]
    assert hostvars["node1"]["collbench_slurm_gres"] == "gpu:8"


def run_script(tmp_path: Path, *args: str, env: dict[str, str] | None = None, sinfo_capture: str = ""):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("COLLBENCH_SLURM")}
    if sinfo_capture:  # replay a real capture as sinfo's answer
        replay = tmp_path / "sinfo"
        replay.write_text(f"#!/bin/sh\ncat {CAPTURES / sinfo_capture}\n")
        replay.chmod(0o755)
        environ["COLLBENCH_SLURM_SINFO"] = str(replay)
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        check=False,
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
    )


def test_script_list_and_host(tmp_path: Path) -> None:
    env = {"COLLBENCH_SLURM_PARTITION": "gpu"}
    listed = run_script(tmp_path, "--list", env=env, sinfo_capture="sinfo-gpu.txt")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["slurm_unusable"]["hosts"] == ["node4", "node5", "node6", "node7"]
    host = run_script(tmp_path, "--host", "node7", env=env, sinfo_capture="sinfo-gpu.txt")
    assert json.loads(host.stdout)["collbench_slurm_reason"] == "Not responding"


def test_script_lists_unknown_nodes_of_the_expression(tmp_path: Path) -> None:
    env = {"COLLBENCH_SLURM_NODES": "node[3-5,9]"}
    listed = run_script(tmp_path, "--list", env=env, sinfo_capture="sinfo-nodes-expression.txt")
    listing = json.loads(listed.stdout)
    assert listing["gpu_nodes"]["hosts"] == ["node3"]
    assert listing["_meta"]["hostvars"]["node9"]["collbench_slurm_reason"] == "not in Slurm"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "set COLLBENCH_SLURM_PARTITION"),
        ({"COLLBENCH_SLURM_NODES": "gpu[1-"}, "'[' without ']'"),
        (
            {"COLLBENCH_SLURM_PARTITION": "gpu", "COLLBENCH_SLURM_SINFO": "/nonexistent/sinfo"},
            "not found: run this on a Slurm login node",
        ),
        (
            {"COLLBENCH_SLURM_PARTITION": "gpu", "COLLBENCH_SLURM_SINFO": "false"},
            "failed: exit code 1",
        ),
    ],
)
def test_script_bad_input_one_clear_line(tmp_path: Path, env: dict[str, str], message: str) -> None:
    result = run_script(tmp_path, "--list", env=env)
    assert result.returncode == 1
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr
    assert message in result.stderr
