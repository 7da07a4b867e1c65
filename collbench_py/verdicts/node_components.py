"""The node checks judged per component, for the whole run: each host's GPU matrix against the
profile's `node:` lines and against the same cell on the other nodes of its SKU and topology, its
NVLinks (state, the profile's link count, error counters grown during the run), its compute HCAs'
ports and loopback. The rules themselves are verdicts/components.py's; this module picks what each
is measured against and turns findings into host checks.

A finding names its host and component and makes that host's verdict say so; it never fails a pair
(the pair verdicts read only the pair launches). A check that was skipped, or never reported, says
so and passes nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from collbench_py.nodechecks.nodedir import Measurement, NodeChecks, measurements
from collbench_py.parsers.models import Matrix
from collbench_py.profiles import DEFAULT_MIN_DROP, Profile
from collbench_py.rundir.load import Host
from collbench_py.verdicts.components import (
    ComponentFinding,
    fleet_matrix_findings,
    gpu_matrix_findings,
    loopback_findings,
    nvlink_findings,
    port_findings,
)
from collbench_py.verdicts.model import Check

# The testcases judged per cell, and the profile line each is held to (CE copies: the anchors' figures).
LINE_OF = {
    "device_to_device_memcpy_read_ce": "p2p_gbps",
    "device_to_device_memcpy_write_ce": "p2p_gbps",
    "host_to_device_memcpy_ce": "h2d_gbps",
    "device_to_host_memcpy_ce": "d2h_gbps",
}
# Judged against the fleet only: SM copies read what NCCL sees, and no anchor gives them a line.
FLEET_ONLY = ("device_to_device_memcpy_read_sm", "device_to_device_memcpy_write_sm")
SEVERITY_RANK = {"fail": 2, "warn": 1}
# What each check is called in a report; "loopback:<hca>" reads "loopback <hca>".
CHECK_TITLES = {
    "gpu_matrix": "GPU matrix (nvbandwidth)",
    "nvlink": "NVLink state and errors",
    "nvlink_after": "NVLink errors after the benchmarks",
    "nic_ports": "NIC ports",
}


@dataclass(frozen=True)
class ComponentReport:
    """The node checks of a run, judged: what the report writes in `node_checks`."""

    records: dict[str, NodeChecks] = field(default_factory=dict)  # host -> its node checks
    measurements: tuple[Measurement, ...] = ()
    findings: tuple[ComponentFinding, ...] = ()  # ids in the results.json form ("gpu3", "gpu3--gpu5")
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)  # SKU and topology -> its hosts
    fleet_medians: dict[str, Matrix] = field(default_factory=dict)  # group -> the median D2D read matrix

    def of_host(self, host: str) -> list[ComponentFinding]:
        return [f for f in self.findings if f.host == host]


def contract_id(finding: ComponentFinding) -> str:
    """components.py's ids ("3", "3--5", "3/link7", "mlx5_2/1") in the results.json form."""
    raw = finding.id
    if finding.kind == "gpu":
        return raw if raw == "all" else f"gpu{raw}"
    if finding.kind == "nvlink":
        if "/link" in raw:
            gpu, _, link = raw.partition("/")
            return f"gpu{gpu}:{link}"
        first, _, second = raw.partition("--")
        return f"gpu{first}--gpu{second}"
    if finding.kind == "port":
        return raw.replace("/", ":")
    return raw


def group_key(host: Host, record: NodeChecks) -> str:
    """Nodes of one SKU and topology: GPU model, GPU count and the `topo -m` matrix."""
    gpus = (host.facts or {}).get("gpus") or []
    names = sorted({str(g.get("name")) for g in gpus if isinstance(g, dict) and g.get("name")})
    if not names:
        names = sorted({str(d.get("name")) for d in record.devices if d.get("name")})
    count = len(gpus) or len(record.devices) or len(_square_labels(record))
    topology = json.dumps(host.topology.links, sort_keys=True) if host.topology else ""
    digest = hashlib.sha256(topology.encode()).hexdigest()[:8] if topology else "unknown"
    return f"{' / '.join(names) or 'unknown GPU'} x{count}, topology {digest}"


def _square_labels(record: NodeChecks) -> tuple[str, ...]:
    matrix = record.matrix("device_to_device_memcpy_read_ce")
    return matrix.row_labels if matrix else ()


def _devices(host: Host, record: NodeChecks) -> list[dict[str, object]]:
    """GPU index -> bus id and serial, from facts.json (the node's own probe), else nvbandwidth."""
    gpus = [g for g in (host.facts or {}).get("gpus") or [] if isinstance(g, dict)]
    if gpus:
        return [
            {
                "id": str(g.get("index", i)),
                "bus_id": g.get("pci_bus_id") or g.get("bus_id"),
                "serial": g.get("serial") or g.get("uuid"),
            }
            for i, g in enumerate(gpus)
        ]
    return [{"id": str(d.get("id")), "bus_id": d.get("bus_id")} for d in record.devices]


def judge_components(
    hosts: Mapping[str, Host], profile: Profile | None, min_drop: float = DEFAULT_MIN_DROP, min_fleet: int = 3
) -> ComponentReport | None:
    """Every host's node checks, judged; None when no host has any (the node phase was off)."""
    records = {name: host.node_checks for name, host in hosts.items() if host.node_checks is not None}
    if not records:
        return None
    lines = profile.node if profile is not None else None
    source = (lines.source if lines else None) or (f"profile {profile.name}" if profile else "profile")
    found: list[ComponentFinding] = []
    groups: dict[str, list[str]] = defaultdict(list)
    for name, record in records.items():
        groups[group_key(hosts[name], record)].append(name)
        devices = _devices(hosts[name], record)
        for testcase, line_name in LINE_OF.items():
            matrix = record.matrix(testcase)
            line = getattr(lines, line_name, None) if lines else None
            if matrix is not None and line:
                found += gpu_matrix_findings(name, matrix, line, source=source, devices=devices)
        if record.nvlink_state or record.errors_after:
            expected = lines.nvlinks_per_gpu if lines else None
            links = nvlink_findings(
                name,
                record.nvlink_state,
                expected,
                record.errors_before,
                record.errors_after,
                source=f"profile {profile.name}, node.nvlinks_per_gpu" if profile else "profile",
            )
            found += _without_counted_twice(links)
        compute = {h["name"] for h in record.hcas}
        ports = [p for p in record.ports if not compute or p.ca in compute]
        found += port_findings(name, ports)
        line = lines.hca_loopback_gbits if lines else None
        if record.loopback and line:
            found += loopback_findings(name, record.loopback, line, source=source)
    medians: dict[str, Matrix] = {}
    for key, members in sorted(groups.items()):
        for testcase in (*LINE_OF, *FLEET_ONLY):
            matrices = {h: m for h in members if (m := records[h].matrix(testcase)) is not None}
            devices = {h: _devices(hosts[h], records[h]) for h in matrices}
            found += fleet_matrix_findings(matrices, min_drop=min_drop, min_nodes=min_fleet, devices=devices)
            if testcase == "device_to_device_memcpy_read_ce" and len(matrices) >= 1:
                medians[key] = median_matrix(list(matrices.values()))
    all_measured = [m for record in records.values() for m in measurements(record)]
    return ComponentReport(
        records=records,
        measurements=tuple(all_measured),
        findings=tuple(_merged(replace(f, id=contract_id(f)) for f in found)),
        groups={key: tuple(sorted(members)) for key, members in groups.items()},
        fleet_medians=medians,
    )


def _without_counted_twice(findings: list[ComponentFinding]) -> list[ComponentFinding]:
    """A GPU short of NVLinks only by the links named down: the links are the finding (with the
    GPU and link number), not the GPU again."""
    down: dict[str, int] = defaultdict(int)
    for f in findings:
        if f.kind == "nvlink" and "/link" in f.id and f.measured is None:
            down[f.id.partition("/")[0]] += 1
    kept = []
    for f in findings:
        short = (
            f.kind == "gpu" and f.unit == "links" and f.against is not None and f.against.value is not None
        )
        if short and f.measured is not None and f.measured + down[f.id] >= f.against.value:
            continue
        kept.append(f)
    return kept


def _merged(findings) -> list[ComponentFinding]:
    """One finding per host and component: the worst, the profile's reading first on a tie (the
    same GPU low against the line and against the fleet is one thing to repair)."""
    best: dict[tuple[str, str, str], ComponentFinding] = {}
    for finding in findings:
        key = (finding.host, finding.kind, finding.id)
        held = best.get(key)
        if held is None or SEVERITY_RANK[finding.severity] > SEVERITY_RANK[held.severity]:
            best[key] = finding
    return sorted(best.values(), key=lambda f: (f.host, -SEVERITY_RANK[f.severity], f.kind, f.id))


def median_matrix(matrices: list[Matrix]) -> Matrix:
    """The cell-by-cell median of matrices of one shape (the first's labels)."""
    first = matrices[0]
    alike = [m for m in matrices if (m.row_labels, m.col_labels) == (first.row_labels, first.col_labels)]
    values = []
    for r in range(len(first.row_labels)):
        row = []
        for c in range(len(first.col_labels)):
            cells = sorted(v for m in alike if (v := m.values[r][c]) is not None)
            n = len(cells)
            row.append(
                None if not n else (cells[n // 2] if n % 2 else (cells[n // 2 - 1] + cells[n // 2]) / 2)
            )
        values.append(tuple(row))
    return replace(first, values=tuple(values), sum=None)


def check_title(name: str) -> str:
    if name.startswith("loopback:"):
        return f"loopback {name.partition(':')[2]}"
    return CHECK_TITLES.get(name, name)


def host_checks(report: ComponentReport) -> dict[str, list[Check]]:
    """Per host: one check per component finding (named "node/<kind> <id>"), one per node check
    that was skipped or did not complete (said, never passed), one pass per check that ran clean."""
    out: dict[str, list[Check]] = defaultdict(list)
    for name, record in report.records.items():
        findings = report.of_host(name)
        for f in findings:
            what = f"{f.kind} {f.id}"
            if f.bus_id:
                what += f" (bus {f.bus_id})"
            out[name].append(
                Check(
                    f"node/{f.kind} {f.id}", f.severity, f"{what}: {f.reason} - {f.action}", name, f.evidence
                )
            )
        for check in record.checks:
            title = check_title(check.name)
            if check.status == "skipped":
                reason = f"{title} skipped: {check.note or 'no reason given'} (not checked, not passed)"
                out[name].append(Check(f"node/{check.name}", "skip", reason, name))
            elif check.status != "ok":
                reason = f"{title} {check.status}: {check.note or f'rc {check.rc}'}"
                out[name].append(Check(f"node/{check.name}", "warn", reason, name))
            elif _left_nothing(record, check.name):
                reason = f"{title} ran but left no readable result (not passed)"
                out[name].append(Check(f"node/{check.name}", "warn", reason, name))
            else:
                out[name].append(Check(f"node/{check.name}", "pass", f"{title} ran", name))
        if not record.checks:
            out[name].append(
                Check("node/checks", "warn", "the node checks left no readable checks.json entries", name)
            )
    return out


def _left_nothing(record: NodeChecks, check: str) -> bool:
    """A check reported ok whose output the controller could not read: no result is no pass."""
    if check == "gpu_matrix":
        return not record.matrices
    if check == "nvlink":
        return not record.nvlink_state
    if check == "nic_ports":
        return not record.ports
    if check.startswith("loopback:"):
        return check.partition(":")[2] not in record.loopback
    return False
