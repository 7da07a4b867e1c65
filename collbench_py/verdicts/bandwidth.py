"""Bandwidth verdicts on intra-node runs: fleet-relative, against the profile, above the line rate."""

from __future__ import annotations

import statistics

from collbench_py.profiles import Expectation, Profile
from collbench_py.rundir.load import Host, LogData
from collbench_py.verdicts.model import Check, FleetStat, Options
from collbench_py.verdicts.stats import band, reference_sizes, robust_scale, series, value_at, zscores


def human_size(size: int) -> str:
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor} {unit}"
    return f"{size} B"


def sizes_text(sizes: tuple[int, ...]) -> str:
    return ", ".join(human_size(s) for s in sizes)


def fleet_stat(kind: str, collective: str, logs: dict[str, LogData], options: Options) -> FleetStat | None:
    """Statistics of one collective over hosts (key: host) at the reference sizes."""
    points = {key: series(log.run) for key, log in logs.items() if log.run and log.run.status == "ok"}
    sizes, fallback = reference_sizes(
        ([s for s, _ in p] for p in points.values()), options.reference_min_bytes, options.reference_sizes
    )
    values = {key: v for key, p in points.items() if (v := value_at(p, sizes)) is not None and v > 0}
    if not values:
        return None
    median = statistics.median(values.values())
    scale = robust_scale(values.values(), median, options.mad_floor)
    return FleetStat(
        kind=kind,
        collective=collective,
        sizes=sizes,
        fallback=fallback,
        median=median,
        scale=scale,
        n=len(values),
        values=values,
        z=zscores(values, median, scale),
    )


def fleet_check(stat: FleetStat, host: str, options: Options, min_drop: float, log: str | None) -> Check:
    name = f"intra/{stat.collective}/fleet"
    at = f"at {sizes_text(stat.sizes)}"
    if host not in stat.values:
        return Check(name, "skip", f"no busbw {at}", host, (), log)
    if stat.n < options.min_fleet:
        reason = f"fleet of {stat.n}: at least {options.min_fleet} hosts are needed to compare"
        return Check(name, "skip", reason, host, (), log)
    value, z = stat.values[host], stat.z[host]
    drop = (stat.median - value) / stat.median
    status = band(z, drop, options.z_suspect, options.z_fail, min_drop)
    where = f"{value:.3g} GB/s {at}, fleet median {stat.median:.3g} GB/s over {stat.n} hosts"
    if status == "pass":
        return Check(name, "pass", f"{where} (z {z:+.1f})", host, (), log)
    word = "far below" if status == "fail" else "below"
    reason = f"{stat.collective} busbw {word} the fleet: {where}, {drop:.0%} lower, robust z {z:+.1f}"
    return Check(name, status, reason, host, (), log)


def profile_check(
    profile: Profile, collective: str, log: LogData, host: str, options: Options
) -> Check | None:
    """busbw at the profile's size (or the next larger size measured) against its threshold.

    A smaller size is never scored against the large-size figure: a ring's busbw still rises
    there (5-15 % below it one step down), enough to fail a healthy host at a 90 % bar. Then
    the check is a note that says what to measure."""
    expectation = profile.expectations.get(collective)
    if expectation is None or log.run is None or log.run.status != "ok":
        return None
    name = f"intra/{collective}/profile"
    points = dict(series(log.run))
    size = expectation.size
    note = ""
    if size not in points:
        larger = [s for s in points if s > size]
        if not larger:
            return _unmeasured_profile_size(name, profile, expectation, points, host, log)
        size = min(larger)
        note = f" (profile size {human_size(expectation.size)} not measured; the next larger size)"
    value = points[size]
    threshold = expectation.busbw * profile.pass_fraction
    detail = (
        f"{value:.3g} GB/s at {human_size(size)}{note}; profile {profile.name} expects "
        f"{expectation.busbw:g} GB/s, pass at {profile.pass_fraction:.0%} = {threshold:.3g} GB/s "
        f"(source: {expectation.source})"
    )
    status = "pass" if value >= threshold else "fail"
    prefix = "" if status == "pass" else f"{collective} below the acceptance profile: "
    return Check(name, status, prefix + detail, host, (), log.launch.log)


def _unmeasured_profile_size(  # noqa: PLR0917 - one call site
    name: str, profile: Profile, expectation: Expectation, points: dict[int, float], host: str, log: LogData
) -> Check:
    largest = max(points, default=0)
    at = f"{points[largest]:.3g} GB/s at {human_size(largest)}, the largest measured" if points else "no size"
    reason = (
        f"profile {profile.name} scores {expectation.collective} at {human_size(expectation.size)} "
        f"({expectation.busbw:g} GB/s; source: {expectation.source}), which this run did not measure: {at}. "
        "busbw still rises below that size, so no pass/fail against it; measure up to it "
        f"(collbench_max_bytes={expectation.size})"
    )
    return Check(name, "note", reason, host, (), log.launch.log)


def line_rate_note(
    profile: Profile | None, collective: str, log: LogData, value: float, host: str
) -> Check | None:
    """busbw above the one-way line rate is explained, not praised."""
    if profile is None or not profile.line_rate_gbs or value <= profile.line_rate_gbs:
        return None
    transports = set(log.run.transports) if log.run else set()
    how = "NVLS (NVLink SHARP: the switch reduces the data)"
    if "CollNet" in transports:
        how = "CollNet/SHARP (the network reduces the data)"
    reason = (
        f"{collective} busbw {value:.4g} GB/s is above the {profile.line_rate_gbs:g} GB/s one-way line rate: "
        f"NCCL used {how}, so busbw is no longer a link measurement. Set NCCL_ALGO=Ring for link numbers"
    )
    evidence = tuple(line for line in log.evidence if "NVLS" in line or "CollNet" in line)[:2]
    return Check(f"intra/{collective}/line-rate", "note", reason, host, evidence, log.launch.log)


ONE_RANK = "one rank: nothing crosses a link; set more GPUs or use pairs"


def one_rank_note(host: str, collectives: list[str]) -> Check:
    """A one-rank launch measures no link: all_reduce, all_gather, reduce_scatter and alltoall
    print busbw 0 (factor (n-1)/n), the others a device-local copy, and the in-place columns a
    no-op timed at a few microseconds (up to 10^6 GB/s). None of it is judged or compared."""
    reason = (
        f"{ONE_RANK}. Not judged: {', '.join(collectives)} (busbw is 0 or a device-local copy; "
        "the in-place figures time a no-op)"
    )
    return Check("intra/one-rank", "note", reason, host)


def one_rank_fleet_note(hosts: list[str], total: int) -> Check:
    shown = ", ".join(hosts[:5]) + (f" and {len(hosts) - 5} more" if len(hosts) > 5 else "")
    reason = (
        f"{ONE_RANK} ({len(hosts)} of {total} hosts ran intra-node launches with one rank: {shown}). "
        "No bandwidth verdict and no fleet statistics come from those launches"
    )
    return Check("intra/one-rank", "note", reason)


def gloo_on_gpus(host: Host, logs: list[LogData], profile: Profile | None = None) -> Check | None:
    """The torch benchmark over gloo on a node whose facts show GPUs: its numbers are the CPUs'.
    A failed check, unless the run is judged with a profile that measures the CPU (`measures: cpu`):
    then the user asked for CPU numbers, and a note says what they are."""
    gpus = len((host.facts or {}).get("gpus") or [])
    gloo = [log for log in logs if any(str(r.params.get("backend")) == "gloo" for r in log.runs)]
    if not gpus or not gloo:
        return None
    torch = (host.facts or {}).get("torch_version")
    with_torch = f" (torch {torch})" if torch else ""
    reason = (
        f"the torch benchmark ran over gloo{with_torch} on a node with {gpus} GPU(s): gloo measures the "
        "CPUs and the TCP stack, not the GPUs or NVLink/InfiniBand. Use collbench_backend nccl-tests, "
        "or give the node a torch with CUDA"
    )
    evidence = tuple(f"{log.launch.log}: backend=gloo" for log in gloo[:4])
    if profile is not None and profile.measures == "cpu":
        reason = (
            f"the torch benchmark ran over gloo{with_torch} on a node with {gpus} GPU(s), judged with "
            f"profile {profile.name}, which measures the CPU: these are CPU and TCP numbers, not the GPUs'"
        )
        return Check("backend", "note", reason, host.name, evidence, gloo[0].launch.log)
    return Check("backend", "fail", reason, host.name, evidence, gloo[0].launch.log)
