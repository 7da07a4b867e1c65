"""Write every report output for a judged run: index.html, report.md, hosts.csv, results.json,
junit.xml, metrics.prom and tickets.md."""

from __future__ import annotations

import os
from pathlib import Path

from collbench_py.report.conclusion import tickets_markdown
from collbench_py.report.files import atomic_writer
from collbench_py.report.machine import write_hosts_csv, write_junit, write_metrics, write_results_json
from collbench_py.report.plots import drawn_beside
from collbench_py.report.render import start_pages
from collbench_py.rundir.results_rows import RowsBeside
from collbench_py.verdicts import Report

OUTPUTS = (
    "index.html",
    "report.md",
    "hosts.csv",
    "results.json",
    "junit.xml",
    "metrics.prom",
    "tickets.md",
)


def write_report(
    report: Report, out_dir: Path, exit_code: int, rows: RowsBeside | None = None
) -> dict[str, Path]:
    """Every output of `report` in `out_dir`; results.json's rows copied from the records made beside
    the report (`rows`, rundir.results_rows) or else written from the parsed logs."""
    refuse_link_out(out_dir, report.run.path)
    if out_dir.parent == report.run.path:
        # report/ is as private as the run directory whose logs and facts it quotes.
        out_dir.mkdir(mode=report.run.path.stat().st_mode & 0o777, exist_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    with drawn_beside():  # the pages' figures drawn by a helper process while the other files are written
        pages = start_pages(report, out_dir, exit_code)
        write_results_json(report, out_dir / "results.json", exit_code, rows)
        write_hosts_csv(report, out_dir / "hosts.csv")
        write_junit(report, out_dir / "junit.xml")
        write_metrics(report, out_dir / "metrics.prom")
        with atomic_writer(out_dir / "tickets.md") as out:
            out.write(tickets_markdown(report))
        pages.write()
    return {name: out_dir / name for name in OUTPUTS}


def refuse_link_out(out_dir: Path, run_dir: Path) -> None:
    """An output directory inside the run directory (report/) that a link leads elsewhere: whoever
    could write the run directory would choose where the report lands."""
    inside = os.path.abspath(out_dir).startswith(os.path.abspath(run_dir) + os.sep)
    if inside and not os.path.realpath(out_dir).startswith(os.path.realpath(run_dir) + os.sep):
        raise OSError(f"{out_dir} links out of the run directory; not written")
