"""The acceptance bundle: one archive for the provider of rented nodes, with the evidence behind the verdict.

    collbench-acceptance-<run_id>/
      README.txt        what is here and how to check it
      bundle.json       run id, verdict, exit code, profile, the history checks, what was redacted
      versions.json     collbench, ansible-core, Python, and the benchmark tools the logs name
      profile.yml       the acceptance profile the verdict used (when there was one)
      run/              every file the report read (rundir.evidence_files), redacted: manifest, facts,
                        topology, PCIe links under load, every log (re-measured rounds too), the pair plan
      report/           the report itself: index.html, report.md, junit.xml, results.json, ...
      SHA256SUMS        every file above; `sha256sum -c SHA256SUMS` in this folder verifies them

The report is made once, by the code of `collbench report` (report.make.make_report) on the run
directory itself, with the same history: its exit code is the bundle's verdict, and its results.json
is the one in the bundle. The checks against the history (named `history/...`) are in results.json
and bundle.json; the rest of the verdict the provider reproduces from the bundle alone (`collbench
report run --profile profile.yml --no-history`). Secrets never enter: no inventory is read, every
file goes through collbench_py.redact, and on top of it process environments in JSON files are
dropped and private key blocks removed.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import tarfile
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import ansible.release

from collbench_py import __version__, redact
from collbench_py.exitcodes import ExitCode
from collbench_py.history import HistoryOptions
from collbench_py.profiles import ProfileError
from collbench_py.report.make import MadeReport, make_report
from collbench_py.rundir.load import RunDir, RunDirError, evidence_files
from collbench_py.verdicts import Options

PREFIX = "collbench-acceptance-"
SUMS = "SHA256SUMS"
SAFE_PATH = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")
_ENV_KEYS = {"env", "environ", "environment"}
# A masked value as redact.redact_text writes it, with the name before it: what bundle.json lists.
_MASKED = re.compile(
    r"(?P<name>[A-Za-z_][A-Za-z0-9_-]*)(?:[\"']?\s*[=:]\s*[\"']?| set by environment to )"
    + re.escape(redact.REDACTED)
)
REDACTED = redact.REDACTED
VERDICTS = {ExitCode.OK: "passed", ExitCode.FAILED: "failed", ExitCode.WARNINGS: "warnings"}
# The report's outputs the bundle's own passes go over (they quote logs, already redacted).
_REPORT_TEXT = (".html", ".md", ".json", ".xml", ".csv", ".prom", ".txt")


class BundleError(Exception):
    """The bundle cannot be made (one line for the user)."""


@dataclass(frozen=True)
class Bundle:
    path: Path
    run_id: str
    exit_code: int
    verdict: str
    profile: str | None
    files: int
    redactions: tuple[str, ...]
    summary: str  # what the report printed


# ---- redaction: collbench_py.redact, and two passes on top for what leaves the site -----------------


def _note_masked(before: str, after: str, where: str, notes: list[str]) -> None:
    """Name in `notes` each secret the redaction masked in this file (once per name)."""
    masked = Counter(m["name"] for m in _MASKED.finditer(after))
    masked.subtract(m["name"] for m in _MASKED.finditer(before))
    notes += [f"{where}: value of {name} masked" for name, count in sorted(masked.items()) if count > 0][:20]


def _without_private_keys(text: str, where: str, notes: list[str]) -> str:
    text, blocks = redact.without_private_keys(text)
    if blocks:
        notes.append(f"{where}: {blocks} private key block(s) removed")
    return text


def redact_text(text: str, where: str, notes: list[str]) -> str:
    """The text with private key blocks removed and every secret redact.py knows masked."""
    cleaned = redact.redact_text(_without_private_keys(text, where, notes))
    _note_masked(text, cleaned, where, notes)
    return cleaned


def _drop_environments(value: Any, where: str, notes: list[str]) -> Any:
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if str(key).lower() in _ENV_KEYS and isinstance(item, (dict, list, str)):
                out[key] = "<removed: a process environment can hold secrets>"
                notes.append(f"{where}: `{key}` removed")
            else:
                out[key] = _drop_environments(item, where, notes)
        return out
    if isinstance(value, list):
        return [_drop_environments(item, where, notes) for item in value]
    if isinstance(value, str):
        return _without_private_keys(value, where, notes)
    return value


def redact_json(value: Any, where: str, notes: list[str]) -> Any:
    """A copy with process environments dropped, private key blocks removed, and everything else
    through redact.redact_value (secret-named keys' values, secrets inside strings)."""
    cleaned = redact.redact_value(_drop_environments(value, where, notes))
    _note_masked(json.dumps(value), json.dumps(cleaned), where, notes)
    return cleaned


def _copy_redacted(source: Path, dest: Path, rel: str, notes: list[str]) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    text = source.read_bytes().decode("utf-8", errors="replace")
    if source.suffix == ".json":
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            # An unterminated nccl-tests -J file (a killed run) is still evidence: cleaned as text.
            notes.append(f"{rel}: not valid JSON, redacted as text")
        else:
            dest.write_text(json.dumps(redact_json(data, rel, notes), indent=1) + "\n", encoding="utf-8")
            return
    dest.write_text(redact_text(text, rel, notes), encoding="utf-8")


def copy_evidence(run: RunDir, dest: Path, notes: list[str]) -> list[str]:
    """Copy, redacted, every file the report of `run` read (rundir.evidence_files) to `dest`; return
    their relative paths."""
    root = run.path.resolve()
    copied = []
    for rel in evidence_files(run):
        if not SAFE_PATH.match(rel):
            notes.append(f"{rel!r}: name outside [A-Za-z0-9._-], left out")
            continue
        _copy_redacted(root / rel, dest / rel, rel, notes)
        copied.append(rel)
    return copied


def _clean_report(report_dir: Path, notes: list[str]) -> None:
    """The bundle's own passes over the report's files: they quote logs (redacted line by line by
    the report), and a private key's lines are no secret-named value."""
    for path in sorted(report_dir.rglob("*")):
        if path.is_file() and path.suffix in _REPORT_TEXT:
            text = path.read_text(encoding="utf-8", errors="replace")
            cleaned = _without_private_keys(text, f"report/{path.relative_to(report_dir).as_posix()}", notes)
            if cleaned != text:
                path.write_text(cleaned, encoding="utf-8")


# ---- versions -----------------------------------------------------------------------------------------


def tool_versions(run: RunDir) -> dict[str, Any]:
    """Versions of what ran: this program, Ansible and Python here; the benchmark tools and
    libraries as the logs and facts name them (value -> the hosts or logs that said so)."""
    versions: dict[str, Any] = {
        "collbench": __version__,
        "collbench_that_ran": run.collbench_version,
        "ansible_core": ansible.release.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "backend": run.backend,
        "launcher": run.launcher,
    }
    tools: dict[str, list[str]] = defaultdict(list)
    for log in run.logs:
        for parsed in log.runs[:1]:
            name = parsed.tool or "unknown tool"
            label = f"{name} {parsed.tool_version}" if parsed.tool_version else name
            if parsed.nccl_version:
                label += f" (NCCL {parsed.nccl_version})"
            tools[label].append(log.launch.log)
    versions["benchmark_tools"] = {k: sorted(v) for k, v in sorted(tools.items())}
    for key in ("driver_version", "cuda_version", "nccl_version", "mpi_version", "torch_version"):
        by_value: dict[str, list[str]] = defaultdict(list)
        for host in run.hosts.values():
            value = (host.facts or {}).get(key)
            if value:
                by_value[str(value)].append(host.name)
        versions[key.removesuffix("_version")] = {k: sorted(v) for k, v in sorted(by_value.items())}
    return redact.redact_value(versions)


# ---- the bundle ---------------------------------------------------------------------------------------


def default_path(run_dir: Path, run_id: str) -> Path:
    return run_dir / "acceptance" / f"{PREFIX}{run_id}.tar.gz"


def _run_id(run_dir: Path) -> str:
    manifest = run_dir / "manifest.json"
    if not manifest.is_file():
        raise BundleError(f"{run_dir} is not a run directory: no manifest.json")
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"{manifest}: not valid JSON ({exc})") from None
    run_id = str(data.get("run_id") or run_dir.name) if isinstance(data, dict) else run_dir.name
    if not SAFE_PATH.match(run_id) or "/" in run_id:
        raise BundleError(f"{manifest}: run id {run_id!r} is not a safe file name")
    return run_id


def _history_checks(made: MadeReport) -> list[dict[str, Any]]:
    """The checks of the verdict that compared the run with its history (the database stays on
    site): what a reproduction from the bundle alone, without history, cannot give."""
    checks = [
        *((None, c) for c in made.report.fleet_checks),
        *((v.host, c) for v in made.report.hosts.values() for c in v.checks),
    ]
    return [
        {"host": host, "name": c.name, "status": c.status, "reason": c.reason}
        for host, c in checks
        if c.name.startswith("history")
    ]


def _profile_file(results: dict[str, Any], top: Path, notes: list[str]) -> str | None:
    profile = results.get("profile") or {}
    name, origin = profile.get("name"), profile.get("origin")
    if not name:
        return None
    if origin == "shipped":
        text = (resources.files("collbench_py") / "profiles" / f"{name}.yml").read_text(encoding="utf-8")
    elif origin and Path(origin).is_file():
        text = Path(origin).read_text(encoding="utf-8")
    else:
        notes.append(f"profile {name}: its file {origin} is gone, not included")
        return str(name)
    (top / "profile.yml").write_text(redact_text(text, "profile.yml", notes), encoding="utf-8")
    return str(name)


def _readme(run_id: str, verdict: str, code: int, profile: str | None, history: int) -> str:
    reproduce = "the same verdict"
    if history:
        reproduce = f"the same verdict but for the {history} check(s) against the history, in bundle.json"
    return (
        f"collbench acceptance bundle for run {run_id}\n"
        f"verdict: {verdict} (exit code {code}); profile: {profile or 'none'}\n\n"
        "report/index.html   the report (open it in a browser); report.md is the same as Markdown;\n"
        "                    junit.xml, hosts.csv, results.json are the machine-readable forms\n"
        "run/                every file the report read: manifest.json, hosts/<host>/facts.json,\n"
        "                    topo.txt and intra/gpu-link-*.csv, every benchmark log (re-measured\n"
        "                    rounds too), inter/pairs/plan.json with the plan's decisions\n"
        "profile.yml         the acceptance profile: expected busbw per collective and its source\n"
        "versions.json       versions of collbench, ansible-core, Python and of the benchmark tools\n"
        "bundle.json         the verdict, the checks against the history, what was redacted\n\n"
        "Check the files:    sha256sum -c SHA256SUMS      (in this folder)\n"
        "Reproduce:          collbench report run --profile profile.yml --no-history --out /tmp/r\n"
        f"                    ({reproduce})\n"
    )


def write_sums(top: Path) -> int:
    files = sorted(p for p in top.rglob("*") if p.is_file() and p.name != SUMS)
    lines = []
    for path in files:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        lines.append(f"{digest}  {path.relative_to(top).as_posix()}\n")
    (top / SUMS).write_text("".join(lines), encoding="utf-8")
    return len(files)


def _tar_filter(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = 0o755 if info.isdir() else 0o644
    return info


def build_bundle(
    run_dir: Path,
    profile: str | None = None,
    out: Path | None = None,
    *,
    strict: bool = False,
    force: bool = False,
    options: Options | None = None,
    db: str | None = None,
    history_options: HistoryOptions | None = None,
) -> Bundle:
    """Write the acceptance bundle of `run_dir` (tar.gz) and return it with its verdict: the report
    of `run_dir` made as `collbench report` makes it (the history database `db` read and
    written with `history_options`; None: no history), and every file that report read."""
    run_dir = Path(run_dir)
    run_id = _run_id(run_dir)
    out = Path(out) if out else default_path(run_dir, run_id)
    if out.exists() and not force:
        raise BundleError(f"{out} exists: pass --bundle-out elsewhere, or --force to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".bundle-", dir=out.parent))
    try:
        top = staging / f"{PREFIX}{run_id}"
        notes: list[str] = []
        try:
            made = make_report(
                run_dir,
                top / "report",
                profile=profile,
                strict=strict,
                options=options,
                db=db,
                history_options=history_options,
                links_to=top / "run",
            )
        except (RunDirError, ProfileError) as exc:
            raise BundleError(str(exc)) from None
        code = made.exit_code
        copied = copy_evidence(made.report.run, top / "run", notes)
        _clean_report(top / "report", notes)
        results = json.loads((top / "report" / "results.json").read_text(encoding="utf-8"))
        verdict = VERDICTS[ExitCode(code)]
        profile_name = _profile_file(results, top, notes)
        versions = tool_versions(made.report.run)
        (top / "versions.json").write_text(json.dumps(versions, indent=1) + "\n", encoding="utf-8")
        history_checks = _history_checks(made)
        bundle_info = {
            "run_id": run_id,
            "verdict": verdict,
            "exit_code": code,
            "profile": profile_name,
            "profile_reason": results.get("profile_reason"),
            "created_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "created_by": f"collbench {__version__}",
            "source_files": len(copied),
            "history_checks": redact.redact_value(history_checks),
            "redactions": notes,
        }
        (top / "bundle.json").write_text(json.dumps(bundle_info, indent=1) + "\n", encoding="utf-8")
        readme = _readme(run_id, verdict, code, profile_name, len(history_checks))
        (top / "README.txt").write_text(readme, encoding="utf-8")
        files = write_sums(top)
        partial = staging / "bundle.tar.gz"
        with tarfile.open(partial, "w:gz") as tar:
            tar.add(top, arcname=top.name, filter=_tar_filter)
        os.replace(partial, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    summary = "\n".join(made.summary)
    return Bundle(out, run_id, code, verdict, profile_name, files, tuple(notes), summary)
