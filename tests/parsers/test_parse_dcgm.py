"""dcgmi diag rules: wrapped rows join as they were cut, results map to pass/fail/warn/skip and the
overall verdict is the worst, NVLink-down warnings name their GPU and link, the level is read or inferred."""

from __future__ import annotations

from pathlib import Path

from collbench_py.parsers import detect, parse_text
from collbench_py.parsers.dcgm import DiagTest

CORPUS = Path(__file__).parents[1] / "data" / "corpus" / "dcgm"
GKE = (CORPUS / "gke-a3-h100-dcgm-3.3.8-diag-r2-pass-with-info-wrapped-row.txt").read_text()
FRAGMENT = (CORPUS / "dcgm-2.4.6-diag-r2-pcie-fail-nvlink-down-warnings-fragment-elided.txt").read_text()


def _tests(text: str) -> dict[str, DiagTest]:
    assert detect(text) == "dcgmi-diag"
    return {test.name: test for test in parse_text(text, "x").records}


def test_a_wrapped_row_joins_where_it_was_cut() -> None:
    info = _tests(GKE)["Persistence Mode"].info
    assert info == (
        "Persistence mode for GPU 0 is disabled. Enable persistence mode by running"
        ' "nvidia-smi -i <gpuId> -pm 1 " as root.',
    )


def test_the_worst_result_is_the_overall_one() -> None:
    assert parse_text(GKE, "x").info["overall"] == "pass"
    warned = GKE.replace(
        "| GPU Memory                | Pass - All    ", "| GPU Memory                | Warn - GPU: 0 "
    )
    assert _tests(warned)["GPU Memory"].result == "warn"
    assert parse_text(warned, "x").info["overall"] == "warn"
    failed = warned.replace(
        "| PCIe                      | Pass - All    ", "| PCIe                      | Fail - GPU: 0 "
    )
    assert (_tests(failed)["PCIe"].result, _tests(failed)["PCIe"].scope) == ("fail", "GPU: 0")
    assert parse_text(failed, "x").info["overall"] == "fail"


def test_a_skipped_test_does_not_fail_the_diag() -> None:
    skipped = GKE.replace(
        "| PCIe                      | Pass - All    ", "| PCIe                      | Skip - All    "
    )
    parsed = parse_text(skipped, "x")
    assert (parsed.info["overall"], parsed.info["counts"]["skip"]) == ("pass", 1)


def test_nvlink_down_warnings_name_gpu_and_link_in_a_fragment() -> None:
    pcie = _tests(FRAGMENT)["PCIe"]
    assert (pcie.result, pcie.section) == ("fail", "Integration")
    assert [(item["gpu"], item["link"]) for item in pcie.nvlink_down] == [
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (0, 4),
    ]
    assert "NvLink link 2 is currently down Run a field diagnostic" in pcie.warnings[0]


def test_level_from_the_command_or_inferred_from_sections() -> None:
    assert (parse_text(GKE, "x").info["level"], parse_text(GKE, "x").info["level_inferred"]) == (2, True)
    blacklist = (CORPUS / "slurm-prolog-aws-dcgm-2.x-diag-r1-blacklist-pass.txt").read_text()
    assert parse_text(blacklist, "x").info["level"] == 1
    commanded = parse_text("$ dcgmi diag -r 3\n" + GKE, "x").info
    assert (commanded["level"], commanded["level_inferred"]) == (3, False)


def test_metadata_rows_are_not_tests() -> None:
    parsed = parse_text(GKE, "x")
    assert "DCGM Version" not in _tests(GKE)
    assert (parsed.info["dcgm_version"], parsed.info["gpu_device_ids"]) == ("3.3.8", ["2330"])
