"""index.html in a real headless Chromium: it renders, its plots decode, the console stays clean."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from matplotlib.image import imread

from collbench_py.cli import main
from tests.rundir_factory import H100_TOPO_12NICS, RunSpec, build_run_dir

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Without these a sandboxed Chromium tries to reach the network (updates, sync, field trials).
OFFLINE = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Added to a copy of the page only: records whether each image decoded.
PROBE = (
    "<script>window.addEventListener('load', () => {"
    "for (const img of document.images) { img.dataset.decoded = img.complete && img.naturalWidth > 0; }"
    "document.body.dataset.probed = document.images.length; });</script>"
)


def chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CHROMIUM or "chromium", *OFFLINE, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (make setup installs Debian's chromium)")
    root = tmp_path_factory.mktemp("browser")
    hosts = [f"node{i}" for i in range(1, 7)]
    slow = {tuple(sorted(("node4", h))): 0.25 for h in hosts if h != "node4"}
    spec = RunSpec(
        hosts=hosts,
        host_scale={"node3": 0.5},
        topo_override={"node5": H100_TOPO_12NICS},
        pairs="all",
        pair_scale=slow,
    )
    run = build_run_dir(root, spec)
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["report", str(run)]) == 1
    return run / "report"


def test_screenshot_shows_the_failed_hosts(report_dir: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    done = chromium(
        [f"--screenshot={shot}", "--window-size=1400,3000", (report_dir / "index.html").as_uri()],
        tmp_path / "profile",
    )
    assert shot.exists(), done.stderr[-2000:]
    assert shot.stat().st_size > 50_000  # text, tables and plots, not a blank page
    pixels = imread(shot)
    height, width = pixels.shape[:2]
    assert (width, height) == (1400, 3000)
    # The red of the failed card and badges is on the first screen.
    top = pixels[:800, :, :3]
    red = (top[..., 0] > 0.7) & (top[..., 1] < 0.25) & (top[..., 2] < 0.25)
    assert red.sum() > 2000
    distinct = {tuple((p * 8).astype(int)) for p in pixels[::20, ::20, :3].reshape(-1, 3)}
    assert len(distinct) > 20


def test_dom_has_the_hosts_and_decoded_plots(report_dir: Path, tmp_path: Path) -> None:
    probed = report_dir / "probe.html"  # next to index.html, so relative links resolve the same
    probed.write_text((report_dir / "index.html").read_text().replace("</body>", PROBE + "</body>"))
    try:
        done = chromium(["--dump-dom", "--virtual-time-budget=5000", probed.as_uri()], tmp_path / "profile")
    finally:
        probed.unlink()
    dom = done.stdout
    assert 'data-probed="' in dom, done.stderr[-2000:]
    rows = {host: verdict for verdict, host in re.findall(r'<tr class="(\w+)" data-host="([\w.-]+)"', dom)}
    assert rows == {
        "node3": "failed",
        "node4": "failed",
        "node5": "warned",
        "node1": "passed",
        "node2": "passed",
        "node6": "passed",
    }
    images = re.findall(r'<img class="plot[^"]*"[^>]*data-decoded="(\w+)"', dom)
    # ranking, the fleet plot, the pair heatmap and one plot per non-passing host
    assert len(images) == 6
    assert set(images) == {"true"}


def test_console_has_no_errors(report_dir: Path, tmp_path: Path) -> None:
    done = chromium(
        ["--enable-logging=stderr", "--v=0", "--dump-dom", (report_dir / "index.html").as_uri()],
        tmp_path / "profile",
    )
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not console, "\n".join(console)
    assert "Failed to load resource" not in done.stderr
    assert "<h1>collbench report" in done.stdout
