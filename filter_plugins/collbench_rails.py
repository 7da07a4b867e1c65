"""Thin filter over collbench_py.pairs.railmap: the logic lives in the package, where it is tested."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# From a checkout the package sits next to this directory; an installed one is found anyway.
_REPO = str(Path(__file__).resolve().parent.parent)
if _REPO not in sys.path:
    sys.path.append(_REPO)

from collbench_py.pairs.railmap import rail_settings_problems  # noqa: E402


def collbench_rail_problems(settings: dict[str, Any]) -> list[str]:
    """One sentence per bad rail setting; settings: {rails: {host: collbench_rails}, sample,
    min_drop, seconds, size}."""
    return rail_settings_problems(
        dict(settings.get("rails") or {}),
        sample=settings.get("sample"),
        min_drop=settings.get("min_drop"),
        seconds=settings.get("seconds"),
        size=settings.get("size"),
    )


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"collbench_rail_problems": collbench_rail_problems}
