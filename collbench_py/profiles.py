"""Acceptance profiles: what a GPU model and count should reach, and where each number comes from.

A profile is a YAML file (the shipped ones are in collbench_py/profiles/, a user may pass
their own). Per collective it names a message size, the busbw expected there (ring, one-way
line rate semantics) and its source; a host passes when it reaches `pass_fraction` of it.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

DEFAULT_MIN_DROP = 0.05


class ProfileError(Exception):
    """A profile that cannot be found or read (one line for the user)."""


@dataclass(frozen=True)
class Expectation:
    collective: str
    size: int
    busbw: float  # GB/s expected at `size`
    source: str


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


def _inter_own(entries: Mapping[str, Any]) -> dict[str, InterExpectation]:
    """`inter.collectives.<name>`: `{busbw: GB/s}`, `{fraction_of_nic_line: f}` or `{fleet_only: true}`,
    each with its `source`."""
    out: dict[str, InterExpectation] = {}
    for collective, spec in entries.items():
        source = str(spec.get("source") or "not given")
        if "busbw" in spec:
            out[collective] = InterExpectation(collective, "busbw", source, busbw=float(spec["busbw"]))
        elif "fraction_of_nic_line" in spec:
            fraction = float(spec["fraction_of_nic_line"])
            out[collective] = InterExpectation(collective, "nic_line", source, fraction=fraction)
        elif spec.get("fleet_only"):
            out[collective] = InterExpectation(collective, "fleet", source)
        else:
            needs = "busbw, fraction_of_nic_line or fleet_only"
            raise ValueError(f"inter.collectives.{collective} needs {needs}")
    return out


def _from_text(text: str, origin: str) -> Profile:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ProfileError(f"profile {origin}: not valid YAML ({exc})") from None
    if not isinstance(data, dict) or "name" not in data:
        raise ProfileError(f"profile {origin}: not a profile (a mapping with `name`, `intra`, ...)")
    try:
        expectations = {
            collective: Expectation(
                collective=collective,
                size=int(spec["size"]),
                busbw=float(spec["busbw"]),
                source=str(spec.get("source") or "not given"),
            )
            for collective, spec in (data.get("intra") or {}).items()
        }
        fleet = data.get("fleet") or {}
        inter = data.get("inter") or {}
        history = data.get("history") or {}
        profile = Profile(
            name=str(data["name"]),
            description=str(data.get("description") or data["name"]),
            origin=origin,
            pass_fraction=float(data.get("pass_fraction", 0.9)),
            line_rate_gbs=float(data["line_rate_gbs"]) if data.get("line_rate_gbs") else None,
            line_rate_source=data.get("line_rate_source"),
            expectations=expectations,
            min_drop=float(fleet.get("min_drop", DEFAULT_MIN_DROP)),
            min_drop_source=fleet.get("min_drop_source"),
            inter_fraction=float(inter["fraction_of_nic_line"]) if "fraction_of_nic_line" in inter else None,
            inter_source=inter.get("source"),
            match=dict(data.get("match") or {}),
            inter_own=_inter_own(inter.get("collectives") or {}),
            measures=str(data.get("measures", "gpu")),
            history_warn_drop=float(history["warn_drop"]) if "warn_drop" in history else None,
            history_fail_drop=float(history["fail_drop"]) if "fail_drop" in history else None,
            history_drop_source=history.get("source"),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ProfileError(f"profile {origin}: bad value ({type(exc).__name__}: {exc})") from None
    if not 0 < profile.pass_fraction <= 1:
        raise ProfileError(f"profile {origin}: pass_fraction must be in (0, 1]")
    if not 0 <= profile.min_drop < 1:
        raise ProfileError(f"profile {origin}: fleet.min_drop must be in [0, 1)")
    warn, fail = profile.history_warn_drop, profile.history_fail_drop
    if any(drop is not None and not 0 < drop < 1 for drop in (warn, fail)):
        raise ProfileError(f"profile {origin}: history.warn_drop and history.fail_drop must be in (0, 1)")
    if warn is not None and fail is not None and warn > fail:
        raise ProfileError(f"profile {origin}: history.warn_drop must not be above history.fail_drop")
    if profile.measures not in ("gpu", "cpu"):
        raise ProfileError(f"profile {origin}: measures must be gpu or cpu, got {profile.measures!r}")
    return profile
