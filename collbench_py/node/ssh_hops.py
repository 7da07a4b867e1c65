#!/usr/bin/env python3
"""Try ssh from this node to each node it will head an mpirun launch to, in parallel.

Run on the node with the standard library alone (Python 3.6 or later), its text given to
`python -c` (nothing is copied to the node):

    ssh_hops.py '{"ssh": ["ssh", "-i", KEY, ...], "timeout_s": 30, "parallel": 16,
                            "from": "node1", "from_dir": "node1",
                            "to": ["node2"], "to_dirs": ["node2"], "addresses": ["10.0.0.12"],
                            "known_hosts": {"path": FILE, "text": LINES}}'

`known_hosts`, when given (a run's own ssh), is written first (0600, in the run's ssh directory that
ssh_setup.py install made): the file the hops' ssh reads.

Each hop runs `ssh ARGS ADDRESS true` as mpirun would start its daemon (same options, same
address), bounded by timeout_s. A hop that fails on the connection itself (refused, reset, timed
out: a busy sshd may drop a burst of new connections) is tried once more; a refused host key or
key is not. Prints a JSON list, one record per hop: from, to, address, ok, rc, error, and
`record` (the manifest's form: hosts by directory name). Exits 0 whatever the hops did.
"""

import concurrent.futures
import json
import os
import subprocess
import sys
import time

# ssh's own words for a refusal that trying again does not change.
FINAL = (
    "Host key verification failed",
    "Permission denied",
    "REMOTE HOST IDENTIFICATION HAS CHANGED",
    "No such file or directory",
    "Could not resolve hostname",
    "Bad configuration option",
)
# The line that says why, when ssh prints several.
TELLING = (
    *FINAL,
    "Connection refused",
    "Connection timed out",
    "timed out",
    "Connection reset",
    "Connection closed",
    "No route to host",
    "Network is unreachable",
    "kex_exchange_identification",
)


def why(stderr, rc):
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for needle in TELLING:
        for line in lines:
            if needle in line:
                return line
    return lines[-1] if lines else f"ssh ended with rc {rc}"


def try_once(ssh, address, timeout_s):
    try:
        done = subprocess.run(  # noqa: UP022 (capture_output is Python 3.7)
            [*ssh, address, "true"],
            check=False,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=timeout_s,
            universal_newlines=True,  # noqa: UP021 (text is Python 3.7)
        )
    except subprocess.TimeoutExpired:
        return None, f"no answer within {timeout_s} s"
    except OSError as exc:
        return None, f"cannot run ssh: {exc}"
    if done.returncode == 0:
        return 0, ""
    return done.returncode, why(done.stderr, done.returncode)


def hop(request, index):
    address = request["addresses"][index]
    rc, error = try_once(request["ssh"], address, request["timeout_s"])
    if rc != 0 and not any(needle in error for needle in FINAL):
        time.sleep(1)
        rc, error = try_once(request["ssh"], address, request["timeout_s"])
    to, to_dir = request["to"][index], request["to_dirs"][index]
    return {
        "from": request["from"],
        "to": to,
        "address": address,
        "ok": rc == 0,
        "rc": rc,
        "error": error,
        "record": {"from": request["from_dir"], "to": to_dir, "error": error},
    }


def write_known_hosts(path, text):
    """In the run's ssh directory, beside the key (made by ssh_setup.py install): 0600."""
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(handle, "w") as out:
        out.write(text)


def main(argv):
    request = json.loads(argv[1])
    if request.get("known_hosts"):
        try:
            write_known_hosts(request["known_hosts"]["path"], request["known_hosts"]["text"])
        except OSError as exc:
            print(f"cannot write {request['known_hosts']['path']}: {exc.strerror or exc}", file=sys.stderr)
            return 1
    count = len(request["to"])
    workers = max(1, min(int(request.get("parallel", 16)), count))
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(lambda i: hop(request, i), range(count)))
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
