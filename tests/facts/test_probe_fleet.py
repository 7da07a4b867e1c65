"""What the facts phase's one controller task decides per node (collbench_py/facts/probe_fleet.py):
a node's own settings win over the task's and a bad one is refused by name; the ranks of a node
for the run's backend, or why it cannot run it; what torch and the probes said, kept as the
per-node tasks kept it; the MPI looked for again only for another home."""

from __future__ import annotations

import pytest

from collbench_py.facts import probe_fleet

DEFAULTS = {
    "collbench_probe_timeout_s": "120",  # templated values reach the task as text
    "collbench_mpi_home": "",
    "collbench_gpus_per_host": None,
    "collbench_cpu_procs_per_host": 2,
}
GPU8 = {
    "vendor": "nvidia",
    "count": 8,
    "probe": "answered",
    "tool": "nvidia-smi",
    "rc": None,
    "torch_devices": 8,
}
NO_GPU = {"vendor": None, "count": 0, "probe": "none", "tool": None, "rc": None, "torch_devices": 0}


def test_a_node_s_own_setting_wins_over_the_task_s() -> None:
    settings = probe_fleet.node_settings(
        {"collbench_gpus_per_host": "4", "collbench_mpi_home": "/opt/hpcx"}, DEFAULTS
    )
    assert settings == {
        "collbench_probe_timeout_s": 120,
        "collbench_mpi_home": "/opt/hpcx",
        "collbench_gpus_per_host": 4,
        "collbench_cpu_procs_per_host": 2,
    }
    assert probe_fleet.node_settings({}, DEFAULTS)["collbench_gpus_per_host"] is None


@pytest.mark.parametrize(
    ("own", "said"),
    [
        ({"collbench_probe_timeout_s": 0}, "collbench_probe_timeout_s must be at least 1"),
        ({"collbench_probe_timeout_s": "a while"}, "collbench_probe_timeout_s must be a whole number"),
        ({"collbench_gpus_per_host": "all"}, "collbench_gpus_per_host must be a whole number"),
    ],
)
def test_a_setting_that_cannot_work_is_refused_by_name(own: dict, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        probe_fleet.node_settings(own, DEFAULTS)


@pytest.mark.parametrize(
    ("own", "gpu", "backend", "has_torch", "ranks"),
    [
        ({}, GPU8, "nccl-tests", False, 8),  # one rank per GPU
        ({"collbench_gpus_per_host": 2}, GPU8, "nccl-tests", False, 2),  # pinned wins
        ({}, {**GPU8, "torch_devices": 4}, "torch", True, 4),  # what torch sees
        ({}, NO_GPU, "torch", True, 2),  # torch on CPUs: collbench_cpu_procs_per_host
        ({"collbench_cpu_procs_per_host": 6}, NO_GPU, "torch", True, 6),
    ],
)
def test_the_ranks_of_a_node(own: dict, gpu: dict, backend: str, has_torch: bool, ranks: int) -> None:
    settings = probe_fleet.node_settings(own, DEFAULTS)
    assert probe_fleet.ranks_for(settings, gpu, backend, has_torch=has_torch, python="py", host="n1") == (
        ranks,
        None,
    )


def test_a_node_that_cannot_run_the_backend_says_why() -> None:
    settings = probe_fleet.node_settings({}, DEFAULTS)
    ranks, why = probe_fleet.ranks_for(
        settings, NO_GPU, "nccl-tests", has_torch=False, python="py", host="n1"
    )
    assert ranks == 0 and why.startswith("n1 cannot run the nccl-tests backend: it has no GPU")
    _, why = probe_fleet.ranks_for(
        settings, NO_GPU, "torch", has_torch=False, python="/usr/bin/python3", host="n1"
    )
    assert why.startswith("n1 cannot run the torch backend: /usr/bin/python3 cannot import torch")


def test_what_the_probes_said_is_kept_as_the_per_node_tasks_kept_it() -> None:
    results = {
        "gpu_query": {"rc": 124, "stdout": ""},
        "rocm_smi": {"rc": 127, "stdout": ""},
        "torch": {"rc": 0, "stdout": 'import warning\n{"torch": "2.13.0", "devices": 3}\n'},
        "hostname": {"rc": 0, "stdout": "gpu-01\n"},
    }
    outputs, rcs, unanswered = probe_fleet.kept(results)
    assert set(outputs) == {"torch", "hostname"}
    assert rcs == {"gpu_query": 124, "rocm_smi": 127, "torch": 0, "hostname": 0}
    assert unanswered == ["gpu_query"]
    assert probe_fleet.gpu_fact(outputs, rcs)["torch_devices"] == 3  # the last line of torch's answer
    assert probe_fleet.gpu_fact({"torch": "no json here"}, {"torch": 0})["torch_devices"] == 0
    document = probe_fleet.facts_document(
        "n1", {"nodename": "ignored", "memtotal_mb": 2048}, outputs, unanswered, "T"
    )
    assert (document["hostname"], document["memory_mib"], document["unanswered"]) == (
        "gpu-01",
        2048,
        ["gpu_query"],
    )
    assert probe_fleet.facts_text({"b": 1, "a": "é"}) == '{\n  "a": "é",\n  "b": 1\n}\n'


def test_the_mpi_is_looked_for_again_only_for_another_home() -> None:
    assert probe_fleet.mpi_wanted({}, "")
    assert not probe_fleet.mpi_wanted({"__facts_mpi_probed_home": ""}, "")
    assert probe_fleet.mpi_wanted({"__facts_mpi_probed_home": ""}, "/opt/hpcx")
    assert probe_fleet.launcher_for("auto", "torch") == "torchrun"
    assert probe_fleet.launcher_for("auto", "nccl-tests") == "mpirun"
    assert probe_fleet.launcher_for("srun", "nccl-tests") == "srun"
