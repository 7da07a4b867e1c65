"""make_report sets the parsed run aside from the cyclic garbage collector while it judges and
writes (report/make.py): the collector is left as it was found, after a report and after bad input."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from collbench_py.profiles import ProfileError
from collbench_py.report.make import make_report
from tests.rundir_factory import RunSpec, build_run_dir


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_run_dir(tmp_path_factory.mktemp("collector"), RunSpec(hosts=["node1", "node2", "node3"]))


def test_the_collector_is_on_and_nothing_is_left_frozen_after_a_report(run_dir: Path, tmp_path: Path) -> None:
    assert gc.isenabled()
    made = make_report(run_dir, tmp_path / "report")
    assert (made.out_dir / "index.html").is_file()
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_the_collector_is_restored_when_the_verdicts_refuse_the_input(run_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ProfileError):
        make_report(run_dir, tmp_path / "report", profile=str(tmp_path / "no-such-profile.yml"))
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
