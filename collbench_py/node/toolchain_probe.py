#!/usr/bin/env python3
"""Report what a node has for building nccl-tests or rccl-tests, as one JSON object.

Run on the node by the nccl_tests role with the Python Ansible uses there (3.6 or later, standard
library only; nodes never import collbench_py). Read-only: it looks, it does not choose. The
choice (which CUDA, NCCL, ROCm, which version, which flags) is made on the controller by
collbench_py/facts/toolchain.py from this output.

    python3 toolchain_probe.py REQUEST_JSON

REQUEST_JSON (made by collbench_py.facts.toolchain.probe_request):
    dirs        directories to look in for the toolchain's files (MARKERS)
    globs       patterns of more directories (versioned CUDA toolkits): matches are reported and
                looked in too
    pythons     Pythons to ask where the `nvidia.nccl` package of a nvidia-nccl wheel lives; its
                directories are looked in too
    nvidia_smi  true: ask nvidia-smi for the GPUs' compute capabilities
    rocm_agents true: run bin/rocm_agent_enumerator of every directory that has one
    timeout     seconds each program may run (a hung nvidia-smi is an answer, not a hang)

Prints {"globbed": {pattern: [dir...]}, "wheels": [{"python", "rc", "dirs"}], "files": [path...]
(those of dir/MARKER that exist), "nccl_headers": {dir: [#define lines of the version]},
"nvidia_smi": {"rc", "stdout"} or null, "rocm_agents": {dir: {"rc", "stdout"}}}. Exit status 0,
or 2 when REQUEST_JSON cannot be read.
"""

import glob
import json
import os
import re
import subprocess
import sys

MARKERS = (
    "bin/nvcc",
    "bin/hipcc",
    "bin/rocm_agent_enumerator",
    "include/nccl.h",
    "include/rccl/rccl.h",
    "lib/libnccl.so",
    "lib/libnccl.so.2",
)
VERSION_LINE = re.compile(r"^#define NCCL_(MAJOR|MINOR|PATCH)\s")

# Run by each Python asked: find_spec only locates the package (`nvidia` is a namespace package),
# it imports nothing of NCCL; no wheel prints nothing.
WHEEL_PROBE = """\
import importlib.util
try:
    spec = importlib.util.find_spec("nvidia.nccl")
except (ImportError, ValueError):
    spec = None
for path in (spec.submodule_search_locations or []) if spec is not None else []:
    print(path)
"""


def run(argv, timeout):
    """{rc, stdout}: 124 when it ran past the timeout, 127 when it cannot be run."""
    env = dict(os.environ, LC_ALL="C")
    try:
        done = subprocess.run(
            argv,
            check=False,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env=env,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"rc": 124, "stdout": ""}
    except OSError:
        return {"rc": 127, "stdout": ""}
    return {"rc": done.returncode, "stdout": done.stdout.decode("utf-8", "replace")}


def wheel_dirs(python, timeout):
    answer = run([python, "-c", WHEEL_PROBE], timeout)
    dirs = []
    if answer["rc"] == 0:
        for line in answer["stdout"].splitlines():
            if line.startswith("/"):
                dirs.append(line.rstrip("/"))
    return {"python": python, "rc": answer["rc"], "dirs": dirs}


def version_lines(header):
    try:
        with open(header, encoding="utf-8", errors="replace") as text:
            return [line.rstrip("\n") for line in text if VERSION_LINE.match(line)]
    except OSError:
        return []


def probe(request):
    timeout = float(request.get("timeout") or 120)
    globbed = {}
    for pattern in request.get("globs") or []:
        # Real directories only, as `find -type d` sees them (a link to a toolkit is not another one).
        found = [p for p in glob.glob(pattern) if os.path.isdir(p) and not os.path.islink(p)]
        globbed[pattern] = sorted(found)
    wheels = [wheel_dirs(python, timeout) for python in request.get("pythons") or []]
    dirs = []
    for home in list(request.get("dirs") or []) + [d for found in globbed.values() for d in found]:
        if home not in dirs:
            dirs.append(home)
    for wheel in wheels:
        dirs.extend(d for d in wheel["dirs"] if d not in dirs)
    # lexists: a link is reported as `ls -d` would list it.
    files = [
        home + "/" + marker for home in dirs for marker in MARKERS if os.path.lexists(home + "/" + marker)
    ]
    headers = {}
    for path in files:
        if path.endswith("/include/nccl.h"):
            headers[path[: -len("/include/nccl.h")]] = version_lines(path)
    smi = None
    if request.get("nvidia_smi"):
        smi = run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], timeout)
    agents = {}
    if request.get("rocm_agents"):
        for path in files:
            if path.endswith("/bin/rocm_agent_enumerator"):
                agents[path[: -len("/bin/rocm_agent_enumerator")]] = run([path], timeout)
    return {
        "globbed": globbed,
        "wheels": wheels,
        "files": files,
        "nccl_headers": headers,
        "nvidia_smi": smi,
        "rocm_agents": agents,
    }


def main(argv):
    try:
        request = json.loads(argv[1])
        if not isinstance(request, dict):
            raise ValueError("not an object")
    except (IndexError, ValueError) as err:
        sys.stderr.write(f"toolchain_probe: REQUEST_JSON expected ({err})\n")
        return 2
    print(json.dumps(probe(request)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
