"""Every variable that more than one role reads is defaulted once, in roles/collbench_defaults
(kubespray's kubespray_defaults): no other role defines it again, no task restates its default with
`| default(...)`, every role that reads one depends on collbench_defaults, and the argument specs
and READMEs that name its default agree with it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
DEFAULTS_ROLE = ROLES / "collbench_defaults"
SHARED: dict[str, Any] = yaml.safe_load((DEFAULTS_ROLE / "defaults" / "main.yml").read_text())
OTHER_ROLES = sorted(p.name for p in ROLES.iterdir() if p.is_dir() and p != DEFAULTS_ROLE)


def role_texts(role: str) -> dict[Path, str]:
    """A role's tasks, vars, defaults and templates: what can read a variable."""
    root = ROLES / role
    paths = [p for sub in ("tasks", "vars", "defaults", "templates") for p in sorted((root / sub).rglob("*"))]
    return {p: p.read_text() for p in paths if p.is_file()}


def reads(text: str, variable: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(variable)}\b", text) is not None


def test_the_defaults_role_holds_the_variables_several_roles_read() -> None:
    assert "collbench_probe_timeout_s" in SHARED and SHARED["collbench_probe_timeout_s"] == 120
    for variable in SHARED:
        readers = [role for role in OTHER_ROLES if any(reads(t, variable) for t in role_texts(role).values())]
        assert readers, f"{variable} is defaulted in collbench_defaults but no role reads it"


@pytest.mark.parametrize("role", OTHER_ROLES)
def test_no_other_role_defines_a_shared_variable_again(role: str) -> None:
    for sub in ("defaults", "vars"):
        for path in sorted((ROLES / role / sub).glob("*.yml")):
            defined = set(yaml.safe_load(path.read_text()) or {})
            assert not defined & set(SHARED), f"{path.relative_to(REPO)} defines {defined & set(SHARED)}"


def test_no_task_restates_a_shared_default() -> None:
    files = [*sorted(ROLES.glob("*/*/**/*.yml")), *sorted(ROLES.glob("*/templates/*")), REPO / "bench.yml"]
    files += sorted((REPO / "playbooks").glob("*.yml"))
    restated = re.compile(rf"\b({'|'.join(map(re.escape, SHARED))})\s*\|\s*default\(")
    found = [
        f"{path.relative_to(REPO)}:{number}: {match[0]}"
        for path in files
        if DEFAULTS_ROLE not in path.parents
        for number, line in enumerate(path.read_text().splitlines(), 1)
        for match in [restated.search(line)]
        if match
    ]
    assert found == []


@pytest.mark.parametrize("role", OTHER_ROLES)
def test_a_role_that_reads_a_shared_variable_depends_on_the_defaults_role(role: str) -> None:
    used = sorted(v for v in SHARED if any(reads(t, v) for t in role_texts(role).values()))
    meta = yaml.safe_load((ROLES / role / "meta" / "main.yml").read_text())
    dependencies = [d["role"] if isinstance(d, dict) else d for d in meta.get("dependencies") or []]
    if used:
        assert "collbench_defaults" in dependencies, f"{role} reads {used}"


@pytest.mark.parametrize("role", OTHER_ROLES)
def test_argument_specs_state_the_shared_defaults_as_they_are(role: str) -> None:
    specs = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    for entry, spec in specs.items():
        for variable, option in (spec.get("options") or {}).items():
            if variable in SHARED and "default" in option:
                assert option["default"] == SHARED[variable], f"{role} {entry}: {variable}"


@pytest.mark.parametrize("role", OTHER_ROLES)
def test_readmes_state_the_shared_defaults_as_they_are(role: str) -> None:
    """A README row `| `variable` | `value` | ...` names the value collbench_defaults holds."""
    readme = (ROLES / role / "README.md").read_text()
    for variable, value in SHARED.items():
        row = re.search(rf"^\| `{re.escape(variable)}` \| `([^`]*)` \|", readme, re.MULTILINE)
        if row and isinstance(value, bool | int | float | str) and "{{" not in str(value):
            assert yaml.safe_load(row[1] or "''") == value, f"{role} README: {variable}"
