"""Test order: modules marked `long` first.

`make test` spreads the modules over the cores (pytest-xdist, one module per worker, in this
order): a module of minutes handed out last would leave one worker running it alone at the end.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("long") is None)  # stable: otherwise as collected
