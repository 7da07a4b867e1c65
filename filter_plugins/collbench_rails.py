"""Thin filter over collbench_py.pairs.railmap: the logic lives in the package, where it is tested."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# From a checkout the package sits next to this directory; an installed one is found anyway.
_REPO = str(Path(__file__).resolve().parent.parent)
if _REPO not in sys.path:
    sys.path.append(_REPO)

# collbench_py is imported inside each filter, not here: Ansible loads every filter file in each
# worker process that templates any filter (every task, every host), and importing the package
# there cost ~0.3 s of controller CPU per task and host.


def collbench_rail_problems(settings: dict[str, Any]) -> list[str]:
    """One sentence per bad rail setting; settings: {rails: {host: collbench_rails}, sample,
    min_drop, seconds, size}."""
    from collbench_py.pairs.railmap import rail_settings_problems

    return rail_settings_problems(
        dict(settings.get("rails") or {}),
        sample=settings.get("sample"),
        min_drop=settings.get("min_drop"),
        seconds=settings.get("seconds"),
        size=settings.get("size"),
    )


def collbench_rail_map(
    settings: dict[str, Any], run_dir: str, dir_names: dict[str, str], perftest: dict[str, Any] | None = None
) -> dict[str, Any]:
    """rails.json's content from {inventory host: collbench_rails} and the run directory's hosts
    (their facts.json and topo.txt), keyed by directory name; perftest: {inventory host:
    collbench_perftest}, a host without ib_write_bw gets no rails."""
    from collbench_py.pairs.railmap import rails_document, run_rails

    by_dir = {str(dir_names.get(host, host)): setting for host, setting in settings.items()}
    tools = None if perftest is None else {str(dir_names.get(h, h)): t for h, t in perftest.items()}
    return rails_document(run_rails(run_dir, by_dir, tools))


def collbench_rails_on(setting: Any, phases: list[str], pairs: str | None) -> bool:
    """Whether this host's rails are measured (and perftest is needed on it)."""
    from collbench_py.pairs.railmap import rails_on

    return rails_on(setting, phases, pairs)


def collbench_rail_config(launch: dict[str, Any], hostvars: dict[str, Any], settings: dict[str, Any]) -> dict:
    """rail_bw.py's config for `launch` (a rail_pairs item) from the pair's hostvars: each host's
    __benchmark_host and collbench_perftest; settings: {seconds, size}."""
    from collbench_py.launch.rail_launch import rail_bw_config

    this, peer = (hostvars[name] for name in launch["hosts"])
    return rail_bw_config(
        launch,
        this["__benchmark_host"],
        peer["__benchmark_host"],
        perftest=this.get("collbench_perftest"),
        peer_perftest=peer.get("collbench_perftest"),
        seconds=int(settings["seconds"]),
        size=int(settings["size"]),
    )


def collbench_rail_entry(
    result: dict[str, Any], launch: dict[str, Any], fetched: list[str], hosts: list[str], round_: int | None
) -> list[dict[str, Any]]:
    """[the manifest entry] of one rail launch (a list, to add to collbench_launches)."""
    from collbench_py.launch.rail_launch import rail_entry

    names = [str(name).rsplit("/", 1)[-1] for name in fetched]
    return [rail_entry(launch, result, names, hosts=hosts, round_=None if round_ is None else int(round_))]


def collbench_rail_backstop_s(seconds: Any) -> int:
    """Ansible's bound of one rail launch, from collbench_rails_seconds."""
    from collbench_py.launch.rail_launch import backstop_s

    return backstop_s(int(seconds))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "collbench_rail_problems": collbench_rail_problems,
            "collbench_rails_on": collbench_rails_on,
            "collbench_rail_map": collbench_rail_map,
            "collbench_rail_config": collbench_rail_config,
            "collbench_rail_entry": collbench_rail_entry,
            "collbench_rail_backstop_s": collbench_rail_backstop_s,
        }
