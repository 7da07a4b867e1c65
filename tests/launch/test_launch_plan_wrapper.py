"""The node wrapper's plan mode (`launch_wrapper.py --plan -`), with real processes: it prepares
the launch (directories, links, hostfile), runs each collective's launch one after another, each
under its own bound, brings back the small files, and after a failed step sweeps the other hosts
over the ssh mpirun uses (here a stand-in `ssh` that records its arguments: there is no second host
outside tests/cluster, where the real one runs)."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WRAPPER = Path(__file__).resolve().parents[2] / "collbench_py" / "node" / "launch_wrapper.py"
PY = sys.executable
SLACK_S = 6.0


def run_plan(plan: dict[str, Any], limit: float = 90) -> tuple[int, dict[str, Any], str, float]:
    started = time.monotonic()
    done = subprocess.run(
        [PY, str(WRAPPER), "--plan", "-"],
        input=json.dumps(plan),
        capture_output=True,
        text=True,
        timeout=limit,
        check=False,
    )
    answer = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, answer, done.stderr, time.monotonic() - started


def step(name: str, argv: list[str], match: Path, timeout_s: float = 30, **extra: Any) -> dict[str, Any]:
    bound = {"timeout_s": timeout_s, "kill_after_s": 1, "match": str(match)}
    return {"name": name, "argv": argv, "env": {}, **bound, **extra}


def stand_in_ssh(tmp_path: Path) -> tuple[Path, Path]:
    """An `ssh` that records each call's arguments (one JSON line) and succeeds."""
    calls = tmp_path / "ssh-calls"
    script = tmp_path / "ssh"
    script.write_text(
        f"#!{PY}\nimport json, sys\nopen({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n",
        encoding="utf-8",
    )
    script.chmod(0o755)
    return script, calls


def test_prepare_makes_private_directories_links_and_the_hostfile(tmp_path: Path) -> None:
    launch = tmp_path / "runs" / "node1" / "pair-a--b-all_reduce"
    binary = tmp_path / "all_reduce_perf"
    binary.write_text('#!/bin/sh\necho ran "$0"\n', encoding="utf-8")
    binary.chmod(0o755)
    link = launch / "all_reduce_perf"
    plan = {
        "prepare": {
            "dirs": [str(launch)],
            "links": [[str(binary), str(link)]],
            "hostfiles": [[str(launch / "hostfile"), "10.0.0.1 slots=1\n"]],
        },
        "steps": [step("s", [str(link)], launch)],
    }
    rc, answer, _, _ = run_plan(plan)
    assert rc == 0
    assert stat.S_IMODE(launch.stat().st_mode) == 0o700
    assert os.readlink(link) == str(binary)
    assert (launch / "hostfile").read_text() == "10.0.0.1 slots=1\n"
    assert stat.S_IMODE((launch / "hostfile").stat().st_mode) == 0o600
    # The step ran through the link: its command line names the launch directory.
    assert answer["steps"][0]["stdout"] == f"ran {link}\n"


def test_each_step_has_its_own_bound_and_the_next_runs_after_one_that_hung(tmp_path: Path) -> None:
    first, second = tmp_path / "runs" / "n" / "a", tmp_path / "runs" / "n" / "b"
    out, written = first / "all_reduce.json", f"{second}/x.json"
    plan = {
        "prepare": {"dirs": [str(first), str(second)]},
        "steps": [
            step("a", ["sleep", "60"], first, timeout_s=2, files=[str(out)]),
            step("b", ["sh", "-c", f"echo done; echo '{{}}' > {second}/x.json"], second, files=[written]),
        ],
    }
    rc, answer, _, seconds = run_plan(plan)
    assert rc == 0
    hung, done = answer["steps"]
    assert (hung["name"], hung["status"], hung["rc"]) == ("a", "timeout", 124)
    assert (done["name"], done["status"], done["rc"], done["stdout"]) == ("b", "ok", 0, "done\n")
    assert hung["ended"] <= done["started"]
    # The hung step was ended at its own bound (2 s + kill-after), not at the sum of the bounds.
    assert seconds < 2 + 1 + SLACK_S
    assert hung["stderr"].startswith("collbench-launch: status=timeout rc=124 ")
    # The files a step wrote come back inside the answer; a missing one does not.
    assert hung["files"] == {}
    assert base64.b64decode(done["files"]["x.json"]) == b"{}\n"


def test_a_file_above_the_inline_limit_is_named_for_fetching(tmp_path: Path) -> None:
    launch = tmp_path / "runs" / "n" / "a"
    big = launch / "big.json"
    plan = {
        "prepare": {"dirs": [str(launch)]},
        "inline_max": 10,
        "steps": [step("a", ["sh", "-c", f"printf 0123456789abc > {big}"], launch, files=[str(big)])],
    }
    _, answer, _, _ = run_plan(plan)
    assert answer["steps"][0]["files"] == {} and answer["steps"][0]["large"] == [str(big)]


def test_the_peers_are_prepared_first_and_swept_after_a_failed_step_only(tmp_path: Path) -> None:
    ssh, calls = stand_in_ssh(tmp_path)
    launch = tmp_path / "runs" / "n" / "pair-a--b.x"
    remote = {
        "rsh": [str(ssh), "-i", "/key"],
        "hosts": ["10.0.0.2"],
        "dirs": [str(launch)],
        "links": [["/bin/x_perf", f"{launch}/x_perf"]],
    }
    plan = {"remote": remote, "steps": [step("ok", ["true"], launch), step("bad", ["false"], launch)]}
    rc, answer, _, _ = run_plan(plan)
    assert rc == 0
    said = [json.loads(line) for line in calls.read_text().splitlines()]
    options = ["-i", "/key", "-o", "BatchMode=yes", "-o", "ConnectTimeout=15", "10.0.0.2"]
    assert said == [
        [*options, f"umask 077 && mkdir -p -- '{launch}' && ln -sfn -- '/bin/x_perf' '{launch}/x_perf'"],
        # The directory as a literal in pkill's regular expression, `exec` so no shell names it.
        [*options, "exec pkill -KILL -f '" + str(launch).replace(".", "\\.") + "'"],
    ]
    assert "swept" not in answer["steps"][0]
    assert answer["steps"][1]["swept"] == ["10.0.0.2: swept"]


def test_a_peer_that_cannot_be_prepared_starts_no_step(tmp_path: Path) -> None:
    launch = tmp_path / "runs" / "n" / "a"
    remote = {"rsh": ["false"], "hosts": ["10.0.0.2"], "dirs": [str(launch)], "links": []}
    marker = tmp_path / "ran"
    rc, answer, _, _ = run_plan({"remote": remote, "steps": [step("a", ["touch", str(marker)], launch)]})
    assert rc == 0 and not marker.exists()
    only = answer["steps"][0]
    assert (only["status"], only["rc"]) == ("failed", 126)
    assert "not started: 10.0.0.2: rc 1" in only["stderr"]


def test_a_bad_plan_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for plan, says in (
        ("not json", "not JSON"),
        (
            json.dumps({"steps": [{"argv": ["true"], "match": "/", "timeout_s": 1, "kill_after_s": 1}]}),
            "match",
        ),
        (json.dumps({"steps": [{"argv": [], "match": str(tmp_path / "a")}]}), "argv"),
    ):
        argv = [PY, str(WRAPPER), "--plan", "-"]
        done = subprocess.run(argv, input=plan, capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 2, plan
        assert says in done.stderr and "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
