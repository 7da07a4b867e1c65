"""junit.xml is written without ElementTree: read back by a real XML parser, it holds exactly the
elements ElementTree builds from the same test cases, text and attributes unchanged."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from collbench_py.report.machine import junit_xml
from collbench_py.verdicts import Check

# What a parser must read back intact: markup, quotes, ampersands, line ends and tabs in a
# reason (an ssh error quoted whole), an evidence line, and a check name.
HOSTILE = 'ssh: <img src=x onerror="alert(1)"> & `rm` \t tab\r\nnext line'
CASES = [
    ("node1", Check("intra/all_reduce/fleet", "pass", "within the fleet", None, ())),
    ("node2", Check("intra/all_reduce/data", "fail", HOSTILE, "logs/x.log", ("evidence <1>", "a & b"))),
    ("node2", Check("reachable", "fail", "", None, ())),  # a failure with no text at all
    ("node3", Check("gpu/topology", "warn", "NV18 where NV12 <expected>", None, ("line\tone",))),
    ("fleet", Check("history", "note", 'baseline: "nightly"', None, ())),
    ("node4", Check("not-measured", "skip", "x" * 600 + HOSTILE, None, ())),
    ('link"<&>', Check('pairs/all_reduce/a--b"', "fail", "bad link: 40 %", None, ("w1", "w2"))),
]
SUITE = {
    "name": 'collbench run <1> & "2"',
    "tests": "7",
    "failures": "3",
    "errors": "0",
    "skipped": "1",
    "timestamp": "2026-11-29T12:00:00Z",
}


def element_tree(suite: dict[str, str], cases: list[tuple[str, Check]]) -> ET.Element:
    """The elements junit.xml holds, built as ElementTree's users build them."""
    root = ET.Element("testsuites", name="collbench")
    parent = ET.SubElement(root, "testsuite", **suite)
    for classname, check in cases:
        case = ET.SubElement(parent, "testcase", classname=classname, name=check.name)
        text = "\n".join([check.reason, *check.evidence])
        if check.status == "fail":
            ET.SubElement(case, "failure", message=check.reason[:500], type="collbench").text = text
        elif check.status == "skip":
            ET.SubElement(case, "skipped", message=check.reason[:500])
        elif check.status in ("warn", "note"):
            ET.SubElement(case, "system-out").text = f"{check.status.upper()}: {text}"
    ET.indent(root)
    return root


def shape(element: ET.Element) -> tuple:
    return (element.tag, element.attrib, element.text, element.tail, [shape(e) for e in element])


def test_a_parser_reads_back_what_elementtree_would_have_written() -> None:
    written = "".join(junit_xml(SUITE, CASES))
    expected = element_tree(SUITE, CASES)
    by_elementtree = ET.tostring(expected, encoding="unicode")
    parsed = ET.fromstring(written.encode())
    assert shape(parsed) == shape(ET.fromstring(by_elementtree.encode()))
    # The same bytes as ElementTree writes, indentation included.
    assert written == f'<?xml version="1.0" encoding="UTF-8"?>\n{by_elementtree}\n'
    failure = parsed.find("testsuite/testcase[@classname='node2']/failure")
    assert failure is not None and failure.get("message") == HOSTILE  # attributes keep \r, \n and \t
    assert failure.text == HOSTILE.replace("\r\n", "\n") + "\nevidence <1>\na & b"  # a parser folds \r\n
    assert parsed.find("testsuite/testcase[@classname='node2'][@name='reachable']/failure").text is None
    link = parsed.find("testsuite/testcase[@classname='link\"<&>']")
    assert link is not None and link.get("name") == 'pairs/all_reduce/a--b"'


def test_a_suite_without_cases_is_an_empty_element() -> None:
    written = "".join(junit_xml({**SUITE, "tests": "0"}, []))
    expected = element_tree({**SUITE, "tests": "0"}, [])
    assert written == f'<?xml version="1.0" encoding="UTF-8"?>\n{ET.tostring(expected, encoding="unicode")}\n'
    assert ET.fromstring(written.encode()).find("testsuite").get("tests") == "0"
