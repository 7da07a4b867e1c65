"""collbench_py/node/stage_files.py, run as the benchmark role runs it: its text given to `python -c`,
the request as JSON on standard input, one JSON object back."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROGRAM = (REPO / "collbench_py" / "node" / "stage_files.py").read_text()
WRAPPER = (REPO / "collbench_py" / "node" / "launch_wrapper.py").read_text()


def stage(request: dict) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_programs_are_written_once_private_and_whole(tmp_path: Path) -> None:
    run_root = tmp_path / "work" / "runs" / "r1" / "node1"
    wrapper = tmp_path / "work" / "bin" / "collbench_launch_wrapper.py"
    request = {"dirs": [str(run_root)], "files": [[str(wrapper), WRAPPER]]}
    assert stage(request) == {"changed": [str(run_root), str(wrapper)], "error": None}
    assert wrapper.read_text() == WRAPPER  # byte for byte, its last newline included
    assert mode(wrapper) == 0o700 and mode(run_root) == 0o700
    # Every directory it made, not only the last: the run's directories are nobody else's to read
    assert [mode(d) for d in (run_root.parent, run_root.parent.parent, wrapper.parent)] == [0o700] * 3
    # The same request again changes nothing: the file is not rewritten
    before = wrapper.stat().st_ino
    assert stage(request) == {"changed": [], "error": None}
    assert wrapper.stat().st_ino == before
    # A changed program, or a loosened mode, is written again
    wrapper.chmod(0o755)
    assert stage(request)["changed"] == [str(wrapper)] and mode(wrapper) == 0o700
    changed = {"dirs": [], "files": [[str(wrapper), WRAPPER + "# new\n"]]}
    assert stage(changed)["changed"] == [str(wrapper)]
    assert wrapper.read_text().endswith("# new\n")


def test_a_directory_that_cannot_be_made_is_one_error(tmp_path: Path) -> None:
    blocker = tmp_path / "work"
    blocker.write_text("a file where the work directory should be")
    said = stage({"dirs": [str(blocker / "runs" / "r1")], "files": []})
    assert said["changed"] == [] and str(blocker) in said["error"], said
