"""What the one controller task of the node checks decides for each node (collbench_py/nodechecks/
check_fleet.py): a node's own setting wins over the task's, a setting that cannot work is that node's
failure with a message naming the variable, and the outputs come back as written, their temporary
files, links and folders left out, a name that would leave the node's folder refused."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from collbench_py.launch.connections import node_python
from collbench_py.nodechecks import check_fleet

DEFAULTS = {
    "collbench_node_checks": True,
    "collbench_node_checks_gpu_matrix": True,
    "collbench_node_checks_nvlink": True,
    "collbench_node_checks_nic": True,
    "collbench_node_checks_timeout_s": "120",  # templated values reach the task as text
    "collbench_node_checks_nvbandwidth_testcases": ["device_to_device_memcpy_read_ce"],
    "collbench_node_checks_p2p_test": "",
    "collbench_node_checks_loopback_base_port": 18515,
    "collbench_launch_env": {},
}
KNOWN = {
    "collbench_node": {"workdir": "/scratch/collbench", "dir_name": "gpu-01"},
    "ansible_facts": {"discovered_interpreter_python": "/usr/bin/python3.11"},
    "collbench_nvbandwidth_bin": "/opt/nvbandwidth/build/nvbandwidth",
}


def test_a_node_s_own_setting_wins_over_the_task_s() -> None:
    settings = check_fleet.node_settings(
        {"collbench_node_checks_nic": "false", "collbench_node_checks_timeout_s": 30}, DEFAULTS
    )
    assert settings["nic"] is False and settings["nvlink"] is True
    assert settings["timeout_s"] == 30
    assert check_fleet.node_settings({}, DEFAULTS)["timeout_s"] == 120


@pytest.mark.parametrize(
    ("own", "said"),
    [
        ({"collbench_node_checks_timeout_s": 0}, "collbench_node_checks_timeout_s must be at least 1 (is 0)"),
        (
            {"collbench_node_checks_timeout_s": "soon"},
            "collbench_node_checks_timeout_s must be a whole number",
        ),
        ({"collbench_node_checks_nvlink": "maybe"}, "collbench_node_checks_nvlink must be true or false"),
        ({"collbench_node_checks_nvbandwidth_testcases": "all"}, "must be a list of names"),
        ({"collbench_launch_env": ["NCCL_IB_HCA=mlx5_0"]}, "collbench_launch_env must be a mapping"),
        ({"collbench_node_checks_loopback_base_port": -1}, "loopback_base_port must be at least 1"),
    ],
)
def test_a_setting_that_cannot_work_is_refused_by_name(own: dict, said: str) -> None:
    with pytest.raises(check_fleet.SettingError, match=said.replace("(", r"\(").replace(")", r"\)")):
        check_fleet.node_settings(own, DEFAULTS)


def test_the_config_and_the_command_of_a_node() -> None:
    settings = check_fleet.node_settings({"collbench_node_checks_gpu_matrix": False}, DEFAULTS)
    out_dir = check_fleet.node_out_dir(KNOWN, "night-7")
    assert out_dir == "/scratch/collbench/runs/night-7/gpu-01/node"
    config = check_fleet.node_config("gpu-01", KNOWN, settings, out_dir, hcas=[], phase="after")
    assert config["checks"] == ["nvlink", "nic"]
    assert config["nvbandwidth"] == "/opt/nvbandwidth/build/nvbandwidth"
    assert config["perftest"] == {"bin_dir": "", "gpudirect": False, "source": "none"}
    assert (config["phase"], config["timeout_s"], config["host"]) == ("after", 120, "gpu-01")
    python = node_python(KNOWN)
    assert python == "/usr/bin/python3.11"
    assert (
        node_python({**KNOWN, "ansible_python_interpreter": "/opt/py/bin/python3"}) == "/opt/py/bin/python3"
    )
    assert node_python({**KNOWN, "ansible_python_interpreter": "auto_silent"}) == "/usr/bin/python3.11"
    argv = check_fleet.run_argv(python, config)
    assert argv[:2] == [python, "-"] and json.loads(argv[2]) == config
    # The backstop: every check of the phase in a row, and some.
    assert check_fleet.deadline_s("before", 120) == 840 and check_fleet.deadline_s("after", 120) == 240


def test_the_node_program_reads_its_text_from_standard_input(tmp_path: Path) -> None:
    program = Path(check_fleet.__file__).parents[1] / "node" / "node_checks.py"
    config = {"out_dir": str(tmp_path / "node"), "timeout_s": 5, "checks": [], "hcas": [], "host": "gpu-01"}
    done = subprocess.run(
        check_fleet.run_argv(sys.executable, config),
        input=program.read_bytes(),
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "node" / "checks.json").read_text())["host"] == "gpu-01"


def test_the_outputs_come_back_as_written_without_temporary_files_links_or_folders(tmp_path: Path) -> None:
    out = tmp_path / "node"
    out.mkdir()
    (out / "checks.json").write_text('{"schema": 1}\n')
    (out / "nvbandwidth.txt").write_bytes(bytes(range(256)))
    (out / ".checks.json.tmp").write_text("half")
    (out / "sub").mkdir()
    (out / "link.txt").symlink_to(out / "checks.json")
    done = subprocess.run(check_fleet.pack_argv(sys.executable, str(out)), capture_output=True, check=True)
    assert check_fleet.unpacked(done.stdout) == {
        "checks.json": b'{"schema": 1}\n',
        "nvbandwidth.txt": bytes(range(256)),
    }


@pytest.mark.parametrize("name", ["../facts.json", "/etc/passwd", ".hidden", "a/b", ".."])
def test_a_name_that_would_leave_the_folder_is_refused(name: str) -> None:
    listing = json.dumps({name: base64.b64encode(b"x").decode()}).encode()
    with pytest.raises(ValueError, match="an output named"):
        check_fleet.unpacked(listing)


def test_what_is_not_a_listing_is_refused() -> None:
    for printed in (b"", b"Traceback", b"[]", json.dumps({"checks.json": "not base64!"}).encode()):
        with pytest.raises(ValueError):
            check_fleet.unpacked(printed)
    assert (
        check_fleet.last_line(b"Traceback (most recent call last):\n  ...\nOSError: gone\n\n")
        == "OSError: gone"
    )
