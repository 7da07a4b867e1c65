"""Capture real sinfo output from the Slurm test cluster (tests/cluster/slurm.py) for the Slurm tests.

Run as root from the repository root: `.venv/bin/python -m tests.data.slurm.capture_sinfo`. It builds 8
nodes (all in partition `gpu`, node1-node2 also in `debug`), puts them in the states below with real jobs
and real scontrol commands, and writes the files next to this script (see README.md here).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from collbench_py.slurm import sinfo_argv
from tests.cluster.slurm import SlurmCluster
from tests.cluster.vcluster import Cluster

HERE = Path(__file__).resolve().parent
DOWN_REASON = "bad-gpu | GPU 3 fell off the bus (Xid 79)"  # an admin reason holding the separator


def main() -> None:
    cluster = Cluster.up(nodes=8, name="slcapture")
    slurm = None
    jobs: list[subprocess.Popen] = []
    try:
        slurm = SlurmCluster.up(cluster, extra_partitions={"debug": ["node1", "node2"]})
        sleeper = ["srun", "-N1", "--job-name=capture", "sleep", "600"]
        jobs.append(slurm.popen([*sleeper[:2], "-n1", "-w", "node2", *sleeper[2:]]))  # 1 of 2 CPUs: mixed
        jobs.append(slurm.popen([*sleeper[:2], "-n2", "-w", "node3", *sleeper[2:]]))  # both: allocated
        jobs.append(slurm.popen([*sleeper[:2], "-n1", "-w", "node5", *sleeper[2:]]))  # drained while busy
        slurm.wait_for_states({"node2": "mixed", "node3": "allocated", "node5": "mixed"})
        update = ["scontrol", "update"]
        slurm.run([*update, "NodeName=node4", "State=DOWN", f"Reason={DOWN_REASON}"], check=True)
        slurm.run([*update, "NodeName=node5", "State=DRAIN", "Reason=busbw low, recheck"], check=True)
        slurm.run([*update, "NodeName=node6", "State=DRAIN", "Reason=maintenance"], check=True)
        for pid, line in slurm.processes().items():  # node7's slurmd dies: not responding, then down
            if line.startswith("slurmd") and pid in cluster.processes("node7"):
                subprocess.run(["kill", "-9", str(pid)], check=True)
        slurm.wait_for_states({"node7": "idle*"}, timeout=60)
        write("sinfo-gpu-not-responding.txt", slurm.run(sinfo_argv("gpu"), check=True).stdout)
        slurm.wait_for_states({"node7": "down*"}, timeout=60)
        write("sinfo-gpu.txt", slurm.run(sinfo_argv("gpu"), check=True).stdout)
        write("sinfo-all-partitions.txt", slurm.run(sinfo_argv(), check=True).stdout)
        write("sinfo-summary.txt", slurm.run(["sinfo"], check=True).stdout)
        write("sinfo-nodes-expression.txt", slurm.run(sinfo_argv(nodes="node[3-5,9]"), check=True).stdout)
    finally:
        for job in jobs:
            job.kill()
        if slurm:
            slurm.down()
        cluster.down(remove_workdir=True)


def write(name: str, text: str) -> None:
    (HERE / name).write_text(text)
    print(f"{name}: {len(text.splitlines())} lines at {time.strftime('%H:%M:%S')}")


if __name__ == "__main__":
    main()
