"""Where a node's MPI is: the mpirun to launch with, its install prefix, and what a build needs.

Distributions put Open MPI in different places: Debian and Ubuntu have `mpirun` on the PATH and the
headers under /usr/lib/<triplet>/openmpi; RHEL, Rocky and Fedora keep it off the PATH in
/usr/lib64/openmpi/bin with the headers in /usr/include/openmpi-x86_64; HPC-X and MLNX_OFED bring
their own under /opt/hpcx/ompi and /usr/mpi/gcc/openmpi-*. The node reports what exists (the
facts role's MPI probe: the PATH's mpirun, the candidates found, each one's `ompi_info --path all
--parsable` and which of the header and library files exist); the choice is made here.
"""

from __future__ import annotations

import posixpath
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

# Looked for after the PATH's mpirun, in this order (globs expanded on the node).
MPIRUN_CANDIDATES = (
    "/usr/lib64/openmpi/bin/mpirun",
    "/opt/hpcx/ompi/bin/mpirun",
    "/usr/mpi/gcc/openmpi-*/bin/mpirun",
)
HEADER = "mpi.h"
LIBRARY = "libmpi.so"


@dataclass(frozen=True)
class MpiInstall:
    """One MPI: `mpirun` (absolute path), `prefix` (for `mpirun --prefix`), `home` (MPI_HOME for a
    build), `include` (holds mpi.h) and `lib` (holds libmpi.so); the last two are None where the
    development files are not installed."""

    mpirun: str
    prefix: str
    home: str
    include: str | None
    lib: str | None

    def as_fact(self) -> dict[str, Any]:
        return asdict(self)


def parse_ompi_info_paths(text: str | None) -> dict[str, str]:
    """`ompi_info --path all --parsable` (or `--path prefix`): `path:prefix:/usr` -> {'prefix': '/usr'}."""
    paths: dict[str, str] = {}
    for line in (text or "").splitlines():
        kind, _, rest = line.strip().partition(":")
        name, _, value = rest.partition(":")
        if kind == "path" and name and value.startswith("/"):
            paths.setdefault(name, value.rstrip("/") or "/")
    return paths


def _install_root(mpirun: str) -> str:
    """/usr/lib64/openmpi/bin/mpirun -> /usr/lib64/openmpi."""
    return posixpath.dirname(posixpath.dirname(posixpath.normpath(mpirun)))


def candidate_dirs(mpirun: str, ompi_info: str | None) -> tuple[list[str], list[str]]:
    """Directories that may hold mpi.h and libmpi.so for this mpirun, best first.

    What Open MPI says it was installed with (incdir, libdir) comes first; then the layout of an
    install tree around the mpirun (<root>/include, <root>/lib, <root>/lib64).
    """
    paths = parse_ompi_info_paths(ompi_info)
    roots = [paths["prefix"]] if "prefix" in paths else []
    roots.append(_install_root(mpirun))
    includes = [paths["incdir"]] if "incdir" in paths else []
    libs = [paths["libdir"]] if "libdir" in paths else []
    for root in roots:
        includes.append(posixpath.join(root, "include"))
        libs += [posixpath.join(root, "lib"), posixpath.join(root, "lib64")]
    return list(dict.fromkeys(includes)), list(dict.fromkeys(libs))


def files_to_check(mpiruns: Mapping[str, str | None], home: str | None = None) -> list[str]:
    """Every header and library path whose existence the choice depends on (the node checks them)."""
    files: list[str] = []
    for mpirun, ompi_info in mpiruns.items():
        includes, libs = candidate_dirs(mpirun, ompi_info)
        files += [posixpath.join(d, HEADER) for d in includes] + [posixpath.join(d, LIBRARY) for d in libs]
    if home:
        files += [posixpath.join(home, "bin", "mpirun"), posixpath.join(home, "include", HEADER)]
        files += [posixpath.join(home, d, LIBRARY) for d in ("lib", "lib64")]
    return list(dict.fromkeys(files))


def _first_with(dirs: Sequence[str], name: str, existing: Collection[str]) -> str | None:
    return next((d for d in dirs if posixpath.join(d, name) in existing), None)


def describe(mpirun: str, ompi_info: str | None, existing: Collection[str]) -> MpiInstall:
    """The install that this mpirun belongs to."""
    paths = parse_ompi_info_paths(ompi_info)
    prefix = paths.get("prefix") or _install_root(mpirun)
    includes, libs = candidate_dirs(mpirun, ompi_info)
    include, lib = _first_with(includes, HEADER, existing), _first_with(libs, LIBRARY, existing)
    # MPI_HOME: a directory with include/ and lib/ side by side where there is one (Debian's
    # /usr/lib/<triplet>/openmpi), else the prefix (the build then links the two into one).
    parent = posixpath.dirname(include) if include else None
    home = parent if parent and lib and posixpath.dirname(lib) == parent else prefix
    return MpiInstall(mpirun=mpirun, prefix=prefix, home=home, include=include, lib=lib)


def detect_mpi(
    path_mpirun: str | None,
    mpiruns: Mapping[str, str | None],
    existing: Collection[str],
    home: str | None = None,
) -> MpiInstall | None:
    """The MPI to use, or None when no mpirun was found.

    `path_mpirun`: the PATH's mpirun (absolute) or None; `mpiruns`: every mpirun found (the PATH's
    and the candidates that exist) with its `ompi_info --path all --parsable` output (None where
    there is no ompi_info: not Open MPI); `existing`: which of `files_to_check` exist; `home`: the
    user's collbench_mpi_home, which wins when it has bin/mpirun. Otherwise the first mpirun, the
    PATH's first, that has both mpi.h and libmpi.so; else the first one (enough to launch).
    """
    if home:
        home = posixpath.normpath(home)
        mpirun = posixpath.join(home, "bin", "mpirun")
        if mpirun in existing:
            found = describe(mpirun, mpiruns.get(mpirun), existing)
            include = posixpath.join(home, "include")
            lib = next(
                (
                    posixpath.join(home, d)
                    for d in ("lib", "lib64")
                    if posixpath.join(home, d, LIBRARY) in existing
                ),
                None,
            )
            return MpiInstall(
                mpirun=mpirun,
                prefix=home,
                home=home,
                include=include if posixpath.join(include, HEADER) in existing else found.include,
                lib=lib or found.lib,
            )
    order = ([path_mpirun] if path_mpirun else []) + [m for m in mpiruns if m != path_mpirun]
    found = [describe(m, mpiruns.get(m), existing) for m in order]
    complete = [f for f in found if f.include and f.lib]
    return (complete or found or [None])[0]
