#!/usr/bin/env python3
"""Run one benchmark launch on a node, bounded in time, and end every process of it.

This file is copied to the nodes and run there with the system python (3.6 or later, standard
library only; nodes never import collbench_py):

    python3 launch_wrapper.py --timeout-s N --kill-after-s K --match DIR [--gpu-link-csv FILE] -- ARGV...

ARGV runs with umask 077 in a session of its own, its stdout and stderr going to files as it
prints (so that no process of the launch ever holds the pipes the caller waits on, and a killed
launch still leaves its partial output). At N seconds the launch gets SIGTERM: its process group,
every descendant, and every process whose command line names DIR (torchrun starts its workers in
sessions of their own, mpirun's ranks in groups of their own: only their command lines tie them
to the launch). K seconds later whatever of them remains gets SIGKILL (a stopped process dies of
nothing else). The same cleanup runs when the child ends by itself (anything it left behind) and
when this wrapper gets SIGTERM, SIGINT or SIGHUP. The child is reaped only after it: until then its
pid, which is its process group's id, cannot be another process's.

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
import base64
import collections
import contextlib
import datetime
import json
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
# Files of a launch at most this big come back inside the answer; bigger ones are fetched.
INLINE_MAX = 8 << 20
# ssh to another host of the launch (prepare, sweep): how long one may take.
REMOTE_TIMEOUT_S = 60


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


def spawn(command, stdout, stderr, env=None):
    """The child, in a session of its own; (process, None) or (None, (exit code, message))."""
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            env=None if env is None else dict(os.environ, **env),
        )
    except FileNotFoundError:
        return None, (EXIT_NOT_FOUND, f"{command[0]}: command not found")
    except OSError as error:
        return None, (EXIT_CANNOT_RUN, f"{command[0]}: {error.strerror or error}")
    return process, None


def ended(process):
    """Whether the child has ended, left unreaped: until it is reaped its pid, which is also its
    process group's id, is no other process's, so the cleanup's signals to the group and to its
    descendants reach the launch's processes and no one else's."""
    if process.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except (AttributeError, ChildProcessError):  # no waitid here, or reaped already: as poll says
        return process.poll() is not None


def wait_for(process, deadline, signals):
    """Until the child ends, the deadline passes or a signal arrives: 'ended', 'timeout' or 'signal'."""
    while True:
        if ended(process):
            return "ended"
        if signals.received is not None:
            return "signal"
        left = deadline - time.monotonic()
        if left <= 0:
            return "timeout"
        time.sleep(min(POLL_S, left))


def wait_gone(launch, seconds):
    """Until nothing of the launch lives (a zombie counts as gone), or `seconds` pass."""
    deadline = time.monotonic() + seconds
    while True:
        if not launch.living() or time.monotonic() >= deadline:
            return
        time.sleep(POLL_S)


def end_launch(launch, process, kill_after_s):
    """TERM to everything of the launch, KILL to what remains `kill_after_s` later; how many were hit.
    The child is reaped only then (see `ended`)."""
    launch.signal(signal.SIGTERM)
    wait_gone(launch, kill_after_s)
    if launch.living():
        launch.signal(signal.SIGKILL)
        wait_gone(launch, GONE_WAIT_S)
    process.poll()
    return len(launch.signalled)


def exit_code_of(returncode):
    return 128 - returncode if returncode < 0 else returncode


# How one command is bounded: --timeout-s, --kill-after-s, --match, --gpu-link-csv.
Bound = collections.namedtuple("Bound", "timeout_s kill_after_s match gpu_link_csv")
# What it did: stdout and stderr are the child's, as bytes; stderr ends with the bound's status line.
Ran = collections.namedtuple("Ran", "status code started ended killed stdout stderr")


def bounded_run(command, bound, signals, env=None):
    """Run `command` under `bound` (a Bound): a Ran."""
    timeout_s, kill_after_s, match, gpu_link_csv = bound
    out_fd, out_path = output_file("out")
    err_fd, err_path = output_file("err")
    try:
        started = utc_now()
        deadline = time.monotonic() + timeout_s
        process, failure = spawn(command, out_fd, err_fd, env)
        os.close(out_fd)
        os.close(err_fd)
        if failure is not None:
            code, message = failure
            return Ran("failed", code, started, utc_now(), 0, b"", f"{PROG}: {message}\n".encode())
        sampler = LinkSampler(gpu_link_csv) if gpu_link_csv else None
        if sampler is not None:
            sampler.start()
        how = wait_for(process, deadline, signals)
        if sampler is not None:
            sampler.finish()
        killed = end_launch(Launch(process.pid, match), process, kill_after_s)
        if how == "timeout":
            status, code = "timeout", EXIT_TIMEOUT
        elif how == "signal":
            status, code = "interrupted", 128 + signals.received
        else:
            code = exit_code_of(process.returncode)
            status = "ok" if code == 0 else "failed"
        ended = utc_now()
        line = f"{PROG}: status={status} rc={code} started={started} ended={ended} killed={killed}\n"
        err = read_file(err_path) + line.encode()
        return Ran(status, code, started, ended, killed, read_file(out_path), err)
    finally:
        for path in (out_path, err_path):
            with contextlib.suppress(OSError):
                os.unlink(path)


def read_file(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def run(options, command):
    os.umask(0o077)
    signals = Signals()
    bound = Bound(options.timeout_s, options.kill_after_s, options.match, options.gpu_link_csv)
    ran = bounded_run(command, bound, signals)
    for data, stream in ((ran.stdout, sys.stdout.buffer), (ran.stderr, sys.stderr.buffer)):
        with contextlib.suppress(OSError):  # the reader is gone (the caller was killed)
            stream.write(data)
            stream.flush()
    return ran.code


# ---------------------------------------------------------------- a plan: the whole launch in one call


def read_plan(stream):
    """The plan given on stdin (JSON), checked enough that a bad one is one line."""
    try:
        plan = json.load(stream)
    except ValueError as error:
        raise UsageError(f"the plan on stdin is not JSON: {error}") from None
    if not isinstance(plan, dict) or not isinstance(plan.get("steps"), list):
        raise UsageError("the plan needs `steps`, a list")
    for step in plan["steps"]:
        if not isinstance(step, dict) or not step.get("argv") or not isinstance(step["argv"], list):
            raise UsageError("every step of the plan needs `argv`, a non-empty list")
        step["match"] = checked_match(step.get("match", ""))
        for key in ("timeout_s", "kill_after_s"):
            if not isinstance(step.get(key), (int, float)) or step[key] < (1e-9 if key == "timeout_s" else 0):
                raise UsageError(f"step {step.get('name')!r}: {key} must be a number above 0")
    return plan


def prepare_here(prepare):
    """The launch directories, the nccl-tests links and the mpirun hostfile on this host."""
    for directory in prepare.get("dirs") or ():
        os.makedirs(directory, mode=0o700, exist_ok=True)
    for source, link in prepare.get("links") or ():
        with contextlib.suppress(FileNotFoundError):
            os.unlink(link)
        os.symlink(source, link)
    for path, text in prepare.get("hostfiles") or ():
        temporary = f"{path}.{os.getpid()}.tmp"
        with open(temporary, "w") as handle:
            handle.write(text)
        os.replace(temporary, path)


def quoted(word):
    """One word for the remote shell ssh hands the command to."""
    return "'" + word.replace("'", "'\\''") + "'"


def pattern_of(directory):
    """`directory` as a literal in pkill's extended regular expression."""
    return "".join("\\" + c if c in ".[]{}()\\*+?^$|" else c for c in directory)


def on_host(rsh, host, line):
    """`line`, a shell line whose every word is quoted, run on `host` over the ssh mpirun uses: ''
    when it worked, else why not. The launch's own ssh options come first: ssh keeps the first."""
    argv = [*rsh, "-o", "BatchMode=yes", "-o", "ConnectTimeout=15", host, line]
    try:
        done = subprocess.run(  # noqa: UP022 (capture_output is Python 3.7)
            argv,
            check=False,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=REMOTE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"{host}: no answer in {REMOTE_TIMEOUT_S} s"
    except OSError as error:
        return f"{host}: {argv[0]}: {error.strerror or error}"
    if done.returncode == 0:
        return ""
    last = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
    return f"{host}: rc {done.returncode} {last[0]}".rstrip()


def prepare_remote(remote):
    """The directories and links the launch's other hosts need (mpirun starts the same paths
    there): one ssh per host, before the first mpirun."""
    remote = remote or {}
    dirs, links = remote.get("dirs") or [], remote.get("links") or []
    if not remote or not remote.get("hosts") or not (dirs or links):
        return []
    # `umask 077 && mkdir -p -- D && ln -sfn -- S L`: every word quoted, `&&` between commands.
    command = " && ".join(
        ["umask 077", " ".join(["mkdir", "-p", "--", *map(quoted, dirs)])]
        + [" ".join(["ln", "-sfn", "--", quoted(src), quoted(dst)]) for src, dst in links]
    )
    return [error for error in on_every_host(remote["rsh"], remote["hosts"], command) if error]


def on_every_host(rsh, hosts, line):
    """on_host on every host at once (a launch across all hosts has many): the answers in order."""
    answers = [""] * len(hosts)

    def one(index):
        answers[index] = on_host(rsh, hosts[index], line)

    threads = [threading.Thread(target=one, args=(index,)) for index in range(len(hosts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def sweep(remote, match):
    """After a failed step under mpirun: whatever of it runs on the other hosts (the daemons, the
    ranks) is killed there, as this host's own are by the bound."""
    if not remote or not remote.get("hosts"):
        return []
    line = "exec pkill -KILL -f " + quoted(pattern_of(match))
    answers = on_every_host(remote["rsh"], remote["hosts"], line)
    return [answers[i] or f"{host}: swept" for i, host in enumerate(remote["hosts"])]


def brought_back(paths, inline_max):
    """({name: base64}, [bigger paths]) of the files of `paths` that exist."""
    inline, large = {}, []
    for path in paths:
        try:
            size = os.path.getsize(path)
        except OSError:
            continue
        if size > inline_max:
            large.append(path)
            continue
        data = read_file(path)
        inline[os.path.basename(path)] = base64.b64encode(data).decode("ascii")
    return inline, large


def step_result(step, ran):
    return {
        "name": step.get("name", ""),
        "status": ran.status,
        "rc": ran.code,
        "started": ran.started,
        "ended": ran.ended,
        "killed": ran.killed,
        "stdout": ran.stdout.decode("utf-8", "replace"),
        "stderr": ran.stderr.decode("utf-8", "replace"),
    }


def run_plan(plan):
    """Prepare, run each step under its own bound one after another, sweep after a failed one, and
    answer one JSON object on stdout."""
    os.umask(0o077)
    signals = Signals()
    remote = plan.get("remote")
    prepare = plan.get("prepare") or {}
    inline_max = int(plan.get("inline_max", INLINE_MAX))
    problems = []
    try:
        prepare_here(prepare)
    except OSError as error:
        problems.append(f"this host: {error}")
    problems += prepare_remote(remote)
    results = []
    for step in plan["steps"]:
        if problems or signals.received is not None:
            why = "not started: " + ("; ".join(problems) if problems else "the launch was interrupted")
            now = utc_now()
            code = EXIT_CANNOT_RUN if problems else 128 + signals.received
            status = "failed" if problems else "interrupted"
            said = f"{PROG}: {why}\n".encode()
            results.append(step_result(step, Ran(status, code, now, now, 0, b"", said)))
            continue
        bound = Bound(step["timeout_s"], step["kill_after_s"], step["match"], step.get("gpu_link_csv") or "")
        env = {str(k): str(v) for k, v in (step.get("env") or {}).items()}
        result = step_result(step, bounded_run(step["argv"], bound, signals, env))
        result["files"], result["large"] = brought_back(step.get("files") or (), inline_max)
        if result["status"] != "ok":
            result["swept"] = sweep(remote, step["match"])
        results.append(result)
    json.dump({"steps": results}, sys.stdout)
    sys.stdout.write("\n")
    sys.stdout.flush()
    # The launch's own outcome is in the answer; this is whether the plan could be carried out.
    return 0 if signals.received is None else 128 + signals.received


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--plan", "-"]:
        try:
            plan = read_plan(sys.stdin)
        except UsageError as error:
            sys.stderr.write(f"{PROG}: {error}\n")
            return EXIT_USAGE
        return run_plan(plan)
    try:
        options, command = parse_args(argv)
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
