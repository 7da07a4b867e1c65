"""Simulate nights of the adaptive pair plan (collbench_py.pairs.planner) on fleets of 64 to 10,000 nodes.

The planner and its verdict rules are the real ones; only the fleet is simulated. Each pair's busbw
is the healthy figure times the slower end's factor times the link's factor, times run-to-run noise
(normal, CV 2 % by default: pessimistic, field.md's bad node at -6 to -7 % with z ~ -10 implies
~0.7 %). Planted faults, kept apart so that the truth is clear:

  bad nodes      max(5, n/100) (at most n/4), slowdowns cycling 7, 10, 20, 30, 50 %
  bad links      max(2, n/200) at 30 % on pairs the initial rounds measure, as many on random pairs
  flapping       max(1, n/500) nodes and as many links (on measured pairs) 30 % slow in half the rounds

A pair-specific fault on a pair that no round measures cannot be seen by any plan shorter than the
full round robin; "links anywhere" shows how often that happens.

Rail faults (`--rails`, a second table): every node has 8 rails (NIC k on leaf k); a pair runs at
its slowest rail (a 2-node collective moves over every rail in lockstep), a rail read (ib_write_bw
NIC k <-> NIC k) at 400 Gb/s times both ends' node factor, NIC k and leaf k, noise CV 1 %.

  bad NICs       max(2, n/250) hosts, one rail each, 30 % or 50 % slow, on nights with the faults
                 above (the plan runs with the rail map: rail checks on)
  slow leaf      one rail of every host 40 % slow, on nights of its own (nothing else wrong)

Each fault night runs twice, with and without rails (same fleet, same noise seed): the added minutes
are the difference. A round that reads rails is costed like a localisation round (the rail reads run
beside the round's pairs: ib_write_bw -D 5 plus its ssh start fit in the 30 s launch slot; a round
of rail reads alone is a full round, launch slot and controller work: an upper bound).

Time per round: the launch (30 s for an 8 GiB ring pair, field.md) plus the controller's own work,
`Costs`: CPU seconds of the controller side alone measured by benchmarks/controller_cost.py (the
ansible-playbook process and the round's one task, serial; the ssh clients, spread over the cores),
per round and per command started (one per pair: nccl-tests under mpirun), on an assumed 8-core
controller; the nodes' work runs on their own CPUs in parallel. Fixed phases (provision, facts,
report) are not counted.

    .venv/bin/python benchmarks/fleet_sim.py                 # 64, 256, 1000, 4000
    .venv/bin/python benchmarks/fleet_sim.py 1000 --quiet-nights 20 --cv 0.03
    .venv/bin/python benchmarks/fleet_sim.py 1000 --cv 0.005 0.01 0.02  # a row per noise level
    .venv/bin/python benchmarks/fleet_sim.py 1000 4000 --rails --quiet-nights 20
    # the simulator against benchmarks/fleet_e2e.py's 16-host run (round and controller seconds
    # measured on the machine of the run, the pairs phase it measured):
    .venv/bin/python benchmarks/fleet_sim.py --predict-test-cluster 16 \
        --round-s 50 --cost-s 19 --measured-s 237

Targets at 1,000 nodes: <= 15 minutes, recall 100 % for slowdowns >= 20 %, no false failure in
100 quiet nights.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collbench_py.pairs.planner import Decision, Planner  # noqa: E402
from collbench_py.pairs.schedule import Pair  # noqa: E402

HEALTHY_BUSBW = 360.0  # GB/s, a 2-node H100 8x400G all_reduce (field.md: ~347-392)
NODE_SLOWDOWNS = (0.07, 0.10, 0.20, 0.30, 0.50)
LINK_SLOWDOWN = 0.30
FLAP_SLOWDOWN, FLAP_CHANCE = 0.30, 0.5
LEAF_SIZE = 32  # hosts per leaf switch: the planner's topology groups
RAILS = 8  # NICs per node, NIC k on leaf k
RAIL_GBITS = 400.0  # ib_write_bw NIC k <-> NIC k, 400G (field.md: healthy ports read 399.6-399.9)
RAIL_CV = 0.01
NIC_SLOWDOWNS = (0.30, 0.50)
LEAF_SLOWDOWN = 0.40
# benchmarks/controller_cost.py on the 8-, 16-, 32- and 64-host test clusters (README "Controller cost
# per round"), the rounds started from one controller task: controller CPU seconds per round of
# pairs = a + b x commands, least squares over every round 2+ (torch pairs: one command per host).
# A command is what one host runs for a launch: the GPU fleet's nccl-tests pairs under mpirun run
# one per pair. The ansible-playbook process: 0.37 s a round; its medians grow 52 ms per host on the
# test cluster, where a round's launch lasts longer the more hosts share its 2 cores: that is its
# polling while the launches run (0.044 CPU s per second of the round), off the critical path.
MAIN_ROUND_S, MAIN_COMMAND_S = 0.37, 0.0
# the round task's own process (its threads share one interpreter: serial):
TASK_ROUND_S, TASK_COMMAND_S = 0.0, 0.0156
# the rest of the workers: the ssh clients and master connections, processes of their own (parallel
# across the controller's cores):
SSH_ROUND_S, SSH_COMMAND_S = 0.21, 0.0174


@dataclass(frozen=True)
class Costs:
    """A round's wall time on a real fleet: its launches, then the controller's own work as measured by
    benchmarks/controller_cost.py (CPU seconds of the controller side alone, a + b x commands): the
    ansible-playbook process and the round task's own process, serial, and the ssh clients, spread
    over the controller's cores. The nodes' own work runs on their own CPUs, in parallel, and is not
    counted beyond the launch. A round runs `concurrency` commands at once (collbench_round_concurrency,
    raised to cover a round of the fleet): beyond that its launches run in batches."""

    launch_s: float = 30.0  # an 8 GiB ring pair, H100 8x400G (field.md)
    main_round_s: float = MAIN_ROUND_S
    main_command_s: float = MAIN_COMMAND_S
    task_round_s: float = TASK_ROUND_S
    task_command_s: float = TASK_COMMAND_S
    ssh_round_s: float = SSH_ROUND_S
    ssh_command_s: float = SSH_COMMAND_S
    cores: int = 8  # the controller assumed: 8 cores
    concurrency: int = 5000  # collbench_round_concurrency, set to cover a round of 10,000 nodes

    def controller_s(self, commands: int) -> float:
        serial = (
            self.main_round_s + self.task_round_s + (self.main_command_s + self.task_command_s) * commands
        )
        ssh = self.ssh_round_s + self.ssh_command_s * commands
        return max(0.0, serial) + max(0.0, ssh) / min(self.cores, max(1, commands))

    def round_s(self, commands: int) -> float:
        batches = max(1, -(-commands // self.concurrency))
        return self.launch_s * batches + self.controller_s(commands)


@dataclass
class Fleet:
    hosts: list[str]
    groups: dict[str, str]
    nodes: dict[str, float] = field(default_factory=dict)  # steady bad node -> slowdown
    links: dict[Pair, float] = field(default_factory=dict)  # steady bad link -> slowdown
    measured_links: set[Pair] = field(default_factory=set)  # the bad links planted on measured pairs
    flapping_nodes: set[str] = field(default_factory=set)
    flapping_links: set[Pair] = field(default_factory=set)
    nics: dict[tuple[str, int], float] = field(default_factory=dict)  # bad NIC (host, rail) -> slowdown
    leaves: dict[int, float] = field(default_factory=dict)  # slow leaf: rail -> slowdown

    def node(self, pair: Pair, flaps: set) -> float:
        return min(1 - self.nodes.get(h, FLAP_SLOWDOWN if h in flaps else 0.0) for h in pair)

    def rail(self, pair: Pair, k: int) -> float:
        """Rail k's factor for the pair: the slower NIC k of its ends, times leaf k."""
        return min(1 - self.nics.get((h, k), 0.0) for h in pair) * (1 - self.leaves.get(k, 0.0))

    def busbw(self, pair: Pair, flaps: set, rng: random.Random, cv: float) -> float:
        """One measurement: the slower end, the link, the slowest rail, this round's flaps, noise."""
        link = 1 - self.links.get(pair, FLAP_SLOWDOWN if pair in flaps else 0.0)
        rails = min(self.rail(pair, k) for k in range(RAILS)) if self.nics or self.leaves else 1.0
        return HEALTHY_BUSBW * self.node(pair, flaps) * link * rails * (1 + rng.gauss(0, cv))

    def gbits(self, pair: Pair, k: int, flaps: set, rng: random.Random) -> float:
        """One rail read: the ends' node factor (a slow node is slow on every rail), NIC k, leaf k."""
        return RAIL_GBITS * self.node(pair, flaps) * self.rail(pair, k) * (1 + rng.gauss(0, RAIL_CV))


def make_fleet(n: int) -> Fleet:
    hosts = [f"node{i:05d}" for i in range(n)]
    return Fleet(hosts, {h: f"leaf{i // LEAF_SIZE:03d}" for i, h in enumerate(hosts)})


def plant_faults(fleet: Fleet, initial: list[list[Pair]], rng: random.Random) -> None:
    n = len(fleet.hosts)
    faulty: set[str] = set()

    def free_hosts(count: int) -> list[str]:
        picked = rng.sample([h for h in fleet.hosts if h not in faulty], count)
        faulty.update(picked)
        return picked

    def free_pairs(candidates: list[Pair], count: int) -> list[Pair]:
        rng.shuffle(candidates)
        picked = []
        for a, b in candidates:
            if len(picked) == count:
                break
            if a not in faulty and b not in faulty:
                picked.append((a, b))
                faulty.update((a, b))
        return picked

    # every slowdown at least once, but no more than a quarter of a small fleet
    for i, h in enumerate(free_hosts(min(max(len(NODE_SLOWDOWNS), n // 100), n // 4))):
        fleet.nodes[h] = NODE_SLOWDOWNS[i % len(NODE_SLOWDOWNS)]
    fleet.flapping_nodes.update(free_hosts(max(1, n // 500)))
    measured = [p for rnd in initial for p in rnd]
    links = max(2, n // 200)
    fleet.measured_links.update(free_pairs(list(measured), links))
    anywhere = [tuple(sorted(rng.sample(fleet.hosts, 2))) for _ in range(links * 20)]
    for pair in [*fleet.measured_links, *free_pairs(anywhere, links)]:
        fleet.links[pair] = LINK_SLOWDOWN
    fleet.flapping_links.update(free_pairs(list(measured), max(1, n // 500)))


def plant_nics(fleet: Fleet, rng: random.Random) -> None:
    """Bad NICs on hosts with no other fault, after plant_faults (its draws stay as they were)."""
    taken = (
        set(fleet.nodes)
        | fleet.flapping_nodes
        | {h for p in [*fleet.links, *fleet.flapping_links] for h in p}
    )
    hosts = rng.sample([h for h in fleet.hosts if h not in taken], max(2, len(fleet.hosts) // 250))
    for i, h in enumerate(hosts):
        fleet.nics[(h, rng.randrange(RAILS))] = NIC_SLOWDOWNS[i % len(NIC_SLOWDOWNS)]


@dataclass(frozen=True)
class Night:
    rounds: int
    seconds: float
    decisions: tuple[Decision, ...]
    commands: tuple[int, ...] = ()  # per round, the commands started: its launches and rail reads


def run_night(fleet: Fleet, seed: int, costs: Costs, cv: float, rails: bool = False) -> Night:
    """One night with the real planner: plan a round, measure it on the simulated fleet, feed it back.
    With `rails` the planner has the rail map (every host RAILS rails) and reads the rails it asks for;
    their reads draw from a noise stream of their own, so the pairs see the same noise either way."""
    rng = random.Random(f"night {seed}")
    rail_rng = random.Random(f"rails {seed}")
    rail_map = dict.fromkeys(fleet.hosts, range(RAILS)) if rails else None
    planner = Planner(fleet.hosts, groups=fleet.groups, seed=seed, rails=rail_map)
    seconds = 0.0
    commands = []
    flappers = sorted(fleet.flapping_nodes) + sorted(fleet.flapping_links)
    while (pairs := planner.next_round()) is not None:
        flaps = {f for f in flappers if rng.random() < FLAP_CHANCE}
        read = {
            pair: {k: fleet.gbits(pair, k, flaps, rail_rng) for k in planner.rails_of(pair)}
            for pair in planner.rail_pairs
        }
        planner.record({pair: fleet.busbw(pair, flaps, rng, cv) for pair in pairs}, read)
        # One command per launch (nccl-tests under mpirun), the rail reads beside the pairs.
        commands.append(len(pairs) + len(read))
        seconds += costs.round_s(commands[-1])
    return Night(len(planner.rounds), seconds, planner.decisions, tuple(commands))


def predict_test_cluster(
    nodes: int,
    seed: str,
    min_drop: float,
    round_s: float,
    *,
    measured_s: float | None,
    real_rounds: int | None,
    cost_s: float = 0.0,
) -> int:
    """The simulator against a real run: the fleet of benchmarks/fleet_e2e.py (node1..nodeN, the 5th and
    12th hosts bad, one bad link on a pair the first rounds measure, both at a fifth of the fabric),
    planned by the real planner with the run's seed, each round costed at `round_s` as measured on
    the machine of the run. Prints the rounds and the predicted wall time of the pairs phase."""
    hosts = [f"node{i}" for i in range(1, nodes + 1)]
    bad_nodes = {hosts[4], hosts[11 % nodes]}
    initial = Planner(hosts, seed=seed, min_drop=min_drop).initial
    link = next(p for r in initial for p in r if not set(p) & bad_nodes)
    fleet = Fleet(hosts, {}, nodes=dict.fromkeys(bad_nodes, 0.8), links={link: 0.8})
    rng = random.Random(f"test cluster {seed}")
    planner = Planner(hosts, seed=seed, min_drop=min_drop)
    while (pairs := planner.next_round()) is not None:
        planner.record({pair: fleet.busbw(pair, set(), rng, 0.02) for pair in pairs})
    rounds = len(planner.rounds)
    print(
        f"the simulator's plan: {rounds} rounds" + (f", the real run's: {real_rounds}" if real_rounds else "")
    )
    rounds = real_rounds or rounds
    # fleet_e2e measures from the first launch's start to the last launch's end: one controller
    # gap fewer than rounds x round_s.
    predicted = rounds * round_s - cost_s
    print(f"{nodes} hosts, bad nodes {', '.join(sorted(bad_nodes))}, bad link {'--'.join(link)}, seed {seed}")
    for d in planner.decisions:
        print(f"  {d.kind}: {d.subject}")
    print(f"rounds {rounds} x {round_s:.1f} s - {cost_s:.1f} s = predicted pairs phase {predicted:.0f} s")
    if measured_s is not None:
        error = predicted / measured_s - 1
        verdict = "within" if abs(error) <= 0.2 else "outside"
        print(f"measured {measured_s:.0f} s: prediction {error:+.1%}, {verdict} 20 %")
    return 0


def _ratio(hit: int, total: int) -> str:
    if not total:
        return "-"
    share = "100" if hit == total else f"{100 * hit / total:.1f}"  # 99.5 % is not rounded up to 100
    return f"{share} % ({hit}/{total})"


def simulate(n: int, fault_nights: int, quiet_nights: int, costs: Costs, cv: float) -> dict[str, str]:
    started = time.process_time()
    tally = dict.fromkeys(
        ["named_nodes", "named_nodes_ok", "links_measured",
         "links_measured_hit", "links_any", "links_any_hit", "named_links", "named_links_ok", "flaps",
         "flaps_flagged", "unresolved"],
        0,
    )  # fmt: skip
    planted = dict.fromkeys(NODE_SLOWDOWNS, 0)  # slowdown -> bad nodes planted, named
    named_at = dict.fromkeys(NODE_SLOWDOWNS, 0)
    rounds, seconds = [], []
    for night in range(fault_nights):
        fleet = make_fleet(n)
        seed = 1000 + night
        plant_faults(
            fleet, Planner(fleet.hosts, groups=fleet.groups, seed=seed).initial, random.Random(night)
        )
        result = run_night(fleet, seed, costs, cv)
        rounds.append(result.rounds)
        seconds.append(result.seconds)
        named_nodes = {d.subject for d in result.decisions if d.kind == "bad node"}
        named_links = {d.pairs[0] for d in result.decisions if d.kind == "bad link"}
        flagged_hosts = {h for d in result.decisions for p in d.pairs for h in p}
        flagged_pairs = {p for d in result.decisions for p in d.pairs}
        for h, slowdown in fleet.nodes.items():
            planted[slowdown] += 1
            named_at[slowdown] += h in named_nodes
        true_nodes = set(fleet.nodes) | fleet.flapping_nodes
        true_links = set(fleet.links) | fleet.flapping_links
        tally["named_nodes"] += len(named_nodes)
        tally["named_nodes_ok"] += len(named_nodes & true_nodes)
        tally["named_links"] += len(named_links)
        tally["named_links_ok"] += len(named_links & true_links)
        for pair in fleet.links:
            key = "links_measured" if pair in fleet.measured_links else "links_any"
            tally[key] += 1
            tally[key + "_hit"] += pair in named_links
        tally["flaps"] += len(fleet.flapping_nodes) + len(fleet.flapping_links)
        tally["flaps_flagged"] += sum(h in flagged_hosts for h in fleet.flapping_nodes)
        tally["flaps_flagged"] += sum(p in flagged_pairs for p in fleet.flapping_links)
        tally["unresolved"] += sum(d.kind == "unresolved" for d in result.decisions)
    false_nights = 0
    quiet_rounds, quiet_seconds = [], []
    for night in range(quiet_nights):
        quiet = run_night(make_fleet(n), 5000 + night, costs, cv)
        false_nights += bool(quiet.decisions)
        quiet_rounds.append(quiet.rounds)
        quiet_seconds.append(quiet.seconds)
    t = tally
    recall = {f"{s:.0%} slow named": _ratio(named_at[s], planted[s]) for s in NODE_SLOWDOWNS}
    return {
        "nodes": f"{n:,}",
        "noise CV": f"{cv:.1%}",
        "rounds (quiet / faults max)": f"{max(quiet_rounds, default=0)} / {max(rounds)}",
        "minutes (faults, median / max)": f"{statistics.median(seconds) / 60:.1f} / {max(seconds) / 60:.1f}",
        "minutes (quiet, median)": f"{statistics.median(quiet_seconds or [0]) / 60:.1f}",
        "round robin minutes": f"{(n - 1) * costs.round_s(n // 2) / 60:.0f}",
        **recall,
        "node precision": _ratio(t["named_nodes_ok"], t["named_nodes"]),
        "links measured named": _ratio(t["links_measured_hit"], t["links_measured"]),
        "links anywhere named": _ratio(t["links_any_hit"], t["links_any"]),
        "link precision": _ratio(t["named_links_ok"], t["named_links"]),
        "flapping flagged": _ratio(t["flaps_flagged"], t["flaps"]),
        "unresolved / night": f"{t['unresolved'] / fault_nights:.1f}",
        "false-failure nights": f"{false_nights}/{quiet_nights}",
        "cpu s": f"{time.process_time() - started:.1f}",
    }


def simulate_rails(
    n: int, fault_nights: int, leaf_nights: int, quiet_nights: int, *, costs: Costs, cv: float
) -> dict[str, str]:
    """Rail faults: recall and precision of "bad nic" and "bad rail", and the minutes rails add."""
    started = time.process_time()
    t = dict.fromkeys(
        ["nics", "nics_hit", "nics_as_node", "named_nics", "named_nics_ok", "leaves", "leaves_hit",
         "named_rails", "named_rails_ok", "leaf_hosts_blamed", "node20", "node20_hit", "quiet_false"],
        0,
    )  # fmt: skip
    with_rails, rounds, added = [], [], []
    for night in range(fault_nights):
        fleet = make_fleet(n)
        seed = 1000 + night
        plant_faults(
            fleet, Planner(fleet.hosts, groups=fleet.groups, seed=seed).initial, random.Random(night)
        )
        plant_nics(fleet, random.Random(f"nics {night}"))
        on = run_night(fleet, seed, costs, cv, rails=True)
        off = run_night(fleet, seed, costs, cv, rails=False)
        with_rails.append(on.seconds)
        rounds.append(on.rounds)
        added.append(on.seconds - off.seconds)
        _tally_rails(t, fleet, on.decisions)
        named_nodes = {d.subject for d in on.decisions if d.kind == "bad node"}
        for h, slowdown in fleet.nodes.items():
            if slowdown >= 0.2:
                t["node20"] += 1
                t["node20_hit"] += h in named_nodes
    for night in range(leaf_nights):
        fleet = make_fleet(n)
        rng = random.Random(f"leaf {night}")
        fleet.leaves[rng.randrange(RAILS)] = LEAF_SLOWDOWN
        result = run_night(fleet, 3000 + night, costs, cv, rails=True)
        _tally_rails(t, fleet, result.decisions)
        t["leaf_hosts_blamed"] += len({d.host for d in result.decisions if d.host})
    quiet_rounds, quiet_added = [], []
    for night in range(quiet_nights):
        on = run_night(make_fleet(n), 5000 + night, costs, cv, rails=True)
        off_s = run_night(make_fleet(n), 5000 + night, costs, cv).seconds if night == 0 else None
        t["quiet_false"] += bool(on.decisions)
        quiet_rounds.append(on.rounds)
        if off_s is not None:
            quiet_added.append(on.seconds - off_s)
    return {
        "nodes": f"{n:,}",
        "rounds (quiet / faults max)": f"{max(quiet_rounds, default=0)} / {max(rounds, default=0)}",
        "minutes with rails (faults, median / max)": f"{statistics.median(with_rails) / 60:.1f} / "
        f"{max(with_rails) / 60:.1f}",
        "added minutes (faults median / max; quiet)": f"{statistics.median(added) / 60:+.1f} / "
        f"{max(added) / 60:+.1f}; {statistics.median(quiet_added) / 60 if quiet_added else 0:+.1f}",
        "bad NICs named": _ratio(t["nics_hit"], t["nics"]),
        "NIC precision": _ratio(t["named_nics_ok"], t["named_nics"]),
        "bad NICs named bad node": str(t["nics_as_node"]),
        "slow leaves named": _ratio(t["leaves_hit"], t["leaves"]),
        "rail precision": _ratio(t["named_rails_ok"], t["named_rails"]),
        "hosts blamed on leaf nights": str(t["leaf_hosts_blamed"]),
        "bad nodes >= 20 % named (rails on)": _ratio(t["node20_hit"], t["node20"]),
        "false-failure quiet nights": f"{t['quiet_false']}/{quiet_nights}",
        "cpu s": f"{time.process_time() - started:.1f}",
    }


def _tally_rails(t: dict[str, int], fleet: Fleet, decisions: tuple[Decision, ...]) -> None:
    nics = {(d.host, d.rail) for d in decisions if d.kind == "bad nic"}
    rails = {d.rail for d in decisions if d.kind == "bad rail"}
    nodes = {d.subject for d in decisions if d.kind == "bad node"}
    t["nics"] += len(fleet.nics)
    t["nics_hit"] += len(set(fleet.nics) & nics)
    t["nics_as_node"] += sum(h in nodes for h, _ in fleet.nics)
    t["named_nics"] += len(nics)
    t["named_nics_ok"] += len(set(fleet.nics) & nics)
    t["leaves"] += len(fleet.leaves)
    t["leaves_hit"] += len(set(fleet.leaves) & rails)
    t["named_rails"] += len(rails)
    t["named_rails_ok"] += len(set(fleet.leaves) & rails)


def print_table(rows: list[dict[str, str]]) -> None:
    print("| " + " | ".join(rows[0]) + " |")
    print("|" + "---|" * len(rows[0]))
    for row in rows:
        print("| " + " | ".join(row.values()) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[64, 256, 1000, 4000])
    parser.add_argument("--fault-nights", type=int, default=10, help="nights with planted faults per size")
    parser.add_argument("--quiet-nights", type=int, default=100, help="fault-free nights per size")
    parser.add_argument(
        "--cv",
        type=float,
        nargs="+",
        default=[0.02],
        help="run-to-run noise (coefficient of variation); several: a row per size and noise level",
    )
    parser.add_argument(
        "--rails", action="store_true", help="the rail-fault table instead (bad NICs, a slow leaf)"
    )
    parser.add_argument(
        "--leaf-nights", type=int, default=5, help="with --rails: nights with a slow leaf per size"
    )
    parser.add_argument(
        "--predict-test-cluster",
        type=int,
        metavar="N",
        help="predict benchmarks/fleet_e2e.py's N-host run instead",
    )
    parser.add_argument(
        "--round-s", type=float, help="with --predict-test-cluster: a round's wall time measured there"
    )
    parser.add_argument(
        "--measured-s", type=float, help="with --predict-test-cluster: the pairs phase measured"
    )
    parser.add_argument(
        "--rounds", type=int, help="with --predict-test-cluster: the rounds the real run used"
    )
    parser.add_argument(
        "--cost-s",
        type=float,
        default=0.0,
        help="with --predict-test-cluster: the controller's part of --round-s",
    )
    parser.add_argument("--seed", default="fleet-e2e-1", help="with --predict-test-cluster: the run's seed")
    parser.add_argument("--min-drop", type=float, default=0.5, help="with --predict-test-cluster: the run's")
    args = parser.parse_args(argv)
    if args.predict_test_cluster is not None:
        if args.round_s is None or args.predict_test_cluster < 8:
            parser.error("--predict-test-cluster needs 8 nodes or more and --round-s")
        return predict_test_cluster(
            args.predict_test_cluster,
            args.seed,
            args.min_drop,
            args.round_s,
            measured_s=args.measured_s,
            real_rounds=args.rounds,
            cost_s=args.cost_s,
        )
    if any(n < 8 or n > 10_000 for n in args.sizes):
        parser.error("fleet sizes run from 8 to 10,000 nodes")
    costs = Costs()
    if any(not 0 < cv < 0.2 for cv in args.cv):
        parser.error("--cv is a fraction above 0 and below 0.2 (0.01: 1 %)")
    print(
        f"noise CV {', '.join(f'{cv:.1%}' for cv in args.cv)}; "
        f"a round costs {costs.launch_s:.0f} s launch + the controller's "
        f"{costs.main_round_s + costs.task_round_s:.2f} s + "
        f"{(costs.main_command_s + costs.task_command_s) * 1000:.1f} ms x commands (serial) + "
        f"({costs.ssh_round_s:.2f} s + {costs.ssh_command_s * 1000:.1f} ms x commands) / "
        f"{costs.cores} cores (ssh); e.g. a round of 500 pairs: {costs.controller_s(500):.1f} s; "
        f"{args.fault_nights} nights with faults, {args.quiet_nights} quiet nights per size"
    )
    if args.rails:
        print(
            f"rails: {RAILS} per node at {RAIL_GBITS:.0f} Gb/s (CV {RAIL_CV:.0%}); bad NICs max(2, n/250) at "
            f"{', '.join(f'{s:.0%}' for s in NIC_SLOWDOWNS)}; a slow leaf at {LEAF_SLOWDOWN:.0%} on "
            f"{args.leaf_nights} nights of its own"
        )
        print_table(
            [
                simulate_rails(n, args.fault_nights, args.leaf_nights, args.quiet_nights, costs=costs, cv=cv)
                for n in args.sizes
                for cv in args.cv
            ]
        )
        return 0
    print_table(
        [simulate(n, args.fault_nights, args.quiet_nights, costs, cv) for n in args.sizes for cv in args.cv]
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
