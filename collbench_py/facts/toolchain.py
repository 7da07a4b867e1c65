"""The toolchain nccl-tests (or rccl-tests) is built with: homes, NCCL version, flags, make arguments.

The node reports what it has (collbench_py/node/toolchain_probe.py, run by the nccl_tests role);
the choice is made here, from that report and the role's variables:

- CUDA_HOME, NCCL_HOME, ROCm: the given path, else the first candidate that has the file that
  proves it (MARKER). NCCL's candidates: first the nvidia-nccl-cu12/cu13 wheel of the node's
  Pythons (the NCCL the node's torch loads), then the configured ones (a system NCCL, often an
  older package left by the image). CUDA's: the configured ones, then /usr/local/cuda-*, highest
  first.
- the suite: `amd` where ROCm is found and no CUDA toolkit is, `nvidia` otherwise (under `auto`).
- the NCCL picked, its version from include/nccl.h, where it came from, and the others passed over.
- NVCC_GENCODE: one -gencode per compute capability nvidia-smi reports, plus PTX of the highest;
  GPU_TARGETS: rocm_agent_enumerator's gfx targets without gfx000 (the CPU).
- the make arguments, with a directory of links as NCCL_HOME for a NCCL without libnccl.so (a
  wheel) and as MPI_HOME for an MPI whose headers and library are apart (RHEL).
- the problems: one message per missing piece, naming the variable that sets it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

KINDS = ("cuda", "rocm", "nccl", "rccl")
# The file that proves a directory is what it is called.
MARKER = {"cuda": "bin/nvcc", "rocm": "bin/hipcc", "nccl": "include/nccl.h", "rccl": "include/rccl/rccl.h"}
CUDA_GLOB = "/usr/local/cuda-*"
SUITES = {"nvidia": "nccl-tests", "amd": "rccl-tests"}
NCCL_LIBS = ("libnccl.so", "libnccl.so.2")  # what -lnccl links, what a pip wheel ships
# What is missing, and the variable that sets it.
WHAT = {
    "cuda": ("CUDA toolkit", "collbench_nccl_tests_cuda_home"),
    "rocm": ("ROCm", "collbench_nccl_tests_rocm_path"),
    "nccl": ("NCCL headers", "collbench_nccl_tests_nccl_home"),
    "rccl": ("RCCL headers", "collbench_nccl_tests_nccl_home"),
    "mpi": ("MPI (include/mpi.h and lib/libmpi.so)", "collbench_mpi_home or collbench_nccl_tests_mpi_home"),
}
SYSTEM_LIB_DIRS = ("/usr/lib", "/usr/lib64")  # found without LD_LIBRARY_PATH
_COMPUTE_CAP = re.compile(r"^[0-9]+\.[0-9]+$")
_GFX_TARGET = re.compile(r"^gfx[0-9a-f]+$")
_DIGITS = re.compile(r"^[0-9]+$")


@dataclass(frozen=True)
class Settings:
    """The nccl_tests role's variables that decide the toolchain (names without the role prefix)."""

    vendor: str = "auto"
    source: str = "git"
    cuda_home: str = ""
    nccl_home: str = ""
    rocm_path: str = ""
    cuda_home_candidates: tuple[str, ...] = ()
    nccl_home_candidates: tuple[str, ...] = ()
    rocm_path_candidates: tuple[str, ...] = ()
    mpi: bool = True
    gencode: str = ""
    amd_gpu_targets: str = ""
    install_dir: str = ""
    make_extra_args: tuple[str, ...] = ()
    # The node's Pythons as Ansible knows them (collbench_node.python, the interpreter set or
    # discovered), blanks and `auto*` included: node_pythons() sorts them out.
    pythons: tuple[str, ...] = ()
    probe_timeout_s: float = 120

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Settings:
        def text(key: str) -> str:
            value = data.get(key)
            return "" if value is None else str(value)

        def texts(key: str) -> tuple[str, ...]:
            return tuple("" if v is None else str(v) for v in data.get(key) or ())

        return cls(
            vendor=text("vendor") or "auto",
            source=text("source") or "git",
            cuda_home=text("cuda_home"),
            nccl_home=text("nccl_home"),
            rocm_path=text("rocm_path"),
            cuda_home_candidates=texts("cuda_home_candidates"),
            nccl_home_candidates=texts("nccl_home_candidates"),
            rocm_path_candidates=texts("rocm_path_candidates"),
            mpi=_truthy(data.get("mpi", True)),
            gencode=text("gencode"),
            amd_gpu_targets=text("amd_gpu_targets"),
            install_dir=text("install_dir"),
            make_extra_args=texts("make_extra_args"),
            pythons=texts("pythons"),
            probe_timeout_s=float(data.get("probe_timeout_s") or 120),
        )


def _truthy(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _home(path: str) -> str:
    return re.sub(r"/+$", "", path)


def node_pythons(settings: Settings) -> list[str]:
    """The Pythons whose nvidia-nccl wheel is looked for, the run's first; `python3` when none is known."""
    found: list[str] = []
    for python in settings.pythons:
        if python and not python.startswith("auto") and python not in found:
            found.append(python)
    return found or ["python3"]


def _wheels_wanted(settings: Settings) -> bool:
    return not settings.nccl_home and settings.vendor != "amd"


def probe_request(settings: Settings) -> dict[str, Any]:
    """What the node probe is asked to look at (its REQUEST_JSON)."""
    building = settings.source != "prebuilt"
    dirs = [_home(home) for kind in KINDS for home in _given_or_candidates(settings, kind)]
    return {
        "dirs": list(dict.fromkeys(dirs)),
        "globs": [] if settings.cuda_home else [CUDA_GLOB],
        "pythons": node_pythons(settings) if _wheels_wanted(settings) else [],
        "nvidia_smi": building and settings.vendor != "amd" and not settings.gencode,
        "rocm_agents": building and settings.vendor != "nvidia" and not settings.amd_gpu_targets,
        "timeout": settings.probe_timeout_s,
    }


def _given_or_candidates(settings: Settings, kind: str, found: Sequence[str] = ()) -> list[str]:
    """The directories looked in for `kind`, in order; `found`: what the probe adds (wheels, globs)."""
    given, candidates = {
        "cuda": (settings.cuda_home, [*settings.cuda_home_candidates, *found]),
        "rocm": (settings.rocm_path, list(settings.rocm_path_candidates)),
        "nccl": (settings.nccl_home, [*found, *settings.nccl_home_candidates]),
        "rccl": (settings.nccl_home or settings.rocm_path, list(settings.rocm_path_candidates)),
    }[kind]
    return [given] if given else candidates


@dataclass(frozen=True)
class Nccl:
    """The NCCL the build uses: home, version (None: no version in its nccl.h), where it came from,
    and the other NCCLs found and not used ("HOME (VERSION)")."""

    home: str
    version: str | None
    source: str
    passed_over: tuple[str, ...]


@dataclass(frozen=True)
class Toolchain:
    """The decision: what detect.yml asserts, build.yml builds with and verify.yml publishes."""

    vendor: str
    suite: str
    homes: dict[str, str]  # cuda, rocm, nccl, rccl, mpi: '' where not found
    nccl: Nccl | None  # NVIDIA only, when a NCCL was found
    gencode: str
    gpu_targets: str
    link_nccl: bool
    link_mpi: bool
    make_args: tuple[str, ...]
    ld_library_path: str
    problems: tuple[str, ...]

    def as_fact(self) -> dict[str, Any]:
        """Plain JSON types (lists, not tuples), as Ansible's facts hold them."""
        return json.loads(json.dumps(asdict(self)))


def nccl_versions(headers: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """MAJOR.MINOR.PATCH per NCCL home, from its nccl.h's #define lines; a home missing one has none."""
    versions: dict[str, str] = {}
    for home, lines in headers.items():
        parts: dict[str, str] = {}
        for line in lines:
            words = line.split()
            if len(words) == 3 and words[1].startswith("NCCL_") and _DIGITS.match(words[2]):
                parts[words[1][5:]] = words[2]
        if all(k in parts for k in ("MAJOR", "MINOR", "PATCH")):
            versions[home] = f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"
    return versions


def gencode_flags(nvidia_smi_output: str) -> str:
    """NVCC_GENCODE for the compute capabilities listed: SASS for each, PTX of the highest."""
    caps = sorted(
        {
            int(line.strip().replace(".", ""))
            for line in nvidia_smi_output.splitlines()
            if _COMPUTE_CAP.match(line.strip())
        }
    )
    flags = [f"-gencode=arch=compute_{cc},code=sm_{cc}" for cc in caps]
    if caps:
        flags.append(f"-gencode=arch=compute_{caps[-1]},code=compute_{caps[-1]}")
    return " ".join(flags)


def gpu_targets(enumerator_output: str) -> str:
    """GPU_TARGETS from rocm_agent_enumerator: the gfx targets, gfx000 (the CPU) left out."""
    targets = {line.strip() for line in enumerator_output.splitlines()}
    return ",".join(sorted(t for t in targets if _GFX_TARGET.match(t) and t != "gfx000"))


def _mpi_home(mpi: Mapping[str, Any] | None) -> str:
    return str(mpi.get("home") or "") if mpi and mpi.get("include") and mpi.get("lib") else ""


def _mpi_problem(mpi: Mapping[str, Any] | None) -> str:
    what, variable = WHAT["mpi"]
    if not mpi:
        why = "no mpirun"
    else:
        why = f"{mpi.get('mpirun')} has no {'mpi.h' if not mpi.get('include') else 'libmpi.so'}"
    return f"{what} not found: {why}: install the MPI development files or set {variable}"


def _links_mpi(settings: Settings, mpi: Mapping[str, Any] | None) -> bool:
    """MPI_HOME/include and MPI_HOME/lib are where the Makefile looks; anything else needs links."""
    if not settings.mpi or not mpi:
        return False
    home = str(mpi.get("home") or "")
    return mpi.get("include") != home + "/include" or mpi.get("lib") not in (home + "/lib", home + "/lib64")


def decide(settings: Settings, probe: Mapping[str, Any], mpi: Mapping[str, Any] | None) -> Toolchain:
    """The toolchain, from the probe's report (an empty one: the probe did not run) and collbench_mpi."""
    files = set(probe.get("files") or ())
    wheels = [w for w in probe.get("wheels") or () if isinstance(w, Mapping)]
    wheel_homes = [_home(d) for w in wheels for d in w.get("dirs") or ()]
    cuda_found = sorted((probe.get("globbed") or {}).get(CUDA_GLOB) or (), reverse=True)
    looked = {
        kind: [
            _home(h)
            for h in _given_or_candidates(settings, kind, wheel_homes if kind == "nccl" else cuda_found)
        ]
        for kind in KINDS
    }
    found = {kind: [h for h in looked[kind] if f"{h}/{MARKER[kind]}" in files] for kind in KINDS}
    homes = {kind: (found[kind][0] if found[kind] else "") for kind in KINDS}
    homes["mpi"] = _mpi_home(mpi)
    if settings.vendor != "auto":
        vendor = settings.vendor
    else:
        vendor = "amd" if homes["rocm"] and not homes["cuda"] else "nvidia"

    problems: list[str] = []
    if settings.source != "prebuilt":
        needed = ["cuda", "nccl"] if vendor == "nvidia" else ["rocm", "rccl"]
        if settings.mpi and not homes["mpi"]:
            problems.append(_mpi_problem(mpi))
        for kind in needed:
            if homes[kind]:
                continue
            what, variable = WHAT[kind]
            wheels_said = ""
            if kind == "nccl" and _wheels_wanted(settings):
                wheels_said = " nor in a nvidia-nccl wheel of " + ", ".join(node_pythons(settings))
            places = ", ".join(h + "/" for h in looked[kind])
            problems.append(f"{what} ({MARKER[kind]}) not found in {places}{wheels_said}: set {variable}")

    nccl = None
    if vendor == "nvidia" and homes["nccl"]:
        every = list(dict.fromkeys(found["nccl"]))
        versions = nccl_versions(probe.get("nccl_headers") or {})
        home = homes["nccl"]
        wheel = next((w for w in wheels if home in [_home(d) for d in w.get("dirs") or ()]), None)
        if settings.nccl_home:
            source = "collbench_nccl_tests_nccl_home"
        else:
            source = f"pip wheel of {wheel['python']}" if wheel else "system"
        passed = tuple(f"{h} ({versions.get(h, 'version unknown')})" for h in every[1:])
        nccl = Nccl(home=home, version=versions.get(home), source=source, passed_over=passed)

    gencode = settings.gencode
    if not gencode and vendor == "nvidia":
        gencode = gencode_flags(str((probe.get("nvidia_smi") or {}).get("stdout") or ""))
    targets = settings.amd_gpu_targets
    if not targets and vendor == "amd" and homes["rocm"]:
        agents = (probe.get("rocm_agents") or {}).get(homes["rocm"]) or {}
        targets = gpu_targets(str(agents.get("stdout") or ""))

    libs = {name for name in NCCL_LIBS if homes["nccl"] and f"{homes['nccl']}/lib/{name}" in files}
    # nccl-tests links -lnccl, which needs libnccl.so; a pip wheel ships only libnccl.so.2.
    link_nccl = vendor == "nvidia" and libs == {"libnccl.so.2"}
    link_mpi = _links_mpi(settings, mpi)
    suite = SUITES.get(vendor, SUITES["nvidia"])
    suite_dir = f"{settings.install_dir}/{suite}"
    return Toolchain(
        vendor=vendor,
        suite=suite,
        homes=homes,
        nccl=nccl,
        gencode=gencode,
        gpu_targets=targets,
        link_nccl=link_nccl,
        link_mpi=link_mpi,
        make_args=tuple(
            make_args(
                settings,
                vendor,
                homes,
                suite_dir,
                gencode=gencode,
                targets=targets,
                link_nccl=link_nccl,
                link_mpi=link_mpi,
            )
        ),
        ld_library_path=ld_library_path(settings, vendor, homes, mpi),
        problems=tuple(problems),
    )


def make_args(
    settings: Settings,
    vendor: str,
    homes: Mapping[str, str],
    suite_dir: str,
    *,
    gencode: str,
    targets: str,
    link_nccl: bool,
    link_mpi: bool,
) -> list[str]:
    """The make arguments (NAME=value), the role's extra ones last: they are the build's identity."""
    args: list[str] = []
    if settings.mpi:
        args += ["MPI=1", "MPI_HOME=" + (f"{suite_dir}/mpi-home" if link_mpi else homes["mpi"])]
    if vendor == "nvidia":
        nccl = f"{suite_dir}/nccl-home" if link_nccl else homes["nccl"]
        args += ["CUDA_HOME=" + homes["cuda"], "NCCL_HOME=" + nccl]
        if gencode:
            args.append("NVCC_GENCODE=" + gencode)
    else:
        args += ["HIP_HOME=" + homes["rocm"], "ROCM_PATH=" + homes["rocm"], "NCCL_HOME=" + homes["rccl"]]
        if targets:
            args.append("GPU_TARGETS=" + targets)
    return args + list(settings.make_extra_args)


def ld_library_path(
    settings: Settings, vendor: str, homes: Mapping[str, str], mpi: Mapping[str, Any] | None
) -> str:
    """LD_LIBRARY_PATH for the binaries: NCCL's and CUDA's (RCCL's and ROCm's) libraries, then MPI's."""
    if vendor == "nvidia":
        dirs = [
            homes["nccl"] + "/lib" if homes["nccl"] else "",
            homes["cuda"] + "/lib64" if homes["cuda"] else "",
        ]
    else:
        dirs = [
            homes["rccl"] + "/lib" if homes["rccl"] else "",
            homes["rocm"] + "/lib" if homes["rocm"] else "",
        ]
    dirs.append(str((mpi or {}).get("lib") or "") if settings.mpi else "")
    return ":".join(dict.fromkeys(d for d in dirs if d and d not in SYSTEM_LIB_DIRS))


def decide_fact(
    settings: Mapping[str, Any], probe_result: Mapping[str, Any] | None, mpi: Any
) -> dict[str, Any]:
    """decide() for Ansible: the probe task's registered result (its JSON stdout when it ran)."""
    report: Mapping[str, Any] = {}
    if probe_result and probe_result.get("rc") == 0:
        try:
            loaded = json.loads(probe_result.get("stdout") or "{}")
        except ValueError:
            loaded = {}
        report = loaded if isinstance(loaded, Mapping) else {}
    return decide(Settings.from_dict(settings), report, mpi if isinstance(mpi, Mapping) else None).as_fact()
