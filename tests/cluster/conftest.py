"""pytest fixtures for the multi-host test cluster (tests/cluster/vcluster.py).

- `cluster`: one session-wide cluster of 4 nodes. Another size: `@pytest.mark.parametrize("cluster", [6],
  indirect=True)` (or a dict of `Cluster.up` keyword arguments); each distinct parameter builds one cluster.
- `cluster_factory`: builds extra clusters on demand (`cluster_factory(nodes=2, node_profiles={...})`).

Every test that uses them is marked `cluster`. Clusters are named `pt<pid>` (or $COLLBENCH_CLUSTER_NAME),
so concurrent pytest runs never touch each other's nodes; clusters of dead pytest runs are swept at start.
Teardown runs in fixture finalizers, and again at exit and on SIGTERM/SIGHUP for an interrupted run.
Tests elsewhere can use the fixtures with `from tests.cluster.conftest import cluster, cluster_factory`.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import re
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cluster.vcluster import Cluster, ClusterError, namespaces, preflight, purge

CLUSTER_FIXTURES = {"cluster", "cluster_factory", "cluster_support"}
_live: dict[str, Cluster] = {}
_serial = itertools.count()


def _base_name() -> str:
    return os.environ.get("COLLBENCH_CLUSTER_NAME") or f"pt{os.getpid()}"


def _teardown_all() -> None:
    for name in list(_live):
        with contextlib.suppress(Exception):
            _live.pop(name).down()


def _interrupt_on_signal(signum: int, _frame: object) -> None:
    # As for Ctrl-C: pytest stops the session and runs the fixture finalizers; atexit is the backstop.
    raise KeyboardInterrupt(f"signal {signum}")


def _sweep_dead_runs() -> None:
    """Remove clusters left by pytest runs that were killed before they could clean up."""
    names = {m[1] for ns in namespaces("pt") if (m := re.match(r"(pt(\d+)[a-z0-9]*)-", ns))}
    for name in names:
        pid = int(re.match(r"pt(\d+)", name)[1])
        if pid != os.getpid() and not Path(f"/proc/{pid}").exists():
            purge(name)


def _require_cluster_support() -> None:
    if os.geteuid() != 0:
        pytest.skip("the SSH test cluster needs root (network namespaces)")
    try:
        preflight()
    except ClusterError as error:
        if "network namespaces" in str(error):
            pytest.skip(f"ip netns unavailable: {error}")
        pytest.fail(str(error), pytrace=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def cluster_support() -> Iterator[None]:
    """Skip (no root, no `ip netns`) or fail (a tool missing) unless clusters can be built; arm teardown."""
    _require_cluster_support()
    _sweep_dead_runs()
    atexit.register(_teardown_all)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) in (signal.SIG_DFL, None):
            signal.signal(signum, _interrupt_on_signal)
    yield
    _teardown_all()


def _build(tmp_root: Path, options: dict) -> Cluster:
    serial = next(_serial)
    name = options.pop("name", None) or (f"{_base_name()}c{serial}" if serial else _base_name())
    workdir = tmp_root / name
    try:
        cluster = Cluster.up(name=name, workdir=workdir, **options)
    except ClusterError as error:
        pytest.fail(f"test cluster {name} did not come up: {error}", pytrace=False)
    _live[name] = cluster
    return cluster


@pytest.fixture(scope="session")
def cluster_factory(
    cluster_support: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., Cluster]]:
    built: list[Cluster] = []

    def make(**options: object) -> Cluster:
        cluster = _build(tmp_path_factory.mktemp("vcluster"), dict(options))
        built.append(cluster)
        return cluster

    yield make
    for cluster in built:
        cluster.down()  # if this raises, the rest stay in _live for the atexit backstop
        _live.pop(cluster.name, None)


@pytest.fixture(scope="session")
def cluster(
    cluster_support: None, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    param = getattr(request, "param", 4)
    options = dict(param) if isinstance(param, dict) else {"nodes": int(param)}
    built = _build(tmp_path_factory.mktemp("vcluster"), options)
    try:
        yield built
    finally:
        _live.pop(built.name, None)
        built.down()
