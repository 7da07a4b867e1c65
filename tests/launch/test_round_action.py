"""The parts of the round's controller task (action_plugins/collbench_round.py) that need no host:
the command line a connection runs, read back by a real shell, and the ssh hop that refuses an
mpirun launch. The task itself runs in the cluster tests (tests/cluster/test_pairs_adaptive.py,
test_launch_bound.py, test_faults.py, test_rails_e2e.py)."""

from __future__ import annotations

import json
import subprocess
import sys

from action_plugins.collbench_round import refused_hop
from collbench_py.launch.connections import shell_command
from collbench_py.launch.steps import step_warnings

HOPS = {"failed": [{"from": "node1", "to": "node3", "error": "Host key verification failed."}]}


def test_the_command_line_keeps_every_word_as_one_argument(tmp_path) -> None:
    marker = tmp_path / "PWNED"
    argv = [
        sys.executable,
        "-c",
        "import json, sys; print(json.dumps(sys.argv[1:]))",
        f"x;touch {marker}",
        f"$(touch {marker})",
        f"`touch {marker}`",
        'it\'s "quoted"',
        "",
        "two  spaces",
    ]
    # Run as a connection runs it: one string, by the login shell.
    done = subprocess.run(["sh", "-c", shell_command(argv)], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == argv[3:]
    assert not marker.exists()


def test_a_failed_hop_from_the_head_refuses_an_mpirun_launch() -> None:
    said = refused_hop(HOPS, ["node1", "node3"], "mpirun")
    assert said == "node1 -> node3: Host key verification failed."


def test_hops_that_mpirun_does_not_take_refuse_nothing() -> None:
    # torchrun and srun start no ssh from the head; a failed hop elsewhere is not this launch's.
    assert refused_hop(HOPS, ["node1", "node3"], "torchrun") == ""
    assert refused_hop(HOPS, ["node3", "node1"], "mpirun") == ""
    assert refused_hop(HOPS, ["node1", "node2"], "mpirun") == ""
    assert refused_hop(None, ["node1", "node3"], "mpirun") == ""


def test_a_step_not_ok_is_one_warning_with_its_last_words() -> None:
    answered = [
        {"name": "pair-a--b-all_reduce", "status": "ok", "rc": 0, "stderr": "fine\n"},
        {
            "name": "pair-a--b-all_gather",
            "status": "timeout",
            "rc": 124,
            "stderr": "one\ntwo\nthree\ncollbench-launch: status=timeout rc=124\n",
        },
    ]
    assert step_warnings("a", answered) == [
        "a: pair-a--b-all_gather: timeout (rc 124): two / three / collbench-launch: status=timeout rc=124"
    ]
