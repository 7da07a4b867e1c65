"""Placeholder: being written."""

from __future__ import annotations

from collbench_py.models import Kind, ParsedFile, ParseError


def sniff(text: str) -> Kind | None:
    return None


def parse(text: str, file: str) -> ParsedFile:
    raise ParseError("not implemented yet")
