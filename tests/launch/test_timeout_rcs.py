"""What counts as a timeout is written once (exitcodes.LAUNCH_TIMEOUT_RCS): a launch's outcome and
a Slurm job step's outcome read the same codes, and the launch wrapper answers one of them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from collbench_py.exitcodes import LAUNCH_TIMEOUT_RCS
from collbench_py.launch.steps import launch_entries
from collbench_py.node import launch_wrapper
from collbench_py.slurm.job import step_outcome
from tests.launch.test_launch_run import NOW, answer, head_result, record_of, torch_pair
from tests.slurm.test_slurm_steps import captured

PACKAGE = Path(__file__).resolve().parents[2] / "collbench_py"


def test_the_wrapper_answers_a_code_that_counts_as_a_timeout() -> None:
    assert launch_wrapper.EXIT_TIMEOUT in LAUNCH_TIMEOUT_RCS


@pytest.mark.parametrize("rc", LAUNCH_TIMEOUT_RCS)
def test_a_launch_and_a_slurm_step_agree_on_every_timeout_code(rc: int) -> None:
    record = record_of(torch_pair())
    ended = head_result(record, [answer("pair-node1--node2", rc, ended="10:00:40.900")], [])
    assert {e["status"] for e in launch_entries(ended, [ended], NOW)} == {"timeout"}
    assert step_outcome(captured("srun-v-cancelled-by-bound.txt"), rc).status == "timeout"


@pytest.mark.parametrize("rc", [1, 2, 139])
def test_other_codes_are_failures_for_both(rc: int) -> None:
    record = record_of(torch_pair())
    ended = head_result(record, [answer("pair-node1--node2", rc)], [])
    assert {e["status"] for e in launch_entries(ended, [ended], NOW)} == {"failed"}
    assert step_outcome(captured("srun-v-cancelled-by-bound.txt"), rc).status == "failed"


def test_no_other_module_restates_the_timeout_codes() -> None:
    """A tuple or list holding 124 and -9 anywhere else in the package is a second copy of the rule."""
    copies = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "exitcodes.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Tuple | ast.List | ast.Set) and {124, -9} <= _ints(node.elts):
                copies.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert copies == []


def _ints(elements: list[ast.expr]) -> set[int]:
    values = set()
    for element in elements:
        try:
            value = ast.literal_eval(element)
        except ValueError:
            continue
        if isinstance(value, int):
            values.add(value)
    return values
