"""manifest.json (collbench_py/rundir/manifest.py): each host-status rule, the launches' order, the Slurm
object, what is built from the playbook's variables, the round trip through the file (real manifests
the playbook wrote on GPU nodes), the writers (collbench fetch, an interrupted run) and one clear
error for a file that is not a manifest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from collbench_py.fetch import Layout, RemoteFile, place, write_run_dir
from collbench_py.rundir import manifest as mf
from collbench_py.rundir.load import load_run_dir
from collbench_py.rundir.load import mark_interrupted as rundir_mark_interrupted

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"
CAPTURED = sorted((REPO / "tests" / "data").glob("*/*/manifest.json")) + sorted(
    (REPO / "tests" / "data").glob("*/manifest.json")
)
CORPUS = REPO / "tests" / "data" / "corpus" / "nccl-tests"
TWO_NODE = CORPUS / "hgx-h100-2node-16rank-mpi-warnings-interleaved-16GiB.txt"
RUN = {
    "run_id": "20261121T215100Z-3f9a2c",
    "started_at": "2026-11-21T21:51:00Z",
    "collbench_version": "0.1.0",
    "backend": "auto",
    "launcher": "auto",
    "hosts": ["gpu-a01", "gpu-a02"],
    "dir_names": {"gpu-a01": "gpu-a01", "gpu-a02": "gpu-a02"},
    "parameters": {"collectives": ["all_reduce"], "timeout_s": 300},
}


def launch(kind: str, hosts: list[str], status: str, started: str | None = "2026-11-21T21:52:00Z") -> dict:
    return {
        "kind": kind,
        "hosts": hosts,
        "collective": "all_reduce",
        "log": f"hosts/{hosts[0]}/{kind}/all_reduce.log",
        "status": status,
        "rc": 0,
        "started_at": started,
        "finished_at": started,
        "round": None,
        "launcher": "torchrun",
    }


def host(**given: Any) -> mf.HostState:
    return mf.HostState(**{"inventory_hostname": "node1", "dir_name": "node1", "in_play": True, **given})


# ---------------------------------------------------------------- each host-status rule


def test_a_host_that_left_the_run_keeps_the_status_and_reason_recorded_for_it() -> None:
    # Recorded first: it wins over every rule below (out of the play, an intra launch timed out).
    left = host(recorded_status="unreachable", recorded_reason="ssh: no route to host", in_play=False)
    timed_out = [launch("intra", ["node1"], "timeout")]
    assert mf.host_entry(left, timed_out) == mf.HostEntry("node1", "unreachable", "ssh: no route to host")


def test_a_host_no_longer_in_the_play_failed_a_task() -> None:
    gone = host(in_play=False)
    assert mf.host_entry(gone, [launch("intra", ["node1"], "ok")]) == mf.HostEntry(
        "node1", "failed", mf.LEFT_THE_PLAY
    )


def test_a_host_whose_intra_launch_timed_out_is_timeout_even_if_another_failed() -> None:
    launches = [launch("intra", ["node1"], "failed"), launch("intra", ["node1"], "timeout")]
    assert mf.host_entry(host(), launches) == mf.HostEntry("node1", "timeout", mf.INTRA_TIMEOUT)


def test_a_host_whose_intra_launch_failed_is_failed() -> None:
    launches = [launch("intra", ["node1"], "ok"), launch("intra", ["node1"], "failed")]
    assert mf.host_entry(host(), launches) == mf.HostEntry("node1", "failed", mf.INTRA_FAILED)


def test_only_the_hosts_own_intra_launches_count_and_the_directory_name_is_matched() -> None:
    # Another host's failed intra launch, or a failed pair or fleet launch: the report judges those.
    others = [
        launch("intra", ["node2"], "failed"),
        launch("pair", ["node1", "node2"], "timeout"),
        launch("all", ["node1", "node2"], "failed"),
    ]
    assert mf.host_entry(host(), others) == mf.HostEntry("node1", "ok")
    renamed = host(inventory_hostname="10.0.0.1", dir_name="10.0.0.1_x")
    assert mf.host_entry(renamed, [launch("intra", ["10.0.0.1_x"], "failed")]).status == "failed"


def test_a_reason_is_written_for_every_status_but_ok() -> None:
    built = mf.build(
        RUN,
        [
            host(inventory_hostname="gpu-a01", dir_name="gpu-a01"),
            host(inventory_hostname="gpu-a02", dir_name="gpu-a02", recorded_status="failed"),
        ],
    )
    hosts = mf.to_dict(built)["hosts"]
    assert hosts == {
        "gpu-a01": {"inventory_hostname": "gpu-a01", "status": "ok"},
        "gpu-a02": {"inventory_hostname": "gpu-a02", "status": "failed", "reason": None},
    }


# ---------------------------------------------------------------- the rest of the manifest


def test_launches_are_in_start_order_and_those_never_started_come_last() -> None:
    late = launch("intra", ["gpu-a01"], "ok", "2026-11-21T21:53:00Z")
    early = launch("intra", ["gpu-a02"], "ok", "2026-11-21T21:52:00Z")
    never = launch("pair", ["gpu-a01", "gpu-a02"], "skipped", None)
    hosts = [
        host(inventory_hostname="gpu-a01", dir_name="gpu-a01", launches=(never, late)),
        host(inventory_hostname="gpu-a02", dir_name="gpu-a02", launches=(early,)),
    ]
    assert list(mf.build(RUN, hosts).launches) == [early, late, never]


def test_the_controllers_resolved_values_replace_the_requested_ones() -> None:
    hosts = [host(inventory_hostname="gpu-a01", dir_name="gpu-a01")]
    requested = mf.build(RUN, hosts)
    assert (requested.backend, requested.launcher) == ("auto", "auto")
    assert requested.parameters == {**RUN["parameters"], "gpus_per_host": None}
    controller = {
        "collbench_backend_resolved": "torch",
        "collbench_launcher_resolved": "torchrun",
        "collbench_ranks_per_host": 2,
        "collbench_ssh_hops_summary": {"mode": "managed", "checked": 0, "failed": []},
        "collbench_pairs_plan": {"schedule": "adaptive", "rounds": 4, "plan": "inter/pairs/plan.json"},
    }
    resolved = mf.build(RUN, hosts, controller=controller)
    assert (resolved.backend, resolved.launcher) == ("torch", "torchrun")
    assert resolved.parameters["gpus_per_host"] == 2 and resolved.parameters["timeout_s"] == 300
    assert resolved.ssh_hops == controller["collbench_ssh_hops_summary"]
    assert resolved.pairs == controller["collbench_pairs_plan"]


def test_a_running_manifest_has_no_finish_time_and_a_finished_one_has_it() -> None:
    hosts = [host(inventory_hostname="gpu-a01", dir_name="gpu-a01")]
    assert mf.build(RUN, hosts).finished_at is None
    done = mf.build(RUN, hosts, status="complete", now="2026-11-21T21:53:12Z")
    assert (done.status, done.finished_at) == ("complete", "2026-11-21T21:53:12Z")


def test_slurm_is_absent_without_slurm_and_carries_the_allocation_and_the_unusable_nodes() -> None:
    hosts = [host(inventory_hostname="gpu-a01", dir_name="gpu-a01")]
    assert "slurm" not in mf.to_dict(mf.build(RUN, hosts))
    allocation = {
        "job_id": "42",
        "partition": None,
        "nodes": "node[1-2]",
        "state": "granted",
        "submit_host": "x",
    }
    down = mf.Unusable("node4", "down", "Not responding", False)
    with_both = mf.build(RUN, hosts, controller={"collbench_slurm_allocation": allocation}, unusable=[down])
    assert mf.to_dict(with_both)["slurm"] == {
        **allocation,
        "unusable": [{"host": "node4", "state": "down", "reason": "Not responding", "named": False}],
    }
    only_allocation = mf.build(RUN, hosts, controller={"collbench_slurm_allocation": allocation})
    assert "unusable" not in mf.to_dict(only_allocation)["slurm"]


def test_from_the_playbooks_variables() -> None:
    """hostvars as the action sees them: the controller holds the run; a host of the run that is
    also in slurm_unusable is not listed as unusable; `named` is read as Ansible's bool."""
    hostvars = {
        "localhost": {"collbench_run": RUN, "collbench_launcher_resolved": "torchrun"},
        "gpu-a01": {"collbench_launches": [launch("intra", ["gpu-a01"], "timeout")]},
        "gpu-a02": {"collbench_host_status": "unreachable", "collbench_host_reason": "ssh: timed out"},
        "node9": {
            "collbench_slurm_state": "drained",
            "collbench_slurm_reason": "maint",
            "collbench_slurm_named": "yes",
        },
        "node4": {"collbench_slurm_state": "down", "collbench_slurm_reason": None},
    }
    built = mf.from_ansible(hostvars, ["gpu-a01"], ["node9", "gpu-a02", "node4"], status="running")
    assert {name: entry.status for name, entry in built.hosts.items()} == {
        "gpu-a01": "timeout",
        "gpu-a02": "unreachable",
    }
    assert built.hosts["gpu-a02"].reason == "ssh: timed out" and built.launcher == "torchrun"
    assert [(n["host"], n["named"]) for n in built.slurm["unusable"]] == [("node4", False), ("node9", True)]
    assert mf.recorded_launches(hostvars, ["gpu-a01", "gpu-a02"]) == hostvars["gpu-a01"]["collbench_launches"]


def test_the_hosts_not_measured_are_every_status_but_ok_in_the_manifests_order() -> None:
    """What the run's exit code is made of (roles/report/tasks/outcome.yml)."""
    hosts = [
        host(inventory_hostname="a", dir_name="a"),
        host(inventory_hostname="b", dir_name="b", recorded_status="unreachable", recorded_reason="ssh"),
        host(inventory_hostname="c", dir_name="c", launches=(launch("intra", ["c"], "timeout"),)),
        host(inventory_hostname="d", dir_name="d", in_play=False),
    ]
    assert mf.not_measured(mf.build(RUN, hosts)) == [("b", "unreachable"), ("c", "timeout"), ("d", "failed")]


# ---------------------------------------------------------------- the file


@pytest.mark.parametrize("path", CAPTURED, ids=lambda p: p.parent.name)
def test_a_manifest_the_playbook_wrote_reads_and_writes_back_byte_for_byte(
    path: Path, tmp_path: Path
) -> None:
    """These were written by the Jinja template this module replaced: the same bytes come out."""
    (tmp_path / "manifest.json").write_bytes(path.read_bytes())
    read = mf.read(tmp_path)
    assert mf.to_json(read).encode() == path.read_bytes()
    assert not mf.write(tmp_path, read)  # the same bytes: nothing written
    (tmp_path / "manifest.json").unlink()
    assert mf.write(tmp_path, read) and mf.read(tmp_path) == read
    assert (tmp_path / "manifest.json").stat().st_mode & 0o777 == 0o600


def test_a_built_manifest_is_read_back_by_the_report(tmp_path: Path) -> None:
    hosts = [
        host(
            inventory_hostname="gpu-a01",
            dir_name="gpu-a01",
            launches=(launch("intra", ["gpu-a01"], "failed"),),
        ),
        host(inventory_hostname="gpu-a02", dir_name="gpu-a02", in_play=False),
    ]
    built = mf.build(RUN, hosts, status="complete", controller={"collbench_backend_resolved": "torch"})
    mf.write(tmp_path, built)
    assert mf.read(tmp_path) == built
    run = load_run_dir(tmp_path)
    assert (run.status, run.backend) == ("complete", "torch")
    assert {name: h.status for name, h in run.hosts.items()} == {"gpu-a01": "failed", "gpu-a02": "failed"}


def test_the_fetched_manifest_keeps_its_keys(tmp_path: Path) -> None:
    layout = Layout(hosts=["node1", "node2"], names={"node1": "node1.example", "node2": "node2"})
    place(layout, RemoteFile(host="node1", path="/job/run.log", size=0, mtime=1.7e9), TWO_NODE.read_text())
    write_run_dir(tmp_path / "run", layout, "fetched", {"node2": "ssh: timed out"}, "/job/*.log")
    data = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert "ssh_hops" not in data and "pairs" not in data and data["fetched"]["by"] == "collbench fetch"
    assert data["hosts"] == {
        "node1": {"inventory_hostname": "node1.example", "status": "ok"},
        "node2": {"inventory_hostname": "node2", "status": "unreachable", "reason": "ssh: timed out"},
    }
    assert [(x["status"], x["rc"], x["source"]) for x in data["launches"]] == [
        (None, None, "node1:/job/run.log")
    ]
    assert mf.read(tmp_path / "run").fetched == data["fetched"]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("{not json", "not a readable manifest"),
        ("[]", "the top level is not an object"),
        ('{"schema": 2, "run_id": "r", "status": "running", "hosts": {}}', "schema 2, expected 1"),
        ('{"schema": 1, "run_id": "r", "status": "done", "hosts": {}}', "status 'done'"),
        (
            '{"schema": 1, "run_id": "r", "status": "running",'
            ' "hosts": {"n1": {"inventory_hostname": "n1", "status": "gone"}}}',
            "hosts.n1.status 'gone'",
        ),
        (
            '{"schema": 1, "run_id": "r", "status": "running", "hosts": {},'
            ' "launches": [{"kind": "intra", "hosts": "n1", "collective": "x", "log": "y", "status": "ok"}]}',
            "launches[0].hosts 'n1'",
        ),
    ],
)
def test_a_bad_manifest_is_one_clear_error_naming_the_file_and_the_field(
    tmp_path: Path, text: str, named: str
) -> None:
    (tmp_path / "manifest.json").write_text(text)
    with pytest.raises(mf.ManifestError) as error:
        mf.read(tmp_path)
    message = str(error.value)
    assert message.startswith(f"{tmp_path / 'manifest.json'}: ") and named in message
    assert "\n" not in message


def test_a_missing_manifest_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(mf.ManifestError, match="no such file"):
        mf.read(tmp_path)


def test_a_manifest_readers_would_refuse_is_never_written(tmp_path: Path) -> None:
    bad = mf.build(RUN, [host(inventory_hostname="gpu-a01", dir_name="gpu-a01", recorded_status="gone")])
    with pytest.raises(ValueError, match=r"hosts\.gpu-a01\.status 'gone'"):
        mf.write(tmp_path, bad)
    assert not (tmp_path / "manifest.json").exists()


# ---------------------------------------------------------------- an interrupted run


def test_an_interrupted_run_keeps_everything_it_recorded_and_its_mode(tmp_path: Path) -> None:
    running = {
        "schema": 1,
        "run_id": "r",
        "status": "running",
        "hosts": {},
        "finished_at": None,
        "future": [1],
    }
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(running))
    os.chmod(path, 0o640)
    assert mf.mark_interrupted(tmp_path, now="2026-11-21T21:53:12Z")
    marked = {**running, "status": "interrupted", "finished_at": "2026-11-21T21:53:12Z"}
    assert json.loads(path.read_text()) == marked
    assert path.stat().st_mode & 0o777 == 0o640
    assert not mf.mark_interrupted(tmp_path)  # only a running manifest is marked


def test_the_runners_mark_interrupted_is_the_manifests(tmp_path: Path) -> None:
    running = {"schema": 1, "run_id": "r", "status": "running", "hosts": {}}
    (tmp_path / "manifest.json").write_text(json.dumps(running))
    assert rundir_mark_interrupted(tmp_path)
    assert mf.read(tmp_path).status == "interrupted" and mf.read(tmp_path).finished_at


@pytest.mark.parametrize("status", ["complete", "failed", "interrupted"])
def test_a_finished_manifest_is_never_marked_interrupted(tmp_path: Path, status: str) -> None:
    text = json.dumps({"schema": 1, "run_id": "r", "status": status, "hosts": {}})
    (tmp_path / "manifest.json").write_text(text)
    assert not mf.mark_interrupted(tmp_path, now="2026-11-21T21:53:12Z")
    assert (tmp_path / "manifest.json").read_text() == text


# ---------------------------------------------------------------- through Ansible


@pytest.mark.long  # a real playbook run, about 15 s
@pytest.mark.skipif(not PLAYBOOK_BIN.exists(), reason="ansible-playbook is not in this venv")
def test_the_actions_read_the_hosts_variables_the_plays_leave(tmp_path: Path) -> None:
    """tests/playbooks/manifest_rules.yml on four local nodes: the manifest action's host statuses
    and not_measured, and the pair plan reading round 1's failed launch from the hosts' variables."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  vars:\n    ansible_connection: local\n"
        f"    ansible_python_interpreter: {sys.executable}\n"
        "  children:\n    gpu_nodes:\n      hosts:\n"
        + "".join(f"        {name}: {{}}\n" for name in ("n1", "n2", "n3", "n4"))
    )
    run_dir, result = tmp_path / "run", tmp_path / "result.json"
    run_dir.mkdir()
    done = subprocess.run(
        [
            *(str(PLAYBOOK_BIN), "tests/playbooks/manifest_rules.yml", "-i", str(inventory)),
            *("-e", f"collbench_test_run_dir={run_dir}", "-e", f"collbench_test_result={result}"),
        ],
        cwd=REPO,
        env={
            **os.environ,
            "ANSIBLE_HOME": str(REPO / ".ansible"),
            "ANSIBLE_LOCAL_TEMP": str(REPO / ".ansible" / "tmp"),
        },
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert result.is_file(), done.stdout[-3000:] + done.stderr[-3000:]
    manifest = mf.read(run_dir)
    assert {name: (entry.status, entry.reason) for name, entry in manifest.hosts.items()} == {
        "n1": ("timeout", mf.INTRA_TIMEOUT),
        "n2": ("ok", None),
        "n3": ("unreachable", "ssh: connect to host n3: No route to host"),
        "n4": ("failed", mf.LEFT_THE_PLAY),
    }
    seen = json.loads(result.read_text())
    assert seen["written"]["not_measured"] == [["n1", "timeout"], ["n3", "unreachable"], ["n4", "failed"]]
    (pair,) = seen["round1"]["pairs"]
    assert f"round 1: no busbw for {pair['label'][5:]}: launch failed" in seen["round2"]["log"]
