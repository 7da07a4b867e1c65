"""Every secret shape collbench_py.redact knows, under every secret name it knows, planted in every kind
of file a run directory holds, reaches no output: not the acceptance bundle (every member, extracted),
not the report's files, not the history database, not what `collbench report` and `collbench bundle`
print.

The run is an adaptive pair run from real logs (tests/rundir_factory.py) with a pair plan, re-measured
pairs, PCIe links under load, a failed launch (its first lines are quoted as the launcher's output),
nccl-tests `-J` files, launcher output and Slurm's unusable nodes in the manifest. Each planted value
is unique, so a leak names the file, the shape and the name it came from.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from collbench_py import history
from collbench_py.redact import REDACTED, is_secret_name, redact_text
from collbench_py.rundir.load import load_run_dir
from collbench_py.verdicts import judge
from tests.collbench_cli import collbench
from tests.report.test_report_plan import _adaptive_spec
from tests.rundir_factory import (
    H100_LOG,
    NCCL_FAILURE,
    RUN_ID,
    RunSpec,
    build_run_dir,
    gpu_link_csv,
    make_facts,
    nccl_tests_json,
)

# Names caught by one rule only (a prefix, a whole name), then names other rules catch too.
PREFIX_ONLY = ("AWS_ACCOUNT_ID", "AWS_ROLE_ARN", "AZURE_CLIENT_ID", "AZURE_TENANT_ID", "DATABASE_URL")
NAMES = (
    *PREFIX_ONLY,
    "AWS_ACCESS_KEY_ID",
    "AWS_SESSION_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "AZURE_CLIENT_SECRET",
    "SSH_KEY",
    "HF_TOKEN",
    "WANDB_API_KEY",
    "MY_PASSWORD",
    "GITHUB_TOKEN",
)
# How launchers, shells, Python, YAML and NCCL write a variable.
TEXT_SHAPES = {
    "NAME=VALUE": "{name}={value}",
    'NAME="VALUE"': 'export {name}="{value}"',
    "NAME='VALUE'": "declare -x {name}='{value}'",
    "-x NAME=VALUE": "+ mpirun -x {name}={value} -x NCCL_DEBUG=INFO all_reduce_perf",
    '"NAME": "VALUE"': '  "{name}": "{value}",',
    "'NAME': 'VALUE'": "environ({{'{name}': '{value}', 'HOME': '/root'}})",
    "NAME: VALUE": "{name}: {value}",
    "set by environment": "node01:12:12 [0] NCCL INFO {name} set by environment to {value}",
}
HOSTS = [f"node{i:02d}" for i in range(8)]
PLANTED: dict[str, str] = {}  # the value's unique token -> where it was planted
_tokens = itertools.count(1)


def token(where: str) -> str:
    value = f"sekrit{next(_tokens):04d}q"
    PLANTED[value] = where
    return value


def value_for(name: str, where: str) -> str:
    secret = token(where)
    return f"postgres://u:{secret}@db.example/prod" if name == "DATABASE_URL" else secret


def text_lines(kind: str) -> list[str]:
    """Every text shape under every name, a line each, then a private key block (one item)."""
    lines = [
        shape.format(name=name, value=value_for(name, f"{kind} {label} {name}"))
        for label, shape in TEXT_SHAPES.items()
        for name in NAMES
    ]
    return [*lines, private_key(kind)]


def text_block(kind: str) -> str:
    return "\n".join(text_lines(kind)) + "\n"


def private_key(kind: str) -> str:
    body = [
        f"b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9u{token(f'{kind} private key line {i}')}" for i in range(3)
    ]
    return "\n".join(["-----BEGIN OPENSSH PRIVATE KEY-----", *body, "-----END OPENSSH PRIVATE KEY-----"])


def mapping(kind: str) -> dict[str, str]:
    return {name: value_for(name, f"{kind} JSON key {name}") for name in NAMES}


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")


def plant(run: Path) -> None:
    node01, node02 = run / "hosts" / "node01" / "intra", run / "hosts" / "node02" / "intra"
    ok_log = node01 / "all_reduce.log"
    ok_log.write_text(
        ok_log.read_text(encoding="utf-8") + text_block("healthy log, its tail"), encoding="utf-8"
    )
    failed = node02 / "all_reduce.log"
    failed.write_text(
        # Keys at the top and the bottom: the first lines of a launch that failed before any result
        # are quoted as what its launcher printed, and its last lines as its tail.
        private_key("failed log, its first lines")
        + "\n"
        + text_block("failed log, its head")
        + NCCL_FAILURE.read_text(encoding="utf-8")  # a real failure, no result row
        + private_key("failed log, its last lines"),
        encoding="utf-8",
    )
    # A re-measured pair that timed out: its last lines are quoted, and they end with a key.
    (pair_log,) = sorted(run.glob("inter/pairs/*/round*/all_reduce.log"))[:1]
    pair_log.write_text(
        pair_log.read_text(encoding="utf-8") + text_block("re-measured pair log"), encoding="utf-8"
    )
    launcher = private_key("launcher output, its first lines") + "\n" + text_block("launcher output")
    (node02 / "launcher-node02.out").write_text(launcher, encoding="utf-8")
    topo = run / "hosts" / "node03" / "topo.txt"
    topo.write_text(topo.read_text(encoding="utf-8") + text_block("topo.txt"), encoding="utf-8")
    csv = node01 / "gpu-link-all_reduce.csv"
    csv.write_text(gpu_link_csv(make_facts("node01")) + text_block("gpu-link csv"), encoding="utf-8")

    json_file = node01 / "all_reduce.json"
    json_file.write_text(nccl_tests_json(H100_LOG), encoding="utf-8")

    def nccl_json(data: dict) -> None:
        data["env"] = [*data.get("env", []), *(f"{n}={v}" for n, v in mapping("-J env").items())]
        data["args"] = [*data.get("args", []), *text_lines("-J args")]
        data["settings"] = mapping("-J mapping")

    _edit_json(json_file, nccl_json)

    def facts(data: dict) -> None:
        data["os"]["kernel"] = "6.1.0\n" + text_block("facts string")
        data["environment"] = mapping("facts environment")
        data["probe"] = mapping("facts mapping")

    _edit_json(run / "hosts" / "node04" / "facts.json", facts)

    def manifest(data: dict) -> None:
        data["parameters"]["extra"] = mapping("manifest parameters")
        data["parameters"]["launch_env"] = text_block("manifest parameter string")
        data["hosts"]["node05"]["reason"] = text_block("manifest host reason")
        data["slurm"] = {
            "job_id": "4242",
            "unusable": [
                {"host": "node99", "state": "down", "reason": text_block("slurm reason"), "named": True},
            ],
        }
        for launch in data["launches"]:
            if launch["log"] == "hosts/node02/intra/all_reduce.log":
                launch.update(status="failed", rc=1, reason=text_block("manifest launch reason"))
            if launch["log"] == pair_log.relative_to(run).as_posix():
                launch.update(status="timeout", rc=124)

    _edit_json(run / "manifest.json", manifest)

    def plan(data: dict) -> None:
        data["log"] = [*data["log"], *text_lines("plan.json log")]
        data["decisions"][0]["reason"] += " " + text_block("plan.json decision reason")

    _edit_json(run / "inter" / "pairs" / "plan.json", plan)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """Every output, by name: report files, the extracted bundle's members, the history, the console."""
    tmp = tmp_path_factory.mktemp("everywhere")
    spec, _ = _adaptive_spec(HOSTS, ("node03",))
    run = build_run_dir(tmp / "results", spec)
    plant(run)
    db = tmp / "history.sqlite"
    report = collbench("report", str(run), "--db", str(db), "--new-db")
    assert report.returncode in (0, 1, 3), report.stderr
    archive = tmp / "bundle.tar.gz"
    bundle = collbench("bundle", str(run), "--db", str(db), "--bundle-out", str(archive))
    assert bundle.returncode == report.returncode, bundle.stderr
    with tarfile.open(archive) as tar:
        tar.extractall(tmp / "unpacked", filter="data")
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    found = {f"bundle:{name}": data for name, data in members.items()}
    found |= {f"unpacked:{p}": p.read_bytes() for p in (tmp / "unpacked").rglob("*") if p.is_file()}
    found |= {f"report:{p.name}": p.read_bytes() for p in (run / "report").rglob("*") if p.is_file()}
    with sqlite3.connect(db) as connection:
        rows = [
            r
            for t in ("runs", "hosts", "verdicts", "facts")
            for r in connection.execute(f"SELECT * FROM {t}")
        ]
    found["history rows"] = repr(rows).encode()
    found["history file"] = db.read_bytes()
    for name, done in (("report", report), ("bundle", bundle)):
        found[f"{name} stdout"], found[f"{name} stderr"] = done.stdout.encode(), done.stderr.encode()
    return found


def test_every_kind_of_file_is_in_the_bundle(outputs: dict[str, bytes]) -> None:
    top = f"bundle:collbench-acceptance-{RUN_ID}"
    for rel in (
        "manifest.json",
        "hosts/node01/intra/all_reduce.log",
        "hosts/node02/intra/all_reduce.log",
        "hosts/node01/intra/all_reduce.json",
        "hosts/node02/intra/launcher-node02.out",
        "hosts/node01/intra/gpu-link-all_reduce.csv",
        "hosts/node03/topo.txt",
        "hosts/node04/facts.json",
        "inter/pairs/plan.json",
    ):
        assert f"{top}/run/{rel}" in outputs, rel
    assert any("/round" in name for name in outputs if name.startswith(f"{top}/run/inter/pairs/"))
    for report_file in ("results.json", "index.html", "report.md", "junit.xml", "hosts.csv", "metrics.prom"):
        assert f"report:{report_file}" in outputs and f"{top}/report/{report_file}" in outputs


def test_no_planted_secret_reaches_any_output(outputs: dict[str, bytes]) -> None:
    assert len(PLANTED) > 1000
    leaks = [
        f"{PLANTED[secret]} -> {where}"
        for where, data in outputs.items()
        for secret in PLANTED
        if secret.encode() in data
    ]
    assert not leaks, "\n".join(leaks[:20]) + (f"\n... {len(leaks)} in all" if len(leaks) > 20 else "")


def test_the_names_stay_and_the_evidence_is_still_there(outputs: dict[str, bytes]) -> None:
    log = outputs[f"bundle:collbench-acceptance-{RUN_ID}/run/hosts/node01/intra/all_reduce.log"].decode()
    for name in NAMES:
        assert f"{name}={REDACTED}" in log and f"{name} set by environment to {REDACTED}" in log
    assert "<private key removed>" in log and "# Avg bus bandwidth" in log
    bundle_info = json.loads(outputs[f"bundle:collbench-acceptance-{RUN_ID}/bundle.json"])
    notes = "\n".join(bundle_info["redactions"])
    assert "private key block(s) removed" in notes and "`env` removed" in notes and "DATABASE_URL" in notes
    results = json.loads(outputs["report:results.json"])
    assert results["plan"] and results["summary"]["failed"] >= 1


@pytest.mark.parametrize("name", PREFIX_ONLY)
def test_names_only_a_prefix_rule_catches_are_secret(name: str) -> None:
    """AWS_*, AZURE_* and DATABASE_URL hold credentials whatever the rest of the name says."""
    assert is_secret_name(name)
    assert redact_text(f"{name}=abc123 PATH=/bin") == f"{name}={REDACTED} PATH=/bin"


def test_the_history_redacts_parameters_whatever_its_caller_did(tmp_path: Path) -> None:
    """history/writer.py redacts with redact.redact_value even when the run it is given was not."""
    loaded = load_run_dir(build_run_dir(tmp_path / "results", RunSpec(hosts=["node1", "node2"])))
    raw = {
        "extra": {"AZURE_CLIENT_ID": "sekrit-az-1"},
        "launch_env": "DATABASE_URL=postgres://u:sekrit-db-2@h/db",
    }
    report = judge(replace(loaded, parameters={**loaded.parameters, **raw}))
    db = tmp_path / "history.sqlite"
    with history.open_store(str(db), create=True) as store:
        history.ingest(store, report)
    with sqlite3.connect(db) as connection:
        (stored,) = connection.execute("SELECT parameters FROM runs").fetchone()
    assert "sekrit" not in stored
    assert json.loads(stored)["extra"] == {"AZURE_CLIENT_ID": REDACTED}
    assert json.loads(stored)["launch_env"] == f"DATABASE_URL={REDACTED}"
