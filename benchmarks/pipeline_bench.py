"""Orchestration overhead of the whole pipeline, on an SSH test cluster of 8 hosts.

Builds a test cluster (tests/cluster/vcluster.py: network namespaces, real sshd, needs root), runs
`bench.yml` on it through ansible-runner (the torch backend over gloo, small sizes, every phase),
and reports:

- wall: the whole run, preflight to report, as a user waits for it;
- the benchmark launches on the critical path: the intra-node phase (its longest launch: every
  host runs its own at once), the launch across all hosts, and every round of pairs (its longest
  pair: a round's pairs run at once);
- their ratio, the orchestration overhead (target <= 1.3);
- the pair rounds: n - 1 for an even n, with each round's pairs' start and end and how long all of
  them ran at the same time;
- where the rest of the wall time goes: per phase, and the task names that cost the most.

Launch times are the launch commands' own start and end as Ansible recorded them (microseconds);
the manifest's started_at/finished_at (whole seconds) are printed next to them for the rounds.

    python benchmarks/pipeline_bench.py [--nodes 8] [--collectives all_reduce,...] [--max-bytes 4M]

This is a benchmark, not a test: it prints figures and asserts nothing.
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
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import ansible_runner  # noqa: E402 - after the checkout is importable

from tests.cluster.test_bench_e2e import TEST_PROFILE  # noqa: E402
from tests.cluster.vcluster import Cluster, ansible_env  # noqa: E402

TARGET_RATIO = 1.3
DEFAULT_COLLECTIVES = "all_reduce,all_gather,reduce_scatter,alltoall,broadcast,sendrecv"
MiB = 1024 * 1024
COMMAND_TIME = "%Y-%m-%d %H:%M:%S.%f"
MANIFEST_TIME = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class Span:
    start: float  # Unix time
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


def _command_time(text: str) -> float:
    # The launch commands run with TZ=UTC (roles/benchmark/tasks/launch.yml).
    return datetime.strptime(text + "+0000", COMMAND_TIME + "%z").timestamp()


def _wrapper_time(text: str) -> float:
    return datetime.strptime(text.rstrip("Z") + "+0000", "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def _manifest_time(text: str) -> float:
    return datetime.strptime(text + "+0000", MANIFEST_TIME + "%z").timestamp()


def _event_time(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["created"]).timestamp()


def group_vars(args: argparse.Namespace, results: Path, work: Path) -> dict[str, Any]:
    # The stand-in nvidia-smi reports H100s while gloo runs on the CPU: judge with the test
    # cluster's fleet-only profile, so the exit code says whether the cluster was healthy.
    profile = work.parent / "test-cluster-cpu.yml"
    profile.write_text(TEST_PROFILE)
    return {
        "collbench_report_args": ["--profile", str(profile)],
        "collbench_backend": "torch",
        # The nodes share this machine's filesystem: this venv's Python has torch==2.13.0.
        "collbench_python": sys.executable,
        "collbench_net_if": "eth0",
        "collbench_collectives": args.collectives.split(","),
        "collbench_min_bytes": args.min_bytes,
        "collbench_max_bytes": args.max_bytes,
        "collbench_iters": args.iters,
        "collbench_warmup_iters": 1,
        "collbench_cpu_procs_per_host": 1,
        "collbench_timeout_s": 300,
        "collbench_results_dir": str(results),
        "collbench_workdir": str(work),
    }


def run_pipeline(cluster: Cluster, scratch: Path, variables: dict[str, Any]) -> tuple[float, list[dict], int]:
    """bench.yml on the cluster; returns the wall time, every ansible-runner event and the rc."""
    (cluster.inventory_path.parent / "group_vars").mkdir(exist_ok=True)
    (cluster.inventory_path.parent / "group_vars" / "all.yml").write_text(json.dumps(variables))
    events: list[dict[str, Any]] = []
    control = scratch / "cp"
    control.mkdir()
    (scratch / "runner").mkdir()
    started = time.monotonic()
    result = ansible_runner.run(
        private_data_dir=str(scratch / "runner"),
        project_dir=str(ROOT),
        playbook="bench.yml",
        inventory=str(cluster.inventory_path),
        envvars={k: v for k, v in ansible_env(control).items() if k.startswith(("ANSIBLE", "PATH", "XDG"))},
        event_handler=lambda event: events.append(event) or True,
        quiet=True,
    )
    return time.monotonic() - started, events, int(result.rc if result.rc is not None else -1)


def launch_spans(events: list[dict[str, Any]]) -> dict[tuple[str, str], Span]:
    """(launch label, host) -> the launch command's start and end on that host."""
    spans = {}
    for event in events:
        data = event.get("event_data") or {}
        res = data.get("res") if isinstance(data.get("res"), dict) else {}
        cmd = res.get("cmd")
        if event.get("event") not in ("runner_on_ok", "runner_on_failed"):
            continue
        # One task per launch (the collbench_launch action): the wrapper's own times per step.
        for step in res.get("steps") or () if isinstance(res.get("launch"), dict) else ():
            if step.get("started") and step.get("ended"):
                times = (_wrapper_time(step["started"]), _wrapper_time(step["ended"]))
                spans[(step["label"], data["host"])] = Span(*times)
        if not isinstance(cmd, list):
            continue
        if "--out-dir" not in cmd or not res.get("start") or not res.get("end"):
            continue
        label = Path(cmd[cmd.index("--out-dir") + 1]).name
        spans[(label, data["host"])] = Span(_command_time(res["start"]), _command_time(res["end"]))
    return spans


def merged(spans: list[Span]) -> Span:
    return Span(min(s.start for s in spans), max(s.end for s in spans))


def phase_times(events: list[dict[str, Any]], end: float) -> tuple[list[tuple[str, float]], dict[str, float]]:
    """Seconds per play (phase), and per task name summed over the run (launch labels folded)."""
    marks = [
        (_event_time(e), e["event"], (e.get("event_data") or {}))
        for e in events
        if e.get("event") in ("playbook_on_play_start", "playbook_on_task_start") and e.get("created")
    ]
    marks.append((end, "end", {}))
    plays: list[tuple[str, float]] = []
    tasks: dict[str, float] = defaultdict(float)
    play_start: tuple[float, str] | None = None
    for (when, kind, data), (after, _, _) in itertools.pairwise(marks):
        if kind == "playbook_on_play_start":
            if play_start is not None:
                plays.append((play_start[1], when - play_start[0]))
            play_start = (when, str(data.get("play") or data.get("name") or "?"))
            continue
        name = str(data.get("task") or data.get("name") or "?")
        if name in ("Launch | intra", "Launch | all") or name.startswith("Launch | pair-"):
            name = "Launch | <the launch command>"
        tasks[name] += after - when
    if play_start is not None:
        plays.append((play_start[1], end - play_start[0]))
    return plays, tasks


def report(args: argparse.Namespace, wall: float, rc: int, events: list[dict], run_dir: Path) -> None:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    spans = launch_spans(events)
    dir_of = {name: entry["inventory_hostname"] for name, entry in manifest["hosts"].items()}
    launches: dict[tuple, dict[str, Any]] = {}
    for launch in manifest["launches"]:  # one entry per collective; one launch per kind and hosts
        launches.setdefault((launch["kind"], tuple(launch["hosts"]), launch["round"]), launch)

    def precise(kind: str, hosts: tuple[str, ...]) -> Span:
        if kind == "intra":
            return spans[("intra", dir_of[hosts[0]])]
        label = "all" if kind == "all" else "pair-" + "--".join(sorted(hosts))
        return merged([spans[(label, dir_of[h])] for h in hosts if (label, dir_of[h]) in spans])

    intra = {key[1][0]: precise("intra", key[1]) for key in launches if key[0] == "intra"}
    across = [precise("all", key[1]) for key in launches if key[0] == "all"]
    rounds: dict[int, dict[tuple[str, ...], tuple[Span, dict]]] = defaultdict(dict)
    for key, launch in launches.items():
        if key[0] == "pair":
            rounds[int(key[2])][key[1]] = (precise("pair", key[1]), launch)
    intra_s = max((s.seconds for s in intra.values()), default=0.0)
    across_s = sum(s.seconds for s in across)
    round_s = {n: max(span.seconds for span, _ in pairs.values()) for n, pairs in rounds.items()}
    critical = intra_s + across_s + sum(round_s.values())
    ratio = wall / critical if critical else float("inf")
    t0 = _manifest_time(manifest["started_at"])
    nodes = len(manifest["hosts"])
    pairs_per_round = sorted({len(p) for p in rounds.values()})
    overlaps = {
        n: min(s.end for s, _ in p.values()) - max(s.start for s, _ in p.values()) for n, p in rounds.items()
    }
    statuses = sorted({launch["status"] for launch in manifest["launches"]})

    print(f"\nrun {manifest['run_id']}: ansible rc {rc}, manifest {manifest['status']}, launches {statuses}")
    print(f"\n## Pipeline on the SSH test cluster ({nodes} hosts, torch backend over gloo)\n")
    print("| figure | value |")
    print("|---|---|")
    print(f"| hosts | {nodes} (network namespaces on one 2-core machine, real sshd) |")
    print(
        f"| collectives, sizes | {len(args.collectives.split(','))} collectives, "
        f"{args.min_bytes // MiB}-{args.max_bytes // MiB} MiB, {args.iters} iterations, 1 rank per host |"
    )
    print(f"| wall time, bench.yml (every phase) | {wall:.1f} s |")
    print(
        f"| launches on the critical path | {critical:.1f} s (intra-node {intra_s:.1f}, all hosts "
        f"{across_s:.1f}, {len(rounds)} pair rounds {sum(round_s.values()):.1f}) |"
    )
    print(f"| ratio wall / critical path | {ratio:.2f} (target <= {TARGET_RATIO}) |")
    print(
        f"| pair rounds | {len(rounds)} for {nodes} hosts, {'/'.join(map(str, pairs_per_round))} pairs each, "
        f"all pairs of a round running together in {sum(o > 0 for o in overlaps.values())} of {len(rounds)} |"
    )
    print("\n### Pair rounds (seconds from the run's start; launch commands' own times)\n")
    print("| round | pair: start-end (manifest, whole s) | all pairs running together |")
    print("|---|---|---|")
    for number in sorted(rounds):
        cells = []
        for hosts, (span, launch) in sorted(rounds[number].items()):
            m_start = _manifest_time(launch["started_at"]) - t0
            m_end = _manifest_time(launch["finished_at"]) - t0
            cells.append(
                f"{'--'.join(hosts)}: {span.start - t0:.1f}-{span.end - t0:.1f} ({m_start:.0f}-{m_end:.0f})"
            )
        longest = round_s[number]
        print(f"| {number} | {'<br>'.join(cells)} | {overlaps[number]:.1f} s of {longest:.1f} s |")
    plays, tasks = phase_times(events, t0 + wall)
    print("\n### Where the wall time goes\n")
    print("| phase (play) | s |")
    print("|---|---|")
    for name, seconds in plays:
        print(f"| {name} | {seconds:.1f} |")
    print("\n| task (summed over the run) | s |")
    print("|---|---|")
    for name, seconds in sorted(tasks.items(), key=lambda item: -item[1])[:12]:
        print(f"| {name} | {seconds:.1f} |")
    launch_each = [s.seconds for s in spans.values()]
    print(
        f"\n{len(spans)} launch commands (per host), median {statistics.median(launch_each):.1f} s; "
        f"intra-node launches {min(s.seconds for s in intra.values()):.1f}-{intra_s:.1f} s"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--collectives", default=DEFAULT_COLLECTIVES)
    parser.add_argument("--min-bytes", type=int, default=1 * MiB)
    parser.add_argument("--max-bytes", type=int, default=4 * MiB)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--name", default="pbbench", help="test cluster name (namespaces NAME-node1...)")
    parser.add_argument("--keep", action="store_true", help="keep the run directory and print where")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("pipeline_bench: the SSH test cluster needs root (network namespaces)", file=sys.stderr)
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="collbench-pipeline-bench-"))
    cluster = Cluster.up(nodes=args.nodes, name=args.name, workdir=scratch / "cluster")
    try:
        results = scratch / "results"
        wall, events, rc = run_pipeline(cluster, scratch, group_vars(args, results, scratch / "work"))
        (run_dir,) = [p for p in results.iterdir() if (p / "manifest.json").is_file()]
        report(args, wall, rc, events, run_dir)
        if args.keep:
            print(f"\nrun directory: {run_dir}")
    finally:
        cluster.down()
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
