"""collbench_py.launch.spec: the command line of every backend x launcher x kind of launch, exactly.

The argv a host runs is asserted in full, so a change in what mpirun, torchrun or nccl-tests
receive shows up here. The launches run for real in tests/cluster/test_bench_e2e.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from collbench_py.launch.spec import (
    LaunchError,
    LaunchHost,
    LaunchSpec,
    MpiInstall,
    Params,
    SlurmStep,
    launch_command,
    launch_command_dict,
)

RUN = "20260101T000000Z-abcd"
PARAMS = Params(
    min_bytes=1024,
    max_bytes=4096,
    step_factor=2,
    iters=5,
    warmup_iters=1,
    check=1,
    timeout_s=100,
    nccl_debug="WARN",
    nccl_algo_pairs="Ring",
)
NCCL_ARGS = ["-b", "1024", "-e", "4096", "-f", "2", "-n", "5", "-w", "1", "-c", "1"]
MCA = (("pml", "ob1"), ("btl", "tcp,self"))


def host(index: int, **changes: Any) -> LaunchHost:
    name = f"node{index}"
    base = LaunchHost(
        name=name,
        address=f"10.0.0.{10 + index}",
        run_root=f"/w/runs/{RUN}/{name}",
        ranks=8,
        python="/venv/bin/python",
        node_python="/usr/bin/python3",
        wrapper="/w/bin/launch_wrapper.py",
        net_if="eth0",
        gpu_vendor="nvidia",
        gpu_count=8,
        torch_devices=8,
        mpi=MpiInstall("/opt/hpcx/ompi/bin/mpirun", "/opt/hpcx/ompi"),
        ld_library_path="/opt/nccl/lib",
        is_root=True,
    )
    return replace(base, **changes)


def spec(backend: str, launcher: str, kind: str, hosts: tuple[LaunchHost, ...], **changes: Any) -> LaunchSpec:
    collectives = ("all_reduce", "all_gather") if backend == "torch" else ("all_reduce",)
    label = {"intra": "intra", "all": "all", "pair": "pair-node1--node2"}[kind]
    if backend != "torch":
        label += "-all_reduce"
    base = LaunchSpec(
        backend=backend,
        launcher=launcher,
        kind=kind,
        label=label,
        hosts=hosts,
        this_host=hosts[0].name,
        collectives=collectives,
        params=PARAMS,
        rdzv_port=29400,
        round=2 if kind == "pair" else None,
        script="/w/bin/collbench_torch_bench.py",
        bindir="/w/nccl-tests/build",
        mpirun_mca=MCA,
        kill_after_s=10,
    )
    return replace(base, **changes)


def torch_script(out_dir: str, backend: str = "nccl") -> list[str]:
    return [
        "/w/bin/collbench_torch_bench.py",
        *("--collectives", "all_reduce,all_gather", "--min-bytes", "1024", "--max-bytes", "4096"),
        *("--step-factor", "2", "--iters", "5", "--warmup", "1", "--check", "1"),
        *("--backend", backend, "--timeout-s", "80", "--out-dir", out_dir),
    ]


def mpirun_head() -> list[str]:
    argv = ["/opt/hpcx/ompi/bin/mpirun", "--prefix", "/opt/hpcx/ompi", "--bind-to", "none"]
    argv += ["--allow-run-as-root", "--mca", "pml", "ob1", "--mca", "btl", "tcp,self"]
    return [*argv, "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0"]


ENV_ETH0 = {"NCCL_DEBUG": "WARN", "GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "eth0"}


# ---------------------------------------------------------------- torch


@pytest.mark.parametrize("launcher", ["torchrun", "mpirun"])
def test_torch_intra_is_a_standalone_torchrun_whatever_the_launcher(launcher: str) -> None:
    cmd = launch_command(spec("torch", launcher, "intra", (host(1),)))
    out = f"/w/runs/{RUN}/node1/intra"
    assert cmd.launcher == "local" and cmd.runners == ("node1",) and cmd.launch_dir == out
    assert list(cmd.argv) == [
        *("/venv/bin/python", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=8"),
        *torch_script(out),
    ]
    assert cmd.hostfile is None and cmd.binary_link is None
    assert cmd.env == {**ENV_ETH0, "TZ": "UTC", "TMPDIR": f"/w/runs/{RUN}/node1"}


@pytest.mark.parametrize("kind", ["all", "pair"])
def test_torchrun_across_hosts_uses_the_static_rendezvous_with_each_hosts_rank(kind: str) -> None:
    hosts = (host(1), host(2), host(3)) if kind == "all" else (host(2), host(1))
    port = 29400 if kind == "all" else 29402  # pairs: round 2 listens on base + 2
    for rank, this in enumerate(hosts):
        cmd = launch_command(spec("torch", "torchrun", kind, hosts, this_host=this.name))
        out = f"{this.run_root}/{cmd.launch_dir.rsplit('/', 1)[1]}"
        assert cmd.launcher == "torchrun" and cmd.runners == tuple(h.name for h in hosts)
        assert cmd.launch_dir == out  # each host writes into its own directory
        assert list(cmd.argv) == [
            *("/venv/bin/python", "-m", "torch.distributed.run"),
            f"--nnodes={len(hosts)}",
            f"--node_rank={rank}",
            f"--master_addr={hosts[0].address}",
            f"--master_port={port}",
            "--nproc_per_node=8",
            *torch_script(out),
        ]
        # No c10d endpoint: torch would guess from it which host runs the store.
        assert not [arg for arg in cmd.argv if arg.startswith("--rdzv")]


def test_torchrun_ranks_per_host_follow_each_host() -> None:
    hosts = (host(1, ranks=2, torch_devices=0), host(2, ranks=3, torch_devices=0))
    cmd = launch_command(spec("torch", "torchrun", "all", hosts, this_host="node2"))
    assert "--nproc_per_node=3" in cmd.argv and "--node_rank=1" in cmd.argv
    assert cmd.argv[cmd.argv.index("--backend") + 1] == "gloo"


@pytest.mark.parametrize("kind", ["all", "pair"])
def test_torch_under_mpirun_runs_from_the_head_with_master_addr_exported(kind: str) -> None:
    hosts = (host(1), host(2))
    head = launch_command(spec("torch", "mpirun", kind, hosts))
    out = f"/w/runs/{RUN}/node1/{head.launch_dir.rsplit('/', 1)[1]}"
    port = "29400" if kind == "all" else "29402"
    algo = ["-x", "NCCL_ALGO=Ring"] if kind == "pair" else []
    assert head.launcher == "mpirun" and head.runners == ("node1",) and head.launch_dir == out
    assert list(head.argv) == [
        *mpirun_head(),
        *("-np", "16", "--hostfile", f"{out}/hostfile"),
        *("-x", "NCCL_DEBUG=WARN", "-x", "GLOO_SOCKET_IFNAME=eth0", "-x", "NCCL_SOCKET_IFNAME=eth0"),
        *algo,
        *("-x", "MASTER_ADDR=10.0.0.11", "-x", f"MASTER_PORT={port}"),
        "/venv/bin/python",
        *torch_script(out),
    ]
    assert head.hostfile == "10.0.0.11 slots=8\n10.0.0.12 slots=8\n"
    # mpirun's socket paths must stay short: no TMPDIR in the run directory.
    assert "TMPDIR" not in head.env
    other = launch_command(spec("torch", "mpirun", kind, hosts, this_host="node2"))
    assert other.argv == () and other.bounded_argv == () and other.launch_dir == out


# ---------------------------------------------------------------- nccl-tests


def test_nccl_intra_runs_one_process_per_gpu_under_mpirun_on_the_host_itself() -> None:
    cmd = launch_command(spec("nccl-tests", "mpirun", "intra", (host(1),)))
    out = f"/w/runs/{RUN}/node1/intra-all_reduce"
    assert cmd.launcher == "mpirun" and cmd.runners == ("node1",)
    assert cmd.hostfile == "localhost slots=8\n"
    assert cmd.binary_link == ("/w/nccl-tests/build/all_reduce_perf", f"{out}/all_reduce_perf")
    assert list(cmd.argv) == [
        *mpirun_head(),
        *("-np", "8", "--hostfile", f"{out}/hostfile"),
        *("-x", "NCCL_DEBUG=WARN", "-x", "GLOO_SOCKET_IFNAME=eth0", "-x", "NCCL_SOCKET_IFNAME=eth0"),
        *("-x", "LD_LIBRARY_PATH=/opt/nccl/lib"),
        f"{out}/all_reduce_perf",
        *NCCL_ARGS,
        *("-g", "1", "-J", f"{out}/all_reduce.json"),
    ]


def test_nccl_intra_without_mpirun_drives_every_gpu_from_one_process() -> None:
    lone = host(1, mpi=MpiInstall(mpirun="", prefix=""))
    cmd = launch_command(spec("nccl-tests", "mpirun", "intra", (lone,)))
    out = f"/w/runs/{RUN}/node1/intra-all_reduce"
    assert cmd.launcher == "local" and cmd.hostfile is None
    assert list(cmd.argv) == [f"{out}/all_reduce_perf", *NCCL_ARGS, "-g", "8", "-J", f"{out}/all_reduce.json"]
    assert cmd.env == {**ENV_ETH0, "LD_LIBRARY_PATH": "/opt/nccl/lib", "TZ": "UTC"}


def test_nccl_intra_with_torchrun_as_launcher_runs_the_binary_alone() -> None:
    cmd = launch_command(spec("nccl-tests", "torchrun", "intra", (host(1),)))
    out = f"/w/runs/{RUN}/node1/intra-all_reduce"
    assert cmd.launcher == "local" and cmd.hostfile is None
    assert list(cmd.argv) == [f"{out}/all_reduce_perf", *NCCL_ARGS, "-g", "8", "-J", f"{out}/all_reduce.json"]


@pytest.mark.parametrize("kind", ["all", "pair"])
def test_nccl_across_hosts_is_mpirun_from_the_head_with_one_gpu_per_process(kind: str) -> None:
    rsh = ("-i", "/x/key", "-o", "UserKnownHostsFile=/x/known_hosts", "-o", "StrictHostKeyChecking=yes")
    hosts = (host(1, rsh_args=rsh), host(2), host(3)) if kind == "all" else (host(1, rsh_args=rsh), host(2))
    cmd = launch_command(spec("nccl-tests", "mpirun", kind, hosts))
    out = cmd.launch_dir
    assert out == f"/w/runs/{RUN}/node1/{'all' if kind == 'all' else 'pair-node1--node2'}-all_reduce"
    algo = ["-x", "NCCL_ALGO=Ring"] if kind == "pair" else []
    assert list(cmd.argv) == [
        *mpirun_head(),
        *("--mca", "plm_rsh_agent", "ssh"),
        *(
            "--mca",
            "plm_rsh_args",
            "-i /x/key -o UserKnownHostsFile=/x/known_hosts -o StrictHostKeyChecking=yes",
        ),
        *("-np", str(8 * len(hosts)), "--hostfile", f"{out}/hostfile"),
        *("-x", "NCCL_DEBUG=WARN", "-x", "GLOO_SOCKET_IFNAME=eth0", "-x", "NCCL_SOCKET_IFNAME=eth0"),
        *algo,
        *("-x", "LD_LIBRARY_PATH=/opt/nccl/lib"),
        f"{out}/all_reduce_perf",
        *NCCL_ARGS,
        *("-g", "1", "-J", f"{out}/all_reduce.json"),
    ]
    assert cmd.hostfile == "".join(f"{h.address} slots=8\n" for h in hosts)
    assert cmd.gpu_link_csv is None  # sampled on intra-node launches only
    # Every host links the binary at the head's path: mpirun starts the same path everywhere.
    for other in hosts[1:]:
        theirs = launch_command(spec("nccl-tests", "mpirun", kind, hosts, this_host=other.name))
        assert theirs.argv == () and theirs.binary_link == cmd.binary_link


def test_nccl_tests_cannot_be_started_by_torchrun_across_hosts() -> None:
    with pytest.raises(LaunchError, match="needs mpirun or srun across hosts"):
        launch_command(spec("nccl-tests", "torchrun", "all", (host(1), host(2))))


def test_rccl_tests_select_gpus_with_hip_and_write_no_json_by_default() -> None:
    amd = host(1, gpu_vendor="amd", ranks=4)
    cmd = launch_command(spec("rccl-tests", "mpirun", "intra", (amd,)))
    assert "-J" not in cmd.argv
    assert "HIP_VISIBLE_DEVICES=0,1,2,3" in cmd.argv and cmd.env["HIP_VISIBLE_DEVICES"] == "0,1,2,3"
    assert "CUDA_VISIBLE_DEVICES" not in cmd.env
    assert cmd.gpu_link_csv is None  # PCIe link samples come from nvidia-smi
    forced = launch_command(spec("rccl-tests", "mpirun", "intra", (amd,), nccl_tests_json=True))
    assert "-J" in forced.argv
    off = launch_command(spec("nccl-tests", "mpirun", "intra", (host(1),), nccl_tests_json=False))
    assert "-J" not in off.argv


# ---------------------------------------------------------------- the fixes, one by one


def test_mpirun_is_the_hosts_own_with_its_prefix_else_the_one_on_path() -> None:
    cmd = launch_command(spec("nccl-tests", "mpirun", "all", (host(1), host(2))))
    assert cmd.argv[:3] == ("/opt/hpcx/ompi/bin/mpirun", "--prefix", "/opt/hpcx/ompi")
    plain = (host(1, mpi=MpiInstall()), host(2, mpi=MpiInstall()))
    cmd = launch_command(spec("nccl-tests", "mpirun", "all", plain))
    assert cmd.argv[:3] == ("mpirun", "--bind-to", "none") and "--prefix" not in cmd.argv
    # A head with no mpirun of its own: the one on PATH, across hosts.
    none = (host(1, mpi=MpiInstall("", "")), host(2))
    assert launch_command(spec("nccl-tests", "mpirun", "all", none)).argv[0] == "mpirun"
    # The distribution's Open MPI (prefix /usr): no --prefix, which would put /usr/lib in front of
    # the ranks' LD_LIBRARY_PATH (seen on a real H100 node).
    system = (
        host(1, mpi=MpiInstall("/usr/bin/mpirun", "/usr")),
        host(2, mpi=MpiInstall("/usr/bin/mpirun", "/usr")),
    )
    assert "--prefix" not in launch_command(spec("nccl-tests", "mpirun", "all", system)).argv


def test_mpirun_mca_settings_are_the_users_and_can_be_emptied() -> None:
    bare = host(1, net_if="", is_root=False, mpi=MpiInstall())
    cmd = launch_command(spec("nccl-tests", "mpirun", "all", (bare, host(2)), mpirun_mca=()))
    assert "--mca" not in cmd.argv and "--allow-run-as-root" not in cmd.argv
    ucx = launch_command(
        spec("nccl-tests", "mpirun", "all", (host(1), host(2)), mpirun_mca=(("pml", "ucx"),))
    )
    assert ucx.argv[ucx.argv.index("--mca") : ucx.argv.index("--mca") + 3] == ("--mca", "pml", "ucx")


def test_rsh_args_reach_mpirun_as_one_argument_and_only_across_hosts() -> None:
    rsh = ("-i", "/x/key", "-o", "BatchMode=yes")
    cmd = launch_command(spec("nccl-tests", "mpirun", "pair", (host(1, rsh_args=rsh), host(2))))
    at = cmd.argv.index("plm_rsh_args")
    assert cmd.argv[at - 3 : at + 2] == (
        "plm_rsh_agent",
        "ssh",
        "--mca",
        "plm_rsh_args",
        "-i /x/key -o BatchMode=yes",
    )
    assert "plm_rsh_args" not in launch_command(spec("nccl-tests", "mpirun", "pair", (host(1), host(2)))).argv
    intra = launch_command(spec("nccl-tests", "mpirun", "intra", (host(1, rsh_args=rsh),)))
    assert "plm_rsh_args" not in intra.argv  # no ssh on the host itself


def test_rsh_args_with_a_space_are_refused_with_a_message() -> None:
    spaced = host(1, rsh_args=("-i", "/home/me/my key"))
    with pytest.raises(
        LaunchError, match="ssh option '/home/me/my key' for mpirun is empty or holds a space"
    ):
        launch_command(spec("nccl-tests", "mpirun", "pair", (spaced, host(2))))


def test_the_builds_library_path_comes_first_and_the_users_stays() -> None:
    user = {"LD_LIBRARY_PATH": "/opt/aws-ofi-nccl/lib", "NCCL_IB_HCA": "mlx5_0"}
    cmd = launch_command(spec("nccl-tests", "mpirun", "pair", (host(1), host(2)), env=user))
    assert cmd.env["LD_LIBRARY_PATH"] == "/opt/nccl/lib:/opt/aws-ofi-nccl/lib"
    assert "LD_LIBRARY_PATH=/opt/nccl/lib:/opt/aws-ofi-nccl/lib" in cmd.argv
    assert "NCCL_IB_HCA=mlx5_0" in cmd.argv
    # No build path: the user's alone; neither: not set at all.
    alone = (host(1, ld_library_path=""), host(2, ld_library_path=""))
    assert launch_command(spec("nccl-tests", "mpirun", "all", alone, env=user)).env["LD_LIBRARY_PATH"] == (
        "/opt/aws-ofi-nccl/lib"
    )
    assert "LD_LIBRARY_PATH" not in launch_command(spec("nccl-tests", "mpirun", "all", alone)).env
    # The torch benchmark needs no build path: the user's passes as given.
    torch = launch_command(spec("torch", "torchrun", "all", (host(1), host(2)), env=user))
    assert torch.env["LD_LIBRARY_PATH"] == "/opt/aws-ofi-nccl/lib"


def test_a_gpu_left_out_is_hidden_from_the_ranks() -> None:
    broken6 = host(1, ranks=7, gpu_devices=(0, 1, 2, 3, 4, 5, 7))
    for backend, launcher in [("nccl-tests", "mpirun"), ("torch", "torchrun")]:
        cmd = launch_command(spec(backend, launcher, "intra", (broken6,)))
        assert cmd.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,7"
    cmd = launch_command(spec("nccl-tests", "mpirun", "intra", (broken6,)))
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,7" in cmd.argv
    assert cmd.argv[cmd.argv.index("-np") + 1] == "7"


def test_fewer_ranks_than_gpus_take_the_first_gpus_and_all_gpus_need_no_variable() -> None:
    four = launch_command(spec("nccl-tests", "mpirun", "intra", (host(1, ranks=4),)))
    assert four.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert "CUDA_VISIBLE_DEVICES" not in launch_command(spec("nccl-tests", "mpirun", "intra", (host(1),))).env
    # The torch benchmark on CPUs (torch sees no GPU, gloo) selects nothing.
    cpu = host(1, ranks=2, torch_devices=0)
    assert "CUDA_VISIBLE_DEVICES" not in launch_command(spec("torch", "torchrun", "intra", (cpu,))).env


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        ((0, 1, 2), "lists 3 GPUs for 4 ranks"),
        ((0, 1, 2, 8), r"must be distinct GPU indices from 0 to 7"),
        ((0, 1, 1, 2), r"must be distinct GPU indices from 0 to 7"),
    ],
)
def test_a_wrong_gpu_list_is_refused_with_a_message(devices: tuple[int, ...], message: str) -> None:
    with pytest.raises(LaunchError, match=message):
        launch_command(spec("nccl-tests", "mpirun", "intra", (host(1, ranks=4, gpu_devices=devices),)))


def test_hosts_with_different_gpus_get_one_mpirun_app_context_each() -> None:
    hosts = (host(1, ranks=7, gpu_devices=(0, 1, 2, 3, 4, 5, 7)), host(2, ranks=7))
    cmd = launch_command(spec("nccl-tests", "mpirun", "pair", hosts))
    out = cmd.launch_dir
    program = [f"{out}/all_reduce_perf", *NCCL_ARGS, "-g", "1", "-J", f"{out}/all_reduce.json"]
    env = ["-x", "NCCL_DEBUG=WARN", "-x", "GLOO_SOCKET_IFNAME=eth0", "-x", "NCCL_SOCKET_IFNAME=eth0"]
    tail = ["-x", "NCCL_ALGO=Ring", "-x", "LD_LIBRARY_PATH=/opt/nccl/lib"]
    assert list(cmd.argv) == [
        *mpirun_head(),
        *("-np", "7", "--host", "10.0.0.11:7", *env, "-x", "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,7", *tail),
        *program,
        ":",
        *("-np", "7", "--host", "10.0.0.12:7", *env, "-x", "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6", *tail),
        *program,
    ]
    assert cmd.hostfile is None


# ---------------------------------------------------------------- the bound


def test_every_launch_runs_under_the_wrapper_and_intra_nvidia_samples_the_links() -> None:
    cmd = launch_command(spec("nccl-tests", "mpirun", "intra", (host(1),)))
    out = cmd.launch_dir
    assert list(cmd.bounded_argv) == [
        *("/usr/bin/python3", "/w/bin/launch_wrapper.py", "--timeout-s", "100", "--kill-after-s", "10"),
        *("--match", out, "--gpu-link-csv", f"{out}/gpu-link-all_reduce.csv", "--"),
        *cmd.argv,
    ]
    assert cmd.gpu_link_csv == "gpu-link-all_reduce.csv"
    pair = launch_command(spec("torch", "torchrun", "pair", (host(1), host(2))))
    assert list(pair.bounded_argv[:9]) == [
        *("/usr/bin/python3", "/w/bin/launch_wrapper.py", "--timeout-s", "100", "--kill-after-s", "10"),
        *("--match", pair.launch_dir, "--"),
    ]
    amd = launch_command(spec("rccl-tests", "mpirun", "intra", (host(1, gpu_vendor="amd"),)))
    assert "--gpu-link-csv" not in amd.bounded_argv


# ---------------------------------------------------------------- from the role (Jinja values)


def role_spec(**changes: Any) -> dict[str, Any]:
    """What roles/benchmark/tasks/launch.yml hands the filter: templated strings, nulls, dicts."""
    hosts = [
        {
            "name": f"node{i}",
            "address": f"10.0.0.{10 + i}",
            "run_root": f"/w/runs/{RUN}/node{i}",
            "ranks": "2",
            "python": "/venv/bin/python",
            "node_python": "/usr/bin/python3",
            "wrapper": "/w/bin/launch_wrapper.py",
            "net_if": "",
            "gpu_vendor": None,
            "gpu_count": "0",
            "torch_devices": "0",
            "gpu_devices": None,
            "mpi": {"mpirun": "mpirun", "prefix": ""},
            "rsh_args": [],
            "ld_library_path": "",
            "is_root": True,
        }
        for i in (1, 2)
    ]
    params = {
        "collectives": ["all_reduce"],
        "min_bytes": 1024,
        "max_bytes": "4096",
        "step_factor": 2,
        "iters": 5,
        "warmup_iters": 1,
        "check": 1,
        "timeout_s": 100,
        "nccl_algo_pairs": "Ring",
        "nccl_debug": "",
    }
    data = {
        "backend": "torch",
        "launcher": "torchrun",
        "kind": "all",
        "label": "all",
        "hosts": hosts,
        "this_host": "node2",
        "collectives": ["all_reduce"],
        "params": params,
        "rdzv_port": "29400",
        "round": None,
        "env": {"FOO": "bar", "EMPTY": None},
        "script": "/w/bin/collbench_torch_bench.py",
        "bindir": "",
        "nccl_tests_json": None,
        "mpirun_mca": {"pml": "ob1", "btl": "tcp,self"},
        "mpirun_extra_args": [],
        "kill_after_s": "10",
    }
    return {**data, **changes}


def test_the_roles_plain_values_are_taken() -> None:
    command = launch_command_dict(role_spec())
    assert command["launcher"] == "torchrun" and command["runners"] == ["node1", "node2"]
    assert command["argv"][3:8] == [
        "--nnodes=2",
        "--node_rank=1",
        "--master_addr=10.0.0.11",
        "--master_port=29400",
        "--nproc_per_node=2",
    ]
    assert command["env"] == {"FOO": "bar", "TZ": "UTC", "TMPDIR": f"/w/runs/{RUN}/node2"}
    assert command["bounded_argv"][-len(command["argv"]) :] == command["argv"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"kind": "sideways"}, "unknown kind of launch 'sideways'"),
        ({"this_host": "node9"}, "node9 is not one of the launch's hosts"),
        ({"rdzv_port": "many"}, "incomplete or malformed"),
        ({"params": {}}, "incomplete or malformed"),
    ],
)
def test_a_bad_description_is_one_message(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(LaunchError, match=message):
        launch_command_dict(role_spec(**changes))


def test_a_gpu_list_that_is_not_a_list_is_refused() -> None:
    data = role_spec()
    data["hosts"][0]["gpu_devices"] = "0,1"
    with pytest.raises(LaunchError, match="must be a list of GPU indices"):
        launch_command_dict(data)


# ---------------------------------------------------------------- srun

SLURM = SlurmStep(
    job_id="77",
    nodes=("node1", "node2", "node3"),  # the allocation's order: rank 0 goes to the first
    mpi="pmix",
)


def srun_spec(backend: str, kind: str, hosts: tuple[LaunchHost, ...], **changes: Any) -> LaunchSpec:
    return spec(backend, "srun", kind, hosts, slurm=SLURM, **changes)


def srun_head(label: str, hosts: str, count: int, ranks: int = 8) -> list[str]:
    argv = ["srun", "-v", "--jobid", "77", "--job-name", label, "-N", str(count), "-w", hosts]
    return [*argv, "--ntasks-per-node", str(ranks), "--time", "2", "--kill-on-bad-exit=1"]


def bound_on_rank_zero_node(launch_dir: str, gpu_link: str | None = None) -> list[str]:
    return [
        "/usr/bin/python3",
        "/w/bin/launch_wrapper.py",
        *("--timeout-s", "100", "--kill-after-s", "10", "--match", launch_dir),
        *(("--gpu-link-csv", f"{launch_dir}/{gpu_link}") if gpu_link else ()),
        "--",
    ]


@pytest.mark.parametrize("kind", ["intra", "all", "pair"])
def test_torch_under_srun_is_one_step_from_its_rank_zero_node_for_every_kind(kind: str) -> None:
    hosts = {"intra": (host(2),), "all": (host(1), host(2), host(3)), "pair": (host(1), host(2))}[kind]
    label = {"intra": "intra", "all": "all", "pair": "pair-node1--node2"}[kind]
    names = ",".join(h.name for h in hosts)
    first = hosts[0]
    launch_dir = f"{first.run_root}/{label}"
    cmd = launch_command(srun_spec("torch", kind, hosts))
    assert cmd.launcher == "srun"
    assert cmd.runners == (first.name,) and cmd.launch_dir == launch_dir
    assert cmd.hostfile is None and cmd.binary_link is None
    # The node that runs srun holds rank 0: an intra-node step's links are sampled there.
    gpu_link = "gpu-link.csv" if kind == "intra" else None
    assert cmd.gpu_link_csv == gpu_link
    program = ["/venv/bin/python", *torch_script(launch_dir)]
    assert list(cmd.argv) == [*srun_head(label, names, len(hosts)), "--", *program]
    assert list(cmd.bounded_argv) == [*bound_on_rank_zero_node(launch_dir, gpu_link), *cmd.argv]
    # Slurm's rank environment, and rank 0's address for the rendezvous, on every task.
    port = "29402" if kind == "pair" else "29400"
    assert cmd.env["MASTER_ADDR"] == first.address and cmd.env["MASTER_PORT"] == port
    assert cmd.env["TZ"] == "UTC" and "TMPDIR" not in cmd.env


def test_srun_rank_zero_is_the_first_node_in_slurm_order_whatever_the_launch_order() -> None:
    # Slurm orders a step's nodes as the allocation lists them: -w node3,node1 still puts rank 0 on node1.
    hosts = (host(3), host(1))
    cmd = launch_command(srun_spec("torch", "pair", hosts, this_host="node1"))
    assert cmd.runners == ("node1",)
    assert cmd.env["MASTER_ADDR"] == host(1).address
    assert cmd.argv[cmd.argv.index("-w") + 1] == "node1,node3"
    assert cmd.launch_dir == f"{host(1).run_root}/pair-node1--node2"
    # The other host runs nothing: srun starts its tasks.
    assert launch_command(srun_spec("torch", "pair", hosts, this_host="node3")).argv == ()


@pytest.mark.parametrize("kind", ["intra", "all", "pair"])
def test_nccl_tests_under_srun_one_rank_per_gpu_over_the_sites_pmi(kind: str) -> None:
    hosts = {"intra": (host(1),), "all": (host(1), host(2), host(3)), "pair": (host(1), host(2))}[kind]
    label = {"intra": "intra", "all": "all", "pair": "pair-node1--node2"}[kind] + "-all_reduce"
    launch_dir = f"{hosts[0].run_root}/{label}"
    cmd = launch_command(srun_spec("nccl-tests", kind, hosts))
    # The build's own binary on every node: no link, no hostfile, nothing prepared on the other nodes.
    program = [
        "/w/nccl-tests/build/all_reduce_perf",
        *NCCL_ARGS,
        "-g",
        "1",
        "-J",
        f"{launch_dir}/all_reduce.json",
    ]
    names = ",".join(h.name for h in hosts)
    assert list(cmd.argv) == [*srun_head(label, names, len(hosts)), "--mpi=pmix", "--", *program]
    assert cmd.binary_link is None and cmd.hostfile is None
    assert cmd.env["LD_LIBRARY_PATH"] == "/opt/nccl/lib" and "MASTER_ADDR" not in cmd.env


def test_srun_step_extra_args_and_mpi_plugin_come_before_the_program() -> None:
    slurm = replace(SLURM, mpi="pmi2", step_extra_args=("--container-image=nvcr.io#nvidia/pytorch",))
    cmd = launch_command(spec("nccl-tests", "srun", "all", (host(1), host(2)), slurm=slurm))
    tail = list(cmd.argv[cmd.argv.index("--kill-on-bad-exit=1") + 1 : cmd.argv.index("--")])
    assert tail == ["--mpi=pmi2", "--container-image=nvcr.io#nvidia/pytorch"]


@pytest.mark.parametrize(("timeout_s", "minutes"), [(1, "1"), (60, "1"), (61, "2"), (600, "10")])
def test_srun_step_time_holds_the_projects_bound(timeout_s: int, minutes: str) -> None:
    cmd = launch_command(
        srun_spec("torch", "all", (host(1), host(2)), params=replace(PARAMS, timeout_s=timeout_s))
    )
    assert cmd.argv[cmd.argv.index("--time") + 1] == minutes


def test_srun_refuses_what_a_step_cannot_carry() -> None:
    with pytest.raises(LaunchError, match="needs the run's Slurm allocation"):
        launch_command(spec("torch", "srun", "all", (host(1), host(2))))
    with pytest.raises(LaunchError, match="not in the run's Slurm allocation"):
        launch_command(srun_spec("torch", "all", (host(1), host(4))))
    with pytest.raises(LaunchError, match="different rank counts"):
        launch_command(srun_spec("torch", "all", (host(1), host(2, ranks=4))))
    with pytest.raises(LaunchError, match="one environment"):
        launch_command(
            srun_spec("nccl-tests", "all", (host(1), host(2, gpu_devices=(1, 2, 3, 4, 5, 6, 7, 0))))
        )


def test_srun_from_jinja_values() -> None:
    data = {
        "backend": "torch",
        "launcher": "srun",
        "kind": "all",
        "label": "all",
        "hosts": [launch_host_dict(host(1)), launch_host_dict(host(2))],
        "this_host": "node1",
        "collectives": ["all_reduce", "all_gather"],
        "params": {**PARAMS.__dict__},
        "rdzv_port": 29400,
        "script": "/w/bin/collbench_torch_bench.py",
        "slurm": {
            "job_id": "77",
            "nodes": ["node1", "node2", "node3"],
            "mpi": "pmix",
            "step_extra_args": [],
        },
    }
    made = launch_command_dict(data)
    assert made["runners"] == ["node1"] and made["argv"][:4] == ["srun", "-v", "--jobid", "77"]
    # The allocation is read for srun only: torchrun ignores it.
    assert launch_command_dict({**data, "launcher": "torchrun"})["argv"][:3] == [
        "/venv/bin/python",
        "-m",
        "torch.distributed.run",
    ]


def launch_host_dict(h: LaunchHost) -> dict[str, Any]:
    return {
        "name": h.name,
        "address": h.address,
        "run_root": h.run_root,
        "ranks": h.ranks,
        "python": h.python,
        "wrapper": h.wrapper,
        "net_if": h.net_if,
        "gpu_vendor": h.gpu_vendor,
        "gpu_count": h.gpu_count,
        "torch_devices": h.torch_devices,
        "ld_library_path": h.ld_library_path,
    }
