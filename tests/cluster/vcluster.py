"""A real multi-host SSH cluster on one machine, built from network namespaces.

Each node is a network namespace with `eth0` on a bridge (the bridge lives in a namespace of its own; the
root namespace gets no address). A per-node anchor process holds the node's UTS and mount namespaces, in
which per-node copies of /run, /etc/hosts, /etc/resolv.conf, /etc/passwd (root's home is
`<workdir>/nodes/<host>/home`) and the machine ids are bind-mounted; a real sshd runs inside them, so every
ssh session sees its own hostname, hosts file and home. The rest of the filesystem is this machine's.

Usage: `python -m tests.cluster.vcluster up|down|status --nodes N --name NAME [--workdir DIR]`.
Must run as root. See tests/cluster/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
TOPOLOGIES = HERE.parent / "data" / "corpus" / "topo"
NVIDIA_SMI = HERE / "nvidia-smi"
NCCL_TESTS_STANDIN = HERE / "nccl_tests_standin.py"
NODE_STANDINS = HERE / "node_standins.py"
# Tools the node checks run, answered by node_standins.py on a node with rails (HCA k = rail k).
NODE_STANDIN_TOOLS = ("ib_write_bw", "ibstat", "ibv_devinfo", "ibdev2netdev", "nvbandwidth")
PREBUILT_STANDINS = (
    "nvbandwidth",
    "ib_write_bw",
    "ib_read_bw",
    "ib_send_bw",
    "ib_write_lat",
    "ib_read_lat",
    "ib_send_lat",
)
RELAY_PORT = 18600  # the rail relay on each rail bridge (loopback through a rail, node_standins.py)
DEFAULT_RAIL_RATE = "40mbit"
# ib_write_bw stand-in: reported Gb/s per measured Gb/s. A tbf link of DEFAULT_RAIL_RATE carries ~96 % of
# it as TCP payload (38.4-39.3 Mbit/s measured); this factor makes that read ~400 Gb/s, as a healthy
# 400G HCA does (399.6-399.9 on real nodes).
RAIL_REPORT_FACTOR = 10400.0
# nvidia-smi --query-gpu answers of an idle 8x H100 node (PCIe link power-managed below its max gen).
IDLE_H100_QUERY = HERE.parent / "data" / "nvidia-smi" / "hgx-h100-idle-query-gpu.csv"
NCCL_TESTS_BINARIES = (
    "all_reduce_perf",
    "all_gather_perf",
    "reduce_scatter_perf",
    "alltoall_perf",
    "broadcast_perf",
    "sendrecv_perf",
)
INTERFACES = ("mgmt", "data")
NAME_PATTERN = re.compile(r"[a-z][a-z0-9]{0,19}")
SSHD = "/usr/sbin/sshd"
NETNS_DIR = Path("/run/netns")
NODE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
REQUIRED_TOOLS = ("ip", "tc", "nsenter", "unshare", "ssh", "ssh-keygen", "nc", SSHD)


class ClusterError(RuntimeError):
    """The cluster cannot be built or used; the message says why."""


@dataclass(frozen=True)
class GpuProfile:
    """What a node's stand-in nvidia-smi reports: a real topology capture plus the GPU's datasheet values."""

    topology: str  # file name under tests/data/corpus/topo/
    name: str  # as nvidia-smi and nccl-tests device lines print it
    memory_mib: int
    compute_cap: str
    power_limit_w: int
    max_sm_clock_mhz: int
    pcie_gen: int
    pcie_width: int = 16
    driver_version: str = "580.95.05"  # newest driver named in the topology meta files
    cuda_version: str = "13.0"


# GPU names as the corpus' nccl-tests device lines print them; driver versions where a meta file names one.
_H100 = {
    "name": "NVIDIA H100 80GB HBM3",
    "memory_mib": 81559,
    "compute_cap": "9.0",
    "power_limit_w": 700,
    "max_sm_clock_mhz": 1980,
    "pcie_gen": 5,
}
_A100 = {
    "name": "NVIDIA A100-SXM4-80GB",
    "memory_mib": 81920,
    "compute_cap": "8.0",
    "power_limit_w": 400,
    "max_sm_clock_mhz": 1410,
    "pcie_gen": 4,
}
GPU_PROFILES: dict[str, GpuProfile] = {
    "hgx-h100": GpuProfile(topology="hgx-h100-nv18-8nics-gpu-numa-id-spaces-sglang.txt", **_H100),
    "hgx-h100-12nic": GpuProfile(topology="hgx-h100-12nics-numa-off-single-node-tabs-prompt.txt", **_H100),
    "dgx-a100": GpuProfile(topology="dgx-a100-nv12-10nics-tabs-numa.txt", **_A100),
    "a100-4gpu": GpuProfile(topology="a100-sxm4-80gb-4gpu-nv12-gpu-numa-id.txt", **_A100),
    "v100-4gpu": GpuProfile(
        topology="aws-p3-8xlarge-v100-nv1-nv2-numa-na.txt",
        name="Tesla V100-SXM2-16GB",
        memory_mib=16160,
        compute_cap="7.0",
        power_limit_w=300,
        max_sm_clock_mhz=1530,
        pcie_gen=3,
        driver_version="460.67",
        cuda_version="11.2",
    ),
    "rtx-a4000": GpuProfile(
        topology="rtx-a4000-4gpu-node-threadripper.txt",
        name="NVIDIA RTX A4000",
        memory_mib=16376,
        compute_cap="8.6",
        power_limit_w=140,
        max_sm_clock_mhz=2100,
        pcie_gen=4,
    ),
}
DEFAULT_PROFILE = "hgx-h100"


def nvidia_smi_config(profile: str) -> dict[str, object]:
    """What the stand-in nvidia-smi of a node with GPU profile `profile` reads (its nvidia-smi.json)."""
    chosen = GPU_PROFILES[profile]
    return {**asdict(chosen), "topology": str(TOPOLOGIES / chosen.topology), "profile": profile}


def default_node_python() -> str:
    """The system python3, as a real node has it (the nodes share this machine's filesystem)."""
    return (
        "/usr/bin/python3" if Path("/usr/bin/python3").exists() else shutil.which("python3") or sys.executable
    )


def default_name() -> str:
    return os.environ.get("COLLBENCH_CLUSTER_NAME") or "cb"


def check_name(name: str) -> str:
    if not NAME_PATTERN.fullmatch(name):
        raise ClusterError(
            f"cluster name {name!r}: use 1-20 lowercase letters and digits, starting with a letter"
        )
    return name


def subnet_octet(name: str) -> int:
    """Second octet of the cluster's 10.X.0.0/24, stable per name, so clusters of different names differ."""
    return 32 + zlib.crc32(name.encode()) % 200


def default_workdir(name: str) -> Path:
    return Path(tempfile.gettempdir()) / f"collbench-vcluster-{name}"


@dataclass(frozen=True)
class Node:
    host: str
    index: int
    namespace: str
    address: str
    bridge_port: str
    profile: str
    data_address: str = ""  # fleet clusters: the address on eth1, the data network
    data_port: str = ""  # fleet clusters: eth1's peer on the data bridge
    rail_addresses: tuple[str, ...] = ()  # rails: the address of rail0..railN-1 (HCA mlx5_k = rail k)


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    nodes: int = 4
    group: str = "gpu_nodes"
    python: str = ""  # ansible_python_interpreter; "" picks default_node_python()
    profile: str = DEFAULT_PROFILE
    node_profiles: Mapping[str, str] = field(default_factory=dict)
    host_vars: Mapping[str, object] = field(default_factory=dict)
    node_ssh: bool = True  # seed each node's ~/.ssh with the cluster key and known_hosts (ssh between nodes)
    fleet: bool = False  # nodes as rented GPU nodes are: eth0 management, eth1 data, hostname on 127.0.1.1
    hang_nvidia_smi: Sequence[str] = ()  # hosts whose nvidia-smi hangs on every call
    rails: int = 0  # data interfaces rail0.. on bridges of their own, with HCA and nvbandwidth stand-ins
    rail_rate: str = DEFAULT_RAIL_RATE  # every rail link's speed (tbf both ends), as a leaf port's


def run(
    argv: Sequence[str], *, check: bool = True, timeout: float = 30, **kwargs
) -> subprocess.CompletedProcess:
    result = subprocess.run(
        list(argv),
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        **kwargs,
    )
    if check and result.returncode != 0:
        raise ClusterError(f"{shlex.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def preflight() -> None:
    """Fail with one clear message when this machine cannot host a cluster."""
    if os.geteuid() != 0:
        raise ClusterError("the test cluster needs root (network namespaces, bind mounts)")
    missing = [tool for tool in REQUIRED_TOOLS if not shutil.which(tool)]
    if missing:
        raise ClusterError(
            f"missing tools: {', '.join(missing)} "
            "(Debian: openssh-server openssh-client iproute2 netcat-openbsd util-linux)"
        )
    probe = f"vcprobe{os.getpid()}"
    result = run(["ip", "netns", "add", probe], check=False)
    if result.returncode != 0:
        raise ClusterError(f"cannot create network namespaces here: {result.stderr.strip()}")
    run(["ip", "netns", "del", probe], check=False)


def namespaces(prefix: str) -> list[str]:
    """Named network namespaces (as `ip netns` keeps them) starting with `prefix`."""
    try:
        return sorted(entry for entry in os.listdir(NETNS_DIR) if entry.startswith(prefix))
    except FileNotFoundError:
        return []


def pids_by_namespace(names: Sequence[str]) -> dict[str, list[int]]:
    """Pids in each named network namespace, in one pass over /proc (what `ip netns pids` does per name)."""
    inodes = {}
    for name in names:
        with contextlib.suppress(OSError):
            stat = os.stat(NETNS_DIR / name)
            inodes[stat.st_dev, stat.st_ino] = name
    found: dict[str, list[int]] = {name: [] for name in names}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = os.stat(f"/proc/{entry}/ns/net")
                if (stat.st_dev, stat.st_ino) in inodes:
                    found[inodes[stat.st_dev, stat.st_ino]].append(int(entry))
    return found


def namespace_pids(namespace: str) -> list[int]:
    return pids_by_namespace([namespace])[namespace]


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def is_anchor(pid: int, cluster: str, host: str) -> bool:
    """True once `pid` has exec'd into host's namespace holder: argv[0] is the marker purge() looks for.
    Before, it is the bash that sets the namespace up; during the exec its cmdline reads empty."""
    return cmdline(pid).split(" ")[0] == f"vcluster-anchor-{cluster}-{host}"


def process_state(pid: int) -> str:
    """The state letter of /proc/PID/stat (R, S, T, Z, ...), or "" when the process is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    return process_state(pid) not in ("", "Z")


def kill_all(pids: Sequence[int], timeout: float = 5) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.01)


def purge(name: str) -> None:
    """Remove every trace of cluster `name`: its processes, namespaces (and so its veths and mounts)."""
    names = namespaces(f"{name}-")
    pids = [pid for group in pids_by_namespace(names).values() for pid in group]
    # An anchor whose namespace was deleted behind our back still carries the cluster's marker.
    marker = f"vcluster-anchor-{name}-"
    pids += [int(e) for e in os.listdir("/proc") if e.isdigit() and cmdline(int(e)).startswith(marker)]
    kill_all(sorted(set(pids)))
    if names:
        _batch(None, [f"netns del {namespace}" for namespace in names], check=False)


def sshd_config(host_key: Path, authorized_keys: Path, set_env: str, *, accept_env: bool = True) -> str:
    """sshd_config of a test-cluster host (a node, or the Slurm head): root by key only, `set_env`
    (`NAME=value ...`) in every session."""
    return "\n".join(
        [
            "Port 22",
            "ListenAddress 0.0.0.0",
            f"HostKey {host_key}",
            "PidFile /run/sshd.pid",
            # The cluster key, and the user's own file as on any node (keys added during a run).
            f"AuthorizedKeysFile {authorized_keys} .ssh/authorized_keys",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            # The workdir may sit under a world-writable temp dir, which StrictModes would refuse.
            "StrictModes no",
            "UseDNS no",
            "MaxStartups 200",
            "MaxSessions 200",
            "PrintMotd no",
            *(["AcceptEnv LANG LC_*"] if accept_env else []),
            f"SetEnv {set_env}",
            "Subsystem sftp /usr/lib/openssh/sftp-server",
            "",
        ]
    )


def parse_rate(rate: str) -> int:
    """tc rate string (`100mbit`, `1gbit`, `500kbit`) in bits per second."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", rate.strip().lower())
    if not match:
        raise ClusterError(f"rate {rate!r}: use a tc rate like 100mbit, 1gbit or 500kbit")
    return int(float(match[1]) * {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}[match[2]])


def listening_on_22(pid: int) -> bool:
    """Whether the network namespace of `pid` has a TCP listener on port 22 (read from /proc, no exec)."""
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                if local.endswith(":0016") and state == "0A":
                    return True
    return False


class Cluster:
    """A running cluster. Build one with `Cluster.up(...)`, find a running one with `Cluster.attach(...)`."""

    def __init__(self, spec: ClusterSpec, workdir: Path) -> None:
        self.spec = spec
        self.name = spec.name
        self.workdir = workdir
        octet = subnet_octet(spec.name)
        self.subnet = f"10.{octet}.0.0/24"
        self.bridge_namespace = f"{spec.name}-br"
        self.gateway = f"10.{octet}.0.1"  # on the bridge; forwards nothing
        self.data_subnet = f"10.{octet}.1.0/24" if spec.fleet else ""
        self.nodes = [
            Node(
                host=f"node{k}",
                index=k,
                namespace=f"{spec.name}-node{k}",
                address=f"10.{octet}.0.{10 + k}",
                bridge_port=f"p{k}",
                profile=spec.node_profiles.get(f"node{k}", spec.profile),
                data_address=f"10.{octet}.1.{10 + k}" if spec.fleet else "",
                data_port=f"d{k}" if spec.fleet else "",
                rail_addresses=tuple(f"10.{octet}.{10 + r}.{10 + k}" for r in range(spec.rails)),
            )
            for k in range(1, spec.nodes + 1)
        ]
        self._children: list[subprocess.Popen] = []

    # ---- public surface -------------------------------------------------------------------------------

    @property
    def hosts(self) -> list[str]:
        return [node.host for node in self.nodes]

    @property
    def inventory_path(self) -> Path:
        return self.workdir / "inventory.yml"

    @property
    def ssh_config_path(self) -> Path:
        return self.workdir / "ssh" / "ssh_config"

    @property
    def known_hosts_path(self) -> Path:
        return self.workdir / "ssh" / "known_hosts"

    @property
    def key_path(self) -> Path:
        return self.workdir / "ssh" / "id_ed25519"

    def node(self, host: str) -> Node:
        for node in self.nodes:
            if node.host == host:
                return node
        raise ClusterError(f"no host {host!r} in cluster {self.name} (hosts: {', '.join(self.hosts)})")

    def address(self, host: str, interface: str = "mgmt") -> str:
        """`host`'s address on its management (eth0) or data (eth1 in a fleet cluster) interface."""
        node = self.node(host)
        return node.data_address if self._device(interface) == "eth1" else node.address

    def home(self, host: str) -> Path:
        return self._node_dir(host) / "home"

    @classmethod
    def up(
        cls,
        nodes: int = 4,
        name: str | None = None,
        workdir: Path | str | None = None,
        *,
        group: str = "gpu_nodes",
        python: str = "",
        profile: str = DEFAULT_PROFILE,
        node_profiles: Mapping[str, str] | None = None,
        host_vars: Mapping[str, object] | None = None,
        node_ssh: bool | None = None,
        fleet: bool = False,
        hang_nvidia_smi: Sequence[str] = (),
        rails: int = 0,
        rail_rate: str = DEFAULT_RAIL_RATE,
    ) -> Cluster:
        """Build and start a cluster (a stale one of the same name is removed first).

        fleet=True builds nodes as rented GPU nodes are (see tests/cluster/README.md); node_ssh defaults
        to True, and to False in a fleet (no ssh between nodes until the project sets it up)."""
        spec = ClusterSpec(
            name=check_name(name or default_name()),
            nodes=nodes,
            group=group,
            python=python or default_node_python(),
            profile=profile,
            node_profiles=dict(node_profiles or {}),
            host_vars=dict(host_vars or {}),
            node_ssh=(not fleet) if node_ssh is None else node_ssh,
            fleet=fleet,
            hang_nvidia_smi=list(hang_nvidia_smi),
            rails=rails,
            rail_rate=rail_rate,
        )
        if not 0 <= rails <= 8:
            raise ClusterError(f"rails {rails}: use 0 to 8")
        parse_rate(rail_rate)
        if not 1 <= nodes <= 200:
            raise ClusterError(f"--nodes {nodes}: use 1 to 200")
        for wanted in {spec.profile, *spec.node_profiles.values()}:
            if wanted not in GPU_PROFILES:
                raise ClusterError(f"GPU profile {wanted!r}: choose from {', '.join(GPU_PROFILES)}")
        preflight()
        cluster = cls(spec, Path(workdir) if workdir else default_workdir(spec.name))
        unknown = set(spec.node_profiles) - set(cluster.hosts)
        if unknown:
            raise ClusterError(f"node_profiles names hosts not in the cluster: {', '.join(sorted(unknown))}")
        unknown = set(spec.hang_nvidia_smi) - set(cluster.hosts)
        if unknown:
            raise ClusterError(
                f"hang_nvidia_smi names hosts not in the cluster: {', '.join(sorted(unknown))}"
            )
        workdir_files = cluster.workdir.is_dir() and any(cluster.workdir.iterdir())
        if workdir_files and not (cluster.workdir / "cluster.json").exists():
            raise ClusterError(f"workdir {cluster.workdir} holds other files: use a new or empty directory")
        purge(spec.name)
        try:
            cluster._build()
        except BaseException:
            cluster.down()
            raise
        return cluster

    @classmethod
    def attach(cls, name: str | None = None, workdir: Path | str | None = None) -> Cluster:
        """The running cluster `name`, from the state file `up` left in its workdir."""
        name = check_name(name or default_name())
        root = Path(workdir) if workdir else default_workdir(name)
        state = root / "cluster.json"
        if not state.exists():
            raise ClusterError(f"no cluster {name} at {root} (no {state.name})")
        data = json.loads(state.read_text())
        return cls(ClusterSpec(**data["spec"]), root)

    def ssh(
        self,
        host: str,
        argv: Sequence[str],
        *,
        timeout: float = 60,
        check: bool = False,
        input: str | None = None,
    ) -> subprocess.CompletedProcess:
        """Run `argv` on `host` over real ssh (host key checked) from this (root) namespace."""
        command = ["ssh", "-F", str(self.ssh_config_path), host, "--", shlex.join(argv)]
        result = subprocess.run(
            command,
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
        if check and result.returncode != 0:
            raise ClusterError(f"ssh {host} {shlex.join(argv)} failed ({result.returncode}): {result.stderr}")
        return result

    def exec(
        self, host: str, argv: Sequence[str], *, timeout: float = 60, check: bool = False
    ) -> subprocess.CompletedProcess:
        """Run `argv` inside `host`'s namespaces without ssh (its hostname, hosts file, PATH and HOME)."""
        result = subprocess.run(
            [*self._enter(host), *argv],
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            env=self._node_env(host),
        )
        if check and result.returncode != 0:
            raise ClusterError(f"{host}: {shlex.join(argv)} failed ({result.returncode}): {result.stderr}")
        return result

    def popen(self, host: str, argv: Sequence[str], **kwargs) -> subprocess.Popen:
        """Start `argv` inside `host`'s namespaces in the background (a server for a test, say)."""
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.Popen([*self._enter(host), *argv], env=self._node_env(host), **kwargs)

    def shape(
        self, host: str, rate: str = "100mbit", *, burst: str | None = None, interface: str = "mgmt"
    ) -> None:
        """Limit one of `host`'s links to `rate` both ways: tbf on the node's end and on its bridge port.

        interface: "mgmt" (eth0) or "data" (eth1 in a fleet cluster; eth0 carries both otherwise)."""
        bits = parse_rate(rate)
        burst = burst or f"{max(16 * 1024, bits // 8 // 250)}b"
        tbf = ["root", "tbf", "rate", rate, "burst", burst, "latency", "50ms"]
        for namespace, device in self._link_ends(host, interface):
            run(["tc", "-n", namespace, "qdisc", "replace", "dev", device, *tbf])

    def shape_pair(
        self, a: str, b: str, rate: str = "100mbit", *, interface: str = "mgmt", others: str = "100gbit"
    ) -> None:
        """Limit only the traffic between `a` and `b` to `rate`, both ways: a bad LINK, where `shape`
        makes a bad node. On each node's end an htb qdisc: a u32 filter on the peer's address sends
        that traffic to a class of `rate`, everything else goes to a class of `others` (by default
        more than any link here carries; the fabric's rate where `shape` limits the other nodes).
        This kernel has no prio qdisc, hence htb. It replaces a `shape` or an earlier `shape_pair` of
        the same ends (their bridge ports keep theirs); `unshape` undoes it."""
        if a == b:
            raise ClusterError(f"shape_pair needs two hosts, got {a} twice")
        parse_rate(rate)  # clear errors for bad rates, before any tc
        parse_rate(others)
        device = self._device(interface)
        for host, peer in ((a, b), (b, a)):
            tc = ["tc", "-n", self.node(host).namespace]
            run([*tc, "qdisc", "del", "dev", device, "root"], check=False)  # a shape() or an earlier pair
            run([*tc, "qdisc", "add", "dev", device, "root", "handle", "1:", "htb", "default", "1"])
            for classid, class_rate in (("1:1", others), ("1:2", rate)):
                htb = ["htb", "rate", class_rate, "ceil", class_rate]
                run([*tc, "class", "add", "dev", device, "parent", "1:", "classid", classid, *htb])
            match = ["u32", "match", "ip", "dst", f"{self.address(peer, interface)}/32", "flowid", "1:2"]
            run([*tc, "filter", "add", "dev", device, "parent", "1:", "protocol", "ip", "prio", "1", *match])

    def unshape(self, host: str, interface: str | None = None) -> None:
        """Undo `shape` on one interface of `host`, or on all of them (None)."""
        names = [interface] if interface else INTERFACES
        ends = {end for name in names for end in self._link_ends(host, name)}  # one eth0 without a fleet
        for namespace, device in sorted(ends):
            result = run(["tc", "-n", namespace, "qdisc", "del", "dev", device, "root"], check=False)
            if (
                result.returncode != 0
                and "No such file" not in result.stderr
                and "handle of zero" not in result.stderr
            ):
                raise ClusterError(f"unshape {host}: {result.stderr.strip()}")

    def shape_rail_port(self, host: str, rail: int, rate: str) -> None:
        """Limit `host`'s rail `rail` (its HCA mlx5_<rail>) to `rate` both ways: tbf on the node's
        rail interface and on its port of the rail bridge. `unshape_rails` puts the rail rate back."""
        node = self.node(host)
        if not 0 <= rail < self.spec.rails:
            raise ClusterError(f"rail {rail}: this cluster has {self.spec.rails} rails")
        bits = parse_rate(rate)
        tbf = [
            "root",
            "tbf",
            "rate",
            rate,
            "burst",
            f"{max(16 * 1024, bits // 8 // 250)}b",
            "latency",
            "50ms",
        ]
        for namespace, device in (
            (node.namespace, f"rail{rail}"),
            (self.bridge_namespace, self._rail_port(node, rail)),
        ):
            run(["tc", "-n", namespace, "qdisc", "replace", "dev", device, *tbf])

    def shape_rail(self, rail: int, rate: str) -> None:
        """Limit a whole rail (every node's link to that rail's bridge: a slow leaf switch) to `rate`."""
        for host in self.hosts:
            self.shape_rail_port(host, rail, rate)

    def unshape_rails(self, host: str | None = None) -> None:
        """Every rail of `host` (or of every node) back at the cluster's rail rate."""
        for name in [host] if host else self.hosts:
            for rail in range(self.spec.rails):
                self.shape_rail_port(name, rail, self.spec.rail_rate)

    def set_faults(self, host: str, faults: Mapping[str, object]) -> None:
        """Degrade `host`'s stand-in GPUs, NVLinks and HCA ports (faults.json; see README.md)."""
        path = self._node_dir(host) / "bin" / "faults.json"
        path.write_text(json.dumps(dict(faults), indent=2) + "\n")
        (self._node_dir(host) / "bin" / "nvlink-error-calls").unlink(missing_ok=True)

    def clear_faults(self, host: str | None = None) -> None:
        """`host` (or every node) healthy again."""
        for name in [host] if host else self.hosts:
            for leftover in ("faults.json", "nvlink-error-calls"):
                (self._node_dir(name) / "bin" / leftover).unlink(missing_ok=True)

    def stop_sshd(self, host: str) -> list[int]:
        """Kill `host`'s sshd, its open sessions included; the host stays up otherwise."""
        pids = [pid for pid in namespace_pids(self.node(host).namespace) if _is_sshd(pid)]
        kill_all(pids)
        self._reap()
        return pids

    def start_sshd(self, host: str) -> None:
        """(Re)start `host`'s sshd (after `stop_sshd`); returns once it accepts connections."""
        if not listening_on_22(self._anchor_pid(host)):
            self._start_sshd(self.node(host))
            self._wait_for_sshd([host])

    def kill_host(self, host: str, *, link_down: bool = True) -> list[int]:
        """Kill every process of `host` (sshd included); link_down also cuts its link, as a dead box."""
        node = self.node(host)
        pids = namespace_pids(node.namespace)
        kill_all(pids)
        if link_down:
            run(["ip", "-n", self.bridge_namespace, "link", "set", node.bridge_port, "down"], check=False)
        self._reap()
        return pids

    def freeze(self, host: str, pattern: str) -> list[int]:
        """SIGSTOP `host`'s processes whose command line matches the regex `pattern`; returns their pids
        once all of them are stopped."""
        return self._signal_matching(host, pattern, signal.SIGSTOP, lambda state: state in ("T", "t"))

    def thaw(self, host: str, pattern: str = ".") -> list[int]:
        """SIGCONT what `freeze` stopped (or any process matching `pattern`)."""
        return self._signal_matching(host, pattern, signal.SIGCONT, lambda state: state not in ("T", "t"))

    def processes(self, host: str) -> dict[int, str]:
        """Pid -> command line of every process in `host`'s network namespace."""
        return {pid: cmdline(pid) for pid in namespace_pids(self.node(host).namespace)}

    def status(self) -> dict[str, object]:
        """What is running: per host, whether its namespace exists and sshd listens."""
        present = set(namespaces(f"{self.name}-"))
        hosts = {}
        for node in self.nodes:
            anchor = self._anchor_pid(node.host, missing_ok=True)
            hosts[node.host] = {
                "address": node.address,
                **({"data_address": node.data_address} if node.data_address else {}),
                "namespace": node.namespace,
                "namespace_exists": node.namespace in present,
                "sshd_listening": bool(anchor and listening_on_22(anchor)),
                "profile": node.profile,
            }
        return {
            "name": self.name,
            "subnet": self.subnet,
            **({"data_subnet": self.data_subnet} if self.data_subnet else {}),
            "workdir": str(self.workdir),
            "inventory": str(self.inventory_path),
            "hosts": hosts,
        }

    def down(self, *, remove_workdir: bool = False) -> None:
        """Tear everything down: processes, namespaces, veths, mounts. Safe to call twice."""
        purge(self.name)
        self._reap()
        if remove_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ---- building ------------------------------------------------------------------------------------

    def _node_dir(self, host: str) -> Path:
        return self.workdir / "nodes" / host

    def _build(self) -> None:
        if self.workdir.exists():
            if any(self.workdir.iterdir()) and not (self.workdir / "cluster.json").exists():
                raise ClusterError(
                    f"workdir {self.workdir} holds files of something else: use a new or empty one"
                )
            shutil.rmtree(self.workdir)
        (self.workdir / "ssh").mkdir(parents=True)
        self.workdir.chmod(0o755)
        self._write_state()
        self._build_network()
        self._write_keys()
        for node in self.nodes:
            self._write_node_files(node)
        self._write_client_files()
        self._wait_for_anchors({node.host: self._start_anchor(node) for node in self.nodes})
        if self.spec.rails:
            self._start_relay()
        for node in self.nodes:
            self._start_sshd(node)
        self._wait_for_sshd()

    def _write_state(self) -> None:
        state = {"spec": asdict(self.spec), "hosts": {n.host: asdict(n) for n in self.nodes}}
        (self.workdir / "cluster.json").write_text(json.dumps(state, indent=2) + "\n")

    def _build_network(self) -> None:
        setup = [f"netns add {self.bridge_namespace}"]
        for node in self.nodes:
            setup.append(f"netns add {node.namespace}")
            setup.append(
                f"link add name eth0 netns {node.namespace} type veth peer name {node.bridge_port} "
                f"netns {self.bridge_namespace}"
            )
            if node.data_port:
                setup.append(
                    f"link add name eth1 netns {node.namespace} type veth peer name {node.data_port} "
                    f"netns {self.bridge_namespace}"
                )
        for node in self.nodes:
            for rail in range(self.spec.rails):
                setup.append(
                    f"link add name rail{rail} netns {node.namespace} type veth peer name "
                    f"{self._rail_port(node, rail)} netns {self.bridge_namespace}"
                )
        _batch(None, setup)
        bridge = [
            "link set lo up",
            "link add br0 type bridge",
            f"addr add {self.gateway}/24 dev br0",
            "link set br0 up",
        ] + [f"link set {n.bridge_port} master br0 up" for n in self.nodes]
        if self.spec.fleet:  # the data network: a switch of its own, no gateway, no route out
            bridge += ["link add br1 type bridge", "link set br1 up"]
            bridge += [f"link set {n.data_port} master br1 up" for n in self.nodes]
        for rail in range(self.spec.rails):  # one bridge per rail: the rail's leaf switch
            bridge += [
                f"link add rail{rail} type bridge",
                f"addr add {self._rail_gateway(rail)}/24 dev rail{rail}",
            ]
            bridge.append(f"link set rail{rail} up")
            bridge += [f"link set {self._rail_port(n, rail)} master rail{rail} up" for n in self.nodes]
            # The relay's way back to a node is its management link, so a loopback through a rail crosses
            # the rail once (the node's egress) and its ACKs do not queue behind its own data.
            bridge += [f"route add {n.rail_addresses[rail]}/32 via {n.address} dev br0" for n in self.nodes]
        _batch(self.bridge_namespace, bridge)
        for node in self.nodes:
            # A default route (to a gateway that forwards nothing) gives Ansible its ansible_default_ipv4.
            commands = ["link set lo up", f"addr add {node.address}/24 dev eth0", "link set eth0 up"]
            if node.data_address:
                commands += [f"addr add {node.data_address}/24 dev eth1", "link set eth1 up"]
            for rail, address in enumerate(node.rail_addresses):
                commands += [f"addr add {address}/24 dev rail{rail}", f"link set rail{rail} up"]
            _batch(node.namespace, [*commands, f"route add default via {self.gateway}"])
        for node in self.nodes:
            for rail in range(self.spec.rails):
                self.shape_rail_port(node.host, rail, self.spec.rail_rate)

    def _write_keys(self) -> None:
        keys = {"": self.key_path} | {
            node.host: self._node_dir(node.host) / "ssh_host_ed25519_key" for node in self.nodes
        }
        for key in keys.values():
            key.parent.mkdir(parents=True, exist_ok=True)
        keygens = [  # ed25519 keys are cheap, but one at a time still adds up on 16 nodes
            subprocess.Popen(
                [
                    "ssh-keygen",
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    host or f"vcluster-{self.name}",
                    "-f",
                    str(key),
                ],
                stdin=subprocess.DEVNULL,
            )
            for host, key in keys.items()
        ]
        if any(keygen.wait(timeout=30) != 0 for keygen in keygens):
            raise ClusterError("ssh-keygen failed")
        (self.workdir / "ssh" / "authorized_keys").write_text(self.key_path.with_suffix(".pub").read_text())
        known = []
        for node in self.nodes:
            kind, blob = keys[node.host].with_suffix(".pub").read_text().split()[:2]
            known.append(f"{node.host},{node.address} {kind} {blob}\n")
        self.known_hosts_path.write_text("".join(known))

    def _write_node_files(self, node: Node) -> None:
        root = self._node_dir(node.host)
        for sub in ("run/sshd", "home/.ssh", "bin", "etc"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (root / "home").chmod(0o700)
        (root / "run" / "sshd").chmod(0o755)
        etc = root / "etc"
        (etc / "hosts").write_text(self._hosts_file(node))
        (etc / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        (etc / "hostname").write_text(f"{node.host}\n")
        (etc / "machine-id").write_text(f"{uuid.uuid4().hex}\n")
        (etc / "passwd").write_text(_passwd_with_root_home(root / "home"))
        dot_ssh = root / "home" / ".ssh"
        dot_ssh.chmod(0o700)
        if self.spec.node_ssh:
            # ssh between nodes (mpirun): the cluster key and known hosts in root's per-node home.
            shutil.copy(self.key_path, dot_ssh / "id_ed25519")
            shutil.copy(self.known_hosts_path, dot_ssh / "known_hosts")
            (dot_ssh / "config").write_text("Host *\n  StrictHostKeyChecking yes\n  BatchMode yes\n")
        (root / "bin" / "nvidia-smi.json").write_text(json.dumps(self._gpu_config(node), indent=2) + "\n")
        (root / "bin" / "nvidia-smi").symlink_to(NVIDIA_SMI)
        if self.spec.rails:
            (root / "bin" / "devices.json").write_text(json.dumps(self._devices(node), indent=2) + "\n")
            for tool in NODE_STANDIN_TOOLS:
                (root / "bin" / tool).symlink_to(NODE_STANDINS)
        (root / "sshd_config").write_text(self._sshd_config(node))

    def _hosts_file(self, node: Node) -> str:
        """The node's /etc/hosts. A fleet node's is stock Ubuntu's (its own name on 127.0.1.1); the other
        nodes' names stand for the site DNS and resolve to their management addresses."""
        lines = ["127.0.0.1\tlocalhost"]
        if self.spec.fleet:
            lines.append(f"127.0.1.1\t{node.host}")
        lines.append("::1\tlocalhost ip6-localhost ip6-loopback")
        lines += [f"{n.address}\t{n.host}" for n in self.nodes if not (self.spec.fleet and n is node)]
        return "\n".join(lines) + "\n"

    def _devices(self, node: Node) -> dict[str, object]:
        """devices.json of `node`: what node_standins.py reads (HCA k on rail k, its address, the relay)."""
        hcas = [
            {
                "name": f"mlx5_{rail}",
                "rail": rail,
                "netdev": f"rail{rail}",
                "address": address,
                "gateway": self._rail_gateway(rail),
                "relay_port": RELAY_PORT,
                "lid": 11 + 16 * node.index + rail,
                "numa_node": 0 if rail < max(1, self.spec.rails // 2) else 1,
            }
            for rail, address in enumerate(node.rail_addresses)
        ]
        # another node, by name or any of its addresses -> its rail addresses (HCA k talks to HCA k)
        peers = {}
        for other in self.nodes:
            for key in (other.host, other.address, *other.rail_addresses):
                peers[key] = list(other.rail_addresses)
        return {
            "node_index": node.index,
            "address": node.address,
            "hcas": hcas,
            "peers": peers,
            "seconds": 1.0,
            "report_factor": RAIL_REPORT_FACTOR,
        }

    def _rail_port(self, node: Node, rail: int) -> str:
        return f"r{rail}n{node.index}"

    def _rail_gateway(self, rail: int) -> str:
        return f"10.{subnet_octet(self.name)}.{10 + rail}.1"

    def _start_relay(self) -> None:
        endpoints = [f"{self._rail_gateway(rail)}:{RELAY_PORT}" for rail in range(self.spec.rails)]
        log = (self.workdir / "relay.log").open("w")
        child = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                self.bridge_namespace,
                sys.executable,
                str(NODE_STANDINS),
                "relay",
                *endpoints,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        self._children.append(child)
        deadline = time.monotonic() + 10
        while not _listening(child.pid, RELAY_PORT):
            if child.poll() is not None or time.monotonic() > deadline:
                raise ClusterError(f"rail relay did not start: {(self.workdir / 'relay.log').read_text()}")
            time.sleep(0.01)

    def _gpu_config(self, node: Node) -> dict[str, object]:
        config = nvidia_smi_config(node.profile)
        if self.spec.fleet and node.profile.startswith("hgx-h100"):
            config["query_capture"] = str(IDLE_H100_QUERY)
        if node.host in self.spec.hang_nvidia_smi:
            config["hang"] = True
        return config

    def _sshd_config(self, node: Node) -> str:
        root = self._node_dir(node.host)
        keys = self.workdir / "ssh" / "authorized_keys"
        return sshd_config(root / "ssh_host_ed25519_key", keys, f"PATH={root / 'bin'}:{NODE_PATH}")

    def _write_client_files(self) -> None:
        blocks = [
            f"# ssh config for test cluster {self.name}: use with ssh -F {self.ssh_config_path} node1\n"
        ]
        for node in self.nodes:
            blocks.append(
                f"Host {node.host} {node.address}\n"
                f"  HostName {node.host}\n"
                f"  HostKeyAlias {node.host}\n"
                f"  ProxyCommand ip netns exec {node.namespace} nc 127.0.0.1 22\n"
            )
        blocks.append(
            "Host *\n"
            "  User root\n"
            f"  IdentityFile {self.key_path}\n"
            "  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.known_hosts_path}\n"
            "  GlobalKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking yes\n"
            "  BatchMode yes\n"
            "  ConnectTimeout 10\n"
            "  LogLevel ERROR\n"
        )
        self.ssh_config_path.write_text("\n".join(blocks))
        host_entries = {}
        for node in self.nodes:
            host_entries[node.host] = {
                "ansible_host": node.address,
                "vcluster_namespace": node.namespace,
                "vcluster_gpu_profile": node.profile,
                **({"vcluster_data_address": node.data_address} if node.data_address else {}),
            }
        inventory = {
            "all": {
                "vars": {
                    "ansible_user": "root",
                    "ansible_ssh_private_key_file": str(self.key_path),
                    "ansible_ssh_common_args": f"-F {self.ssh_config_path}",
                    "ansible_python_interpreter": self.spec.python,
                    **self.spec.host_vars,
                },
                "children": {self.spec.group: {"hosts": host_entries}},
            }
        }
        header = f"# Test cluster {self.name} ({self.subnet}), written by tests/cluster/vcluster.py.\n"
        self.inventory_path.write_text(header + yaml.safe_dump(inventory, sort_keys=False))

    def _start_anchor(self, node: Node) -> subprocess.Popen:
        """Start the process that holds `node`'s UTS and mount namespaces, with the per-node files mounted."""
        root = self._node_dir(node.host)
        etc = root / "etc"
        binds = [(root / "run", "/run")]
        for target in ("/etc/hosts", "/etc/resolv.conf", "/etc/passwd", "/etc/hostname", "/etc/machine-id"):
            if Path(target).exists():  # a bind needs its target; all of them exist on Debian
                binds.append((etc / Path(target).name, target))
        if Path("/var/lib/dbus/machine-id").exists():  # Ansible reads it for ansible_machine_id
            binds.append((etc / "machine-id", "/var/lib/dbus/machine-id"))
        script = "set -e\n" + "".join(f"mount --bind {shlex.quote(str(s))} {t}\n" for s, t in binds)
        script += f"hostname {node.host}\ntouch {shlex.quote(str(root / 'anchor.ready'))}\n"
        script += f"exec -a vcluster-anchor-{self.name}-{node.host} sleep infinity\n"
        unshare = ["unshare", "--uts", "--mount", "--propagation", "private", "--", "bash", "-c", script]
        with (root / "anchor.log").open("w") as log:
            child = subprocess.Popen(
                ["ip", "netns", "exec", node.namespace, *unshare],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        self._children.append(child)
        (root / "anchor.pid").write_text(f"{child.pid}\n")
        return child

    def _wait_for_anchors(self, anchors: Mapping[str, subprocess.Popen], timeout: float = 15) -> None:
        """Wait until each holder has exec'd under its marker name, not only touched its file: a look
        at it mid-exec (an empty cmdline) would take the node for down."""
        deadline = time.monotonic() + timeout
        for host, child in anchors.items():
            ready = self._node_dir(host) / "anchor.ready"
            while not (ready.exists() and is_anchor(child.pid, self.name, host)):
                if child.poll() is not None or time.monotonic() > deadline:
                    log = (self._node_dir(host) / "anchor.log").read_text()
                    raise ClusterError(f"{host}: namespace setup failed: {log.strip() or 'timed out'}")
                time.sleep(0.005)

    def _start_sshd(self, node: Node) -> None:
        root = self._node_dir(node.host)
        config, log = str(root / "sshd_config"), str(root / "sshd.log")
        argv = [*self._enter(node.host, wd=False), SSHD, "-D", "-f", config, "-E", log]
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._children.append(child)

    def _wait_for_sshd(self, hosts: Sequence[str] | None = None, timeout: float = 15) -> None:
        pending = {host: self._anchor_pid(host) for host in hosts or self.hosts}
        deadline = time.monotonic() + timeout
        while pending:
            pending = {host: pid for host, pid in pending.items() if not listening_on_22(pid)}
            if pending and time.monotonic() > deadline:
                logs = {h: (self._node_dir(h) / "sshd.log").read_text()[-500:] for h in pending}
                raise ClusterError(f"sshd did not start on {', '.join(pending)}: {logs}")
            time.sleep(0.01)

    # ---- helpers -------------------------------------------------------------------------------------

    def _device(self, interface: str) -> str:
        if interface not in INTERFACES:
            raise ClusterError(f"interface {interface!r}: use one of {', '.join(INTERFACES)}")
        # Without a fleet's data network, eth0 carries both.
        return "eth1" if interface == "data" and self.spec.fleet else "eth0"

    def _link_ends(self, host: str, interface: str) -> list[tuple[str, str]]:
        """(namespace, device) of both ends of one of `host`'s links: the node's side and the bridge port."""
        node = self.node(host)
        if self._device(interface) == "eth1":
            return [(node.namespace, "eth1"), (self.bridge_namespace, node.data_port)]
        return [(node.namespace, "eth0"), (self.bridge_namespace, node.bridge_port)]

    def _anchor_pid(self, host: str, *, missing_ok: bool = False) -> int:
        pid_file = self._node_dir(host) / "anchor.pid"
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text())
            if alive(pid) and is_anchor(pid, self.name, host):
                return pid
        if missing_ok:
            return 0
        raise ClusterError(f"{host} is down (its namespace holder is gone; kill_host or down ran)")

    def _enter(self, host: str, *, wd: bool = True) -> list[str]:
        argv = ["nsenter", "-t", str(self._anchor_pid(host)), "--net", "--mount", "--uts"]
        # nsenter --mount would otherwise start the command in /.
        return [*argv, f"--wd={os.getcwd()}", "--"] if wd else [*argv, "--"]

    def _node_env(self, host: str) -> dict[str, str]:
        root = self._node_dir(host)
        return {
            **os.environ,
            "PATH": f"{root / 'bin'}:{os.environ.get('PATH', NODE_PATH)}",
            "HOME": str(root / "home"),
        }

    def _signal_matching(
        self, host: str, pattern: str, signum: signal.Signals, settled: Callable[[str], bool]
    ) -> list[int]:
        regex = re.compile(pattern)
        anchor = self._anchor_pid(host, missing_ok=True)
        hits = [pid for pid, line in self.processes(host).items() if pid != anchor and regex.search(line)]
        for pid in hits:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
        deadline = time.monotonic() + 5  # signals land asynchronously: wait until every process shows it
        pending = list(hits)
        while pending and time.monotonic() < deadline:
            pending = [pid for pid in pending if (state := process_state(pid)) and not settled(state)]
            time.sleep(0.005)
        return hits

    def _reap(self) -> None:
        for child in list(self._children):
            if child.poll() is not None:
                self._children.remove(child)


def _listening(pid: int, port: int) -> bool:
    """Whether the network namespace of `pid` has a TCP listener on `port`."""
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:] if alive(pid) else []:
        local, state = line.split()[1], line.split()[3]
        if local.endswith(f":{port:04X}") and state == "0A":
            return True
    return False


def _is_sshd(pid: int) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/exe") == SSHD or cmdline(pid).startswith("sshd:")
    except OSError:
        return False


def _batch(namespace: str | None, commands: Sequence[str], *, check: bool = True) -> None:
    # -force: go on past a failing line (teardown of half-built clusters); otherwise stop at the first.
    argv = ["ip", *(["-n", namespace] if namespace else []), *([] if check else ["-force"]), "-batch", "-"]
    result = subprocess.run(
        argv, check=False, input="\n".join(commands) + "\n", capture_output=True, text=True, timeout=30
    )
    if check and result.returncode != 0:
        raise ClusterError(f"ip {namespace or ''} batch failed: {result.stderr.strip()}")


def _passwd_with_root_home(home: Path) -> str:
    lines = []
    for line in Path("/etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == "root" and len(fields) == 7:
            fields[5] = str(home)
            fields[6] = "/bin/bash"
        lines.append(":".join(fields))
    return "\n".join(lines) + "\n"


def install_nccl_tests_standin(directory: Path | str, python: str | None = None) -> Path:
    """Write the stand-in nccl-tests executables (`all_reduce_perf`, ...) into `directory`, for the
    nccl_tests role's prebuilt mode. Their shebang is `python` (default: this interpreter, the venv's,
    which the nodes see at the same path since they share this machine's filesystem)."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    interpreter = python or sys.executable
    body = NCCL_TESTS_STANDIN.read_text()
    for name in NCCL_TESTS_BINARIES:
        path = target / name
        path.write_text(f"#!{interpreter}\n{body}")
        path.chmod(0o755)
    return target


def install_node_standins(directory: Path | str, python: str | None = None) -> Path:
    """Write the stand-in `nvbandwidth` and perftest binaries (`ib_write_bw`, `ib_read_bw`, ...) into
    `directory`, for the nvbandwidth and perftest roles' prebuilt mode: small executable scripts (the
    roles look for regular files) that run node_standins.py under their own name. They answer for the
    node they run on (its devices.json and faults.json, next to its nvidia-smi on PATH)."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    for tool in PREBUILT_STANDINS:
        path = target / tool
        path.unlink(missing_ok=True)
        path.write_text(
            f"#!{python or sys.executable}\n"
            f'"""Stand-in {tool} of the test cluster: {NODE_STANDINS}."""\n'
            # nvbandwidth v0.8 declares its JSON switch as "json,j": the build looks for it in the binary
            + ('# options: "help,h" "testcase,t" "json,j"\n' if tool == "nvbandwidth" else "")
            + "import runpy\n"
            + f"runpy.run_path({str(NODE_STANDINS)!r}, {{'STANDIN_NAME': {tool!r}}}, run_name='__main__')\n"
        )
        path.chmod(0o755)
    return target


def ansible_env(control_dir: Path | None = None) -> dict[str, str]:
    """Environment for running this venv's ansible against a cluster: nothing written into root's home,
    host key checking explicitly on, and (optionally) a private ssh ControlPath dir."""
    repo = HERE.parent.parent
    venv_bin = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": f"{venv_bin}:{os.environ.get('PATH', NODE_PATH)}",
        "ANSIBLE_HOME": str(repo / ".ansible"),
        "ANSIBLE_LOCAL_TEMP": str(repo / ".ansible" / "tmp"),
        "XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME", "/tmp/xdg"),
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_NOCOLOR": "1",
    }
    if control_dir is not None:
        env["ANSIBLE_SSH_CONTROL_PATH_DIR"] = str(control_dir)
    return env


# ---- command line -------------------------------------------------------------------------------------


def _host_profile(text: str) -> tuple[str, str]:
    host, sep, profile = text.partition("=")
    if not sep or profile not in GPU_PROFILES:
        raise argparse.ArgumentTypeError(
            f"{text!r}: use HOST=PROFILE, PROFILE one of {', '.join(GPU_PROFILES)}"
        )
    return host, profile


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.cluster.vcluster", description=__doc__.split("\n")[0]
    )
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument(
        "--name", default=default_name(), help="cluster name (default $COLLBENCH_CLUSTER_NAME or cb)"
    )
    parser.add_argument("--workdir", type=Path, help="where keys, inventory and node files go")
    parser.add_argument("--group", default="gpu_nodes", help="inventory group of the nodes")
    parser.add_argument(
        "--python", default="", help="ansible_python_interpreter on the nodes (default: the system python3)"
    )
    parser.add_argument("--profile", default=DEFAULT_PROFILE, choices=sorted(GPU_PROFILES))
    parser.add_argument(
        "--node-profile",
        action="append",
        default=[],
        metavar="HOST=PROFILE",
        type=_host_profile,
        help="give one node another GPU profile (repeatable)",
    )
    parser.add_argument(
        "--fleet",
        action="store_true",
        help="nodes as rented GPU nodes: eth0 management, eth1 data, hostname on 127.0.1.1, no node ssh",
    )
    parser.add_argument(
        "--node-ssh",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="seed each node's ~/.ssh with the cluster key (default: yes, no with --fleet)",
    )
    parser.add_argument(
        "--hang-nvidia-smi",
        action="append",
        default=[],
        metavar="HOST",
        help="this node's nvidia-smi hangs on every call (repeatable)",
    )
    parser.add_argument(
        "--rails", type=int, default=0, help="data interfaces rail0.. per node, with HCA stand-ins (use 4)"
    )
    parser.add_argument("--rail-rate", default=DEFAULT_RAIL_RATE, help="every rail link's speed (tc rate)")
    args = parser.parse_args(argv)
    try:
        if args.action == "up":
            started = time.monotonic()
            overrides = dict(args.node_profile)
            cluster = Cluster.up(
                args.nodes,
                args.name,
                args.workdir,
                group=args.group,
                python=args.python,
                profile=args.profile,
                node_profiles=overrides,
                node_ssh=args.node_ssh,
                fleet=args.fleet,
                hang_nvidia_smi=args.hang_nvidia_smi,
                rails=args.rails,
                rail_rate=args.rail_rate,
            )
            print(
                f"cluster {cluster.name}: {len(cluster.hosts)} nodes up in {time.monotonic() - started:.2f} s"
            )
            print(f"inventory:  {cluster.inventory_path}")
            print(f"ssh:        ssh -F {cluster.ssh_config_path} {cluster.hosts[0]}")
        elif args.action == "down":
            started = time.monotonic()
            name = check_name(args.name)
            workdir = args.workdir or default_workdir(name)
            purge(name)
            if workdir.joinpath("cluster.json").exists():
                shutil.rmtree(workdir, ignore_errors=True)
            print(f"cluster {name}: down in {time.monotonic() - started:.2f} s")
        else:
            print(json.dumps(Cluster.attach(args.name, args.workdir).status(), indent=2))
    except ClusterError as error:
        print(f"vcluster: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
