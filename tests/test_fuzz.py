"""Property tests: real corpus logs, mutated the way real logs get mangled, never break the parsers.

Every mutated log must either parse or raise ParseError, and what a parser returns must come
from the text: each row's size is a token of the text and each of its numbers is a number of
the text (a parser may drop rows of a mangled log, never invent them). Noise lines and
launcher prefixes, which real logs carry anywhere, must not change the rows at all.

Runs are reproducible (derandomized, no example database): about 10,500 mutated logs in all.
"""

from __future__ import annotations

import math
import random
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from collbench_py.models import ParsedFile, ParseError
from collbench_py.parsers import detect, parse_text

CORPUS = sorted((Path(__file__).parent / "data" / "corpus").glob("**/*.txt"))
TEXTS = [path.read_text(encoding="utf-8", errors="replace") for path in CORPUS]

# Noise as it appears in real logs, taken from the corpus itself.
_NOISE_PATTERN = re.compile(
    r"NCCL (INFO|WARN)|UCX +WARN|help message|WARNING|xpmem|Permanently added|zone_info_source|^-{20,}$"
)
NOISE_LINES = sorted({line for text in TEXTS for line in text.splitlines() if _NOISE_PATTERN.search(line)})
NCCL_INFO_LINES = [line for line in NOISE_LINES if "NCCL INFO" in line]

PREFIXES = st.one_of(
    st.builds("[1,{}]<stdout>:".format, st.integers(0, 15)),
    st.builds(lambda rank: f"{rank:2d}: ", st.integers(0, 15)),
    st.builds("(head, rank=0, pid={}) ".format, st.integers(1, 99999)),
    st.builds("[{}:{}]:".format, st.sampled_from(["node1", "gpu-h100-07", "10.0.0.2"]), st.integers(0, 7)),
)
FRACTION = st.floats(0, 1, allow_nan=False)

MUTATION = st.one_of(
    st.tuples(st.just("truncate"), FRACTION),
    st.tuples(st.just("drop"), FRACTION, st.integers(1, 5)),
    st.tuples(st.just("duplicate"), FRACTION, st.integers(1, 4)),
    st.tuples(st.just("shuffle"), FRACTION, st.integers(2, 12)),
    st.tuples(st.just("noise"), FRACTION, st.sampled_from(NOISE_LINES or ["NCCL INFO x"])),
    st.tuples(st.just("split"), FRACTION, FRACTION, st.sampled_from(NOISE_LINES or ["NCCL INFO x"])),
    st.tuples(st.just("prefix"), FRACTION, FRACTION, PREFIXES),
    st.tuples(st.just("bytes"), FRACTION, st.binary(min_size=1, max_size=64)),
)


def _at(fraction: float, length: int) -> int:
    return min(int(fraction * length), max(length - 1, 0))


def mutate(text: str, mutation: tuple) -> str:
    """Apply one mutation; positions are fractions of the text so they fit any sample."""
    name, *arg = mutation
    lines = text.split("\n")
    if name == "truncate":
        return text[: int(arg[0] * len(text))]
    if name == "bytes":
        at = int(arg[0] * len(text))
        return text[:at] + arg[1].decode("utf-8", errors="replace") + text[at:]
    i = _at(arg[0], len(lines))
    if name == "drop":
        del lines[i : i + arg[1]]
    elif name == "duplicate":
        lines[i:i] = [lines[i]] * arg[1]
    elif name == "shuffle":
        # A deterministic permutation of a window: reversed, then rotated by one.
        window = lines[i : i + arg[1]][::-1]
        lines[i : i + arg[1]] = window[1:] + window[:1]
    elif name == "noise":
        lines.insert(i, arg[1])
    elif name == "split":
        # A line cut in two by another process's output, as interleaved logs show.
        at = int(arg[1] * len(lines[i]))
        lines[i : i + 1] = [lines[i][:at], arg[2], lines[i][at:]]
    elif name == "prefix":
        # A launcher prefix on a run of lines (stacked on any prefix already there).
        end = i + 1 + _at(arg[1], len(lines) - i)
        lines[i:end] = [arg[2] + line for line in lines[i:end]]
    return "\n".join(lines)


_INTEGER = re.compile(r"(?<![\d.])\d+(?![\d.])")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_SIZE_LABEL = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT])(i?)B")
_POWER = {"K": 1, "M": 2, "G": 3, "T": 4}


def size_tokens(text: str) -> set[int]:
    """Every integer of the text, plus what size labels like `32KiB` or `1GB` stand for."""
    sizes = {int(token) for token in _INTEGER.findall(text)}
    for number, unit, binary in _SIZE_LABEL.findall(text):
        for base in (1024, 1000) if not binary else (1024,):
            sizes.add(int(float(number) * base ** _POWER[unit]))
    return sizes


def number_tokens(text: str) -> set[float]:
    numbers = set()
    for token in _NUMBER.findall(text):
        try:
            numbers.add(float(token))
        except ValueError:
            continue
    return numbers


def _appears(value: float, numbers: set[float]) -> bool:
    return value in numbers or any(math.isclose(value, n, rel_tol=1e-9) for n in numbers)


_TAIL = re.compile(r"\d[\d.]*$")
_HEAD = re.compile(r"[\d.]+(?:[eE][-+]?\d+)?")


def junction_tokens(text: str, window: int = 8) -> set[str]:
    """Numbers a parser may rebuild from a row cut in two by interleaved output.

    A line that ends mid-number continues on a later line (after noise lines and a launcher
    prefix): the tail of the one joined to one of the first numbers of the other.
    """
    lines = text.split("\n")
    joined = set()
    for i, line in enumerate(lines):
        tail = _TAIL.search(line)
        if tail:
            for later in lines[i + 1 : i + 1 + window]:
                joined.update(tail.group() + head for head in _HEAD.findall(later)[:3])
    return joined


def check_rows_come_from_text(parsed: ParsedFile, text: str) -> int:
    """Assert every row's size and numbers are tokens of `text`; return how many rows were checked."""
    junctions = junction_tokens(text)
    sizes = size_tokens(text) | {int(token) for token in junctions if token.isdigit()}
    numbers = number_tokens(text) | number_tokens(" ".join(junctions))
    checked = 0
    for run in parsed.runs:
        for row in run.rows:
            assert row.size in sizes, f"row size {row.size} is not in the text"
            values = {"count": row.count, "root": row.root}
            for half_name, half in (("oop", row.oop), ("ip", row.ip)):
                if half is not None:
                    for field in ("time_us", "algbw", "busbw", "wrong", "error"):
                        values[f"{half_name}.{field}"] = getattr(half, field)
            for name, value in values.items():
                if value is not None and math.isfinite(value):
                    assert _appears(value, numbers), f"row {row.size}: {name}={value} is not in the text"
            checked += 1
    return checked


def parse_or_parse_error(text: str) -> ParsedFile | None:
    """Detect and parse; only ParseError may come out (any other exception fails the test)."""
    detect(text)
    try:
        return parse_text(text, file="fuzz.log")
    except ParseError:
        return None


def _rows(parsed: ParsedFile | None) -> list:
    return [] if parsed is None else [(run.collective, run.rows) for run in parsed.runs]


FUZZ = settings(deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
SAMPLE = st.sampled_from(range(len(TEXTS)))
NCCL_TEXT_SAMPLES = [
    i for i, text in enumerate(TEXTS) if detect(text) in ("nccl-tests", "rccl-tests") and "\n#" in text
]


@settings(FUZZ, max_examples=5000)
@given(sample=SAMPLE, mutations=st.lists(MUTATION, min_size=1, max_size=4))
def test_mutated_logs_parse_cleanly_and_invent_nothing(sample: int, mutations: list[tuple]) -> None:
    text = TEXTS[sample]
    for mutation in mutations:
        text = mutate(text, mutation)
    parsed = parse_or_parse_error(text)
    rows = check_rows_come_from_text(parsed, text) if parsed is not None else 0
    # `pytest --hypothesis-show-statistics` shows how often the row checks had rows to check.
    event("rejected" if parsed is None else ("parsed, rows checked" if rows else "parsed, no rows"))


@settings(FUZZ, max_examples=2000)
@given(sample=SAMPLE, cut=FRACTION)
def test_truncated_anywhere(sample: int, cut: float) -> None:
    # The commonest mangling of all: a run killed or a copy cut short, anywhere, mid-line included.
    text = mutate(TEXTS[sample], ("truncate", cut))
    parsed = parse_or_parse_error(text)
    if parsed is not None:
        check_rows_come_from_text(parsed, text)


@settings(FUZZ, max_examples=1000)
@given(sample=st.sampled_from(NCCL_TEXT_SAMPLES or [0]), prefix=PREFIXES)
def test_launcher_prefix_on_every_line_keeps_the_rows(sample: int, prefix: str) -> None:
    original = TEXTS[sample]
    prefixed = "\n".join(prefix + line for line in original.split("\n"))
    assert _rows(parse_or_parse_error(prefixed)) == _rows(parse_or_parse_error(original))


@settings(FUZZ, max_examples=1000)
@given(
    sample=st.sampled_from(NCCL_TEXT_SAMPLES or [0]),
    inserts=st.lists(st.tuples(FRACTION, st.sampled_from(NCCL_INFO_LINES or ["x"])), min_size=1, max_size=6),
)
def test_nccl_info_lines_anywhere_keep_the_rows(sample: int, inserts: list[tuple[float, str]]) -> None:
    original = TEXTS[sample]
    text = original
    for where, line in inserts:
        text = mutate(text, ("noise", where, line))
    assert _rows(parse_or_parse_error(text)) == _rows(parse_or_parse_error(original))


@settings(FUZZ, max_examples=1500)
@given(data=st.binary(max_size=4096))
def test_random_bytes_parse_or_fail_cleanly(data: bytes) -> None:
    parse_or_parse_error(data.decode("utf-8", errors="replace"))


def test_the_corpus_gives_rows_to_check() -> None:
    # The properties above would hold vacuously if nothing parsed: make sure most samples give rows.
    checked = [
        check_rows_come_from_text(parsed, text) for text in TEXTS if (parsed := parse_or_parse_error(text))
    ]
    assert sum(1 for n in checked if n) >= 20, "fewer than 20 corpus samples give rows"
    assert len(NCCL_TEXT_SAMPLES) >= 15
    assert len(NCCL_INFO_LINES) >= 20 and len(NOISE_LINES) > len(NCCL_INFO_LINES)


class _TooSlow(Exception):
    pass


@contextmanager
def cpu_time_limit(seconds: float) -> Iterator[None]:
    """Fail (instead of hanging the test run) when a parser goes super-linear on a big input.

    CPU time, not wall time, so a busy machine does not make it fail.
    """

    def expire(signum, frame):
        raise _TooSlow(f"used more than {seconds:g} s of CPU")

    previous = signal.signal(signal.SIGPROF, expire)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def _big_inputs() -> Iterator[tuple[str, str]]:
    five_mb = 5 * 1024 * 1024
    header = next(text for text in TEXTS if "# Collective test starting" in text and "#  Rank" in text)
    header = header[: header.index("(B)")]
    row = "     1048576        262144     float     sum      -1   339.61    3.09    3.09       0"
    yield "random bytes", random.Random(7).randbytes(five_mb).decode("utf-8", errors="replace")
    yield "one line of digits", "1048576 " * (five_mb // 8)
    yield "one line of hashes", "#" * five_mb
    yield "header then a 5 MB line", header + "(B)\n" + ("   1048576" * (five_mb // 10))
    yield "header then a 5 MB row", header + "(B)\n" + row + " 0.5" * (five_mb // 4)
    yield "a row of 5 MB of spaces", header + "(B)\n" + row.replace(" ", " " * 60000)
    yield "100000 rows", header + "(B)\n" + "\n".join([row] * 100_000)
    yield "all samples 20 times", "\n".join(TEXTS * 20)


def test_huge_inputs_parse_or_fail_cleanly_in_bounded_time() -> None:
    for name, text in _big_inputs():
        with cpu_time_limit(30):
            try:
                parsed = parse_text(text, file=name)
            except ParseError:
                continue
            except _TooSlow as slow:
                raise AssertionError(f"{name}: {slow}") from None
        assert parsed.kind, name
