"""Run directories whose pair plan measured rails: 8 hosts, 4 rails each (mlx5_k with GPU k).

The pair logs are real nccl-tests output (tests/rundir_factory.py), the rail figures a real
ib_write_bw output's (parsers.perftest.peak_gbits of a ConnectX-7 run in the corpus), scaled where a
rail is slow. plan.json is written by hand in its schema 2 form (rails, rail_pairs, rail decisions),
inter/pairs/rails.json as the rail map writes it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from collbench_py.parsers.perftest import parse, peak_gbits
from tests.rundir_factory import RunSpec, build_run_dir

HOSTS = [f"node{i}" for i in range(1, 9)]
RAILS = 4
PERFTEST = Path(__file__).parent / "data/corpus/perftest/dgx-spark-cx7-write-bw-4qp-rdma-cm-and-write-lat.txt"
# Round 1 and 2 of nccl pairs: node3 is in (node3, node4) and (node1, node3).
NCCL_ROUNDS = [
    [("node1", "node2"), ("node3", "node4"), ("node5", "node6"), ("node7", "node8")],
    [("node1", "node3"), ("node2", "node5"), ("node4", "node7"), ("node6", "node8")],
]


def healthy_gbits() -> float:
    runs = parse(PERFTEST.read_text(encoding="utf-8"), PERFTEST.name).records
    value = next(peak_gbits(r) for r in runs if peak_gbits(r))
    assert value is not None
    return value


def _rails_json() -> dict[str, Any]:
    return {
        "schema": 1,
        "hosts": {
            h: {
                "rails": [{"index": k, "hca": f"mlx5_{k}", "port": 1, "gpu": k} for k in range(RAILS)],
                "source": "topo -m: GPU k -> nearest PIX/PXB NIC",
            }
            for h in HOSTS
        },
    }


def _rail_values(slow: dict[int, float]) -> dict[str, float | None]:
    base = healthy_gbits()
    return {str(k): round(base * slow.get(k, 1.0), 2) for k in range(RAILS)}


def _witnesses(number: int, pair: list[str], values: dict[str, float | None], slow_below: float) -> list:
    return [
        {
            "round": number,
            "pair": pair,
            "busbw": None,
            "rail": int(k),
            "gbits": v,
            "status": "failed" if v is None else "slow" if v < slow_below else "ok",
        }
        for k, v in values.items()
    ]


def _plan(
    rail_rounds: list[dict[str, dict[str, float | None]]], decisions: list[dict[str, Any]]
) -> dict[str, Any]:
    rounds = [
        {
            "number": n,
            "kind": "initial" if n == 1 else "localisation",
            "pairs": [list(p) for p in pairs],
            "busbw": {},
            "rail_pairs": [],
            "rails": {},
        }
        for n, pairs in enumerate(NCCL_ROUNDS, start=1)
    ]
    for n, measured in enumerate(rail_rounds, start=len(NCCL_ROUNDS) + 1):
        rounds.append(
            {
                "number": n,
                "kind": "localisation",
                "pairs": [],
                "busbw": {},
                "rail_pairs": [label.split("--") for label in measured],
                "rails": measured,
            }
        )
    return {
        "schema": 2,
        "schedule": "adaptive",
        "collective": "all_reduce",
        "size_bytes": 268435456,
        "k": 3,
        "localisation_rounds": 3,
        "seed": "test",
        "hosts": HOSTS,
        "groups": {},
        "rails": {h: list(range(RAILS)) for h in HOSTS},
        "rail_sample": 4,
        "rail_min_drop": 0.1,
        "rounds": rounds,
        "decisions": decisions,
        "log": [],
        "finished": True,
    }


def bad_nic_run(
    root: Path, host: str = "node3", rail: int = 2, failed_link: tuple[str, str] | None = None
) -> Path:
    """node3's NIC of rail 2 at about half speed: its two nccl pairs slow, its rail measurements with
    two known-good partners slow on rail 2 only (50 % with node1, 45 % with node5)."""
    scale = {p: 0.85 for rnd in NCCL_ROUNDS for p in rnd if host in p}
    failed = {}
    if failed_link is not None:  # a failed link of its own, as well: both ends normal elsewhere
        failed[f"inter/pairs/{failed_link[0]}--{failed_link[1]}/all_reduce.log"] = ("failed", 1)
    spec = RunSpec(hosts=HOSTS, pair_rounds=NCCL_ROUNDS, pair_scale=scale, launch_status=failed)
    run = build_run_dir(root, spec)
    slow_below = healthy_gbits() * 0.9
    first = {"node1--node3": _rail_values({rail: 0.5}), "node2--node4": _rail_values({})}
    second = {"node3--node5": _rail_values({rail: 0.45}), "node6--node8": _rail_values({})}
    decision = {
        "kind": "bad nic",
        "subject": f"{host}:rail{rail}",
        "host": host,
        "rail": rail,
        "hca": f"mlx5_{rail}",
        "pairs": [sorted(p) for rnd in NCCL_ROUNDS for p in rnd if host in p],
        "witnesses": _witnesses(3, ["node1", "node3"], first["node1--node3"], slow_below)
        + _witnesses(4, ["node3", "node5"], second["node3--node5"], slow_below),
        "reason": f"{host} NIC mlx5_{rail} of rail {rail}: slow with 2 known-good partners (node1, node5), "
        "its other rails normal",
    }
    _write(run, _plan([first, second], [decision]))
    return run


def bad_rail_run(root: Path, rail: int = 1, nccl_scale: float = 1.0) -> Path:
    """Rail 1's leaf slow: rail 1 slow in three host-disjoint sample pairs, their other rails normal;
    the nccl pairs all alike."""
    scale = {p: nccl_scale for rnd in NCCL_ROUNDS for p in rnd}
    run = build_run_dir(root, RunSpec(hosts=HOSTS, pair_rounds=NCCL_ROUNDS, pair_scale=scale))
    slow_below = healthy_gbits() * 0.9
    sample = {
        "node1--node2": _rail_values({rail: 0.5}),
        "node3--node4": _rail_values({rail: 0.5}),
        "node5--node6": _rail_values({rail: 0.5}),
    }
    decision = {
        "kind": "bad rail",
        "subject": f"rail{rail}",
        "host": None,
        "rail": rail,
        "hca": None,
        "pairs": [],
        "witnesses": [
            w for label, v in sample.items() for w in _witnesses(3, label.split("--"), v, slow_below)
        ],
        "reason": f"rail {rail} slow in 3 host-disjoint pairs, their other rails normal",
    }
    _write(run, _plan([sample], [decision]))
    return run


def healthy_run(root: Path) -> Path:
    run = build_run_dir(root, RunSpec(hosts=HOSTS, pair_rounds=NCCL_ROUNDS))
    sample = {
        "node1--node2": _rail_values({}),
        "node3--node4": _rail_values({}),
        "node5--node6": _rail_values({}),
    }
    _write(run, _plan([sample], []))
    return run


def _write(run: Path, plan: dict[str, Any]) -> None:
    (run / "inter/pairs").mkdir(parents=True, exist_ok=True)
    (run / "inter/pairs/plan.json").write_text(json.dumps(plan, indent=1), encoding="utf-8")
    (run / "inter/pairs/rails.json").write_text(json.dumps(_rails_json(), indent=1), encoding="utf-8")
