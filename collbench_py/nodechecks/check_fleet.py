"""The node checks run on every node from one controller task (action_plugins/collbench_node_checks.py).

For each node still in the run: its settings (its own inventory or extra vars, else the task's:
play vars and role defaults are not per node), the config that collbench_py/node/node_checks.py
reads, the command that runs the program (its text on standard input, so nothing is copied to the
node first), and the command that brings back every file it wrote, as written. A setting that
cannot work is that node's failure, not the run's.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from collbench_py.launch.node_settings import SettingError, as_bool, as_int, own_or_task

PHASES = ("before", "after")

# config key of node_checks.py -> the variable a node or the task sets it with
SETTINGS = {
    "enabled": "collbench_node_checks",
    "gpu_matrix": "collbench_node_checks_gpu_matrix",
    "nvlink": "collbench_node_checks_nvlink",
    "nic": "collbench_node_checks_nic",
    "timeout_s": "collbench_node_checks_timeout_s",
    "nvbandwidth_testcases": "collbench_node_checks_nvbandwidth_testcases",
    "p2p_test": "collbench_node_checks_p2p_test",
    "loopback_base_port": "collbench_node_checks_loopback_base_port",
    "launch_env": "collbench_launch_env",
}
_CHECKS = ("gpu_matrix", "nvlink", "nic")
_NO_PERFTEST = {"bin_dir": "", "gpudirect": False, "source": "none"}

# Every regular file of the output directory but the program's temporary ones (a leading dot), as
# {name: base64}. Standard library, Python 3.6 or later, as node_checks.py.
PACK = """\
import base64, json, os, stat, sys
out = {}
for name in sorted(os.listdir(sys.argv[1])):
    path = os.path.join(sys.argv[1], name)
    if not name.startswith(".") and stat.S_ISREG(os.lstat(path).st_mode):
        with open(path, "rb") as handle:
            out[name] = base64.b64encode(handle.read()).decode("ascii")
sys.stdout.write(json.dumps(out))
"""


def node_settings(known: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The node's settings, by config key: each variable the node sets itself, else the task's."""
    raw = {key: own_or_task(known, defaults, name) for key, name in SETTINGS.items()}
    testcases = raw["nvbandwidth_testcases"] or []
    if isinstance(testcases, str) or not all(isinstance(item, str) for item in testcases):
        raise SettingError(f"{SETTINGS['nvbandwidth_testcases']} must be a list of names (is {testcases!r})")
    launch_env = raw["launch_env"] or {}
    if not isinstance(launch_env, Mapping):
        raise SettingError(f"{SETTINGS['launch_env']} must be a mapping (is {launch_env!r})")
    settings = {key: as_bool(SETTINGS[key], raw[key]) for key in ("enabled", *_CHECKS)}
    settings.update(
        timeout_s=as_int(SETTINGS["timeout_s"], raw["timeout_s"], 1),
        loopback_base_port=as_int(SETTINGS["loopback_base_port"], raw["loopback_base_port"], 1),
        nvbandwidth_testcases=list(testcases),
        p2p_test=str(raw["p2p_test"] or ""),
        launch_env=dict(launch_env),
    )
    return settings


def node_out_dir(known: Mapping[str, Any], run_id: str) -> str:
    """Where the program writes on the node: <workdir>/runs/<run_id>/<host dir>/node."""
    node = known["collbench_node"]
    return f"{node['workdir']}/runs/{run_id}/{node['dir_name']}/node"


def node_config(
    host: str, known: Mapping[str, Any], settings: Mapping[str, Any], out_dir: str, *, hcas: list, phase: str
) -> dict[str, Any]:
    """The CONFIG_JSON of node_checks.py for this node and phase."""
    return {
        "out_dir": out_dir,
        "timeout_s": settings["timeout_s"],
        "checks": [check for check in _CHECKS if settings[check]],
        # Published by the nvbandwidth and perftest builds; none when they did not run.
        "nvbandwidth": str(known.get("collbench_nvbandwidth_bin") or ""),
        "nvbandwidth_testcases": settings["nvbandwidth_testcases"],
        "p2p_test": settings["p2p_test"],
        "perftest": known.get("collbench_perftest") or dict(_NO_PERFTEST),
        "hcas": hcas,
        "host": host,
        "loopback_base_port": settings["loopback_base_port"],
        "phase": phase,
    }


def run_argv(python: str, config: Mapping[str, Any]) -> list[str]:
    """The program run by the node's Python from its standard input (`-`), with its config."""
    return [python, "-", json.dumps(config, sort_keys=True)]


def pack_argv(python: str, out_dir: str) -> list[str]:
    return [python, "-c", PACK, out_dir]


def deadline_s(phase: str, timeout_s: int) -> int:
    """How long the program may take on a node that stops answering altogether: each check bounds
    itself; before, nvbandwidth (and its --help), two nvlink reads, two port reads and the
    loopbacks in a row; after, one nvlink read."""
    return (6 if phase == "before" else 1) * timeout_s + 120


def unpacked(stdout: bytes) -> dict[str, bytes]:
    """{name: bytes} of what PACK printed; ValueError when it is not that."""
    try:
        listed = json.loads(stdout or b"")
    except ValueError:
        raise ValueError(f"not a listing of the outputs: {stdout[:200]!r}") from None
    if not isinstance(listed, dict):
        raise ValueError("not a listing of the outputs")
    files = {}
    for name, data in listed.items():
        if not isinstance(name, str) or Path(name).name != name or name.startswith(".") or name in ("", ".."):
            raise ValueError(f"an output named {name!r}")
        try:
            files[name] = base64.b64decode(str(data), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"{name}: not base64") from None
    return files


def last_line(data: bytes, limit: int = 300) -> str:
    """The last non-empty line of a program's error output (Python's own last word), cut to `limit`."""
    lines = [line.strip() for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    return (lines[-1] if lines else "")[:limit]
