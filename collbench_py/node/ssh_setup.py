#!/usr/bin/env python3
"""Install, or remove, a run's ssh key on this node, in one module run per node.

Run on the node with the standard library alone (Python 3.6 or later), its text given to
`python -c` (nothing is copied to the node):

    install '{"dir": D, "key": D/id_ed25519, "ssh_home": ~/.ssh, "authorized_keys": F,
              "public_key": LINE, "address": A, "scan_timeout_s": 5}'   (private key on stdin)
    remove  '{"dir": D, "authorized_keys": F, "comment": "collbench-run-ID", "keyed": true}'

`install` makes D (0700), writes the private key read from standard input (0600, never in argv),
authorises the public key line in F (created 0600, the line added once) and asks the node's own
sshd for its host keys (`ssh-keyscan` against the node's address: the keys mpirun's ssh will be
shown). `remove` removes every line of F that ends with the run's comment, and D. Both print one
JSON object: changed, and error (null, or what went wrong, said once) and, for install, host_keys
("type key" per key sshd serves) and scan_error. They exit 0: the caller decides.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile


def private_dirs(path):
    """Make `path` and each missing directory above it with mode 0700 (as Ansible's file module
    does with a mode given): the run's directories on a node are nobody else's to read. Also in
    stage_files.py: a node program stands alone (its text is all the node gets)."""
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        path = os.path.dirname(path)
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:  # made meanwhile by another run's process: it chose its mode
            continue
        os.chmod(folder, 0o700)  # whatever the umask


def private_dir(path):
    """Make `path` as above, and make it 0700 if it was there (sshd refuses a ~/.ssh others can write)."""
    private_dirs(path)
    os.chmod(path, 0o700)


def write_private(path, text):
    """Write `text` to `path`, mode 0600 from its creation: never readable by others, not even briefly.
    A link is followed: the file it points to is replaced, the link stays."""
    path = os.path.realpath(path)
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def authorise(path, line):
    """Add `line` to authorized_keys `path` (created 0600) unless it is there."""
    text = ""
    if os.path.exists(path):
        with open(path) as keys:
            text = keys.read()
    if line in text.splitlines():
        return
    if text and not text.endswith("\n"):
        text += "\n"
    write_private(path, text + line + "\n")


def scan(address, timeout_s):
    """The host keys the node's sshd serves on `address`, as "type key"; and why none, if none."""
    argv = ["ssh-keyscan", "-T", str(timeout_s), "-t", "ed25519,ecdsa,rsa", address]
    try:
        done = subprocess.run(  # noqa: UP022 (capture_output is Python 3.7)
            argv,
            check=False,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=int(timeout_s) + 30,
            universal_newlines=True,  # noqa: UP021 (text is Python 3.7)
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"ssh-keyscan {address}: {exc}"
    keys = []
    for line in done.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 3 and not fields[0].startswith("#"):
            keys.append(f"{fields[1]} {fields[2]}")
    return keys, "" if keys else done.stderr.strip()[:200]


def install(request, private_key):
    private_dir(request["dir"])
    write_private(request["key"], private_key)
    private_dir(request["ssh_home"])
    authorise(request["authorized_keys"], request["public_key"])
    keys, why = scan(request["address"], request.get("scan_timeout_s", 5))
    return {"changed": True, "host_keys": keys, "scan_error": why}


def remove(request):
    changed = False
    path = request["authorized_keys"]
    if request.get("keyed") and os.path.exists(path):
        with open(path) as keys:
            lines = keys.read().splitlines()
        ours = re.compile(r"\s" + re.escape(request["comment"]) + "$")
        kept = [line for line in lines if not ours.search(line)]
        if len(kept) != len(lines):
            write_private(path, "".join(line + "\n" for line in kept))
            changed = True
    if os.path.lexists(request["dir"]):
        shutil.rmtree(request["dir"])
        changed = True
    return {"changed": changed}


def main(argv):
    action, request = argv[1], json.loads(argv[2])
    try:
        result = install(request, sys.stdin.read()) if action == "install" else remove(request)
        result["error"] = None
    except OSError as exc:
        result = {"changed": False, "error": f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": ")}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
