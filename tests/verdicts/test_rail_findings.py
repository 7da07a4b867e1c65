"""Rail findings as verdicts: a bad NIC fails its host naming the port, never "bad node", and its
partners pass; a bad rail fails the run and no host; a healthy run with rail checks names nothing.

Run directories: real nccl-tests pair logs and a real ib_write_bw figure (tests/rail_factory.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from collbench_py.exitcodes import ExitCode
from collbench_py.rundir.load import load_run_dir
from collbench_py.verdicts import Report, judge
from collbench_py.verdicts.rail_findings import rail_plan, read_rail_plan
from tests.rail_factory import HOSTS, bad_nic_run, bad_rail_run, healthy_gbits, healthy_run


def _judged(path: Path) -> Report:
    return judge(load_run_dir(path))


@pytest.fixture(scope="module")
def nic(tmp_path_factory: pytest.TempPathFactory) -> Report:
    return _judged(bad_nic_run(tmp_path_factory.mktemp("nic")))


@pytest.fixture(scope="module")
def leaf(tmp_path_factory: pytest.TempPathFactory) -> Report:
    return _judged(bad_rail_run(tmp_path_factory.mktemp("leaf")))


def _check(report: Report, host: str, name: str):
    return next(c for c in report.hosts[host].checks if c.name == name)


def test_bad_nic_fails_its_host_naming_the_port_not_the_node(nic: Report) -> None:
    failed = [h for h, v in nic.hosts.items() if v.verdict == "failed"]
    assert failed == ["node3"]
    rails = _check(nic, "node3", "pairs/rails")
    assert rails.status == "fail"
    assert rails.reason.startswith("NIC mlx5_2 of rail 2 (GPU 2)")
    assert "cable or transceiver" in rails.reason and "switch port on the leaf of rail 2" in rails.reason
    assert any("rail 2" in w and "(slow)" in w for w in rails.evidence)
    # Its slow pairs are the NIC's: no "bad node" anywhere, no bad link, nothing unresolved.
    assert nic.conclusion.counts == {"bad node": 0, "bad link": 0, "unresolved": 0}
    for verdict in nic.hosts.values():
        assert not any("bad node" in c.reason for c in verdict.checks), verdict.host
    pairs = _check(nic, "node3", "pairs/all_reduce")
    assert pairs.status == "note" and "its own NIC mlx5_2 of rail 2" in pairs.reason
    assert {p.cause for p in nic.pairs if "node3" in p.hosts} == {"nic node3:rail2"}
    assert nic.exit_code(strict=False) == ExitCode.FAILED


def test_bad_nic_partners_pass(nic: Report) -> None:
    for partner in ("node1", "node4", "node5"):
        assert nic.hosts[partner].verdict == "passed", partner
        assert _check(nic, partner, "pairs/rails").status == "pass"
    assert "node3's NIC mlx5_2 of rail 2, not this host's" in _check(nic, "node1", "pairs/all_reduce").reason


def test_bad_rail_fails_the_run_and_no_host(leaf: Report) -> None:
    assert all(v.verdict == "passed" for v in leaf.hosts.values())
    fleet = [c for c in leaf.fleet_checks if c.name == "pairs/rails/rail1"]
    assert len(fleet) == 1 and fleet[0].status == "fail"
    assert "rail 1's leaf switch" in fleet[0].reason and "no host and no NIC blamed" in fleet[0].reason
    assert not any("NIC mlx5" in c.reason for v in leaf.hosts.values() for c in v.checks)
    assert leaf.exit_code(strict=False) == ExitCode.FAILED


def test_healthy_rails_name_nothing(tmp_path: Path) -> None:
    report = _judged(healthy_run(tmp_path))
    assert report.rails is not None and not report.rails.findings
    assert all(m.status == "ok" for m in report.rails.measurements)
    assert not [c for c in report.fleet_checks if c.name.startswith("pairs/rails") and c.status == "fail"]
    assert report.exit_code(strict=False) == ExitCode.OK


def test_rail_measurement_below_the_drop_is_slow() -> None:
    """The rail rule: below (1 - rail_min_drop) x the night's reference is slow; at 91 % it passes."""
    base = healthy_gbits()
    plan = {
        "rail_min_drop": 0.1,
        "rounds": [
            {
                "number": 1,
                "rails": {
                    "a--b": {"0": base, "1": base, "2": base * 0.91, "3": base * 0.89},
                    "c--d": {"0": base, "1": base, "2": base, "3": None},
                },
            }
        ],
        "decisions": [],
    }
    found = {(m.pair, m.rail): m.status for m in rail_plan(plan).measurements}
    assert found[(("a", "b"), 2)] == "ok"
    assert found[(("a", "b"), 3)] == "slow"
    assert found[(("c", "d"), 3)] == "failed"


def test_a_plan_without_rails_has_no_rail_data(tmp_path: Path) -> None:
    assert read_rail_plan(tmp_path) is None
    assert (
        rail_plan({"schema": 1, "rounds": [{"number": 1, "busbw": {}}], "decisions": []}).measurements == ()
    )


def test_a_damaged_rail_map_is_a_warning_not_a_traceback(tmp_path: Path) -> None:
    run = healthy_run(tmp_path)
    (run / "inter/pairs/rails.json").write_text("{not json", encoding="utf-8")
    report = _judged(run)
    warned = [c for c in report.fleet_checks if c.name == "pairs/rails"]
    assert warned and warned[0].status == "warn" and "rails.json" in warned[0].reason
    assert set(report.hosts) == set(HOSTS)


def test_an_unresolved_rail_clears_nothing() -> None:
    """A slow rail the plan could not pin: its host is warned (not cleared); one with no host fails
    the run as a fleet check."""
    from collbench_py.verdicts.rail_findings import fleet_checks, host_checks  # noqa: PLC0415

    base = healthy_gbits()
    plan = {
        "rounds": [{"number": 3, "rails": {"node1--node3": {"0": base, "1": base * 0.5}}}],
        "decisions": [
            {
                "kind": "unresolved",
                "subject": "node3:rail1",
                "host": "node3",
                "rail": 1,
                "hca": None,
                "pairs": [],
                "witnesses": [],
                "reason": "slow with one partner only",
            },
            {
                "kind": "unresolved",
                "subject": "rail0",
                "host": None,
                "rail": 0,
                "hca": None,
                "pairs": [],
                "witnesses": [],
                "reason": "slow in two pairs only",
            },
        ],
    }
    rails = rail_plan(plan)
    checks = host_checks(rails, {"node1", "node3"})
    assert checks["node3"][0].status == "warn" and "not cleared" in checks["node3"][0].reason
    assert [c.status for c in fleet_checks(rails) if c.name == "pairs/rails/rail0"] == ["fail"]


def test_rail_decisions_in_the_plan_record_are_not_pair_findings(tmp_path: Path) -> None:
    """Once plan.json's reader carries the rail decisions too, they stay the rails': no "bad node"
    or "bad link" finding is made of a "bad nic" or "bad rail" decision."""
    from dataclasses import replace  # noqa: PLC0415

    from collbench_py.rundir.planfile import PlanDecision, PlanRecord  # noqa: PLC0415

    run = load_run_dir(bad_nic_run(tmp_path))
    pairs = (("node3", "node4"), ("node1", "node3"))
    record = PlanRecord(
        schedule="adaptive",
        collective="all_reduce",
        size_bytes=None,
        k=3,
        localisation_rounds=3,
        seed="test",
        hosts=tuple(HOSTS),
        groups={},
        rounds=(),
        decisions=(
            PlanDecision("bad nic", "node3:rail2", tuple(sorted(p) for p in pairs), (), "node3 NIC mlx5_2"),  # type: ignore[misc]
            PlanDecision("bad rail", "rail1", (), (), "rail 1 slow"),
        ),
        log=(),
        finished=True,
    )
    report = judge(replace(run, plan=record))
    assert report.conclusion.findings == ()
    assert [h for h, v in report.hosts.items() if v.verdict == "failed"] == ["node3"]


def test_a_slow_leaf_that_slows_every_pair_fails_no_host(tmp_path: Path) -> None:
    """Every nccl pair below the fabric's bar (the leaf drags them all): the fabric check fails, and
    no host is failed for it: the bad rail explains it."""
    report = _judged(bad_rail_run(tmp_path, nccl_scale=0.5))
    fabric = [c for c in report.fleet_checks if c.name == "pairs/all_reduce"]
    assert fabric and fabric[0].status == "fail"
    assert all(v.verdict == "passed" for v in report.hosts.values())
    note = _check(report, "node1", "pairs/all_reduce")
    assert note.status == "note" and "rail 1's leaf switch" in note.reason
    assert report.exit_code(strict=False) == ExitCode.FAILED
