"""The controller's cost per round of pairs, on SSH test clusters of 8 to 64 hosts.

For each cluster size: builds a test cluster (tests/cluster/vcluster.py: network namespaces, real
sshd; needs root), runs `bench.yml` of a checkout (`--repo`, default this one) on it, pairs phase
only, with a trivial launch (the torch benchmark over gloo, one collective, 1 KiB, one iteration),
and stops it once `--rounds` rounds after the first have run. Per round:

- round wall: from the start of the round's first task to the start of the next round's (the
  ansible-runner events' own clock, `playbook_on_task_start` of "Describe this host's pair launch"
  before the rounds were started from one controller task, "Start the launches of round N" after);
- launch: from the first launch's start to the last launch's end in that round, as the nodes
  timed them (the command's `start`/`end` before one task per launch, the wrapper's `started`/
  `ended` in the `collbench_launch` result, then in the `commands` of the `collbench_round` result);
- controller cost = round wall - launch: what Ansible and the controller add to every round. On
  the test cluster the nodes share the controller's cores, so this includes the nodes' own work
  (sshd, module runs, torch start-up) done one after another;
- controller CPU, the controller side alone, sampled from /proc at each round's start: `main`, the
  ansible-playbook process itself (the strategy loop: serial), and `workers`, everything that
  descends from it (its forked workers and their ssh clients, counted through the parent's
  cumulative child times once reaped and live otherwise) plus the ssh master connections of the
  run's ControlPath directory (ControlPersist detaches them from ansible-playbook). The node side
  runs under each node's sshd and descends from none of these. Workers run in parallel across
  forks on a real controller.

A real controller's round is then modelled as launch + main + workers / min(cores, forks) (the
nodes work in parallel on their own CPUs); `--cores` sets the cores assumed (8 by default).

The fixed phases before the rounds (preflight, provision, facts, build, node checks, the ssh
between the nodes, the benchmark's preparation) are timed the same way, play by play, with a fit
of each one's controller CPU per host.

Round 1 opens the connections and is shown apart; the median of the next rounds is the figure. The
fits (cost, main, workers = a + b x hosts) are least squares over the cluster sizes. The schedule is
the round robin at every size, so that each size has enough rounds.

    python benchmarks/controller_cost.py --nodes 8,16,32,64 --out after.json
    python benchmarks/controller_cost.py --repo /path/to/other/checkout --out before.json
    python benchmarks/controller_cost.py --compare before.json after.json
    python benchmarks/controller_cost.py --nodes 32 --faults   # the adaptive plan's every round

This is a benchmark, not a test: it prints figures and asserts nothing. On a shared, loaded machine
the figures move from run to run: compare runs taken one after the other, by their ratios.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import ansible_runner  # noqa: E402 - after the checkout is importable

from tests.cluster.test_bench_e2e import TEST_PROFILE  # noqa: E402
from tests.cluster.test_nccl_e2e import TEST_PROFILE as NCCL_PROFILE  # noqa: E402
from tests.cluster.test_pairs_adaptive import bad_link, pipeline_vars, shape_fleet  # noqa: E402
from tests.cluster.vcluster import Cluster, ansible_env, install_nccl_tests_standin  # noqa: E402

FAULTS_SEED = "controller-cost-1"

# The first task of each round: one task per host before (its pair launch described), one
# controller task after (the round's launches started, collbench_round).
ROUND_TASKS = ("Describe this host's pair launch", "Start the launches of round ")
COMMAND_TIME = "%Y-%m-%d %H:%M:%S.%f"  # the command module's start/end (the launch ran with TZ=UTC)


def event_time(event: dict[str, Any]) -> float:
    """ansible-runner stamps its events in UTC, without a zone."""
    return datetime.fromisoformat(event["created"]).replace(tzinfo=UTC).timestamp()


def wrapper_time(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def command_time(text: str) -> float:
    return datetime.strptime(text, COMMAND_TIME).replace(tzinfo=UTC).timestamp()


CLOCK_TICK_S = 1 / os.sysconf("SC_CLK_TCK")
CPU_KEYS = ("main", "workers")


@dataclass(frozen=True)
class ProcTimes:
    ppid: int
    own_s: float  # utime + stime
    children_s: float  # cutime + cstime: the children it has reaped


def read_proc_times(pid: int) -> ProcTimes | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:  # gone since the listing
        return None
    fields = text.rsplit(")", 1)[1].split()  # the name may hold spaces; fields from "state" on
    ticks = [int(f) for f in fields[11:15]]  # utime stime cutime cstime
    return ProcTimes(
        int(fields[1]), (ticks[0] + ticks[1]) * CLOCK_TICK_S, (ticks[2] + ticks[3]) * CLOCK_TICK_S
    )


def read_cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def all_processes() -> dict[int, ProcTimes]:
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (times := read_proc_times(int(entry))) is not None:
            table[int(entry)] = times
    return table


def descendants(table: dict[int, ProcTimes], root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, times in table.items():
        children.setdefault(times.ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def find_playbook(table: dict[int, ProcTimes]) -> int | None:
    """ansible-runner's ansible-playbook: the topmost one among this process's descendants."""
    mine = descendants(table, os.getpid())
    found = [pid for pid in mine if "ansible-playbook" in read_cmdline(pid)]
    return next((pid for pid in found if table[pid].ppid not in found), None)


def controller_cpu(playbook: int, control_dir: Path) -> dict[str, float] | None:
    """CPU seconds so far: `main` (ansible-playbook itself), `workers` (all the rest of the controller
    side: its descendants, reaped or live, and the run's detached ssh master connections)."""
    table = all_processes()
    if playbook not in table:
        return None
    below = descendants(table, playbook)
    masters = [
        pid
        for pid in table
        if pid not in below and pid != playbook and str(control_dir) in (line := read_cmdline(pid))
        and line.startswith("ssh")
    ]  # fmt: skip
    workers = table[playbook].children_s + sum(
        table[p].own_s + table[p].children_s for p in [*below, *masters]
    )
    return {"main": table[playbook].own_s, "workers": workers}


def launch_spans(event: dict[str, Any]) -> list[tuple[float, float]]:
    """The launch's own (start, end) on one host from a task result, old or new form; [] otherwise."""
    if event.get("event") not in ("runner_on_ok", "runner_on_failed"):
        return []
    res = (event.get("event_data") or {}).get("res")
    if not isinstance(res, dict):
        return []
    cmd = res.get("cmd")
    if isinstance(cmd, list) and "--out-dir" in cmd and res.get("start") and res.get("end"):
        return [(command_time(res["start"]), command_time(res["end"]))]
    if isinstance(res.get("commands"), list):  # a round started from one task: every command's steps
        steps = [step for command in res["commands"] for step in command.get("steps") or ()]
    else:
        steps = res.get("steps") if isinstance(res.get("launch"), dict) else None
    return [(wrapper_time(s["started"]), wrapper_time(s["ended"])) for s in steps or () if s.get("started")]


def tiny_vars(scratch: Path) -> dict[str, Any]:
    profile = scratch / "test-cluster-cpu.yml"
    profile.write_text(TEST_PROFILE, encoding="utf-8")
    return {
        "collbench_report_args": ["--profile", str(profile)],
        "collbench_backend": "torch",
        "collbench_python": sys.executable,
        "collbench_provision": False,
        "collbench_net_if": "eth0",
        "collbench_phases": ["pairs"],
        "collbench_pairs": "round-robin",
        "collbench_collectives": ["all_reduce"],
        "collbench_min_bytes": 1024,
        "collbench_max_bytes": 1024,
        "collbench_iters": 1,
        "collbench_warmup_iters": 1,
        "collbench_gpus_per_host": 1,
        "collbench_timeout_s": 300,
        "collbench_results_dir": str(scratch / "results"),
    }


def fault_vars(cluster: Cluster, scratch: Path) -> dict[str, Any]:
    """The adaptive plan on a shaped fleet (tests/cluster/test_pairs_adaptive.py's): one bad node, one
    bad link, nccl-tests stand-ins under mpirun (one command per pair), run to its end. Its
    localisation rounds run a few pairs on a cluster of any size."""
    hosts = list(cluster.hosts)
    bad = (hosts[len(hosts) // 2],)
    link = bad_link(hosts, bad, FAULTS_SEED)
    shape_fleet(cluster, bad, link)
    standin = install_nccl_tests_standin(cluster.workdir / "nccl-tests")
    profile = scratch / "test-cluster-nccl.yml"
    profile.write_text(NCCL_PROFILE, encoding="utf-8")
    return pipeline_vars(standin, profile, seed=FAULTS_SEED) | {
        "collbench_results_dir": str(scratch / "results")
    }


def measure(repo: Path, nodes: int, rounds: int, scratch: Path, faults: bool = False) -> dict[str, Any]:
    """Per round: wall, launch, cost (seconds); and how long the cluster and the run took. With
    `faults`, the adaptive plan on a shaped fleet, every round until the plan is done."""
    started = time.monotonic()
    cluster = Cluster.up(nodes=nodes, name=f"cc{nodes}", workdir=scratch / "cluster", fleet=faults)
    up_s = time.monotonic() - started
    events: list[dict[str, Any]] = []
    round_starts: list[float] = []
    cpu_at_starts: list[dict[str, float] | None] = []
    plays: list[tuple[str, float, dict[str, float] | None]] = []  # each play's start: name, time, CPU
    control = scratch / "cp"
    playbook: list[int] = []

    def cpu_now() -> dict[str, float] | None:
        if not playbook and (pid := find_playbook(all_processes())) is not None:
            playbook.append(pid)
        return controller_cpu(playbook[0], control) if playbook else None

    def keep(event: dict[str, Any]) -> bool:
        events.append(event)
        if event.get("event") == "playbook_on_play_start":
            name = str((event.get("event_data") or {}).get("play") or "")
            plays.append((name, event_time(event), cpu_now()))
        if event.get("event") == "playbook_on_task_start" and str(
            (event.get("event_data") or {}).get("task") or ""
        ).startswith(ROUND_TASKS):
            round_starts.append(event_time(event))
            cpu_at_starts.append(cpu_now())
        return True

    try:
        group_vars = cluster.inventory_path.parent / "group_vars"
        group_vars.mkdir(exist_ok=True)
        settings = fault_vars(cluster, scratch) if faults else tiny_vars(scratch)
        (group_vars / "all.yml").write_text(json.dumps(settings), encoding="utf-8")
        control.mkdir()
        (scratch / "runner").mkdir()
        run_started = time.monotonic()
        env = {k: v for k, v in ansible_env(control).items() if k.startswith(("ANSIBLE", "PATH", "XDG"))}
        result = ansible_runner.run(
            private_data_dir=str(scratch / "runner"),
            project_dir=str(repo),
            playbook="bench.yml",
            inventory=str(cluster.inventory_path),
            envvars=env,
            event_handler=keep,
            # Stop once the wanted rounds are over: the next round (or the phase's end) has begun.
            cancel_callback=lambda: not faults and len(round_starts) > rounds + 1,
            quiet=True,
        )
        run_s = time.monotonic() - run_started
    finally:
        cluster.down(remove_workdir=True)
    spans = [span for event in events for span in launch_spans(event)]
    round_tasks = [
        (event_time(event), float(res["cpu_s"]), len(res["commands"]))
        for event in events
        if event.get("event") == "runner_on_ok"
        and isinstance(res := (event.get("event_data") or {}).get("res"), dict)
        and "cpu_s" in res
        and "commands" in res
    ]
    measured = []
    for index, (start, end) in enumerate(itertools.pairwise(round_starts)):
        inside = [s for s in spans if start <= s[0] < end]
        if not inside:
            continue
        launch = max(s[1] for s in inside) - min(s[0] for s in inside)
        row = {"round": index + 1, "wall": end - start, "launch": launch, "cost": end - start - launch}
        # The round task's own process (collbench_round's cpu_s): the part that does not spread
        # over cores (its threads share one interpreter); absent before the rounds had one task.
        task = [(cpu, commands) for when, cpu, commands in round_tasks if start <= when < end]
        if task:
            row["task"] = sum(cpu for cpu, _ in task)
            row["commands"] = sum(commands for _, commands in task)
        before, after = cpu_at_starts[index], cpu_at_starts[index + 1]
        if before is not None and after is not None:
            row.update({key: after[key] - before[key] for key in CPU_KEYS})
        measured.append(row)
    return {
        "nodes": nodes,
        "repo": str(repo),
        "rc": result.rc,
        "status": result.status,
        "cluster_up_s": up_s,
        "run_s": run_s,
        "rounds": measured,
        "phases": fixed_phases(plays, round_starts[0] if round_starts else None, cpu_at_starts[:1]),
    }


def fixed_phases(
    plays: list[tuple[str, float, dict[str, float] | None]],
    first_round: float | None,
    first_round_cpu: list[dict[str, float] | None],
) -> list[dict[str, Any]]:
    """Each play before the rounds (preflight, facts, build...): wall and controller CPU, from its
    start to the next one's; the benchmark play up to its first round (its preparation)."""
    ends = [(when, cpu) for _, when, cpu in plays[1:]]
    if first_round is not None:
        ends.append((first_round, first_round_cpu[0] if first_round_cpu else None))
    phases = []
    for (name, start, before), (end, after) in zip(plays, ends, strict=False):
        if first_round is not None and start >= first_round:
            break
        row: dict[str, Any] = {"play": name, "wall": end - start}
        if before is not None and after is not None:
            row.update({key: after[key] - before[key] for key in CPU_KEYS})
        phases.append(row)
    return phases


def print_phases(runs: list[dict[str, Any]]) -> None:
    """The fixed phases per size, and per play a fit of its controller CPU per host."""
    sized = [run for run in runs if run.get("phases")]
    if not sized:
        return
    names = list(dict.fromkeys(p["play"] for run in sized for p in run["phases"]))
    print("\nfixed phases (wall s / controller CPU s, main + workers), per cluster size:")
    print(f"{'play':<48}" + "".join(f" {run['nodes']:>13}" for run in sized) + "  CPU per host (fit)")
    for name in names:
        cells, points = [], []
        for run in sized:
            row = next((p for p in run["phases"] if p["play"] == name), None)
            if row is None or "main" not in row:
                cells.append(f" {'-':>13}")
                continue
            cpu = row["main"] + row["workers"]
            cells.append(f" {row['wall']:>5.1f}/{cpu:>7.1f}")
            points.append((run["nodes"], cpu))
        a, b = fit(points) if len(points) > 1 else (float("nan"), float("nan"))
        print(f"{name[:48]:<48}" + "".join(cells) + f"  {b * 1000:7.0f} ms (+ {a:.1f} s)")


def summary(run: dict[str, Any]) -> dict[str, float] | None:
    later = [r for r in run["rounds"] if r["round"] > 1]
    if not later:
        return None
    keys = [k for k in ("wall", "launch", "cost", *CPU_KEYS, "task") if all(k in r for r in later)]
    return {key: statistics.median(r[key] for r in later) for key in keys}


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares cost = a + b x hosts."""
    if len(points) < 2:
        return (points[0][1] if points else 0.0), 0.0
    mean_x = statistics.fmean(x for x, _ in points)
    mean_y = statistics.fmean(y for _, y in points)
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    b = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx if sxx else 0.0
    return mean_y - b * mean_x, b


def solve(matrix: list[list[float]], rhs: list[float]) -> list[float]:
    """Gauss-Jordan with partial pivoting, for the small normal equations below."""
    rows = [[*row, value] for row, value in zip(matrix, rhs, strict=True)]
    size = len(rows)
    for i in range(size):
        pivot = max(range(i, size), key=lambda k: abs(rows[k][i]))
        rows[i], rows[pivot] = rows[pivot], rows[i]
        for k in range(size):
            if k != i and rows[i][i]:
                factor = rows[k][i] / rows[i][i]
                rows[k] = [x - factor * y for x, y in zip(rows[k], rows[i], strict=True)]
    return [row[size] / row[i] if row[i] else 0.0 for i, row in enumerate(rows)]


def fit_cpu(runs: list[dict[str, Any]], key: str) -> tuple[float, float, float] | None:
    """Least squares over every round 2+ of every size: cpu = a + b x hosts + c x round wall. The
    c term is what a process burns while it waits (ansible-playbook polls its workers' results): it
    follows the round's wall time, not the hosts, and is off the critical path on a real controller,
    whose round is then modelled with a + b x hosts alone."""
    rows = [
        (1.0, run["nodes"], r["wall"], r[key])
        for run in runs
        for r in run["rounds"]
        if r["round"] > 1 and key in r
    ]
    if len({row[1] for row in rows}) < 2:
        return None
    matrix = [[sum(row[i] * row[j] for row in rows) for j in range(3)] for i in range(3)]
    a, b, c = solve(matrix, [sum(row[i] * row[3] for row in rows) for i in range(3)])
    return a, b, c


def modelled_round_s(got: dict[str, float], cores: int, forks: int, nodes: int) -> float:
    """A real controller's round: the launch, the serial main process, the workers spread over
    min(cores, forks, hosts) (a round's tasks run one worker per host)."""
    return got["launch"] + got["main"] + got["workers"] / min(cores, forks, nodes)


def print_runs(name: str, runs: list[dict[str, Any]], cores: int = 8, forks: int = 64) -> None:
    print(f"\n{name}")
    header = f"{'hosts':>5} {'rounds':>6} {'round 1':>8} {'wall':>7} {'launch':>7} {'cost':>7}"
    print(
        header
        + f" {'main':>6} {'workers':>7} {'model':>7}  (s, median of rounds 2+; CPU s; model: {cores} cores)"
    )
    points: dict[str, list[tuple[float, float]]] = {"cost": [], "main": [], "workers": []}
    for run in runs:
        got = summary(run)
        first = next((r["cost"] for r in run["rounds"] if r["round"] == 1), float("nan"))
        if got is None:
            print(f"{run['nodes']:>5}  no round measured (status {run['status']}, rc {run['rc']})")
            continue
        for key, values in points.items():
            if key in got:
                values.append((run["nodes"], got[key]))
        cpu = ""
        if "main" in got:
            model = modelled_round_s(got, cores, forks, run["nodes"])
            cpu = f" {got['main']:>6.2f} {got['workers']:>7.2f} {model:>7.1f}"
            if "task" in got:
                cpu += f"  (round task's own process {got['task']:.2f} of the workers)"
        print(
            f"{run['nodes']:>5} {len(run['rounds']):>6} {first:>8.1f} {got['wall']:>7.1f} "
            f"{got['launch']:>7.1f} {got['cost']:>7.1f}{cpu}"
        )
    for key, values in points.items():
        if values:
            a, b = fit(values)
            print(f"fit of the medians: {key} = {a:.3f} s + {b * 1000:.1f} ms x hosts")
    for key in (*CPU_KEYS, "task"):
        if (got := fit_cpu(runs, key)) is not None:
            a, b, c = got
            print(
                f"fit of every round 2+: {key} CPU = {a:.3f} s + {b * 1000:.1f} ms x hosts "
                f"+ {c:.4f} x round wall"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=ROOT, help="the checkout whose bench.yml runs")
    parser.add_argument("--nodes", default="8,16,32,64", help="cluster sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=4, help="rounds measured after the first")
    parser.add_argument("--out", type=Path, help="write the measurements here (JSON)")
    parser.add_argument("--compare", nargs="+", type=Path, help="print these measurement files, run nothing")
    parser.add_argument("--cores", type=int, default=8, help="a real controller's cores, for the model")
    parser.add_argument("--forks", type=int, default=64, help="Ansible's forks, for the model (ansible.cfg)")
    parser.add_argument(
        "--faults",
        action="store_true",
        help="the adaptive plan on a shaped fleet (a bad node, a bad link), every round: a row per round",
    )
    args = parser.parse_args()
    if args.compare:
        for path in args.compare:
            runs = json.loads(path.read_text(encoding="utf-8"))
            print_runs(str(path), runs, args.cores, args.forks)
            print_phases(runs)
        return 0
    runs = []
    for nodes in (int(n) for n in args.nodes.split(",")):
        scratch = Path(tempfile.mkdtemp(prefix=f"collbench-cc{nodes}-"))
        try:
            runs.append(measure(args.repo.resolve(), nodes, args.rounds, scratch, faults=args.faults))
        except Exception as exc:  # a size that does not fit this machine: say so, go on
            runs.append({"nodes": nodes, "rc": None, "status": f"error: {exc}", "rounds": []})
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if args.out:
            args.out.write_text(json.dumps(runs, indent=1), encoding="utf-8")
        print_runs(str(args.repo), runs[-1:], args.cores, args.forks)
    print_runs(str(args.repo), runs, args.cores, args.forks)
    print_phases(runs)
    if args.faults:
        print_each_round(runs)
    return 0


def print_each_round(runs: list[dict[str, Any]]) -> None:
    """Every round as measured: a localisation round's few commands against a full round's."""
    print("\nevery round (s; CPU s):")
    head = ("hosts", 5), ("round", 5), ("commands", 8), ("wall", 7), ("launch", 7), ("main", 6)
    print(" ".join(f"{name:>{width}}" for name, width in head) + f" {'workers':>7} {'task':>6}")
    for run in runs:
        for r in run["rounds"]:
            cells = [
                f"{r.get(k, float('nan')):>{w}.2f}" for k, w in (("main", 6), ("workers", 7), ("task", 6))
            ]
            print(
                f"{run['nodes']:>5} {r['round']:>5} {r.get('commands', '-'):>8} {r['wall']:>7.1f} "
                f"{r['launch']:>7.1f} {' '.join(cells)}"
            )


if __name__ == "__main__":
    sys.exit(main())
