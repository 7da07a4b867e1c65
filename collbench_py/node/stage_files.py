#!/usr/bin/env python3
"""Put the run's programs on this node and make its run directory, in one module run per node.

Run on the node with the standard library alone (Python 3.6 or later), its text given to
`python -c`, the request as JSON on standard input (the programs' text is too long for argv):

    {"dirs": [RUN_ROOT], "files": [[PATH, TEXT], ...]}

Every directory is made with mode 0700, every file written with mode 0700 (the launches run them)
and replaced only when its text or mode differs, atomically: a launch of another run reading the
old file never sees half of the new one. Prints one JSON object: changed (the paths made or
written) and error (null, or what went wrong, said once). Exits 0: the caller decides.
"""

import json
import os
import stat
import sys
import tempfile

MODE = 0o700


def private_dirs(path):
    """Make `path` and each missing directory above it with mode 0700 (as Ansible's file module
    does with a mode given): the run's directories on a node are nobody else's to read. Also in
    ssh_setup.py: a node program stands alone (its text is all the node gets)."""
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


def make_dir(path):
    made = not os.path.isdir(path)
    private_dirs(path)
    if stat.S_IMODE(os.stat(path).st_mode) != MODE:
        os.chmod(path, MODE)
        made = True
    return made


def same(path, text):
    try:
        with open(path, encoding="utf-8") as old:
            return old.read() == text and stat.S_IMODE(os.stat(path).st_mode) == MODE
    except (OSError, UnicodeDecodeError):
        return False


def put(path, text):
    if same(path, text):
        return False
    folder = os.path.dirname(path)
    private_dirs(folder)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temporary, MODE)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
    return True


def main():
    request = json.load(sys.stdin)
    changed = []
    try:
        for path in request.get("dirs", []):
            if make_dir(path):
                changed.append(path)
        for path, text in request.get("files", []):
            if put(path, text):
                changed.append(path)
        error = None
    except OSError as exc:
        error = f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": ")
    print(json.dumps({"changed": changed, "error": error}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
