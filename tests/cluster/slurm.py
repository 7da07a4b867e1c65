"""A real Slurm cluster on top of a running test cluster (tests/cluster/vcluster.py).

`SlurmCluster.up(cluster)` adds a head host (namespace `NAME-head`, hostname `head`, address
`10.X.0.10` on the cluster's bridge) running munged and slurmctld, and starts one slurmd in every node's
namespaces under the node's own hostname. Client commands (`sinfo`, `srun`, `scontrol`, ...) run on the
head, which stands for a cluster's login node, with `SLURM_CONF` pointing at the cluster's slurm.conf.
Everything lives under `<workdir>/slurm`; `down()` cancels the jobs, stops the daemons, deletes the head
namespace and the files. `Cluster.down()` alone also removes every process (they all run in the
cluster's namespaces). See tests/cluster/README.md ("Slurm").

By hand, on a cluster built with `python -m tests.cluster.vcluster up --name NAME`:
`python -m tests.cluster.slurm up|down --name NAME` and `python -m tests.cluster.slurm run --name NAME
-- srun -N4 hostname` (a client command on the head).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from tests.cluster.vcluster import (
    NODE_PATH,
    SSHD,
    Cluster,
    ClusterError,
    _batch,
    _passwd_with_root_home,
    alive,
    cmdline,
    default_name,
    is_anchor,
    kill_all,
    listening_on_22,
    pids_by_namespace,
    sshd_config,
)

REQUIRED_TOOLS = ("slurmctld", "slurmd", "slurmstepd", "srun", "sinfo", "scontrol", "scancel", "munged")
# What to install when one of them is missing (Debian 12: Slurm 22.05).
PACKAGES = "slurmctld slurmd slurm-client munge"
HEAD = "head"
# The inventory group of the login node (collbench_slurm_submit_host defaults to its first host).
LOGIN_GROUP = "slurm_login"
# On every node, its own bin directory (nvidia-smi); on the login node's PATH, as /usr/bin would be.
NODE_BIN = "/run/bin"
PARTITION = "gpu"
DAEMONS = ("slurmctld", "slurmd", "slurmstepd", "munged")


def missing_tools() -> list[str]:
    return [tool for tool in REQUIRED_TOOLS if not shutil.which(tool)]


def slurm_conf(
    *,
    cluster_name: str,
    root: Path,
    head_address: str,
    nodes: Sequence[tuple[str, str, int]],
    partition: str = PARTITION,
    extra_partitions: Mapping[str, Sequence[str]] | None = None,
    cpus: int = 2,
    real_memory_mb: int = 500,
) -> str:
    """slurm.conf for a head at `head_address` and `nodes` as (name, address, gpu count): every node in
    `partition` (the default), some also in `extra_partitions` (name -> node names)."""
    lines = [
        f"# Slurm test cluster {cluster_name}, written by tests/cluster/slurm.py.",
        f"ClusterName={cluster_name}",
        f"SlurmctldHost={HEAD}({head_address})",
        # munge, as real sites run it: one munged on the head, its socket on the shared filesystem.
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={root / 'munge' / 'munge.socket'}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool' / '%n'}",
        # Nodes share /tmp: PMIx and job tmp dirs need one per node.
        f"TmpFS={root / 'tmp' / '%n'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd-%n.log'}",
        # No systemd and no cgroup tree inside the namespaces: track processes by parentage only.
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "MpiDefault=none",
        "GresTypes=gpu",
        # Nodes report what slurm.conf says (all nodes share this machine's cores and memory).
        "SlurmdParameters=config_overrides",
        "SlurmdTimeout=10",
        # Nodes that stopped responding come back when their slurmd registers; an admin DOWN stays.
        "ReturnToService=1",
        "MinJobAge=600",
        "KillWait=5",
        "",
    ]
    for name, address, gpus in nodes:
        gres = f" Gres=gpu:{gpus}" if gpus else ""
        lines.append(
            f"NodeName={name} NodeAddr={address} NodeHostname={name} CPUs={cpus} "
            f"RealMemory={real_memory_mb}{gres} State=UNKNOWN"
        )
    names = ",".join(name for name, _, _ in nodes)
    lines.append(f"PartitionName={partition} Nodes={names} Default=YES MaxTime=INFINITE State=UP")
    for extra, members in (extra_partitions or {}).items():
        lines.append(f"PartitionName={extra} Nodes={','.join(members)} MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def gres_conf(nodes: Sequence[tuple[str, str, int]], devices: Path) -> str:
    """gres.conf naming `devices`/NODE/nvidiaK for each node's GPUs: Slurm drops GPUs without a File, and
    the nodes have no /dev/nvidia*; with task/none nothing ever opens these files."""
    return "".join(
        f"NodeName={name} Name=gpu File={devices / name}/nvidia[0-{gpus - 1}]\n"
        for name, _, gpus in nodes
        if gpus
    )


class SlurmCluster:
    """Slurm on a running `Cluster`. Build with `SlurmCluster.up(cluster)`; `down()` removes it."""

    def __init__(
        self,
        cluster: Cluster,
        partition: str = PARTITION,
        extra_partitions: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.cluster = cluster
        self.partition = partition
        self.extra_partitions = dict(extra_partitions or {})
        self.root = cluster.workdir / "slurm"
        self.head_namespace = f"{cluster.name}-head"
        octet = cluster.subnet.split(".")[1]
        self.head_address = f"10.{octet}.0.10"  # nodes are .11 and up, the bridge .1
        self._children: list[subprocess.Popen] = []

    # ---- public surface -------------------------------------------------------------------------------

    @property
    def conf_path(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def hosts(self) -> list[str]:
        return self.cluster.hosts

    def client_env(self) -> dict[str, str]:
        """What a client command needs besides a place on the cluster's network."""
        return {"SLURM_CONF": str(self.conf_path)}

    @classmethod
    def up(
        cls,
        cluster: Cluster,
        *,
        partition: str = PARTITION,
        extra_partitions: Mapping[str, Sequence[str]] | None = None,
        timeout: float = 60,
    ) -> SlurmCluster:
        """Start munged, slurmctld and one slurmd per node; return once every node is idle in sinfo.

        Every node is in `partition` (the default one); `extra_partitions` maps more partition names to
        some of the nodes."""
        missing = missing_tools()
        if missing:
            raise ClusterError(f"missing Slurm tools: {', '.join(missing)} (Debian: {PACKAGES})")
        slurm = cls(cluster, partition, extra_partitions)
        slurm.down()  # a stale one of the same cluster
        try:
            slurm._build(timeout)
        except BaseException:
            slurm.down()
            raise
        return slurm

    def run(
        self,
        argv: Sequence[str],
        *,
        host: str = HEAD,
        timeout: float = 60,
        check: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess:
        """Run a client command on the head (the login node) or on a node, with SLURM_CONF set."""
        result = subprocess.run(
            self.command(argv, host=host, env=env),
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            cwd=os.getcwd(),
        )
        if check and result.returncode != 0:
            raise ClusterError(
                f"{host}: {shlex.join(argv)} failed ({result.returncode}): {result.stderr.strip()}"
            )
        return result

    def popen(
        self, argv: Sequence[str], *, host: str = HEAD, env: Mapping[str, str] | None = None, **kwargs
    ) -> subprocess.Popen:
        """Start a client command in the background (a job that runs for a while)."""
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.Popen(self.command(argv, host=host, env=env), **kwargs)

    def command(
        self, argv: Sequence[str], *, host: str = HEAD, env: Mapping[str, str] | None = None
    ) -> list[str]:
        """The argv that runs `argv` inside `host`'s namespaces with the client environment."""
        assignments = [f"{k}={v}" for k, v in {**self.client_env(), **(env or {})}.items()]
        inner = ["env", *assignments, *argv]
        if host == HEAD:
            return [*self._enter_head(), *inner]
        return [*self.cluster._enter(host), *inner]

    def node_states(self) -> dict[str, str]:
        """Node name -> state as `sinfo` prints it (`idle`, `down*`, `drained`, ...)."""
        result = self.run(["sinfo", "-h", "-N", "-p", self.partition, "-o", "%N %T"], timeout=30)
        if result.returncode != 0:
            return {}
        return dict(line.split() for line in result.stdout.splitlines() if line.strip())

    def wait_for_states(self, wanted: Mapping[str, str], timeout: float = 60) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        states = self.node_states()
        while any(states.get(host) != state for host, state in wanted.items()):
            if time.monotonic() > deadline:
                raise ClusterError(f"nodes did not reach {dict(wanted)}: sinfo says {states}; {self._logs()}")
            time.sleep(0.2)
            states = self.node_states()
        return states

    def stop_slurmd(self, host: str, timeout: float = 60) -> None:
        """Kill `host`'s slurmd as a crash would; return once sinfo calls the node `down*` (not
        responding, Slurm's reason "Not responding"), SlurmdTimeout after its last answer."""
        namespace = self.cluster.node(host).namespace
        pids = pids_by_namespace([namespace])[namespace]
        kill_all([pid for pid in pids if cmdline(pid).split(" ", 1)[0].rsplit("/", 1)[-1] == "slurmd"])
        self.wait_for_states({host: "down*"}, timeout=timeout)

    def processes(self) -> dict[int, str]:
        """Pid -> command line of every Slurm or munge daemon and job step of this cluster."""
        names = [self.head_namespace, *(node.namespace for node in self.cluster.nodes)]
        pids = [pid for group in pids_by_namespace(names).values() for pid in group]
        return {pid: line for pid in pids if _is_slurm(line := cmdline(pid))}

    def down(self) -> None:
        """Cancel every job, stop every daemon and job step, delete the head and the files. Safe twice."""
        if self.conf_path.exists() and self._head_pid():
            with contextlib.suppress(subprocess.TimeoutExpired, ClusterError):
                self.run(["scancel", "--partition", self.partition], timeout=10)
        doomed = list(self.processes())
        doomed += [pid for pid in _descendants(doomed) if pid not in doomed]  # the jobs' own tasks
        head = self._head_pid()
        if head:
            doomed += pids_by_namespace([self.head_namespace])[self.head_namespace] + [head]
        _terminate(sorted(set(doomed)))
        for child in self._children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=5)
        self._children.clear()
        if (Path("/run/netns") / self.head_namespace).exists():
            _batch(None, [f"netns del {self.head_namespace}"], check=False)
        self._remove_head_from_client_files()
        with contextlib.suppress(ClusterError, OSError):
            self._set_node_client_env(None)
        shutil.rmtree(self.root, ignore_errors=True)

    # ---- building ------------------------------------------------------------------------------------

    def _build(self, timeout: float) -> None:
        for sub in ("state", "log", "munge", "spool", "tmp", "head"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "munge").chmod(0o700)
        nodes = [(n.host, n.address, self._gpu_count(n.host)) for n in self.cluster.nodes]
        for host, _, gpus in nodes:
            # The node's own tools (its nvidia-smi) at one path on every node, as /usr/bin is on a real
            # cluster: job steps inherit the login node's PATH, which names it (each node's /run is its own).
            bin_link = self.cluster._node_dir(host) / "run" / "bin"
            if not bin_link.is_symlink():
                bin_link.symlink_to(self.cluster._node_dir(host) / "bin")
            (self.root / "tmp" / host).mkdir()
            (self.root / "spool" / host).mkdir()
            (self.root / "dev" / host).mkdir(parents=True)
            for index in range(gpus):
                (self.root / "dev" / host / f"nvidia{index}").touch()
        self.conf_path.write_text(
            slurm_conf(
                cluster_name=self.cluster.name,
                root=self.root,
                head_address=self.head_address,
                nodes=nodes,
                partition=self.partition,
                extra_partitions=self.extra_partitions,
            )
        )
        # Without cgroup/v1 slurmd looks for /sys/fs/cgroup, which `ip netns exec` remounted away.
        (self.root / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")
        (self.root / "gres.conf").write_text(gres_conf(nodes, self.root / "dev"))
        self._build_head()
        self._start_munged()
        self._start(HEAD, ["slurmctld", "-D", "-f", str(self.conf_path)])
        for host in self.hosts:
            self._start(host, ["slurmd", "-D", "-N", host, "-f", str(self.conf_path)])
        self._start_head_sshd()
        self._set_node_client_env(self.conf_path)
        self.wait_for_states(dict.fromkeys(self.hosts, "idle"), timeout=timeout)
        self._wait_for_head_sshd()
        self._add_head_to_client_files()

    def _gpu_count(self, host: str) -> int:
        listing = self.cluster.exec(host, ["nvidia-smi", "-L"], check=True).stdout
        return sum(1 for line in listing.splitlines() if line.startswith("GPU "))

    def _build_head(self) -> None:
        """The head: a namespace on the cluster's bridge, and a holder of its hostname and hosts file."""
        port = "phead"
        _batch(
            None,
            [
                f"netns add {self.head_namespace}",
                f"link add name eth0 netns {self.head_namespace} type veth peer name {port} "
                f"netns {self.cluster.bridge_namespace}",
            ],
        )
        _batch(self.cluster.bridge_namespace, [f"link set {port} master br0 up"])
        _batch(
            self.head_namespace,
            ["link set lo up", f"addr add {self.head_address}/24 dev eth0", "link set eth0 up"],
        )
        head = self.root / "head"
        hosts = [f"127.0.0.1\tlocalhost\n{self.head_address}\t{HEAD}\n"]
        hosts += [f"{node.address}\t{node.host}\n" for node in self.cluster.nodes]
        (head / "hosts").write_text("".join(hosts))
        # The host's resolver is out of reach from the namespace: fail at once instead of waiting.
        (head / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        # A login node of its own: root's home, /run (sshd's privilege separation directory and pid file).
        (head / "home" / ".ssh").mkdir(parents=True)
        (head / "home").chmod(0o700)
        (head / "run" / "sshd").mkdir(parents=True)
        (head / "passwd").write_text(_passwd_with_root_home(head / "home"))
        script = (
            "set -e\n"
            f"mount --bind {shlex.quote(str(head / 'hosts'))} /etc/hosts\n"
            f"mount --bind {shlex.quote(str(head / 'resolv.conf'))} /etc/resolv.conf\n"
            f"mount --bind {shlex.quote(str(head / 'passwd'))} /etc/passwd\n"
            f"mount --bind {shlex.quote(str(head / 'run'))} /run\n"
            f"hostname {HEAD}\ntouch {shlex.quote(str(head / 'ready'))}\n"
            # The vcluster marker: purge() finds this holder even if its namespace was deleted.
            f"exec -a vcluster-anchor-{self.cluster.name}-{HEAD} sleep infinity\n"
        )
        unshare = ["unshare", "--uts", "--mount", "--propagation", "private", "--", "bash", "-c", script]
        child = subprocess.Popen(
            ["ip", "netns", "exec", self.head_namespace, *unshare],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._children.append(child)
        (head / "anchor.pid").write_text(f"{child.pid}\n")
        deadline = time.monotonic() + 15
        while not ((head / "ready").exists() and is_anchor(child.pid, self.cluster.name, HEAD)):
            if child.poll() is not None or time.monotonic() > deadline:
                raise ClusterError("the Slurm head's namespace did not come up")
            time.sleep(0.005)

    def _start_head_sshd(self) -> None:
        """An sshd on the head, as a login node has: the pipeline reaches it over ssh like any host,
        with the cluster's key; its client commands find slurm.conf (a site's /etc/slurm) through
        SLURM_CONF."""
        head = self.root / "head"
        key = head / "ssh_host_ed25519_key"
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", HEAD, "-f", str(key)],
            check=True,
            stdin=subprocess.DEVNULL,
        )
        cluster = self.cluster
        config = sshd_config(
            key,
            cluster.workdir / "ssh" / "authorized_keys",
            f"PATH={NODE_BIN}:{NODE_PATH} SLURM_CONF={self.conf_path}",
            accept_env=False,
        )
        (head / "sshd_config").write_text(config)
        argv = [SSHD, "-D", "-f", str(head / "sshd_config"), "-E", str(self.root / "log" / "head-sshd.log")]
        self._start(HEAD, argv)

    def _set_node_client_env(self, conf: Path | None) -> None:
        """The nodes' ssh logins with Slurm's client setup, as on a real cluster (the launcher srun starts
        job steps from a node): SLURM_CONF stands for /etc/slurm/slurm.conf, /run/bin for /usr/bin
        (steps inherit the PATH of the node that starts them). `None`: the nodes' own sshd_config again."""
        cluster = self.cluster
        for node in cluster.nodes:
            config = cluster._sshd_config(node)
            if conf is not None:
                own = f"SetEnv PATH={cluster._node_dir(node.host) / 'bin'}:{NODE_PATH}"
                if own not in config:
                    raise ClusterError(f"{node.host}: sshd_config has no `{own}` line to extend")
                config = config.replace(own, f"SetEnv PATH={NODE_BIN}:{NODE_PATH} SLURM_CONF={conf}")
            path = cluster._node_dir(node.host) / "sshd_config"
            if path.read_text() == config:
                continue
            path.write_text(config)
            if cluster.stop_sshd(node.host):
                cluster.start_sshd(node.host)

    def _wait_for_head_sshd(self, timeout: float = 15) -> None:
        deadline = time.monotonic() + timeout
        while not listening_on_22(self._head_pid()):
            if time.monotonic() > deadline:
                raise ClusterError(f"the head's sshd did not start: {self._log('head-sshd.log')}")
            time.sleep(0.01)

    def _add_head_to_client_files(self) -> None:
        """The head in the controller's known_hosts, ssh config and inventory (group slurm_login)."""
        cluster = self.cluster
        kind, blob = (self.root / "head" / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        known = [
            line
            for line in cluster.known_hosts_path.read_text().splitlines(True)
            if not line.startswith(HEAD)
        ]
        cluster.known_hosts_path.write_text("".join([*known, f"{HEAD},{self.head_address} {kind} {blob}\n"]))
        config = cluster.ssh_config_path.read_text()
        block = (
            f"Host {HEAD} {self.head_address}\n  HostName {HEAD}\n  HostKeyAlias {HEAD}\n"
            f"  ProxyCommand ip netns exec {self.head_namespace} nc 127.0.0.1 22\n\n"
        )
        if f"Host {HEAD} " not in config:
            marker = "Host *\n"
            config = config.replace(marker, block + marker, 1) if marker in config else config + block
            cluster.ssh_config_path.write_text(config)
        inventory = yaml.safe_load(cluster.inventory_path.read_text())
        inventory["all"]["children"][LOGIN_GROUP] = {"hosts": {HEAD: {"ansible_host": self.head_address}}}
        header = cluster.inventory_path.read_text().split("\n", 1)[0] + "\n"
        cluster.inventory_path.write_text(header + yaml.safe_dump(inventory, sort_keys=False))

    def _remove_head_from_client_files(self) -> None:
        cluster = self.cluster
        with contextlib.suppress(OSError, yaml.YAMLError, KeyError, TypeError):
            inventory = yaml.safe_load(cluster.inventory_path.read_text())
            if inventory["all"]["children"].pop(LOGIN_GROUP, None) is not None:
                header = cluster.inventory_path.read_text().split("\n", 1)[0] + "\n"
                cluster.inventory_path.write_text(header + yaml.safe_dump(inventory, sort_keys=False))

    def _start_munged(self) -> None:
        munge = self.root / "munge"
        key = munge / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        argv = [
            "munged",
            "--foreground",
            "--force",  # root, and a socket under a world-writable temp dir
            f"--key-file={key}",
            f"--socket={munge / 'munge.socket'}",
            f"--pid-file={munge / 'munged.pid'}",
            f"--log-file={self.root / 'log' / 'munged.log'}",
            f"--seed-file={munge / 'munged.seed'}",
        ]
        self._start(HEAD, argv)
        deadline = time.monotonic() + 15
        while not (munge / "munge.socket").exists():
            if time.monotonic() > deadline:
                raise ClusterError(f"munged did not start: {self._log('munged.log')}")
            time.sleep(0.01)

    def _start(self, host: str, argv: Sequence[str]) -> None:
        enter = self._enter_head() if host == HEAD else self.cluster._enter(host, wd=False)
        child = subprocess.Popen(
            [*enter, *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=(self.root / "log" / f"{host}-{Path(argv[0]).name}.err").open("w"),
            start_new_session=True,
        )
        self._children.append(child)

    # ---- helpers -------------------------------------------------------------------------------------

    def _head_pid(self) -> int:
        with contextlib.suppress(OSError, ValueError):
            pid = int((self.root / "head" / "anchor.pid").read_text())
            if alive(pid) and is_anchor(pid, self.cluster.name, HEAD):
                return pid
        return 0

    def _enter_head(self) -> list[str]:
        pid = self._head_pid()
        if not pid:
            raise ClusterError(f"the Slurm head of cluster {self.cluster.name} is not running")
        return ["nsenter", "-t", str(pid), "--net", "--mount", "--uts", f"--wd={os.getcwd()}", "--"]

    def _log(self, name: str) -> str:
        with contextlib.suppress(OSError):
            return (self.root / "log" / name).read_text()[-800:]
        return ""

    def _logs(self) -> str:
        first = self.hosts[0]
        return (
            f"slurmctld.log: {self._log('slurmctld.log')}\n"
            f"slurmd-{first}.log: {self._log(f'slurmd-{first}.log')}\n"
            f"{first}-slurmd.err: {self._log(f'{first}-slurmd.err')}"
        )


def _is_slurm(command_line: str) -> bool:
    program = command_line.split(" ", 1)[0].rsplit("/", 1)[-1]
    return program in DAEMONS or command_line.startswith("slurmstepd")


def _descendants(pids: Sequence[int]) -> list[int]:
    """Every process below `pids` (job tasks that slurmstepd started)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry))
    found, pending = [], list(pids)
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def _terminate(pids: Sequence[int], grace: float = 3) -> None:
    """TERM, then KILL what is left after `grace` seconds."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    kill_all([pid for pid in pids if alive(pid)])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster.slurm", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["up", "down", "run"])
    parser.add_argument("--name", default=default_name(), help="the test cluster's name (vcluster up --name)")
    parser.add_argument("--workdir", type=Path, help="the test cluster's workdir, if not the default")
    given = list(sys.argv[1:] if argv is None else argv)
    split = given.index("--") if "--" in given else len(given)
    args, command = parser.parse_args(given[:split]), given[split + 1 :]
    if (args.action == "run") != bool(command):
        parser.error("give a command after -- with run, and only with run")
    try:
        slurm = SlurmCluster(Cluster.attach(args.name, args.workdir))
        if args.action == "up":
            started = time.monotonic()
            slurm = SlurmCluster.up(slurm.cluster)
            print(
                f"slurm on {args.name}: {len(slurm.hosts)} nodes idle in {time.monotonic() - started:.2f} s"
            )
            print(f"SLURM_CONF={slurm.conf_path} (client commands: run them on the head, `run -- CMD`)")
        elif args.action == "down":
            slurm.down()
        else:
            result = subprocess.run(slurm.command(command), check=False, stdin=subprocess.DEVNULL)
            return result.returncode
    except ClusterError as error:
        print(f"slurm: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
