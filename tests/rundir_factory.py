"""Build run directories (docs/run-directory.md) from real corpus logs, for tests and benchmarks.

A healthy fleet is every host given the same real log; a degraded host or link is the same
log with its bandwidth scaled (time divided, algbw and busbw multiplied, row by row), which
is what a slower node prints. Topologies are real `nvidia-smi topo -m` files.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

from collbench_py.pairs.planner import Planner
from collbench_py.parsers import parse_text
from collbench_py.rundir.planfile import (
    PlanDecision,
    PlanRecord,
    PlanRound,
    PlanWitness,
    link_name,
    write_plan,
)

CORPUS = Path(__file__).parent / "data" / "corpus"
H100_LOG = CORPUS / "nccl-tests" / "hgx-h100-2node-16rank-mpi-warnings-interleaved-16GiB.txt"
H100_TOPO = CORPUS / "topo" / "hgx-h100-nv18-8nics-gpu-numa-id-spaces-sglang.txt"
H100_TOPO_12NICS = CORPUS / "topo" / "hgx-h100-12nics-numa-off-single-node-tabs-prompt.txt"
GH200_WRONG = CORPUS / "nccl-tests" / "gh200-2node-v2.17.8-wrong-nonzero-FAILED-trailing-test-failure.txt"
NON_MPI = CORPUS / "nccl-tests" / "non-mpi-build-16-independent-1rank-runs-interleaved-rows.txt"
NCCL_FAILURE = CORPUS / "nccl-tests" / "rtx5090-2gpu-test-nccl-failure-after-header.txt"
HANG = CORPUS / "rccl-tests" / "rccl-mi100-2gpu-hang-after-header.txt"
RUN_ID = "20261121T215100Z-3f9a2c"

# A data row: size, count, type, redop, root, then the two halves (time algbw busbw #wrong).
_ROW = re.compile(r"^(?P<head>\s*\d+\s+\d+\s+\S+\s+\S+\s+-?\d+)(?P<rest>(?:\s+\S+){6,8})\s*$")


def scale_log(text: str, factor: float) -> str:
    """The same log as printed by a host `factor` times as fast (0.5: half the bandwidth)."""
    out = []
    for line in text.splitlines():
        match = _ROW.match(line)
        if not match:
            out.append(line)
            continue
        tokens = match.group("rest").split()
        halves = [tokens[i : i + 4] for i in range(0, len(tokens), 4)]
        scaled = []
        for half in halves:
            if len(half) == 4:
                time, algbw, busbw, wrong = half
                half = [_num(time, 1 / factor), _num(algbw, factor), _num(busbw, factor), wrong]
            scaled.append("  ".join(f"{t:>7}" for t in half))
        out.append(match.group("head") + "  " + "  ".join(scaled))
    return "\n".join(out) + "\n"


def rename_hosts(text: str, hosts: list[str]) -> str:
    """The log with the hosts it was recorded on renamed, in order, to `hosts`."""
    recorded = max(parse_text(text, file="log").runs, key=lambda r: len(r.rows)).hosts
    pairs = sorted(zip(recorded, hosts, strict=False), key=lambda p: -len(p[0]))
    for old, new in pairs:
        text = text.replace(old, new)
    return text


def _num(token: str, factor: float) -> str:
    try:
        value = float(token)
    except ValueError:
        return token
    return f"{value * factor:.2f}"


def make_facts(  # noqa: PLR0917 - keyword use is the norm; defaults describe a healthy HGX H100
    name: str,
    gpu_name: str = "NVIDIA H100 80GB HBM3",
    gpus: int = 8,
    driver: str = "570.86.15",
    cuda: str = "12.8",
    nccl: str = "2.26.2",
    ib_ports: int = 8,
    ib_rate: int = 400,
    pcie: tuple[int, int, int, int] = (5, 5, 16, 16),  # gen current, gen max, width current, width max
    ib: list[dict[str, Any]] | None = None,  # the ports as the facts role writes them; default ib_ports alike
) -> dict[str, Any]:
    """facts.json as the facts role writes it (every key present)."""
    return {
        "hostname": name,
        "inventory_hostname": name,
        "collected_at": "2026-11-21T21:51:05Z",
        "gpus": [
            {
                "index": i,
                "name": gpu_name,
                "uuid": f"GPU-{name}-{i}",
                "memory_total_mib": 81559,
                "pci_bus_id": f"00000000:{0x19 + 0x10 * i:02X}:00.0",
                "driver_version": driver,
                "pcie_gen_current": pcie[0],
                "pcie_gen_max": pcie[1],
                "pcie_width_current": pcie[2],
                "pcie_width_max": pcie[3],
            }
            for i in range(gpus)
        ],
        "gpu_vendor": "nvidia" if gpus else None,
        "driver_version": driver if gpus else None,
        "cuda_version": cuda if gpus else None,
        "nccl_version": nccl if gpus else None,
        "mpi_version": "Open MPI 4.1.4",
        "torch_version": "2.13.0",
        "ib": ib
        if ib is not None
        else [
            {
                "device": f"mlx5_{i}",
                "port": 1,
                "state": "Active",
                "rate_gbps": ib_rate,
                "link_layer": "InfiniBand",
            }
            for i in range(ib_ports)
        ],
        "cpu": {"model": "Intel(R) Xeon(R) Platinum 8480+", "sockets": 2, "cores": 112, "threads": 224},
        "numa_nodes": 2,
        "memory_mib": 2063937,
        "os": {"distribution": "Debian", "version": "12", "kernel": "6.1.0-18-amd64"},
    }


def gpu_link_csv(facts: dict[str, Any], gen: int | None = None, width: int | None = None) -> str:
    """hosts/<dir>/intra/gpu-link-<collective>.csv for the GPUs of `facts`, as sampled under load:
    `pci.bus_id, pcie.link.gen.current, pcie.link.gen.max, pcie.link.width.current,
    pcie.link.width.max` (nvidia-smi --format=csv,noheader); by default every link at its max."""
    lines = []
    for gpu in facts.get("gpus") or []:
        gen_max, width_max = gpu["pcie_gen_max"], gpu["pcie_width_max"]
        current = (gen or gen_max, width or width_max)
        lines.append(f"{gpu['pci_bus_id']}, {current[0]}, {gen_max}, {current[1]}, {width_max}")
    return "\n".join(lines) + "\n"


@dataclass
class RunSpec:
    """What to write. Every mapping is keyed by host name, or by a sorted (a, b) pair."""

    hosts: list[str]
    intra: dict[str, Path] = field(default_factory=lambda: {"all_reduce": H100_LOG})  # collective -> log
    intra_override: dict[str, dict[str, Path]] = field(default_factory=dict)  # host -> collective -> log
    host_scale: dict[str, float] = field(default_factory=dict)
    topo: Path | None = H100_TOPO
    topo_override: dict[str, Path] = field(default_factory=dict)
    facts: dict[str, dict[str, Any]] = field(default_factory=dict)  # host -> facts (default make_facts)
    pairs: list[tuple[str, str]] | str | None = None  # "all": every pair
    pair_log: Path = H100_LOG
    pair_collectives: tuple[str, ...] = ("all_reduce",)
    pair_log_override: dict[str, Path] = field(default_factory=dict)  # collective -> its own pair log
    pair_scale: dict[tuple[str, str], float] = field(default_factory=dict)
    all_logs: dict[str, Path] = field(default_factory=dict)  # collective -> log of all hosts together
    unreachable: dict[str, str] = field(default_factory=dict)  # host -> reason
    launch_status: dict[str, tuple[str, int]] = field(default_factory=dict)  # log path -> (status, rc)
    status: str = "complete"
    parameters: dict[str, Any] = field(default_factory=dict)
    gpu_links: dict[str, dict[str, str]] = field(default_factory=dict)  # host -> collective -> CSV text
    rename_hosts: bool = False  # a pair log names the pair's hosts, not the ones it was recorded on
    # Pair rounds as a schedule ran them (replaces `pairs`): a pair measured again in a later round
    # gets its own log under inter/pairs/<a>--<b>/round<r>/, nothing overwritten.
    pair_rounds: list[list[tuple[str, str]]] | None = None
    # round -> pair -> bandwidth factor of that measurement (default pair_scale's, else 1.0)
    round_scale: dict[int, dict[tuple[str, str], float]] = field(default_factory=dict)
    plan: PlanRecord | None = None  # written to inter/pairs/plan.json


def build_run_dir(root: Path, spec: RunSpec) -> Path:
    run = root / RUN_ID
    run.mkdir(parents=True)
    launches: list[dict[str, Any]] = []
    texts: dict[Path, str] = {}

    def text_of(path: Path) -> str:
        if path not in texts:
            texts[path] = path.read_text(encoding="utf-8", errors="replace")
        return texts[path]

    def write_log(
        rel: str, source: Path, factor: float, launch: tuple[str, list[str], str], number: int | None = None
    ) -> None:
        kind, hosts, collective = launch
        path = run / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        text = text_of(source)
        if spec.rename_hosts and kind == "pair":
            text = rename_hosts(text, hosts)
        path.write_text(text if factor == 1.0 else scale_log(text, factor), encoding="utf-8")
        status, rc = spec.launch_status.get(rel, ("ok", 0))
        launches.append(
            {
                "kind": kind,
                "hosts": hosts,
                "collective": collective,
                "log": rel,
                "status": status,
                "rc": rc,
                "started_at": "2026-11-21T21:51:10Z",
                "finished_at": "2026-11-21T21:51:40Z",
                "round": number,
            }
        )

    reachable = [h for h in spec.hosts if h not in spec.unreachable]
    for host in reachable:
        host_dir = run / "hosts" / host
        host_dir.mkdir(parents=True)
        facts = spec.facts.get(host) or make_facts(host)
        (host_dir / "facts.json").write_text(json.dumps(facts, indent=1), encoding="utf-8")
        topo = spec.topo_override.get(host, spec.topo)
        if topo is not None:
            (host_dir / "topo.txt").write_text(text_of(topo), encoding="utf-8")
        logs = {**spec.intra, **spec.intra_override.get(host, {})}
        for collective, source in logs.items():
            rel = f"hosts/{host}/intra/{collective}.log"
            write_log(rel, source, spec.host_scale.get(host, 1.0), ("intra", [host], collective))
        for collective, csv in spec.gpu_links.get(host, {}).items():
            (host_dir / "intra").mkdir(exist_ok=True)
            (host_dir / "intra" / f"gpu-link-{collective}.csv").write_text(csv, encoding="utf-8")

    pairs = list(combinations(sorted(reachable), 2)) if spec.pairs == "all" else spec.pairs or []
    rounds = spec.pair_rounds if spec.pair_rounds is not None else [pairs]
    measured: set[tuple[str, str]] = set()
    for index, round_pairs in enumerate(rounds, start=1):
        number = index if spec.pair_rounds is not None else None
        for a, b in round_pairs:
            a, b = sorted((a, b))
            folder = f"inter/pairs/{a}--{b}" + (f"/round{index}" if (a, b) in measured else "")
            measured.add((a, b))
            factor = spec.round_scale.get(index, {}).get((a, b), spec.pair_scale.get((a, b), 1.0))
            for collective in spec.pair_collectives:
                source = spec.pair_log_override.get(collective, spec.pair_log)
                write_log(f"{folder}/{collective}.log", source, factor, ("pair", [a, b], collective), number)
    for collective, source in spec.all_logs.items():
        write_log(f"inter/all/{collective}.log", source, 1.0, ("all", reachable, collective))

    manifest = {
        "schema": 1,
        "run_id": RUN_ID,
        "status": spec.status,
        "started_at": "2026-11-21T21:51:00Z",
        "finished_at": "2026-11-21T21:53:12Z",
        "collbench_version": "0.1.0",
        "backend": "nccl-tests",
        "launcher": "mpirun",
        "parameters": {
            "collectives": sorted(spec.intra),
            "min_bytes": 8,
            "max_bytes": 17179869184,
            "step_factor": 2,
            "iters": 20,
            "warmup_iters": 5,
            "check": 1,
            "timeout_s": 300,
            "gpus_per_host": 8,
            "nccl_algo_pairs": "Ring",
            **spec.parameters,
        },
        "hosts": {
            h: {"inventory_hostname": h, "status": "unreachable", "reason": spec.unreachable[h]}
            if h in spec.unreachable
            else {"inventory_hostname": h, "status": "ok"}
            for h in spec.hosts
        },
        "launches": launches,
    }
    (run / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    if spec.plan is not None:
        write_plan(run, spec.plan)
    return run


def plan_record(
    planner: Planner, collective: str = "all_reduce", groups: dict[str, str] | None = None
) -> PlanRecord:
    """plan.json's record of what a Planner measured and decided (as the controller writes it)."""
    by_round: dict[int, dict[str, float | None]] = {}
    for m in planner.measurements:
        by_round.setdefault(m.round, {})[link_name(m.pair)] = m.busbw
    kinds = ["initial"] * len(planner.initial)
    return PlanRecord(
        schedule="adaptive",
        collective=collective,
        size_bytes=17179869184,
        k=len(planner.initial),
        localisation_rounds=planner.localisation_rounds,
        seed="0",
        hosts=tuple(planner.hosts),
        groups=dict(groups or {}),
        rounds=tuple(
            PlanRound(
                number,
                kinds[number - 1] if number <= len(kinds) else "localisation",
                tuple(pairs),
                by_round.get(number, {}),
            )
            for number, pairs in enumerate(planner.rounds, start=1)
        ),
        decisions=tuple(
            PlanDecision(
                d.kind,
                d.subject,
                tuple(d.pairs),
                tuple(PlanWitness(w.round, w.pair, w.busbw, w.status) for w in d.witnesses),
                d.reason,
            )
            for d in planner.decisions
        ),
        log=tuple(planner.log),
        finished=planner.finished,
        noise=planner.noise,
    )


def run_planner(
    hosts: list[str], busbw: Callable[[int, tuple[str, str]], float | None], **options: Any
) -> Planner:
    """A real Planner run to its end over simulated measurements: busbw(round, pair) -> GB/s or None."""
    planner = Planner(hosts, **options)
    while (pairs := planner.next_round()) is not None:
        number = len(planner.rounds) + 1
        planner.record({pair: busbw(number, pair) for pair in pairs})
    return planner


def nccl_tests_json(log: Path, factor: float = 1.0, env: tuple[str, ...] = ()) -> str:
    """The `-J` file nccl-tests writes beside `log` (the writer of
    tests/parsers/test_parse_nccl_json.py, which prints what nccl-tests' util.cu prints), its
    bandwidth scaled as scale_log scales the text."""
    from tests.parsers.test_parse_nccl_json import write_nccl_tests_json  # noqa: PLC0415 - a test module, on demand

    text = scale_log(log.read_text(encoding="utf-8", errors="replace"), factor)
    row = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)" + r"\s+(\S+)" * 8 + r"\s*$")
    device = re.compile(
        r"#\s+Rank\s+(\d+) Group\s+(\d+) Pid\s+(\d+) on\s+(\S+) device\s+(\d+) \[(\S+)\] (.+)$"
    )
    version = re.search(r"NCCL version (\d+)\.(\d+)\.(\d+)|nccl-library=(\d+)", text)
    code = 0
    if version and version.group(4):
        code = int(version.group(4))
    elif version:
        code = int(version.group(1)) * 10000 + int(version.group(2)) * 100 + int(version.group(3))
    oob = re.search(r"Out of bounds values : (\d+)", text)
    avg = re.search(r"Avg bus bandwidth\s+: (\S+)", text)
    program = re.search(r"Collective test starting: (\S+)", text)
    fields = {
        "rows": [m.groups() for line in text.splitlines() if (m := row.match(line))],
        "devices": [m.groups() for line in text.splitlines() if (m := device.search(line))],
        "nccl_code": code,
        "oob": int(oob.group(1)) if oob else 0,
        "avg": float(avg.group(1)) if avg else 0.0,
        "program": program.group(1) if program else "all_reduce_perf",
    }
    document = json.loads(write_nccl_tests_json(fields, version=2))
    document["env"] += list(env)
    return json.dumps(document)


_LOGGED_NCCL = re.compile(r"(NCCL version )\d+\.\d+\.\d+|(nccl-library=)\d+|(nccl-headers=)\d+")


def set_logged_nccl(run_dir: Path, version: str, host: str | None = None) -> None:
    """Make every log of `run_dir` (of `host` only: its own directory) say it loaded NCCL
    `version`, as after an NCCL upgrade: the report takes the version from the logs."""
    major, minor, patch = (int(part) for part in version.split("."))
    code = str(major * 10000 + minor * 100 + patch)

    def put(match: re.Match[str]) -> str:
        if match[1]:
            return match[1] + version
        return (match[2] or match[3]) + code

    for log in (run_dir / "hosts" / host if host else run_dir).glob("**/*.log"):
        log.write_text(_LOGGED_NCCL.sub(put, log.read_text(encoding="utf-8")), encoding="utf-8")
