"""Parse speed and memory on the logs of a nightly run of a large fleet.

Builds, in a temporary directory, the run directory of a nightly run of N nodes (default 1,000)
from the real corpus samples (host names rewritten): per node six intra-node logs and its
topology, per ring pair of nodes five pair logs, and six all-hosts logs whose device blocks
list every rank; 12 N + 6 files. Each measurement parses the files with `parse_file` in a
fresh interpreter, so its peak RSS is the parser's, and keeps the pass of least CPU time of a
few (neighbours on a shared machine slow some down); the whole run is parsed once more keeping
every result in memory, as a report does. Linearity compares N/10 nodes with N nodes, and one
log of 1 MB with one of 10 MB.

    python benchmarks/parse_bench.py [--nodes N] [--quick]

This is a benchmark, not a test: it prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "data" / "corpus"
INTRA_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "sendrecv")
PAIR_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv")
TARGET_MB_S = 20.0
TARGET_RSS_MB = 500.0
TARGET_LINEARITY = 11.0

_DEVICE_HOST = re.compile(r"Rank\s+\d+\b.*?\bon\s+(\S+)\s+device")
_DEVICE_LINE = re.compile(r"^(.*?Rank\s+)(\d+)(\b.*?\bon\s+)(\S+)(\s+device.*)$", re.M)


def _samples(folder: str) -> list[str]:
    return [p.read_text(encoding="utf-8", errors="replace") for p in sorted((CORPUS / folder).glob("*.txt"))]


def _rename_hosts(text: str, hosts: list[str]) -> str:
    """Rewrite the sample's host names (in order of first appearance) to `hosts`, cycling."""
    found = list(dict.fromkeys(_DEVICE_HOST.findall(text)))
    mapping = {old: hosts[i % len(hosts)] for i, old in enumerate(found)}
    for old in sorted(mapping, key=len, reverse=True):
        text = text.replace(old, mapping[old])
    return text


def _all_hosts_log(sample: str, hosts: list[str], gpus_per_host: int = 8) -> str:
    """A sample whose device block is grown to every rank of every host (its real lines repeated)."""
    lines = list(_DEVICE_LINE.finditer(sample))
    if not lines:
        return sample
    template = lines[0]
    block = "\n".join(
        f"{template[1]}{rank:>3}{template[3]}{host}{template[5]}"
        for rank, host in enumerate(h for h in hosts for _ in range(gpus_per_host))
    )
    start, end = lines[0].start(), lines[-1].end()
    return sample[:start] + block + sample[end:]


def build_run_directory(root: Path, nodes: int) -> None:
    """Write a nightly run's logs for `nodes` nodes under `root`."""
    benchmark_logs = _samples("nccl-tests") + _samples("rccl-tests")
    pair_logs = [s for s in benchmark_logs if len(set(_DEVICE_HOST.findall(s))) >= 2] or benchmark_logs
    topologies = _samples("topo")
    hosts = [f"gpu-node-{i:04d}" for i in range(nodes)]
    turn = 0
    for index, host in enumerate(hosts):
        intra = root / "hosts" / host / "intra"
        intra.mkdir(parents=True)
        (intra.parent / "topo.txt").write_text(topologies[index % len(topologies)])
        for collective in INTRA_COLLECTIVES:
            turn += 1
            sample = benchmark_logs[turn % len(benchmark_logs)]
            (intra / f"{collective}.log").write_text(_rename_hosts(sample, [host]))
    for index in range(nodes if nodes > 2 else nodes - 1):
        pair = sorted((hosts[index], hosts[(index + 1) % nodes]))
        folder = root / "inter" / "pairs" / f"{pair[0]}--{pair[1]}"
        folder.mkdir(parents=True)
        for collective in PAIR_COLLECTIVES:
            turn += 1
            sample = pair_logs[turn % len(pair_logs)]
            (folder / f"{collective}.log").write_text(_rename_hosts(sample, pair))
    everyone = root / "inter" / "all"
    everyone.mkdir(parents=True)
    for i, collective in enumerate(INTRA_COLLECTIVES):
        sample = pair_logs[i % len(pair_logs)]
        (everyone / f"{collective}.log").write_text(_all_hosts_log(_rename_hosts(sample, hosts), hosts))


def build_one_log(path: Path, megabytes: float) -> None:
    """One log of about `megabytes` MB: the real nccl-tests samples, one after the other, repeated."""
    samples = "\n".join(_samples("nccl-tests"))
    copies = max(1, round(megabytes * 1e6 / len(samples.encode())))
    path.write_text("\n".join([samples] * copies))


# --- the measurement, in a fresh interpreter ----------------------------------------------


def _max_rss_mb() -> float:
    """Peak RSS of this process. Linux keeps ru_maxrss across fork and exec, so a fresh worker
    would report its parent's peak: read the high-water mark of this process image instead."""
    try:
        status = Path("/proc/self/status").read_text()
        return int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)[1]) / 1024  # type: ignore[index]
    except (OSError, TypeError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


def worker(paths: list[Path], keep: bool, repeat: int, times: int = 1) -> dict:
    """Parse `paths` (keeping every result when `keep`); the figures of this process, as a dict.

    With `repeat` > 1 the parse runs that many times and the fastest is kept (short timings).
    A pass parses the paths `times` times, and its times are per parse: the small input of a
    linearity pair gets a pass as long as the large one's, so that bursts of load on a shared
    machine weigh on both alike (the fastest of many short passes is a luckier draw). The
    results of one log are held to the end of the pass, so that no parse of it frees another's
    inside the clock (the large log's single parse frees nothing there either).
    """
    sys.path.insert(0, str(ROOT))  # the package, also when it is not installed
    from collbench_py.parsers import parse_file  # noqa: PLC0415
    from collbench_py.parsers.models import ParseError  # noqa: PLC0415 - imports are part of the baseline

    baseline_rss = _max_rss_mb()
    size = sum(path.stat().st_size for path in paths)
    timings = []
    for _ in range(repeat):
        # The last pass's results are let go before the clock starts: freeing them is not parsing.
        results, parsed, failed, rows = [], None, 0, 0
        wall, cpu = time.perf_counter(), time.process_time()
        for path in paths * times:
            try:
                parsed = parse_file(path)
            except ParseError:
                failed += 1
                continue
            rows += sum(len(run.rows) for run in parsed.runs)
            if keep or len(paths) == 1:
                results.append(parsed)
        timings.append(((time.process_time() - cpu) / times, (time.perf_counter() - wall) / times))
    cpu, wall = min(timings)
    return {
        "files": len(paths),
        "bytes": size,
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_rss_mb": _max_rss_mb(),
        "baseline_rss_mb": baseline_rss,
        "unparsed": failed // times,
        "rows": rows // times,
    }


@dataclass(frozen=True)
class Figures:
    label: str
    files: int
    megabytes: float
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    baseline_rss_mb: float
    unparsed: int
    rows: int

    # Rates per CPU second: on a shared machine wall time measures the neighbours too.
    @property
    def mb_per_s(self) -> float:
        return self.megabytes / self.cpu_s if self.cpu_s else float("inf")

    @property
    def files_per_s(self) -> float:
        return self.files / self.cpu_s if self.cpu_s else float("inf")


def measure(label: str, target: Path, keep: bool = False, repeat: int = 1, times: int = 1) -> Figures:
    """Parse every file under `target` (or the file itself) in a fresh interpreter."""
    options = ["--repeat", str(repeat), "--times", str(times), *(["--keep"] if keep else [])]
    result = subprocess.run(
        [sys.executable, __file__, "--worker", str(target), *options],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    data = json.loads(result.stdout)
    return Figures(
        label=label,
        files=data["files"],
        megabytes=data["bytes"] / 1e6,
        wall_s=data["wall_s"],
        cpu_s=data["cpu_s"],
        peak_rss_mb=data["peak_rss_mb"],
        baseline_rss_mb=data["baseline_rss_mb"],
        unparsed=data["unparsed"],
        rows=data["rows"],
    )


def _files_under(target: Path) -> list[Path]:
    return [target] if target.is_file() else sorted(p for p in target.rglob("*") if p.is_file())


# --- report -------------------------------------------------------------------------------


def _table(rows: list[Figures]) -> list[str]:
    columns = ("files", 7), ("MB", 7), ("wall s", 8), ("cpu s", 7), ("MB/s", 7), ("files/s", 9), ("RSS MB", 8)
    lines = [" " * 30 + "".join(f"{name:>{width}}" for name, width in columns)]
    for f in rows:
        lines.append(
            f"{f.label:<30}{f.files:>7}{f.megabytes:>7.1f}{f.wall_s:>8.2f}{f.cpu_s:>7.2f}"
            f"{f.mb_per_s:>7.1f}{f.files_per_s:>9.0f}{f.peak_rss_mb:>8.0f}"
        )
    return lines


def _verdict(ok: bool) -> str:
    return "yes" if ok else "NO"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000, help="nodes of the nightly run (default 1000)")
    parser.add_argument("--quick", action="store_true", help="100 nodes, logs of 0.2/2 MB: a smoke run")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--keep", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--repeat", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--times", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(_files_under(args.worker), args.keep, args.repeat, args.times)))
        return 0

    nodes = 100 if args.quick else args.nodes
    small_nodes = max(2, nodes // 10)
    one_log_mb = 0.2 if args.quick else 1.0
    with tempfile.TemporaryDirectory(prefix="collbench-bench-") as tmp:
        tmp_path = Path(tmp)
        build_run_directory(tmp_path / "full", nodes)
        build_run_directory(tmp_path / "tenth", small_nodes)
        build_one_log(tmp_path / "one-1x.log", one_log_mb)
        build_one_log(tmp_path / "one-10x.log", one_log_mb * 10)
        # Best of three: on a shared machine one pass can lose a good part of its CPU time to
        # the neighbours' cache traffic; the fastest pass is the parser's own cost.
        tenth = measure(f"nightly {small_nodes} nodes", tmp_path / "tenth", repeat=3, times=10)
        full = measure(f"nightly {nodes} nodes", tmp_path / "full", repeat=3)
        kept = measure(f"nightly {nodes} nodes, all kept", tmp_path / "full", keep=True)
        log_1x = measure(f"one log of {one_log_mb:g} MB", tmp_path / "one-1x.log", repeat=5, times=10)
        log_10x = measure(f"one log of {one_log_mb * 10:g} MB", tmp_path / "one-10x.log", repeat=5)

    # CPU time per byte, so the ratio holds even when 10x the nodes is not exactly 10x the bytes.
    def ratio(small: Figures, large: Figures) -> float:
        return (large.cpu_s / small.cpu_s) * (10 * small.megabytes / large.megabytes)

    files_ratio, log_ratio = ratio(tenth, full), ratio(log_1x, log_10x)
    peak_rss = max(f.peak_rss_mb for f in (tenth, full, kept, log_1x, log_10x))
    worst_ratio = max(files_ratio, log_ratio)
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    lines = [
        f"collbench parse benchmark: a nightly run of {nodes} nodes ({full.files} files) built from "
        f"{sum(1 for _ in CORPUS.glob('*/*.txt'))} real corpus samples; {os.cpu_count()} CPUs, load {load}",
        "",
        *_table([tenth, full, kept, log_1x, log_10x]),
        "",
        "MB/s and files/s per CPU second, of the fastest of 3 passes (5 for one log; the smaller input",
        "of each linearity pair is parsed 10 times a pass); RSS: peak of the parsing process; 'all kept'",
        "(one pass) holds every result in memory as a report does.",
        f"Rows parsed: {full.rows}; files not recognised: {full.unparsed}.",
        f"RSS of the interpreter with the package imported, before parsing: {full.baseline_rss_mb:.0f} MB",
        f"linearity (CPU time for 10x the input): {files_ratio:.1f}x over files, {log_ratio:.1f}x in one log",
        f"targets: >= {TARGET_MB_S:g} MB/s: {_verdict(full.mb_per_s >= TARGET_MB_S)}; "
        f"peak RSS < {TARGET_RSS_MB:g} MB: {_verdict(peak_rss < TARGET_RSS_MB)}; "
        f"10x input <= {TARGET_LINEARITY:g}x time: {_verdict(worst_ratio <= TARGET_LINEARITY)}",
    ]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
