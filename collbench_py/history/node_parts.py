"""Components inside a node in the history: each GPU, GPU pair, NVLink and HCA, one row per metric.

The rows come from the report's node checks section (results.json `node_checks`, docs/report-schema.md):
`measurements` give the values, `findings` say which components the run itself found bad, so their
values stay out of the baselines that judge later runs, as a failed host's busbw does.

A component is named as the section names it: `gpu3`, `gpu3--gpu5` (i < j), `gpu1:link7`, `mlx5_2`,
`mlx5_2:1`. The section may be the JSON mapping or objects with the same fields.

Rails between nodes are components too (kind `rail`, component `rail<k>`, metric `gbits`, Gb/s):
the lowest ib_write_bw the pair plan measured on that host rail (`Report.rails`), so
`collbench history node3:rail2` prints its series. A rail a finding names (the host's NIC of that
rail, the NIC its lowest value was measured against, or the rail's leaf) or a measurement that
failed stays out of the baselines.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from collbench_py.history.store import HistoryError, Store, has_table

# Bandwidths, where lower is worse, are judged against history; counters and latencies are stored
# and shown (the run's own checks judge counter growth: any growth is a finding).
JUDGED_UNITS = frozenset({"GB/s", "Gb/s"})
CHECK_PREFIX = "history/component/"  # history/component/<kind>/<component>/<metric>
TABLE = "component_measurements"
_GPU_KINDS = frozenset({"gpu", "gpu_pair", "nvlink"})
_NIC_KINDS = frozenset({"hca", "port"})
_UNHEALTHY_FINDING = frozenset({"fail", "warn"})


@dataclass(frozen=True)
class ComponentMeasurement:
    host: str
    kind: str  # gpu, gpu_pair, nvlink, hca, port
    component: str  # the section's `id`
    metric: str
    value: float | None
    unit: str | None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.host, self.kind, self.component, self.metric)


def section_of(report: Any) -> Any:
    """The node checks section a report carries, if it carries one (None otherwise)."""
    section = getattr(report, "node_checks", None)
    if section is None:
        section = getattr(getattr(report, "run", None), "node_checks", None)
    return section


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def measurements_of(section: Any) -> tuple[ComponentMeasurement, ...]:
    """The section's measurements, one per (host, kind, component, metric) in key order; an entry
    without its four names is left out (the report's own schema check says why)."""
    if section is None:
        return ()
    out: dict[tuple[str, str, str, str], ComponentMeasurement] = {}
    for item in _field(section, "measurements") or ():
        host, kind, component, metric = (_field(item, k) for k in ("host", "kind", "id", "metric"))
        if not all(isinstance(text, str) and text for text in (host, kind, component, metric)):
            continue
        unit = _field(item, "unit")
        found = ComponentMeasurement(
            host,
            kind,
            pair_order(component),
            metric,
            _number(_field(item, "value")),
            unit if isinstance(unit, str) else None,
        )
        out[found.key] = found
    return tuple(out[key] for key in sorted(out))


def pair_order(component: str) -> str:
    """`gpu5--gpu3` -> `gpu3--gpu5`: a pair is stored once, its lower GPU first (by index)."""
    if "--" not in component:
        return component
    ends = component.split("--")
    return "--".join(sorted(ends, key=lambda end: (len(end), end)))


def finding_component(kind: str, raw: str) -> str:
    """A finding's id in the section's naming: the verdicts name a GPU `3`, a pair `3--5`, one NVLink
    `3/link7` and a port `mlx5_2/1`; the section `gpu3`, `gpu3--gpu5`, `gpu3:link7`, `mlx5_2:1`."""
    if kind in _GPU_KINDS:
        raw = re.sub(r"(?<![\w])(\d+)(?![\w])", r"gpu\1", raw)
    return pair_order(raw.replace("/", ":"))


def touches(finding_kind: str, finding_id: str, measured: ComponentMeasurement) -> bool:
    """Whether a finding of the run is about this measurement's component: the component itself, a
    bad GPU for every pair it is in, `all` (the board) for every GPU thing, an HCA for its ports."""
    if finding_id == measured.component:
        return True
    if finding_kind in _GPU_KINDS and measured.kind in _GPU_KINDS:
        return finding_id in ("all", "gpuall") or finding_id in measured.component.split("--")
    if finding_kind in _NIC_KINDS and measured.kind in _NIC_KINDS:
        return finding_id.split(":", maxsplit=1)[0] == measured.component.split(":")[0]
    return False


def unhealthy_keys(report: Any, section: Any, measured: Iterable[ComponentMeasurement]) -> set[tuple]:
    """Keys of the measurements that must not feed a baseline: on a host that was not measured
    properly (unreachable, failed to run), about a component the run found bad, or a regression
    found against its own history in this run. A host failed for something else (its NCCL busbw)
    keeps its healthy components: a bad pair of GPUs must not hide its other GPUs' history."""
    bad_hosts = {name for name, host in report.run.hosts.items() if host.status != "ok"}
    bad_hosts |= {name for name, verdict in report.hosts.items() if verdict.verdict == "unreachable"}
    found: dict[str, list[tuple[str, str]]] = {}
    for item in (_field(section, "findings") if section is not None else None) or ():
        host, kind, raw, severity = (_field(item, k) for k in ("host", "kind", "id", "severity"))
        if (
            isinstance(host, str)
            and isinstance(kind, str)
            and isinstance(raw, str)
            and severity in _UNHEALTHY_FINDING
        ):
            found.setdefault(host, []).append((kind, finding_component(kind, raw)))
    regressed = {
        (verdict.host, check.name)
        for verdict in report.hosts.values()
        for check in verdict.checks
        if check.name.startswith(CHECK_PREFIX) and check.status in ("warn", "fail")
    }
    out: set[tuple] = set()
    for m in measured:
        if (
            m.host in bad_hosts
            or any(touches(kind, fid, m) for kind, fid in found.get(m.host, ()))
            or (m.host, check_name(m)) in regressed
        ):
            out.add(m.key)
    return out


def check_name(m: ComponentMeasurement) -> str:
    return f"{CHECK_PREFIX}{m.kind}/{m.component}/{m.metric}"


def rows_of(run_id: str, report: Any, section: Any) -> tuple[tuple, ...]:
    """The component_measurements rows of a run, in the table's column order."""
    measured = measurements_of(section)
    if not measured:
        return ()
    bad = unhealthy_keys(report, section, measured)
    return tuple(
        (run_id, m.host, m.kind, m.component, m.metric, m.value, m.unit, int(m.key not in bad))
        for m in measured
    )


RAIL_KIND = "rail"
RAIL_METRIC = "gbits"


def rail_rows(run_id: str, report: Any) -> tuple[tuple, ...]:
    """The component_measurements rows of a run's rails: one per host rail, its lowest measurement."""
    rails = getattr(report, "rails", None)
    if rails is None:
        return ()
    bad_hosts = {name for name, host in report.run.hosts.items() if host.status != "ok"}
    bad_hosts |= {name for name, verdict in report.hosts.items() if verdict.verdict == "unreachable"}
    found = {(f.host, f.rail) for f in rails.findings if f.host}
    leaves = {f.rail for f in rails.findings if f.host is None}
    rows = []
    for (host, rail), (value, peer) in sorted(rails.lowest().items()):
        # A partner's lowest value measured against a bad NIC is that NIC's, not a baseline either.
        named = (host, rail) in found or (peer, rail) in found or rail in leaves
        healthy = value is not None and host not in bad_hosts and not named
        rows.append((run_id, host, RAIL_KIND, f"rail{rail}", RAIL_METRIC, value, "Gb/s", int(healthy)))
    return tuple(rows)


# ---- reading the history back ----------------------------------------------------------------------


@dataclass(frozen=True)
class ComponentPoint:
    run_id: str
    started_at: str
    value: float | None
    unit: str | None
    healthy: bool
    verdict: str | None  # the history check's status for this component and metric in that run


def split_subject(store: Store, text: str) -> tuple[str, str] | None:
    """`HOST:COMPONENT` -> (host, component) as stored, or None when `text` names no component.

    Host names in the history are run directory names, which never hold ':' (safe_name turns it
    into '_'), so the first ':' separates; a host stored with ':' in its name is still found,
    trying each ':' from the left."""
    if ":" not in text or not has_table(store, TABLE):
        return None
    for at in (i for i, char in enumerate(text) if char == ":"):
        host, component = text[:at], pair_order(text[at + 1 :])
        if (
            host
            and component
            and store.query(
                f"SELECT 1 FROM {TABLE} WHERE host = ? AND component = ? LIMIT 1", (host, component)
            )
        ):
            return host, component
    return None


def unknown_component(store: Store, text: str) -> HistoryError:
    """The one message for `HOST:COMPONENT` that the history does not hold."""
    host, _, component = text.partition(":")
    if not has_table(store, TABLE):
        return HistoryError(
            f"no component measurements in {store.path} (a history from before they were kept)"
        )
    known = [r[0] for r in store.query(f"SELECT DISTINCT component FROM {TABLE} WHERE host = ?", (host,))]
    if not known:
        hosts = [r[0] for r in store.query(f"SELECT DISTINCT host FROM {TABLE}")]
        close = difflib.get_close_matches(host, hosts, n=3, cutoff=0.5)
        hint = (
            f"; did you mean {', '.join(close)}?"
            if close
            else f"; {len(hosts)} hosts have some, e.g. {', '.join(sorted(hosts)[:3])}"
            if hosts
            else "; it holds none"
        )
        return HistoryError(f"no component measurements of host {host!r} in {store.path}{hint}")
    close = difflib.get_close_matches(pair_order(component), known, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}?" if close else f"it has e.g. {', '.join(sorted(known)[:4])}"
    return HistoryError(f"{host} has no component {component!r} in {store.path}; {hint}")


def metrics_of(store: Store, host: str, component: str) -> list[tuple[str, str]]:
    """(kind, metric) pairs measured for the component, in name order."""
    rows = store.query(
        f"SELECT DISTINCT kind, metric FROM {TABLE} WHERE host = ? AND component = ? ORDER BY metric, kind",
        (host, component),
    )
    return [(r[0], r[1]) for r in rows]


def component_series(
    store: Store, host: str, kind: str, component: str, metric: str, *, last: int
) -> list[ComponentPoint]:
    """The metric in each run that measured it, oldest first (the newest `last` runs)."""
    rows = store.query(
        "SELECT c.run_id, r.started_at, c.value, c.unit, c.healthy, (SELECT v.status FROM verdicts v "
        " WHERE v.run_id = c.run_id AND v.scope = 'host' AND v.subject = c.host AND v.name = ?) "
        f"FROM {TABLE} c JOIN runs r ON r.run_id = c.run_id "
        "WHERE c.host = ? AND c.kind = ? AND c.component = ? AND c.metric = ? "
        "ORDER BY r.started_at DESC, r.run_id DESC LIMIT ?",
        (f"{CHECK_PREFIX}{kind}/{component}/{metric}", host, kind, component, metric, last),
    )
    return [ComponentPoint(r[0], r[1], r[2], r[3], bool(r[4]), r[5]) for r in reversed(rows)]
