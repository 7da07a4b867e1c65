"""Facts: GPUs (count, model), PCIe links, versions and InfiniBand ports against the fleet."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from collbench_py.profiles import Profile
from collbench_py.rundir.load import GpuLink, Host
from collbench_py.verdicts.model import Check

VERSION_KEYS = (("driver_version", "driver"), ("cuda_version", "CUDA"), ("nccl_version", "NCCL"))


def _majority(values: list[Any]) -> tuple[Any, int] | None:
    counted = Counter(v for v in values if v is not None)
    if not counted:
        return None
    (value, count), *rest = counted.most_common(2)
    if rest and rest[0][1] == count:
        return None  # a tie has no majority
    return value, count


def judge_facts(
    hosts: dict[str, Host], profile: Profile | None, named_profile: bool
) -> dict[str, list[Check]]:
    with_facts = {name: h.facts for name, h in hosts.items() if h.facts}
    out: dict[str, list[Check]] = {name: [] for name in with_facts}
    n = len(with_facts)
    gpu_counts = _majority([len(f.get("gpus") or []) for f in with_facts.values()])
    models = _majority([_model(f) for f in with_facts.values()])
    versions = {key: _majority([f.get(key) for f in with_facts.values()]) for key, _ in VERSION_KEYS}
    ports = _majority([len(f.get("ib") or []) for f in with_facts.values()])
    rates = _majority(
        [p.get("rate_gbps") for f in with_facts.values() for p in f.get("ib") or [] if isinstance(p, dict)]
    )
    for name, facts in with_facts.items():
        out[name].append(_gpus(name, facts, gpu_counts, models, n, profile, named_profile))
        out[name].append(_pcie(name, facts, hosts[name].gpu_links))
        out[name].append(_versions(name, facts, versions, n, _nccl_source(hosts[name])))
        ib = _ib(name, facts, ports, rates)
        if ib is not None:
            out[name].append(ib)
        if facts.get("unanswered"):
            out[name].append(_unanswered(name, facts["unanswered"]))
    return out


# What a probe that ran past its time limit was asking, for the reason a person reads.
PROBE_TOOLS = {
    "gpu_query": "nvidia-smi --query-gpu",
    "nvidia_smi_version": "nvidia-smi --version",
    "rocm_smi": "rocm-smi",
    "torch": "torch's CUDA query",
    "mpi": "mpirun --version",
    "ibstat": "ibstat",
    "ibv_devinfo": "ibv_devinfo",
}
GPU_PROBES = frozenset({"gpu_query", "nvidia_smi_version", "rocm_smi", "torch"})


def _unanswered(name: str, probes: list[str]) -> Check:
    """A probe that hung: a GPU tool that hangs means a GPU in a bad state (Xid, fallen off the bus)."""
    tools = ", ".join(PROBE_TOOLS.get(p, p) for p in probes)
    gpu = not GPU_PROBES.isdisjoint(probes)
    reason = f"did not answer within the probe time limit: {tools}"
    if gpu:
        reason += "; a GPU tool that hangs usually means a GPU in a bad state (check dmesg for Xid errors)"
    return Check("facts/unanswered", "fail" if gpu else "warn", reason, name)


def _model(facts: dict[str, Any]) -> str | None:
    names = Counter(g.get("name") for g in facts.get("gpus") or [] if g.get("name"))
    return names.most_common(1)[0][0] if names else None


def _gpus(  # noqa: PLR0917 - one call site, each argument named there
    name: str,
    facts: dict[str, Any],
    counts: tuple[Any, int] | None,
    models: tuple[Any, int] | None,
    n: int,
    profile: Profile | None,
    named_profile: bool,
) -> Check:
    gpus = facts.get("gpus") or []
    model = _model(facts)
    problems: list[tuple[str, str]] = []
    if counts and len(gpus) != counts[0]:
        problems.append(("fail", f"{len(gpus)} GPUs where {counts[1]} of {n} hosts have {counts[0]}"))
    wanted = (profile.match.get("gpu_count") if profile else None) or []
    if named_profile and wanted and len(gpus) not in wanted:
        problems.append(
            ("fail", f"{len(gpus)} GPUs; profile {profile.name} is for {' or '.join(map(str, wanted))}")
        )
    if named_profile and profile is not None and model and not _model_fits(profile, model):
        problems.append(("warn", _other_model(profile, model)))
    if models and model != models[0]:
        problems.append(("warn", f"GPU model {model} where {models[1]} of {n} hosts have {models[0]}"))
    mixed = {g.get("name") for g in gpus if g.get("name")}
    if len(mixed) > 1:
        problems.append(("warn", f"mixed GPU models in one host: {', '.join(sorted(mixed))}"))
    if not problems:
        return Check("facts/gpus", "pass", f"{len(gpus)}x {model or 'no GPU'}", name)
    status = "fail" if any(s == "fail" for s, _ in problems) else "warn"
    return Check("facts/gpus", status, "; ".join(text for _, text in problems), name)


def _model_fits(profile: Profile, model: str) -> bool:
    pattern = profile.match.get("gpu_name")
    return not pattern or re.search(str(pattern), model) is not None


def _other_model(profile: Profile, model: str) -> str:
    """A profile named for another GPU: its figures are that GPU's, so its bars say little here (an
    A100 bar is easy for an H100); a warning, since a user may mean it (a close model's figures)."""
    return (
        f"GPU model {model}, but profile {profile.name} is for {profile.description} "
        f"(GPU names matching `{profile.match.get('gpu_name')}`): its bars are another GPU's; "
        "name the profile of this GPU, or a file with its own figures"
    )


def _pcie(name: str, facts: dict[str, Any], loaded: dict[str, tuple[GpuLink, ...]]) -> Check:
    """PCIe judged on a reading under load only: nvidia-smi documents that the current gen and
    width "may be reduced when the GPU is not in use", so the facts (read before any load) of a
    healthy idle GPU often show gen 1. Idle readings give a note, never a warning."""
    labels = {
        _bus(g.get("pci_bus_id")): f"GPU{g.get('index')} {g.get('pci_bus_id')}"
        for g in facts.get("gpus") or []
    }
    if loaded:
        return _pcie_under_load(name, loaded, labels)
    if not facts.get("gpus"):
        return Check("facts/pcie", "skip", "no GPUs", name)
    narrow, slow = _downshifts(
        (
            f"GPU{g.get('index')} {g.get('pci_bus_id') or ''}".strip(),
            g.get("pcie_gen_current"),
            g.get("pcie_gen_max"),
            g.get("pcie_width_current"),
            g.get("pcie_width_max"),
        )
        for g in facts.get("gpus") or []
    )
    if narrow or slow:
        shown = narrow + slow
        listed = "; ".join(shown[:4]) + (f" and {len(shown) - 4} more" if len(shown) > 4 else "")
        reason = (
            f"read at idle only: {listed}; an idle GPU lowers its PCIe link to save power (nvidia-smi: "
            '"may be reduced when the GPU is not in use"), and no reading under load was taken, '
            "so no PCIe verdict"
        )
        return Check("facts/pcie", "note", reason, name, tuple(shown))
    reason = "every GPU at its max PCIe gen and width at idle; no reading under load, so no PCIe verdict"
    return Check("facts/pcie", "note", reason, name)


def _bus(bus_id: object) -> str:
    """A PCI bus id in one spelling: nvidia-smi prints an 8-digit domain, sysfs a 4-digit one."""
    text = str(bus_id or "").strip().lower()
    head, _, tail = text.partition(":")
    return f"{int(head, 16):04x}:{tail}" if text.count(":") == 2 and _hex(head) else text


def _hex(text: str) -> bool:
    try:
        int(text, 16)
    except ValueError:
        return False
    return True


def _downshifts(links: Iterable[tuple[str, Any, Any, Any, Any]]) -> tuple[list[str], list[str]]:
    """(narrower than max, below max gen) descriptions of (label, gen, gen max, width, width max)."""
    narrow: list[str] = []
    slow: list[str] = []
    for label, gen, gen_max, width, width_max in links:
        if width and width_max and width < width_max:
            narrow.append(f"{label} x{width} of x{width_max}")
        if gen and gen_max and gen < gen_max:
            slow.append(f"{label} gen {gen} of {gen_max}")
    return narrow, slow


def _pcie_under_load(name: str, loaded: dict[str, tuple[GpuLink, ...]], labels: dict[str, str]) -> Check:
    """The best link each GPU showed while a launch ran; below its max there is a real downshift."""
    best: dict[str, list[int]] = {}
    for links in loaded.values():
        for link in links:
            seen = best.setdefault(_bus(link.bus_id), [0, 0, 0, 0])
            for i, value in enumerate((link.gen, link.gen_max, link.width, link.width_max)):
                seen[i] = max(seen[i], value or 0)
    launches = ", ".join(sorted(loaded))
    narrow, slow = _downshifts((labels.get(bus, bus), *values) for bus, values in sorted(best.items()))
    where = f"under load (sampled while {launches} ran)"
    if narrow:
        reason = (
            f"PCIe link narrower than the slot {where}: " + "; ".join(narrow) + " (reseat the GPU or riser)"
        )
        if slow:
            reason += "; also below max gen: " + "; ".join(slow)
        return Check("facts/pcie", "fail", reason, name, tuple(narrow + slow))
    if slow:
        reason = (
            f"PCIe below its max gen {where}: "
            + "; ".join(slow)
            + " (a degraded link, riser or BIOS setting)"
        )
        return Check("facts/pcie", "warn", reason, name, tuple(slow))
    return Check("facts/pcie", "pass", f"{len(best)} GPU(s) at their max PCIe gen and width {where}", name)


def _nccl_source(host: Host) -> str:
    """Where the host's NCCL version comes from, said after it in a reason."""
    if host.nccl_from_logs is None:
        return " (torch's, from the facts probe: no benchmark log names its NCCL)"
    if host.nccl_from_probe and host.nccl_from_probe != host.nccl_from_logs:
        return f" (as its benchmark logs loaded it; torch's own NCCL is {host.nccl_from_probe})"
    return " (as its benchmark logs loaded it)"


def _versions(
    name: str, facts: dict[str, Any], majorities: dict[str, tuple[Any, int] | None], n: int, nccl_source: str
) -> Check:
    drift = []
    for key, label in VERSION_KEYS:
        majority = majorities.get(key)
        mine = facts.get(key)
        source = nccl_source if key == "nccl_version" else ""
        if majority and mine is not None and mine != majority[0]:
            drift.append(f"{label} {mine}{source} where {majority[1]} of {n} hosts run {majority[0]}")
    if drift:
        return Check("facts/versions", "warn", "version drift: " + "; ".join(drift), name)
    have = [
        f"{label} {facts.get(key)}" + (nccl_source if key == "nccl_version" else "")
        for key, label in VERSION_KEYS
        if facts.get(key)
    ]
    return Check("facts/versions", "pass", ", ".join(have) or "no versions reported", name)


def _ib(
    name: str, facts: dict[str, Any], fleet_ports: tuple[Any, int] | None, rates: tuple[Any, int] | None
) -> Check | None:
    ports = [p for p in facts.get("ib") or [] if isinstance(p, dict)]
    if not ports and not (fleet_ports and fleet_ports[0]):
        return None
    problems = []
    if fleet_ports and len(ports) != fleet_ports[0]:
        problems.append(f"{len(ports)} InfiniBand ports where the fleet has {fleet_ports[0]}")
    for port in ports:
        label = f"{port.get('device')} port {port.get('port')}"
        state = str(port.get("state") or "unknown")
        if not state.lower().endswith("active"):
            problems.append(f"{label} {state}")
        elif rates and port.get("rate_gbps") and port["rate_gbps"] < rates[0]:
            problems.append(f"{label} at {port['rate_gbps']} Gb/s where the fleet runs {rates[0]} Gb/s")
    if problems:
        return Check("facts/ib", "warn", "InfiniBand: " + "; ".join(problems), name, tuple(problems))
    return Check("facts/ib", "pass", f"{len(ports)} port(s) active", name)
