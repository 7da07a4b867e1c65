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


# The PLAY RECAP line of the default callback, per host.
RECAP = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
Played = tuple[int, str, dict[str, dict[str, int]]]  # rc, output, recap per host


def ran_clean(played: Played, *hosts: str) -> None:
    """Each host ran the play to its end (another host's failure is that host's test's business)."""
    rc, out, recap = played
    for host in hosts:
        assert recap[host]["failed"] == 0 and recap[host]["unreachable"] == 0, (rc, out[-6000:])


def skipped(out: str, task: str, host: str) -> bool:
    """Whether `task` printed `skipping: [host]` (the default callback's block for that task)."""
    blocks = re.split(r"^TASK \[(.+?)\] \**$", out, flags=re.M)
    return any(
        re.search(rf"^skipping: \[{re.escape(host)}\]", body, re.M)
        for name, body in zip(blocks[1::2], blocks[2::2], strict=True)
        if name == task
    )
