"""Drive bench.yml through ansible-runner: follow its events, show progress, keep every error.

`run_playbook` is the library side of `collbench run`: the same job as `ansible-playbook bench.yml`,
started in the project directory (so its ansible.cfg applies), with a live display built from the
runner's events and an outcome that says which run directory the playbook opened, what the report
step returned, and every failed task and unreachable host, as Ansible said them.

SIGINT or SIGTERM stops the run as Ctrl-C stops `ansible-playbook`: the signal is passed on as SIGINT
(Ansible stops its workers and exits), a second signal or a playbook still running after a grace
period is killed; then the run directory's manifest says `interrupted`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import ansible_runner

import collbench_py
from collbench_py.rundir.load import mark_interrupted

PLAYBOOK = "bench.yml"
LAUNCH_PREFIX = "Launch | "
LAUNCH_ACTION = "collbench_launch"  # roles/benchmark/tasks/launch.yml
LAUNCH_FACT = "__benchmark_launch"  # what each host launches: kind, hosts, label
ROUND_ACTION = "collbench_round"  # roles/benchmark/tasks/pair_round.yml: a round of pairs, one task
# Ansible's own complaints arrive as plain text, not as task events.
_ANSIBLE_MESSAGE = re.compile(r"^\s*(\[WARNING\]|\[ERROR\]|ERROR!|\[DEPRECATION WARNING\])")
_INVENTORY_TROUBLE = re.compile(
    r"Unable to parse .* as an inventory source|No inventory was parsed|Failed to parse inventory"
    r"|Completely failed to parse inventory"
)
_RUN_LINE = re.compile(r"^run (?P<id>\S+): (?P<dir>/.+)$")
MESSAGE_LINES = 6
# How long ansible-playbook may take to stop after the SIGINT passed on to it, before it is killed.
STOP_GRACE_S = 30.0


class RunnerError(Exception):
    """The playbook cannot be started (one line for the user)."""


@dataclass(frozen=True)
class PlaybookRequest:
    """What to run. `extra_vars` are the user's `-e` values, passed as given; `collbench_vars` are
    the command's own variables, written to a file in the runner's private directory."""

    inventories: tuple[str, ...] = ()
    extra_vars: tuple[str, ...] = ()
    limit: str | None = None
    tags: str | None = None
    skip_tags: str | None = None
    check: bool = False
    verbosity: int = 0
    passthrough: tuple[str, ...] = ()
    collbench_vars: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskProblem:
    """A failed task or an unreachable host, with Ansible's own message."""

    kind: str  # failed, unreachable
    host: str
    task: str
    message: str
    ignored: bool = False

    def lines(self) -> list[str]:
        label = {"failed": "FAILED", "unreachable": "UNREACHABLE"}[self.kind]
        suffix = " (ignored by the playbook)" if self.ignored else ""
        head, *rest = self.message.splitlines() or [""]
        out = [f"{label} {self.host}: {self.task}: {head}{suffix}"]
        out += [f"    {line}" for line in rest[:MESSAGE_LINES]]
        if len(rest) > MESSAGE_LINES:
            out.append(f"    ... ({len(rest) - MESSAGE_LINES} more lines)")
        return out


@dataclass(frozen=True)
class PlaybookOutcome:
    ansible_rc: int
    status: str  # ansible-runner's: successful, failed, canceled, timeout
    run_id: str | None
    run_dir: Path | None
    report_rc: int | None  # None when the report step did not run
    report_lines: tuple[str, ...]
    problems: tuple[TaskProblem, ...]
    ansible_messages: tuple[str, ...]
    elapsed_s: float
    interrupted: bool = False  # stopped by SIGINT or SIGTERM; the manifest says so

    @property
    def inventory_trouble(self) -> list[str]:
        return [m for m in self.ansible_messages if _INVENTORY_TROUBLE.search(m)]


def find_project_dir(explicit: str | None = None) -> Path:
    """The directory holding bench.yml and its ansible.cfg: --project-dir, else $COLLBENCH_PROJECT_DIR,
    else the current directory, else the checkout this package lives in. A directory the user named
    (the option or the variable) must hold bench.yml: falling back to another checkout would run its
    playbooks and write the results there, not where the user looks for them."""
    named = [(explicit, "--project-dir"), (os.environ.get("COLLBENCH_PROJECT_DIR"), "COLLBENCH_PROJECT_DIR")]
    for candidate, source in named:
        if candidate:
            if not (Path(candidate) / PLAYBOOK).is_file():
                raise RunnerError(
                    f"{source} {candidate}: no {PLAYBOOK} there (it names the collbench checkout "
                    f"holding {PLAYBOOK}, ansible.cfg and the playbooks)"
                )
            return Path(candidate).resolve()
    for candidate in (os.getcwd(), str(Path(collbench_py.__file__).resolve().parent.parent)):
        if (Path(candidate) / PLAYBOOK).is_file():
            return Path(candidate).resolve()
    raise RunnerError(f"cannot find {PLAYBOOK}: run from the collbench checkout or pass --project-dir")


def check_extra_vars(values: Sequence[str]) -> None:
    """Each `-e` value read as ansible-playbook reads it (key=value, YAML/JSON, @file), so that a
    malformed one is named as such: Ansible reads them while loading the inventory and would blame
    the inventory."""
    # Ansible's own parsers, imported here: loading them costs a second the other commands never need.
    from ansible.errors import AnsibleError  # noqa: PLC0415
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415
    from ansible.parsing.splitter import parse_kv  # noqa: PLC0415

    expected = "expected key=value, a YAML/JSON mapping or @FILE"
    for value in values:
        if not value:
            continue
        try:
            if value.startswith("@"):
                data = DataLoader().load_from_file(value[1:])
            elif value[0] in "/.":
                raise RunnerError(f"bad -e value {value!r}: a file is given as @{value}")
            elif value[0] in "[{":
                data = DataLoader().load(value)
            else:
                data = parse_kv(value)
        except AnsibleError as exc:
            reason = (str(exc).splitlines() or ["unreadable"])[0]
            if value.startswith("@") and not Path(value[1:]).expanduser().is_file():
                reason = "no such file"
            raise RunnerError(f"bad -e value {value!r}: {reason}") from None
        if not isinstance(data, Mapping) or "_raw_params" in data:
            raise RunnerError(f"bad -e value {value!r}: {expected}")


def resolve_inventory(source: str) -> str:
    """An inventory path made absolute (the playbook runs in the project directory); a host list
    (`a,b,`) is passed as it is. A path that does not exist is an error before Ansible starts."""
    if "," in source:
        return source
    path = Path(source).expanduser()
    if not path.exists():
        raise RunnerError(f"inventory {source}: no such file or directory")
    return str(path.resolve())


def ansible_environment(project_dir: Path) -> dict[str, str]:
    """Variables for the ansible-playbook process: the venv's bin on PATH (ansible-runner starts
    `ansible-playbook` by name: rc 127 without it), and an unparsable inventory made fatal."""
    venv_bin = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "/usr/bin:/bin")
    env = {"PATH": path if path.split(os.pathsep)[0] == venv_bin else f"{venv_bin}{os.pathsep}{path}"}
    env.setdefault(
        "ANSIBLE_INVENTORY_UNPARSED_FAILED", os.environ.get("ANSIBLE_INVENTORY_UNPARSED_FAILED", "True")
    )
    # Keep Ansible's files in the checkout, not in the home directory, unless the user chose a place.
    env["ANSIBLE_HOME"] = os.environ.get("ANSIBLE_HOME", str(project_dir / ".ansible"))
    env["ANSIBLE_LOCAL_TEMP"] = os.environ.get("ANSIBLE_LOCAL_TEMP", str(project_dir / ".ansible" / "tmp"))
    env["ANSIBLE_NOCOLOR"] = "1"
    return env


def command_line(request: PlaybookRequest) -> list[str]:
    """ansible-playbook arguments besides the playbook and the inventories (ansible-runner adds those)."""
    args: list[str] = []
    for value in request.extra_vars:
        args += ["-e", value]
    if request.limit:
        args += ["--limit", request.limit]
    if request.tags:
        args += ["--tags", request.tags]
    if request.skip_tags:
        args += ["--skip-tags", request.skip_tags]
    if request.check:
        args.append("--check")
    if request.verbosity:
        args.append("-" + "v" * request.verbosity)
    return args + list(request.passthrough)


# ---- following the events -----------------------------------------------------------------------------


@dataclass
class LaunchState:
    label: str  # the task's, i.e. its first host's
    labels: set[str]  # every launch the task's hosts run (a round of pairs runs several)
    started: float


class Tracker:
    """What the events say so far: the phase, the current task and its hosts, the launches in
    flight, the run directory, the report step's result, and every problem."""

    def __init__(self, clock=time.monotonic, echo_verbose: bool = False) -> None:
        self.clock = clock
        self.echo_verbose = echo_verbose  # with -v: every line Ansible prints outside task events
        self._message_open = False
        self.started = clock()
        self.phase: str | None = None
        self.task: str | None = None
        self.task_hosts: set[str] = set()
        self.task_done: set[str] = set()
        self.launch_label_of: dict[str, str] = {}  # host -> label of its described launch
        self.launch: LaunchState | None = None
        self.task_action = ""
        self.task_started = 0.0
        self.run_id: str | None = None
        self.run_dir: Path | None = None
        self.report_rc: int | None = None
        self.report_lines: list[str] = []
        self.problems: list[TaskProblem] = []
        self.messages: list[str] = []
        self.playbook_pid: int | None = None  # ansible-playbook's own process, from its first event

    def elapsed(self) -> float:
        return self.clock() - self.started

    def handle(self, event: Mapping[str, Any]) -> list[str]:
        """Update from one ansible-runner event; return the lines to print now (errors, launches)."""
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "verbose":
            return self._verbose(str(event.get("stdout") or ""))
        self._message_open = False
        if kind == "playbook_on_start" and isinstance(event.get("pid"), int):
            self.playbook_pid = event["pid"]
        if kind == "playbook_on_play_start":
            return self._play(str(data.get("play") or data.get("name") or "").strip())
        if kind == "playbook_on_task_start":
            return self._task(data)
        host = str(data.get("host") or "")
        res = data.get("res") if isinstance(data.get("res"), dict) else {}
        if kind == "runner_on_start":
            self.task_hosts.add(host)
            if self.launch is not None:
                self.launch.labels.add(self.launch_label_of.get(host, self.launch.label))
            return []
        if kind in ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable"):
            self.task_done.add(host)
            self.task_hosts.add(host)
            self._facts(res, str(data.get("task") or ""))
            self._report_result(res)
        if kind == "runner_on_ok" and self.task_action.endswith(ROUND_ACTION):
            return self._round_done(res)
        if kind == "runner_on_failed":
            return self._problem("failed", host, data, res)
        if kind == "runner_on_unreachable":
            return self._problem("unreachable", host, data, res)
        if kind in ("runner_item_on_failed",) and not data.get("ignore_errors"):
            return []  # the task's own runner_on_failed follows with every item's message
        return []

    def _verbose(self, text: str) -> list[str]:
        # Ansible prints a message over several verbose events, one line each: a head line
        # ([WARNING]: ..., [ERROR]: ...) then its explanation until the next head or task event.
        out = []
        for line in (line.rstrip() for line in text.splitlines()):
            if _ANSIBLE_MESSAGE.match(line):
                self.messages.append(line)
                self._message_open = True
                out.append(line)
            elif self._message_open and line.strip():
                self.messages[-1] += "\n" + line
                if self.messages[-1].lstrip().startswith(("[ERROR]", "ERROR!")):
                    out.append(f"    {line}")
            elif self.echo_verbose and line.strip():
                out.append(line)
        return out

    def _play(self, name: str) -> list[str]:
        out = self.finish_launch()
        self.phase = name
        self.task = None
        self.task_hosts, self.task_done = set(), set()
        return [*out, f"[{clock_text(self.elapsed())}] phase: {name}"]

    def _task(self, data: Mapping[str, Any]) -> list[str]:
        out = self.finish_launch()
        name = str(data.get("task") or data.get("name") or "").strip()
        self.task = name
        self.task_hosts, self.task_done = set(), set()
        action = str(data.get("task_action") or "")
        self.task_action = action
        self.task_started = self.clock()
        label = name[len(LAUNCH_PREFIX) :]
        # The launch's one task (action collbench_launch) is named after its first host's launch.
        described = set(self.launch_label_of.values())
        if name.startswith(LAUNCH_PREFIX) and action.endswith(LAUNCH_ACTION) and label in described:
            self.launch = LaunchState(label=label, labels=set(), started=self.clock())
        return out

    def _round_done(self, res: Mapping[str, Any]) -> list[str]:
        """One line per round of pairs: its launches and how they ended."""
        launches = [x for x in res.get("launches") or () if isinstance(x, dict)]
        if not launches:
            return []
        rounds = {x.get("round") for x in launches}
        statuses = Counter(str(x.get("status")) for x in launches)
        said = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items()))
        lost = sorted(res.get("lost") or ())
        return [
            f"[{clock_text(self.elapsed())}] round {', '.join(str(r) for r in sorted(rounds, key=str))} done:"
            f" {len(launches)} launches ({said}) in {self.clock() - self.task_started:.0f} s"
            + (f"; lost {', '.join(lost)}" if lost else "")
        ]

    def finish_launch(self) -> list[str]:
        launch, self.launch = self.launch, None
        if launch is None or not self.task_hosts:
            return []
        failed = {p.host for p in self.problems if p.task == self.task}
        labels = ", ".join(sorted(launch.labels)) or launch.label
        return [
            f"[{clock_text(self.elapsed())}] launch done: {labels} on {', '.join(sorted(self.task_hosts))}"
            f" in {self.clock() - launch.started:.0f} s"
            + (f" ({len(failed)} host(s) failed)" if failed else "")
        ]

    def _facts(self, res: Mapping[str, Any], task: str) -> None:
        facts = res.get("ansible_facts") if isinstance(res.get("ansible_facts"), dict) else {}
        run = facts.get("collbench_run")
        if isinstance(run, dict) and run.get("run_dir"):
            self.run_dir = Path(str(run["run_dir"]))
            self.run_id = str(run.get("run_id") or self.run_dir.name)
        launch = facts.get(LAUNCH_FACT)
        if isinstance(launch, dict) and launch.get("label"):
            for host in launch.get("hosts") or []:
                self.launch_label_of[str(host)] = str(launch["label"])
        msg = res.get("msg")
        if self.run_dir is None and isinstance(msg, str) and (match := _RUN_LINE.match(msg.strip())):
            self.run_id, self.run_dir = match["id"], Path(match["dir"])

    def _report_result(self, res: Mapping[str, Any]) -> None:
        cmd = res.get("cmd")
        if not isinstance(cmd, list) or len(cmd) < 4 or cmd[1:3] != ["-m", "collbench_py"]:
            return
        if cmd[3] != "report" or not isinstance(res.get("rc"), int):
            return
        self.report_rc = res["rc"]
        self.report_lines = [*str(res.get("stdout") or "").splitlines()]
        self.report_lines += [*str(res.get("stderr") or "").splitlines()]

    def _problem(self, kind: str, host: str, data: Mapping[str, Any], res: Mapping[str, Any]) -> list[str]:
        problem = TaskProblem(
            kind=kind,
            host=host,
            task=str(data.get("task") or self.task or "?"),
            message=result_message(res),
            ignored=bool(data.get("ignore_errors")),
        )
        self.problems.append(problem)
        return problem.lines()

    def status_line(self) -> str:
        parts = [f"[{clock_text(self.elapsed())}]", self.phase or "starting"]
        if self.task:
            parts.append(self.task)
        if self.task_hosts:
            parts.append(f"{len(self.task_done)}/{len(self.task_hosts)} hosts")
        if self.launch is not None:
            labels = ", ".join(sorted(self.launch.labels)) or self.launch.label
            parts.append(f"in flight: {labels} ({self.clock() - self.launch.started:.0f} s)")
        return " · ".join(parts)


def result_message(res: Mapping[str, Any]) -> str:
    """Ansible's reason for a failed task: its msg, and for a command the rc and the output's tail."""
    lines: list[str] = []
    msg = res.get("msg")
    if msg:
        lines.append(msg if isinstance(msg, str) else json.dumps(msg))
    if isinstance(res.get("rc"), int) and res.get("cmd") is not None:
        lines.append(f"rc {res['rc']}")
    for key in ("stderr", "stdout"):
        text = res.get(key)
        if isinstance(text, str) and text.strip():
            tail = text.strip().splitlines()[-MESSAGE_LINES:]
            lines += [f"{key}: {line}" for line in tail]
            break
    results = res.get("results")
    if isinstance(results, list) and not lines[1:]:
        for item in results:
            if isinstance(item, dict) and item.get("failed") and item.get("msg"):
                lines.append(f"item {item.get('item', '?')}: {item['msg']}")
    return "\n".join(lines) or "no message"


def clock_text(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes:02d}:{secs:02d}"


# ---- showing it ---------------------------------------------------------------------------------------


class Display:
    """Plain lines (not a terminal): phases, launches, problems, and a heartbeat while a task runs."""

    def __init__(self, tracker: Tracker, stream: TextIO, heartbeat_s: float = 30.0) -> None:
        self.tracker = tracker
        self.stream = stream
        self.heartbeat_s = heartbeat_s
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._last_output = tracker.clock()
        self._thread = threading.Thread(target=self._tick_loop, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        with self.lock:
            self._clear()

    def event(self, event: Mapping[str, Any]) -> bool:
        with self.lock:
            lines = self.tracker.handle(event)
            if self.tracker.launch is not None and event.get("event") == "runner_on_start":
                lines = self._launch_started(event) + lines
            if lines:
                self._print(lines)
            self._redraw()
        return True  # ansible-runner keeps the event

    def _launch_started(self, event: Mapping[str, Any]) -> list[str]:
        launch = self.tracker.launch
        if launch is None or len(self.tracker.task_hosts) != 1:
            return []
        return [f"[{clock_text(self.tracker.elapsed())}] launch started: {launch.label}"]

    def print(self, lines: Sequence[str]) -> None:
        with self.lock:
            self._print(lines)
            self._redraw()

    def _print(self, lines: Sequence[str]) -> None:
        self._clear()
        for line in lines:
            self.stream.write(line + "\n")
        self.stream.flush()
        self._last_output = self.tracker.clock()

    def _tick_loop(self) -> None:
        while not self._stop.wait(self._tick_s()):
            with self.lock:
                self._tick()

    def _tick_s(self) -> float:
        return min(5.0, self.heartbeat_s)

    def _tick(self) -> None:
        if self.tracker.task and self.tracker.clock() - self._last_output >= self.heartbeat_s:
            self._print([f"{self.tracker.status_line()} (still running)"])

    def _redraw(self) -> None:
        pass

    def _clear(self) -> None:
        pass


class LiveDisplay(Display):
    """On a terminal: one status line redrawn in place every second, problems printed above it."""

    def _tick_s(self) -> float:
        return 1.0

    def _tick(self) -> None:
        self._redraw()

    def _redraw(self) -> None:
        width = shutil.get_terminal_size((100, 20)).columns - 1
        line = self.tracker.status_line()
        if len(line) > width:
            line = line[: width - 1] + "…"
        self.stream.write("\r\x1b[2K" + line)
        self.stream.flush()

    def _clear(self) -> None:
        self.stream.write("\r\x1b[2K")

    def event(self, event: Mapping[str, Any]) -> bool:
        # Launch start/end lines are for logs; the status line shows them live.
        with self.lock:
            lines = [
                line
                for line in self.tracker.handle(event)
                if ("] launch " not in line and "] phase: " not in line) or "FAILED" in line
            ]
            if lines:
                self._print(lines)
            self._redraw()
        return True


def make_display(tracker: Tracker, stream: TextIO | None = None, live: bool | None = None) -> Display:
    stream = stream or sys.stdout
    if live is None:
        live = stream.isatty() and os.environ.get("TERM", "") != "dumb"
    return (LiveDisplay if live else Display)(tracker, stream)


# ---- running it ---------------------------------------------------------------------------------------


class Interruption:
    """SIGINT and SIGTERM while the playbook runs: the first is passed on to ansible-playbook as
    SIGINT, so that it stops its workers and exits; `cancel` (ansible-runner's cancel callback, which
    then kills the playbook) says yes on a second signal, after the grace period, or at once when
    the playbook's process is not known yet."""

    def __init__(self, tracker: Tracker, grace_s: float = STOP_GRACE_S, clock=time.monotonic) -> None:
        self.tracker = tracker
        self.grace_s = grace_s
        self.clock = clock
        self.signals = 0
        self.first_at: float | None = None

    @property
    def interrupted(self) -> bool:
        return self.signals > 0

    def handle(self, _signum: int, _frame: object) -> None:
        self.signals += 1
        if self.first_at is None:
            self.first_at = self.clock()
            if self.tracker.playbook_pid is not None:
                try:
                    os.kill(self.tracker.playbook_pid, signal.SIGINT)
                except OSError:
                    self.tracker.playbook_pid = None  # gone already: nothing to wait for

    def cancel(self) -> bool:
        if self.first_at is None:
            return False
        waited = self.clock() - self.first_at
        return self.signals > 1 or self.tracker.playbook_pid is None or waited > self.grace_s

    @contextmanager
    def trapping(self) -> Iterator[None]:
        """Our handlers for SIGINT and SIGTERM while the playbook runs (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def run_playbook(
    request: PlaybookRequest, project_dir: Path, display: Display, *, keep_artifacts: Path | None = None
) -> PlaybookOutcome:
    """Run bench.yml with ansible-runner and follow it through `display`."""
    inventories = [resolve_inventory(i) for i in request.inventories]
    check_extra_vars(request.extra_vars)
    private_dir = Path(tempfile.mkdtemp(prefix="collbench-runner-"))
    interruption = Interruption(display.tracker)
    try:
        if request.collbench_vars:
            # A file read with `-e @file`: our own variables never show on a command line.
            env_dir = private_dir / "env"
            env_dir.mkdir()
            extravars = env_dir / "extravars"
            extravars.write_text(json.dumps(dict(request.collbench_vars)), encoding="utf-8")
            extravars.chmod(0o600)
        display.start()
        try:
            with interruption.trapping():
                result = ansible_runner.run(
                    private_data_dir=str(private_dir),
                    project_dir=str(project_dir),
                    playbook=PLAYBOOK,
                    inventory=inventories or None,
                    cmdline=shlex.join(command_line(request)),
                    envvars=ansible_environment(project_dir),
                    event_handler=display.event,
                    cancel_callback=interruption.cancel,
                    quiet=True,
                    suppress_env_files=True,
                )
        finally:
            display.stop()
        tracker = display.tracker
        trailing = tracker.finish_launch()
        if trailing:
            display.print(trailing)
        interrupted = interruption.interrupted or result.status == "canceled"
        if interrupted and tracker.run_dir is not None:
            mark_interrupted(tracker.run_dir)
        if keep_artifacts is not None:
            shutil.copytree(private_dir / "artifacts", keep_artifacts, dirs_exist_ok=True)
        return PlaybookOutcome(
            ansible_rc=int(result.rc if result.rc is not None else 1),
            status=str(result.status),
            run_id=tracker.run_id,
            run_dir=tracker.run_dir,
            report_rc=tracker.report_rc,
            report_lines=tuple(tracker.report_lines),
            problems=tuple(tracker.problems),
            ansible_messages=tuple(tracker.messages),
            elapsed_s=tracker.elapsed(),
            interrupted=interrupted,
        )
    finally:
        shutil.rmtree(private_dir, ignore_errors=True)
