#!/usr/bin/env python3
"""Find a node's mpirun programs and what each says of its install; print it as JSON.

Run on the node by the facts role with the Python Ansible uses there (3.6 or later, standard
library only; nodes never import collbench_py):

    python3 mpi_probe.py CANDIDATES_JSON MPI_HOME TIMEOUT_S

Looks at MPI_HOME's bin/mpirun (when MPI_HOME is not empty), the PATH's mpirun, then the
candidates (globs, highest version first); prints {"path_mpirun": the PATH's or null, "mpiruns":
{mpirun: its `ompi_info --path all --parsable`, or null where there is none (not Open MPI)}}.
The choice is made on the controller (collbench_py.facts.mpi).
"""

import glob
import json
import os
import shutil
import subprocess
import sys


def find_mpiruns(candidates, home, limit):
    which = shutil.which("mpirun")
    which = os.path.abspath(which) if which else None
    found = []
    for pattern in (
        ([os.path.join(home, "bin", "mpirun")] if home else []) + ([which] if which else []) + candidates
    ):
        for path in sorted(glob.glob(pattern), reverse=True):
            if os.path.isfile(path) and os.access(path, os.X_OK) and path not in found:
                found.append(path)
    mpiruns = {}
    for mpirun in found:
        root = os.path.dirname(os.path.dirname(mpirun))
        libs = [root + "/lib", root + "/lib64", os.environ.get("LD_LIBRARY_PATH", "")]
        env = dict(os.environ, LC_ALL="C", LD_LIBRARY_PATH=":".join(p for p in libs if p))
        argv = [os.path.join(os.path.dirname(mpirun), "ompi_info"), "--path", "all", "--parsable"]
        try:
            done = subprocess.run(
                argv,
                check=False,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                stdin=subprocess.DEVNULL,
                env=env,
                timeout=limit,
            )
            mpiruns[mpirun] = done.stdout.decode("utf-8", "replace") if done.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired):
            mpiruns[mpirun] = None
    return {"path_mpirun": which, "mpiruns": mpiruns}


if __name__ == "__main__":
    print(json.dumps(find_mpiruns(json.loads(sys.argv[1]), sys.argv[2], float(sys.argv[3]))))
