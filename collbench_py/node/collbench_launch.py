#!/usr/bin/env python3
"""Run one benchmark launch on a node, bounded in time, and end every process of it.

This file is copied to the nodes and run there with the system python (3.6 or later, standard
library only; nodes never import collbench_py):

    python3 collbench_launch.py --timeout-s N --kill-after-s K --match DIR [--gpu-link-csv FILE] -- ARGV...

ARGV runs with umask 077 in a session of its own, its stdout and stderr going to files as it
prints (so that no process of the launch ever holds the pipes the caller waits on, and a killed
launch still leaves its partial output). At N seconds the launch gets SIGTERM: its process group,
every descendant, and every process whose command line names DIR (torchrun starts its workers in
sessions of their own, mpirun's ranks in groups of their own: only their command lines tie them
to the launch). K seconds later whatever of them remains gets SIGKILL (a stopped process dies of
nothing else). The same cleanup runs when the child ends by itself (anything it left behind) and
when this wrapper gets SIGTERM, SIGINT or SIGHUP.

At the end the child's output is copied to this wrapper's stdout and stderr, then one last line
on stderr gives the outcome and the true times:

    collbench-launch: status=timeout rc=124 started=2026-05-01T10:00:00.125Z ended=...Z killed=3

Exit code: the child's (128+N when it died of signal N), 124 after the timeout (as coreutils
`timeout`), 128+N when this wrapper got signal N, 127 when the program is not found and 126 when
it cannot be run (as a shell), 2 for bad arguments.

`--gpu-link-csv FILE`: while the child runs, every 2 s, the GPUs' PCIe links are read with
nvidia-smi; FILE gets, per bus id, the highest current generation and width seen (nvidia-smi:
the current link "may be reduced when the GPU is not in use", so only a link under load says what
it can do). Same columns as the query, no header; not written when no sample answered.
"""

import argparse
import collections
import contextlib
import datetime
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

PROG = "collbench-launch"
EXIT_USAGE = 2
EXIT_TIMEOUT = 124
EXIT_CANNOT_RUN = 126
EXIT_NOT_FOUND = 127
POLL_S = 0.1
# After SIGKILL: how long to wait for the processes to be gone (one in uninterruptible sleep may
# take longer; it is reported in the count, not waited for).
GONE_WAIT_S = 3.0
SAMPLE_EVERY_S = 2.0
NVIDIA_SMI_TIMEOUT_S = 5.0
LINK_FIELDS = (
    "pci.bus_id",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
)
COPY_CHUNK = 1 << 20


class UsageError(Exception):
    """Bad arguments: one line on stderr, exit 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def parse_args(argv):
    """(options, command): the options before `--`, the command after it."""
    if "--" not in argv:
        raise UsageError("no command: give it after `--`")
    split = argv.index("--")
    command = argv[split + 1 :]
    if not command or not command[0]:
        raise UsageError("no command after `--`")
    parser = _Parser(prog=PROG, add_help=False)
    parser.add_argument("--timeout-s", type=float, required=True)
    parser.add_argument("--kill-after-s", type=float, required=True)
    parser.add_argument("--match", required=True)
    parser.add_argument("--gpu-link-csv", default="")
    options = parser.parse_args(argv[:split])
    if not options.timeout_s > 0:
        raise UsageError(f"--timeout-s must be above 0, not {options.timeout_s:g}")
    if not options.kill_after_s >= 0:
        raise UsageError(f"--kill-after-s must be 0 or above, not {options.kill_after_s:g}")
    options.match = checked_match(options.match)
    return options, command


def checked_match(path):
    """The launch directory whose processes are ended. Anything short of a launch's own directory
    (a relative path, `/`, `/tmp`) would name processes that are not the launch's."""
    normal = os.path.normpath(path) if path else ""
    if not os.path.isabs(normal) or len([part for part in normal.split("/") if part]) < 2:
        raise UsageError(
            f"--match must be an absolute path two levels deep or more (the launch's directory), not {path!r}"
        )
    return normal


def utc_now():
    now = datetime.datetime.now(datetime.timezone.utc)  # noqa: UP017 (datetime.UTC is Python 3.11)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


# ---------------------------------------------------------------- the processes of a launch


# One entry of /proc, read once. (pid, start) names a process, not a later one given the same pid.
Process = collections.namedtuple("Process", "pid state ppid pgrp start args")


def read_process(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read()
    except OSError:  # gone meanwhile, or not ours to read
        return None
    # The command name may hold spaces and parentheses: the fields start after the last `)`.
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        state, ppid, pgrp, start = fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[19])
    except (IndexError, ValueError):
        return None
    return Process(pid, state, ppid, pgrp, start, cmdline.split(b"\0"))


def all_processes():
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    found = (read_process(int(name)) for name in names if name.isdigit())
    return [process for process in found if process is not None]


def ancestors_of(pid):
    """`pid` and its parent chain: never to be signalled, whatever their command lines say."""
    chain = set()
    while pid > 0 and pid not in chain:
        chain.add(pid)
        process = read_process(pid)
        if process is None:
            break
        pid = process.ppid
    return chain


_PATH_CHARACTERS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


def names_directory(args, directory):
    """Whether an argument holds `directory` as a whole path (`DIR`, `DIR/x`, `--out=DIR`), not as
    the start of another name (`DIR-2`, `DIR0`)."""
    size = len(directory)
    for arg in args:
        index = arg.find(directory)
        while index >= 0:
            before = arg[index - 1] if index > 0 else None
            after = arg[index + size] if index + size < len(arg) else None
            if before not in _PATH_CHARACTERS and before != ord("/") and after not in _PATH_CHARACTERS:
                return True
            index = arg.find(directory, index + 1)
    return False


def descendants(processes, root):
    children = {}
    for process in processes:
        children.setdefault(process.ppid, []).append(process.pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


class Launch:
    """What belongs to the launch started as `leader`: its process group, its descendants, every
    process naming its directory, and whatever of these was signalled once (a descendant whose parent
    died is adopted elsewhere and is no one's descendant any more); never this wrapper or its parents."""

    def __init__(self, leader, directory):
        self.leader = leader
        self.directory = os.fsencode(directory)
        self.spared = ancestors_of(os.getpid())
        self.signalled = set()

    def belongs(self, process, family):
        return (
            process.pgrp == self.leader
            or process.pid in family
            or (process.pid, process.start) in self.signalled
            or names_directory(process.args, self.directory)
        )

    def living(self):
        processes = all_processes()
        family = descendants(processes, self.leader)
        return [
            process
            for process in processes
            if process.pid not in self.spared
            and process.state not in ("Z", "X")
            and self.belongs(process, family)
        ]

    def signal(self, signum):
        """Send `signum` to every living process of the launch."""
        targets = self.living()
        with contextlib.suppress(OSError):  # the group is empty or gone
            os.killpg(self.leader, signum)
        for process in targets:
            with contextlib.suppress(OSError):
                os.kill(process.pid, signum)
        self.signalled.update((process.pid, process.start) for process in targets)


# ---------------------------------------------------------------- PCIe links under load


def link_number(text):
    try:
        return int(text)
    except ValueError:
        return None


def higher(old, new):
    """The higher of two cells: a number wins over text ([N/A]); the first text seen otherwise."""
    if old is None:
        return new
    old_number, new_number = link_number(old), link_number(new)
    if new_number is not None and (old_number is None or new_number > old_number):
        return new
    return old


class LinkSampler:
    """Samples the GPUs' PCIe links with nvidia-smi in a thread; keeps per bus id the highest values."""

    def __init__(self, path):
        self.path = path
        self.best = {}
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.running = None
        self.thread = threading.Thread(target=self.loop, name="gpu-link-sampler")
        self.thread.daemon = True

    def start(self):
        self.thread.start()

    def loop(self):
        while not self.stopping.wait(SAMPLE_EVERY_S):
            output = self.query()
            if output is not None:
                self.merge(output)

    def query(self):
        argv = ["nvidia-smi", "--query-gpu=" + ",".join(LINK_FIELDS), "--format=csv,noheader,nounits"]
        with self.lock:
            if self.stopping.is_set():
                return None
            try:
                self.running = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
                )
            except OSError:  # no nvidia-smi on this node
                return None
        process = self.running
        try:
            output, _ = process.communicate(timeout=NVIDIA_SMI_TIMEOUT_S)
        except subprocess.TimeoutExpired:  # nvidia-smi hangs on a GPU in a bad state
            process.kill()
            process.communicate()
            return None
        finally:
            with self.lock:
                self.running = None
        return output.decode("utf-8", "replace") if process.returncode == 0 else None

    def merge(self, output):
        for line in output.splitlines():
            cells = [cell.strip() for cell in line.split(",")]
            if len(cells) != len(LINK_FIELDS) or not cells[0]:
                continue
            kept = self.best.setdefault(cells[0], [None] * (len(LINK_FIELDS) - 1))
            for index, cell in enumerate(cells[1:]):
                kept[index] = higher(kept[index], cell)

    def finish(self):
        """Stop sampling (a sample under way is cut short) and write the file if any sample answered."""
        with self.lock:
            self.stopping.set()
            if self.running is not None and self.running.poll() is None:
                self.running.kill()
        self.thread.join(NVIDIA_SMI_TIMEOUT_S)
        if not self.best:
            return
        rows = [", ".join([bus, *self.best[bus]]) + "\n" for bus in sorted(self.best)]
        temporary = f"{self.path}.{os.getpid()}.tmp"
        try:
            with open(temporary, "w") as handle:
                handle.writelines(rows)
            os.replace(temporary, self.path)
        except OSError as error:
            sys.stderr.write(f"{PROG}: cannot write {self.path}: {error}\n")


# ---------------------------------------------------------------- running it


class Signals:
    """SIGTERM, SIGINT and SIGHUP to this wrapper: remembered, acted on by the main loop."""

    HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)

    def __init__(self):
        self.received = None
        for signum in self.HANDLED:
            signal.signal(signum, self.note)

    def note(self, signum, _frame):
        if self.received is None:
            self.received = signum


def output_file(stream):
    """A private file for the child's `stream`: (descriptor, path)."""
    return tempfile.mkstemp(prefix="collbench-launch-", suffix="." + stream)


def spawn(command, stdout, stderr):
    """The child, in a session of its own; (process, None) or (None, (exit code, message))."""
    try:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, start_new_session=True
        )
    except FileNotFoundError:
        return None, (EXIT_NOT_FOUND, f"{command[0]}: command not found")
    except OSError as error:
        return None, (EXIT_CANNOT_RUN, f"{command[0]}: {error.strerror or error}")
    return process, None


def wait_for(process, deadline, signals):
    """Until the child ends, the deadline passes or a signal arrives: 'ended', 'timeout' or 'signal'."""
    while True:
        if process.poll() is not None:
            return "ended"
        if signals.received is not None:
            return "signal"
        left = deadline - time.monotonic()
        if left <= 0:
            return "timeout"
        time.sleep(min(POLL_S, left))


def wait_gone(launch, process, seconds):
    deadline = time.monotonic() + seconds
    while True:
        process.poll()  # reaps the child once it ends: a zombie counts as gone
        if not launch.living() or time.monotonic() >= deadline:
            return
        time.sleep(POLL_S)


def end_launch(launch, process, kill_after_s):
    """TERM to everything of the launch, KILL to what remains `kill_after_s` later; how many were hit."""
    launch.signal(signal.SIGTERM)
    wait_gone(launch, process, kill_after_s)
    if launch.living():
        launch.signal(signal.SIGKILL)
        wait_gone(launch, process, GONE_WAIT_S)
    return len(launch.signalled)


def copy_out(path, stream):
    try:
        with open(path, "rb") as source:
            while True:
                chunk = source.read(COPY_CHUNK)
                if not chunk:
                    break
                stream.write(chunk)
        stream.flush()
    except OSError:  # the reader is gone (the caller was killed): the file is removed anyway
        pass


def exit_code_of(returncode):
    return 128 - returncode if returncode < 0 else returncode


def run(options, command):
    os.umask(0o077)
    out_fd, out_path = output_file("out")
    err_fd, err_path = output_file("err")
    try:
        signals = Signals()
        started = utc_now()
        deadline = time.monotonic() + options.timeout_s
        process, failure = spawn(command, out_fd, err_fd)
        os.close(out_fd)
        os.close(err_fd)
        if failure is not None:
            code, message = failure
            sys.stderr.write(f"{PROG}: {message}\n")
            return code
        sampler = LinkSampler(options.gpu_link_csv) if options.gpu_link_csv else None
        if sampler is not None:
            sampler.start()
        how = wait_for(process, deadline, signals)
        if sampler is not None:
            sampler.finish()
        killed = end_launch(Launch(process.pid, options.match), process, options.kill_after_s)
        if how == "timeout":
            status, code = "timeout", EXIT_TIMEOUT
        elif how == "signal":
            status, code = "interrupted", 128 + signals.received
        else:
            code = exit_code_of(process.returncode)
            status = "ok" if code == 0 else "failed"
        ended = utc_now()
        copy_out(out_path, sys.stdout.buffer)
        copy_out(err_path, sys.stderr.buffer)
        line = f"{PROG}: status={status} rc={code} started={started} ended={ended} killed={killed}\n"
        sys.stderr.write(line)
        sys.stderr.flush()
        return code
    finally:
        for path in (out_path, err_path):
            with contextlib.suppress(OSError):
                os.unlink(path)


def main(argv=None):
    try:
        options, command = parse_args(sys.argv[1:] if argv is None else argv)
    except UsageError as error:
        sys.stderr.write(f"{PROG}: {error}\n")
        return EXIT_USAGE
    try:
        return run(options, command)
    except OSError as error:  # no temporary directory to write to, /proc unreadable...
        sys.stderr.write(f"{PROG}: {error}\n")
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
