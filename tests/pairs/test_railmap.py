"""collbench_py/pairs/railmap.py: the rails of a host from real topo -m captures or from the
inventory, bad settings refused in one sentence, and rails.json written and read back."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from collbench_py.nodechecks.hcas import topology_of
from collbench_py.pairs.railmap import (
    AUTO_SOURCE,
    INVENTORY_SOURCE,
    OFF_SOURCE,
    RAILS_FILE,
    HostRails,
    Rail,
    RailSettingError,
    RailsFileError,
    host_rails,
    rail_settings_problems,
    read_rails,
    run_rails,
    setting_problems,
    write_rails,
)
from collbench_py.parsers.models import Topology
from collbench_py.rundir.load import Host

TOPO = Path(__file__).resolve().parents[1] / "data" / "corpus" / "topo"
H100_8NICS = TOPO / "hgx-h100-nv18-8nics-gpu-numa-id-spaces-sglang.txt"
H100_12NICS = TOPO / "hgx-h100-12nics-numa-off-single-node-tabs-prompt.txt"
H200_BOND = TOPO / "h200-nv18-9nics-bond-reformatted-blog.txt"
DGX_A100 = TOPO / "dgx-a100-nv12-10nics-tabs-numa.txt"
NO_NIC = TOPO / "a100-sxm4-80gb-4gpu-nv12-gpu-numa-id.txt"
BAD_PORT = '{"schema": 1, "hosts": {"n": {"rails": [{"index": 0, "hca": "m", "port": 0, "gpu": 0}]}}}'
OUT_OF_ORDER = '{"schema": 1, "hosts": {"n": {"rails": [{"index": 1, "hca": "m", "port": 1, "gpu": 0}]}}}'


def host(topo: Path | None, ib: list[dict] | None = None) -> Host:
    topology = topology_of(topo.read_text(encoding="utf-8")) if topo else None
    return Host("node1", "node1", "ok", facts={"ib": ib or []}, topology=topology)


def pairs(rails: HostRails) -> list[tuple[int, str, int | None]]:
    return [(rail.index, rail.hca, rail.gpu) for rail in rails.rails]


def test_8x_h100_gpu_k_takes_mlx5_k_the_nic_pix_to_it() -> None:
    rails = host_rails(host(H100_8NICS), "auto")
    assert pairs(rails) == [(k, f"mlx5_{k}", k) for k in range(8)]
    assert rails.source == AUTO_SOURCE
    assert {rail.port for rail in rails.rails} == {1}


def test_the_port_is_the_hcas_first_active_port_in_the_facts() -> None:
    ib = [
        {"device": "mlx5_3", "port": 1, "state": "Down"},
        {"device": "mlx5_3", "port": 2, "state": "Active"},
    ]
    rails = host_rails(host(H100_8NICS, ib), "auto")
    assert rails.rails[3] == Rail(3, "mlx5_3", 2, 3)
    assert rails.rails[2].port == 1


def test_storage_nics_not_pix_to_a_gpu_get_no_rail() -> None:
    # 12 NICs: mlx5_3/mlx5_4 are PIX only to each other, mlx5_9/mlx5_10 NODE to every GPU.
    rails = host_rails(host(H100_12NICS), "auto")
    assert pairs(rails) == [
        (0, "mlx5_0", 0),
        (1, "mlx5_1", 1),
        (2, "mlx5_2", 2),
        (3, "mlx5_5", 3),
        (4, "mlx5_6", 4),
        (5, "mlx5_7", 5),
        (6, "mlx5_8", 6),
        (7, "mlx5_11", 7),
    ]


def test_non_contiguous_names_are_kept_and_the_bond_is_left_out() -> None:
    rails = host_rails(host(H200_BOND), "auto")
    assert [rail.hca for rail in rails.rails] == [f"mlx5_{n}" for n in (0, 3, 4, 5, 6, 7, 8, 9)]
    assert "mlx5_bond_0" not in {rail.hca for rail in rails.rails}


def test_dgx_a100_eight_compute_nics_of_ten() -> None:
    rails = host_rails(host(DGX_A100), "auto")
    assert len(rails.rails) == 8
    assert [rail.gpu for rail in rails.rails] == list(range(8))


def test_a_nic_shared_by_two_gpus_is_one_rail_of_the_lower_gpu() -> None:
    pix = {"NIC0": "PIX", "NIC1": "SYS"}
    topology = Topology(
        gpus=("GPU0", "GPU1", "GPU2"),
        nics={"NIC0": "mlx5_0", "NIC1": "mlx5_1"},
        links={"GPU0": pix, "GPU1": pix, "GPU2": {"NIC0": "SYS", "NIC1": "PXB"}},
    )
    rails = host_rails(Host("n", "n", "ok", topology=topology), "auto")
    assert pairs(rails) == [(0, "mlx5_0", 0), (1, "mlx5_1", 2)]


def test_auto_without_a_nic_near_a_gpu_or_without_topo_gives_no_rails_and_says_why() -> None:
    none_near = host_rails(host(NO_NIC), "auto")
    assert none_near.rails == () and "no NIC PIX or PXB" in none_near.source
    no_topo = host_rails(host(None), "auto")
    assert no_topo.rails == () and "no topo -m" in no_topo.source


@pytest.mark.parametrize("setting", ["off", False, None])
def test_off_gives_no_rails(setting: object) -> None:
    rails = host_rails(host(H100_8NICS), setting)
    assert rails == HostRails((), OFF_SOURCE)


def test_a_list_of_names_is_rail_k_with_gpu_k() -> None:
    rails = host_rails(host(H100_8NICS), ["mlx5_4", "mlx5_5:2"])
    assert rails.rails == (Rail(0, "mlx5_4", 1, 0), Rail(1, "mlx5_5", 2, 1))
    assert rails.source == INVENTORY_SOURCE


def test_a_list_of_dicts_gives_gpu_and_port_and_host_memory_with_gpu_null() -> None:
    setting = [{"hca": "mlx5_2", "gpu": 3, "port": "2"}, {"hca": "mlx5_7", "gpu": None}, {"hca": "mlx5_9"}]
    assert host_rails(host(None), setting).rails == (
        Rail(0, "mlx5_2", 2, 3),
        Rail(1, "mlx5_7", 1, None),
        Rail(2, "mlx5_9", 1, 2),
    )


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ("on", "must be auto, off or a list"),
        (3, "must be auto, off or a list"),
        ([], "empty list"),
        (["mlx5_0", "mlx5 1"], "entry 1 ('mlx5 1') is not an HCA name"),
        (["mlx5_0:0"], "entry 0 ('mlx5_0:0') is not an HCA name"),
        ([{"gpu": 0}], "needs hca"),
        ([{"hca": "mlx5_0", "port": 0}], "port 0: a whole number of 1 or more"),
        ([{"hca": "mlx5_0", "gpu": -1}], "gpu -1: a GPU index"),
        ([{"hca": "mlx5_0", "gpu": True}], "gpu True: a GPU index"),
        ([{"hca": "mlx5_0", "nic": 1}], "unknown keys nic"),
        ([7], "must be an HCA name or {hca, gpu, port}"),
        (["mlx5_0", {"hca": "mlx5_0", "port": 1}], "names mlx5_0 port 1 twice (rails 0 and 1)"),
    ],
)
def test_a_bad_setting_is_one_sentence_naming_the_host(setting: object, words: str) -> None:
    problems = setting_problems({"node3": setting, "node1": "auto"})
    assert len(problems) == 1
    assert problems[0].startswith("collbench_rails of node3 ")
    assert words in problems[0]
    assert "\n" not in problems[0]
    with pytest.raises(RailSettingError):
        host_rails(host(None), setting)


def test_good_settings_have_no_problems() -> None:
    assert setting_problems({"a": "auto", "b": "off", "c": False, "d": ["mlx5_0"], "e": [{"hca": "x"}]}) == []


def run_dir_with(tmp_path: Path, topo: dict[str, Path | None]) -> Path:
    for name, source in topo.items():
        folder = tmp_path / "hosts" / name
        folder.mkdir(parents=True)
        (folder / "facts.json").write_text(json.dumps({"ib": []}), encoding="utf-8")
        if source:
            shutil.copy(source, folder / "topo.txt")
    return tmp_path


def test_rails_json_written_from_the_run_directory_and_read_back(tmp_path: Path) -> None:
    run_dir = run_dir_with(tmp_path, {"node1": H100_8NICS, "node2": H200_BOND, "node3": None})
    rails = run_rails(run_dir, {"node1": "auto", "node2": "auto", "node3": ["mlx5_0", "mlx5_1"]})
    path = write_rails(run_dir, rails)
    assert path == run_dir / RAILS_FILE
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    document = json.loads(path.read_text(encoding="utf-8"))
    assert document["schema"] == 1
    assert document["hosts"]["node1"]["rails"][2] == {"index": 2, "hca": "mlx5_2", "port": 1, "gpu": 2}
    assert document["hosts"]["node3"]["source"] == INVENTORY_SOURCE
    assert read_rails(run_dir) == rails
    assert read_rails(run_dir)["node2"].indices() == tuple(range(8))


def test_a_host_without_ib_write_bw_gets_no_rails_and_says_why(tmp_path: Path) -> None:
    """Every read of its rails would fail: the plan must not read them (nor blame a leaf for it)."""
    run_dir = run_dir_with(tmp_path, {"node1": H100_8NICS, "node2": H100_8NICS, "node3": H100_8NICS})
    perftest = {
        "node1": {"bin_dir": "/opt/perftest/bin", "source": "prebuilt"},
        "node2": {"bin_dir": "", "source": "none", "note": "no libibverbs header"},
    }
    rails = run_rails(run_dir, dict.fromkeys(("node1", "node2", "node3"), "auto"), perftest)
    assert rails["node1"].indices() == tuple(range(8))
    assert rails["node2"].rails == () and "no ib_write_bw" in rails["node2"].source
    assert "no libibverbs header" in rails["node2"].source
    # node3 never ran the perftest role: nothing published, no rails either.
    assert rails["node3"].rails == () and "perftest was not built here" in rails["node3"].source
    # Without what the hosts published (a run directory read after the run), the setting decides.
    assert run_rails(run_dir, {"node2": "auto"})["node2"].indices() == tuple(range(8))


def test_run_rails_refuses_a_bad_setting_in_one_sentence(tmp_path: Path) -> None:
    run_dir = run_dir_with(tmp_path, {"node1": H100_8NICS})
    with pytest.raises(RailSettingError, match=r"^collbench_rails of node1 must be auto, off or a list"):
        run_rails(run_dir, {"node1": "yes"})


def test_no_rails_json_is_no_rails(tmp_path: Path) -> None:
    assert read_rails(tmp_path) == {}


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{", "cannot be read"),
        ('{"schema": 2, "hosts": {}}', "not a schema 1 rail map"),
        ('{"schema": 1}', "no hosts object"),
        ('{"schema": 1, "hosts": {"n": {}}}', "n has no rails list"),
        (
            '{"schema": 1, "hosts": {"n": {"rails": [{"index": 0, "hca": "m", "port": 0, "gpu": 0}]}}}',
            "needs",
        ),
        (
            '{"schema": 1, "hosts": {"n": {"rails": [{"index": 1, "hca": "m", "port": 1, "gpu": 0}]}}}',
            "in order",
        ),
    ],
)
def test_a_bad_rails_json_is_one_sentence(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / RAILS_FILE
    path.parent.mkdir(parents=True)
    path.write_text(text, encoding="utf-8")
    with pytest.raises(RailsFileError, match=words):
        read_rails(tmp_path)


GOOD = {"sample": 4, "min_drop": 0.1, "seconds": 5, "size": 8388608}


def test_the_default_rail_settings_have_no_problems() -> None:
    assert rail_settings_problems({"node1": "auto"}, **GOOD) == []
    assert rail_settings_problems({"node1": "off"}, **dict(GOOD, sample=0, min_drop=0)) == []


@pytest.mark.parametrize(
    ("change", "sentence"),
    [
        ({"sample": -1}, "collbench_rails_sample must be a whole number of 0 or more, not -1"),
        ({"sample": 1.5}, "collbench_rails_sample must be a whole number of 0 or more, not 1.5"),
        (
            {"min_drop": 1},
            "collbench_rails_min_drop must be a fraction from 0 up to (not including) 1, not 1",
        ),
        (
            {"min_drop": "x"},
            "collbench_rails_min_drop must be a fraction from 0 up to (not including) 1, not 'x'",
        ),
        ({"seconds": 0}, "collbench_rails_seconds must be a whole number of seconds, 1 or more, not 0"),
        ({"size": True}, "collbench_rails_size must be a whole number of bytes, 1 or more, not True"),
    ],
)
def test_a_bad_rail_number_is_one_sentence(change: dict, sentence: str) -> None:
    assert rail_settings_problems({"node1": "auto"}, **dict(GOOD, **change)) == [sentence]


def test_the_playbook_rejects_bad_rail_settings_before_any_launch(tmp_path: Path) -> None:
    from tests.roles.test_playbook_validation import assert_rejected, run_bench  # noqa: PLC0415 - the real playbook

    result = run_bench(
        tmp_path, "-e", json.dumps({"collbench_rails": "yes", "collbench_rails_min_drop": 1.5})
    )
    assert_rejected(
        result,
        tmp_path,
        "collbench_rails of localhost must be auto, off or a list of HCAs in rail order, not 'yes'",
        "collbench_rails_min_drop must be a fraction from 0 up to (not including) 1, not 1.5",
    )


def test_the_rail_map_filter_keys_the_hosts_by_directory_name(tmp_path: Path) -> None:
    from filter_plugins.collbench_rails import collbench_rail_map  # noqa: PLC0415 - the playbook's filter

    run_dir = run_dir_with(tmp_path, {"gpu_a01": H100_8NICS, "node2": None})
    document = collbench_rail_map({"gpu-a01": "auto", "node2": "off"}, str(run_dir), {"gpu-a01": "gpu_a01"})
    assert document["schema"] == 1
    assert sorted(document["hosts"]) == ["gpu_a01", "node2"]
    assert len(document["hosts"]["gpu_a01"]["rails"]) == 8
    assert document["hosts"]["node2"] == {"rails": [], "source": OFF_SOURCE}
    # What the playbook writes is what the plan reads back.
    (run_dir / RAILS_FILE).parent.mkdir(parents=True)
    (run_dir / RAILS_FILE).write_text(json.dumps(document), encoding="utf-8")
    assert read_rails(run_dir)["gpu_a01"].rails[7] == Rail(7, "mlx5_7", 1, 7)
