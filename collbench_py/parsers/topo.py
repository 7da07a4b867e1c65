"""`nvidia-smi topo -m` and `rocm-smi --showtopo` into a Topology.

nvidia-smi separates cells with tabs, but pastes turn them into spaces, and with many NICs the
cells can run together (`NODENODESYS`): link cells are read by their vocabulary, not by splitting,
and the affinity cells that follow by their order; when some are empty (the CPU affinity of a GPU
outside the cpuset), the values present belong to the last columns.
"""

from __future__ import annotations

import re

from collbench_py.parsers import nvlink  # `topo -p2p` alone is its kind
from collbench_py.parsers.models import Kind, ParsedFile, ParseError, Topology

# Markers of a benchmark log: a topology printed inside one belongs to that log's parser.
_LOG_MARKERS = ("# Using devices", "# nThread", "Avg bus bandwidth")
_NVIDIA_ROW = re.compile(r"^[ \t]*GPU0[ \t]+X(?:[ \t]|$|(?=NV\d|PIX|PXB|PHB|NODE|SYS|SOC))", re.MULTILINE)
_ROCM_MARKERS = ("between two GPUs", "(Topology) Numa Node")

_HEADER_TOKEN = re.compile(r"CPU\s+Affinity|NUMA\s+Affinity|GPU\s+NUMA(?:\s+ID)?|NUMA(?:\s+ID)?|\S+")
_AFFINITY = {"cpu": "cpu_affinity", "numa": "numa_affinity", "gpu numa": "gpu_numa_id"}
# Longest first: `XGMI` before `X`, `NODE` before `NS`.
_CELL = re.compile(
    r"\s*(NV\d+|XGMI|PCIE|NODE|SYS|SOC|PIX|PXB|PHB|CNS|GNS|TNS|NS|OK|X|\S+)",
)
_P2P_CELLS = frozenset({"X", "OK", "NS", "CNS", "GNS", "TNS", "U"})
_KNOWN_CELLS = _P2P_CELLS | {"PIX", "PXB", "PHB", "NODE", "SYS", "SOC"} | {f"NV{i}" for i in range(100)}
_LABEL = re.compile(r"GPU\d+|NIC\d+|mlx\d+_\S+|mlx\S+")
_DEVICE_LABEL = re.compile(r"^(?:GPU\d+|NIC\d+|mlx\S+)$")
_GLUED_LABEL = re.compile(r"GPU\d+|NIC\d+|mlx\d+_\d+")
_GLUED_LABELS = re.compile(r"(?:GPU\d+|NIC\d+|mlx\d+_\d+)+")
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$", re.MULTILINE)
_P2P_COMMAND = re.compile(r"topo\s+-p2p\s+(\w+)")

_ROCM_TITLE = re.compile(r"^=+\s*(.*?)\s*=+\s*$")
_ROCM_GPU = re.compile(r"GPU\s*\[(\d+)\]|GPU (\d+)(?=\s)")
_ROCM_NUMA = re.compile(r"^(GPU\d+)\s*:\s*\(Topology\)\s*Numa\s+(Node|Affinity)\s*:\s*(\S+)", re.IGNORECASE)


def sniff(text: str) -> Kind | None:
    if any(marker in text for marker in _LOG_MARKERS):
        return None
    if "GPU0" in text and _NVIDIA_ROW.search(text):
        return None if nvlink.p2p_only(text) else "nvidia-smi-topo"
    if any(marker in text for marker in _ROCM_MARKERS):
        return "rocm-smi-topo"
    return None


def parse(text: str, file: str) -> ParsedFile:
    kind = sniff(text)
    if kind == "nvidia-smi-topo":
        topology, warnings = _parse_nvidia(text.splitlines())
    elif kind == "rocm-smi-topo":
        topology, warnings = _parse_rocm(text.splitlines())
    else:
        raise ParseError("not an `nvidia-smi topo -m` or `rocm-smi --showtopo` output")
    return ParsedFile(file=file, kind=kind, topology=topology, warnings=tuple(warnings))


# ---- nvidia-smi topo -m ----------------------------------------------------------------------------


class _Matrix:
    """One header line and its rows."""

    def __init__(self, header: str, name: str) -> None:
        self.name = name
        self.labels: list[str] = []
        self.columns: list[tuple[str, int]] = []  # affinity field, start column
        for m in _HEADER_TOKEN.finditer(header):
            if _GLUED_LABELS.fullmatch(m.group()) and not _DEVICE_LABEL.match(m.group()):
                self.labels += _GLUED_LABEL.findall(m.group())  # `GPU0GPU1...mlx5_0`: tabs lost
                continue
            token = " ".join(m.group().split()).lower()
            field = _AFFINITY.get(token.removesuffix(" affinity").removesuffix(" id"))
            if field:
                self.columns.append((field, m.start()))
            elif not self.columns and _DEVICE_LABEL.match(m.group()):
                self.labels.append(m.group())
        self.links: dict[str, dict[str, str]] = {}
        self.affinity: dict[str, dict[str, str | None]] = {field: {} for field, _ in self.columns}

    def add_row(self, line: str) -> None:
        tokens = line.split()
        label, n, width = tokens[0], len(self.labels), len(self.columns)
        cells, values = tokens[1 : n + 1], tokens[n + 1 : n + 1 + width]
        if len(cells) != n or 0 < len(values) < width or not _KNOWN_CELLS.issuperset(cells):
            # cells run together, or some affinity cells are empty: read by vocabulary and position
            cells, values = self._read_slowly(line, label)
        self.links[label] = dict(zip(self.labels, cells, strict=False))
        for (field, _), value in zip(self.columns, values or [None] * width, strict=False):
            self.affinity[field][label] = None if value is None or value == "N/A" else value

    def _read_slowly(self, line: str, label: str) -> tuple[list[str], list[str | None]]:
        line = line.expandtabs(8)
        pos = line.index(label) + len(label)
        cells: list[str] = []
        while len(cells) < len(self.labels):
            m = _CELL.match(line, pos)
            if m is None:
                break
            cells.append(m.group(1))
            pos = m.end()
        tail = [(m.start() + pos, m.group()) for m in re.finditer(r"\S+", line[pos:])]
        return cells, _assign(tail, self.columns)


def _assign(tail: list[tuple[int, str]], columns: list[tuple[str, int]]) -> list[str | None]:
    """Affinity values to columns: in order when all are there, else to the last columns.

    nvidia-smi prints `N/A` for an unknown NUMA affinity or GPU NUMA ID; only the CPU affinity, a
    list of CPUs, can be empty (cloud VMs, a Slurm or container cpuset that holds none of the GPU's
    CPUs). Positions cannot tell: tabs expanded to spaces put the value after an empty cell at equal
    distance from two header columns."""
    if len(tail) >= len(columns):
        return [value for _, value in tail[: len(columns)]]
    values: list[str | None] = [value for _, value in tail]
    return [None] * (len(columns) - len(values)) + values


def _parse_nvidia(lines: list[str]) -> tuple[Topology, list[str]]:
    matrices = _nvidia_matrices(lines)
    main = next((m for m in matrices if m.columns or _has_links(m)), None)
    if main is None:
        raise ParseError("no `nvidia-smi topo -m` matrix found")
    warnings = []
    extra: dict[str, dict[str, dict[str, str]]] = {}
    for m in matrices:
        if m is not main:
            extra[m.name] = m.links
            warnings.append(f"also holds a second matrix ({m.name}); kept in topology.matrices")
    legend = dict(_NIC_LEGEND.findall("\n".join(lines)))
    nics = {label: legend.get(label, label) for label in main.labels if not label.startswith("GPU")}
    nics = {k: v for k, v in nics.items() if not (k == v and k.startswith("NIC"))}
    missing = [label for label in main.labels if label not in main.links]
    if missing:
        warnings.append(f"no row for {', '.join(missing)}")
    topology = Topology(
        gpus=tuple(label for label in main.labels if label.startswith("GPU")),
        nics=nics,
        links=main.links,
        cpu_affinity=main.affinity.get("cpu_affinity", {}),
        numa_affinity=main.affinity.get("numa_affinity", {}),
        gpu_numa_id=main.affinity.get("gpu_numa_id", {}),
        matrices=extra,
    )
    return topology, warnings


def _nvidia_matrices(lines: list[str]) -> list[_Matrix]:
    matrices: list[_Matrix] = []
    current: _Matrix | None = None
    for i, line in enumerate(lines):
        tokens = line.split(None, 2)
        if not tokens:
            current = None
            continue
        at = line.find("GPU0")
        if at >= 0 and _is_header(line[at:]):
            header = line.expandtabs(8)
            at = header.find("GPU0")
            current = _Matrix(" " * at + header[at:], _matrix_name(lines, i, len(matrices)))
            matrices.append(current)
        elif current is not None and tokens[0] in current.labels and len(tokens) > 1:
            current.add_row(line)
        elif current is None or set(line.strip()) != {"-"}:  # a dashed line under a header is kept
            current = None
    return [m for m in matrices if m.links]


def _is_header(rest: str) -> bool:
    tokens = rest.split(None, 2)
    return len(tokens) == 1 or bool(_LABEL.match(tokens[1])) or tokens[1] in ("CPU", "NUMA")


def _matrix_name(lines: list[str], i: int, index: int) -> str:
    for back in lines[max(0, i - 3) : i]:
        m = _P2P_COMMAND.search(back)
        if m:
            return f"p2p {m.group(1)}"
    return "topo" if index == 0 else f"matrix {index + 1}"


def _has_links(m: _Matrix) -> bool:
    cells = {v for row in m.links.values() for v in row.values()}
    return bool(cells - _P2P_CELLS)


# ---- rocm-smi --showtopo ---------------------------------------------------------------------------


def _parse_rocm(lines: list[str]) -> tuple[Topology, list[str]]:
    warnings = [line.strip() for line in lines if line.lstrip().startswith("WARNING")]
    matrices: dict[str, dict[str, dict[str, str]]] = {}
    numa: dict[str, dict[str, str]] = {}
    title = ""
    header: list[str] = []
    for raw in lines:
        title_match = _ROCM_TITLE.match(raw)
        if title_match:
            title = title_match.group(1).lower().removesuffix(" between two gpus").strip()
            header = []
            continue
        line = _ROCM_GPU.sub(lambda m: f"GPU{m.group(1) or m.group(2)}", raw)
        numa_match = _ROCM_NUMA.match(line.strip())
        if numa_match:
            gpu, what, value = numa_match.groups()
            numa.setdefault(gpu, {})[what.lower()] = value
            continue
        tokens = line.split()
        if not tokens or not title:
            continue
        if all(t.startswith("GPU") for t in tokens):
            header = tokens
        elif header and tokens[0].startswith("GPU") and len(tokens) == len(header) + 1:
            matrices.setdefault(title, {})[tokens[0]] = dict(zip(header, tokens[1:], strict=True))
    if not matrices and not numa:
        raise ParseError("no `rocm-smi --showtopo` matrix found")
    kinds = matrices.get("link type", {})
    links = {row: {col: "X" if col == row else v for col, v in cells.items()} for row, cells in kinds.items()}
    if not links:
        warnings.append("no link type matrix")
    if numa:
        matrices["numa"] = numa
    gpus = next(iter(matrices.values())).keys() if matrices else ()
    topology = Topology(
        gpus=tuple(gpus),
        links=links,
        numa_affinity={gpu: v.get("affinity") for gpu, v in numa.items()},
        matrices={k: v for k, v in matrices.items() if k != "link type"},
    )
    return topology, warnings
