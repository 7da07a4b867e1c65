"""perftest rules: failures are data (a status and a reason), units are as printed, a peak of 0 in
duration mode is not measured, roles and GPU memory come from the command and the preamble.

Failure lines are perftest's own messages (src/perftest_resources.c, perftest_parameters.c,
perftest_communication.c, cuda_memory.c of perftest 26.04.17), placed where perftest prints them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collbench_py.parsers import detect, parse_text
from collbench_py.parsers.perftest import PerftestRun
from tests.collbench_cli import collbench

CORPUS = Path(__file__).parents[1] / "data" / "corpus" / "perftest"
DGX = (CORPUS / "dgx-spark-cx7-write-bw-4qp-rdma-cm-and-write-lat.txt").read_text()
POST_LIST = (CORPUS / "write-bw-post-list-8B-duration-60s-peak-zero-msgrate-mismatch.txt").read_text()
NO_DEVICE = CORPUS / "no-rdma-device-in-container-unable-to-find-device.txt"
BW_PART = DGX.split("$ ib_write_lat")[0]  # the ib_write_bw run alone
HEADER_ONLY = BW_PART.split(" #bytes")[0]  # up to the address lines: the run printed no result


def _runs(text: str) -> list[PerftestRun]:
    assert detect(text) == "perftest"
    return list(parse_text(text, "x").records)


@pytest.mark.parametrize(
    ("text", "failure", "reason"),
    [
        (
            "$ ib_write_bw -d mlx5_9 --report_gbits\nIB device mlx5_9 not found\n"
            " Unable to find the Infiniband/RoCE device\n",
            "no-device",
            "Unable to find the Infiniband/RoCE device",
        ),
        (
            "$ ib_write_bw -d mlx5_0 --report_gbits\n Couldn't get context for the device\n",
            "device-open",
            "Couldn't get context for the device",
        ),
        (
            "$ ib_write_bw -d mlx5_2 -i 1 --report_gbits\n Port number 1 state is Down\n"
            " Couldn't get context for the device\n",
            "port-down",
            "Port number 1 state is Down",
        ),
        (
            HEADER_ONLY.replace("$ ib_write_bw 192.168.177.12", "$ ib_write_bw 10.0.0.9").split(
                " local address"
            )[0]
            + "Couldn't connect to 10.0.0.9:18515\n"
            "Unable to open file descriptor for socket connection Unable to init the socket connection\n",
            "connect",
            "Couldn't connect to 10.0.0.9:18515",
        ),
        (
            "$ ib_write_bw -d mlx5_0 --use_cuda=3 --report_gbits\nFailed to load CUDA library dynamically\n",
            "gpu-memory",
            "Failed to load CUDA library dynamically",
        ),
        (
            "$ ib_write_bw -d mlx5_0 --use_cuda=0 --report_gbits\ninitializing CUDA\n"
            "Listing all CUDA devices in system:\nCUDA device 0: PCIe address is 1B:00\n\n"
            "Picking device No. 0\n[pid = 7, dev = 0] device name = [NVIDIA H100 80GB HBM3]\n"
            "creating CUDA Ctx\nmaking it the current CUDA Ctx\ncuMemAlloc() of a 16777216 bytes GPU buffer\n"
            "allocated GPU buffer address at 00007f0000000000 pointer=0x7f0000000000\n"
            "Couldn't allocate MR\n",
            "memory-registration",
            "Couldn't allocate MR",
        ),
    ],
    ids=["no-device", "device-open", "port-down", "connect", "gpu-memory", "memory-registration"],
)
def test_a_failure_is_a_run_with_its_kind_and_reason(text: str, failure: str, reason: str) -> None:
    [run] = _runs(text)
    assert (run.status, run.failure, run.reason, run.rows) == ("failed", failure, reason, ())


def test_the_first_line_of_a_failure_is_not_the_reason_when_a_later_one_says_more() -> None:
    [run] = _runs(NO_DEVICE.read_text())
    assert run.reason == "Unable to find the Infiniband/RoCE device"
    assert run.warnings == ("Did not detect devices",)


def test_a_failed_run_is_exit_0_not_bad_input() -> None:
    result = collbench("parse", "--format", "json", str(NO_DEVICE))
    assert (result.returncode, result.stderr) == (0, "")
    [parsed] = json.loads(result.stdout)
    assert parsed["records"][0]["status"] == "failed"


def test_a_header_without_result_is_incomplete_not_ok() -> None:
    [run] = _runs(HEADER_ONLY)
    assert (run.status, run.failure, run.device, run.qps) == ("incomplete", None, "rocep1s0f1", 4)


def test_bandwidth_unit_is_the_printed_one_and_values_are_not_converted() -> None:
    [gbits] = _runs(BW_PART)
    [mbytes] = _runs(BW_PART.replace("Gb/sec", "MB/sec").replace("--report_gbits ", ""))
    assert (gbits.bw_unit, mbytes.bw_unit) == ("Gb/sec", "MB/sec")
    assert gbits.rows[0].bw_average == mbytes.rows[0].bw_average == 111.71


def test_a_zero_peak_with_a_nonzero_average_is_not_measured() -> None:
    [run] = _runs(POST_LIST)
    row = run.rows[0]
    assert (row.bw_peak, row.bw_average, row.msg_rate) == (None, 0.48, 7.498617)
    assert any("not measured" in warning for warning in run.warnings)


def test_a_zero_peak_and_zero_average_stay_zero() -> None:
    [run] = _runs(POST_LIST.replace("0.00               0.48", "0.00               0.00"))
    assert (run.rows[0].bw_peak, run.rows[0].bw_average) == (0.0, 0.0)


def test_latency_columns_are_not_mixed_up() -> None:
    lat = next(run for run in _runs(DGX) if run.test == "write_lat")
    row = lat.rows[0]
    assert (row.p99, row.p99_9, row.t_typical, row.t_max) == (1.57, 1.93, 1.47, 1.93)
    assert (lat.lat_unit, lat.bw_unit) == ("usec", None)


def test_gpu_memory_comes_from_the_command_or_the_cuda_preamble() -> None:
    text = (
        CORPUS / "k8s-t4-gpudirect-roce-rdma-cm-write-bw-server-client-relaxed-ordering-warning.txt"
    ).read_text()
    server, client = _runs(text)
    assert (server.role, client.role, client.server) == ("server", "client", "192.168.4.225")
    assert (server.gpu_memory, server.gpu_device, server.gpu_pci) == ("cuda", 0, "82:00")
    # without the command line, the preamble alone says the buffers are in GPU memory
    preamble_only = "\n".join(line for line in text.splitlines() if not line.startswith("ib_write_bw"))
    assert {run.gpu_memory for run in _runs(preamble_only)} == {"cuda"}
    [host_memory] = _runs(BW_PART)
    assert host_memory.gpu_memory is None


def test_port_and_device_come_from_the_command_line() -> None:
    [run] = _runs(BW_PART.replace("-q 4 -R", "-q 4 -i 2 -R"))
    assert (run.port, run.device) == (2, "rocep1s0f1")


# perftest's --out_json file, as write_test_info_to_file and write_bw_report_to_file print it
# (perftest_parameters.c; REPORT_FMT_JSON in perftest_parameters.h), for a GPUDirect loopback run.
OUT_JSON = """{
"test_info": {
"test": "RDMA_Write_BW_Test",
"Dual_port": "OFF",
"Device": "mlx5_2",
"Number_of_qps": 1,
"Transport_type": "IB",
"Connection_type": "RC",
"Using_SRQ": "OFF",
"PCIe_relax_order": "ON",
"ibv_wr_API": "ON",
"TX_depth": 128,
"CQ_Moderation": 100,
"Mtu": 4096,
"Link_type": "IB",
"Max_inline_data": 0,
"rdma_cm_QPs": "OFF",
"cuda_device": 3,
"Use_ROCm_memory": "OFF",
"Data_ex_method": "Ethernet"
},
"results": {
"MsgSize": 8388608,
"n_iterations": 5000,
"BW_peak": 391.52,
"BW_average": 391.47,
"MsgRate": 0.005833
}
}
"""


def test_out_json_is_read_with_gpu_memory_and_no_unit() -> None:
    [run] = _runs(OUT_JSON)
    assert (run.test, run.device, run.mtu, run.link_type) == ("write_bw", "mlx5_2", 4096, "IB")
    assert (run.gpu_memory, run.gpu_device, run.bw_unit, run.status) == ("cuda", 3, None, "ok")
    row = run.rows[0]
    assert (row.bytes, row.iterations, row.bw_peak, row.bw_average, row.msg_rate) == (
        8388608,
        5000,
        391.52,
        391.47,
        0.005833,
    )


def test_out_json_that_is_cut_short_is_bad_input(tmp_path: Path) -> None:
    cut = tmp_path / "perftest.json"
    cut.write_text(OUT_JSON[: OUT_JSON.index('"results"')])
    result = collbench("parse", str(cut))
    assert result.returncode == 2
    assert result.stderr.startswith(f"collbench: {cut}: ") and "Traceback" not in result.stderr
