"""Loading a filter plugin file imports nothing of collbench_py: Ansible loads every filter file in
each worker process that templates any filter, once per task and host, so a package import at the
top of one costs the controller that import on every task of every host (the filters import what
they need when called)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FILTERS = sorted((REPO / "filter_plugins").glob("*.py"))

PROBE = """
import runpy, sys
namespace = runpy.run_path(sys.argv[1])
filters = namespace["FilterModule"]().filters()
print(len(filters))
print(",".join(sorted(name for name in sys.modules if name.split(".")[0] == "collbench_py")))
"""


@pytest.mark.parametrize("path", FILTERS, ids=lambda p: p.name)
def test_loading_a_filter_file_imports_nothing_of_the_package(path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, check=False, cwd="/"
    )
    assert done.returncode == 0, done.stderr
    count, imported = done.stdout.splitlines()
    assert int(count) > 0
    assert imported == "", f"{path.name} imports {imported} when loaded"


def test_a_filter_imports_what_it_needs_when_called() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import runpy, sys; f = runpy.run_path(sys.argv[1])['FilterModule']().filters();"
            "print(f['collbench_host_dir']('node 1/x'))",
            str(REPO / "filter_plugins" / "collbench.py"),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() and "/" not in done.stdout.strip()
