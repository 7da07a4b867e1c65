"""What the default callback of `ansible-playbook` printed, read back by the tests."""

from __future__ import annotations

import re

TASK = re.compile(r"^TASK \[(.+?)\] \**$", re.M)


def changed_tasks(out: str, role: str | None = None) -> dict[str, list[str]]:
    """Per host, the tasks that reported a change (only `role`'s, if given); hosts with none left out."""
    changed: dict[str, list[str]] = {}
    parts = TASK.split(out)
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if role is not None and not name.startswith(f"{role} : "):
            continue
        for host in re.findall(r"^changed: \[([^\]]+)\]", body, re.M):
            changed.setdefault(host, []).append(name)
    return changed
