"""`dcgmi diag` text table into one DiagTest record per test.

Layout (DCGM 2.x and 3.x): `| Test name | Result |` rows between section rules
(`|-----  Deployment  ---...|`, `+-----  Integration  ---+`), a Metadata section (DCGM 3: version,
driver, GPU device ids), results `Pass`, `Pass - All`, `Fail - GPU: 0`, `Warn`, `Skip`, and `Info` /
`Warning` / `Error` rows under the test they belong to. A long text wraps over rows whose left cell is
empty, cut at a fixed width mid-word: the chunks are joined as they are (no space added).
A fragment (no header, no closing rule, a last row without its `|`) is read as far as it goes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from collbench_py.parsers.models import Kind, ParsedFile, ParseError

KIND: Kind = "dcgmi-diag"

_SECTION = re.compile(r"^[|+]-{3,}\s+(?P<name>\w[\w ]*?)\s+-{3,}")
_RESULT = re.compile(r"^(?P<result>Pass|Fail|Warn|Skip|Not Run)\b(?:\s*-\s*(?P<scope>.*))?$", re.IGNORECASE)
_NVLINK_DOWN = re.compile(r"GPU (?P<gpu>\d+)'s NvLink link (?P<link>\d+) is currently down")
_LEVEL = re.compile(r"dcgmi diag\b.*?(?:-r|--run)[ =]?(?P<level>\d)")
_MESSAGE_ROWS = {"Info": "info", "Warning": "warnings", "Error": "errors"}
_METADATA = {
    "DCGM Version": "dcgm_version",
    "Driver Version Detected": "driver_version",
    "GPU Device IDs Detected": "gpu_device_ids",
}


@dataclass(frozen=True)
class DiagTest:
    section: str | None  # "Deployment", "Integration", "Hardware", "Stress"
    name: str  # "PCIe", "Denylist" (DCGM 3) or "Blacklist" (DCGM 2)
    result: str | None  # "pass", "fail", "warn", "skip", "not-run"
    result_text: str = ""  # as printed: "Pass - All", "Fail - GPU: 0"
    scope: str | None = None  # "All", "GPU: 0"
    info: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    nvlink_down: tuple[dict[str, int], ...] = field(
        default_factory=tuple
    )  # {"gpu": 0, "link": 3} named in a warning

    CSV_FIELDS: ClassVar[tuple[str, ...]] = (
        "section",
        "name",
        "result",
        "scope",
        "info",
        "warnings",
        "errors",
    )

    def csv_rows(self) -> list[dict[str, Any]]:
        row: dict[str, Any] = {name: getattr(self, name) for name in self.CSV_FIELDS}
        for name in ("info", "warnings", "errors"):
            row[name] = " | ".join(row[name])
        return [row]

    def table_lines(self) -> list[str]:
        lines = [f"  {self.section or '-'} / {self.name}: {self.result_text or '-'}"]
        lines += [f"    info: {text}" for text in self.info]
        lines += [f"    warning: {text}" for text in self.warnings]
        lines += [f"    error: {text}" for text in self.errors]
        return lines


def sniff(text: str) -> Kind | None:
    head = text[:65536]
    if "Successfully ran diagnostic for group" in head:
        return KIND
    if "Diagnostic" in head and re.search(r"(?m)^\|\s*Diagnostic\s*\|\s*Result\s*\|", head):
        return KIND
    if "-----  " in head and re.search(
        r"(?m)^[|+]-{3,}\s+(?:Deployment|Integration|Hardware|Stress|Metadata)\s+-{3,}", head
    ):
        return KIND
    return None


class _Reader:
    def __init__(self) -> None:
        self.tests: list[dict[str, Any]] = []
        self.metadata: dict[str, Any] = {}
        self.section: str | None = None
        self.sections: list[str] = []
        self.width: int | None = None
        # the row being continued: (where its text goes, the chunks read so far)
        self.open: tuple[dict[str, Any] | None, str, list[str]] | None = None

    def _flush(self) -> None:
        if self.open is None:
            return
        target, key, chunks = self.open
        self.open = None
        text = "".join(chunks).strip()
        if target is None:
            self.metadata[key] = text
        elif key == "result":
            target["result_text"] = text
        else:
            target[key].append(text)

    def feed(self, line: str) -> None:
        if match := _SECTION.match(line):
            self._flush()
            self.section = match["name"]
            self.sections.append(self.section)
            return
        if not line.startswith("|"):
            self._flush()  # a rule, the closing line, an elision (`...`), other tools' messages
            return
        parts = line.split("|")
        left, right = parts[1].strip(), parts[2] if len(parts) > 2 else ""
        if len(parts) > 3:
            self.width = len(right) - 3  # ` text ` inside, one space before and two after
        chunk = right[1 : 1 + self.width] if self.width else right.strip()
        if not left:
            if self.open is not None:
                self.open[2].append(chunk)
            return
        self._flush()
        if left in ("Diagnostic",) and right.strip() == "Result":
            return
        if self.section == "Metadata" or left in _METADATA:
            self.open = (None, _METADATA.get(left, left), [chunk])
        elif left in _MESSAGE_ROWS:
            if not self.tests:
                self.tests.append(_new_test(self.section, "-"))
            self.open = (self.tests[-1], _MESSAGE_ROWS[left], [chunk])
        else:
            self.tests.append(_new_test(self.section, left))
            self.open = (self.tests[-1], "result", [chunk])

    def records(self) -> list[DiagTest]:
        self._flush()
        out = []
        for test in self.tests:
            match = _RESULT.match(test["result_text"])
            result = match["result"].lower().replace(" ", "-") if match else None
            down = tuple(
                {"gpu": int(m["gpu"]), "link": int(m["link"])}
                for text in test["warnings"] + test["errors"]
                for m in _NVLINK_DOWN.finditer(text)
            )
            out.append(
                DiagTest(
                    section=test["section"],
                    name=test["name"],
                    result=result,
                    result_text=test["result_text"],
                    scope=(match["scope"] or None) if match else None,
                    info=tuple(test["info"]),
                    warnings=tuple(test["warnings"]),
                    errors=tuple(test["errors"]),
                    nvlink_down=down,
                )
            )
        return out


def _new_test(section: str | None, name: str) -> dict[str, Any]:
    return {"section": section, "name": name, "result_text": "", "info": [], "warnings": [], "errors": []}


def parse(text: str, file: str) -> ParsedFile:
    reader = _Reader()
    for line in text.splitlines():
        reader.feed(line.rstrip("\n"))
    tests = reader.records()
    if not tests and not reader.metadata:
        raise ParseError("no `dcgmi diag` result row found")
    info: dict[str, Any] = dict(reader.metadata)
    if "gpu_device_ids" in info:
        info["gpu_device_ids"] = [token for token in re.split(r"[,\s]+", info["gpu_device_ids"]) if token]
    results = [test.result for test in tests]
    overall = (
        "fail"
        if "fail" in results
        else "warn"
        if "warn" in results
        else "pass"
        if "pass" in results
        else None
    )
    info["overall"] = overall
    info["counts"] = {name: results.count(name) for name in ("pass", "fail", "warn", "skip")}
    # Other tools' lines around a diag (a prolog's `nvidia-smi -pm 1`) name the GPUs by bus id.
    bus_ids = re.findall(r"\bGPU ([0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\b", text)
    if bus_ids:
        info["gpu_bus_ids"] = list(dict.fromkeys(bus_ids))
    level = _LEVEL.search(text)
    if level:
        info["level"], info["level_inferred"] = int(level["level"]), False
    else:
        # What the sections say: Stress tests only at -r 3 and above, Integration/Hardware from -r 2.
        stress = any(test.section == "Stress" for test in tests)
        deeper = any(name in ("Integration", "Hardware") for name in reader.sections)
        info["level"], info["level_inferred"] = (3 if stress else 2 if deeper else 1), True
    return ParsedFile(file=file, kind=KIND, records=tuple(tests), info=info)
