"""collbench: benchmark GPU collectives across a cluster and judge the numbers.

The library face for notebooks (docs/python-api.md): `read_run`, `read_history` and
`read_verdicts` return pandas DataFrames. They are loaded on first use, so the command line
and the programs shipped to nodes never import pandas.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__", "read_history", "read_run", "read_verdicts"]

_FRAMES = ("read_history", "read_run", "read_verdicts")


def __getattr__(name: str) -> object:  # typing is not imported: start-up stays as it was
    if name in _FRAMES:
        from collbench_py import frames  # noqa: PLC0415 - pandas only when a frame is asked for

        return getattr(frames, name)
    raise AttributeError(f"module 'collbench_py' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_FRAMES})
