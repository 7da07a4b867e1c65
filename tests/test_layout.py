"""The layout promises of the README's "Where things live": a small top level, one name per file,
no Python hidden in YAML, and every path the docs point at exists."""

from __future__ import annotations

import importlib
import re
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "collbench_py"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("roles/*/README.md"))]
# A repository path as docs write it: a top-level folder of this repository, then a path.
TOP = (
    "collbench_py",
    "roles",
    "playbooks",
    "tests",
    "benchmarks",
    "docs",
    "inventory",
    "examples",
    "action_plugins",
    "filter_plugins",
    "callback_plugins",
)
POINTER = re.compile(r"(?<![\w./-])((?:" + "|".join(TOP) + r")/[\w./<>*-]*[\w/])")


def python_files() -> list[Path]:
    folders = [PACKAGE, ROOT / "action_plugins", ROOT / "filter_plugins", ROOT / "callback_plugins"]
    return [p for folder in folders for p in folder.rglob("*.py") if "__pycache__" not in p.parts]


def test_the_package_top_level_has_at_most_ten_modules():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 10, top


def test_no_two_files_share_a_name():
    """Three files once shared a name (an action, a filter and the node wrapper): one name, one file."""
    names = Counter(p.name for p in python_files() if p.name != "__init__.py")
    assert [name for name, count in names.items() if count > 1] == []


def _strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(key)
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


PYTHON_CODE = re.compile(r"^\s*(import \w+|from \w+(\.\w+)* import |def \w+\(|print\()", re.M)


def yaml_files() -> list[Path]:
    found = [ROOT / "bench.yml", *(ROOT / "playbooks").glob("*.yml"), *(ROOT / "inventory").glob("*.yml")]
    return found + sorted(ROOT.glob("roles/*/*/*.yml"))


def test_no_python_inside_yaml_strings():
    """Node programs live in collbench_py/node/ where ruff and the unit tests reach them."""
    hidden = []
    for path in yaml_files():
        for text in _strings(yaml.safe_load(path.read_text(encoding="utf-8"))):
            if PYTHON_CODE.search(text):
                hidden.append(f"{path.relative_to(ROOT)}: {text.strip().splitlines()[0][:80]}")
    assert hidden == []


def _resolves(pointer: str) -> bool:
    pointer = pointer.rstrip(".")
    if "<" in pointer or "*" in pointer:  # a pattern: its fixed folder must exist
        fixed = re.split(r"[<*]", pointer, maxsplit=1)[0].rsplit("/", 1)[0]
        return (ROOT / fixed).exists()
    return (ROOT / pointer).exists()


def test_every_path_the_docs_point_at_exists():
    missing = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for pointer in set(POINTER.findall(text)):
            if pointer.startswith(("results/", "tests/cluster/out")):
                continue
            if not _resolves(pointer):
                missing.append(f"{doc.relative_to(ROOT)}: {pointer}")
    assert sorted(missing) == []


DOTTED = re.compile(r"(?<![\w/])collbench_py(?:\.\w+)+")


def _dotted_resolves(pointer: str) -> bool:
    """`collbench_py.pairs.schedule.default_pair_schedule`: a module, then attributes of it."""
    parts = pointer.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        target = module
        for name in parts[cut:]:
            if not hasattr(target, name):
                return False
            target = getattr(target, name)
        return True
    return False


def test_every_module_the_docs_name_exists():
    missing = []
    for doc in [*DOCS, *yaml_files()]:
        for pointer in set(DOTTED.findall(doc.read_text(encoding="utf-8"))):
            if not _dotted_resolves(pointer.rstrip(".")):
                missing.append(f"{doc.relative_to(ROOT)}: {pointer}")
    assert sorted(missing) == []


def test_the_pointer_check_sees_a_wrong_path(tmp_path):
    assert _dotted_resolves("collbench_py.pairs.schedule.default_pair_schedule")
    assert not _dotted_resolves("collbench_py.schedule.default_pair_schedule")
    assert _resolves("collbench_py/rundir/load.py")
    assert not _resolves("collbench_py/rundir.py")
    assert POINTER.findall("see `collbench_py/cli/cmd_run.py`, and (roles/facts/README.md).") == [
        "collbench_py/cli/cmd_run.py",
        "roles/facts/README.md",
    ]
