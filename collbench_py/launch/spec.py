"""The command line of every benchmark launch, built in one place.

A launch is one backend (the torch benchmark, nccl-tests or rccl-tests) started by one launcher
on the hosts of one kind of launch (`intra`: a host on its own, `all`: every host, `pair`: two
hosts). `launch_command` turns its description into what one host runs: the argv (a list, never
shell text), its environment, and what the role must prepare (the launch directory, the mpirun
hostfile, the link to the nccl-tests binary). The role (roles/benchmark/tasks/launch.yml) calls it
through the `collbench_launch` action on every host of the launch and keeps only the
orchestration: directories, run, cleanup, collect, record.

The forms, per backend and launcher:

- torch, intra: `torchrun --standalone --nproc_per_node=G script ...`.
- torch, across hosts, torchrun: on every host `torchrun --nnodes=N --node_rank=R
  --master_addr=<head> --master_port=P --nproc_per_node=G script ...` (static rendezvous: the
  head, rank 0, hosts the store; no host has to recognise its own address in an endpoint).
- torch, across hosts, mpirun: from the head, `mpirun ... python script ...` with MASTER_ADDR
  and MASTER_PORT exported.
- nccl-tests, intra: `mpirun -np G` on the host itself, one process per GPU with `-g 1` (the
  transport shape of the launches across hosts); one process driving every GPU (`-g G`) only
  when the host has no mpirun (binaries built without MPI).
- nccl-tests, across hosts: `mpirun` from the head, `-g 1`.

- srun (every backend and kind): one job step of the run's allocation, started on the launch's
  rank-0 node (the first of its nodes in the allocation's order) under the launch wrapper, as a batch
  script's srun is: `srun --jobid J -N n -w hosts --ntasks-per-node G --time M --kill-on-bad-exit=1
  [--mpi=P for nccl-tests] [extra] -- program`, one task per rank (nccl-tests `-g 1`, run from the
  build directory itself: Slurm, not a link's name, finds the step's processes; the torch benchmark
  reading SLURM_PROCID/SLURM_NTASKS with MASTER_ADDR/PORT pointing at rank 0). Rank 0 writes the
  logs on the node that runs srun; no link, hostfile or ssh to the other nodes.

mpirun only starts the ranks and carries NCCL's bootstrap (a unique id, a few small MPI
collectives); NCCL moves the measured data over its own transports. Its MCA settings
(`collbench_mpirun_mca`) therefore default to what works everywhere: ob1 over TCP.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

BACKENDS = ("torch", "nccl-tests", "rccl-tests")
LAUNCHERS = ("torchrun", "mpirun", "srun")
KINDS = ("intra", "all", "pair")
TORCH_RUN = ("-m", "torch.distributed.run")


class LaunchError(ValueError):
    """A launch that cannot be built from its description: one message for the user."""


@dataclass(frozen=True)
class MpiInstall:
    """The MPI the nccl-tests binaries were built with, on one host (fact `collbench_mpi`)."""

    mpirun: str = "mpirun"  # "" when the host has none
    prefix: str = ""  # --prefix: where remote daemons find Open MPI without a login shell


@dataclass(frozen=True)
class LaunchHost:
    name: str  # inventory name
    address: str  # data-network address
    run_root: str  # this run's directory on the host (launch directories go under it)
    ranks: int
    python: str = "python3"  # Python with torch (torch backend)
    node_python: str = "/usr/bin/python3"  # Ansible's interpreter: runs the launch wrapper
    wrapper: str = "collbench_launch_wrapper.py"  # the launch wrapper on the host
    net_if: str = ""
    gpu_vendor: str | None = None  # nvidia, amd, None
    gpu_count: int = 0  # GPUs the vendor tool lists
    torch_devices: int = 0  # GPUs torch sees
    gpu_devices: tuple[int, ...] | None = None  # collbench_gpu_devices: which GPUs to use
    mpi: MpiInstall = MpiInstall()
    rsh_args: tuple[str, ...] = ()  # ssh options of mpirun's node-to-node ssh
    ld_library_path: str = ""  # what the nccl-tests build needs
    is_root: bool = False


@dataclass(frozen=True)
class Params:
    """The run's parameters (manifest.json `parameters`) a command line needs."""

    min_bytes: int
    max_bytes: int
    step_factor: int
    iters: int
    warmup_iters: int
    check: int
    timeout_s: int
    nccl_debug: str = ""
    nccl_algo_pairs: str = ""


@dataclass(frozen=True)
class LaunchSpec:
    backend: str
    launcher: str  # the run's launcher across hosts: torchrun or mpirun
    kind: str
    label: str  # names the launch directory
    hosts: tuple[LaunchHost, ...]  # the launch's hosts; the first is its head
    this_host: str
    collectives: tuple[str, ...]
    params: Params
    rdzv_port: int
    round: int | None = None  # pairs: round r listens on rdzv_port + r
    env: Mapping[str, str] = field(default_factory=dict)  # collbench_launch_env
    script: str = ""  # the torch benchmark on the nodes
    bindir: str = ""  # the nccl-tests binaries on the nodes
    nccl_tests_json: bool | None = None  # -J; None: yes for nccl-tests, no for rccl-tests
    mpirun_mca: tuple[tuple[str, str], ...] = ()
    mpirun_extra_args: tuple[str, ...] = ()
    kill_after_s: int = 10
    slurm: SlurmStep | None = None  # launcher srun: the run's allocation and where srun runs


@dataclass(frozen=True)
class SlurmStep:
    """Launcher srun: every launch is a job step of the run's allocation, started on its rank-0 node."""

    job_id: str
    nodes: tuple[str, ...]  # the allocation's nodes in Slurm's order (rank 0 goes to the first)
    mpi: str = "pmix"  # srun --mpi for nccl-tests
    step_extra_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class LaunchCommand:
    launcher: str  # local (no launcher across hosts), torchrun or mpirun
    runners: tuple[str, ...]  # hosts that run a command (the head only under mpirun)
    launch_dir: str
    hostfile: str | None  # mpirun's hostfile, written by the head into the launch directory
    binary_link: tuple[str, str] | None  # (binary, link in the launch directory): nccl-tests
    gpu_link_csv: str | None  # name of the PCIe link samples the wrapper writes (intra, NVIDIA)
    argv: tuple[str, ...]  # what this host runs; empty when it runs nothing
    bounded_argv: tuple[str, ...]  # argv under the launch wrapper (timeout, cleanup, umask)
    env: dict[str, str]  # the environment of the command on this host


# ---------------------------------------------------------------- the launch as a whole


def launch_command(spec: LaunchSpec) -> LaunchCommand:
    check_spec(spec)
    if spec.launcher == "srun":
        return srun_command(spec)
    this = host_named(spec, spec.this_host)
    head = spec.hosts[0]
    launcher = effective_launcher(spec, this)
    launch_dir = f"{(head if launcher == 'mpirun' else this).run_root}/{spec.label}"
    runners = (head.name,) if launcher == "mpirun" else tuple(host.name for host in spec.hosts)
    argv: tuple[str, ...] = ()
    if this.name in runners:
        argv = tuple(inner_argv(spec, launcher, this, launch_dir))
    gpu_link = gpu_link_csv_name(spec, this)
    return LaunchCommand(
        launcher=launcher,
        runners=runners,
        launch_dir=launch_dir,
        hostfile=hostfile(spec) if launcher == "mpirun" and single_context(spec) else None,
        binary_link=(
            (f"{spec.bindir}/{nccl_binary_name(spec)}", f"{launch_dir}/{nccl_binary_name(spec)}")
            if spec.backend != "torch"
            else None
        ),
        gpu_link_csv=gpu_link,
        argv=argv,
        bounded_argv=bounded(spec, this, launch_dir, gpu_link, argv) if argv else (),
        env=command_env(spec, launcher, this),
    )


def check_spec(spec: LaunchSpec) -> None:
    if spec.backend not in BACKENDS:
        raise LaunchError(f"unknown backend {spec.backend!r}: one of {', '.join(BACKENDS)}")
    if spec.launcher not in LAUNCHERS:
        raise LaunchError(f"unknown launcher {spec.launcher!r}: one of {', '.join(LAUNCHERS)}")
    if spec.kind not in KINDS:
        raise LaunchError(f"unknown kind of launch {spec.kind!r}: one of {', '.join(KINDS)}")
    if not spec.hosts or (spec.kind == "intra") != (len(spec.hosts) == 1):
        raise LaunchError(f"a launch of kind {spec.kind} cannot run on {len(spec.hosts)} host(s)")
    if spec.backend != "torch" and len(spec.collectives) != 1:
        raise LaunchError(f"{spec.backend} runs one collective per launch, not {len(spec.collectives)}")
    if spec.backend != "torch" and spec.kind != "intra" and spec.launcher not in ("mpirun", "srun"):
        raise LaunchError(f"{spec.backend} needs mpirun or srun across hosts, not {spec.launcher}")
    if spec.launcher == "srun" and spec.slurm is None:
        raise LaunchError(
            "launcher srun needs the run's Slurm allocation (playbooks/slurm.yml did not grant one)"
        )
    for host in spec.hosts:
        if host.ranks < 1:
            raise LaunchError(f"{host.name}: no rank to run ({host.ranks})")
        for arg in host.rsh_args:
            # Open MPI splits plm_rsh_args on spaces: an argument holding one would be cut in two.
            if not arg or any(c.isspace() for c in arg):
                raise LaunchError(f"{host.name}: ssh option {arg!r} for mpirun is empty or holds a space")


def host_named(spec: LaunchSpec, name: str) -> LaunchHost:
    for host in spec.hosts:
        if host.name == name:
            return host
    raise LaunchError(f"{name} is not one of the launch's hosts ({', '.join(h.name for h in spec.hosts)})")


def effective_launcher(spec: LaunchSpec, this: LaunchHost) -> str:
    """local (a host on its own, no launcher across hosts), torchrun or mpirun."""
    if spec.kind != "intra":
        return spec.launcher
    # nccl-tests: one process per GPU like the launches across hosts, unless there is no
    # mpirun to start them (the binaries were then built without MPI).
    if spec.backend != "torch" and spec.launcher == "mpirun" and this.mpi.mpirun:
        return "mpirun"
    return "local"


def single_context(spec: LaunchSpec) -> bool:
    """One mpirun app context (a hostfile, one set of -x) when every host gets the same environment."""
    return len({tuple(sorted(rank_env(spec, host).items())) for host in spec.hosts}) == 1


# ---------------------------------------------------------------- what runs


def inner_argv(spec: LaunchSpec, launcher: str, this: LaunchHost, launch_dir: str) -> list[str]:
    head = spec.hosts[0]
    if launcher == "mpirun":
        return mpirun_argv(spec, launch_dir)
    if spec.backend != "torch":
        return [*nccl_program(spec, launch_dir, gpus_per_process=this.ranks)]
    torch_run = [this.python, *TORCH_RUN]
    if launcher == "local":
        launch = ["--standalone", f"--nproc_per_node={this.ranks}"]
    else:
        launch = [
            f"--nnodes={len(spec.hosts)}",
            f"--node_rank={spec.hosts.index(this)}",
            f"--master_addr={head.address}",
            f"--master_port={port(spec)}",
            f"--nproc_per_node={this.ranks}",
        ]
    return [*torch_run, *launch, *torch_program(spec, this, launch_dir)[1:]]


def torch_program(spec: LaunchSpec, host: LaunchHost, launch_dir: str) -> list[str]:
    """python script args: the torch benchmark as every rank runs it."""
    p = spec.params
    return [
        host.python,
        spec.script,
        *("--collectives", ",".join(spec.collectives)),
        *("--min-bytes", str(p.min_bytes), "--max-bytes", str(p.max_bytes)),
        *("--step-factor", str(p.step_factor), "--iters", str(p.iters)),
        *("--warmup", str(p.warmup_iters), "--check", str(p.check)),
        *("--backend", "nccl" if host.torch_devices > 0 else "gloo"),
        # The script's own watchdog fires first, so a hang is reported in the log as `Test timeout`.
        *("--timeout-s", str(max(int(p.timeout_s * 0.8), 1))),
        *("--out-dir", launch_dir),
    ]


def nccl_binary_name(spec: LaunchSpec) -> str:
    return f"{spec.collectives[0]}_perf"


def nccl_program(spec: LaunchSpec, launch_dir: str, gpus_per_process: int) -> list[str]:
    """<launch dir>/<collective>_perf args: run through a link in the launch directory, so that its
    command line names the directory the cleanup looks for."""
    p = spec.params
    json_on = spec.nccl_tests_json if spec.nccl_tests_json is not None else spec.backend == "nccl-tests"
    return [
        f"{launch_dir}/{nccl_binary_name(spec)}",
        *("-b", str(p.min_bytes), "-e", str(p.max_bytes), "-f", str(p.step_factor)),
        *("-n", str(p.iters), "-w", str(p.warmup_iters), "-c", str(p.check)),
        *("-g", str(gpus_per_process)),
        *(("-J", f"{launch_dir}/{spec.collectives[0]}.json") if json_on else ()),
    ]


def port(spec: LaunchSpec) -> int:
    return spec.rdzv_port + (spec.round or 0)


# ---------------------------------------------------------------- mpirun


# An MPI installed in the system's own directories is on every login's PATH already; --prefix
# there would only put <prefix>/lib (/usr/lib) in front of every rank's LD_LIBRARY_PATH, ahead of
# the NCCL the binaries were built with.
SYSTEM_PREFIXES = ("/", "/usr", "/usr/local")


def mpirun_argv(spec: LaunchSpec, launch_dir: str) -> list[str]:
    head = spec.hosts[0]
    argv = [head.mpi.mpirun or "mpirun"]
    if head.mpi.prefix and head.mpi.prefix.rstrip("/") not in (p.rstrip("/") for p in SYSTEM_PREFIXES):
        argv += ["--prefix", head.mpi.prefix]
    argv += ["--bind-to", "none"]
    if head.is_root:
        argv.append("--allow-run-as-root")
    for key, value in spec.mpirun_mca:
        argv += ["--mca", key, value]
    if head.net_if:
        argv += ["--mca", "btl_tcp_if_include", head.net_if, "--mca", "oob_tcp_if_include", head.net_if]
    if head.rsh_args and spec.kind != "intra":
        argv += ["--mca", "plm_rsh_agent", "ssh", "--mca", "plm_rsh_args", " ".join(head.rsh_args)]
    argv += spec.mpirun_extra_args
    if single_context(spec):
        ranks = sum(host.ranks for host in spec.hosts)
        argv += ["-np", str(ranks), "--hostfile", f"{launch_dir}/hostfile"]
        return argv + exports(rank_env(spec, head)) + rank_program(spec, launch_dir)
    # Hosts that need different environments (another GPU left out on one of them): one app
    # context per host, in the launch's host order (so ranks follow it), each with its own -x.
    for index, host in enumerate(spec.hosts):
        if index:
            argv.append(":")
        argv += ["-np", str(host.ranks), "--host", f"{host.address}:{host.ranks}"]
        argv += exports(rank_env(spec, host)) + rank_program(spec, launch_dir)
    return argv


def rank_program(spec: LaunchSpec, launch_dir: str) -> list[str]:
    if spec.backend == "torch":
        return torch_program(spec, spec.hosts[0], launch_dir)
    return nccl_program(spec, launch_dir, gpus_per_process=1)


def exports(env: Mapping[str, str]) -> list[str]:
    return [arg for key, value in env.items() for arg in ("-x", f"{key}={value}")]


def hostfile(spec: LaunchSpec) -> str:
    if spec.kind == "intra":
        # The host itself: no ssh, whatever its address resolves to.
        return f"localhost slots={spec.hosts[0].ranks}\n"
    return "".join(f"{host.address} slots={host.ranks}\n" for host in spec.hosts)


# ---------------------------------------------------------------- srun


def srun_command(spec: LaunchSpec) -> LaunchCommand:
    """Launcher srun: the launch is one job step of the run's allocation, for every kind, started on
    the launch's rank-0 node under the launch wrapper (rank 0 writes the logs there)."""
    slurm = spec.slurm
    assert slurm is not None  # check_spec
    this = host_named(spec, spec.this_host)
    first = rank_zero_host(spec)
    launch_dir = f"{first.run_root}/{spec.label}"
    argv = tuple(srun_argv(spec, slurm, launch_dir)) if this.name == first.name else ()
    gpu_link = gpu_link_csv_name(spec, this)
    return LaunchCommand(
        launcher="srun",
        runners=(first.name,),
        launch_dir=launch_dir,
        hostfile=None,
        binary_link=None,  # srun starts the build's own path: Slurm, not a name, finds the processes
        gpu_link_csv=gpu_link,
        argv=argv,
        bounded_argv=bounded(spec, this, launch_dir, gpu_link, argv) if argv else (),
        env=rank_env(spec, first) | {"TZ": "UTC"},
    )


def rank_zero_host(spec: LaunchSpec) -> LaunchHost:
    """The host where srun puts rank 0: Slurm orders a step's nodes as the allocation lists them,
    whatever the order of -w."""
    order = spec.slurm.nodes if spec.slurm else ()
    missing = [host.name for host in spec.hosts if host.name not in order]
    if missing:
        raise LaunchError(f"{', '.join(missing)} not in the run's Slurm allocation ({', '.join(order)})")
    return min(spec.hosts, key=lambda host: order.index(host.name))


def srun_argv(spec: LaunchSpec, slurm: SlurmStep, launch_dir: str) -> list[str]:
    hosts = sorted(spec.hosts, key=lambda host: slurm.nodes.index(host.name))
    if len({host.ranks for host in hosts}) != 1:
        raise LaunchError(
            f"srun starts as many tasks on every node of a step: {', '.join(h.name for h in hosts)} "
            "have different rank counts (set one collbench_gpus_per_host for them)"
        )
    if not single_context(spec):
        raise LaunchError(
            f"srun gives every task of a step one environment: {', '.join(h.name for h in hosts)} need "
            "different ones (collbench_gpu_devices or collbench_net_if differ): make them the same"
        )
    argv = ["srun", "-v", "--jobid", slurm.job_id, "--job-name", spec.label]
    argv += ["-N", str(len(hosts)), "-w", ",".join(host.name for host in hosts)]
    argv += ["--ntasks-per-node", str(hosts[0].ranks)]
    argv += ["--time", str(step_minutes(spec.params.timeout_s)), "--kill-on-bad-exit=1"]
    if spec.backend != "torch":
        argv.append(f"--mpi={slurm.mpi}")
    argv += slurm.step_extra_args
    if spec.backend == "torch":
        program = torch_program(spec, hosts[0], launch_dir)
    else:
        program = nccl_program(spec, launch_dir, gpus_per_process=1)
        program[0] = f"{spec.bindir}/{nccl_binary_name(spec)}"
    return [*argv, "--", *program]


def step_minutes(timeout_s: int) -> int:
    """Slurm's --time on a step, in whole minutes: the project's own bound (timeout_s) fits in it."""
    return max(1, -(-timeout_s // 60))


# ---------------------------------------------------------------- environment


def rank_env(spec: LaunchSpec, host: LaunchHost) -> dict[str, str]:
    """The environment the ranks on `host` get (under mpirun: exported with -x)."""
    env: dict[str, str] = {"NCCL_DEBUG": spec.params.nccl_debug}
    if host.net_if:
        env |= {"GLOO_SOCKET_IFNAME": host.net_if, "NCCL_SOCKET_IFNAME": host.net_if}
    env |= visible_devices(spec, host)
    env |= {key: str(value) for key, value in spec.env.items()}
    if spec.kind == "pair" and spec.params.nccl_algo_pairs:
        env["NCCL_ALGO"] = spec.params.nccl_algo_pairs
    if spec.backend == "torch" and spec.launcher == "mpirun" and spec.kind != "intra":
        env |= {"MASTER_ADDR": spec.hosts[0].address, "MASTER_PORT": str(port(spec))}
    if spec.backend == "torch" and spec.launcher == "srun":
        # Every kind: the ranks of a step meet at rank 0, on the first node in Slurm's order.
        env |= {"MASTER_ADDR": rank_zero_host(spec).address, "MASTER_PORT": str(port(spec))}
    if spec.backend != "torch":
        # The build's libraries first; a user's own (an NCCL net plugin) stay after them.
        env["LD_LIBRARY_PATH"] = join_paths(host.ld_library_path, env.get("LD_LIBRARY_PATH", ""))
    # An empty value means "not set": a user can drop a default that way.
    return {key: value for key, value in env.items() if value != ""}


def join_paths(*paths: str) -> str:
    return ":".join(path for path in paths if path)


def visible_devices(spec: LaunchSpec, host: LaunchHost) -> dict[str, str]:
    """CUDA_VISIBLE_DEVICES (HIP_VISIBLE_DEVICES on AMD) when the ranks use only some of the GPUs:
    those of collbench_gpu_devices, else the first ones."""
    gpus = host.torch_devices if spec.backend == "torch" else host.gpu_count
    if gpus < 1:
        return {}  # the torch benchmark on CPUs (gloo)
    if host.gpu_devices is not None:
        devices = list(host.gpu_devices)
        wrong = [d for d in devices if not 0 <= d < gpus]
        if wrong or len(set(devices)) != len(devices):
            raise LaunchError(
                f"{host.name}: collbench_gpu_devices {devices} must be distinct GPU indices "
                f"from 0 to {gpus - 1}"
            )
        if len(devices) < host.ranks:
            raise LaunchError(
                f"{host.name}: collbench_gpu_devices lists {len(devices)} GPUs for {host.ranks} ranks "
                "(set collbench_gpus_per_host to the number of GPUs listed)"
            )
        devices = devices[: host.ranks]
    elif host.ranks < gpus:
        devices = list(range(host.ranks))
    else:
        return {}
    name = "HIP_VISIBLE_DEVICES" if host.gpu_vendor == "amd" else "CUDA_VISIBLE_DEVICES"
    return {name: ",".join(str(d) for d in devices)}


def command_env(spec: LaunchSpec, launcher: str, this: LaunchHost) -> dict[str, str]:
    """The environment of the command this host runs (mpirun, torchrun, the binary)."""
    env = rank_env(spec, this) | {"TZ": "UTC"}  # the module's start and end are then UTC
    if spec.backend == "torch" and launcher != "mpirun":
        # The directory torchrun leaves behind stays in this run's directory, not in /tmp (not
        # under mpirun: its socket paths must stay short).
        env["TMPDIR"] = this.run_root
    return env


# ---------------------------------------------------------------- the bound


def gpu_link_csv_name(spec: LaunchSpec, this: LaunchHost) -> str | None:
    """Intra-node launches on NVIDIA GPUs sample the PCIe links under load into this file."""
    if spec.kind != "intra" or this.gpu_vendor != "nvidia":
        return None
    return f"gpu-link-{spec.collectives[0]}.csv" if len(spec.collectives) == 1 else "gpu-link.csv"


def bounded(
    spec: LaunchSpec, this: LaunchHost, launch_dir: str, gpu_link: str | None, argv: Sequence[str]
) -> tuple[str, ...]:
    """argv under the launch wrapper: umask 077, killed with everything that names the launch
    directory after collbench_timeout_s (+ kill_after_s), exit 124 then."""
    return (
        this.node_python,
        this.wrapper,
        *("--timeout-s", str(spec.params.timeout_s), "--kill-after-s", str(spec.kill_after_s)),
        *("--match", launch_dir),
        *(("--gpu-link-csv", f"{launch_dir}/{gpu_link}") if gpu_link else ()),
        "--",
        *argv,
    )


# ---------------------------------------------------------------- from Jinja's plain values


def spec_from_dict(data: Mapping[str, Any]) -> LaunchSpec:
    """A LaunchSpec from the plain dict the role builds (roles/benchmark/tasks/launch.yml)."""
    try:
        params = data["params"]
        return LaunchSpec(
            backend=str(data["backend"]),
            launcher=str(data["launcher"]),
            kind=str(data["kind"]),
            label=str(data["label"]),
            hosts=tuple(host_from_dict(host) for host in data["hosts"]),
            this_host=str(data["this_host"]),
            collectives=tuple(str(c) for c in data["collectives"]),
            params=Params(
                **{name: int(params[name]) for name in INT_PARAMS},
                nccl_debug=str(params.get("nccl_debug") or ""),
                nccl_algo_pairs=str(params.get("nccl_algo_pairs") or ""),
            ),
            rdzv_port=int(data["rdzv_port"]),
            round=int(data["round"]) if data.get("round") not in (None, "") else None,
            env={str(k): "" if v is None else str(v) for k, v in (data.get("env") or {}).items()},
            script=str(data.get("script") or ""),
            bindir=str(data.get("bindir") or ""),
            nccl_tests_json=optional_bool(data.get("nccl_tests_json")),
            mpirun_mca=tuple((str(k), str(v)) for k, v in (data.get("mpirun_mca") or {}).items()),
            mpirun_extra_args=tuple(str(a) for a in data.get("mpirun_extra_args") or ()),
            kill_after_s=int(data.get("kill_after_s", 10)),
            slurm=slurm_from_dict(data.get("slurm")) if data.get("launcher") == "srun" else None,
        )
    except (KeyError, TypeError, ValueError) as err:
        if isinstance(err, LaunchError):
            raise
        raise LaunchError(f"the launch's description is incomplete or malformed: {err!r}") from None


INT_PARAMS = ("min_bytes", "max_bytes", "step_factor", "iters", "warmup_iters", "check", "timeout_s")


def host_from_dict(data: Mapping[str, Any]) -> LaunchHost:
    mpi = data.get("mpi") or {}
    devices = data.get("gpu_devices")
    if devices is not None and (isinstance(devices, (str, bytes)) or not isinstance(devices, Sequence)):
        raise LaunchError(
            f"{data.get('name')}: collbench_gpu_devices must be a list of GPU indices, not {devices!r}"
        )
    rsh = data.get("rsh_args") or ()
    if isinstance(rsh, (str, bytes)):
        raise LaunchError(f"{data.get('name')}: collbench_mpi_rsh_args must be a list, not {rsh!r}")
    return LaunchHost(
        name=str(data["name"]),
        address=str(data["address"]),
        run_root=str(data["run_root"]),
        ranks=int(data["ranks"]),
        python=str(data.get("python") or "python3"),
        node_python=str(data.get("node_python") or "/usr/bin/python3"),
        wrapper=str(data["wrapper"]),
        net_if=str(data.get("net_if") or ""),
        gpu_vendor=data.get("gpu_vendor") or None,
        gpu_count=int(data.get("gpu_count") or 0),
        torch_devices=int(data.get("torch_devices") or 0),
        gpu_devices=None if devices is None else tuple(int(d) for d in devices),
        mpi=MpiInstall(mpirun=str(mpi.get("mpirun", "mpirun") or ""), prefix=str(mpi.get("prefix") or "")),
        rsh_args=tuple(str(a) for a in rsh),
        ld_library_path=str(data.get("ld_library_path") or ""),
        is_root=bool(data.get("is_root")),
    )


def slurm_from_dict(data: Any) -> SlurmStep | None:
    if not data or not data.get("job_id"):
        return None
    extra = data.get("step_extra_args") or ()
    if isinstance(extra, (str, bytes)):
        raise LaunchError(f"collbench_slurm_step_extra_args must be a list, not {extra!r}")
    return SlurmStep(
        job_id=str(data["job_id"]),
        nodes=tuple(str(n) for n in data.get("nodes") or ()),
        mpi=str(data.get("mpi") or "pmix"),
        step_extra_args=tuple(str(a) for a in extra),
    )


def optional_bool(value: Any) -> bool | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def launch_command_dict(data: Mapping[str, Any]) -> dict[str, Any]:
    """launch_command for Jinja: plain dicts and lists in, plain dicts and lists out."""
    command = launch_command(spec_from_dict(data))
    return {
        "launcher": command.launcher,
        "runners": list(command.runners),
        "launch_dir": command.launch_dir,
        "hostfile": command.hostfile,
        "binary_link": list(command.binary_link) if command.binary_link else None,
        "gpu_link_csv": command.gpu_link_csv,
        "argv": list(command.argv),
        "bounded_argv": list(command.bounded_argv),
        "env": dict(command.env),
    }
