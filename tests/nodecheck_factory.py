"""hosts/<host>/node/ directories (the node checks' output, docs/run-directory.md) made from real
captures: the 8x H100 nvbandwidth v0.10 run, the H100 `nvidia-smi nvlink -s` sample (one GPU,
repeated for eight with their own index and UUID), a ConnectX-7 `ibstat` block (one per HCA, set
Active at 400 Gb/s InfiniBand) and a real `ib_write_bw` client output per HCA. A degraded component
is the same text with its cells, its link or its bandwidth changed, which is what a node with that
fault prints. `nvidia-smi nvlink -e` has no capture in the corpus: its lines are written in the
tool's format (`Link N: CRC Errors: 0`) under the real sample's GPU headers."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

CORPUS = Path(__file__).parent / "data" / "corpus"
NVBANDWIDTH = (
    Path(__file__).parent
    / "data"
    / "node-checks"
    / "hgx-h100-8gpu-v0.10.0-five-runs-hash-separators-latency-sm.txt"
)
NVLINK_S = CORPUS / "nvlink" / "gke-a3-h100-1gpu-pod-nvlink-status-tab-indent.txt"
IBSTAT = CORPUS / "ib" / "cx7-roce-ibstat-port-down-disabled-rate40-elided-plus-ibdev2netdev.txt"
WRITE_BW = CORPUS / "perftest" / "dgx-spark-cx7-write-bw-4qp-rdma-cm-and-write-lat.txt"
HCAS = tuple(f"mlx5_{i}" for i in range(8))
HEALTHY_LOOPBACK = 399.7  # Gb/s: what healthy 400G H100 nodes read on every port

_GRID_ROW = re.compile(r"^(?P<lead>\s*)(?P<label>\d+)(?P<rest>(?:\s+(?:N/A|-?[\d.]+))+)\s*$")


@dataclass
class NodeSpec:
    """One host's node checks. Cells: (testcase, row, column) -> factor."""

    cells: dict[tuple[str, str, str], float] = field(default_factory=dict)
    links_down: tuple[tuple[int, int], ...] = ()  # (gpu, link)
    crc_growth: dict[tuple[int, int], int] = field(default_factory=dict)  # (gpu, link) -> errors added
    loopback: dict[str, float] = field(default_factory=dict)  # HCA -> Gb/s (default healthy)
    port_rate: dict[str, int] = field(default_factory=dict)  # HCA -> the rate ibstat prints (400 healthy)
    skipped: dict[str, str] = field(default_factory=dict)  # check -> note
    hcas: tuple[str, ...] = HCAS


def scale_cells(text: str, cells: dict[tuple[str, str, str], float]) -> str:
    """nvbandwidth text with the given (testcase, row, column) cells multiplied."""
    out, testcase, columns = [], None, []
    for line in text.splitlines():
        if line.startswith("Running "):
            testcase, columns = line[len("Running ") : -1], []
        elif testcase and not columns and line.strip() and all(t.isdigit() for t in line.split()):
            columns = line.split()
        elif testcase and columns and (match := _GRID_ROW.match(line)):
            tokens = match["rest"].split()
            for i, col in enumerate(columns):
                factor = cells.get((testcase, match["label"], col))
                if factor is not None and tokens[i] != "N/A":
                    tokens[i] = f"{float(tokens[i]) * factor:.2f}"
            line = match["lead"] + match["label"] + "".join(f"{t:>10}" for t in tokens)
        out.append(line)
    return "\n".join(out) + "\n"


def degrade_gpu(gpu: str, factor: float = 0.5, testcase: str = "device_to_device_memcpy_read_ce"):
    labels = [str(i) for i in range(8)]
    return {(testcase, r, c): factor for r in labels for c in labels if gpu in (r, c) and r != c}


def degrade_pair(a: str, b: str, factor: float = 0.6, testcase: str = "device_to_device_memcpy_read_ce"):
    return {(testcase, a, b): factor, (testcase, b, a): factor}


def _gpu_blocks() -> tuple[str, list[str]]:
    lines = NVLINK_S.read_text(encoding="utf-8").splitlines()
    return lines[0], [line for line in lines[1:] if "Link" in line]


def nvlink_status(links_down: tuple[tuple[int, int], ...] = ()) -> str:
    header, links = _gpu_blocks()
    out = []
    for gpu in range(8):
        out.append(header.replace("GPU 0:", f"GPU {gpu}:").replace("-d72b36af9983", f"-d72b36af998{gpu}"))
        for line in links:
            number = int(re.search(r"Link (\d+):", line)[1])
            out.append(
                re.sub(r"Link (\d+): .*", f"Link {number}: <inactive>", line)
                if (gpu, number) in links_down
                else line
            )
    return "\n".join(out) + "\n"


def nvlink_errors(crc: dict[tuple[int, int], int] | None = None) -> str:
    header, links = _gpu_blocks()
    out = []
    for gpu in range(8):
        out.append(header.replace("GPU 0:", f"GPU {gpu}:").replace("-d72b36af9983", f"-d72b36af998{gpu}"))
        for link in range(len(links)):
            out += [
                f"\t Link {link}: Replay Errors: 0",
                f"\t Link {link}: Recovery Errors: 0",
                f"\t Link {link}: CRC Errors: {(crc or {}).get((gpu, link), 0)}",
            ]
    return "\n".join(out) + "\n"


def ibstat(hcas: tuple[str, ...], rate: dict[str, int] | None = None) -> str:
    text = IBSTAT.read_text(encoding="utf-8")
    block = text[text.index("CA 'mlx5_0'") : text.index("..")].rstrip("\n")
    block = (
        block.replace("State: Down", "State: Active")
        .replace("Physical state: Disabled", "Physical state: LinkUp")
        .replace("Rate: 40", "Rate: 400")
        .replace("Link layer: Ethernet", "Link layer: InfiniBand")
    )
    out = []
    for hca in hcas:
        out.append(block.replace("mlx5_0", hca).replace("Rate: 400", f"Rate: {(rate or {}).get(hca, 400)}"))
    return "\n".join(out) + "\n"


def loopback(hca: str, gbits: float, gpu: int) -> str:
    lines = WRITE_BW.read_text(encoding="utf-8").splitlines()[:27]
    flags = "-s 8388608 -x 0 -F --report_gbits --perform_warm_up"
    command = f"$ ib_write_bw {flags} --use_cuda={gpu} -d {hca} localhost"
    body = "\n".join([command, *lines[1:]]).replace("rocep1s0f1", hca)
    rate = gbits / 8 / 8.388608 / 1000  # Mpps of 8 MiB messages
    row = f" 8388608    5000             {gbits + 0.1:.2f}             {gbits:.2f}             {rate:.6f}"
    return re.sub(r"^ 65536 .*$", row, body, flags=re.M) + "\n"


def write_node_dir(host_dir: Path, host: str, spec: NodeSpec) -> Path:
    node = host_dir / "node"
    node.mkdir(parents=True, exist_ok=True)
    checks = []

    def check(name: str, files: list[str], argv: list[str]) -> bool:
        if name in spec.skipped:
            checks.append(
                {
                    "name": name,
                    "status": "skipped",
                    "note": spec.skipped[name],
                    "argv": [],
                    "rc": None,
                    "seconds": 0.0,
                    "files": [],
                }
            )
            return False
        checks.append(
            {
                "name": name,
                "status": "ok",
                "note": None,
                "argv": argv,
                "rc": 0,
                "seconds": 1.5,
                "files": files,
            }
        )
        return True

    if check(
        "gpu_matrix",
        ["nvbandwidth.txt"],
        ["/opt/nvbandwidth/nvbandwidth", "-t", "device_to_device_memcpy_read_ce"],
    ):
        (node / "nvbandwidth.txt").write_text(
            scale_cells(NVBANDWIDTH.read_text(encoding="utf-8"), spec.cells), encoding="utf-8"
        )
    if check("nvlink", ["nvlink-status.txt", "nvlink-errors-before.txt"], ["nvidia-smi", "nvlink", "-s"]):
        (node / "nvlink-status.txt").write_text(nvlink_status(spec.links_down), encoding="utf-8")
        (node / "nvlink-errors-before.txt").write_text(nvlink_errors(), encoding="utf-8")
        if check("nvlink_after", ["nvlink-errors-after.txt"], ["nvidia-smi", "nvlink", "-e"]):
            (node / "nvlink-errors-after.txt").write_text(nvlink_errors(spec.crc_growth), encoding="utf-8")
    if check("nic_ports", ["ibstat.txt"], ["ibstat"]):
        (node / "ibstat.txt").write_text(ibstat(spec.hcas, spec.port_rate), encoding="utf-8")
    for gpu, hca in enumerate(spec.hcas):
        name = f"loopback:{hca}"
        if "nic" in spec.skipped:
            checks.append(
                {
                    "name": name,
                    "status": "skipped",
                    "note": spec.skipped["nic"],
                    "argv": [],
                    "rc": None,
                    "seconds": 0.0,
                    "files": [],
                }
            )
            continue
        if check(name, [f"loopback-{hca}.txt"], ["ib_write_bw", "-d", hca, "--use_cuda", str(gpu)]):
            (node / f"loopback-{hca}.txt").write_text(
                loopback(hca, spec.loopback.get(hca, HEALTHY_LOOPBACK), gpu), encoding="utf-8"
            )
    document = {
        "schema": 1,
        "host": host,
        "started_at": "2026-11-21T21:50:00Z",
        "finished_at": "2026-11-21T21:51:00Z",
        "checks": checks,
        "perftest": {"gpudirect": True, "source": "built"},
        "hcas": [
            {"name": hca, "port": 1, "gpu": gpu, "numa_node": gpu // 4} for gpu, hca in enumerate(spec.hcas)
        ],
    }
    (node / "checks.json").write_text(json.dumps(document, indent=1), encoding="utf-8")
    return node


def add_node_checks(run_dir: Path, specs: dict[str, NodeSpec]) -> Path:
    """hosts/<host>/node/ for every host of `run_dir` (healthy where `specs` does not name it)."""
    for host_dir in sorted((run_dir / "hosts").iterdir()):
        write_node_dir(host_dir, host_dir.name, specs.get(host_dir.name, NodeSpec()))
    return run_dir
