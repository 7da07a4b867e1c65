"""A rail launch: one pair measured rail by rail by collbench_py/node/rail_bw.py on its first host.

The pair plan names the round's rail launches (`rail_pairs` of action collbench_pair_plan:
{"hosts": [a, b], "label", "dest", "rails": [{"index", "hca_a", "hca_b", "gpu_a", "gpu_b"}]}).
The round's controller task (action_plugins/collbench_round.py) runs the node program on host a with
the config `rail_bw_config` builds, fetches its logs into `<dest>/rail<k>.log` and
`<dest>/rail<k>.server.log` of the run directory, and records the launch's one manifest entry
(`rail_entry`, kind "rails"; docs/run-directory.md). A rail check never fails the run: whatever
went wrong is the entry's status and reason, and the rail's log says it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from collbench_py.launch.steps import utc_now

# The most a rail launch may take beyond its rails' own bound (rail_bw.py's defaults): the
# servers' ssh login and start, the sweep of leftovers on the second host.
SERVER_READY_S = 30
SWEEP_S = 30


def rail_timeout_s(seconds: int) -> int:
    """rail_bw.py's bound of each rail (its default): a few durations, plus CUDA's start."""
    return 3 * int(seconds) + 60


def backstop_s(seconds: int) -> int:
    """Ansible's bound of the whole launch: it only acts on a node that stops answering."""
    return SERVER_READY_S + rail_timeout_s(seconds) + SWEEP_S + 120


def ib_write_bw(perftest: Mapping[str, Any] | None) -> str:
    """The host's ib_write_bw as its perftest build published it (collbench_perftest), or ""."""
    bin_dir = str((perftest or {}).get("bin_dir") or "")
    return f"{bin_dir.rstrip('/')}/ib_write_bw" if bin_dir else ""


def rail_bw_config(
    launch: Mapping[str, Any],
    this: Mapping[str, Any],
    peer: Mapping[str, Any],
    *,
    perftest: Mapping[str, Any] | None,
    peer_perftest: Mapping[str, Any] | None,
    seconds: int,
    size: int,
) -> dict[str, Any]:
    """rail_bw.py's CONFIG_JSON for the launch's first host `this` (its __benchmark_host) against
    `peer`: the ssh of mpirun (its rsh args), each side's ib_write_bw, GPUDirect where both have it."""
    gpudirect = bool((perftest or {}).get("gpudirect")) and bool((peer_perftest or {}).get("gpudirect"))
    return {
        "out_dir": f"{str(this['run_root']).rstrip('/')}/{launch['label']}",
        "peer": str(peer["address"]),
        "rsh": ["ssh", *[str(arg) for arg in this.get("rsh_args") or ()]],
        "ib_write_bw": ib_write_bw(perftest),
        "peer_ib_write_bw": ib_write_bw(peer_perftest),
        "gpudirect": gpudirect,
        "rails": [dict(rail) for rail in launch["rails"]],
        "seconds": int(seconds),
        "size": int(size),
        "timeout_s": rail_timeout_s(seconds),
        "server_ready_s": SERVER_READY_S,
    }


def pair_rail_config(
    launch: Mapping[str, Any], hostvars: Mapping[str, Mapping[str, Any]], *, seconds: int, size: int
) -> dict[str, Any]:
    """rail_bw.py's config for `launch` (a rail_pairs item) from the pair's hostvars: each host's
    __benchmark_host and collbench_perftest."""
    this, peer = (hostvars[name] for name in launch["hosts"])
    return rail_bw_config(
        launch,
        this["__benchmark_host"],
        peer["__benchmark_host"],
        perftest=this.get("collbench_perftest"),
        peer_perftest=peer.get("collbench_perftest"),
        seconds=int(seconds),
        size=int(size),
    )


def rail_entry(
    launch: Mapping[str, Any],
    result: Mapping[str, Any],
    fetched: Sequence[str],
    *,
    hosts: Sequence[str],
    round_: int | None,
    now: str | None = None,
) -> dict[str, Any]:
    """The manifest entry of one rail launch, from the node program's registered result.

    `fetched`: the file names brought back into <dest>/; `hosts`: the pair's directory names."""
    now = now or utc_now()
    entry: dict[str, Any] = {
        "kind": "rails",
        "hosts": list(hosts),
        "label": launch["label"],
        "dest": launch["dest"],
        "round": round_,
        "logs": [f"{launch['dest']}/{name}" for name in sorted(fetched)],
    }
    if result.get("skipped") or result.get("check_mode"):
        return entry | {"status": "skipped", "rc": None, "started_at": None, "finished_at": None, "rails": []}
    summary = _summary(result.get("stdout"))
    if result.get("rc") != 0 or summary is None:
        reason = _last_line(result.get("stderr")) or _last_line(result.get("msg")) or "no summary"
        status = "timeout" if result.get("timedout") else "failed"
        return entry | {
            "status": status,
            "rc": result.get("rc"),
            "started_at": now,
            "finished_at": now,
            "reason": f"rail_bw.py: {reason}",
            "rails": [],
        }
    return entry | {
        "status": summary["status"],
        "rc": 0,
        "started_at": summary.get("started_at"),
        "finished_at": summary.get("finished_at"),
        "rails": [
            {"index": rail.get("index"), "status": rail.get("status"), "note": rail.get("note")}
            for rail in summary["rails"]
        ],
    }


def _summary(stdout: Any) -> dict[str, Any] | None:
    lines = [line for line in str(stdout or "").splitlines() if line.strip()]
    try:
        summary = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    valid = (
        isinstance(summary, dict)
        and summary.get("status") in ("ok", "failed", "timeout", "skipped")
        and isinstance(summary.get("rails"), list)
        and all(isinstance(rail, dict) for rail in summary["rails"])
    )
    return summary if valid else None


def _last_line(text: Any) -> str:
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""
