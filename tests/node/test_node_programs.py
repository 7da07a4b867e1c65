"""Every program shipped to a node imports nothing the node would have to install (the torch programs
need torch, nothing else); those the node's system Python runs (3.6 and up) parse as 3.6. The torch
programs run with the torch environment's Python, which torch keeps recent."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

NODE = Path(__file__).resolve().parents[2] / "collbench_py" / "node"
NEEDS_TORCH = {"collbench_torch_bench.py", "torch_probe.py"}


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), feature_version=(3, 6))
    return {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])
    }


@pytest.mark.parametrize("path", sorted(NODE.glob("*.py")), ids=lambda p: p.name)
def test_a_node_program_is_python_3_6_and_standard_library_only(path: Path) -> None:
    imported = imports(path)
    allowed = sys.stdlib_module_names | ({"torch"} if path.name in NEEDS_TORCH else set())
    assert imported <= allowed, imported - allowed
    if path.name not in NEEDS_TORCH:
        assert "__future__" not in imported  # `annotations` is 3.7


def test_the_check_sees_a_package_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import yaml\nfrom collbench_py import redact\n", encoding="utf-8")
    assert imports(bad) - sys.stdlib_module_names == {"yaml", "collbench_py"}
