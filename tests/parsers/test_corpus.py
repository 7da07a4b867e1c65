"""Every real sample under tests/data/corpus parses with the values its meta file lists.

Samples are found by glob: a new `<name>.txt` under tests/data/corpus (a verbatim copy
of the shared corpus) or any file under tests/data/extra/<folder>/ (real outputs captured
or found elsewhere, each with a `.meta.md` naming its source) becomes a test, and fails
until its `tests/data/expected/<folder>/<name>.json` is written from its meta file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collbench_py.parsers import detect, parse_text
from tests.expectations import mismatches

DATA = Path(__file__).parents[1] / "data"
SAMPLES = sorted(
    [
        *(DATA / "corpus").glob("*/*.txt"),
        *(p for p in (DATA / "extra").glob("*/*") if not p.name.endswith(".meta.md")),
    ]
)


def _expected_file(sample: Path) -> Path:
    return DATA / "expected" / sample.parent.name / f"{sample.stem}.json"


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


@pytest.mark.parametrize("sample", SAMPLES, ids=_id)
def test_sample_matches_its_meta_values(sample: Path) -> None:
    expected_file = _expected_file(sample)
    assert expected_file.exists(), (
        f"write {expected_file.relative_to(DATA.parent.parent)} from {sample.stem}.meta.md"
    )
    expected = json.loads(expected_file.read_text())
    text = sample.read_text(encoding="utf-8", errors="replace")
    parsed = parse_text(text, file=sample.name)
    problems = mismatches(expected, parsed.to_dict())
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("sample", SAMPLES, ids=_id)
def test_sample_kind_is_detected(sample: Path) -> None:
    expected_file = _expected_file(sample)
    if not expected_file.exists():
        pytest.fail(f"no expectation for {sample.name}")
    kind = json.loads(expected_file.read_text())["kind"]
    assert detect(sample.read_text(encoding="utf-8", errors="replace")) == kind


def test_every_sample_keeps_its_provenance() -> None:
    for sample in SAMPLES:
        meta = sample.parent / f"{sample.stem}.meta.md"
        assert meta.exists(), f"{sample.name} has no meta file"
        assert "Source" in meta.read_text(), f"{meta.name} names no source"
