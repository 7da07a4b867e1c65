"""Match a parsed file against the hand-written expectations of a corpus sample.

An expectation is a JSON file `tests/data/expected/<folder>/<sample>.json` that
mirrors `ParsedFile.to_dict()` but only holds the keys it checks:

- a dict matches when every key it names matches (other keys are ignored);
- a list matches element by element and must have the same length;
- floats match to 1e-9 relative; everything else with `==`;
- `"len:FIELD": N` checks the length of FIELD instead of its content;
- `"rows_by_size": {"SIZE": {...}}` (inside a run) matches the first row of that size (`size`, or
  `bytes` in a perftest run);
- `"rows_at": {"INDEX": {...}}` (inside a run) matches the row at that index.
"""

from __future__ import annotations

import math
from typing import Any


def mismatches(expected: Any, actual: Any, path: str = "$") -> list[str]:
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{path}: expected an object, got {actual!r}"]
        out: list[str] = []
        for key, want in expected.items():
            if key.startswith("len:"):
                name = key[4:]
                got = actual.get(name)
                if not isinstance(got, (list, tuple, dict)) or len(got) != want:
                    size = len(got) if isinstance(got, (list, tuple, dict)) else got
                    out.append(f"{path}.{name}: expected length {want}, got {size}")
            elif key == "rows_by_size":
                rows = actual.get("rows") or []
                for size, spec in want.items():
                    match = next((r for r in rows if r.get("size", r.get("bytes")) == int(size)), None)
                    if match is None:
                        out.append(f"{path}.rows: no row of size {size}")
                    else:
                        out += mismatches(spec, match, f"{path}.rows[size={size}]")
            elif key == "rows_at":
                rows = actual.get("rows") or []
                for index, spec in want.items():
                    i = int(index)
                    if i >= len(rows) or i < -len(rows):
                        out.append(f"{path}.rows: no row at index {i} (have {len(rows)})")
                    else:
                        out += mismatches(spec, rows[i], f"{path}.rows[{i}]")
            elif key not in actual:
                out.append(f"{path}: missing key {key!r}")
            else:
                out += mismatches(want, actual[key], f"{path}.{key}")
        return out
    if isinstance(expected, list):
        if not isinstance(actual, (list, tuple)):
            return [f"{path}: expected a list, got {actual!r}"]
        if len(expected) != len(actual):
            return [f"{path}: expected {len(expected)} items, got {len(actual)}: {actual!r}"[:400]]
        out = []
        for i, (want, got) in enumerate(zip(expected, actual, strict=True)):
            out += mismatches(want, got, f"{path}[{i}]")
        return out
    if isinstance(expected, float) and isinstance(actual, (int, float)) and not isinstance(actual, bool):
        if math.isclose(expected, actual, rel_tol=1e-9, abs_tol=1e-12):
            return []
        return [f"{path}: expected {expected!r}, got {actual!r}"]
    if expected == actual and isinstance(expected, bool) == isinstance(actual, bool):
        return []
    return [f"{path}: expected {expected!r}, got {actual!r}"]
