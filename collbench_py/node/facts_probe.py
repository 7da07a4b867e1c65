#!/usr/bin/env python3
"""Run the facts role's read-only probes on a node, each bounded in time; print their output as JSON.

Run on the node by the facts role with the Python Ansible uses there (3.6 or later, standard
library only; nodes never import collbench_py):

    python3 facts_probe.py PROBES_JSON TIMEOUT_S

PROBES_JSON is a list of [name, argv]. Every probe runs in this one process (not one Ansible task
each), as an argv list with LC_ALL=C and its own time limit: a hung nvidia-smi is a probe that
timed out (rc 124), not a hung phase; a tool that is not installed answers rc 127. Prints
{name: {"rc": int, "stdout": str}}. The text is turned into facts on the controller
(collbench_py.facts.hostfacts).
"""

import json
import os
import subprocess
import sys


def run_probes(probes, limit):
    env = dict(os.environ, LC_ALL="C")
    out = {}
    for name, argv in probes:
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
            rc, text = done.returncode, done.stdout.decode("utf-8", "replace")
        except subprocess.TimeoutExpired:
            rc, text = 124, ""
        except OSError:
            rc, text = 127, ""
        out[name] = {"rc": rc, "stdout": text.rstrip("\r\n")}
    return out


if __name__ == "__main__":
    print(json.dumps(run_probes(json.loads(sys.argv[1]), float(sys.argv[2]))))
