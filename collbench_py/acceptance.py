"""The acceptance bundle: one archive for the provider of rented nodes, with the evidence behind the verdict.

    collbench-acceptance-<run_id>/
      README.txt        what is here and how to check it
      bundle.json       run id, verdict, exit code, profile, what was redacted
      versions.json     collbench, ansible-core, Python, and the benchmark tools the logs name
      profile.yml       the acceptance profile the verdict used (when there was one)
      run/              the run directory: manifest, facts, topology, every raw log (redacted)
      report/           `collbench report run/` on exactly that copy: index.html, report.md, junit.xml, ...
      SHA256SUMS        every file above; `sha256sum -c SHA256SUMS` in this folder verifies them

The report is computed from the redacted copy, without the private history database, so the
provider can reproduce the verdict from the bundle alone (`collbench report run --profile
profile.yml --no-history`). Secrets never enter: no inventory is read, process environments in
nccl-tests JSON files are dropped, and values of secret-looking keys are masked in every file.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import re
import shutil
import tarfile
import tempfile
from collections import defaultdict
from contextlib import redirect_stdout
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import ansible.release

from collbench_py import __version__
from collbench_py.cli import build_parser, main
from collbench_py.exitcodes import ExitCode
from collbench_py.rundir import RunDirError, load_run_dir

PREFIX = "collbench-acceptance-"
SUMS = "SHA256SUMS"
# Regular files of a run directory that are evidence (docs/run-directory.md); nothing else is copied.
EVIDENCE_GLOBS = (
    "manifest.json",
    "hosts/*/facts.json",
    "hosts/*/topo.txt",
    "hosts/*/intra/*.log",
    "hosts/*/intra/*.json",
    "hosts/*/intra/*.out",
    "inter/all/*.log",
    "inter/all/*.json",
    "inter/all/*.out",
    "inter/pairs/*/*.log",
    "inter/pairs/*/*.json",
    "inter/pairs/*/*.out",
)
SAFE_PATH = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")
_SECRET_KEY = re.compile(r"(?i)(passw(or)?d|secret|token|api_?key|private_?key|credential|auth)")
_ENV_KEYS = {"env", "environ", "environment"}
_SECRET_ASSIGNMENT = re.compile(
    r"(?i)\b([A-Z0-9_.-]*(?:PASSWORD|PASSWD|SECRET|TOKEN|API_?KEY|PRIVATE_?KEY|CREDENTIALS?)[A-Z0-9_.-]*)"
    r"(\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|\S+)"
)
_PRIVATE_KEY_BLOCK = re.compile(
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S
)
REDACTED = "<redacted>"
VERDICTS = {ExitCode.OK: "passed", ExitCode.FAILED: "failed", ExitCode.WARNINGS: "warnings"}


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


# ---- redaction ----------------------------------------------------------------------------------------


def redact_json(value: Any, where: str, notes: list[str]) -> Any:
    """A copy with process environments dropped and secret-looking keys masked."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if str(key).lower() in _ENV_KEYS and isinstance(item, (dict, list, str)):
                out[key] = "<removed: a process environment can hold secrets>"
                notes.append(f"{where}: `{key}` removed")
            elif _SECRET_KEY.search(str(key)) and isinstance(item, (str, int, float)) and item != "":
                out[key] = REDACTED
                notes.append(f"{where}: value of `{key}` masked")
            else:
                out[key] = redact_json(item, where, notes)
        return out
    if isinstance(value, list):
        return [redact_json(item, where, notes) for item in value]
    if isinstance(value, str):
        return redact_text(value, where, notes)
    return value


def redact_text(text: str, where: str, notes: list[str]) -> str:
    """Mask `NAME_TOKEN=value`-like assignments and drop private key blocks."""
    before = len(notes)
    text, keys = _PRIVATE_KEY_BLOCK.subn("<private key removed>", text)
    if keys:
        notes.append(f"{where}: {keys} private key block(s) removed")

    def mask(match: re.Match[str]) -> str:
        if match[3] == REDACTED:
            return match[0]
        notes.append(f"{where}: value of {match[1]} masked")
        return f"{match[1]}{match[2]}{REDACTED}"

    text = _SECRET_ASSIGNMENT.sub(mask, text)
    del notes[before + 20 :]  # a log that repeats one line thousands of times needs no thousand notes
    return text


def _copy_redacted(source: Path, dest: Path, rel: str, notes: list[str]) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    raw = source.read_bytes()
    if source.suffix == ".json":
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            # An unterminated nccl-tests -J file cannot be cleaned key by key: leave it out.
            notes.append(f"{rel}: not valid JSON, left out (its text log is in the bundle)")
            return
        dest.write_text(json.dumps(redact_json(data, rel, notes), indent=1) + "\n", encoding="utf-8")
        return
    text = raw.decode("utf-8", errors="replace")
    dest.write_text(redact_text(text, rel, notes), encoding="utf-8")


def copy_evidence(run_dir: Path, dest: Path, notes: list[str]) -> list[str]:
    """Copy the run directory's evidence files, redacted, to `dest`; return their relative paths."""
    root = run_dir.resolve()
    copied = []
    for pattern in EVIDENCE_GLOBS:
        for path in sorted(root.glob(pattern)):
            rel = path.relative_to(root).as_posix()
            # A link could point anywhere (a key, /etc/shadow): only regular files inside the run.
            if path.is_symlink() or not path.is_file():
                notes.append(f"{rel}: not a regular file, left out")
                continue
            if not SAFE_PATH.match(rel):
                notes.append(f"{rel!r}: name outside [A-Za-z0-9._-], left out")
                continue
            _copy_redacted(path, dest / rel, rel, notes)
            if (dest / rel).exists():
                copied.append(rel)
    return copied


# ---- versions -----------------------------------------------------------------------------------------


def tool_versions(run_copy: Path) -> dict[str, Any]:
    """Versions of what ran: this program, Ansible and Python here; the benchmark tools and
    libraries as the logs and facts name them (value -> the hosts or logs that said so)."""
    manifest = json.loads((run_copy / "manifest.json").read_text(encoding="utf-8"))
    versions: dict[str, Any] = {
        "collbench": __version__,
        "collbench_that_ran": manifest.get("collbench_version"),
        "ansible_core": ansible.release.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "backend": manifest.get("backend"),
        "launcher": manifest.get("launcher"),
    }
    tools: dict[str, list[str]] = defaultdict(list)
    try:
        run = load_run_dir(run_copy, workers=1)
    except RunDirError:
        run = None
    for log in run.logs if run else ():
        for parsed in log.runs[:1]:
            name = parsed.tool or "unknown tool"
            label = f"{name} {parsed.tool_version}" if parsed.tool_version else name
            if parsed.nccl_version:
                label += f" (NCCL {parsed.nccl_version})"
            tools[label].append(log.launch.log)
    versions["benchmark_tools"] = {k: sorted(v) for k, v in sorted(tools.items())}
    for key in ("driver_version", "cuda_version", "nccl_version", "mpi_version", "torch_version"):
        by_value: dict[str, list[str]] = defaultdict(list)
        for host in run.hosts.values() if run else ():
            value = (host.facts or {}).get(key)
            if value:
                by_value[str(value)].append(host.name)
        versions[key.removesuffix("_version")] = {k: sorted(v) for k, v in sorted(by_value.items())}
    return versions


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


def _report(run_copy: Path, out: Path, profile: str | None, strict: bool) -> tuple[int, str]:
    """`collbench report` on the copy, without the history (the provider has none): its exit code
    and the summary it printed."""
    argv = ["report", str(run_copy), "--out", str(out)]
    argv += ["--profile", profile] if profile else []
    argv += ["--strict"] if strict else []
    _, unknown = build_parser().parse_known_args([*argv, "--no-history"])
    if "--no-history" not in unknown:
        argv.append("--no-history")
    summary = io.StringIO()
    with redirect_stdout(summary):
        code = main(argv)
    if code not in (ExitCode.OK, ExitCode.FAILED, ExitCode.WARNINGS):
        raise BundleError("the report could not be made (its error is above)")
    return code, summary.getvalue()


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


def _readme(run_id: str, verdict: str, code: int, profile: str | None) -> str:
    return (
        f"collbench acceptance bundle for run {run_id}\n"
        f"verdict: {verdict} (exit code {code}); profile: {profile or 'none'}\n\n"
        "report/index.html   the report (open it in a browser); report.md is the same as Markdown;\n"
        "                    junit.xml, hosts.csv, results.json are the machine-readable forms\n"
        "run/                the run directory the report was computed from: manifest.json,\n"
        "                    hosts/<host>/facts.json and topo.txt, every benchmark log\n"
        "profile.yml         the acceptance profile: expected busbw per collective and its source\n"
        "versions.json       versions of collbench, ansible-core, Python and of the benchmark tools\n"
        "bundle.json         the verdict and what was redacted before packing\n\n"
        "Check the files:    sha256sum -c SHA256SUMS      (in this folder)\n"
        "Reproduce:          collbench report run --profile profile.yml --no-history --out /tmp/r\n"
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
) -> Bundle:
    """Write the acceptance bundle of `run_dir` (tar.gz) and return it with its verdict."""
    run_dir = Path(run_dir)
    run_id = _run_id(run_dir)
    out = Path(out) if out else default_path(run_dir, run_id)
    if out.exists() and not force:
        raise BundleError(f"{out} exists: pass --out elsewhere, or --force to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".bundle-", dir=out.parent))
    try:
        top = staging / f"{PREFIX}{run_id}"
        notes: list[str] = []
        copied = copy_evidence(run_dir, top / "run", notes)
        if "manifest.json" not in copied:
            raise BundleError(f"{run_dir}/manifest.json could not be copied")
        code, summary = _report(top / "run", top / "report", profile, strict)
        results = json.loads((top / "report" / "results.json").read_text(encoding="utf-8"))
        verdict = VERDICTS[code]
        profile_name = _profile_file(results, top, notes)
        (top / "versions.json").write_text(json.dumps(tool_versions(top / "run"), indent=1) + "\n")
        bundle_info = {
            "run_id": run_id,
            "verdict": verdict,
            "exit_code": int(code),
            "profile": profile_name,
            "profile_reason": results.get("profile_reason"),
            "created_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "created_by": f"collbench {__version__}",
            "source_files": len(copied),
            "redactions": notes,
        }
        (top / "bundle.json").write_text(json.dumps(bundle_info, indent=1) + "\n", encoding="utf-8")
        (top / "README.txt").write_text(_readme(run_id, verdict, code, profile_name), encoding="utf-8")
        files = write_sums(top)
        partial = staging / "bundle.tar.gz"
        with tarfile.open(partial, "w:gz") as tar:
            tar.add(top, arcname=top.name, filter=_tar_filter)
        os.replace(partial, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Bundle(out, run_id, int(code), verdict, profile_name, files, tuple(notes), summary)
