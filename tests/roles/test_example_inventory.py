"""inventory/example-cluster.yml documents every public role default (set or commented out), grouped
under the role it comes from, so a user copying it sees every knob."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "inventory" / "example-cluster.yml"


def role_defaults() -> dict[str, list[str]]:
    """role -> its public variables (`collbench_*`; `__collbench_*` are internal)."""
    out = {}
    for path in sorted(REPO.glob("roles/*/defaults/main.yml")):
        names = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        out[path.parts[-3]] = [name for name in names if name.startswith("collbench_")]
    return out


def test_every_public_role_default_is_in_the_example_inventory() -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    defaults = role_defaults()
    assert sum(len(names) for names in defaults.values()) > 80  # the roles were read
    missing = [
        f"{role}: {name}"
        for role, names in defaults.items()
        for name in names
        if not re.search(rf"^\s*#?\s*{re.escape(name)}:", text, re.M)
    ]
    assert not missing, "not in inventory/example-cluster.yml:\n" + "\n".join(missing)


def test_each_default_sits_under_its_role_s_heading() -> None:
    """The example groups variables under `# --- ...: roles/<role>/defaults/main.yml ---` headings;
    a variable listed under another role's heading sends the reader to the wrong file."""
    owner = {name: role for role, names in role_defaults().items() for name in names}
    heading = None
    misplaced = []
    for line in EXAMPLE.read_text(encoding="utf-8").splitlines():
        if found := re.search(r"# ---.*roles/(\w+)/defaults/main\.yml", line):
            heading = found[1]
            continue
        found = re.match(r"^\s*#?\s*(collbench_\w+):", line)
        if found and found[1] in owner and heading is not None and owner[found[1]] != heading:
            misplaced.append(f"{found[1]} (roles/{owner[found[1]]}) under roles/{heading}")
    assert not misplaced, misplaced
