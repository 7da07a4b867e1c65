"""Secrets planted in every kind of file a run directory holds reach no output of `collbench report`.

The run directory is built from real corpus logs (tests/rundir_factory.py): a healthy log, a real NCCL
failure, a real hang (the log of a launch that timed out), each with environment lines added the way
launchers and shells print them; an nccl-tests `-J` file beside a log (its `env` block is the whole
process environment); facts.json; what the launcher printed (launcher-*.out); and the manifest's
reasons. Every file the report writes, and what it prints, is searched for every secret value.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.collbench_cli import collbench
from tests.parsers.test_parse_nccl_json import V2_18, read_text_log, write_nccl_tests_json
from tests.rundir_factory import HANG, NCCL_FAILURE, RunSpec, build_run_dir

# One value per place, so that a leak names where it came from.
SECRETS = {
    "ok_log": "hf_okLogToken0a1b2c3d",
    "ok_log_quoted": "sekrit-ok-quoted-91c2",
    "failed_log": "sekrit-failed-aws-77e1",
    "failed_error": "sekrit-failed-error-5f0a",
    "timeout_log": "hf_timeoutToken9z8y7x",
    "timeout_quoted": "sekrit-timeout-quoted-44d0",
    "timeout_json_env": "sekrit-timeout-jsonenv-c3b2",
    "timeout_nccl_setting": "sekrit-timeout-setting-1e9f",
    "pair_timeout": "sekrit-pair-timeout-8a8a",
    "all_timeout": "sekrit-all-timeout-b7b7",
    "json_env": "sekrit-json-env-2d4e",
    "json_args": "sekrit-json-args-6c6c",
    "json_errors": "sekrit-json-errors-0f0f",
    "json_timeout_env": "sekrit-json-timeout-env-3a3a",
    "facts_value": "sekrit-facts-value-5b5b",
    "facts_unknown_key": "sekrit-facts-unknown-9d9d",
    "launcher_out": "sekrit-launcher-out-1c1c",
    "host_reason": "sekrit-host-reason-e4e4",
    "launch_reason": "sekrit-launch-reason-f5f5",
}
HOSTS = ["node1", "node2", "node3", "node4", "node5"]


def _env_lines(key: str, quoted: str | None = None) -> str:
    """Environment as a shell, mpirun, Python and NCCL print it."""
    lines = [
        f"HF_TOKEN={SECRETS[key]}",
        f"+ mpirun -x AWS_SECRET_ACCESS_KEY={SECRETS[key]} -x NCCL_DEBUG=INFO all_reduce_perf",
        f"node1:12:12 [0] NCCL INFO MY_PASSWORD set by environment to {SECRETS[key]}",
        f"environ({{'MY_API_KEY': '{SECRETS[key]}', 'HOME': '/root'}})",
    ]
    if quoted:
        lines += [
            f"export MY_PASSWORD='{SECRETS[quoted]}'",
            f'declare -x SERVICE_KEY="{SECRETS[quoted]}"',
            f'"AWS_SECRET_ACCESS_KEY": "{SECRETS[quoted]}",',
        ]
    return "\n".join(lines) + "\n"


def _nccl_json(env_key: str, with_args_and_errors: bool) -> str:
    document = json.loads(write_nccl_tests_json(read_text_log(V2_18), version=2))
    document["env"] += [
        f"HF_TOKEN={SECRETS[env_key]}",
        f"MY_PASSWORD={SECRETS[env_key]}",
        f"DEPLOY_KEY={SECRETS[env_key]}",
    ]
    if with_args_and_errors:
        document["args"] += ["-x", f"MY_API_KEY={SECRETS['json_args']}"]
        document["errors"] = [f"NCCL failure with HF_TOKEN={SECRETS['json_errors']} in the environment"]
    return json.dumps(document)


def plant(run: Path) -> None:
    intra = {h: run / "hosts" / h / "intra" for h in HOSTS}
    ok = intra["node1"] / "all_reduce.log"
    ok.write_text(_env_lines("ok_log", "ok_log_quoted") + ok.read_text(encoding="utf-8"), encoding="utf-8")
    failure = NCCL_FAILURE.read_text(encoding="utf-8").replace(
        "'unhandled cuda error", f"'unhandled cuda error AWS_SECRET_ACCESS_KEY={SECRETS['failed_error']}"
    )
    (intra["node2"] / "all_reduce.log").write_text(_env_lines("failed_log") + failure, encoding="utf-8")
    hang = HANG.read_text(encoding="utf-8")
    (intra["node3"] / "all_reduce.log").write_text(
        hang
        + _env_lines("timeout_log", "timeout_quoted")
        + f'{{"environment": {{"HF_TOKEN": "{SECRETS["timeout_json_env"]}"}}}}\n'
        + f"NCCL INFO NCCL_IB_PASSWORD set by environment to {SECRETS['timeout_nccl_setting']}\n",
        encoding="utf-8",
    )
    (intra["node1"] / "all_reduce.json").write_text(_nccl_json("json_env", True), encoding="utf-8")
    (intra["node3"] / "all_reduce.json").write_text(_nccl_json("json_timeout_env", False), encoding="utf-8")
    pair = run / "inter" / "pairs" / "node1--node4" / "all_reduce.log"
    pair.write_text(hang + _env_lines("pair_timeout"), encoding="utf-8")
    every = run / "inter" / "all" / "all_reduce.log"
    every.write_text(hang + _env_lines("all_timeout"), encoding="utf-8")
    for launch_dir in (intra["node1"], pair.parent, every.parent):
        (launch_dir / "launcher-node1.out").write_text(_env_lines("launcher_out"), encoding="utf-8")
    facts_path = run / "hosts" / "node4" / "facts.json"
    facts = json.loads(facts_path.read_text(encoding="utf-8"))
    facts["os"]["kernel"] = f"6.1.0 HF_TOKEN={SECRETS['facts_value']}"
    facts["environment"] = {"MY_API_KEY": SECRETS["facts_unknown_key"]}
    facts_path.write_text(json.dumps(facts), encoding="utf-8")
    manifest_path = run / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    manifest["hosts"]["node5"]["status"] = "failed"
    manifest["hosts"]["node5"]["reason"] = f"rc 1: env MY_PASSWORD={SECRETS['host_reason']}"
    for launch in manifest["launches"]:
        if launch["log"] in ("hosts/node3/intra/all_reduce.log",):
            launch["reason"] = f"timed out; HF_TOKEN={SECRETS['launch_reason']}"
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")


@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    timeout = ("timeout", 124)
    spec = RunSpec(
        hosts=HOSTS,
        pairs=[("node1", "node4")],
        all_logs={"all_reduce": HANG},
        launch_status={
            "hosts/node2/intra/all_reduce.log": ("failed", 3),
            "hosts/node3/intra/all_reduce.log": timeout,
            "inter/pairs/node1--node4/all_reduce.log": timeout,
            "inter/all/all_reduce.log": timeout,
        },
    )
    run = build_run_dir(tmp_path_factory.mktemp("secrets"), spec)
    plant(run)
    done = collbench("report", str(run))
    assert done.returncode == 1, done.stderr
    return run / "report", done.stdout + done.stderr


def test_every_output_is_written(reported: tuple[Path, str]) -> None:
    out, _ = reported
    names = {p.name for p in out.iterdir()}
    assert {"results.json", "index.html", "report.md", "junit.xml", "hosts.csv", "metrics.prom"} <= names


@pytest.mark.parametrize("where", sorted(SECRETS))
def test_no_secret_reaches_an_output_or_the_terminal(reported: tuple[Path, str], where: str) -> None:
    out, printed = reported
    secret = SECRETS[where]
    leaks = [p.name for p in sorted(out.rglob("*")) if p.is_file() and secret.encode() in p.read_bytes()]
    assert not leaks, f"the secret planted in {where} reached {leaks}"
    assert secret not in printed, f"the secret planted in {where} was printed"


def test_the_failures_are_still_quoted(reported: tuple[Path, str]) -> None:
    """Redaction takes the values, not the evidence: the timed-out and failed launches are reported
    with their log lines, the secret's name kept."""
    out, _ = reported
    results = (out / "results.json").read_text(encoding="utf-8")
    assert "launch timed out" in results
    assert "unhandled cuda error AWS_SECRET_ACCESS_KEY=<redacted>" in results
    assert "HF_TOKEN=<redacted>" in results
