"""One report, made one way: judge a run directory, consult its history, write the report files.

`collbench report`, `collbench run` and the acceptance bundle all call `make_report`, so the bundle
carries exactly the report the command would have written.
"""

from __future__ import annotations

import contextlib
import gc
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from collbench_py import history
from collbench_py.history import HistoryOptions
from collbench_py.report import refuse_link_out, write_report
from collbench_py.report.console import summary_lines
from collbench_py.report.inside_nodes import node_checks_json
from collbench_py.report.plots import drawn_beside
from collbench_py.rundir.load import load_run_dir_with
from collbench_py.rundir.private_files import make_private_dirs
from collbench_py.rundir.results_rows import RowsBeside, spool_log_runs
from collbench_py.verdicts import Options, Report, judge


@dataclass(frozen=True)
class MadeReport:
    """A judged run whose report files are written: what `collbench report` prints and exits with."""

    report: Report
    exit_code: int
    out_dir: Path
    summary: tuple[str, ...]


def make_report(
    run_dir: Path,
    out_dir: Path | None = None,
    *,
    profile: str | None = None,
    strict: bool = False,
    options: Options | None = None,
    db: str | None = None,
    history_options: HistoryOptions | None = None,
    links_to: Path | None = None,
) -> MadeReport:
    """Judge `run_dir`, record it in the history database `db` (default: history.sqlite next to the
    run directory) with `history_options` (None: no history), and write the report files to `out_dir`
    (default RUN_DIR/report), their links to logs pointing into `links_to` (default RUN_DIR; the
    bundle's copy of the run). Raises RunDirError or ProfileError for bad input, OSError when the
    files cannot be written."""
    out_dir = out_dir or run_dir / "report"
    if not Path(run_dir).is_dir():  # the loader says what is wrong, before a directory is made in it
        load_run_dir_with(run_dir, None)
    created = _make_out_dir(out_dir, run_dir)
    # results.json's records are made by a child process while the run is judged (rundir/results_rows.py),
    # from the runs the parse workers write into files here as they parse.
    spool = Path(tempfile.mkdtemp(dir=out_dir, prefix=".results.json."))
    pruning = history.Pruning()
    rows: RowsBeside | None = None
    try:
        with drawn_beside():  # started before the run is loaded: see plots.drawn_beside
            if history_options is not None:  # forked before the run is loaded too: history/pruning.py
                pruning = history.ready_pruning(Path(run_dir), db, history_options)
            rows = RowsBeside.ready(str(spool))  # and this one
            run, segments = load_run_dir_with(run_dir, partial(spool_log_runs, str(spool)) if rows else None)
            if rows is not None:
                rows.go(segments)
            # The parsed run lives until the files are written and holds no garbage: left to the cyclic
            # collector, each full collection walked all of it again (4,000 hosts: millions of objects,
            # about 5 s of the verdicts and junit.xml). Set aside until the report is made.
            gc.freeze()
            with _collector_paused():  # the verdicts too make many objects and free few
                report = judge(run, profile_arg=profile, options=options or Options())
            gc.freeze()
            if history_options is not None:
                # Ingest into the history database and add regressions against each host's own past,
                # and each component's inside the nodes (results.json's node_checks section). The
                # retention policy runs in a child process meanwhile, while the files are written.
                report, pruning = history.record_then_prune_beside(
                    report, db, history_options, node_checks=node_checks_json(report), pruning=pruning
                )
            code = report.exit_code(strict=strict)
            write_report(
                replace(report, run=replace(report.run, path=links_to)) if links_to else report,
                out_dir,
                code,
                rows=rows,
            )
    except BaseException:
        gc.unfreeze()
        pruning.wait()  # never left running behind an error
        if rows is not None:
            rows.stop()
        shutil.rmtree(spool, ignore_errors=True)
        for level in created:  # bad input (a run or profile that does not load): no empty directory left
            with contextlib.suppress(OSError):
                level.rmdir()
        raise
    gc.unfreeze()
    if rows is not None:
        rows.stop()
    shutil.rmtree(spool, ignore_errors=True)
    summary = tuple(summary_lines(report, str(out_dir)))
    problem = pruning.wait()
    if problem is not None:  # the report stands; the nights stay raw until a later report prunes them
        summary += (f"history: the nights older than the raw window were not summarised: {problem}",)
    return MadeReport(report, int(code), out_dir, summary)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _make_out_dir(out_dir: Path, run_dir: Path) -> list[Path]:
    """Make `out_dir` (0700, as the run directory is) before the run is read, results.json's rows
    being written there meanwhile; returns the directories made, deepest first."""
    refuse_link_out(out_dir, run_dir)
    created = [level for level in (out_dir, *out_dir.parents) if not level.exists()]
    make_private_dirs(out_dir)
    return created
