"""The pairs phase of a real run, decided on the controller one round at a time.

Before each round the playbook calls `step` (through action_plugins/collbench_pair_plan.py). It
reads `<run_dir>/inter/pairs/plan.json`, rebuilds the planner by replaying the rounds recorded
there (the same hosts, k, groups and seed give the same rounds: a replayed round that differs
from the recorded one is an error, not a guess), reads the busbw of each pair of the round just
run from its log in the run directory, records it, writes plan.json again and says which pairs
run next, or that the plan is done. Adaptive and round robin take the same path: round robin is
a planner whose rounds are round_robin_round(hosts, index) and that never localises.

Host names here are the run directory's (`hosts/<name>/`); the plugin maps them to and from the
inventory's. A pair measured a second time (a link candidate) gets its own directory,
`inter/pairs/<a>--<b>/round-<N>/`, so the first measurement is never overwritten.

The busbw of a pair is its log's (the -J JSON's rows when there is one, as the report reads it)
at the judged size: the largest size every measured pair of the first measured round reached,
kept for the whole plan so that every value compares with every other. A pair that was not
started, whose launch failed or timed out, whose log is missing or unreadable, or that did not
reach that size has no busbw (None): the planner counts it as a failed launch.

Rail checks (an adaptive plan with a rail map, `inter/pairs/rails.json`): a round may also read
pairs rail by rail (`Step.rail_launches`, directory `inter/pairs/<a>--<b>/rails-round-<N>/`). The
Gb/s of rail k is `<dest>/rail<k>.log`'s, the ib_write_bw client output, as
collbench_py.parsers.perftest.peak_gbits reads it; None (a failed rail) when the log is missing,
unreadable or holds no result.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collbench_py.pairs.planner import DEFAULT_MIN_DROP, Decision, Planner, Witness
from collbench_py.pairs.railmap import RAILS_FILE, Rail, RailsFileError, read_rails
from collbench_py.pairs.rails import DEFAULT_RAIL_MIN_DROP, DEFAULT_RAIL_SAMPLE
from collbench_py.pairs.schedule import PAIR_SCHEDULES, Pair, default_pair_schedule
from collbench_py.parsers.models import ParseError
from collbench_py.parsers.perftest import parse as parse_perftest
from collbench_py.parsers.perftest import peak_gbits
from collbench_py.rundir.load import Launch, load_log
from collbench_py.rundir.planfile import (
    PlanDecision,
    PlanRecord,
    PlanRound,
    PlanWitness,
    link_name,
    read_plan,
    write_plan,
)
from collbench_py.verdicts.stats import series

PLAN_FILE = "inter/pairs/plan.json"
# The progress line of a round names this many pairs, then counts the others.
PAIRS_NAMED = 8


class PairRunError(ValueError):
    """A setting or a plan.json the pairs phase cannot go on with; one sentence for the user."""


@dataclass(frozen=True)
class PairSettings:
    """What the playbook asks for (collbench_pairs*, collbench_topology_group), resolved."""

    schedule: str  # adaptive or round-robin (`none` never reaches here)
    collective: str
    k: int
    localisation_rounds: int
    seed: str  # the run id: a rerun on the same fleet differs night to night, a run replays itself
    hosts: tuple[str, ...]  # run directory names of the hosts in the run when the phase starts
    groups: Mapping[str, str] = field(default_factory=dict)  # host -> rack / leaf / rail
    # The least drop below the fleet's median that makes a pair slow: the report's fleet min_drop.
    min_drop: float = DEFAULT_MIN_DROP
    rails: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # host -> rail indices; {}: none
    hcas: Mapping[str, Mapping[int, str]] = field(default_factory=dict)  # host -> rail -> HCA, for the words
    rail_sample: int = DEFAULT_RAIL_SAMPLE  # collbench_rails_sample
    rail_min_drop: float = DEFAULT_RAIL_MIN_DROP  # collbench_rails_min_drop


@dataclass(frozen=True)
class PairLaunch:
    pair: Pair
    dest: str  # relative to the run directory
    label: str  # names the launch directory on the nodes
    rails: tuple[int, ...] = ()  # a rail launch: the rails both hosts have


@dataclass(frozen=True)
class Step:
    """What the playbook does next: run `launches` as round `round`, or nothing (done)."""

    done: bool
    round: int | None
    kind: str | None
    launches: tuple[PairLaunch, ...]
    log: tuple[str, ...]  # lines added by this step, for the Ansible output
    rounds: int  # rounds planned so far (the last one running when not done)
    max_rounds: int
    plan: PlanRecord
    rail_launches: tuple[PairLaunch, ...] = ()  # pairs read rail by rail, apart from `launches`' hosts


def resolve_settings(
    pairs: str | None,
    *,
    collective: str | None,
    collectives: Sequence[str],
    k: Any,
    localisation_rounds: Any,
    seed: str,
    hosts: Sequence[str],
    groups: Mapping[str, Any] | None = None,
    min_drop: Any = DEFAULT_MIN_DROP,
    rails: Mapping[str, Sequence[int]] | None = None,
    hcas: Mapping[str, Mapping[int, str]] | None = None,
    rail_sample: Any = DEFAULT_RAIL_SAMPLE,
    rail_min_drop: Any = DEFAULT_RAIL_MIN_DROP,
) -> PairSettings | None:
    """The schedule settings, checked; None for `none`. Raises PairRunError on a bad value.

    `pairs` None is automatic (schedule.default_pair_schedule on the host count); `collective`
    None is all_reduce when the run measures it, else the run's first collective."""
    problems = settings_problems(
        pairs,
        collective=collective,
        collectives=collectives,
        k=k,
        localisation_rounds=localisation_rounds,
        groups=groups or {},
        min_drop=min_drop,
        rail_sample=rail_sample,
        rail_min_drop=rail_min_drop,
    )
    if problems:
        raise PairRunError("; ".join(problems))
    schedule = pairs if pairs is not None else default_pair_schedule(len(hosts))
    if schedule == "none":
        return None
    return PairSettings(
        schedule=schedule,
        collective=collective or default_collective(collectives),
        k=int(k),
        localisation_rounds=int(localisation_rounds),
        seed=str(seed),
        hosts=tuple(sorted(hosts)),
        groups={h: str(g) for h, g in (groups or {}).items() if g not in (None, "") and h in hosts},
        min_drop=float(min_drop),
        rails={h: tuple(sorted(set(v))) for h, v in (rails or {}).items() if v and h in hosts},
        hcas={h: dict(v) for h, v in (hcas or {}).items() if h in hosts},
        rail_sample=int(rail_sample),
        rail_min_drop=float(rail_min_drop),
    )


def default_collective(collectives: Sequence[str]) -> str:
    return "all_reduce" if "all_reduce" in collectives or not collectives else collectives[0]


def settings_problems(
    pairs: Any,
    *,
    collective: Any,
    collectives: Sequence[str],
    k: Any,
    localisation_rounds: Any,
    groups: Mapping[str, Any],
    min_drop: Any = DEFAULT_MIN_DROP,
    rail_sample: Any = DEFAULT_RAIL_SAMPLE,
    rail_min_drop: Any = DEFAULT_RAIL_MIN_DROP,
) -> list[str]:
    """One sentence per bad value (the preflight role says the same before any launch)."""
    problems = []
    if pairs is not None and pairs not in PAIR_SCHEDULES:
        problems.append(
            f"collbench_pairs must be one of {', '.join(PAIR_SCHEDULES)} (or unset), got {pairs!r}"
        )
    if not _whole(k, 1):
        problems.append(f"collbench_pairs_k must be a whole number of 1 or more, got {k!r}")
    if not _whole(localisation_rounds, 0):
        problems.append(
            "collbench_pairs_localisation_rounds must be a whole number of 0 or more, "
            f"got {localisation_rounds!r}"
        )
    if collective is not None and collective not in collectives:
        problems.append(
            f"collbench_pairs_collective {collective!r} is not one of the run's collectives "
            f"({', '.join(collectives)})"
        )
    if not _fraction(min_drop):
        problems.append(f"collbench_pairs_min_drop must be a fraction from 0 to below 1, got {min_drop!r}")
    if not _whole(rail_sample, 0):
        problems.append(f"collbench_rails_sample must be a whole number of 0 or more, got {rail_sample!r}")
    if not _fraction(rail_min_drop):
        problems.append(
            f"collbench_rails_min_drop must be a fraction from 0 to below 1, got {rail_min_drop!r}"
        )
    for host, group in sorted(groups.items()):
        if group is not None and (not isinstance(group, str) or not group.strip()):
            problems.append(f"collbench_topology_group of {host} must be a name (text), got {group!r}")
    return problems


def _whole(value: Any, least: int) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    return isinstance(value, int) and value >= least


def _fraction(value: Any) -> bool:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return False
    return not isinstance(value, bool) and 0 <= number < 1


def new_planner(
    plan: PlanRecord, min_drop: float, hcas: Mapping[str, Mapping[int, str]] | None = None
) -> Planner:
    return Planner(
        plan.hosts,
        k=plan.k,
        groups=plan.groups,
        seed=plan.seed,
        localisation_rounds=plan.localisation_rounds,
        round_robin=plan.schedule == "round-robin",
        min_drop=min_drop,
        rails=plan.rails,
        rail_sample=plan.rail_sample,
        rail_min_drop=plan.rail_min_drop,
        hcas=hcas,
    )


def rail_dest(pair: Pair, number: int, rails: Sequence[int] = ()) -> PairLaunch:
    """A rail launch's directory: inter/pairs/a--b/rails-round-<number> (a pair read twice gets two)."""
    name = link_name(pair)
    return PairLaunch(
        pair, f"inter/pairs/{name}/rails-round-{number}", f"rails-{name}-round-{number}", tuple(rails)
    )


def read_rail_map(run_dir: Path) -> dict[str, tuple[Rail, ...]]:
    """The run's rail map (inter/pairs/rails.json, collbench_py.pairs.railmap), host -> its rails;
    {} without one. Raises PairRunError when the file is there but unreadable."""
    try:
        return {host: found.rails for host, found in read_rails(run_dir).items()}
    except RailsFileError as error:
        raise PairRunError(
            f"{Path(run_dir) / RAILS_FILE}: not a rail map this version reads ({error})"
        ) from None


def pair_dest(pair: Pair, number: int, earlier: Iterable[Iterable[Pair]]) -> PairLaunch:
    """The pair's directory: inter/pairs/a--b the first time, .../round-<number> after."""
    name = link_name(pair)
    if any(pair in tuple(r) for r in earlier):
        return PairLaunch(pair, f"inter/pairs/{name}/round-{number}", f"pair-{name}-round-{number}")
    return PairLaunch(pair, f"inter/pairs/{name}", f"pair-{name}")


def step(run_dir: Path, settings: PairSettings, launches: Sequence[Mapping[str, Any]]) -> Step:
    """Record the round just run (if any), plan the next one, write plan.json; see the module doc.

    `launches` are the manifest entries recorded so far (launch.yml's collbench_launches): a
    pair's status says whether its log holds a measurement at all."""
    recorded = read_plan(run_dir)
    if recorded is None:
        recorded = _empty_record(settings)
    else:
        _check_same_plan(recorded, settings)
    planner = new_planner(recorded, settings.min_drop, settings.hcas)
    if recorded.finished:
        return Step(True, None, None, (), (), len(recorded.rounds), planner.max_rounds, recorded)
    rounds = list(recorded.rounds)
    measured = [r for r in rounds if _measured(r)]
    pending = rounds[len(measured) :]
    if len(pending) > 1 or any(_measured(r) for r in pending):
        raise PairRunError(f"{Path(run_dir) / PLAN_FILE}: only the last round may be unmeasured")
    for r in measured:
        _replay(planner, r, run_dir)
    size = recorded.size_bytes
    if pending:
        current = pending[0]
        _replay_plan(planner, current, run_dir)
    start = len(planner.log)  # what replaying wrote is in plan.json already
    if pending:
        found = read_round(run_dir, current, settings.collective, launches, rounds[:-1])
        size = size if size is not None else judged_size(points for points, _ in found.values())
        busbw = {pair: value_at(found[pair][0], size) for pair in current.pairs}
        unmeasured = [
            f"{link_name(pair)}: {found[pair][1] or f'no {size}-byte row in its log'}"
            for pair in current.pairs
            if busbw[pair] is None
        ]
        rails, unread = read_rail_round(run_dir, current, planner)
        planner.record(busbw, rails)
        if unmeasured:
            planner.log.append(f"round {current.number}: no busbw for " + "; ".join(unmeasured))
        if unread:
            planner.log.append(f"round {current.number}: no Gb/s for " + "; ".join(unread))
        rounds[-1] = PlanRound(
            current.number,
            current.kind,
            current.pairs,
            _by_link(busbw),
            current.rail_pairs,
            {link_name(pair): dict(sorted(v.items())) for pair, v in sorted(rails.items())},
        )
    nxt = planner.next_round()
    new_log = planner.log[start:]
    launches_next: tuple[PairLaunch, ...] = ()
    rail_next: tuple[PairLaunch, ...] = ()
    number = None
    kind = None
    if nxt is not None:
        number = len(rounds) + 1
        kind = planner.first_kind if number <= len(planner.initial) else "localisation"
        earlier = [r.pairs for r in rounds]
        launches_next = tuple(pair_dest(tuple(p), number, earlier) for p in nxt)
        rail_pairs = tuple(tuple(p) for p in planner.rail_pairs)
        rail_next = tuple(rail_dest(p, number, planner.rails_of(p)) for p in rail_pairs)
        rounds.append(PlanRound(number, kind, tuple(tuple(p) for p in nxt), {}, rail_pairs, {}))
        new_log.append(progress_line(number, kind, nxt, planner.max_rounds, rail_pairs))
    record = PlanRecord(
        schedule=recorded.schedule,
        collective=recorded.collective,
        size_bytes=size,
        k=recorded.k,
        localisation_rounds=recorded.localisation_rounds,
        seed=recorded.seed,
        hosts=recorded.hosts,
        groups=recorded.groups,
        rounds=tuple(rounds),
        decisions=tuple(plan_decision(d) for d in planner.decisions),
        log=recorded.log + tuple(new_log),
        finished=nxt is None,
        rails=recorded.rails,
        rail_sample=recorded.rail_sample,
        rail_min_drop=recorded.rail_min_drop,
        noise=planner.noise,
    )
    write_plan(run_dir, record)
    return Step(
        done=nxt is None,
        round=number,
        kind=kind,
        launches=launches_next,
        log=tuple(new_log),
        rounds=len(rounds),
        max_rounds=planner.max_rounds,
        plan=record,
        rail_launches=rail_next,
    )


def _measured(recorded: PlanRound) -> bool:
    """A round is measured once it has a value per pair (a round of rail checks only: per rail pair)."""
    return bool(recorded.busbw or recorded.rails)


def _empty_record(settings: PairSettings) -> PlanRecord:
    if settings.schedule not in ("adaptive", "round-robin"):
        raise PairRunError(f"no plan for the pair schedule {settings.schedule!r}")
    return PlanRecord(
        schedule=settings.schedule,
        collective=settings.collective,
        size_bytes=None,
        k=settings.k,
        localisation_rounds=settings.localisation_rounds,
        seed=settings.seed,
        hosts=tuple(sorted(settings.hosts)),
        groups=dict(sorted(settings.groups.items())),
        rounds=(),
        decisions=(),
        log=(),
        finished=False,
        rails={h: tuple(v) for h, v in sorted(settings.rails.items()) if h in settings.hosts},
        rail_sample=settings.rail_sample,
        rail_min_drop=settings.rail_min_drop,
    )


def _check_same_plan(recorded: PlanRecord, settings: PairSettings) -> None:
    """plan.json must be this run's plan: the hosts may have left the run since, nothing else."""
    wanted = {
        "schedule": settings.schedule,
        "collective": settings.collective,
        "k": settings.k,
        "localisation_rounds": settings.localisation_rounds,
        "seed": settings.seed,
        "rail_sample": settings.rail_sample,
        "rail_min_drop": settings.rail_min_drop,
    }
    differ = [
        f"{key} {getattr(recorded, key)!r} (asked {value!r})"
        for key, value in wanted.items()
        if getattr(recorded, key) != value
    ]
    if differ:
        raise PairRunError(f"{PLAN_FILE} belongs to another plan: {'; '.join(differ)}")


def _replay(planner: Planner, recorded: PlanRound, run_dir: Path) -> None:
    _replay_plan(planner, recorded, run_dir)
    planner.record(
        {tuple(pair): recorded.busbw.get(link_name(pair)) for pair in recorded.pairs},
        {tuple(pair): recorded.rails.get(link_name(pair), {}) for pair in recorded.rail_pairs},
    )


def _replay_plan(planner: Planner, recorded: PlanRound, run_dir: Path) -> None:
    planned = planner.next_round()
    rail_pairs = [tuple(p) for p in planner.rail_pairs]
    if (
        planned is None
        or [tuple(p) for p in planned] != [tuple(p) for p in recorded.pairs]
        or rail_pairs != [tuple(p) for p in recorded.rail_pairs]
    ):
        raise PairRunError(
            f"{Path(run_dir) / PLAN_FILE}: round {recorded.number} as recorded "
            f"({_round_words(recorded.pairs, recorded.rail_pairs)}) is not the round the plan gives "
            f"({_round_words(planned or [], rail_pairs) if planned is not None else 'none'}): the file was "
            "changed, or written by another version"
        )


def _round_words(pairs: Sequence[Pair], rail_pairs: Sequence[Pair]) -> str:
    words = ", ".join(map(link_name, pairs)) or "no pairs"
    return words + (f"; rails of {', '.join(map(link_name, rail_pairs))}" if rail_pairs else "")


def _by_link(busbw: Mapping[Pair, float | None]) -> dict[str, float | None]:
    return {link_name(pair): value for pair, value in sorted(busbw.items())}


# ---------------------------------------------------------------------------------------------
# Reading a round's measurements


def read_round(
    run_dir: Path,
    current: PlanRound,
    collective: str,
    launches: Sequence[Mapping[str, Any]],
    earlier: Sequence[PlanRound],
) -> dict[Pair, tuple[dict[int, float] | None, str | None]]:
    """Each pair's busbw by size from its log of `collective`, or None and why not."""
    earlier_pairs = [r.pairs for r in earlier]
    found: dict[Pair, tuple[dict[int, float] | None, str | None]] = {}
    for pair in current.pairs:
        pair = (pair[0], pair[1])
        where = pair_dest(pair, current.number, earlier_pairs)
        entry = launch_entry(launches, pair, collective, current.number)
        found[pair] = pair_series(run_dir, where.dest, collective, pair, entry)
    return found


def launch_entry(
    launches: Sequence[Mapping[str, Any]], pair: Pair, collective: str, number: int
) -> Mapping[str, Any] | None:
    """The manifest entry of the pair's launch of `collective` in round `number`, if it was started."""
    for entry in launches:
        if (
            isinstance(entry, Mapping)
            and entry.get("kind") == "pair"
            and entry.get("collective") == collective
            and sorted(entry.get("hosts") or []) == list(pair)
            and str(entry.get("round")) == str(number)
        ):
            return entry
    return None


def pair_series(
    run_dir: Path, dest: str, collective: str, pair: Pair, entry: Mapping[str, Any] | None
) -> tuple[dict[int, float] | None, str | None]:
    """busbw by size from the pair's log; None and why when the launch was not ok or its log
    holds no measurement (read as the report reads it: rundir, -J JSON included)."""
    if entry is None:
        return None, "not started"
    if entry.get("status") != "ok":
        return None, f"launch {entry.get('status')}"
    log_path = f"{dest}/{collective}.log"
    launch = Launch(kind="pair", hosts=pair, collective=collective, log=log_path, status="ok")
    log = load_log(run_dir, launch)
    if not log.exists:
        return None, f"no log ({log_path})"
    run = log.run
    if run is None or run.status != "ok":
        why = log.parse_error or (f"the run is {run.status}" if run is not None else "no result")
        return None, f"{log_path}: {why}"
    points = dict(series(run))
    return (points, None) if points else (None, f"{log_path}: no busbw row")


def read_rail_round(
    run_dir: Path, current: PlanRound, planner: Planner
) -> tuple[dict[Pair, dict[int, float | None]], list[str]]:
    """Each rail pair's Gb/s per rail from `<dest>/rail<k>.log`, and why a rail has none."""
    found: dict[Pair, dict[int, float | None]] = {}
    unread: list[str] = []
    for pair in current.rail_pairs:
        pair = (pair[0], pair[1])
        where = rail_dest(pair, current.number)
        found[pair] = {}
        for k in planner.rails_of(pair):
            value, why = rail_gbits(Path(run_dir) / where.dest / f"rail{k}.log")
            found[pair][k] = value
            if why:
                unread.append(f"{link_name(pair)} rail {k}: {why}")
    return found, unread


def rail_gbits(path: Path) -> tuple[float | None, str | None]:
    """A rail's Gb/s from its ib_write_bw client log, or None and why not."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None, f"no log ({path.name})"
    except OSError as error:
        return None, f"{path.name}: {error.strerror or error}"
    try:
        runs = parse_perftest(text, str(path)).records
    except ParseError as error:
        return None, f"{path.name}: {error}"
    for run in runs:
        value = peak_gbits(run)
        if value is not None:
            return value, None
    statuses = ", ".join(sorted({run.status for run in runs})) or "nothing"
    return None, f"{path.name}: no result ({statuses})"


def judged_size(found: Iterable[dict[int, float] | None]) -> int | None:
    """The largest size every measured pair reached; None when no pair measured anything."""
    common: set[int] | None = None
    for points in found:
        if points:
            common = set(points) if common is None else common & set(points)
    return max(common) if common else None


def value_at(points: dict[int, float] | None, size: int | None) -> float | None:
    if points is None or size is None:
        return None
    return points.get(size)


# ---------------------------------------------------------------------------------------------
# Words and records


def progress_line(
    number: int, kind: str, pairs: Sequence[Pair], most: int, rail_pairs: Sequence[Pair] = ()
) -> str:
    named = ", ".join(link_name(p) for p in pairs[:PAIRS_NAMED])
    more = f" and {len(pairs) - PAIRS_NAMED} more" if len(pairs) > PAIRS_NAMED else ""
    line = f"round {number} of at most {most} ({kind}): {len(pairs)} pair(s): {named}{more}"
    if rail_pairs:
        line += f"; rail by rail: {', '.join(link_name(p) for p in rail_pairs)}"
    return line


def plan_decision(decision: Decision) -> PlanDecision:
    return PlanDecision(
        kind=decision.kind,
        subject=decision.subject,
        pairs=tuple(decision.pairs),
        witnesses=tuple(plan_witness(w) for w in decision.witnesses),
        reason=decision.reason,
        host=decision.host,
        rail=decision.rail,
        hca=decision.hca,
    )


def plan_witness(witness: Witness) -> PlanWitness:
    return PlanWitness(
        witness.round, witness.pair, witness.busbw, witness.status, witness.rail, witness.gbits
    )
