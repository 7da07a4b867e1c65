"""`inter/pairs/plan.json`: the pair schedule of a run, as the controller planned and judged it.

Written after every round of pairs (the controller decides the next round from it), read by the
report to put the suspects and their witnesses first. Host names are the run directory's
(`<host>` of hosts/<host>/), a pair is sorted, a link is named "a--b".

    {
      "schema": 2,                             # 1: before rail checks (read as no rails)
      "schedule": "adaptive",                  # or "round-robin"
      "collective": "all_reduce",              # what the plan judged, at
      "size_bytes": 268435456,                 # the largest size every pair measured
      "k": 3, "localisation_rounds": 3, "seed": "20261124T...-3f9a2c",
      "hosts": ["node01", ...],
      "groups": {"node01": "leaf1", ...},      # host -> rack/leaf/rail; {} without
      "rails": {"node01": [0, 1, 2, 3], ...},  # host -> rail indices; {}: no rail checks
      "rail_sample": 4, "rail_min_drop": 0.1,
      "noise": 0.0093,                         # the night's pair noise, a fraction of the fleet
                                               # (1.4826 x MAD of the first rounds' pairs); null
                                               # until they are measured, and in older files
      "rounds": [
        {"number": 1, "kind": "initial",       # initial | localisation | round-robin
         "pairs": [["node01", "node02"], ...],
         "busbw": {"node01--node02": 11.9, "node03--node04": null},   # null: the launch failed
         "rail_pairs": [["node01", "node03"]],                        # read rail by rail
         "rails": {"node01--node03": {"0": 399.1, "2": 101.2, "1": null}}}  # Gb/s; null: failed
      ],
      "decisions": [
        {"kind": "bad node", "subject": "node05",   # bad node | bad link | bad nic | bad rail | unresolved
         "pairs": [["node01", "node05"], ...],
         "witnesses": [{"round": 1, "pair": ["node01", "node05"], "busbw": 0.01, "status": "slow",
                        "rail": null, "gbits": null}],            # a rail witness: rail k, gbits
         "reason": "node05: slow with 3 of 3 partners ...",
         "host": null, "rail": null, "hca": null}   # "node3:rail2": "node3", 2, "mlx5_2"
      ],
      "log": ["round 1 (initial, 8 pairs): ...", ...],
      "finished": true
    }
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from collbench_py.rundir.private_files import write_private

SCHEMA = 2
SCHEMAS_READ = (1, 2)
DEFAULT_RAIL_SAMPLE = 4
DEFAULT_RAIL_MIN_DROP = 0.1
PLAN_PATH = "inter/pairs/plan.json"
SCHEDULES = ("adaptive", "round-robin")
ROUND_KINDS = ("initial", "localisation", "round-robin")
DECISION_KINDS = ("bad node", "bad link", "bad nic", "bad rail", "unresolved")
WITNESS_STATUSES = ("ok", "suspect", "slow", "failed")


class PlanFileError(ValueError):
    """plan.json is not what this module writes; the message names the file and the field."""


@dataclass(frozen=True)
class PlanWitness:
    round: int
    pair: tuple[str, str]
    busbw: float | None
    status: str
    rail: int | None = None  # a rail witness: the rail, its Gb/s in gbits, busbw None
    gbits: float | None = None


@dataclass(frozen=True)
class PlanDecision:
    kind: str
    subject: str
    pairs: tuple[tuple[str, str], ...]
    witnesses: tuple[PlanWitness, ...]
    reason: str
    host: str | None = None
    rail: int | None = None
    hca: str | None = None


@dataclass(frozen=True)
class PlanRound:
    number: int
    kind: str
    pairs: tuple[tuple[str, str], ...]
    busbw: dict[str, float | None]  # "a--b" -> GB/s; empty until the round is measured
    rail_pairs: tuple[tuple[str, str], ...] = ()
    rails: dict[str, dict[int, float | None]] = field(default_factory=dict)  # "a--b" -> rail -> Gb/s


@dataclass(frozen=True)
class PlanRecord:
    schedule: str
    collective: str
    size_bytes: int | None
    k: int
    localisation_rounds: int
    seed: str
    hosts: tuple[str, ...]
    groups: dict[str, str]
    rounds: tuple[PlanRound, ...]
    decisions: tuple[PlanDecision, ...]
    log: tuple[str, ...]
    finished: bool
    rails: dict[str, tuple[int, ...]] = field(default_factory=dict)  # host -> rail indices
    rail_sample: int = DEFAULT_RAIL_SAMPLE
    rail_min_drop: float = DEFAULT_RAIL_MIN_DROP
    noise: float | None = None  # the night's pair noise (planner.measured_noise); None: not measured


def link_name(pair: tuple[str, str] | list[str]) -> str:
    return f"{pair[0]}--{pair[1]}"


def to_json(record: PlanRecord) -> str:
    data = {"schema": SCHEMA, **asdict(record)}
    return json.dumps(data, indent=1, allow_nan=False) + "\n"


def write_plan(run_dir: Path, record: PlanRecord) -> Path:
    """Write (or replace: the plan grows round by round) the run's plan.json, 0600, whole."""
    path = Path(run_dir) / PLAN_PATH
    write_private(path, to_json(record).encode())
    return path


def read_plan(run_dir: Path) -> PlanRecord | None:
    """The run's plan, or None when the run has none (no pairs, or a run before plans existed).

    Raises PlanFileError with one clear sentence when the file is there but not a plan."""
    path = Path(run_dir) / PLAN_PATH
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PlanFileError(f"{path}: not a readable plan ({error})") from None
    try:
        return _record(data)
    except (KeyError, TypeError, ValueError) as error:
        raise PlanFileError(f"{path}: not a plan this version reads ({error})") from None


def _record(data: Any) -> PlanRecord:
    _expect(isinstance(data, dict), "the top level is not an object")
    schema = data.get("schema")
    _expect(
        schema in SCHEMAS_READ and not isinstance(schema, bool),
        f"schema {schema!r}, expected one of {', '.join(map(str, SCHEMAS_READ))}",
    )
    _expect(data["schedule"] in SCHEDULES, f"schedule {data['schedule']!r}")
    hosts = tuple(_text(h, "hosts[]") for h in data["hosts"])
    groups = {_text(k, "groups"): _text(v, "groups") for k, v in dict(data.get("groups") or {}).items()}
    size = data.get("size_bytes")
    return PlanRecord(
        schedule=data["schedule"],
        collective=_text(data["collective"], "collective"),
        size_bytes=None if size is None else _count(size, "size_bytes"),
        k=_count(data["k"], "k"),
        localisation_rounds=_count(data["localisation_rounds"], "localisation_rounds"),
        seed=_text(data["seed"], "seed"),
        hosts=hosts,
        groups=groups,
        rounds=tuple(_round(r) for r in data["rounds"]),
        decisions=tuple(_decision(d) for d in data["decisions"]),
        log=tuple(_text(line, "log[]") for line in data["log"]),
        finished=bool(data["finished"]),
        rails={
            _text(h, "rails"): tuple(_count(k, "rails[]") for k in _list(v, "rails"))
            for h, v in _object(data.get("rails") or {}, "rails").items()
        },
        rail_sample=_count(data.get("rail_sample", DEFAULT_RAIL_SAMPLE), "rail_sample"),
        rail_min_drop=_fraction(data.get("rail_min_drop", DEFAULT_RAIL_MIN_DROP), "rail_min_drop"),
        noise=None if data.get("noise") is None else _fraction(data["noise"], "noise"),
    )


def _round(data: Any) -> PlanRound:
    _expect(data["kind"] in ROUND_KINDS, f"round kind {data['kind']!r}")
    return PlanRound(
        number=_count(data["number"], "rounds[].number"),
        kind=data["kind"],
        pairs=tuple(_pair(p) for p in data["pairs"]),
        busbw={_text(k, "busbw"): _busbw(v) for k, v in dict(data.get("busbw") or {}).items()},
        rail_pairs=tuple(_pair(p) for p in data.get("rail_pairs") or ()),
        rails={
            _text(link, "rails"): {_rail_key(k): _busbw(v) for k, v in _object(values, "rails").items()}
            for link, values in _object(data.get("rails") or {}, "rails").items()
        },
    )


def _decision(data: Any) -> PlanDecision:
    _expect(data["kind"] in DECISION_KINDS, f"decision kind {data['kind']!r}")
    return PlanDecision(
        kind=data["kind"],
        subject=_text(data["subject"], "decisions[].subject"),
        pairs=tuple(_pair(p) for p in data["pairs"]),
        witnesses=tuple(_witness(w) for w in data["witnesses"]),
        reason=_text(data["reason"], "decisions[].reason"),
        host=_optional_text(data.get("host"), "decisions[].host"),
        rail=None if data.get("rail") is None else _count(data["rail"], "decisions[].rail"),
        hca=_optional_text(data.get("hca"), "decisions[].hca"),
    )


def _witness(data: Any) -> PlanWitness:
    _expect(data["status"] in WITNESS_STATUSES, f"witness status {data['status']!r}")
    return PlanWitness(
        round=_count(data["round"], "witnesses[].round"),
        pair=_pair(data["pair"]),
        busbw=_busbw(data["busbw"]),
        status=data["status"],
        rail=None if data.get("rail") is None else _count(data["rail"], "witnesses[].rail"),
        gbits=_busbw(data.get("gbits")),
    )


def _pair(value: Any) -> tuple[str, str]:
    _expect(isinstance(value, list | tuple) and len(value) == 2, f"pair {value!r}")
    return (_text(value[0], "pair"), _text(value[1], "pair"))


def _busbw(value: Any) -> float | None:
    if value is None:
        return None
    _expect(isinstance(value, int | float) and not isinstance(value, bool), f"busbw {value!r}")
    _expect(math.isfinite(value) and value >= 0, f"busbw {value!r}")
    return float(value)


def _count(value: Any, name: str) -> int:
    _expect(isinstance(value, int) and not isinstance(value, bool) and value >= 0, f"{name} {value!r}")
    return value


def _rail_key(value: Any) -> int:
    """A rail index, a JSON object key: "2"."""
    _expect(isinstance(value, str) and value.isdigit(), f"rail {value!r}")
    return int(value)


def _fraction(value: Any, name: str) -> float:
    _expect(isinstance(value, int | float) and not isinstance(value, bool), f"{name} {value!r}")
    _expect(0 <= value < 1, f"{name} {value!r}")
    return float(value)


def _object(value: Any, name: str) -> dict:
    _expect(isinstance(value, dict), f"{name} {value!r} is not an object")
    return value


def _list(value: Any, name: str) -> list:
    _expect(isinstance(value, list), f"{name} {value!r} is not a list")
    return value


def _optional_text(value: Any, name: str) -> str | None:
    return None if value is None else _text(value, name)


def _text(value: Any, name: str) -> str:
    _expect(isinstance(value, str), f"{name} {value!r} is not text")
    return value


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise ValueError(what)
