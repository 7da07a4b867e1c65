#!/usr/bin/env python3
"""Check one node's components: its GPU copy matrix, its NVLinks, its RDMA ports and each HCA's loopback.

Run on the node by the node_checks role with the Python Ansible uses there (3.6 or later, standard
library only; nodes never import collbench_py). It measures and records; the verdicts are made on
the controller from the files it leaves.

    python3 node_checks.py CONFIG_JSON      (the JSON text itself, or the path of a file holding it)

CONFIG_JSON:
    out_dir                 where every output goes (created); checks.json is written there last
    timeout_s               the bound of each check, in seconds (a loopback: its server and client)
    checks                  of "gpu_matrix", "nvlink", "nic"; one left out is recorded as skipped
    nvbandwidth             the nvbandwidth binary, or "" when the node has none
    nvbandwidth_testcases   its testcases (`-t`)
    p2p_test                a prebuilt p2pBandwidthLatencyTest (CUDA samples), run by gpu_matrix
                            instead where there is no nvbandwidth; "" for none
    perftest                {"bin_dir", "gpudirect", "source"}: where ib_write_bw is, and whether it
                            was built with CUDA (`--use_cuda=<gpu>`)
    hcas                    [{"name", "port", "gpu", "numa_node"}]; empty: the active ports of
                            <sys_root>/class/infiniband, GPUs paired by index order
    phase                   "before" (every check) or "after" (only `nvidia-smi nvlink -e` again,
                            added to the checks.json of the "before" phase)
    host                    the name recorded in checks.json (default: this machine's hostname)
    address                 the address each loopback client connects to (default 127.0.0.1)
    loopback_base_port      the first HCA's TCP port; the next HCA takes the next one (default 18515)
    sys_root                where sysfs is mounted (default /sys)

Every command is an argv list, runs in its own process group, and is killed with its group at its
bound (status "timeout", the output so far kept). A tool or device the node lacks makes its check
"skipped" with a note, never "ok". A check that raises is "failed" with the message. checks.json is
always written, atomically. Exit status 0 once checks.json is written (what the checks found is in
it), 2 when CONFIG_JSON cannot be read.
"""

import contextlib
import datetime
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

SCHEMA = 1
KILL_GRACE_S = 5.0
HELP_TIMEOUT_S = 30.0
# How long the loopback clients wait for their servers to say they listen.
SERVER_READY_S = 3.0
SERVER_READY_MARK = b"Waiting for client"
LOOPBACK_ARGS = ["-s", "8388608", "-x", "0", "-F", "--report_gbits", "--perform_warm_up"]
DEFAULT_TESTCASES = [
    "device_to_device_memcpy_read_ce",
    "device_to_device_memcpy_write_ce",
    "device_to_device_memcpy_read_sm",
    "device_to_device_memcpy_write_sm",
    "host_to_device_memcpy_ce",
    "device_to_host_memcpy_ce",
]


class ConfigError(Exception):
    """CONFIG_JSON cannot be used (one line for the user)."""


def now_iso():
    return datetime.datetime.utcnow().replace(microsecond=0).isoformat() + "Z"


def check(name, status, note=None, *, argv=None, rc=None, seconds=0.0, files=None):
    return {
        "name": name,
        "status": status,
        "note": note,
        "argv": list(argv or []),
        "rc": rc,
        "seconds": round(float(seconds), 3),
        "files": list(files or []),
    }


def write_atomically(path, text):
    """The file is either its old self or whole: a reader never sees half of it."""
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def tool_env():
    # The C locale keeps the tools' output in the form the parsers read.
    return dict(os.environ, LC_ALL="C")


class Bounded:
    """One command in its own process group, its output written straight into a file so that a
    command killed at its bound leaves what it printed."""

    def __init__(self, argv, out_path, err_path=None):
        self.argv = list(argv)
        self.out_path = out_path
        self.started = time.time()
        self.timed_out = False
        # stderr into its own file, or with stdout (os.devnull stands in when merged).
        with open(out_path, "wb") as out, open(err_path or os.devnull, "wb") as err:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err if err_path else subprocess.STDOUT,
                env=tool_env(),
                start_new_session=True,
            )

    def wait(self, deadline):
        """The exit status, or None when the command ran past `deadline` (its group is killed)."""
        try:
            return self.proc.wait(timeout=max(0.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self):
        self.timed_out = True
        for sig, grace in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue
        # A child that left the group may still hold the pipe; the process itself is gone.
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=KILL_GRACE_S)

    def seconds(self):
        return time.time() - self.started


def run_bounded(argv, out_path, timeout_s, err_path=None):
    """(rc or None on timeout, seconds) of one command run to its end or its bound."""
    command = Bounded(argv, out_path, err_path)
    rc = command.wait(time.time() + timeout_s)
    return rc, command.seconds()


def last_line(path, default):
    try:
        with open(path, "rb") as handle:
            lines = [line.strip() for line in handle.read().decode("utf-8", "replace").splitlines()]
    except OSError:
        return default
    lines = [line for line in lines if line]
    return lines[-1][:300] if lines else default


def read_text(path):
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def drop_if_empty(path):
    if os.path.exists(path) and os.path.getsize(path) == 0:
        os.unlink(path)
        return True
    return False


def outcome(name, command, out_path, timeout_s, what):
    """The check's entry from how its command ended; command = (argv, rc, seconds, files)."""
    argv, rc, seconds, files = command
    if rc is None:
        note = f"{what} ran past {timeout_s}s; killed, its output so far kept"
        return check(name, "timeout", note, argv=argv, seconds=seconds, files=files)
    if rc != 0:
        note = f"{what} exited {rc}: {last_line(out_path, 'no output')}"
        return check(name, "failed", note, argv=argv, rc=rc, seconds=seconds, files=files)
    return check(name, "ok", argv=argv, rc=rc, seconds=seconds, files=files)


# ---- GPU matrix: nvbandwidth


def nvbandwidth_has_json(binary, timeout_s):
    """Whether this nvbandwidth prints JSON (`-j`, v0.5 and later): its --help lists the option."""
    try:
        done = subprocess.run(
            [binary, "--help"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=tool_env(),
            timeout=min(timeout_s, HELP_TIMEOUT_S),
            check=False,
        )
    except (subprocess.TimeoutExpired, OSError):
        return False
    return b"--json" in done.stdout


def waived_note(out_dir, as_json):
    """nvbandwidth waives a testcase the node cannot run (one GPU: no device-to-device copy)."""
    if as_json:
        try:
            with open(os.path.join(out_dir, "nvbandwidth.json")) as handle:
                cases = json.load(handle)["nvbandwidth"]["testcases"]
            names = [case.get("name", "?") for case in cases if case.get("status") == "Waived"]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        return "waived by nvbandwidth: " + ", ".join(names) if names else None
    count = sum(
        1
        for line in read_text(os.path.join(out_dir, "nvbandwidth.txt")).splitlines()
        if line.startswith("Waived")
    )
    return f"{count} testcase(s) waived by nvbandwidth (see nvbandwidth.txt)" if count else None


P2P_TEST_FILE = "p2p-bandwidth-latency.txt"
# The sample times cudaMemcpyPeerAsync on copy engines: an upper bound, not what NCCL moves.
P2P_TEST_NOTE = (
    "p2pBandwidthLatencyTest (prebuilt) instead of nvbandwidth: "
    "its copy-engine figures read higher than NCCL gets"
)


def runnable(path):
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)


def gpu_matrix(config):
    """nvbandwidth where the node has it, else a prebuilt p2pBandwidthLatencyTest, else skipped."""
    name = "gpu_matrix"
    binary = config.get("nvbandwidth") or ""
    p2p_test = config.get("p2p_test") or ""
    if runnable(binary):
        return nvbandwidth_matrix(config, binary)
    if runnable(p2p_test):
        return p2p_test_matrix(config, p2p_test)
    if p2p_test:
        return check(name, "skipped", f"no nvbandwidth, and p2pBandwidthLatencyTest not found at {p2p_test}")
    if not binary:
        return check(name, "skipped", "no nvbandwidth on this node (its build found no CUDA toolkit)")
    return check(name, "skipped", f"nvbandwidth not found at {binary}")


def p2p_test_matrix(config, binary):
    out_dir, timeout_s = config["out_dir"], config["timeout_s"]
    argv = [binary]
    out = os.path.join(out_dir, P2P_TEST_FILE)
    rc, seconds = run_bounded(argv, out, timeout_s)
    result = outcome(
        "gpu_matrix", (argv, rc, seconds, [P2P_TEST_FILE]), out, timeout_s, "p2pBandwidthLatencyTest"
    )
    if result["status"] == "ok":
        result["note"] = P2P_TEST_NOTE
    return result


def nvbandwidth_matrix(config, binary):
    name = "gpu_matrix"
    out_dir, timeout_s = config["out_dir"], config["timeout_s"]
    testcases = list(config.get("nvbandwidth_testcases") or DEFAULT_TESTCASES)
    as_json = nvbandwidth_has_json(binary, timeout_s)
    argv = [binary] + (["-j"] if as_json else []) + ["-t"] + testcases
    txt = os.path.join(out_dir, "nvbandwidth.txt")
    if as_json:
        out = os.path.join(out_dir, "nvbandwidth.json")
        rc, seconds = run_bounded(argv, out, timeout_s, err_path=txt)
        files = ["nvbandwidth.json"] + ([] if drop_if_empty(txt) else ["nvbandwidth.txt"])
    else:
        out = txt
        rc, seconds = run_bounded(argv, out, timeout_s)
        files = ["nvbandwidth.txt"]
    # With -j a failure's words are on stderr (nvbandwidth.txt), when it printed any.
    note_from = txt if as_json and "nvbandwidth.txt" in files else out
    result = outcome(name, (argv, rc, seconds, files), note_from, timeout_s, "nvbandwidth")
    if result["status"] == "ok":
        result["note"] = waived_note(out_dir, as_json)
    return result


# ---- NVLink: nvidia-smi nvlink -s / -e


def lists_links(path):
    return any(line.strip().startswith("Link ") for line in read_text(path).splitlines())


def nvlink(config):
    name = "nvlink"
    smi = shutil.which("nvidia-smi")
    if not smi:
        return check(name, "skipped", "nvidia-smi not found (no NVIDIA driver on this node)")
    out_dir, timeout_s = config["out_dir"], config["timeout_s"]
    deadline = time.time() + timeout_s
    status_argv = [smi, "nvlink", "-s"]
    status_path = os.path.join(out_dir, "nvlink-status.txt")
    rc, seconds = run_bounded(status_argv, status_path, timeout_s)
    result = outcome(
        name,
        (status_argv, rc, seconds, ["nvlink-status.txt"]),
        status_path,
        timeout_s,
        "nvidia-smi nvlink -s",
    )
    if result["status"] != "ok":
        return result
    errors_argv = [smi, "nvlink", "-e"]
    errors_path = os.path.join(out_dir, "nvlink-errors-before.txt")
    rc, more = run_bounded(errors_argv, errors_path, max(1.0, deadline - time.time()))
    errors = outcome(
        name,
        (errors_argv, rc, seconds + more, ["nvlink-status.txt", "nvlink-errors-before.txt"]),
        errors_path,
        timeout_s,
        "nvidia-smi nvlink -e",
    )
    errors["commands"] = [
        {"argv": status_argv, "rc": 0, "file": "nvlink-status.txt"},
        {"argv": errors_argv, "rc": rc, "file": "nvlink-errors-before.txt"},
    ]
    if errors["status"] == "ok" and not lists_links(status_path):
        errors["status"] = "skipped"
        errors["note"] = "no NVLink on this node: nvidia-smi nvlink -s lists no link"
    return errors


def nvlink_after(config):
    name = "nvlink_after"
    smi = shutil.which("nvidia-smi")
    if not smi:
        return check(name, "skipped", "nvidia-smi not found (no NVIDIA driver on this node)")
    argv = [smi, "nvlink", "-e"]
    path = os.path.join(config["out_dir"], "nvlink-errors-after.txt")
    rc, seconds = run_bounded(argv, path, config["timeout_s"])
    return outcome(
        name,
        (argv, rc, seconds, ["nvlink-errors-after.txt"]),
        path,
        config["timeout_s"],
        "nvidia-smi nvlink -e",
    )


# ---- NIC: ports (ibstat / ibv_devinfo, ibdev2netdev) and per-HCA loopback (ib_write_bw)


def nic_ports(config):
    name = "nic_ports"
    out_dir, timeout_s = config["out_dir"], config["timeout_s"]
    ibstat = shutil.which("ibstat")
    devinfo = shutil.which("ibv_devinfo")
    if ibstat:
        argv, file_name, what = [ibstat], "ibstat.txt", "ibstat"
    elif devinfo:
        argv, file_name, what = [devinfo, "-v"], "ibv_devinfo.txt", "ibv_devinfo -v"
    else:
        return check(name, "skipped", "neither ibstat nor ibv_devinfo found (no RDMA tools on this node)")
    path = os.path.join(out_dir, file_name)
    rc, seconds = run_bounded(argv, path, timeout_s)
    files = [file_name]
    ibdev2netdev = shutil.which("ibdev2netdev")
    extra_note = None
    if ibdev2netdev:
        map_path = os.path.join(out_dir, "ibdev2netdev.txt")
        map_rc, more = run_bounded([ibdev2netdev], map_path, timeout_s)
        seconds += more
        files.append("ibdev2netdev.txt")
        if map_rc != 0:
            extra_note = "ibdev2netdev " + ("timed out" if map_rc is None else f"exited {map_rc}")
    result = outcome(name, (argv, rc, seconds, files), path, timeout_s, what)
    sys_root = config.get("sys_root") or "/sys"
    if result["status"] == "failed" and not glob.glob(os.path.join(sys_root, "class", "infiniband", "*")):
        # The tool is installed but the node has no RDMA device: nothing to check, its words kept.
        result["status"] = "skipped"
        result["note"] = "no RDMA device on this node; " + result["note"]
    if extra_note:
        result["note"] = "; ".join(part for part in (result["note"], extra_note) if part)
    return result


def read_sys(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return None


def gpu_count(sys_root):
    """GPUs the NVIDIA driver lists (for pairing HCAs with GPUs by index when none is given)."""
    proc_root = os.path.join(os.path.dirname(sys_root.rstrip("/")) or "/", "proc")
    return len(glob.glob(os.path.join(proc_root, "driver", "nvidia", "gpus", "*")))


def active_ports(sys_root):
    """[{name, port, gpu, numa_node}] of the ACTIVE ports under sysfs, HCAs in name order."""
    found = []
    for state_path in sorted(
        glob.glob(os.path.join(sys_root, "class", "infiniband", "*", "ports", "*", "state"))
    ):
        if "ACTIVE" not in (read_sys(state_path) or ""):
            continue
        port_dir = os.path.dirname(state_path)
        hca_dir = os.path.dirname(os.path.dirname(port_dir))
        numa_node = hca_numa_node(sys_root, os.path.basename(hca_dir))
        try:
            port = int(os.path.basename(port_dir))
        except ValueError:
            continue
        found.append({"name": os.path.basename(hca_dir), "port": port, "gpu": None, "numa_node": numa_node})
    found.sort(key=lambda hca: (natural_key(hca["name"]), hca["port"]))
    gpus = gpu_count(sys_root)
    for index, hca in enumerate(found):
        hca["gpu"] = index % gpus if gpus else None
    return found


def hca_numa_node(sys_root, name):
    value = read_sys(os.path.join(sys_root, "class", "infiniband", name, "device", "numa_node"))
    try:
        return int(value) if value is not None and int(value) >= 0 else None
    except ValueError:
        return None


def fill_numa_nodes(hcas, sys_root):
    """An HCA given without its NUMA node (no topo -m on the controller) takes the one sysfs says."""
    for hca in hcas:
        if hca.get("numa_node") is None:
            hca["numa_node"] = hca_numa_node(sys_root, hca["name"])


def natural_key(text):
    digits = "".join(ch for ch in text if ch.isdigit())
    return (text.rstrip("0123456789"), int(digits) if digits else -1, text)


def numa_pinning(numa_node, sys_root):
    """(argv prefix, note): numactl, else taskset to the node's CPUs, else nothing and why."""
    if numa_node is None:
        return [], "unpinned: NUMA node of the HCA unknown"
    numactl = shutil.which("numactl")
    if numactl:
        return [numactl, f"--cpunodebind={numa_node}", f"--membind={numa_node}"], None
    taskset = shutil.which("taskset")
    cpus = read_sys(os.path.join(sys_root, "devices", "system", "node", f"node{numa_node}", "cpulist"))
    if taskset and cpus:
        return [taskset, "-c", cpus], "CPUs pinned with taskset (no numactl): memory not bound"
    return [], "unpinned: neither numactl nor taskset found"


def loopback_plan(config):
    """One entry per HCA: the server's and the client's argv, and the notes about them."""
    perftest = config.get("perftest") or {}
    bin_dir = perftest.get("bin_dir") or ""
    sys_root = config.get("sys_root") or "/sys"
    base_port = int(config.get("loopback_base_port") or 18515)
    address = config.get("address") or "127.0.0.1"
    gpudirect = bool(perftest.get("gpudirect"))
    plans = []
    for index, hca in enumerate(config["hcas"]):
        name = "loopback:{}".format(hca["name"])
        binary = os.path.join(bin_dir, "ib_write_bw") if bin_dir else ""
        if not bin_dir:
            plans.append(
                {
                    "skip": check(
                        name,
                        "skipped",
                        "no perftest on this node (source %s)" % (perftest.get("source") or "none"),
                    )
                }
            )
            continue
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            plans.append({"skip": check(name, "skipped", f"ib_write_bw not found in {bin_dir}")})
            continue
        prefix, pin_note = numa_pinning(hca.get("numa_node"), sys_root)
        args = [binary, *LOOPBACK_ARGS]
        cuda_note = None
        if gpudirect and hca.get("gpu") is not None:
            args.append(f"--use_cuda={int(hca['gpu'])}")
        elif gpudirect:
            cuda_note = "host memory: no GPU paired with this HCA"
        else:
            cuda_note = "host memory: perftest without GPUDirect (source %s)" % (
                perftest.get("source") or "?"
            )
        args += ["-d", str(hca["name"])]
        if hca.get("port") is not None:
            args += ["-i", str(int(hca["port"]))]
        args += ["-p", str(base_port + index)]
        plans.append(
            {
                "name": name,
                "hca": hca["name"],
                "server": prefix + args,
                "client": prefix + args + [address],
                "notes": [note for note in (pin_note, cuda_note) if note],
            }
        )
    return plans


def wait_until_listening(path, deadline):
    while time.time() < deadline:
        if SERVER_READY_MARK in read_text(path).encode("utf-8"):
            return True
        time.sleep(0.05)
    return False


def loopbacks(config):
    """Every HCA at once: all servers, then all clients, each pair under the same bound."""
    if not config["hcas"]:
        return [check("loopback", "skipped", "no active RDMA port on this node")]
    out_dir, timeout_s = config["out_dir"], config["timeout_s"]
    plans = loopback_plan(config)
    started = time.time()
    deadline = started + timeout_s
    running = []
    results = {}
    for index, plan in enumerate(plans):
        if "skip" in plan:
            results[index] = plan["skip"]
            continue
        server_path = os.path.join(out_dir, "loopback-{}-server.txt".format(plan["hca"]))
        try:
            server = Bounded(plan["server"], server_path)
        except OSError as error:
            results[index] = check(
                plan["name"],
                "failed",
                f"ib_write_bw server could not start: {error}",
                argv=plan["server"],
            )
            continue
        running.append((index, plan, server))
    ready_by = min(deadline, time.time() + SERVER_READY_S)
    for _, plan, _ in running:
        wait_until_listening(os.path.join(out_dir, "loopback-{}-server.txt".format(plan["hca"])), ready_by)
    pairs = []
    for index, plan, server in running:
        client_path = os.path.join(out_dir, "loopback-{}.txt".format(plan["hca"]))
        try:
            client = Bounded(plan["client"], client_path)
        except OSError as error:
            server.kill()
            results[index] = check(
                plan["name"],
                "failed",
                f"ib_write_bw client could not start: {error}",
                argv=plan["client"],
                seconds=time.time() - started,
            )
            continue
        pairs.append((index, plan, server, client))
    for index, plan, server, client in pairs:
        client_rc = client.wait(deadline)
        # A server whose client is done finishes at once; one whose client never came is killed.
        server_rc = server.wait(deadline if client_rc is None else min(deadline, time.time() + KILL_GRACE_S))
        files = ["loopback-{}.txt".format(plan["hca"]), "loopback-{}-server.txt".format(plan["hca"])]
        client_path = os.path.join(out_dir, files[0])
        seconds = time.time() - started
        server_path = os.path.join(out_dir, files[1])
        if client_rc is None:
            status, note = "timeout", f"ib_write_bw ran past {timeout_s}s; killed, its output so far kept"
        elif client_rc != 0:
            status, note = "failed", f"ib_write_bw exited {client_rc}: {last_line(client_path, 'no output')}"
        elif server_rc != 0:
            what = "did not finish" if server_rc is None else f"exited {server_rc}"
            status, note = "failed", f"ib_write_bw server {what}: {last_line(server_path, 'no output')}"
        else:
            status, note = "ok", None
        result = check(
            plan["name"], status, note, argv=plan["client"], rc=client_rc, seconds=seconds, files=files
        )
        notes = [result["note"]] if result["note"] else []
        result["note"] = "; ".join(notes + plan["notes"]) or None
        result["server_argv"] = plan["server"]
        results[index] = result
    return [results[index] for index in sorted(results)]


# ---- the run


def guarded(name, step, config):
    """A check that raises is failed with its message: the others still run."""
    try:
        return step(config)
    except Exception as error:
        detail = traceback.format_exception_only(type(error), error)[-1].strip()
        return check(name, "failed", f"the check raised: {detail}")


def load_config(arg):
    text = arg
    if not arg.lstrip().startswith("{"):
        try:
            with open(arg) as handle:
                text = handle.read()
        except OSError as error:
            raise ConfigError(f"cannot read {arg}: {error.strerror}") from None
    try:
        config = json.loads(text)
    except ValueError as error:
        raise ConfigError(f"CONFIG_JSON is not JSON: {error}") from None
    if not isinstance(config, dict):
        raise ConfigError("CONFIG_JSON must be an object")
    if not isinstance(config.get("out_dir"), str) or not os.path.isabs(config["out_dir"]):
        raise ConfigError("out_dir must be an absolute path")
    if config.get("phase", "before") not in ("before", "after"):
        raise ConfigError("phase must be before or after, not {!r}".format(config.get("phase")))
    try:
        config["timeout_s"] = float(config.get("timeout_s", 120))
    except (TypeError, ValueError):
        raise ConfigError("timeout_s must be a number") from None
    if config["timeout_s"] <= 0:
        raise ConfigError("timeout_s must be above 0")
    checks = config.get("checks", ["gpu_matrix", "nvlink", "nic"])
    if not isinstance(checks, list) or not set(checks) <= {"gpu_matrix", "nvlink", "nic"}:
        raise ConfigError("checks must be a list of gpu_matrix, nvlink, nic")
    config["checks"] = checks
    hcas = config.get("hcas") or []
    if not isinstance(hcas, list) or not all(isinstance(hca, dict) and hca.get("name") for hca in hcas):
        raise ConfigError("hcas must be a list of {name, port, gpu, numa_node}")
    config["hcas"] = hcas
    return config


def switched_off(name, switch):
    return check(name, "skipped", f"switched off (collbench_node_checks_{switch}: false)")


def before(config, document):
    checks = document["checks"]
    steps = (
        ("gpu_matrix", "gpu_matrix", gpu_matrix),
        ("nvlink", "nvlink", nvlink),
        ("nic", "nic_ports", nic_ports),
    )
    for switch, name, step in steps:
        checks.append(
            guarded(name, step, config) if switch in config["checks"] else switched_off(name, switch)
        )
    if "nic" not in config["checks"]:
        checks.append(switched_off("loopback", "nic"))
        return
    if not config["hcas"]:
        try:
            config["hcas"] = active_ports(config.get("sys_root") or "/sys")
        except Exception as error:
            checks.append(check("loopback", "failed", f"listing the RDMA ports raised: {error}"))
            return
    else:
        fill_numa_nodes(config["hcas"], config.get("sys_root") or "/sys")
    document["hcas"] = config["hcas"]
    try:
        checks.extend(loopbacks(config))
    except Exception as error:
        checks.append(check("loopback", "failed", f"the check raised: {error}"))


def after(config, document):
    document["checks"] = [entry for entry in document["checks"] if entry.get("name") != "nvlink_after"]
    if "nvlink" in config["checks"]:
        document["checks"].append(guarded("nvlink_after", nvlink_after, config))
    else:
        document["checks"].append(switched_off("nvlink_after", "nvlink"))


def earlier_document(path):
    """checks.json of the "before" phase, or None when there is none to add to."""
    try:
        with open(path) as handle:
            document = json.load(handle)
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) and isinstance(document.get("checks"), list) else None


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: node_checks.py CONFIG_JSON\n")
        return 2
    try:
        config = load_config(argv[1])
    except ConfigError as error:
        sys.stderr.write(f"node_checks: {error}\n")
        return 2
    # The outputs name the node's devices and addresses: readable by the user alone.
    os.umask(0o077)
    out_dir = config["out_dir"]
    os.makedirs(out_dir, mode=0o700, exist_ok=True)
    path = os.path.join(out_dir, "checks.json")
    perftest = config.get("perftest") or {}
    document = None
    if config.get("phase", "before") == "after":
        document = earlier_document(path)
    if document is None:
        document = {
            "schema": SCHEMA,
            "host": config.get("host") or socket.gethostname(),
            "started_at": now_iso(),
            "finished_at": None,
            "checks": [],
            "perftest": {
                "gpudirect": bool(perftest.get("gpudirect")),
                "source": perftest.get("source") or "none",
            },
            "hcas": list(config["hcas"]),
        }
    try:
        if config.get("phase", "before") == "after":
            after(config, document)
        else:
            before(config, document)
    finally:
        document["finished_at"] = now_iso()
        write_atomically(path, json.dumps(document, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
