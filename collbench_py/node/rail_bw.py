#!/usr/bin/env python3
"""Measure one pair of hosts rail by rail: ib_write_bw NIC k <-> NIC k, every rail at once.

Run on the pair's FIRST host by the benchmark role with the Python Ansible uses there (3.6 or
later, standard library only; nodes never import collbench_py). The servers run on the second
host, started over the same node-to-node ssh mpirun uses (the launch's rsh arguments), each
bounded there too by coreutils `timeout`; once every server says it listens (or has given up),
all the clients start together here. Every command is an argv list in its own process group, cut
at its bound, its output kept as far as it went.

    python3 rail_bw.py CONFIG_JSON      (the JSON text itself, or the path of a file holding it)

CONFIG_JSON:
    out_dir          where the outputs go (created): rail<k>.log (the client's output, perftest
                     text), rail<k>.server.log (the server's, as ssh brought it back)
    peer             the second host's address: ssh reaches it there, the clients connect to it
    rsh              the ssh argv (["ssh", <the launch's rsh args>...])
    ib_write_bw      this host's ib_write_bw ("" when it has none)
    peer_ib_write_bw the second host's (left out: the same path; "": it has none)
    gpudirect        the binaries take --use_cuda (perftest built with CUDA)
    rails            [{"index", "hca_a", "hca_b", "port_a", "port_b", "gpu_a", "gpu_b"}]
                     (_a: this host, _b: the peer; ports default to 1, a gpu null: host memory)
    seconds          ib_write_bw -D (default 5)
    size             ib_write_bw -s (default 8388608)
    timeout_s        the bound of each rail, server and client (default 3 x seconds + 60)
    server_ready_s   how long the servers may take to listen (default 30: ssh's login included)
    base_port        rail k listens on base_port + k (default 18515)

Prints one JSON object on stdout: {"status": ok|failed|timeout|skipped, "started_at",
"finished_at" (UTC, 2026-05-01T10:00:00Z), "rails": [{"index", "status", "note", "rc", "log",
"server_log", "seconds"}]}. A rail without its tool, whose server
did not start or whose client failed is "failed" (or "skipped" when this host has no
ib_write_bw), its log saying why; the run's status is the worst of its rails'. Exit status 0 once
the outputs are written, 2 when CONFIG_JSON cannot be used.
"""

import contextlib
import datetime
import json
import os
import signal
import subprocess
import sys
import time

KILL_GRACE_S = 5.0
POLL_S = 0.05
SERVER_READY_MARK = "Waiting for client"
SSH_OPTIONS = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=15"]
# GPU k of topo -m is CUDA device k only in PCI bus order (CUDA's own default is fastest first);
# the C locale keeps the output in the form the parser reads. Both sides run with them.
TOOL_ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "LC_ALL": "C"}
TOOL_ENV_WORDS = [f"{key}={value}" for key, value in sorted(TOOL_ENV.items())]
# The worst first: the run's status is the worst of its rails'.
STATUS_ORDER = ("timeout", "failed", "skipped", "ok")


def now_iso():
    return datetime.datetime.utcnow().replace(microsecond=0).isoformat() + "Z"


class ConfigError(Exception):
    """CONFIG_JSON cannot be used (one line for the user)."""


def quoted(word):
    """One word for the remote shell ssh hands the command to."""
    return "'" + word.replace("'", "'\\''") + "'"


def read_text(path):
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def last_line(path, default):
    lines = [line.strip() for line in read_text(path).splitlines() if line.strip()]
    return lines[-1][:300] if lines else default


def append(path, line):
    with open(path, "a") as handle:
        handle.write(line.rstrip("\n") + "\n")


class Bounded:
    """One command in its own process group, its output written straight into a file."""

    def __init__(self, argv, out_path):
        self.argv = list(argv)
        with open(out_path, "wb") as out:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(os.environ, **TOOL_ENV),
                start_new_session=True,
            )

    def poll(self):
        return self.proc.poll()

    def wait(self, deadline):
        """The exit status, or None when it ran past `deadline` (its group is killed)."""
        try:
            return self.proc.wait(timeout=max(0.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self):
        for sig, grace in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=grace)
                return
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=KILL_GRACE_S)


def whole(value, name, least):
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be a whole number of {least} or more")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a whole number of {least} or more") from None
    if number < least or number != float(value):
        raise ConfigError(f"{name} must be a whole number of {least} or more")
    return number


def checked_rail(entry):
    if not isinstance(entry, dict):
        raise ConfigError("each rail must be an object {index, hca_a, hca_b, gpu_a, gpu_b}")
    rail = {"index": whole(entry.get("index"), "rail index", 0)}
    for side in ("a", "b"):
        hca = entry.get("hca_" + side)
        if not isinstance(hca, str) or not hca or hca.startswith("-"):
            raise ConfigError(f"rail {rail['index']} needs hca_{side}, an HCA name")
        rail["hca_" + side] = hca
        rail["port_" + side] = whole(entry.get("port_" + side, 1), f"port_{side} of rail {rail['index']}", 1)
        gpu = entry.get("gpu_" + side)
        rail["gpu_" + side] = None if gpu is None else whole(gpu, f"gpu_{side} of rail {rail['index']}", 0)
    return rail


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
    peer = config.get("peer")
    if not isinstance(peer, str) or not peer or peer.startswith("-"):
        raise ConfigError("peer must be the second host's address")
    rsh = config.get("rsh") or ["ssh"]
    if not isinstance(rsh, list) or not all(isinstance(word, str) and word for word in rsh):
        raise ConfigError("rsh must be a list of words (ssh and its options)")
    config["rsh"] = rsh
    rails = config.get("rails")
    if not isinstance(rails, list) or not rails:
        raise ConfigError("rails must be a non-empty list")
    config["rails"] = [checked_rail(entry) for entry in rails]
    if len({rail["index"] for rail in config["rails"]}) != len(config["rails"]):
        raise ConfigError("two rails have the same index")
    config["seconds"] = whole(config.get("seconds", 5), "seconds", 1)
    config["size"] = whole(config.get("size", 8388608), "size", 1)
    config["base_port"] = whole(config.get("base_port", 18515), "base_port", 1)
    config["timeout_s"] = whole(config.get("timeout_s", 3 * config["seconds"] + 60), "timeout_s", 1)
    config["server_ready_s"] = whole(config.get("server_ready_s", 30), "server_ready_s", 1)
    for key in ("ib_write_bw", "peer_ib_write_bw"):
        if not isinstance(config.get(key, ""), str):
            raise ConfigError(f"{key} must be a path or empty")
    return config


def perftest_args(config, rail, side):
    args = ["-d", rail["hca_" + side], "-i", str(rail["port_" + side])]
    args += ["-p", str(config["base_port"] + rail["index"])]
    args += ["-s", str(config["size"]), "-D", str(config["seconds"]), "-F", "--report_gbits"]
    if config.get("gpudirect") and rail["gpu_" + side] is not None:
        args.append("--use_cuda={}".format(rail["gpu_" + side]))
    return args


def server_argv(config, rail):
    """ssh to the peer, the server bounded there as well: a server whose client never came ends
    by itself even when this host is gone."""
    binary = config.get("peer_ib_write_bw") or config.get("ib_write_bw") or "ib_write_bw"
    # stdbuf: ib_write_bw's stdout is a pipe here, block-buffered; line by line, its "Waiting for
    # client" comes back as it is printed.
    remote = ["env", *TOOL_ENV_WORDS, "timeout", "-k", str(int(KILL_GRACE_S)), str(config["timeout_s"])]
    remote += ["stdbuf", "-oL", binary]
    remote += perftest_args(config, rail, "b")
    line = "exec " + " ".join(quoted(word) for word in remote)
    return [*config["rsh"], *SSH_OPTIONS, config["peer"], line]


def client_argv(config, rail):
    return [config["ib_write_bw"], *perftest_args(config, rail, "a"), config["peer"]]


def result(rail, status, note, started, rc=None):
    return {
        "index": rail["index"],
        "status": status,
        "note": note,
        "rc": rc,
        "log": "rail{}.log".format(rail["index"]),
        "server_log": "rail{}.server.log".format(rail["index"]),
        "seconds": round(time.time() - started, 3),
    }


def sweep_peer(config, rails):
    """Servers left on the peer (their client failed, or ssh was cut) are killed there."""
    patterns = [
        "ib_write_bw -d {} -i {} -p {} ".format(
            rail["hca_b"], rail["port_b"], config["base_port"] + rail["index"]
        )
        for rail in rails
    ]
    line = " ; ".join("pkill -KILL -f -- " + quoted(pattern) for pattern in patterns) + " ; exit 0"
    argv = [*config["rsh"], *SSH_OPTIONS, config["peer"], line]
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(
            argv,
            check=False,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
        )


def wait_until_listening(servers, deadline):
    """Until every server says it listens or has ended, or `deadline`."""
    waiting = dict(servers)
    while waiting and time.time() < deadline:
        for index, (path, server) in list(waiting.items()):
            if SERVER_READY_MARK in read_text(path) or server.poll() is not None:
                del waiting[index]
        time.sleep(POLL_S)


def measure(config):
    out_dir, started = config["out_dir"], time.time()
    paths = {
        rail["index"]: (
            os.path.join(out_dir, "rail{}.log".format(rail["index"])),
            os.path.join(out_dir, "rail{}.server.log".format(rail["index"])),
        )
        for rail in config["rails"]
    }
    for client_path, server_path in paths.values():
        # Each launch has its own directory; a rerun in the same one starts its logs afresh.
        for path in (client_path, server_path):
            open(path, "w").close()
    results = {}
    binary = config.get("ib_write_bw") or ""
    note = None
    if not (binary and os.path.isfile(binary) and os.access(binary, os.X_OK)):
        note = "ib_write_bw not found on this host ({}): rail check skipped".format(binary or "no perftest")
    elif config.get("peer_ib_write_bw") == "":
        note = "no ib_write_bw on {} (no perftest there): rail check skipped".format(config["peer"])
    if note:
        for rail in config["rails"]:
            append(paths[rail["index"]][0], "collbench: " + note)
            results[rail["index"]] = result(rail, "skipped", note, started)
        return [results[index] for index in sorted(results)]
    servers = {}
    for rail in config["rails"]:
        client_path, server_path = paths[rail["index"]]
        try:
            servers[rail["index"]] = (server_path, Bounded(server_argv(config, rail), server_path))
        except OSError as error:
            note = f"ssh to {config['peer']} could not start: {error.strerror or error}"
            append(client_path, "collbench: " + note)
            results[rail["index"]] = result(rail, "failed", note, started)
    wait_until_listening(servers, time.time() + config["server_ready_s"])
    clients = {}
    for rail in config["rails"]:
        index = rail["index"]
        if index not in servers:
            continue
        server_path, server = servers[index]
        client_path = paths[index][0]
        rc = server.poll()
        if SERVER_READY_MARK not in read_text(server_path) and rc is not None:
            # It ended before it listened: no client, the server's last words say why.
            note = "ib_write_bw server on {} exited {}: {}".format(
                config["peer"], rc, last_line(server_path, "no output")
            )
            append(client_path, "collbench: " + note)
            results[index] = result(rail, "failed", note, started, rc)
            continue
        # Still running, said it listens or not (a server that is slow to say so still gets its
        # client): a server that hangs is cut at the bound below and fails its rail.
        try:
            clients[index] = Bounded(client_argv(config, rail), client_path)
        except OSError as error:
            server.kill()
            note = f"ib_write_bw client could not start: {error.strerror or error}"
            append(client_path, "collbench: " + note)
            results[index] = result(rail, "failed", note, started)
    deadline = time.time() + config["timeout_s"]
    for rail in config["rails"]:
        index = rail["index"]
        if index not in clients:
            continue
        client_path = paths[index][0]
        server_path, server = servers[index]
        client_rc = clients[index].wait(deadline)
        # A server whose client is done ends at once; one whose client hung is cut.
        server_rc = server.wait(min(deadline, time.time() + KILL_GRACE_S) if client_rc is not None else 0)
        if client_rc is None:
            status = "timeout"
            note = "ib_write_bw ran past {} s; killed, its output so far kept".format(config["timeout_s"])
        elif client_rc != 0:
            status, note = (
                "failed",
                "ib_write_bw exited {}: {}".format(client_rc, last_line(client_path, "no output")),
            )
        elif server_rc != 0:
            what = f"exited {server_rc}"
            if server_rc is None:
                listened = SERVER_READY_MARK in read_text(server_path)
                what = "did not finish" if listened else "never said it listens and did not finish"
            status = "failed"
            note = "ib_write_bw server on {} {}: {}".format(
                config["peer"], what, last_line(server_path, "no output")
            )
        else:
            status, note = "ok", None
        if note:
            append(client_path, "collbench: " + note)
        results[index] = result(rail, status, note, started, client_rc)
    left = [rail for rail in config["rails"] if results[rail["index"]]["status"] != "ok"]
    if left:
        sweep_peer(config, left)
    return [results[index] for index in sorted(results)]


def overall(rails):
    statuses = {rail["status"] for rail in rails}
    return next(status for status in STATUS_ORDER if status in statuses)


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: rail_bw.py CONFIG_JSON\n")
        return 2
    try:
        config = load_config(argv[1])
    except ConfigError as error:
        sys.stderr.write(f"rail_bw: {error}\n")
        return 2
    # The outputs name the node's devices and addresses: readable by the user alone.
    os.umask(0o077)
    os.makedirs(config["out_dir"], mode=0o700, exist_ok=True)
    started_at = now_iso()
    rails = measure(config)
    summary = {"status": overall(rails), "rails": rails, "started_at": started_at, "finished_at": now_iso()}
    sys.stdout.write(json.dumps(summary, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
