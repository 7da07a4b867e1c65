"""Security: host keys checked by default, secrets never reach an output, files not world-writable.

The cluster tests reuse the fault matrix's pipeline run (tests/cluster/test_faults.py), whose launch
environment and controller environment carry planted secrets; they are looked for in every file.
"""

from __future__ import annotations

import configparser
import json
import re
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from collbench_py import cli
from collbench_py.history import ingest
from collbench_py.history.store import open_store
from collbench_py.redact import REDACTED, is_secret_name, redact_env, redact_text
from collbench_py.rundir.load import load_run_dir
from collbench_py.verdicts import judge
from tests.cluster.benchrun import BenchRun, shared_run
from tests.cluster.conftest import cluster_factory, cluster_support  # noqa: F401 - fixtures
from tests.cluster.test_faults import SECRETS, bad_launches_run
from tests.cluster.vcluster import Cluster
from tests.collbench_cli import collbench
from tests.parsers.test_parse_nccl_json import V2_18, read_text_log, write_nccl_tests_json
from tests.rundir_factory import NCCL_FAILURE, RunSpec, build_run_dir

REPO = Path(__file__).resolve().parents[2]
SHIPPED_CONFIG = [REPO / "ansible.cfg", REPO / "bench.yml", REPO / "Makefile"]
SHIPPED_GLOBS = ["playbooks/**/*", "roles/**/*", "inventory/**/*", "filter_plugins/**/*", "collbench_py/**/*"]


def shipped_files() -> list[Path]:
    files = list(SHIPPED_CONFIG)
    for pattern in SHIPPED_GLOBS:
        files += [p for p in REPO.glob(pattern) if p.is_file() and "__pycache__" not in p.parts]
    return files


def test_ansible_cfg_checks_host_keys() -> None:
    config = configparser.ConfigParser()
    config.read(REPO / "ansible.cfg")
    assert config.getboolean("defaults", "host_key_checking", fallback=True) is True


@pytest.mark.parametrize(
    "pattern",
    [
        r"host_key_checking\s*[=:]\s*(false|no|0)\b",
        r"ANSIBLE_HOST_KEY_CHECKING\s*[=:]\s*\"?(false|no|0)\b",
        r"StrictHostKeyChecking[\s=]+(no|off|accept-new)\b",
        r"UserKnownHostsFile[\s=]+/dev/null",
    ],
)
def test_nothing_shipped_turns_host_key_checking_off(pattern: str) -> None:
    regex = re.compile(pattern, re.IGNORECASE)
    offenders = [
        str(path.relative_to(REPO))
        for path in shipped_files()
        if path.suffix != ".py" and regex.search(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert not offenders


def test_python_ssh_clients_refuse_unknown_host_keys_by_default() -> None:
    """paramiko clients: never AutoAdd or Warning policies; accepting new keys is an opt-in flag."""
    sources = {p: p.read_text(encoding="utf-8") for p in (REPO / "collbench_py").rglob("*.py")}
    assert not [str(p) for p, text in sources.items() if re.search(r"AutoAddPolicy|WarningPolicy", text)]
    for path, text in sources.items():
        for default in re.findall(r"accept_new_host_keys: bool = (\w+)", text):
            assert default == "False", path


# ---------------------------------------------------------------- redaction


@pytest.mark.parametrize(
    "name", ["MY_API_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "HF_TOKEN", "SSH_KEY", "api_key"]
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name", ["PATH", "HOME", "PWD", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "KEYBOARD", "CUDA_VISIBLE_DEVICES"]
)
def test_ordinary_names(name: str) -> None:
    assert not is_secret_name(name)


def test_redact_env_keeps_names_and_ordinary_values() -> None:
    env = {"PATH": "/usr/bin", **SECRETS}
    assert redact_env(env) == {"PATH": "/usr/bin", **dict.fromkeys(SECRETS, REDACTED)}


def test_redact_text_in_env_lines_json_arrays_and_nccl_settings() -> None:
    text = (
        'env: HOME=/root MY_API_TOKEN=sekrit-1 ["AWS_SECRET_ACCESS_KEY=sekrit-2","PATH=/bin"]\n'
        "node1:12:12 [0] NCCL INFO NCCL_IB_HCA set by environment to mlx5_0\n"
        "node1:12:12 [0] NCCL INFO DB_PASSWORD set by environment to sekrit-3"
    )
    redacted = redact_text(text)
    assert "sekrit" not in redacted
    assert "HOME=/root" in redacted
    assert "PATH=/bin" in redacted
    assert "NCCL_IB_HCA set by environment to mlx5_0" in redacted
    assert f"MY_API_TOKEN={REDACTED}" in redacted
    assert redacted.count("\n") == text.count("\n")


def test_redact_text_leaves_benchmark_output_alone() -> None:
    log = V2_18.read_text(encoding="utf-8")
    assert redact_text(log) == log


# ---------------------------------------------------------------- secrets in outputs


def grep_tree(root: Path, needles: list[str]) -> list[str]:
    hits = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            hits += [f"{path.relative_to(root)}: {n}" for n in needles if n.encode() in data]
    return hits


def test_nccl_tests_json_env_never_reaches_report_or_history(tmp_path: Path) -> None:
    run = build_run_dir(tmp_path / "results", RunSpec(hosts=["node1", "node2", "node3"]))
    log = read_text_log(V2_18)
    document = json.loads(write_nccl_tests_json(log, version=2))
    document["env"] += [f"{name}={value}" for name, value in SECRETS.items()]
    (run / "hosts" / "node1" / "intra" / "all_reduce.json").write_text(json.dumps(document), encoding="utf-8")
    done = collbench("report", str(run))
    assert done.returncode in (0, 1), done.stderr
    database = tmp_path / "history.sqlite"
    with open_store(database, create=True) as store:
        ingest(store, judge(load_run_dir(run)))
    needles = list(SECRETS.values())
    assert not grep_tree(run / "report", needles)
    assert not [n for n in needles if n.encode() in database.read_bytes()]
    assert not [n for n in needles if n in done.stdout + done.stderr]


def test_secrets_quoted_from_logs_are_redacted_everywhere(tmp_path: Path) -> None:
    """Log tails, evidence lines, parser errors and a host's unreachable reason are quoted by the report
    and stored in the history: each goes through redaction first."""
    failing = NCCL_FAILURE.read_text(encoding="utf-8").replace(
        "'unhandled cuda error", f"'unhandled cuda error MY_API_TOKEN={SECRETS['MY_API_TOKEN']}"
    )
    failing += (
        f"env: HOME=/root AWS_SECRET_ACCESS_KEY={SECRETS['AWS_SECRET_ACCESS_KEY']} PATH=/bin\n"
        f"node1:12:12 [0] NCCL INFO DB_PASSWORD set by environment to {SECRETS['DB_PASSWORD']}\n"
    )
    run = build_run_dir(
        tmp_path / "results",
        RunSpec(
            hosts=["node1", "node2", "node3", "node4"],
            unreachable={"node4": f"ssh: connect failed; env DB_PASSWORD={SECRETS['DB_PASSWORD']}"},
        ),
    )
    (run / "hosts" / "node1" / "intra" / "all_reduce.log").write_text(failing, encoding="utf-8")
    log2 = run / "hosts" / "node2" / "intra" / "all_reduce.log"
    evidence_line = (
        f"node2:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0 WANDB_API_KEY={SECRETS['MY_API_TOKEN']}"
    )
    log2.write_text(evidence_line + "\n" + log2.read_text(encoding="utf-8"), encoding="utf-8")
    loaded = load_run_dir(run)
    quoted = json.dumps([[log.tail, log.evidence, log.parse_error] for log in loaded.logs])
    assert "WANDB_API_KEY=<redacted>" in quoted  # the evidence line is kept, its secret is not
    assert f"MY_API_TOKEN={REDACTED}" in quoted
    done = collbench("report", str(run))
    assert done.returncode == 1, done.stderr
    results = (run / "report" / "results.json").read_text(encoding="utf-8")
    assert "unhandled cuda error MY_API_TOKEN=<redacted>" in results  # the failure is still quoted
    database = tmp_path / "history.sqlite"
    with open_store(database, create=True) as store:
        ingest(store, judge(loaded))
    needles = list(SECRETS.values())
    assert not [n for n in needles if n in quoted]
    assert not grep_tree(run / "report", needles)
    assert not [n for n in needles if n.encode() in database.read_bytes()]
    assert not [n for n in needles if n in done.stdout + done.stderr]


def test_deeply_nested_manifest_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = build_run_dir(tmp_path, RunSpec(hosts=["node1", "node2"]))
    (run / "manifest.json").write_bytes(b"[" * 100_000 + b"]" * 100_000)
    assert cli.main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert "COLLBENCH_DEBUG" not in err
    assert "manifest.json" in err
    assert len(err.splitlines()) == 1


def test_report_never_writes_through_a_planted_link(tmp_path: Path) -> None:
    """Whoever can write a run directory cannot make `collbench report` (often root, from cron)
    write elsewhere: neither through a planted temporary name nor through a report/ link."""
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n", encoding="utf-8")
    run = build_run_dir(tmp_path / "results", RunSpec(hosts=["node1", "node2", "node3"]))
    (run / "report").mkdir()
    for name in ("index.html", "results.json", "report.md", "junit.xml", "hosts.csv", "metrics.prom"):
        (run / "report" / f".{name}.tmp").symlink_to(victim)
    done = collbench("report", str(run))
    assert done.returncode in (0, 1), done.stderr
    assert victim.read_text(encoding="utf-8") == "untouched\n"
    assert (run / "report" / "results.json").is_file()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(run / "report")
    (run / "report").symlink_to(elsewhere)
    done = collbench("report", str(run))
    assert done.returncode == 2
    assert "links out of the run directory" in done.stderr
    assert not list(elsewhere.iterdir())


def test_the_report_is_as_private_as_its_run_directory(tmp_path: Path) -> None:
    run = build_run_dir(tmp_path / "results", RunSpec(hosts=["node1", "node2", "node3"]))
    for path in [run, *run.rglob("*")]:
        path.chmod(0o700 if path.is_dir() else 0o600)
    done = collbench("report", str(run))
    assert done.returncode in (0, 1), done.stderr
    assert (run / "report").stat().st_mode & 0o777 == 0o700
    modes = {p.name: p.stat().st_mode & 0o777 for p in (run / "report").iterdir()}
    assert set(modes.values()) == {0o600}, modes
    # Elsewhere (--out) too: the files name hosts, addresses and facts. A directory the report makes
    # (and its missing parents) is 0700; one that exists keeps its mode.
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    for out in (shared, tmp_path / "new" / "report"):
        done = collbench("report", str(run), "--out", str(out))
        assert done.returncode in (0, 1), done.stderr
        assert {p.stat().st_mode & 0o777 for p in out.iterdir()} == {0o600}, out
    assert shared.stat().st_mode & 0o777 == 0o755
    for made in (tmp_path / "new", tmp_path / "new" / "report"):
        assert made.stat().st_mode & 0o777 == 0o700, made


@pytest.fixture(scope="module")
def pipeline_run(
    cluster_support: None,  # noqa: F811 - the fixture imported above
    cluster_factory: Callable[..., Cluster],  # noqa: F811 - the fixture imported above
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Cluster, BenchRun]:
    return shared_run(
        "bad launches", lambda: bad_launches_run(cluster_factory, tmp_path_factory.mktemp("bad"))
    )


@pytest.mark.cluster
def test_planted_secrets_reach_no_file_of_a_real_run(pipeline_run: tuple[Cluster, BenchRun]) -> None:
    cluster, run = pipeline_run
    needles = list(SECRETS.values())
    assert not grep_tree(run.run_dir, needles), "a secret was written into the run directory"
    database = run.results_dir.parent / "history.sqlite"
    with open_store(database, create=True) as store:
        ingest(store, judge(load_run_dir(run.run_dir)))
    assert not [n for n in needles if n.encode() in database.read_bytes()]
    # Nor into what the run left on the nodes: its work directory there.
    for host in cluster.hosts:
        assert not grep_tree(cluster.home(host) / "collbench" / "runs", needles), host


@pytest.mark.cluster
def test_nothing_the_run_wrote_is_world_writable(pipeline_run: tuple[Cluster, BenchRun]) -> None:
    cluster, run = pipeline_run
    trees = [run.run_dir] + [cluster.home(host) / "collbench" for host in cluster.hosts]
    writable = [
        str(path)
        for tree in trees
        for path in [tree, *tree.rglob("*")]
        if not path.is_symlink() and path.stat().st_mode & stat.S_IWOTH
    ]
    assert not writable


@pytest.mark.cluster
def test_files_holding_facts_and_logs_are_private(pipeline_run: tuple[Cluster, BenchRun]) -> None:
    cluster, run = pipeline_run
    trees = [run.run_dir] + [cluster.home(host) / "collbench" / "runs" for host in cluster.hosts]
    readable = [
        str(path)
        for tree in trees
        for path in [tree, *tree.rglob("*")]
        if not path.is_symlink() and path.stat().st_mode & 0o007
    ]
    assert not readable


@pytest.mark.cluster
def test_no_ansible_temporary_files_left_on_nodes(pipeline_run: tuple[Cluster, BenchRun]) -> None:
    cluster, _ = pipeline_run
    for host in cluster.hosts:
        tmp = cluster.home(host) / ".ansible" / "tmp"
        left = [p.name for p in tmp.iterdir()] if tmp.is_dir() else []
        assert not left, (host, left)
