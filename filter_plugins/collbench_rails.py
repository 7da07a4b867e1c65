"""Thin filter over collbench_py.pairs.railmap: the logic lives in the package, where it is tested."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# From a checkout the package sits next to this directory; an installed one is found anyway.
_REPO = str(Path(__file__).resolve().parent.parent)
if _REPO not in sys.path:
    sys.path.append(_REPO)

# collbench_py is imported inside each filter, not here: Ansible loads every filter file in each
# worker process that templates any filter (every task, every host), and importing the package
# there cost ~0.3 s of controller CPU per task and host.


def collbench_rail_problems(settings: dict[str, Any]) -> list[str]:
    """One sentence per bad rail setting; settings: {rails: {host: collbench_rails}, sample,
    min_drop, seconds, size}."""
    from collbench_py.pairs.railmap import rail_settings_problems

    return rail_settings_problems(
        dict(settings.get("rails") or {}),
        sample=settings.get("sample"),
        min_drop=settings.get("min_drop"),
        seconds=settings.get("seconds"),
        size=settings.get("size"),
    )


def collbench_rail_map(
    settings: dict[str, Any], run_dir: str, dir_names: dict[str, str], perftest: dict[str, Any] | None = None
) -> dict[str, Any]:
    """rails.json's content from {inventory host: collbench_rails} and the run directory's hosts
    (their facts.json and topo.txt), keyed by directory name; perftest: {inventory host:
    collbench_perftest}, a host without ib_write_bw gets no rails."""
    from collbench_py.pairs.railmap import rails_document, run_rails

    by_dir = {str(dir_names.get(host, host)): setting for host, setting in settings.items()}
    tools = None if perftest is None else {str(dir_names.get(h, h)): t for h, t in perftest.items()}
    return rails_document(run_rails(run_dir, by_dir, tools))


def collbench_rails_on(setting: Any, phases: list[str], pairs: str | None) -> bool:
    """Whether this host's rails are measured (and perftest is needed on it)."""
    from collbench_py.pairs.railmap import rails_on

    return rails_on(setting, phases, pairs)


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "collbench_rail_problems": collbench_rail_problems,
            "collbench_rails_on": collbench_rails_on,
            "collbench_rail_map": collbench_rail_map,
        }
