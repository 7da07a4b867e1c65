"""nccl-tests / rccl-tests text output (and look-alikes: mccl-tests, mscclpp-test) into Runs.

One pass over the lines. Each line loses its launcher prefixes, then is classified by its first
character and a few substring tests before any pattern runs: the same parser reads every log of a
nightly fleet run, most of it `NCCL INFO` noise. Columns are read by their header names
(`_nccl_table`); what the rows imply but the log does not say is inferred in `_nccl_infer`.
Where a log is ambiguous, this parser decides:

- Runs. A `# nccl-tests version` / `# Collective test starting` line, a `# nThread` header, a
  column header, a device line, an `NCCL version` line or a row opens a new run when the current
  one has finished (a summary line or `Collective test concluded`); headers also when it already
  has rows or its column header. A failure line belongs to the run in progress, or to the last one
  (the ` .. host pid N: Test failure` trace after a failed validation). `NCCL INFO` facts seen
  after a finished run go to the next run, or to the last one if none follows.
- Several processes of a non-MPI build writing into one log (headers or `Rank 0` lines repeat)
  make one run: their repeated headers, rows and summaries stay in it, and the run gets a warning
  that the binary was probably built without MPI=1 (also when sizes repeat with nranks 1).
- Collective: `Collective test starting/concluded`, a `<name>_perf` command or wrapper line before
  the run, or a failure location (`all_reduce.cu:90`); else inferred from the rows, with a warning.
  nranks: the device lines, else `nRanks N` from `NCCL INFO`, else the old rccl header's
  nRanks x nGpus x nThread, else inferred from the rows, with a warning.
- Errors: `Test NCCL failure`, `Test CUDA failure`, `Test timeout` are primary errors; the trace
  lines that follow (` .. host pid N: Test failure file:line`) are folded into the message of the
  oldest untraced primary error of their host (`... [pid N; trace: a, b]`); a trace with none
  becomes a `Test failure` error of its own, one per host and pid. Launcher reports (mpirun,
  prterun, srun) are `mpi-abort` errors; `Avg bus bandwidth : X FAILED` (NCCL_TESTS_MIN_BW) is a
  `bandwidth check` error. A failure before any header still yields a Run.
- `NCCL WARN` lines are `NCCL WARN` errors only in a run that failed or stopped early, where they
  explain why; in a run that passed they are harmless (a fallback, a missing plugin) and become
  run warnings instead.
- status: `failed` on a failure error, out-of-bounds values > 0, or a nonzero `#wrong`;
  `incomplete` when a header or row was seen but no summary line (a hang, a kill, a truncated
  copy); else `ok`.
- Transports come from `... via X` lines (P2P/IPC, P2P/direct, SHM, NET/IB, NET/Socket, NET/<plugin>,
  CollNet) and NVLS from `NVLS comm` / `Connected NVLS` / nonzero `nvls channels`. `Using network
  IB` alone says which network NCCL may use, not that it did: it is not a transport. A NET channel
  line (`via NET/IB/0/GDRDMA`, NET/Socket aside) also says, per host (the INFO line's own prefix)
  and NET device, whether it ran with GPUDirect RDMA: `net_devices`, and `gdr` over all of them.
- params keys are the current nccl-tests spellings (`nThread`, `nGpus`, `minBytes`, `maxBytes`,
  `step`, `warmup iters`, `iters`, `agg iters`, `validation`, `graph`, `unalign`) whatever the
  version printed (`nThreads:`, `warmupIters:`); `step_bytes` for `step: N(bytes)`; old rccl
  `nRanks`; `maxBytes_reduced` from `# Reducing maxBytes`; rccl `hip_version` / `rocm_version`;
  `torch` and `backend` from the first line of collbench_torch_bench.py (tool `collbench-torch-bench`).
"""

from __future__ import annotations

import re
from collections import deque

from collbench_py.parsers import _nccl_lines as lines
from collbench_py.parsers._nccl_records import new_record
from collbench_py.parsers._nccl_runs import (
    FAILURE_KINDS,
    ErrorDraft,
    Facts,
    RunBuilder,
    build,
    flag_separate_rank0_runs,
)
from collbench_py.parsers._nccl_table import (
    DEFAULT_LAYOUT,
    FRAGMENT,
    group_order,
    is_continuation,
    layout_from_header,
    parse_row,
    standard_row,
)
from collbench_py.parsers.models import Kind, ParsedFile, ParseError, Row

_RCCL_MARKERS = ("rccl-tests", "RCCL version", "HIP version", "ROCm version", "librccl", "+hip")
_STRONG_MARKERS = (
    "nGpus", "# Using devices", "Collective test starting", "nccl-tests version", "rccl-tests",
    "Out of bounds values", "Avg bus bandwidth", "Test NCCL failure", "Test CUDA failure",
    ": Test timeout", ": Test failure",
)  # fmt: skip
_COLUMN_HEADER = re.compile(r"\bsize\s+count\s+(?:type|c?p?u?time)\b")
_DATA_ROW = re.compile(
    r"^\s*\d+\s+\d+\s+(?:float|half|double|bfloat16|u?int(?:8|32|64)?|f8e\dm\d|char)\s+"
    r"(?:[a-z]+\s+)?-?\d+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s",
    re.MULTILINE,
)
_GLUED = re.compile(r"^(.*?(?:\d|N/A))([A-Za-z][\w.-]*:\d+:\d+ \[\d+\] .*)$")
# `<row start> host: Test CUDA failure ...`: a rank failed while rank 0 was printing a row
_GLUED_FAILURE = re.compile(r"^(\s*\d.*?\S)\s+(\S+: Test (?:NCCL failure|CUDA failure|timeout|failure)\b.*)$")
_DIGITS = frozenset("0123456789")
# First lines that name the benchmark and its version: nccl-tests, rccl-tests, this project's torch one.
_TOOL_HEADERS = ("nccl-tests version", "rccl-tests version", "collbench-torch-bench version")


def sniff(text: str) -> Kind | None:
    """`nccl-tests` or `rccl-tests` for a log of that family (or a look-alike), else None."""
    last = _last_sniff
    if last[0] is text:  # detection, then parsing, ask again about the same text
        return last[1]
    kind = _sniff(text)
    globals()["_last_sniff"] = (text, kind)
    return kind


_last_sniff: tuple[str | None, Kind | None] = (None, None)


def _sniff(text: str) -> Kind | None:
    if text[:256].lstrip().startswith(("{", "[{")):
        return None  # JSON: the JSON parser's
    if not any(marker in text for marker in _STRONG_MARKERS) and not (
        _COLUMN_HEADER.search(text) or _DATA_ROW.search(text)
    ):
        return None
    return "rccl-tests" if _has_rccl_marker(text) else "nccl-tests"


def _has_rccl_marker(text: str) -> bool:
    """Whether one of _RCCL_MARKERS is in `text`, in three scans of it rather than six.

    Every log of a fleet is scanned for them, and an nccl-tests log has none: `rccl` stands for
    two markers, and the three that end in ` version` are looked for where ` version` is.
    """
    if "rccl" in text and ("rccl-tests" in text or "librccl" in text):
        return True
    if "+hip" in text:
        return True
    at = text.find(" version")
    while at >= 0:
        if text.endswith(("RCCL", "HIP", "ROCm"), 0, at):
            return True
        at = text.find(" version", at + 1)
    return False


def parse(text: str, file: str) -> ParsedFile:
    kind = sniff(text)
    parser = _Parser()
    builders = parser.parse(text) if kind else []
    if kind is None or not builders:
        raise ParseError("not an nccl-tests or rccl-tests log: no header, result table or summary found")
    tool = parser.tool or kind
    if any("MetaX" in (d.name or "") for b in builders for d in b.devices):
        tool = "mccl-tests"
    flag_separate_rank0_runs(builders)
    runs = tuple(build(b, tool) for b in builders)
    return new_record(
        ParsedFile,
        file=file,
        kind=kind,
        runs=runs,
        topology=None,
        warnings=(),
        matrices=(),
        info={},
        records=(),
    )


class _Parser:
    def __init__(self) -> None:
        self.runs: list[RunBuilder] = []
        self.cur: RunBuilder | None = None
        self.facts = Facts()
        self.pending_collective: str | None = None
        self.group: tuple[str, ...] = ()
        self.tool: str | None = None  # a look-alike named by its own lines (mscclpp-test, mccl-tests)

    # -- runs ------------------------------------------------------------------------------------
    def new_run(self) -> RunBuilder:
        self.flush_fragment()
        layout = self.cur.layout if self.cur is not None else None  # headerless rows read alike
        run = RunBuilder(self.facts, self.pending_collective, layout)
        self.facts, self.pending_collective = Facts(), None
        self.runs.append(run)
        self.cur = run
        return run

    def open_run(self) -> RunBuilder:
        """The run in progress, or a new one when the last has finished."""
        cur = self.cur
        return cur if cur is not None and not cur.closed else self.new_run()

    def last_run(self) -> RunBuilder:
        """The run in progress or the last one: a trace after the summary belongs to it."""
        return self.cur if self.cur is not None else self.new_run()

    def starts_run(self, cur: RunBuilder | None) -> bool:
        """Whether a header line starts a new run (rather than repeating the current one's)."""
        if cur is None or cur.closed:
            return True
        return bool(cur.rows or cur.colheader) and not cur.several_processes()

    # -- the loop --------------------------------------------------------------------------------
    def parse(self, text: str) -> list[RunBuilder]:
        prefix_start, prefix = lines.PREFIX_START, lines.PREFIX
        for line in text.splitlines():
            if line and line[0] in prefix_start:
                # Most lines are rows, and a row starts with a blank: the common row of a run in
                # progress is read here. (A row behind a launcher label, ` 0: `, would have the
                # label as its first token, and no number there.)
                if line[0] == " ":
                    cur = self.cur
                    if (
                        cur is not None
                        and not cur.closed
                        and cur.fragment is None
                        and (cur.layout is None or cur.layout.standard)
                    ):
                        tokens = line.split()
                        if len(tokens) == 13 and tokens[0][0] in _DIGITS:
                            row = standard_row(tokens)
                            if row is not None:
                                cur.rows.append(row)
                                continue
                # Launcher prefixes start with `[`, `(` or a `N: ` label: the pattern runs only then.
                if line[0] in "[(" or ": " in line[:8]:
                    m = prefix.match(line)
                    if m:
                        line = line[m.end() :]
            s = line.lstrip()
            if not s:
                continue
            first = s[0]
            if first == "#":
                self.comment(line, s[1:].lstrip())
            elif first in _DIGITS or (self.cur is not None and self.cur.fragment is not None):
                cur = self.cur
                if (  # the common row of a run in progress, read inline
                    cur is not None
                    and not cur.closed
                    and cur.fragment is None
                    and (cur.layout is None or cur.layout.standard)
                ):
                    tokens = s.split()
                    if len(tokens) == 13:
                        row = standard_row(tokens)
                        if row is not None:
                            cur.rows.append(row)
                            continue
                if not self.row(line, s):
                    self.other(line, s)
            else:
                self.other(line, s)
        self.flush_fragment()
        if self.runs and (self.facts.transports or self.facts.settings):
            self.runs[-1].transports |= self.facts.transports
            for host, devices in self.facts.net_devices.items():
                for device, gdr in devices.items():
                    self.runs[-1].add_net_channel(host, device, gdr)
            self.runs[-1].settings = {**self.facts.settings, **self.runs[-1].settings}
        return self.runs

    def comment(self, line: str, c: str) -> None:
        if not c:
            return
        first = c[0]
        if first == "n" and c.startswith("nThread"):
            self.params(c)
        elif first == "R" and c.startswith("Rank"):
            self.device(c)
        elif first == "s" and c.startswith("size"):
            self.column_header(line)
        elif first == "(":
            return
        elif "out-of-place" in c or "in-place" in c:
            self.group = group_order(c)
        elif first == "O" and c.startswith("Out of bounds"):
            self.out_of_bounds(c)
        elif first == "A" and c.startswith("Avg bus bandwidth"):
            self.avg(c)
        elif first == "C" and c.startswith("Collective test"):
            self.collective_line(c)
        elif c.startswith(_TOOL_HEADERS):
            self.tool_header(c)
        elif c.startswith("Reducing maxBytes"):
            parts = c.split()
            if len(parts) > 3 and parts[3].isdigit():
                self.open_run().params["maxBytes_reduced"] = int(parts[3])
        elif c.startswith("error:") and self.cur is not None:
            self.cur.warnings.append(c)
        elif "MSCCL++" in c:
            self.tool = "mscclpp-test"

    def other(self, line: str, s: str) -> None:
        if "NCCL INFO" in s:
            self.info(s)
        elif "NCCL WARN" in s:
            warn = lines.parse_warn(s)
            if warn:
                self.last_run().errors.append(ErrorDraft(warn.kind, warn.host, warn.message))
        elif "Test " in s and ("failure" in s or "timeout" in s):
            self.failure(s)
        elif s.startswith("nThread"):
            self.params(s)
        elif s.startswith("size") and " count " in s:
            self.column_header(line)
        elif s.startswith("Out of bounds"):
            self.out_of_bounds(s)
        elif s.startswith("Avg bus bandwidth"):
            self.avg(s)
        elif s.startswith("Rank "):
            self.device(s)
        elif s.startswith("Collective test"):
            self.collective_line(s)
        elif "ersion" in s and self.version(s):
            return
        elif "_perf" in s:
            self.command(s)
        else:
            abort = lines.mpi_abort(s)
            if abort:
                self.last_run().errors.append(ErrorDraft(abort.kind, abort.host, abort.message))

    # -- header ----------------------------------------------------------------------------------
    def params(self, text: str) -> None:
        cur = self.cur
        if self.starts_run(cur):
            cur = self.new_run()
        elif cur is not None and cur.params_seen:
            cur.duplicate_headers += 1
            return
        assert cur is not None
        cur.params_seen = True
        cur.params.update(lines.parse_params(text))

    def device(self, text: str) -> None:
        device = lines.parse_device(text)
        if device is None:
            return
        cur = self.cur
        if cur is None or (cur.closed and not cur.several_processes()):
            cur = self.new_run()
        cur.devices.append(device)

    def column_header(self, line: str) -> None:
        layout = layout_from_header(line, self.group)
        self.group = ()
        if layout is None:
            return
        cur = self.cur
        if self.starts_run(cur):
            cur = self.new_run()
        assert cur is not None
        if not cur.colheader:
            cur.colheader, cur.layout = True, layout

    def tool_header(self, c: str) -> None:
        cur = self.cur
        if cur is not None and cur.tool_version and not cur.has_body():
            cur.duplicate_headers += 1  # the same first line from another process
            return
        if cur is None or (cur.has_body() and self.starts_run(cur)) or cur.tool_version:
            cur = self.new_run()
        tool, nccl = lines.header_versions(c)
        cur.tool_version = tool
        cur.set_version(nccl, 3)
        if c.startswith("collbench-torch-bench"):  # this project's benchmark: `torch=2.13.0 backend=gloo`
            self.tool = "collbench-torch-bench"
            cur.params.update(
                part.split("=", 1) for part in c.split() if "=" in part and "library" not in part
            )

    def collective_line(self, c: str) -> None:
        name = lines.collective_named(c)
        if c.startswith("Collective test starting"):
            cur = self.cur
            if (
                cur is None
                or (cur.has_body() and self.starts_run(cur))
                or (cur.collective is not None and cur.collective != name)
            ):
                cur = self.new_run()
            cur.collective = name
        elif c.startswith("Collective test concluded"):
            cur = self.last_run()
            cur.collective = cur.collective or name
            self.flush_fragment()
            cur.closed = True

    def version(self, s: str) -> bool:
        """Version lines outside the `#` header; False when `s` is none."""
        if s.startswith("rccl-tests"):
            self.open_run().tool_version = s.split("Version", 1)[1].strip() if "Version" in s else None
        elif s.startswith(("HIP version", "ROCm version")):
            key = "hip_version" if s[0] == "H" else "rocm_version"
            self.open_run().params[key] = s.split(":", 1)[-1].strip()
        elif "CCL version" in s:
            version = lines.library_version(s)
            if version is None:
                return False
            cur = self.cur
            if cur is None or (cur.closed and not cur.several_processes()):
                cur = self.new_run()
            cur.set_version(version, 2)
        else:
            return False
        return True

    def command(self, s: str) -> None:
        """A command or wrapper line naming the binary (`Running: ... all_gather_perf -b 8`)."""
        if "maca version" in s:  # MetaX's wrapper: `The test is all_reduce_perf, the maca version is ...`
            self.tool = "mccl-tests"
        name = lines.collective_named(s)
        if name is None:
            return
        cur = self.cur
        if cur is not None and not cur.has_body() and cur.collective is None:
            cur.collective = name
        else:
            self.pending_collective = name

    # -- table -----------------------------------------------------------------------------------
    def row(self, line: str, s: str) -> bool:
        """Read a data row (or the rest of a split one); False when the line is not one."""
        cur = self.cur
        if cur is not None and cur.fragment is not None:
            tokens = s.split()
            layout = cur.layout or DEFAULT_LAYOUT
            if is_continuation(tokens, layout):
                joined, cur.fragment = cur.fragment + line, None
                result = parse_row(joined, joined.split(), layout, allow_partial=True)
                if isinstance(result, Row):
                    cur.rows.append(result)
                return True
            if s[0] not in _DIGITS or " NCCL " in s:
                return False  # noise between a row's parts: the fragment waits
            self.flush_fragment()
        layout = (cur.layout if cur is not None else None) or DEFAULT_LAYOUT
        if "Test " in s:  # cheap guard: the regex below runs only on the rare glued-failure line
            glued = _GLUED_FAILURE.match(line)
            if glued:  # the row stops where the failure starts
                self.row(glued.group(1), glued.group(1).lstrip())
                self.flush_fragment()
                self.failure(glued.group(2))
                return True
        result = parse_row(line, s.split(), layout)
        if result is None:
            return " NCCL " in s and self.glued_row(line)
        if cur is None or (cur.closed and not cur.several_processes()):
            cur = self.new_run()
        if result is FRAGMENT:
            cur.fragment = line
        else:
            cur.rows.append(result)  # type: ignore[arg-type]
        return True

    def glued_row(self, line: str) -> bool:
        """A row's first half with an `NCCL INFO` line glued to it (one stdout buffer for both)."""
        m = _GLUED.match(line)
        if not m:
            return False
        head, tail = m.group(1), m.group(2)
        layout = (self.cur.layout if self.cur is not None else None) or DEFAULT_LAYOUT
        if parse_row(head, head.split(), layout) is not FRAGMENT:
            return False
        self.row(head, head.lstrip())
        self.other(tail, tail)
        return True

    def flush_fragment(self) -> None:
        cur = self.cur
        if cur is None or cur.fragment is None:
            return
        fragment, cur.fragment = cur.fragment, None
        result = parse_row(fragment, fragment.split(), cur.layout or DEFAULT_LAYOUT, allow_partial=True)
        if isinstance(result, Row):
            cur.rows.append(result)
            if result.ip is None and len((cur.layout or DEFAULT_LAYOUT).halves) == 2:
                cur.warnings.append(f"the row of size {result.size} has only its first half")

    # -- summary ---------------------------------------------------------------------------------
    def summary_run(self, field: str) -> RunBuilder | None:
        """The run a summary line belongs to; None for a repeat from another process."""
        self.flush_fragment()
        cur = self.cur
        if cur is None:
            return self.new_run()
        if getattr(cur, field) is None:
            return cur
        return None if cur.several_processes() else self.new_run()

    def out_of_bounds(self, c: str) -> None:
        parts = c.split(":", 1)[-1].split()
        if not parts or not parts[0].isdigit():
            return
        cur = self.summary_run("oob")
        if cur is not None:
            cur.oob, cur.closed = int(parts[0]), True

    def avg(self, c: str) -> None:
        parts = c.split(":", 1)[-1].split()
        try:
            value = float(parts[0])
        except (IndexError, ValueError):
            return
        cur = self.summary_run("avg_busbw")
        if cur is None:
            return
        cur.avg_busbw, cur.closed = value, True
        if len(parts) > 1 and parts[1] == "FAILED":  # NCCL_TESTS_MIN_BW not reached
            cur.errors.append(ErrorDraft("bandwidth check", None, f"Avg bus bandwidth {parts[0]} FAILED"))

    # -- noise with facts in it ------------------------------------------------------------------
    def info(self, s: str) -> None:
        cur = self.cur
        target: Facts = cur if cur is not None and not cur.closed else self.facts
        if " via " in s:
            transport = lines.transport_of(s)
            if transport:
                target.transports.add(transport)
                channel = lines.net_channel(s) if transport.startswith("NET/") else None
                if channel is not None:
                    target.add_net_channel(lines.info_host(s) or "?", *channel)
        elif "set by environment to" in s:
            setting = lines.setting_of(s)
            if setting:
                target.settings[setting[0]] = setting[1]
        elif "NCCL version" in s:
            if target.nccl_version is None:
                target.nccl_version = lines.library_version(s)
        else:
            if target.nranks is None and "anks " in s:
                target.nranks = lines.nranks_of(s)
            if ("NVLS" in s or "nvls channels" in s) and lines.uses_nvls(s):
                target.transports.add("NVLS")

    def failure(self, s: str) -> None:
        if s.startswith(".."):
            frame = lines.parse_frame(s)
            if frame:
                self.trace(*frame)
            return
        error = lines.parse_failure(s)
        if error is None:
            return
        run = self.last_run()
        self.note_collective(run, error.message)
        primary = ErrorDraft(error.kind, error.host, error.message)
        run.errors.append(primary)
        if error.kind in FAILURE_KINDS and error.host is not None:
            run.untraced.setdefault(error.host, deque()).append(primary)

    def trace(self, host: str, pid: int, location: str) -> None:
        """A ` .. host pid N: Test failure file:line` line: onto its primary error, or its own."""
        run = self.last_run()
        self.note_collective(run, location)
        error = run.traced.get((host, pid))
        if error is not None:
            error.trace.append(location)
            return
        waiting = run.untraced.get(host)
        if waiting:  # the oldest failure of this host that has no trace yet
            error = waiting.popleft()
            error.pid = pid
            error.trace.append(location)
        else:  # a trace with no failure line of its own (validation failed after the summary)
            error = ErrorDraft("Test failure", host, location, pid)
            run.errors.append(error)
        run.traced[(host, pid)] = error

    def note_collective(self, run: RunBuilder, text: str) -> None:
        if run.collective is None:
            run.collective = lines.collective_of_source(text)
