#!/usr/bin/env python3
"""Ansible inventory from Slurm: the nodes of a partition (or a node list) as `sinfo` reports them.

    COLLBENCH_SLURM_PARTITION=gpu ansible-inventory -i inventory/slurm_inventory.py --list
    COLLBENCH_SLURM_PARTITION=gpu ansible-playbook bench.yml -i inventory/slurm_inventory.py

Run it on a login node (where `sinfo` reaches slurmctld), from this checkout: it imports collbench_py
from the directory above its own. Environment:
  COLLBENCH_SLURM_PARTITION  the partition whose nodes to list
  COLLBENCH_SLURM_NODES      a hostlist expression (gpu[001-016]); nodes Slurm does not know are listed
                             as unusable. At least one of the two is needed; both: the nodes of the
                             list that are in the partition.
  COLLBENCH_SLURM_SINFO      the sinfo command (default `sinfo` on PATH)
Groups: `gpu_nodes` (usable nodes) and `slurm_unusable` (down, drained, draining, not responding, ...:
host var `collbench_slurm_reason` says why). Nodes of COLLBENCH_SLURM_NODES get `collbench_slurm_named`.
See docs/slurm.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collbench_py.slurm.nodes import (  # the checkout's package, found through the line above
    SlurmInputError,
    SlurmNode,
    ansible_inventory,
    expand_hostlist,
    missing_nodes,
    parse_sinfo,
    sinfo_argv,
)

SINFO_TIMEOUT_S = 60


class InventoryError(RuntimeError):
    """Why no inventory can be given; printed as one line on stderr."""


def read_nodes(environ: dict[str, str]) -> list[SlurmNode]:
    partition = environ.get("COLLBENCH_SLURM_PARTITION", "").strip()
    expression = environ.get("COLLBENCH_SLURM_NODES", "").strip()
    if not partition and not expression:
        raise InventoryError(
            "set COLLBENCH_SLURM_PARTITION (a partition) or COLLBENCH_SLURM_NODES (gpu[01-16])"
        )
    wanted = expand_hostlist(expression) if expression else []
    argv = sinfo_argv(partition, expression, environ.get("COLLBENCH_SLURM_SINFO") or "sinfo")
    try:
        result = subprocess.run(
            argv,
            check=False,
            capture_output=True,
            text=True,
            timeout=SINFO_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError as error:
        raise InventoryError(f"{argv[0]} not found: run this on a Slurm login node") from error
    except subprocess.TimeoutExpired as error:
        raise InventoryError(f"{argv[0]} gave no answer in {SINFO_TIMEOUT_S} s") from error
    if result.returncode != 0:
        detail = result.stderr.strip().splitlines()[-1:] or [f"exit code {result.returncode}"]
        raise InventoryError(f"{' '.join(argv)} failed: {detail[0]}")
    nodes = parse_sinfo(result.stdout)
    if not nodes and not wanted:
        raise InventoryError(f"sinfo lists no node in partition {partition!r}")
    where = f"partition {partition}" if partition else "Slurm"
    return nodes + missing_nodes(wanted, nodes, why=f"not in {where}")


def with_named_nodes(listing: dict, environ: dict[str, str]) -> dict:
    """Mark the nodes of a node list `collbench_slurm_named`: the user asked for them by name, so one
    that Slurm cannot give is a warning in the report, not a note."""
    if environ.get("COLLBENCH_SLURM_NODES", "").strip():
        for values in listing["_meta"]["hostvars"].values():
            values["collbench_slurm_named"] = True
    return listing


def main(argv: list[str]) -> int:
    if argv[1:2] not in (["--list"], ["--host"]) or (argv[1] == "--host" and len(argv) != 3):
        print("usage: slurm_inventory.py --list | --host HOST", file=sys.stderr)
        return 2
    try:
        listing = with_named_nodes(ansible_inventory(read_nodes(dict(os.environ))), dict(os.environ))
    except (InventoryError, SlurmInputError) as error:
        print(f"slurm_inventory: {error}", file=sys.stderr)
        return 1
    if argv[1] == "--host":
        print(json.dumps(listing["_meta"]["hostvars"].get(argv[2], {})))
    else:
        print(json.dumps(listing, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
