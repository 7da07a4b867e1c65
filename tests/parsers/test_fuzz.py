"""Property tests: real corpus logs, mutated the way real logs get mangled, never break the parsers.

Every mutated log must either parse or raise ParseError, and what a parser returns must come
from the text: each row's size is a token of the text and each of its numbers is a number of
the text (a parser may drop rows of a mangled log, never invent them). Noise lines and
launcher prefixes, which real logs carry anywhere, must not change the rows at all.

nccl-tests `-J` JSON and rccl-tests JSON/CSV files are mutated too (swapped and dropped values), with a
stronger oracle: every returned row is self-consistent (algbw = size / time, busbw = algbw x factor).

Runs are reproducible (derandomized, no example database): about 14,300 mutated inputs in all.
"""

from __future__ import annotations

import json
import math
import random
import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from collbench_py.parsers import detect, nccl_json, parse_text
from collbench_py.parsers.models import ParsedFile, ParseError
from tests.parsers.test_parse_nccl_json import (
    RCCL_CSV,
    RCCL_JSON_LIST,
    V2_17_CORRUPT,
    V2_18,
    read_text_log,
    write_nccl_tests_json,
)

CORPUS = sorted((Path(__file__).parents[1] / "data" / "corpus").glob("**/*.txt"))
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


# ---- nccl-tests -J JSON and rccl-tests -Z json/csv -------------------------------------------------------
#
# The structured outputs are mutated as files get damaged (cut short, bytes replaced) and as a broken
# writer or a hand edit would damage them: two values of a result swapped, a key dropped, a value
# replaced. Whatever a parser returns must then be self-consistent: positive integer sizes, finite
# values, algbw = size / time and busbw = algbw x the collective's factor. A row that is not must be
# dropped (and the run flagged), never returned.

JSON_SAMPLES = [
    write_nccl_tests_json(read_text_log(V2_18), version=2),
    write_nccl_tests_json(read_text_log(V2_17_CORRUPT), version=1, misspelled=True),
]
RCCL_JSONL = (Path(__file__).parents[1] / "data" / "corpus" / "rccl-tests").glob("*jsonl*.txt")
RCCL_SAMPLES = [path.read_text(encoding="utf-8") for path in RCCL_JSONL] + [RCCL_CSV, RCCL_JSON_LIST]
_HALF_KEYS = ("time", "alg_bw", "bus_bw", "nwrong")
_CELL = st.one_of(
    st.just(None), st.just("nan"), st.just(-1.0), st.just(0), st.just("garbage"), st.floats(-1e12, 1e12)
)
JSON_MUTATION = st.one_of(
    st.tuples(
        st.just("swap"), FRACTION, st.sampled_from(["out_of_place", "in_place"]), st.permutations(_HALF_KEYS)
    ),
    st.tuples(st.just("swap-row"), FRACTION, st.permutations(("size", "count", "root"))),
    st.tuples(
        st.just("drop-key"),
        FRACTION,
        st.sampled_from(["out_of_place", "in_place"]),
        st.sampled_from(_HALF_KEYS),
    ),
    st.tuples(
        st.just("value"),
        FRACTION,
        st.sampled_from(["out_of_place", "in_place"]),
        st.sampled_from(_HALF_KEYS),
        _CELL,
    ),
    st.tuples(st.just("size"), FRACTION, _CELL),
)


def mutate_nccl_json(text: str, mutation: tuple) -> str:
    document = json.loads(text)
    results = document["results"]
    name, where, *arg = mutation
    result = results[_at(where, len(results))]
    if name == "swap":
        half, order = result[arg[0]], arg[1]
        values = [half.get(key) for key in _HALF_KEYS]
        result[arg[0]] = {
            **half,
            **{key: values[_HALF_KEYS.index(src)] for key, src in zip(_HALF_KEYS, order, strict=True)},
        }
    elif name == "swap-row":
        values = [result.get(key) for key in ("size", "count", "root")]
        result.update(zip(arg[0], values, strict=True))
    elif name == "drop-key":
        result[arg[0]].pop(arg[1], None)
    elif name == "value":
        result[arg[0]][arg[1]] = arg[2]
    elif name == "size":
        result["size"] = arg[0]
    return json.dumps(document)


def mutate_rccl(text: str, mutation: tuple) -> str:
    """Swap or drop cells of one record (a CSV line's fields, a JSON record's values)."""
    lines = text.split("\n")
    name, where, first, second = mutation
    candidates = [
        i for i, line in enumerate(lines) if line.strip() and line.strip() not in "[]" and "," in line
    ]
    i = candidates[_at(where, len(candidates))] if candidates else 0
    cells = lines[i].split(",")
    a, b = _at(first, len(cells)), _at(second, len(cells))
    if name == "swap":
        if lines[i].lstrip().startswith("{"):
            # Swap the values of two keys, keeping the keys in place.
            pairs = [cell.split(":", 1) for cell in cells]
            if len(pairs[a]) == 2 and len(pairs[b]) == 2 and "{" not in pairs[a][1] + pairs[b][1]:
                pairs[a][1], pairs[b][1] = pairs[b][1].rstrip("}"), pairs[a][1].rstrip("}")
                if cells[-1].endswith("}") and not pairs[-1][1].endswith("}"):
                    pairs[-1][1] += "}"
            cells = [":".join(pair) for pair in pairs]
        else:
            cells[a], cells[b] = cells[b], cells[a]
    else:
        del cells[a]
    lines[i] = ",".join(cells)
    return "\n".join(lines)


RCCL_MUTATION = st.tuples(st.sampled_from(["swap", "drop"]), FRACTION, FRACTION, FRACTION)


def check_records_are_consistent(parsed: ParsedFile) -> int:
    """The oracle: every returned row is self-consistent; returns how many rows were checked.

    busbw must be algbw x the collective's factor for the run's rank count, or, where the rank count
    itself was damaged, one factor shared by every row of the run."""
    checked = 0
    for run in parsed.runs:
        expected = nccl_json.busbw_factor(run.collective, run.nranks)
        halves = [(row.size, h) for row in run.rows for h in (row.oop, row.ip) if h is not None]
        for size, half in halves:
            assert isinstance(size, int) and size > 0, f"size {size!r}"
            values = [half.time_us, half.algbw, half.busbw, half.wrong]
            assert all(v is None or math.isfinite(v) for v in values), half
            assert all(v is None or v >= 0 for v in values), half
            if half.time_us and half.algbw is not None:
                assert _near(half.algbw, size / half.time_us / 1e3), (size, half)
        pairs = [(h.algbw, h.busbw) for _, h in halves if h.algbw is not None and h.busbw is not None]
        if expected is not None and not all(_near(busbw, algbw * expected) for algbw, busbw in pairs):
            ratios = sorted(busbw / algbw for algbw, busbw in pairs if algbw >= 1)
            shared = ratios[len(ratios) // 2] if ratios else expected
            assert all(_near(busbw, algbw * shared) for algbw, busbw in pairs), (run.collective, pairs)
        checked += len(run.rows)
    return checked


def _near(value: float, expected: float) -> bool:
    return math.isclose(value, expected, rel_tol=0.02, abs_tol=0.011)


@settings(FUZZ, max_examples=1500)
@given(
    sample=st.sampled_from(range(len(JSON_SAMPLES))),
    mutations=st.lists(JSON_MUTATION, min_size=1, max_size=3),
)
def test_mutated_nccl_tests_json_returns_only_consistent_rows(sample: int, mutations: list[tuple]) -> None:
    text = JSON_SAMPLES[sample]
    for mutation in mutations:
        text = mutate_nccl_json(text, mutation)
    parsed = parse_or_parse_error(text)
    assert parsed is not None  # still a valid nccl-tests JSON file: read, never refused
    rows = check_records_are_consistent(parsed)
    event("rows checked" if rows else "no rows")


@settings(FUZZ, max_examples=1500)
@given(
    sample=st.sampled_from(range(len(RCCL_SAMPLES))),
    mutations=st.lists(RCCL_MUTATION, min_size=1, max_size=3),
)
def test_mutated_rccl_json_and_csv_return_only_consistent_rows(sample: int, mutations: list[tuple]) -> None:
    text = RCCL_SAMPLES[sample]
    for mutation in mutations:
        text = mutate_rccl(text, mutation)
    parsed = parse_or_parse_error(text)
    if parsed is not None:
        check_records_are_consistent(parsed)


@settings(FUZZ, max_examples=800)
@given(
    sample=st.sampled_from(range(len(JSON_SAMPLES + RCCL_SAMPLES))),
    mutations=st.lists(MUTATION, min_size=1, max_size=3),
)
def test_damaged_json_and_csv_files_parse_cleanly(sample: int, mutations: list[tuple]) -> None:
    """Cut short, bytes replaced, lines dropped or repeated: parse or ParseError, rows still consistent."""
    text = (JSON_SAMPLES + RCCL_SAMPLES)[sample]
    for mutation in mutations:
        text = mutate(text, mutation)
    parsed = parse_or_parse_error(text)
    if parsed is not None:
        check_records_are_consistent(parsed)


def test_a_row_with_swapped_columns_is_dropped_and_the_run_flagged() -> None:
    document = json.loads(JSON_SAMPLES[0])
    half = document["results"][5]["out_of_place"]
    half["time"], half["bus_bw"] = half["bus_bw"], half["time"]
    (run,) = parse_text(json.dumps(document), "all_reduce.json").runs
    assert 33554432 not in [row.size for row in run.rows]
    assert len(run.rows) == len(document["results"]) - 1
    assert run.status != "ok"
    assert any("1 result row(s) dropped" in w for w in run.warnings)
    csv = RCCL_CSV.replace(
        '0,"AlltoAll",8,2048,"float","sum",1,30.900000,0.066000,0.057750',
        '0,"AlltoAll",8,2048,"float","sum",1,0.066000,30.900000,0.057750',
    )
    (rccl,) = parse_text(csv, "out.csv").runs
    assert [row.ip for row in rccl.rows if row.size == 2048] == []
