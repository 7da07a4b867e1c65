"""The acceptance bundle (`collbench bundle`), built from run directories made of real logs: it verifies
with `sha256sum -c`, its report opens and reproduces the verdict, and no secret gets in."""

from __future__ import annotations

import json
import platform
import re
import shutil
import subprocess
import tarfile
from html.parser import HTMLParser
from importlib import resources
from pathlib import Path

import ansible.release
import pytest

from collbench_py import cli
from collbench_py.rundir.load import load_run_dir
from tests.rundir_factory import RUN_ID, RunSpec, build_run_dir

HOSTS = ["node1", "node2", "node3", "node4"]
TOP = f"collbench-acceptance-{RUN_ID}"


def collbench(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    saved, cli.COMMANDS = cli.COMMANDS, tuple(dict.fromkeys((*cli.COMMANDS, "bundle", "report")))
    try:
        code = cli.main(argv)
    finally:
        cli.COMMANDS = saved
    out, err = capsys.readouterr()
    return code, out, err


def unpack(archive: Path, dest: Path) -> Path:
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")
    (top,) = dest.iterdir()
    return top


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)
        self._in_title = tag == "title"

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data

    def handle_endtag(self, tag: str) -> None:
        self._in_title = False


@pytest.fixture(scope="module")
def degraded_bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, str, Path]:
    """node3 at half the bandwidth of the others, judged against the shipped h100-sxm profile."""
    root = tmp_path_factory.mktemp("acceptance")
    run_dir = build_run_dir(root / "results", RunSpec(hosts=HOSTS, host_scale={"node3": 0.5}, pairs="all"))
    saved, cli.COMMANDS = cli.COMMANDS, tuple(dict.fromkeys((*cli.COMMANDS, "bundle", "report")))
    try:
        code = cli.main(["bundle", str(run_dir), "--profile", "h100-sxm"])
    finally:
        cli.COMMANDS = saved
    archive = run_dir / "acceptance" / f"{TOP}.tar.gz"
    return code, str(archive), unpack(archive, root / "unpacked")


def test_bundle_exit_code_is_the_verdict(degraded_bundle: tuple[int, str, Path]) -> None:
    code, archive, top = degraded_bundle
    assert code == 1 and Path(archive).is_file() and top.name == TOP
    info = json.loads((top / "bundle.json").read_text())
    assert info["verdict"] == "failed" and info["exit_code"] == 1 and info["profile"] == "h100-sxm"
    hosts = {
        h["host"]: h["verdict"] for h in json.loads((top / "report" / "results.json").read_text())["hosts"]
    }
    assert hosts == {"node1": "passed", "node2": "passed", "node3": "failed", "node4": "passed"}


def test_bundle_verifies_with_sha256sum_and_detects_tampering(degraded_bundle, tmp_path: Path) -> None:
    _, _, top = degraded_bundle
    copy = shutil.copytree(top, tmp_path / top.name)
    check = subprocess.run(
        ["sha256sum", "-c", "SHA256SUMS"], cwd=copy, capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    listed = {line.split("  ", 1)[1] for line in (copy / "SHA256SUMS").read_text().splitlines()}
    on_disk = {p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file()} - {"SHA256SUMS"}
    assert listed == on_disk
    log = copy / "run" / "hosts" / "node3" / "intra" / "all_reduce.log"
    log.write_text(log.read_text() + "# Avg bus bandwidth    : 469\n")
    check = subprocess.run(
        ["sha256sum", "-c", "SHA256SUMS"], cwd=copy, capture_output=True, text=True, check=False
    )
    assert check.returncode != 0 and "run/hosts/node3/intra/all_reduce.log: FAILED" in check.stdout


def test_bundle_holds_the_report_evidence_profile_and_versions(degraded_bundle) -> None:
    _, _, top = degraded_bundle
    page = _Tags()
    page.feed((top / "report" / "index.html").read_text())
    page.close()
    assert page.tags[0] == "html" and {"head", "body", "table"} <= set(page.tags) and RUN_ID in page.title
    assert (top / "report" / "report.md").read_text().startswith("#")
    assert (top / "report" / "junit.xml").is_file()
    for host in HOSTS:
        assert (top / "run" / "hosts" / host / "facts.json").is_file()
        assert (top / "run" / "hosts" / host / "topo.txt").is_file()
    assert len(list((top / "run" / "inter" / "pairs").glob("*/all_reduce.log"))) == 6
    shipped = (resources.files("collbench_py") / "profiles" / "h100-sxm.yml").read_text()
    assert (top / "profile.yml").read_text() == shipped
    versions = json.loads((top / "versions.json").read_text())
    assert versions["ansible_core"] == ansible.release.__version__
    assert versions["python"] == platform.python_version()
    assert versions["nccl"] == {"2.26.2": HOSTS}
    assert "README.txt" in {p.name for p in top.iterdir()}


def test_the_bundled_run_reproduces_the_verdict(degraded_bundle, tmp_path: Path, capsys) -> None:
    _, _, top = degraded_bundle
    run = shutil.copytree(top / "run", tmp_path / "run")
    assert load_run_dir(run).run_id == RUN_ID
    code, _, err = collbench(["report", str(run), "--profile", str(top / "profile.yml")], capsys)
    assert code == 1, err


def test_secrets_never_enter_the_bundle(tmp_path: Path, capsys) -> None:
    run_dir = build_run_dir(tmp_path / "results", RunSpec(hosts=HOSTS))
    intra = run_dir / "hosts" / "node1" / "intra"
    nccl_json = {"version": "2.19.6", "env": {"HF_TOKEN": "hf_leak123", "PATH": "/usr/bin"}, "results": []}
    (intra / "all_reduce.json").write_text(json.dumps(nccl_json))
    log = run_dir / "hosts" / "node2" / "intra" / "all_reduce.log"
    log.write_text("+ export WANDB_API_KEY=wandb_leak456\n" + log.read_text())
    (intra / "evil.log").symlink_to("/etc/passwd")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["parameters"]["registry_password"] = "pw_leak789"
    (run_dir / "manifest.json").write_text(json.dumps(manifest))

    report_code, _, _ = collbench(
        ["report", str(run_dir), "--out", str(tmp_path / "report"), "--no-history"], capsys
    )
    code, out, err = collbench(
        ["bundle", str(run_dir), "--bundle-out", str(tmp_path / "b.tar.gz"), "--no-history"], capsys
    )
    # The log that links out of the run is not read, and fails its host: in the report as in the bundle.
    assert code == report_code == 1, err
    assert "redacted before packing" in out
    with tarfile.open(tmp_path / "b.tar.gz") as tar:
        names = tar.getnames()
        blob = b"".join(tar.extractfile(m).read() for m in tar.getmembers() if m.isfile())
    for secret in (b"hf_leak123", b"wandb_leak456", b"pw_leak789", b"root:x:0:0"):
        assert secret not in blob
    assert f"{TOP}/run/hosts/node1/intra/all_reduce.json" in names
    assert not any(n.endswith("evil.log") for n in names)
    top = unpack(tmp_path / "b.tar.gz", tmp_path / "x")
    notes = "\n".join(json.loads((top / "bundle.json").read_text())["redactions"])
    assert "`env` removed" in notes and "WANDB_API_KEY" in notes and "registry_password" in notes
    results = (top / "report" / "results.json").read_text()
    assert "evil.log" in results and "links out of the run directory; not read" in results


def test_an_existing_bundle_is_kept_unless_forced_and_bad_input_is_one_line(tmp_path: Path, capsys) -> None:
    run_dir = build_run_dir(tmp_path / "results", RunSpec(hosts=HOSTS[:3]))
    out = tmp_path / "b.tar.gz"
    out.write_text("an earlier bundle")
    code, _, err = collbench(["bundle", str(run_dir), "--bundle-out", str(out)], capsys)
    assert code == 2 and "exists" in err and out.read_text() == "an earlier bundle"
    assert "--bundle-out elsewhere" in err and "--out " not in err  # the flag the user has
    code, _, err = collbench(["bundle", str(run_dir), "--bundle-out", str(out), "--force"], capsys)
    assert code == 0 and tarfile.is_tarfile(out), err

    code, _, err = collbench(["bundle", str(tmp_path), "--profile", "h100-sxm"], capsys)
    assert code == 2 and "no manifest.json" in err and len(err.strip().splitlines()) == 1
    code, _, err = collbench(["bundle", str(run_dir), "--profile", "no-such-gpu"], capsys)
    assert code == 2 and "no profile named 'no-such-gpu'" in err and "Traceback" not in err


def test_the_reports_links_open_the_bundled_logs(degraded_bundle) -> None:
    """The report in the bundle links to the logs in its run/ copy, not to where the run lay on site."""
    _, archive, top = degraded_bundle
    report = top / "report"
    html, markdown = (report / "index.html").read_text(), (report / "report.md").read_text()
    links = re.findall(r'href="([^"#:]+)"', html) + re.findall(r"\]\(([^)#:]+)\)", markdown)
    assert any(link.startswith("../run/hosts/") for link in links), links[:5]
    for link in links:
        target = (report / link).resolve()
        assert target.is_relative_to(top.resolve()) and target.is_file(), link
    site = str(Path(archive).parent.parent)
    assert site not in html and site not in markdown
