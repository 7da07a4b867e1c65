"""Every filter and action plugin is used by a role or a playbook: one that nothing runs is dead code
(delete it, with its tests, instead of keeping it working)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
YAML = [*sorted((REPO / "roles").rglob("*.yml")), *sorted((REPO / "roles").rglob("*.j2"))]
YAML += [*sorted((REPO / "playbooks").glob("*.yml")), REPO / "bench.yml"]
USED = "\n".join(path.read_text() for path in YAML)


def filters() -> list[str]:
    names = []
    for path in sorted((REPO / "filter_plugins").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"_filters_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        names += sorted(module.FilterModule().filters())
    return names


@pytest.mark.parametrize("name", filters())
def test_every_filter_is_used_by_a_role_or_playbook(name: str) -> None:
    assert name in USED


@pytest.mark.parametrize("name", sorted(p.stem for p in (REPO / "action_plugins").glob("*.py")))
def test_every_action_plugin_is_used_by_a_role_or_playbook(name: str) -> None:
    assert f"{name}:" in USED
