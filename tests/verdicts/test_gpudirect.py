"""GPUDirect RDMA read from NCCL's channel lines: the parser's `gdr` / `net_devices`, and the report's
`gpudirect` check on launches across hosts.

The real lines are those of a 2-node p4d run with NCCL_DEBUG=INFO (`via NET/AWS Libfabric/N/GDRDMA`
on every channel). A node without nvidia-peermem prints the same lines without `/GDRDMA`: the
negative cases drop that suffix from the lines one host printed, and nothing else.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from collbench_py.parsers import _nccl_lines, parse_file, parse_text
from collbench_py.rundir.load import load_run_dir
from collbench_py.verdicts import Check, Report, judge
from tests.rundir_factory import RunSpec, build_run_dir

DATA = Path(__file__).parents[1] / "data"
P4D_LOG = (
    DATA
    / "extra"
    / "nccl-tests-issues"
    / "p4d-2node-16rank-mpijob-tag-output-old-error-column-nccl-info-v2.9.9.txt"
)
# A real 2-node log with NCCL INFO lines but no NET channel line (its one channel line is P2P).
NO_NET_LOG = (
    DATA / "corpus" / "nccl-tests" / "sendrecv-nthread2-info-interleaved-destroy-lines-a100-leonardo.txt"
)
PREFIX = "h1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send]"
WORKERS = ("nccl-tests-efa-16-worker-0", "nccl-tests-efa-16-worker-1")
HOSTS = ["node1", "node2", "node3", "node4"]


def without_gdr(text: str, host: str) -> str:
    """The log as printed where `host` has no GPUDirect RDMA: its channel lines lose `/GDRDMA`."""
    return re.sub(rf"^(.*\b{re.escape(host)}:\d+:\d+ .* via NET/.*)/GDRDMA", r"\1", text, flags=re.M)


# --- parser ---------------------------------------------------------------------------------------


def test_real_channel_lines_with_gdrdma_give_gdr_per_host_and_device() -> None:
    run = parse_file(P4D_LOG).runs[0]
    assert run.transports == ("NET/AWS Libfabric", "P2P/IPC")  # unchanged by the new field
    assert run.gdr is True
    devices = {f"NET/AWS Libfabric/{i}": True for i in range(4)}
    assert run.net_devices == dict.fromkeys(WORKERS, devices)


def test_one_host_without_gdrdma_is_named_and_the_run_has_no_gdr() -> None:
    text = without_gdr(P4D_LOG.read_text(), WORKERS[1])
    assert text.count("/GDRDMA") < P4D_LOG.read_text().count("/GDRDMA")
    run = parse_text(text, file="x").runs[0]
    assert run.gdr is False
    assert set(run.net_devices[WORKERS[0]].values()) == {True}
    assert set(run.net_devices[WORKERS[1]].values()) == {False}
    assert run.transports == ("NET/AWS Libfabric", "P2P/IPC")


def test_a_log_without_net_channel_lines_says_nothing_about_gdr() -> None:
    run = parse_file(NO_NET_LOG).runs[0]
    assert "NET/IB : Using" in NO_NET_LOG.read_text()  # the NIC is listed, but no channel used it
    assert run.gdr is None and run.net_devices == {}


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # NCCL's format: `via NET/%s/%d%s%s%s` (name, device, /GDRDMA, (PCI), /Shared), and with a
        # PXN proxy `via NET/%s/%d(%d)...`; NET/Socket never has GPUDirect.
        (f"{PREFIX} via NET/IB/0/GDRDMA", ("NET/IB/0", True)),
        (f"{PREFIX} via NET/IB/0", ("NET/IB/0", False)),
        (f"{PREFIX} via NET/IB/3(7)/GDRDMA/Shared", ("NET/IB/3", True)),
        (f"{PREFIX} via NET/IBext_v8/5", ("NET/IBext_v8/5", False)),
        (f"{PREFIX} via NET/Socket/0", None),
        ("h1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read", None),
    ],
)
def test_net_channel_forms(line: str, expected: tuple[str, bool] | None) -> None:
    assert _nccl_lines.net_channel(line) == expected


# --- verdict --------------------------------------------------------------------------------------


def judged(tmp_path: Path, missing_on: str | None) -> tuple[Report, Path]:
    """Every pair of 4 hosts on the real p4d log (renamed to the pair), `missing_on`'s lines without
    GDRDMA in each of its pairs."""
    spec = RunSpec(hosts=HOSTS, pairs="all", pair_log=P4D_LOG, rename_hosts=True)
    run = build_run_dir(tmp_path, spec)
    if missing_on is not None:
        for log in (run / "inter" / "pairs").glob(f"*{missing_on}*/all_reduce.log"):
            log.write_text(without_gdr(log.read_text(), missing_on))
    return judge(load_run_dir(run)), run


def gpudirect(report: Report) -> list[Check]:
    return [c for c in report.fleet_checks if c.name == "gpudirect"]


def test_a_host_without_gpudirect_is_named_with_its_pairs_and_logs(tmp_path: Path) -> None:
    report, _ = judged(tmp_path, "node3")
    checks = gpudirect(report)
    assert len(checks) == 1, checks
    check = checks[0]
    assert check.status == "warn"
    assert check.reason.startswith("node3 ran over NET/AWS Libfabric without GPUDirect RDMA (no GDRDMA on")
    assert "nvidia-peermem or DMA-BUF missing on node3" in check.reason
    assert "expect about half the bandwidth" in check.reason
    assert "3 launch(es)" in check.reason
    for pair in ("node1--node3", "node2--node3", "node3--node4"):
        assert f"pair {pair} all_reduce (inter/pairs/{pair}/all_reduce.log)" in check.reason
    assert "node1--node2" not in check.reason  # its ends had GPUDirect
    assert check.evidence and all("no /GDRDMA" in line or "via NET/" in line for line in check.evidence)
    # Said once for the fleet: the hosts' own checks and the links are as without it.
    healthy, _ = judged(tmp_path / "healthy", None)
    assert {h: v.checks for h, v in report.hosts.items()} == {h: v.checks for h, v in healthy.hosts.items()}
    assert report.conclusion == healthy.conclusion


def test_every_channel_with_gpudirect_passes(tmp_path: Path) -> None:
    checks = gpudirect(judged(tmp_path, None)[0])
    assert [c.status for c in checks] == ["pass"]
    assert "6 launch(es)" in checks[0].reason


def test_some_devices_of_a_host_without_gdrdma_is_a_note_not_a_missing_module(tmp_path: Path) -> None:
    spec = RunSpec(hosts=HOSTS[:2], pairs="all", pair_log=P4D_LOG, rename_hosts=True)
    run = build_run_dir(tmp_path, spec)
    log = run / "inter" / "pairs" / "node1--node2" / "all_reduce.log"
    # node2's NET device 3 only: a NIC far from its GPU, the others with GPUDirect
    one_device = r"^(.*\bnode2:\d+:\d+ .* via NET/AWS Libfabric/3)/GDRDMA"
    log.write_text(re.sub(one_device, r"\1", log.read_text(), flags=re.M))
    checks = gpudirect(judge(load_run_dir(run)))
    assert [c.status for c in checks] == ["note"], checks
    assert checks[0].reason.startswith("node2 ran NET/AWS Libfabric/3 without GPUDirect RDMA while")


def test_no_net_channel_lines_nothing_is_said(tmp_path: Path) -> None:
    spec = RunSpec(hosts=HOSTS[:2], pairs="all", pair_log=NO_NET_LOG, rename_hosts=True)
    assert gpudirect(judge(load_run_dir(build_run_dir(tmp_path, spec)))) == []


def test_an_all_hosts_launch_without_gpudirect_is_named_too(tmp_path: Path) -> None:
    source = tmp_path / "all_reduce.log"
    source.write_text(without_gdr(P4D_LOG.read_text(), WORKERS[0]))
    spec = RunSpec(hosts=HOSTS[:2], all_logs={"all_reduce": source})
    checks = gpudirect(judge(load_run_dir(build_run_dir(tmp_path / "run", spec))))
    assert [c.status for c in checks] == ["warn"], checks
    assert checks[0].reason.startswith(f"{WORKERS[0]} ran over NET/AWS Libfabric without GPUDirect RDMA")
    assert "all-hosts all_reduce (inter/all/all_reduce.log)" in checks[0].reason
