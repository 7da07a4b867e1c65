"""Launcher failures: a launch that ended before its ranks ran says nothing about nodes or links.

mpirun on the first host of a launch starts its daemons on the others over ssh. When ssh refuses
a host key or the login key, when mpirun cannot start its daemons, or when the program or one of
its libraries is missing, the launch ends (mpirun: rc 255; a shell or `timeout` that found no
program: 127; a program that cannot be executed: 126) before any rank measured anything. That is
the run's setup failing, reported once for the fleet, never a bad node or a bad link.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from collbench_py.redact import redact_text
from collbench_py.rundir.load import LogData, SshHops
from collbench_py.verdicts.model import Check

# What a launcher prints when it fails before the ranks run, most telling first: the first sign
# found in the output is the one quoted. (Real outputs: tests/data/launcher/.)
SIGNS: tuple[tuple[str, str], ...] = (
    ("Host key verification failed", "ssh refused a host key (known_hosts)"),
    ("REMOTE HOST IDENTIFICATION HAS CHANGED", "ssh refused a changed host key"),
    ("Permission denied (publickey", "ssh refused the login key"),
    ("Could not resolve hostname", "ssh could not resolve a host name"),
    ("ssh: connect to host", "ssh could not connect"),
    ("Connection timed out during banner exchange", "ssh could not connect"),
    ("error while loading shared libraries", "a shared library is missing"),
    ("was unable to launch the specified application", "mpirun could not start the program"),
    ("was unable to find the specified executable", "mpirun could not find the program"),
    ("failed to run command", "the program could not be started"),
    ("ORTE was unable to reliably start one or more daemons", "mpirun could not start its daemons"),
    ("PRTE was unable to reliably start one or more daemons", "mpirun could not start its daemons"),
    ("ORTE has lost communication with a remote daemon", "mpirun lost a daemon while starting"),
)
# Exit codes that mean the program never ran, whatever the launcher.
NOT_STARTED_RCS: Mapping[int, str] = {
    126: "the program could not be executed (rc 126)",
    127: "the program or the launcher was not found (rc 127)",
}
# mpirun's own failure (ranks' codes are passed through; this one is its own).
MPIRUN_OWN_RC = 255
LAUNCHER_CHECK = "launcher"
EVIDENCE_LINES = 12


@dataclass(frozen=True)
class LauncherFailure:
    cause: str  # in words
    line: str  # the output line that says so; "" when only the exit code or the hop check does


def classify_launch(
    status: str | None,
    rc: int | None,
    launcher: str | None,
    output: Sequence[str],
    *,
    ranks_ran: bool,
    failed_hop: str | None = None,
) -> LauncherFailure | None:
    """The launcher failure this launch ended with, or None when it is not one.

    Only a failed launch whose ranks printed nothing of the benchmark qualifies: a timeout, a
    crash after the header or wrong data is the ranks' own. Then, in order: a line the launcher
    prints when it fails (SIGNS), an ssh hop the launch needs that failed its check before the
    launches (`failed_hop`, "node1 -> node3: <error>"), rc 126/127, or rc 255 from mpirun.
    """
    if status != "failed" or ranks_ran:
        return None
    for needle, cause in SIGNS:
        line = next((line.strip() for line in output if needle in line), None)
        if line is not None:
            return LauncherFailure(cause, line)
    if failed_hop is not None:
        return LauncherFailure("an ssh hop it needs failed its check before the launches", failed_hop)
    last = next((line.strip() for line in reversed(output) if line.strip()), "")
    if rc in NOT_STARTED_RCS:
        return LauncherFailure(NOT_STARTED_RCS[rc], last)
    if rc == MPIRUN_OWN_RC and launcher == "mpirun":
        return LauncherFailure("mpirun failed before any rank ran (rc 255)", last)
    return None


def failed_hop_of(hosts: Sequence[str], launcher: str | None, hops: SshHops | None) -> str | None:
    """The first failed hop from the launch's first host (mpirun's) to another of its hosts."""
    if hops is None or launcher != "mpirun" or len(hosts) < 2:
        return None
    head, others = hosts[0], set(hosts[1:])
    for hop in hops.failed:
        if hop.source == head and hop.target in others:
            return f"{hop.source} -> {hop.target}: {hop.error}"
    return None


def of_log(log: LogData, hops: SshHops | None) -> LauncherFailure | None:
    """classify_launch fed from a loaded launch: its manifest entry, its logs and the hop check."""
    launch = log.launch
    return classify_launch(
        launch.status,
        launch.rc,
        launch.launcher,
        (*log.launcher_output, *log.tail),
        ranks_ran=bool(log.runs),
        failed_hop=failed_hop_of(launch.hosts, launch.launcher, hops),
    )


def fleet_check(
    failures: Mapping[str, tuple[LogData, LauncherFailure]], hops: SshHops | None
) -> Check | None:
    """One fleet-level check for every launcher failure and failed ssh hop; None when there is none.

    `failures` maps a launch's label ("pair node1--node3 all_reduce") to its log and failure.
    """
    failed_hops = hops.failed if hops is not None else ()
    if not failures and not failed_hops:
        return None
    evidence = [f"ssh hop {hop.source} -> {hop.target}: {hop.error}" for hop in failed_hops]
    evidence += [
        f"{label}: {failure.cause}: {failure.line}".rstrip(": ") for label, (_, failure) in failures.items()
    ]
    parts = []
    if failed_hops:
        parts.append(f"{len(failed_hops)} ssh hop(s) between nodes failed their check before the launches")
    if failures:
        parts.append(f"{len(failures)} launch(es) failed before their ranks ran ({_listed(failures)})")
    reason = (
        "; ".join(parts)
        + ": the launcher (ssh between nodes, mpirun, a missing program or library) failed, so nothing was "
        "measured there; not a node or link fault"
    )
    first_log = next((log.launch.log for log, _ in failures.values()), None)
    return Check(
        LAUNCHER_CHECK,
        "fail",
        reason,
        None,
        tuple(redact_text(e) for e in _unique(evidence))[:EVIDENCE_LINES],
        first_log,
    )


def label_of(log: LogData) -> str:
    """How the report names a launch: "pair node1--node3 all_reduce", "all all_reduce"."""
    launch = log.launch
    hosts = "" if launch.kind == "all" else "--".join(launch.hosts) + " "
    return f"{launch.kind} {hosts}{launch.collective or ''}".strip()


def _listed(failures: Mapping[str, object]) -> str:
    labels = list(failures)
    more = f" and {len(labels) - 6} more" if len(labels) > 6 else ""
    return ", ".join(labels[:6]) + more


def _unique(lines: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(lines))
