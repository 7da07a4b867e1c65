#!/usr/bin/env python3
"""Check a tool's binaries on this node in one module run: where they are, that each is there and
executable, and what the controller needs to judge the first of them.

Run on the node by the nccl_tests, nvbandwidth and perftest roles with the Python Ansible uses there
(3.6 or later, standard library only; nodes never import collbench_py), its text given to
`python -c`. Read-only: it looks and reports; the roles' asserts decide.

    python3 -c "$(cat binaries_check.py)" REQUEST_JSON

REQUEST_JSON:
    dirs      candidate directories, in order: the first that holds binaries[0] is used
    binaries  file names that must be there and executable (by their owner, as `find`'s xusr)
    ld_library_path
              the library path the launches use ("" or absent: the system's), for the two below
    ldd       true: ldd on binaries[0] (LC_ALL=C: its messages are matched in English)
    run       null, or [ARG, ...]: binaries[0] run with these arguments (what it says it can do)
    contains  null, or TEXT: whether binaries[0] holds these bytes (an option compiled in)
    timeout   seconds each program may run

Prints {"dir": DIR or null, "missing": [names not there or not executable in DIR], "ldd": {"rc",
"stdout", "stderr"} or null, "ran": {"rc", "stdout", "stderr"} or null, "contains": true, false or
null}; nothing past "dir" is looked at when DIR is null, nor past "missing" when binaries[0] is
missing. Exit status 0, or 2 when REQUEST_JSON cannot be read.
"""

import json
import mmap
import os
import stat
import subprocess
import sys


def executable(path):
    """A regular file (links followed) its owner may run."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISREG(mode) and bool(mode & stat.S_IXUSR)


def run(argv, timeout, env=None):
    """{rc, stdout, stderr}: 124 when it ran past the timeout, 127 when it cannot be run."""
    try:
        done = subprocess.run(  # noqa: UP022 (capture_output is Python 3.7)
            argv,
            check=False,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return {"rc": 124, "stdout": "", "stderr": f"timed out after {timeout:g} s"}
    except OSError as exc:
        return {"rc": 127, "stdout": "", "stderr": str(exc)}
    return {
        "rc": done.returncode,
        "stdout": done.stdout.decode("utf-8", "replace"),
        "stderr": done.stderr.decode("utf-8", "replace"),
    }


def holds(path, text):
    """Whether the file holds `text`'s bytes (grep -a -F, without loading a large binary whole)."""
    try:
        with open(path, "rb") as handle:
            if os.fstat(handle.fileno()).st_size == 0:
                return False
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return data.find(text.encode("utf-8")) >= 0
    except OSError:
        return False


def check(request):
    binaries = request["binaries"]
    timeout = float(request.get("timeout") or 120)
    first = binaries[0]
    answer = {"dir": None, "missing": list(binaries), "ldd": None, "ran": None, "contains": None}
    found = [d for d in request["dirs"] if os.path.lexists(os.path.join(d, first))]
    if not found:
        return answer
    where = answer["dir"] = found[0]
    answer["missing"] = [name for name in binaries if not executable(os.path.join(where, name))]
    if first in answer["missing"]:
        return answer
    path = os.path.join(where, first)
    env = dict(os.environ, LC_ALL="C")
    env.pop("LD_LIBRARY_PATH", None)
    if request.get("ld_library_path"):
        env["LD_LIBRARY_PATH"] = request["ld_library_path"]
    if request.get("ldd"):
        answer["ldd"] = run(["ldd", path], timeout, env)
    if request.get("run") is not None:
        answer["ran"] = run([path, *request["run"]], timeout, env)
    if request.get("contains"):
        answer["contains"] = holds(path, request["contains"])
    return answer


def main(argv):
    try:
        request = json.loads(argv[1])
        if not isinstance(request.get("dirs"), list) or not request.get("binaries"):
            raise ValueError("dirs and binaries are required")
    except (IndexError, ValueError, AttributeError) as exc:
        print(f"usage: binaries_check.py REQUEST_JSON ({exc})", file=sys.stderr)
        return 2
    print(json.dumps(check(request)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
