"""History per component: each GPU, GPU pair and HCA of a node judged against its own past.

The node checks sections are built in results.json's shape from real captures: the 8x H100
nvbandwidth run (device to device read/write, host to device, device to host) and a ConnectX-7
ib_write_bw run for the HCA loopback.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from collbench_py import history
from collbench_py.history import HistoryError, HistoryOptions, open_store
from collbench_py.history import store as store_module
from collbench_py.history.node_parts import finding_component, measurements_of, pair_order
from collbench_py.history.records import records_of
from collbench_py.history.store import SCHEMA_VERSION
from collbench_py.parsers import nvbandwidth, perftest
from collbench_py.verdicts import Report
from tests.history.test_compare import collbench
from tests.history.test_history import HOSTS, judged, make_run
from tests.rundir_factory import RunSpec

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO.parent / "shared" / "corpus"
NVBANDWIDTH = CORPUS / "nvbandwidth" / "hgx-h100-8gpu-v0.10.0-five-runs-hash-separators-latency-sm.txt"
PERFTEST = CORPUS / "perftest" / "dgx-spark-cx7-write-bw-4qp-rdma-cm-and-write-lat.txt"
OLD_DB = REPO / "tests" / "data" / "gpu-captures" / "history.sqlite"
HCAS = ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
PAIR_METRICS = {
    "device_to_device_memcpy_read_ce": "d2d_read_ce",
    "device_to_device_memcpy_write_ce": "d2d_write_ce",
}
GPU_METRICS = {"host_to_device_memcpy_ce": "h2d_ce", "device_to_host_memcpy_ce": "d2h_ce"}


@pytest.fixture(autouse=True)
def _no_database_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLLBENCH_DB", raising=False)


def _corpus() -> tuple[dict, float]:
    if not NVBANDWIDTH.exists() or not PERFTEST.exists():
        pytest.skip("the shared corpus is not next to this checkout")
    matrices = {m.name: m for m in nvbandwidth.parse(NVBANDWIDTH.read_text(), NVBANDWIDTH.name).matrices}
    run = perftest.parse(PERFTEST.read_text(), PERFTEST.name).records[0]
    return matrices, run.rows[0].bw_average


def section(
    hosts: list[str],
    scale: dict[tuple[str, str, str], float] | None = None,
    findings: list[dict] = (),
    jitter: float = 1.0,
) -> dict:
    """A results.json `node_checks` section: every host measured as the real capture, each value
    times `jitter`, and (host, component, metric) times its `scale` (metric "*": every metric)."""
    matrices, loopback = _corpus()
    scale = scale or {}
    measured = []

    def add(host: str, kind: str, component: str, metric: str, *, value: float, unit: str) -> None:
        factor = scale.get((host, component, metric), scale.get((host, component, "*"), 1.0))
        measured.append(
            {
                "host": host,
                "kind": kind,
                "id": component,
                "metric": metric,
                "value": round(value * factor * jitter, 2),
                "unit": unit,
            }
        )

    for host in hosts:
        for name, metric in PAIR_METRICS.items():
            matrix = matrices[name]
            for i, row in enumerate(matrix.values):
                for j, value in enumerate(row):
                    if value is None:
                        continue
                    # Row->column in the pair's own order, column->row as the reverse direction.
                    pair = f"gpu{min(i, j)}--gpu{max(i, j)}"
                    directed = metric if i < j else f"{metric}_rev"
                    add(host, "gpu_pair", pair, directed, value=value, unit="GB/s")
        for name, metric in GPU_METRICS.items():
            for j, value in enumerate(matrices[name].values[0]):
                add(host, "gpu", f"gpu{j}", metric, value=value, unit="GB/s")
        for hca in HCAS:
            add(host, "hca", hca, "loopback", value=loopback, unit="Gb/s")
        add(host, "nvlink", "gpu1:link7", "crc_growth", value=0, unit="count")
        latency = matrices["device_to_device_latency_sm"]
        add(host, "gpu_pair", "gpu0--gpu1", "d2d_latency_sm", value=latency.values[0][1], unit=latency.unit)
    return {"hosts": {}, "measurements": measured, "findings": list(findings)}


def nights(results: Path, sections: list[dict], options: HistoryOptions | None = None) -> list[Report]:
    return [
        history.record(
            judged(make_run(results, night, RunSpec(hosts=HOSTS))), options=options, node_checks=part
        )
        for night, part in enumerate(sections, start=1)
    ]


def component_checks(report: Report, host: str) -> dict[str, object]:
    return {c.name: c for c in report.hosts[host].checks if c.name.startswith("history/component")}


def flagged(report: Report) -> dict[tuple[str, str], str]:
    return {
        (host, c.name): c.status
        for host, verdict in report.hosts.items()
        for c in verdict.checks
        if c.name.startswith("history/component/") and c.status != "pass"
    }


def steady(count: int) -> list[dict]:
    # Night to night the numbers move by a few tenths of a percent, as repeated captures do.
    return [section(HOSTS, jitter=1.0 + 0.002 * (night % 3)) for night in range(count)]


def test_one_gpu_pair_that_drops_is_the_one_finding(tmp_path: Path) -> None:
    slow = section(HOSTS, scale={("node2", "gpu3--gpu5", "d2d_read_ce"): 0.75})
    *_, third = nights(tmp_path / "results", [*steady(2), slow])
    assert flagged(third) == {("node2", "history/component/gpu_pair/gpu3--gpu5/d2d_read_ce"): "fail"}
    check = component_checks(third, "node2")["history/component/gpu_pair/gpu3--gpu5/d2d_read_ce"]
    assert check.reason.startswith(
        "node2 gpu pair gpu3--gpu5 d2d_read_ce is 25% below its baseline median (2 runs)"
    )
    assert "open a ticket for the NVLink" in check.reason
    assert third.hosts["node2"].verdict == "failed"
    # Every other host: one line for its components, all within their history.
    for host in ("node1", "node3", "node4"):
        summary = component_checks(third, host)["history/component"]
        assert summary.status == "pass"
        # 112 pair cells, 16 GPU cells, 4 HCA loopbacks; the counter is not judged here
        assert summary.reason.startswith("132 component measurement(s)")


def test_one_earlier_run_is_not_enough_to_judge(tmp_path: Path) -> None:
    slow = section(HOSTS, scale={("node2", "gpu3--gpu5", "*"): 0.5})
    _, second = nights(tmp_path / "results", [section(HOSTS), slow])
    assert not any(component_checks(second, host) for host in HOSTS)


def test_steady_nights_find_nothing(tmp_path: Path) -> None:
    reports = nights(tmp_path / "results", steady(4))
    assert not component_checks(reports[0], "node1")  # nothing to compare with yet
    for report in reports[1:]:
        assert flagged(report) == {}
    assert {h: v.verdict for h, v in reports[-1].hosts.items()} == dict.fromkeys(HOSTS, "passed")
    assert "(3 runs)" not in component_checks(reports[-1], "node1")["history/component"].reason


def test_a_gpu_a_hca_and_the_warning_band(tmp_path: Path) -> None:
    third = section(
        HOSTS,
        scale={
            ("node1", "gpu6", "h2d_ce"): 0.93,  # 7 % down: warn, not fail
            ("node3", "mlx5_2", "loopback"): 0.6,
        },
    )
    *_, report = nights(tmp_path / "results", [*steady(2), third])
    assert flagged(report) == {
        ("node1", "history/component/gpu/gpu6/h2d_ce"): "warn",
        ("node3", "history/component/hca/mlx5_2/loopback"): "fail",
    }
    hca = component_checks(report, "node3")["history/component/hca/mlx5_2/loopback"]
    assert "Gb/s" in hca.reason and "swap" in hca.reason


def test_a_two_run_baseline_with_a_wide_spread_still_fails_a_collapse(tmp_path: Path) -> None:
    # 100 then 60: the MAD is so wide no z-score reaches -5; under half of the lowest run still fails.
    wide = section(HOSTS, scale={("node4", "mlx5_1", "loopback"): 0.6})
    dead = section(HOSTS, scale={("node4", "mlx5_1", "loopback"): 0.2})
    *_, report = nights(tmp_path / "results", [section(HOSTS), wide, dead])
    check = component_checks(report, "node4")["history/component/hca/mlx5_1/loopback"]
    assert check.status == "fail"
    assert "under half of its lowest healthy run" in check.reason


def test_the_report_options_and_the_profile_widening_apply(tmp_path: Path) -> None:
    slow = section(HOSTS, scale={("node2", "gpu3--gpu5", "d2d_read_ce"): 0.75})
    wide = HistoryOptions(min_drop=0.20, fail_drop=0.30)  # as a profile's `history:` section widens them
    *_, third = nights(tmp_path / "results", [*steady(2), slow], options=wide)
    assert flagged(third) == {("node2", "history/component/gpu_pair/gpu3--gpu5/d2d_read_ce"): "warn"}


@pytest.mark.parametrize(("runs", "expected"), [(2, "fail"), (10, "pass")])
def test_the_rolling_baseline_is_the_last_n_healthy_runs(tmp_path: Path, runs: int, expected: str) -> None:
    # Low for two nights (the pair was fixed after), normal for two, low again: the last two
    # runs say it fell back; all four are too spread to call it.
    low = section(HOSTS, scale={("node2", "gpu3--gpu5", "d2d_read_ce"): 0.75})
    parts = [low, low, section(HOSTS), section(HOSTS, jitter=1.002), low]
    *_, fifth = nights(tmp_path / "results", parts, options=HistoryOptions(runs=runs))
    name = "history/component/gpu_pair/gpu3--gpu5/d2d_read_ce"
    status = flagged(fifth).get(("node2", name), "pass")
    assert status == expected
    if expected == "pass":
        assert fifth.hosts["node2"].verdict == "passed"


def test_counters_and_latencies_are_stored_but_not_judged_here(tmp_path: Path) -> None:
    grown = section(HOSTS)
    for m in grown["measurements"]:
        if m["metric"] == "crc_growth" and m["host"] == "node1":
            m["value"] = 12  # the run's own nvlink check fails any growth; history adds nothing
        if m["metric"] == "d2d_latency_sm" and m["host"] == "node2":
            m["value"] *= 0.5  # latency halved is better, not a 50 % drop
    earlier = steady(2)
    for part in earlier:
        for m in part["measurements"]:
            if m["metric"] == "crc_growth" and m["host"] == "node1":
                m["value"] = 40
    reports = nights(tmp_path / "results", [*earlier, grown])
    assert flagged(reports[-1]) == {}
    with sqlite3.connect(tmp_path / "results" / "history.sqlite") as connection:
        values = connection.execute(
            "SELECT value FROM component_measurements WHERE host = 'node1' AND metric = 'crc_growth' "
            "ORDER BY run_id"
        ).fetchall()
    assert values == [(40.0,), (40.0,), (12.0,)]


def test_a_regressed_or_found_component_never_becomes_its_own_baseline(tmp_path: Path) -> None:
    slow = {("node2", "gpu3--gpu5", "d2d_read_ce"): 0.75}
    # Night 3: the pair drops. Night 4: still low, and the run's own verdicts name GPU 4 of node1
    # (the verdicts' id "4": its pairs stay out of the baselines too).
    bad_gpu = {"host": "node1", "kind": "gpu", "id": "4", "severity": "fail"}
    sections = [*steady(2), section(HOSTS, scale=slow), section(HOSTS, scale=slow, findings=[bad_gpu])]
    *_, fourth = nights(tmp_path / "results", sections)
    assert flagged(fourth)[("node2", "history/component/gpu_pair/gpu3--gpu5/d2d_read_ce")] == "fail"
    with sqlite3.connect(tmp_path / "results" / "history.sqlite") as connection:
        unhealthy = connection.execute(
            "SELECT r.started_at, c.host, c.component, c.metric FROM component_measurements c "
            "JOIN runs r ON r.run_id = c.run_id WHERE c.healthy = 0 ORDER BY 1, 2, 3, 4"
        ).fetchall()
    node1_gpu4 = {(c, m) for s, h, c, m in unhealthy if h == "node1" and s.startswith("2026-11-04")}
    assert ("gpu4", "h2d_ce") in node1_gpu4
    assert ("gpu3--gpu4", "d2d_read_ce") in node1_gpu4 and ("gpu4--gpu7", "d2d_write_ce_rev") in node1_gpu4
    assert ("gpu3--gpu5", "d2d_read_ce") not in node1_gpu4
    node2 = {(s[:10], c, m) for s, h, c, m in unhealthy if h == "node2"}
    assert node2 == {
        ("2026-11-03", "gpu3--gpu5", "d2d_read_ce"),
        ("2026-11-04", "gpu3--gpu5", "d2d_read_ce"),
    }
    assert len(unhealthy) == len(node2) + len(node1_gpu4) == 2 + 2 + 2 * 7 * 2


def test_finding_ids_are_read_in_the_sections_naming() -> None:
    assert finding_component("gpu", "3") == "gpu3"
    assert finding_component("nvlink", "5--3") == "gpu3--gpu5"
    assert finding_component("nvlink", "3/link7") == "gpu3:link7"
    assert finding_component("nvlink", "gpu3:link7") == "gpu3:link7"
    assert finding_component("port", "mlx5_2/1") == "mlx5_2:1"
    assert finding_component("hca", "mlx5_12") == "mlx5_12"
    assert pair_order("gpu10--gpu9") == "gpu9--gpu10"


def test_malformed_entries_are_left_out_not_raised() -> None:
    part = {
        "measurements": [
            {"host": "node1", "kind": "gpu", "id": "gpu0", "metric": "h2d_ce", "value": 55.3, "unit": "GB/s"},
            {"host": "node1", "kind": "gpu", "id": "gpu1", "metric": "h2d_ce", "value": True, "unit": "GB/s"},
            {"host": "node1", "kind": "gpu", "id": "", "metric": "h2d_ce", "value": 1.0},
            {"host": None, "kind": "gpu", "id": "gpu2", "metric": "h2d_ce", "value": 1.0},
            {"host": "node1", "kind": "gpu", "id": "gpu3", "metric": "h2d_ce", "value": float("nan")},
        ]
    }
    assert [(m.component, m.value) for m in measurements_of(part)] == [
        ("gpu0", 55.3),
        ("gpu1", None),
        ("gpu3", None),
    ]


def test_a_run_without_components_hashes_as_before(tmp_path: Path) -> None:
    report = judged(make_run(tmp_path / "results", 1, RunSpec(hosts=HOSTS)))
    plain = records_of(report, {"measurements": []})
    # The digest a run got before components were kept (records.py's formula, in one piece).
    before = json.dumps(
        [plain.run[:10], plain.hosts, list(plain.measurements), plain.verdicts, plain.facts], default=str
    )
    earlier = hashlib.sha256(before.encode()).hexdigest()
    assert plain.earlier_digest() == records_of(report).earlier_digest() == earlier  # type: ignore[misc]
    assert plain.digest == records_of(report).digest
    with_parts = records_of(report, section(HOSTS))
    assert records_of(report).digest != with_parts.digest
    # A run stored with its parts before DIGEST_FORM: the earlier digest, its parts hashed onto it.
    parts = json.dumps(with_parts.components, default=str)
    assert with_parts.earlier_digest() == hashlib.sha256(f"{earlier}{parts}".encode()).hexdigest()  # type: ignore[misc]
    # Same run, same section: stored once, the second ingest changes nothing.
    db = tmp_path / "h.sqlite"
    history.record(report, str(db), node_checks=section(HOSTS))
    with open_store(db) as store:
        assert history.ingest(store, report, section(HOSTS)).outcome == "unchanged"
        assert history.ingest(store, report, section(HOSTS, jitter=0.99)).outcome == "replaced"
        rows = store.query("SELECT COUNT(*), COUNT(DISTINCT run_id) FROM component_measurements")
    assert rows == [(4 * (112 + 16 + 4 + 1 + 1), 1)]


# ---- the database written before components were kept ------------------------------------------------


def test_a_database_from_before_opens_and_upgrades_in_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "history.sqlite"
    shutil.copy(OLD_DB, db)
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT value FROM meta").fetchall() == [("1",)]
        runs_before = connection.execute("SELECT run_id, content_hash FROM runs ORDER BY 1").fetchall()
    # A reader opens it first: `collbench history` on an old host works, and upgrades it.
    with sqlite3.connect(db) as connection:
        old_host = connection.execute("SELECT subject FROM measurements WHERE kind = 'intra'").fetchone()[0]
    code, out, _ = collbench(capsys, "history", old_host, "--db", db)
    assert code == 0, out
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT value FROM meta").fetchall() == [(str(SCHEMA_VERSION),)]
        assert connection.execute("SELECT COUNT(*) FROM component_measurements").fetchone() == (0,)
        assert (
            connection.execute("SELECT run_id, content_hash FROM runs ORDER BY 1").fetchall() == runs_before
        )
    # And a new run with components lands next to the old ones.
    report = judged(make_run(tmp_path / "results", 28, RunSpec(hosts=HOSTS)))
    history.record(report, str(db), node_checks=section(HOSTS))
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT COUNT(*) FROM runs").fetchone() == (len(runs_before) + 1,)
        assert connection.execute("SELECT COUNT(DISTINCT host) FROM component_measurements").fetchone() == (
            4,
        )


def test_an_old_database_that_cannot_be_upgraded_is_still_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "history.sqlite"
    shutil.copy(OLD_DB, db)

    def refused(self: object) -> None:
        raise HistoryError("attempt to write a readonly database")

    monkeypatch.setattr(store_module.Store, "write", refused)
    with sqlite3.connect(db) as connection:
        old_host = connection.execute("SELECT subject FROM measurements WHERE kind = 'intra'").fetchone()[0]
    code, out, _ = collbench(capsys, "history", old_host, "--db", db)
    assert code == 0 and f"{old_host} all_reduce (intra-node)" in out
    code, _, err = collbench(capsys, "history", f"{old_host}:gpu0", "--db", db)
    assert code == 2 and "no component measurements in" in err and "before they were kept" in err
    # A writer cannot go on without the upgrade: one line, not a half-upgraded database.
    with pytest.raises(HistoryError, match="cannot upgrade the history schema"), open_store(db, create=True):
        pass
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT value FROM meta").fetchall() == [("1",)]


@pytest.mark.parametrize("version", ["9", "0", "two"])
def test_a_newer_or_unknown_schema_is_refused_in_one_line(tmp_path: Path, version: str) -> None:
    db = tmp_path / "history.sqlite"
    shutil.copy(OLD_DB, db)
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (version,))
    said = version if version.isdigit() else "none"
    with (
        pytest.raises(HistoryError, match=f"history schema {said}, this collbench reads {SCHEMA_VERSION}"),
        open_store(db),
    ):
        pass


# ---- collbench history HOST:COMPONENT ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def three_stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    results = tmp_path_factory.mktemp("components") / "results"
    slow = section(HOSTS, scale={("node2", "gpu3--gpu5", "*"): 0.75, ("node3", "mlx5_2", "loopback"): 0.5})
    nights(results, [*steady(2), slow])
    return results / "history.sqlite"


def test_history_of_a_gpu_pair(three_stored: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = collbench(capsys, "history", "node2:gpu3--gpu5", "--db", three_stored)
    assert (code, err) == (0, "")
    assert f"node2 gpu pair gpu3--gpu5 d2d_read_ce (GB/s), 3 runs in {three_stored}" in out
    lines = out.split("node2 gpu pair gpu3--gpu5 d2d_read_ce (GB/s)")[1].splitlines()
    assert lines[1].split() == ["run", "started", "GB/s", "vs", "median", "history"]
    last = lines[4].split()
    # The capture's cell [3][5], 75 % of it on the third night, and flagged.
    cell = _corpus()[0]["device_to_device_memcpy_read_ce"].values[3][5]
    assert 390 < cell < 400
    assert last[3] == f"{round(cell * 0.75, 2):.4g}"
    assert last[5:] == ["fail", "(not", "in", "baselines)"]
    assert sorted(
        m for m in ("d2d_read_ce", "d2d_read_ce_rev", "d2d_write_ce", "d2d_write_ce_rev") if f" {m} (" in out
    )
    # The pair named the other way round is the same pair; --metric picks one.
    _, reverse, _ = collbench(
        capsys, "history", "node2:gpu5--gpu3", "--metric", "d2d_read_ce", "--db", three_stored
    )
    assert " d2d_read_ce (GB/s)" in reverse and "d2d_write_ce" not in reverse


def test_history_of_a_gpu_and_of_a_hca_with_a_plot(
    three_stored: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = collbench(capsys, "history", "node2:gpu3", "--db", three_stored)
    assert code == 0
    assert "node2 gpu gpu3 h2d_ce (GB/s), 3 runs" in out and "node2 gpu gpu3 d2h_ce (GB/s)" in out
    plot = tmp_path / "hca.png"
    code, out, _ = collbench(capsys, "history", "node3:mlx5_2", "--db", three_stored, "--plot", plot)
    assert code == 0
    assert "node3 hca mlx5_2 loopback (Gb/s), 3 runs" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The existing forms are unchanged.
    code, out, _ = collbench(capsys, "history", "node2", "--db", three_stored)
    assert code == 0 and "node2 all_reduce (intra-node) busbw" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["node2:gpu9"], "node2 has no component 'gpu9' in "),
        (["node2:gpu3--gpu9"], "node2 has no component 'gpu3--gpu9' in "),
        (["node9:gpu3"], "no component measurements of host 'node9' in "),
        (["node2:gpu3", "--collective", "all_reduce"], "--collective and --size are for a host or a link"),
        (
            ["node2:gpu3", "--metric", "loopback"],
            "node2:gpu3 has no loopback measurements (it has d2h_ce, h2d_ce)",
        ),
        (["node2", "--metric", "h2d_ce"], "--metric is for HOST:COMPONENT"),
    ],
)
def test_unknown_components_are_one_clear_message(
    three_stored: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = collbench(capsys, "history", *argv, "--db", three_stored)
    assert code == 2
    assert out == ""
    assert err.startswith("collbench history: ") and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_stored_host_name_with_colons_is_still_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Run directory names never hold ':'; a section naming its host by an IPv6 address still works.
    report = judged(make_run(tmp_path / "results", 1, RunSpec(hosts=HOSTS)))
    part = section(["fe80::1"])
    history.record(report, str(tmp_path / "h.sqlite"), node_checks=part)
    code, out, err = collbench(capsys, "history", "fe80::1:gpu1:link7", "--db", tmp_path / "h.sqlite")
    assert (code, err) == (0, "")
    assert out.startswith("fe80::1 nvlink gpu1:link7 crc_growth (count), 1 runs")
