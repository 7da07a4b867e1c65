"""A role's task file that a condition may leave out is included, not imported.

Ansible copies an imported file's condition onto every task in it and evaluates it in a worker
per host: a node that skips a 10-task file pays 10 skipped tasks of controller CPU (about 70 ms
each), in every run and on every node. An included file is one skipped task. The exception is an
import that carries tags: tags reach the tasks of a file only through an import, and the benchmark
role selects its phases (`--tags intra`, `inter`, `pairs`) that way.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
IMPORT = "ansible.builtin.import_tasks"


def conditional_imports(tasks: object, where: str) -> Iterator[str]:
    for task in tasks if isinstance(tasks, list) else ():
        if not isinstance(task, dict):
            continue
        for section in ("block", "rescue", "always"):
            yield from conditional_imports(task.get(section), where)
        if IMPORT in task and "when" in task and "tags" not in task:
            yield f"{where}: {task.get('name')} ({task[IMPORT]})"


def test_a_task_file_left_out_by_a_condition_is_included() -> None:
    found = [
        hit
        for path in sorted((REPO / "roles").glob("*/tasks/*.yml"))
        for hit in conditional_imports(
            yaml.safe_load(path.read_text(encoding="utf-8")), str(path.relative_to(REPO))
        )
    ]
    assert found == []


def test_the_check_sees_an_import_under_a_condition() -> None:
    tasks = [{"name": "Build", "block": [{"name": "Get it", IMPORT: "source.yml", "when": "x"}]}]
    assert list(conditional_imports(tasks, "main.yml")) == ["main.yml: Get it (source.yml)"]
    assert (
        list(conditional_imports([{"name": "Get it", IMPORT: "source.yml", "when": "x", "tags": ["t"]}], "m"))
        == []
    )
