"""A host's directory name in the run (hosts/<name>/) is one rule, collbench_py.fetch.safe_name:
the preflight role names the directories through the collbench_host_dir filter, and no YAML file
re-types the rule."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from collbench_py.fetch import safe_name
from filter_plugins.collbench import FilterModule

REPO = Path(__file__).resolve().parent.parent
HOST_DIR = FilterModule().filters()["collbench_host_dir"]
# What a re-typed copy of the rule looks like: the character class of safe names in a regex.
RETYPED = re.compile(r"\[\^A-Za-z0-9\._-\]")


@pytest.mark.parametrize(
    ("host", "directory"),
    [
        ("node1", "node1"),
        ("gpu-07.rack2.example.com", "gpu-07.rack2.example.com"),
        ("gpu node/7", "gpu_node_7"),
        ("../etc", "_._etc"),
        (".hidden", "_hidden"),
        ("a;b", "a_b"),
        ("a|b", "a_b"),
    ],
)
def test_the_filter_names_the_directory_as_fetch_does(host: str, directory: str) -> None:
    assert HOST_DIR(host) == safe_name(host) == directory


def test_no_yaml_file_retypes_the_rule() -> None:
    copies = [
        f"{path.relative_to(REPO)}:{number}"
        for pattern in ("roles/**/*.yml", "roles/**/*.j2", "playbooks/*.yml", "bench.yml")
        for path in sorted(REPO.glob(pattern))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if RETYPED.search(line)
    ]
    assert copies == []


def test_the_roles_name_the_directories_through_the_filter() -> None:
    preflight = REPO / "roles" / "preflight" / "tasks"
    assert "map('collbench_host_dir')" in (preflight / "validate.yml").read_text()
    assert "collbench_host_dir" in (preflight / "reach.yml").read_text()
