"""Acceptance profiles: what a GPU model and count should reach, and where each number comes from.

A profile is a YAML file (the shipped ones are in collbench_py/profiles/, a user may pass
their own). Per collective it names a message size, the busbw expected there (ring, one-way
line rate semantics) and its source; a host passes when it reaches `pass_fraction` of it.

The optional `node` section holds the per-component lines of the node checks, each with its source:
`p2p_gbps` (nvbandwidth device-to-device copy, each GPU pair), `h2d_gbps` and `d2h_gbps` (host to
device and back, each GPU), `nvlinks_per_gpu` (the active NVLinks a GPU should have: systems with
fewer by design must not false-fail against a fixed 18), `hca_loopback_gbits` (perftest write
bandwidth of each compute HCA to itself, Gb/s) and `source` (where these numbers come from). A
figure that is absent is not judged against a line, only against the fleet.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from collbench_py.parsers.models import BUSBW_FACTORS

DEFAULT_MIN_DROP = 0.05


class ProfileError(Exception):
    """A profile that cannot be found or read (one line for the user)."""


@dataclass(frozen=True)
class Expectation:
    collective: str
    size: int
    busbw: float  # GB/s expected at `size`
    source: str
    gpus: tuple[int, ...] = ()  # the GPU counts per host the figure holds for; (): any


# Collectives whose 2-node busbw is bounded by the NICs' line rate: NCCL's ring sends every byte
# through the network once per direction, and busbw is defined so that it compares with the
# one-way rate of the bottleneck link.
RING_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")
# Why the others get no NIC-line bar unless a profile gives them their own figure.
_NO_LINE_BAR = {
    "alltoall": (
        "alltoall is not bounded by the NIC line alone: each rank sends (n - r)/n of its data off the node "
        "(half of it on 2 nodes of 8 GPUs), so a healthy 2-node alltoall reaches about a quarter of the "
        "summed NIC line, and more nodes depend on the switches' bisection"
    ),
    "sendrecv": (
        "sendrecv crosses the network between one pair of ranks per node boundary, on one NIC, so the "
        "summed NIC line says nothing about it"
    ),
}


@dataclass(frozen=True)
class InterExpectation:
    """What a pair of hosts should reach for one collective, and where that comes from.

    `basis` is `nic_line` (a fraction of the line rate of the NICs NCCL uses), `busbw` (the
    profile's own figure in GB/s) or `fleet` (no absolute bar: judged against the other pairs).
    """

    collective: str
    basis: str
    source: str
    fraction: float | None = None
    busbw: float | None = None


@dataclass(frozen=True)
class NodeLines:
    """`node`: the lines a single component must reach (None: judged against the fleet only)."""

    p2p_gbps: float | None = None  # GB/s, each cell of the device-to-device matrix
    h2d_gbps: float | None = None  # GB/s, each GPU
    d2h_gbps: float | None = None
    nvlinks_per_gpu: int | None = None  # active links each GPU should have
    hca_loopback_gbits: float | None = None  # Gb/s, each compute HCA to itself
    source: str | None = None


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    origin: str  # "shipped" or the user's file
    pass_fraction: float
    line_rate_gbs: float | None = None
    line_rate_source: str | None = None
    expectations: dict[str, Expectation] = field(default_factory=dict)
    min_drop: float = DEFAULT_MIN_DROP
    min_drop_source: str | None = None
    inter_fraction: float | None = None  # of the summed NIC line rate, for host pairs
    inter_source: str | None = None
    match: dict[str, Any] = field(default_factory=dict)
    inter_own: dict[str, InterExpectation] = field(default_factory=dict)  # `inter.collectives`
    # What the profile's numbers are of: `gpu`, or `cpu` for the torch benchmark over gloo, which a
    # user may run on GPU nodes on purpose (a CPU and TCP baseline) by choosing such a profile.
    measures: str = "gpu"
    # `history`: the least drop against a host's own history that warns / fails, where this kind of
    # number jitters more than the defaults allow for (None: the history's defaults, 5 % and 10 %).
    history_warn_drop: float | None = None
    history_fail_drop: float | None = None
    history_drop_source: str | None = None
    # Every intra figure of the file, some for given GPU counts only; `expectations` holds the ones
    # that apply: after `for_gpus(n)`, those for n GPUs per host.
    figures: tuple[Expectation, ...] = ()
    gpus: int | None = None  # the GPU count `expectations` was chosen for; None: not chosen
    node: NodeLines = field(default_factory=NodeLines)  # `node`: per-component lines

    def for_gpus(self, count: int | None) -> Profile:
        """The profile with the intra figures for hosts of `count` GPUs: a figure given for that count,
        else one given for any count; a collective with neither has no figure for them."""
        if count is None:
            return self
        chosen: dict[str, Expectation] = {}
        for figure in self.figures:
            if count in figure.gpus or (not figure.gpus and figure.collective not in chosen):
                chosen[figure.collective] = figure
        return replace(self, expectations=chosen, gpus=count)

    def threshold(self, collective: str) -> float | None:
        expectation = self.expectations.get(collective)
        return expectation.busbw * self.pass_fraction if expectation else None

    def inter_expectation(self, collective: str) -> InterExpectation:
        """The pair bar of one collective: the profile's own entry, the NIC line for ring
        collectives, else none (fleet-relative only, with the reason)."""
        own = self.inter_own.get(collective)
        if own is not None:
            return own
        if collective in RING_COLLECTIVES and self.inter_fraction is not None:
            source = self.inter_source or "not given"
            return InterExpectation(collective, "nic_line", source, fraction=self.inter_fraction)
        if collective in RING_COLLECTIVES:
            return InterExpectation(collective, "fleet", f"profile {self.name} gives no NIC-line fraction")
        reason = _NO_LINE_BAR.get(
            collective, f"no network bottleneck model for {collective} and no figure in profile {self.name}"
        )
        return InterExpectation(collective, "fleet", reason)


@dataclass(frozen=True)
class FleetShape:
    """What the facts say the fleet is, for choosing a profile."""

    gpu_name: str | None
    gpu_count: int
    nvlink: bool | None
    pcie_gen: int | None

    def describe(self) -> str:
        if self.gpu_count == 0:
            return "hosts without GPUs"
        link = {True: "NVLink", False: "no NVLink", None: "unknown interconnect"}[self.nvlink]
        gen = f", PCIe gen {self.pcie_gen}" if self.pcie_gen else ""
        return f"{self.gpu_count}x {self.gpu_name} ({link}{gen})"


def shipped_names() -> list[str]:
    folder = resources.files("collbench_py") / "profiles"
    return sorted(p.name[:-4] for p in folder.iterdir() if p.name.endswith(".yml"))


def load_profile(name_or_file: str) -> Profile:
    """A shipped profile by name, or a user's YAML file by path."""
    path = Path(name_or_file)
    if path.suffix in (".yml", ".yaml") or path.is_file():
        if not path.is_file():
            raise ProfileError(f"profile file {path} does not exist")
        return _from_text(path.read_text(encoding="utf-8"), origin=str(path))
    if name_or_file not in shipped_names():
        raise ProfileError(f"no profile named {name_or_file!r}; shipped: {', '.join(shipped_names())}")
    text = (resources.files("collbench_py") / "profiles" / f"{name_or_file}.yml").read_text(encoding="utf-8")
    return _from_text(text, origin="shipped")


def choose_profile(shape: FleetShape) -> Profile | None:
    """The shipped profile whose `match` fits the fleet, or None."""
    for name in shipped_names():
        profile = load_profile(name)
        if _matches(profile.match, shape):
            return profile
    return None


def fleet_shape(facts: Iterable[Mapping[str, Any] | None], nvlink: bool | None) -> FleetShape | None:
    """The majority GPU model and count across the hosts' facts; None without any facts."""
    known = [f for f in facts if f]
    if not known:
        return None
    counts = Counter(len(f.get("gpus") or []) for f in known)
    names = Counter(g.get("name") for f in known for g in f.get("gpus") or [] if g.get("name"))
    gens = Counter(g.get("pcie_gen_max") for f in known for g in f.get("gpus") or [] if g.get("pcie_gen_max"))
    return FleetShape(
        gpu_name=names.most_common(1)[0][0] if names else None,
        gpu_count=counts.most_common(1)[0][0],
        nvlink=nvlink,
        pcie_gen=gens.most_common(1)[0][0] if gens else None,
    )


def _matches(match: Mapping[str, Any], shape: FleetShape) -> bool:
    if not match:
        return False
    counts = match.get("gpu_count")
    if counts is not None and shape.gpu_count not in counts:
        return False
    pattern = match.get("gpu_name")
    if pattern is not None and not (shape.gpu_name and re.search(pattern, shape.gpu_name)):
        return False
    if "nvlink" in match and shape.nvlink is not None and match["nvlink"] != shape.nvlink:
        return False
    if "nvlink" in match and shape.nvlink is None:
        return False
    gen = match.get("pcie_gen")
    return gen is None or shape.pcie_gen == gen


# The keys a profile file may hold, per section: any other is a typo that would be silently ignored.
_TOP_KEYS = (
    "name", "description", "match", "line_rate_gbs", "line_rate_source", "pass_fraction", "measures",
    "intra", "inter", "fleet", "history", "node",
)  # fmt: skip
_NODE_KEYS = ("p2p_gbps", "h2d_gbps", "d2h_gbps", "nvlinks_per_gpu", "hca_loopback_gbits", "source")
_MATCH_KEYS = ("gpu_name", "gpu_count", "nvlink", "pcie_gen")
_FIGURE_KEYS = ("size", "busbw", "source", "gpus")
_INTER_KEYS = ("fraction_of_nic_line", "source", "collectives")
_INTER_OWN_KEYS = ("busbw", "fraction_of_nic_line", "fleet_only", "source")
_FLEET_KEYS = ("min_drop", "min_drop_source")
_HISTORY_KEYS = ("warn_drop", "fail_drop", "source")


class _Fields:
    """Reads a profile's fields by their dotted path; a bad one is a ProfileError that names the file,
    the field and what it needs."""

    def __init__(self, origin: str) -> None:
        self.origin = origin

    def error(self, path: str, problem: str) -> ProfileError:
        return ProfileError(f"profile {self.origin}: {path}: {problem}")

    def section(self, data: Mapping[str, Any], path: str, keys: tuple[str, ...]) -> dict[str, Any]:
        """data[path's last part] as a mapping ({} when absent), with no key outside `keys`."""
        value = _at(data, path)
        if value is None:
            return {}
        return self.mapping(value, path, keys)

    def mapping(self, value: Any, path: str, keys: tuple[str, ...] | None) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.error(path, f"must be a mapping, got {_shown(value)}")
        for key in value:
            if keys is not None and key not in keys:
                raise self.error(
                    f"{path}.{key}" if path else str(key), f"unknown key (known: {', '.join(keys)})"
                )
        return value

    def number(self, data: Mapping[str, Any], key: str, path: str, *, required: bool = False) -> float | None:
        value = data.get(key)
        if value is None:
            if required:
                raise self.error(_join(path, key), "missing (a number)")
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(_join(path, key), f"must be a number, got {_shown(value)}")
        return float(value)

    def whole(self, data: Mapping[str, Any], key: str, path: str) -> int:
        value = data.get(key)
        if value is None:
            raise self.error(_join(path, key), "missing (a message size in bytes)")
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self.error(
                _join(path, key), f"must be a whole number of bytes above 0, got {_shown(value)}"
            )
        return value

    def text(self, data: Mapping[str, Any], key: str, path: str) -> str | None:
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise self.error(_join(path, key), f"must be text, got {_shown(value)}")
        return value

    def counts(self, data: Mapping[str, Any], key: str, path: str) -> tuple[int, ...]:
        """A GPU count or a list of them."""
        value = data.get(key)
        if value is None:
            return ()
        items = value if isinstance(value, list) else [value]
        if not items or any(isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in items):
            raise self.error(_join(path, key), f"must be a GPU count or a list of them, got {_shown(value)}")
        return tuple(items)


def _at(data: Mapping[str, Any], path: str) -> Any:
    value: Any = data
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _shown(value: Any) -> str:
    kind = {dict: "a mapping", list: "a list", str: "text", bool: "true/false"}.get(type(value))
    return f"{kind} {value!r}" if kind in ("text", "true/false") else kind or repr(value)


def _collective(fields: _Fields, path: str, name: Any) -> str:
    if name not in BUSBW_FACTORS:
        raise fields.error(f"{path}.{name}", f"unknown collective (known: {', '.join(BUSBW_FACTORS)})")
    return str(name)


def _figures(fields: _Fields, data: Mapping[str, Any]) -> tuple[Expectation, ...]:
    """`intra.<collective>`: one figure `{size, busbw, source}`, or a list of them each for its
    GPU counts (`gpus: 4` or `gpus: [4, 8]`)."""
    out: list[Expectation] = []
    for collective, spec in fields.section(data, "intra", None).items():
        path = f"intra.{_collective(fields, 'intra', collective)}"
        entries = spec if isinstance(spec, list) else [spec]
        seen: set[int | None] = set()
        for index, entry in enumerate(entries):
            where = f"{path}[{index}]" if isinstance(spec, list) else path
            fields.mapping(entry, where, _FIGURE_KEYS)
            gpus = fields.counts(entry, "gpus", where)
            for count in gpus or (None,):
                if count in seen:
                    taken = f"{count} GPUs" if count is not None else "any GPU count"
                    raise fields.error(where, f"a second figure for {taken}")
                seen.add(count)
            busbw = fields.number(entry, "busbw", where, required=True)
            if busbw is None or busbw <= 0:
                raise fields.error(f"{where}.busbw", "must be above 0")
            source = fields.text(entry, "source", where) or "not given"
            out.append(Expectation(collective, fields.whole(entry, "size", where), busbw, source, gpus))
    return tuple(out)


def _inter_own(fields: _Fields, entries: Mapping[str, Any]) -> dict[str, InterExpectation]:
    """`inter.collectives.<name>`: `{busbw: GB/s}`, `{fraction_of_nic_line: f}` or `{fleet_only: true}`,
    each with its `source`."""
    out: dict[str, InterExpectation] = {}
    for collective, spec in entries.items():
        path = f"inter.collectives.{_collective(fields, 'inter.collectives', collective)}"
        fields.mapping(spec, path, _INTER_OWN_KEYS)
        source = fields.text(spec, "source", path) or "not given"
        if "busbw" in spec:
            busbw = fields.number(spec, "busbw", path, required=True)
            out[collective] = InterExpectation(collective, "busbw", source, busbw=busbw)
        elif "fraction_of_nic_line" in spec:
            fraction = fields.number(spec, "fraction_of_nic_line", path, required=True)
            out[collective] = InterExpectation(collective, "nic_line", source, fraction=fraction)
        elif spec.get("fleet_only") is True:
            out[collective] = InterExpectation(collective, "fleet", source)
        else:
            raise fields.error(path, "needs one of busbw, fraction_of_nic_line or fleet_only: true")
    return out


def _node_lines(fields: _Fields, data: Mapping[str, Any]) -> NodeLines:
    node = fields.section(data, "node", _NODE_KEYS)
    figures: dict[str, float | None] = {}
    for key in ("p2p_gbps", "h2d_gbps", "d2h_gbps", "hca_loopback_gbits"):
        value = fields.number(node, key, "node")
        if value is not None and value <= 0:
            raise fields.error(f"node.{key}", "must be above 0")
        figures[key] = value
    links = node.get("nvlinks_per_gpu")
    if links is not None and (isinstance(links, bool) or not isinstance(links, int) or links < 1):
        raise fields.error("node.nvlinks_per_gpu", f"must be a whole number above 0, got {_shown(links)}")
    return NodeLines(**figures, nvlinks_per_gpu=links, source=fields.text(node, "source", "node"))


def _from_text(text: str, origin: str) -> Profile:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise ProfileError(f"profile {origin}: not valid YAML{at}: {problem}") from None
    if not isinstance(data, dict) or "name" not in data:
        raise ProfileError(f"profile {origin}: not a profile (a mapping with `name`, `intra`, ...)")
    fields = _Fields(origin)
    fields.mapping(data, "", _TOP_KEYS)
    name = fields.text(data, "name", "")
    if not name:
        raise fields.error("name", "must be non-empty text")
    match = fields.section(data, "match", _MATCH_KEYS)
    fleet = fields.section(data, "fleet", _FLEET_KEYS)
    inter = fields.section(data, "inter", _INTER_KEYS)
    history = fields.section(data, "history", _HISTORY_KEYS)
    figures = _figures(fields, data)
    line_rate = fields.number(data, "line_rate_gbs", "")
    pass_fraction = fields.number(data, "pass_fraction", "")
    min_drop = fields.number(fleet, "min_drop", "fleet")
    profile = Profile(
        name=name,
        description=fields.text(data, "description", "") or name,
        origin=origin,
        pass_fraction=0.9 if pass_fraction is None else pass_fraction,
        line_rate_gbs=line_rate or None,
        line_rate_source=fields.text(data, "line_rate_source", ""),
        expectations=_unscoped(figures),
        min_drop=DEFAULT_MIN_DROP if min_drop is None else min_drop,
        min_drop_source=fields.text(fleet, "min_drop_source", "fleet"),
        inter_fraction=fields.number(inter, "fraction_of_nic_line", "inter"),
        inter_source=fields.text(inter, "source", "inter"),
        match=_match(fields, match),
        inter_own=_inter_own(fields, fields.section(data, "inter.collectives", None)),
        measures=fields.text(data, "measures", "") or "gpu",
        history_warn_drop=fields.number(history, "warn_drop", "history"),
        history_fail_drop=fields.number(history, "fail_drop", "history"),
        history_drop_source=fields.text(history, "source", "history"),
        figures=figures,
        node=_node_lines(fields, data),
    )
    if not 0 < profile.pass_fraction <= 1:
        raise fields.error("pass_fraction", f"must be in (0, 1], got {data['pass_fraction']!r}")
    if not 0 <= profile.min_drop < 1:
        raise fields.error("fleet.min_drop", "must be in [0, 1)")
    warn, fail = profile.history_warn_drop, profile.history_fail_drop
    if any(drop is not None and not 0 < drop < 1 for drop in (warn, fail)):
        raise ProfileError(f"profile {origin}: history.warn_drop and history.fail_drop must be in (0, 1)")
    if warn is not None and fail is not None and warn > fail:
        raise ProfileError(f"profile {origin}: history.warn_drop must not be above history.fail_drop")
    if profile.measures not in ("gpu", "cpu"):
        raise fields.error("measures", f"must be gpu or cpu, got {profile.measures!r}")
    return profile


def _match(fields: _Fields, match: dict[str, Any]) -> dict[str, Any]:
    pattern = fields.text(match, "gpu_name", "match")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise fields.error("match.gpu_name", f"not a regular expression ({exc})") from None
    if "gpu_count" in match:
        match = {**match, "gpu_count": list(fields.counts(match, "gpu_count", "match"))}
    if "nvlink" in match and not isinstance(match["nvlink"], bool):
        raise fields.error("match.nvlink", f"must be true or false, got {_shown(match['nvlink'])}")
    if match.get("pcie_gen") is not None and (
        isinstance(match["pcie_gen"], bool) or not isinstance(match["pcie_gen"], int)
    ):
        raise fields.error("match.pcie_gen", f"must be a whole number, got {_shown(match['pcie_gen'])}")
    return dict(match)


def _unscoped(figures: tuple[Expectation, ...]) -> dict[str, Expectation]:
    """Per collective before the GPU count is known: the figure for any count, else the one for the
    most GPUs (the judge picks the fleet's own with `for_gpus`)."""
    out: dict[str, Expectation] = {}
    for figure in sorted(figures, key=lambda f: (not f.gpus, max(f.gpus, default=0))):
        out[figure.collective] = figure
    return out
