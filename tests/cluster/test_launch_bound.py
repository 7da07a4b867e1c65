"""A hung rank of a torchrun pair launch: the launch bound ends it on time and the manifest says so.

torchrun starts its workers in sessions of their own, out of reach of a signal to the launch's process
group; a rank frozen with SIGSTOP dies only of SIGKILL. The bound (collbench_py/node/launch_wrapper.py)
must end every process of the launch on both hosts within timeout + kill-after, return to Ansible then,
and the manifest must record a `timeout` with the times the launch really started and ended.

One real bench.yml run on a 3-node test cluster, pairs only: round 1 is node2--node3, and node3's
torch processes (torchrun, and its worker if it runs yet) are frozen as soon as torchrun runs.
Rounds 2 and 3 (node1--node3, node1--node2) must run.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from tests.cluster.benchrun import BenchRun, find_process, run_bench
from tests.cluster.vcluster import Cluster

TIMEOUT_S = 30
KILL_AFTER_S = 5
# What the recorded times may differ from what was seen: the manifest keeps whole seconds, the
# watcher polls every half second on a loaded machine.
CLOCK_SLACK_S = 4
# The launch returns to Ansible within kill-after and a few seconds of its bound.
BOUND_MARGIN_S = 8
HUNG_PAIR = "pair-node2--node3"
FROZEN_HOST = "node3"
# The torch processes of the hung pair on a host, torchrun as soon as it runs and the worker if it
# runs yet (not the launch bound, whose command line names the same script and directory).
FROZEN = rf"^(?!\S*python\S* \S*collbench_launch_wrapper\.py ).*collbench_torch_bench\.py .*/{HUNG_PAIR}$"


@dataclass
class Sightings:
    """When anything whose command line names the hung pair's directory was running, per host."""

    first: dict[str, float] = field(default_factory=dict)
    last: dict[str, float] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)

    def watch(self, cluster: Cluster, hosts: tuple[str, ...]) -> threading.Thread:
        pattern = rf"/{HUNG_PAIR}(/|\s|$)"

        def poll() -> None:
            while not self.stop.is_set():
                for host in hosts:
                    try:
                        seen = find_process(cluster, host, pattern)
                    except Exception:  # a process gone between listing and reading
                        continue
                    if seen:
                        now = time.time()
                        self.first.setdefault(host, now)
                        self.last[host] = now
                self.stop.wait(0.5)

        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
        return thread


@dataclass(frozen=True)
class HungPairRun:
    cluster: Cluster
    run: BenchRun
    seen: Sightings


def utc(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def pair_launches(run: BenchRun) -> dict[str, dict]:
    return {launch["log"].split("/")[2]: launch for launch in run.manifest()["launches"]}


@pytest.fixture(scope="module")
def hung_pair(
    cluster_factory: Callable[..., Cluster], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HungPairRun]:
    cluster = cluster_factory(nodes=3)
    work = tmp_path_factory.mktemp("hungpair")
    seen = Sightings()
    watcher = seen.watch(cluster, ("node2", "node3"))
    freeze = (FROZEN_HOST, FROZEN, lambda: cluster.freeze(FROZEN_HOST, FROZEN), "freeze")
    try:
        run = run_bench(
            cluster,
            work / "results",
            work / "cp",
            extra_vars={
                "collbench_phases": ["pairs"],
                "collbench_timeout_s": TIMEOUT_S,
                "collbench_kill_after_s": KILL_AFTER_S,
            },
            watch=[freeze],
        )
        yield HungPairRun(cluster, run, seen)
    finally:
        seen.stop.set()
        watcher.join(timeout=5)
        cluster.thaw(FROZEN_HOST, FROZEN)


def test_the_hung_pair_is_recorded_as_a_timeout_with_its_true_times(hung_pair: HungPairRun) -> None:
    run, seen = hung_pair.run, hung_pair.seen
    assert "freeze" in run.events, f"node3's rank was never seen: {run.events}\n{run.tail}"
    hung = pair_launches(run)["node2--node3"]
    started, finished = utc(hung["started_at"]), utc(hung["finished_at"])
    first, last = min(seen.first.values()), max(seen.last.values())
    print(
        f"\nhung pair: recorded {finished - started:.0f} s ({hung['status']}, rc {hung['rc']}), seen running "
        f"{last - first:.1f} s, bound {TIMEOUT_S} + {KILL_AFTER_S} s; whole run {run.seconds:.0f} s"
    )
    assert hung["status"] == "timeout", (hung, run.tail)
    assert hung["rc"] in (124, 137, -9), hung
    # The recorded times are when the launch ran: nothing of it ran before or after them.
    assert abs(started - first) <= CLOCK_SLACK_S, (hung, first, last)
    assert abs(finished - last) <= CLOCK_SLACK_S, (hung, first, last)
    assert last - first <= TIMEOUT_S + KILL_AFTER_S + BOUND_MARGIN_S, (first, last)


def test_nothing_of_the_hung_pair_is_left_on_either_host(hung_pair: HungPairRun) -> None:
    cluster, run, seen = hung_pair.cluster, hung_pair.run, hung_pair.seen
    for host in ("node2", "node3"):
        assert not find_process(cluster, host, rf"/{HUNG_PAIR}(/|\s|$)"), host
        # Gone with the launch, not swept later: the watcher saw none of it after the recorded end.
        finished = utc(pair_launches(run)["node2--node3"]["finished_at"])
        assert seen.last[host] <= finished + CLOCK_SLACK_S, (host, seen.last[host], finished)


def test_the_next_rounds_run_the_hung_host_included(hung_pair: HungPairRun) -> None:
    run = hung_pair.run
    launches = pair_launches(run)
    hung = launches["node2--node3"]
    for pair in ("node1--node3", "node1--node2"):
        launch = launches[pair]
        assert launch["status"] == "ok", (launch, run.tail)
        assert launch["started_at"] >= hung["finished_at"], (launch, hung)
        assert (run.run_dir / launch["log"]).stat().st_size > 0
    assert run.manifest()["status"] == "complete"


def test_the_log_keeps_the_bound_s_true_times(hung_pair: HungPairRun) -> None:
    """What the frozen host's launcher printed ends with the bound's own line, whose times are the
    manifest's."""
    run = hung_pair.run
    out = run.run_dir / "inter" / "pairs" / "node2--node3" / f"launcher-{FROZEN_HOST}.out"
    text = out.read_text(encoding="utf-8")
    line = re.search(
        r"^collbench-launch: status=timeout rc=124 started=(\S+)Z ended=(\S+)Z killed=(\d+)$", text, re.M
    )
    assert line, text[-2000:]
    hung = pair_launches(run)["node2--node3"]
    bound_start, bound_end = (
        datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=UTC).timestamp()
        for stamp in line.groups()[:2]
    )
    assert abs(bound_start - utc(hung["started_at"])) <= CLOCK_SLACK_S
    assert abs(bound_end - utc(hung["finished_at"])) <= CLOCK_SLACK_S
    assert int(line[3]) >= 1  # the frozen torchrun (and its worker if it had started one)
