#!/usr/bin/env python3
"""Stand-ins for the node checks' tools on the test cluster (no GPU, no RDMA device); see README.md.

One file, several names (the name it is invoked by picks the tool): `ib_write_bw`, `ibstat`,
`ibv_devinfo`, `ibdev2netdev`, `nvbandwidth`; `relay` runs the rail switches' loopback relay.

- `ib_write_bw` takes perftest's command line (server without a host, client with one), moves real
  bytes over TCP through the rail interface its `-d` HCA maps to and prints perftest's text format
  (tests/data/corpus/perftest/). The figure is the measured one times a fixed factor (devices.json
  "report_factor"), so a healthy rail reads like a 400 Gb/s port and a shaped one proportionally lower.
  A loopback (client to its own host) goes out through the rail to a relay on the rail's bridge and back,
  as a loopback through the HCA would: traffic between two local addresses never leaves the kernel.
- `ibstat`, `ibv_devinfo`, `ibdev2netdev` print the node's HCAs (mlx5_0..mlx5_3 = rail0..rail3) in the
  layout of the real captures in tests/data/corpus/ib/, every port active at 4X 400 Gb/s unless
  faults.json says otherwise.
- `nvbandwidth` replays the real 8x H100 capture (tests/data/corpus/nvbandwidth/hgx-h100-8gpu-v0.10.0-*)
  for the testcases asked (`-t`), text or `-j` JSON in v0.8's shape (json_output.cpp); a testcase the
  capture lacks is "Waived", an unknown name an error, as nvbandwidth answers them.

Files (in the node's bin dir, found next to the invoked name or next to the `nvidia-smi` on PATH):
devices.json (written by vcluster.py: HCAs, rails, addresses) and faults.json (written by a test:
the degradations; absent = healthy). Standard library only; Python 3.6+ (the node's system python).
"""

import collections
import contextlib
import json
import os
import re
import shutil
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.realpath(__file__))  # the node bin dirs link here
CORPUS = os.path.join(os.path.dirname(HERE), "data", "corpus")
NVBANDWIDTH_CAPTURE = os.path.join(
    CORPUS, "nvbandwidth", "hgx-h100-8gpu-v0.10.0-five-runs-hash-separators-latency-sm.txt"
)
IBSTAT_CAPTURE = os.path.join(
    CORPUS, "ib", "cx7-roce-ibstat-port-down-disabled-rate40-elided-plus-ibdev2netdev.txt"
)
DEFAULT_PERFTEST_PORT = 18515
LINE = "-" * 87
# nvbandwidth v0.8's testcase names (testcase.h); the capture holds five of them
NVBANDWIDTH_TESTCASES = (
    "host_to_device_memcpy_ce",
    "device_to_host_memcpy_ce",
    "host_to_device_bidirectional_memcpy_ce",
    "device_to_host_bidirectional_memcpy_ce",
    "device_to_device_memcpy_read_ce",
    "device_to_device_memcpy_write_ce",
    "device_to_device_bidirectional_memcpy_read_ce",
    "device_to_device_bidirectional_memcpy_write_ce",
    "all_to_host_memcpy_ce",
    "all_to_host_bidirectional_memcpy_ce",
    "host_to_all_memcpy_ce",
    "host_to_all_bidirectional_memcpy_ce",
    "all_to_one_write_ce",
    "all_to_one_read_ce",
    "one_to_all_write_ce",
    "one_to_all_read_ce",
    "host_to_device_memcpy_sm",
    "device_to_host_memcpy_sm",
    "host_to_device_bidirectional_memcpy_sm",
    "device_to_host_bidirectional_memcpy_sm",
    "device_to_device_memcpy_read_sm",
    "device_to_device_memcpy_write_sm",
    "device_to_device_bidirectional_memcpy_read_sm",
    "device_to_device_bidirectional_memcpy_write_sm",
    "all_to_host_memcpy_sm",
    "all_to_host_bidirectional_memcpy_sm",
    "host_to_all_memcpy_sm",
    "host_to_all_bidirectional_memcpy_sm",
    "all_to_one_write_sm",
    "all_to_one_read_sm",
    "one_to_all_write_sm",
    "one_to_all_read_sm",
    "host_device_latency_sm",
    "device_to_device_latency_sm",
)


def fail(message, code=1):
    sys.stderr.write(message.rstrip("\n") + "\n")
    sys.exit(code)


def node_dir():
    """The node's bin dir: next to the invoked name, else next to the `nvidia-smi` on PATH."""
    own = os.path.dirname(os.path.abspath(sys.argv[0]))
    if os.path.exists(os.path.join(own, "devices.json")):
        return own
    smi = shutil.which("nvidia-smi")
    return os.path.dirname(os.path.abspath(smi)) if smi else own


def load_json(name, default=None):
    path = os.path.join(node_dir(), name)
    try:
        with open(path) as handle:
            return json.load(handle)
    except FileNotFoundError:
        if default is not None:
            return default
        fail(f"{tool_name()}: no {path} here (a test-cluster node without rails?)")
    except ValueError as error:
        fail(f"{tool_name()}: unusable {path}: {error}")


def tool_name():
    # a prebuilt-dir wrapper runs this file with runpy, which sets argv[0] to this file: it names the tool
    return globals().get("STANDIN_NAME") or os.path.basename(sys.argv[0])


# ---- RDMA port views ----------------------------------------------------------------------------------


def ports(devices, faults):
    """name -> port view of each HCA, faults applied (`hca_ports`: {"mlx5_1": {"state": "Down", ...}})."""
    out = {}
    for index, hca in enumerate(devices["hcas"]):
        view = {
            "state": "Active",
            "physical_state": "LinkUp",
            "rate": 400,
            "width": "4X",
            "lid": 11 + 16 * devices.get("node_index", 0) + index,
            "guid": "0x946dae0300{:02x}{:04x}".format(devices.get("node_index", 0), 0x817E + index),
        }
        view.update(faults.get("hca_ports", {}).get(hca["name"], {}))
        out[hca["name"]] = dict(view, netdev=hca["netdev"])
    return out


def ibstat(argv):
    devices, faults = load_json("devices.json"), load_json("faults.json", {})
    wanted = [a for a in argv if not a.startswith("-")]
    with open(IBSTAT_CAPTURE) as handle:
        capture = handle.read()
    # the real block of one CA, from `CA '...'` to its last port field
    block = re.search(r"^CA '[^']+'\n(?:[ \t].*\n)+", capture, re.MULTILINE).group(0)
    for name, view in ports(devices, faults).items():
        if wanted and name not in wanted:
            continue
        text = block.replace("'mlx5_0'", f"'{name}'")
        text = re.sub(r"State: \w+", "State: " + view["state"], text)
        text = re.sub(r"Physical state: \w+", "Physical state: " + view["physical_state"], text)
        text = re.sub(r"Rate: \d+", "Rate: {}".format(view["rate"]), text)
        text = re.sub(r"Base lid: \d+", "Base lid: {}".format(view["lid"]), text)
        text = re.sub(r"SM lid: \d+", "SM lid: 1", text)
        text = re.sub(r"Link layer: \w+", "Link layer: InfiniBand", text)
        text = re.sub(r"(Node GUID|System image GUID|Port GUID): 0x\w+", r"\1: " + view["guid"], text)
        sys.stdout.write(text)
        sys.stdout.write("\n")
    return 0


def ibv_devinfo(argv):
    devices, faults = load_json("devices.json"), load_json("faults.json", {})
    verbose = "-v" in argv
    speeds = {400: "106.25 Gbps (128)", 200: "53.125 Gbps (64)", 100: "25.78125 Gbps (32)"}
    for name, view in ports(devices, faults).items():
        state = "PORT_ACTIVE (4)" if view["state"] == "Active" else "PORT_DOWN (1)"
        lines = [
            f"hca_id:\t{name}",
            "\ttransport:\t\t\tInfiniBand (0)",
            "\tfw_ver:\t\t\t\t28.42.1000",
            "\tnode_guid:\t\t\t{}".format(view["guid"]),
            "\tvendor_id:\t\t\t0x02c9",
            "\tvendor_part_id:\t\t\t4129",
            "\thw_ver:\t\t\t\t0x0",
            "\tboard_id:\t\t\tMT_0000000838",
            "\tphys_port_cnt:\t\t\t1",
            "\t\tport:\t1",
            f"\t\t\tstate:\t\t\t{state}",
            "\t\t\tmax_mtu:\t\t4096 (5)",
            "\t\t\tactive_mtu:\t\t4096 (5)",
            "\t\t\tsm_lid:\t\t\t1",
            "\t\t\tport_lid:\t\t{}".format(view["lid"]),
            "\t\t\tport_lmc:\t\t0x00",
            "\t\t\tlink_layer:\t\tInfiniBand",
        ]
        if verbose:
            width = view["width"]
            lines += [
                "\t\t\tactive_width:\t\t{} ({})".format(width, {"4X": 2, "2X": 16, "1X": 1}.get(width, 2)),
                "\t\t\tactive_speed:\t\t{}".format(speeds.get(int(view["rate"]) // int(width[:-1]) * 4, "")),
                "\t\t\tphys_state:\t\t{}".format(
                    "LINK_UP (5)" if view["physical_state"] == "LinkUp" else "DISABLED (3)"
                ),
            ]
        print("\n".join(lines) + "\n")
    return 0


def ibdev2netdev(argv):
    devices, faults = load_json("devices.json"), load_json("faults.json", {})
    for name, view in ports(devices, faults).items():
        print(
            "{} port 1 ==> {} ({})".format(
                name, view["netdev"], "Up" if view["state"] == "Active" else "Down"
            )
        )
    return 0


# ---- ib_write_bw -------------------------------------------------------------------------------------


def perftest_args(argv):
    """perftest's options as the stand-in needs them; the rest are accepted and have no effect."""
    with_value = {"-d", "-i", "-s", "-n", "-D", "-p", "-q", "-x", "-m", "-t", "-u", "-S", "-c", "-F"}
    with_value.discard("-F")  # -F (--CPU-freq) takes no value
    long_map = {
        "--ib-dev": "-d",
        "--ib-port": "-i",
        "--size": "-s",
        "--iters": "-n",
        "--duration": "-D",
        "--port": "-p",
        "--qp": "-q",
        "--gid-index": "-x",
        "--mtu": "-m",
        "--tx-depth": "-t",
    }
    opts, positional, flags = {}, [], set()
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg.startswith("--") and "=" in arg:
            key, value = arg.split("=", 1)
            opts[long_map.get(key, key)] = value
        elif arg in long_map:
            opts[long_map[arg]] = args.pop(0) if args else ""
        elif arg in with_value:
            opts[arg] = args.pop(0) if args else ""
        elif arg.startswith("-"):
            flags.add(arg)
        else:
            positional.append(arg)
    return opts, positional, flags


def header(hca, qps, server):
    lines = [
        LINE,
        "                    " + TITLES.get(tool_name(), TITLES["ib_write_bw"]),
        f" Dual-port       : OFF\t\tDevice         : {hca}",
        f" Number of qps   : {qps}\t\tTransport type : IB",
        " Connection type : RC\t\tUsing SRQ      : OFF",
        " PCIe relax order: ON",
        " ibv_wr* API     : ON",
    ]
    if not server:
        lines.append(" TX depth        : 128")
    lines += [
        " CQ Moderation   : 1",
        " Mtu             : 4096[B]",
        " Link type       : IB",
        " Max inline data : 0[B]",
        " rdma_cm QPs\t : OFF",
        " Data ex. method : Ethernet",
        LINE,
    ]
    return lines


def addresses(lid, peer_lid):
    return [
        f" local address: LID {lid:#06x} QPN 0x0088 PSN 0x6f0bef RKey 0x1fffbd VAddr 0x007f6eff000000",
        f" remote address: LID {peer_lid:#06x} QPN 0x01ca PSN 0x3a1f02 RKey 0x1fffbe VAddr 0x007f3813000000",
        LINE,
    ]


def result_lines(size, iterations, gbits, report_gbits):
    value = gbits if report_gbits else gbits * 1000 / 8 / 1.048576  # MiB/s as perftest prints without it
    unit = "Gb/sec" if report_gbits else "MiB/sec"
    rate = gbits * 1e9 / 8 / size / 1e6
    return [
        f" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]",
        f" {size:<10d} {iterations:<10d}       {value * 1.0003:.2f}"  # peak a hair above the average
        f"             {value:.2f}  \t\t   {rate:.6f}",
        LINE,
    ]


def hca_entry(devices, name):
    for hca in devices["hcas"]:
        if hca["name"] == name:
            return hca
    return None


# one ib_write_bw invocation: perftest's options the stand-in honours
Run = collections.namedtuple("Run", "hca port size iterations qps seconds factor report_gbits")


# perftest's usage text, in part: the options the stand-in honours (no --use_cuda: no GPUDirect here)
PERFTEST_HELP = """Usage:
  {0}            start a server and wait for connection
  {0} <host>     connect to server at <host>

Options:
  -d, --ib-dev=<dev>  Use IB device <dev> (default first device found)
  -i, --ib-port=<port>  Use port <port> of IB device (default 1)
  -p, --port=<port>  Listen on/connect to port <port> (default 18515)
  -q, --qp=<num of qp's>  Num of qp's(default 1)
  -s, --size=<size>  Size of message to exchange (default 65536)
  -n, --iters=<iters>  Number of exchanges (at least 5, default 5000)
  -D, --duration  Run test for a customized period of seconds.
  -F, --CPU-freq  Do not show a warning even if cpufreq_ondemand module is loaded, and cpu-freq is not on max.
  -x, --gid-index=<index>  Test uses GID with GID index
      --report_gbits  Report Max/Average BW of test in Gbit/sec (instead of MiB/sec)
      --perform_warm_up  Perform some iterations before start measuring in order to warming-up memory cache
"""
TITLES = {
    "ib_write_bw": "RDMA_Write BW Test",
    "ib_read_bw": "RDMA_Read BW Test",
    "ib_send_bw": "Send BW Test",
}


def ib_write_bw(argv):
    if "-h" in argv or "--help" in argv:
        print(PERFTEST_HELP.format(tool_name()))
        return 1  # perftest exits 1 after its usage
    opts, positional, flags = perftest_args(argv)
    devices = load_json("devices.json", {"hcas": []})
    name = opts.get("-d") or (devices["hcas"][0]["name"] if devices["hcas"] else "")
    hca = hca_entry(devices, name)
    if hca is None:
        # perftest's own words (tests/data/corpus/perftest/no-rdma-device-in-container-*)
        named = f" IB device {name} not found\n" if name else ""
        fail(named + " Unable to find the Infiniband/RoCE device")
    cap = float(devices.get("seconds", 1.0))  # real bytes over a slow link: a short, bounded transfer
    run = Run(
        hca=hca,
        port=int(opts.get("-p", DEFAULT_PERFTEST_PORT)),
        size=int(opts.get("-s", 65536)),
        iterations=int(opts.get("-n", 5000)),
        qps=int(opts.get("-q", 1)),
        seconds=min(float(opts.get("-D", cap)), cap),
        factor=float(devices.get("report_factor", 1.0)),
        report_gbits="--report_gbits" in flags,
    )
    if positional:
        return perftest_client(devices, positional[0], run)
    return perftest_server(run)


def perftest_server(run):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((run.hca["address"], run.port))
    except OSError as error:
        fail(f" Couldn't listen to port {run.port}: {error}")
    listener.listen(1)
    print(
        "\n************************************\n* Waiting for client to connect... *\n"
        "************************************"
    )
    sys.stdout.flush()
    conn, _ = listener.accept()
    stream = conn.makefile("rb")
    hello = json.loads(stream.readline().decode())
    received, started = 0, time.monotonic()
    view = memoryview(bytearray(1 << 20))
    while True:
        got = stream.readinto(view)
        if not got:
            break
        received += got
    elapsed = max(time.monotonic() - started, 1e-6)
    conn.sendall((json.dumps({"bytes": received, "seconds": elapsed}) + "\n").encode())
    conn.close()
    gbits = received * 8 / elapsed / 1e9 * run.factor
    lines = header(run.hca["name"], run.qps, True) + addresses(run.hca["lid"], hello.get("lid", 0))
    lines += result_lines(run.size, run.iterations, gbits, run.report_gbits)
    print("\n".join(lines))
    return 0


def loopback_target(devices, target):
    """Whether `target` (name or address) is this node: then the bytes go through the rail's relay."""
    own = {socket.gethostname(), "localhost", devices.get("address", "")}
    own.update(h["address"] for h in devices["hcas"])
    resolved = _resolve(target)
    return target in own or resolved in own or resolved.startswith("127.")


def _bound_socket(hca):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((hca["address"], 0))  # out through the HCA's rail
    sock.settimeout(30)
    return sock


def perftest_client(devices, target, run):
    hca = run.hca
    if loopback_target(devices, target):
        destination = (hca["gateway"], hca["relay_port"])
        preamble = "CONNECT {} {}\n".format(hca["address"], run.port)
    else:
        # the peer's address on the same rail: HCA k talks to HCA k of the other node
        peers = devices.get("peers", {}).get(target) or devices.get("peers", {}).get(_resolve(target))
        if not peers:
            fail(f" Couldn't connect to {target}:{run.port}: not a node of this cluster")
        destination, preamble = (peers[hca["rail"]], run.port), ""
    deadline = time.monotonic() + 10
    sock = _bound_socket(hca)
    while True:  # perftest's client retries until the server listens
        try:
            sock.connect(destination)
            break
        except OSError as error:
            sock.close()
            if time.monotonic() > deadline:
                fail(f" Couldn't connect to {target}:{run.port} ({error})")
            time.sleep(0.05)
            sock = _bound_socket(hca)
    sock.sendall((preamble + json.dumps({"lid": hca["lid"]}) + "\n").encode())
    payload = b"\0" * (1 << 18)
    started = time.monotonic()
    while time.monotonic() - started < run.seconds:
        sock.sendall(payload)
    sock.shutdown(socket.SHUT_WR)
    reply = json.loads(sock.makefile("rb").readline().decode() or "{}")
    if not reply:  # the relay found no server: perftest says so and fails
        fail(f" Couldn't connect to {target}:{run.port}")
    sock.close()
    # the receiver's clock: first byte to last, as perftest times the transfer itself
    gbits = reply["bytes"] * 8 / max(reply["seconds"], 1e-6) / 1e9 * run.factor
    lines = header(hca["name"], run.qps, False) + addresses(hca["lid"], hca["lid"])
    lines += result_lines(run.size, run.iterations, gbits, run.report_gbits)
    print("\n".join(lines))
    return 0


def _resolve(name):
    try:
        return socket.gethostbyname(name)
    except OSError:
        return name


def relay(argv):
    """On a rail's bridge: `relay ADDR:PORT ...`; a client sends `CONNECT HOST PORT`, then both ways pipe."""

    def pipe(source, sink):
        try:
            while True:
                data = source.recv(1 << 18)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

    def serve(conn):
        line = b""
        while not line.endswith(b"\n"):
            got = conn.recv(1)
            if not got:
                conn.close()
                return
            line += got
        _, host, port = line.decode().split()
        deadline = time.monotonic() + 10
        while True:  # the server may still be starting, as perftest's client waits for it
            try:
                upstream = socket.create_connection((host, int(port)), timeout=10)
                break
            except OSError:
                if time.monotonic() > deadline:
                    conn.close()
                    return
                time.sleep(0.05)
        upstream.settimeout(None)
        threading.Thread(target=pipe, args=(upstream, conn), daemon=True).start()
        pipe(conn, upstream)

    def listen(endpoint):
        host, port = endpoint.rsplit(":", 1)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, int(port)))
        listener.listen(64)
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threads = [threading.Thread(target=listen, args=(e,), daemon=True) for e in argv]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return 0


# ---- nvbandwidth ------------------------------------------------------------------------------------


BUS_IDS = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)  # as the nvidia-smi stand-in reports them


def capture_runs():
    """testcase -> {title, columns, rows {row: [cells]}, tail [SUM/COV lines]} from the capture, and the
    banner of its first run (version, CUDA and driver lines, verbatim)."""
    with open(NVBANDWIDTH_CAPTURE) as handle:
        lines = handle.read().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("Running "))
    banner, runs, index = lines[:first], {}, first
    while index < len(lines):
        match = re.match(r"^Running (\w+)\.$", lines[index])
        index += 1
        if not match:
            continue
        rows, cursor = {}, index + 2
        while cursor < len(lines) and lines[cursor].strip():
            cells = lines[cursor].split()
            rows[int(cells[0])] = cells[1:]
            cursor += 1
        tail = []
        while cursor < len(lines) and not lines[cursor].startswith("NOTE"):
            tail.append(lines[cursor])
            cursor += 1
        runs[match.group(1)] = {
            "title": lines[index],
            "columns": lines[index + 1],
            "rows": rows,
            "tail": tail,
        }
        index = cursor
    return runs, banner


def degrade(testcase, rows, faults):
    """Scale the cells a degraded GPU (its row and column) or a degraded link i--j (both cells) touch."""
    if "latency" in testcase:
        return rows
    gpus = {int(k): float(v) for k, v in faults.get("gpu_scale", {}).items()}
    links = {}
    for i, j, factor in faults.get("link_scale", []):
        links[(int(i), int(j))] = links[(int(j), int(i))] = float(factor)
    host_test = testcase.startswith(("host_", "device_to_host"))
    out = {}
    for row, cells in rows.items():
        new = []
        for column, cell in enumerate(cells):
            factor = gpus.get(column, 1.0)
            if not host_test:  # a GPU x GPU matrix; host tests have one row (the CPU), a column per GPU
                factor *= gpus.get(row, 1.0) * links.get((row, column), 1.0)
            new.append(cell if cell == "N/A" or factor == 1.0 else f"{float(cell) * factor:.2f}")
        out[row] = new
    return out


# nvbandwidth v0.8's visible options (nvbandwidth.cpp), as boost::program_options prints them
NVBANDWIDTH_HELP = """nvbandwidth CLI:
  -h [ --help ]                         Produce help message
  -b [ --bufferSize ] arg (=512)        Memcpy buffer size in MiB
  -l [ --list ]                         List available testcases
  -t [ --testcase ] arg                 Testcase(s) to run (by name or index)
  -p [ --testcasePrefixes ] arg         Testcase(s) to run (by prefix))
  -v [ --verbose ]                      Verbose output
  -s [ --skipVerification ]             Skips data verification after copy
  -d [ --disableAffinity ]              Disable automatic CPU affinity control
  -i [ --testSamples ] arg (=3)         Iterations of the benchmark
  -m [ --useMean ]                      Use mean instead of median for results
  -j [ --json ]                         Print output in json format instead of plain text.
"""


def nvbandwidth(argv):
    if "-h" in argv or "--help" in argv:
        print(NVBANDWIDTH_HELP)
        return 0
    faults = load_json("faults.json", {})
    wanted, as_json, args = [], False, list(argv)
    while args:
        arg = args.pop(0)
        if arg in ("-t", "--testcase"):
            while args and not args[0].startswith("-"):
                wanted.append(args.pop(0))
        elif arg in ("-j", "--json"):
            as_json = True
        elif arg in ("-l", "--list"):
            for index, name in enumerate(NVBANDWIDTH_TESTCASES):
                print(f"{index}, {name}:")
            return 0
        elif arg in ("-i", "--testSamples", "-b", "--bufferSize"):
            args = args[1:]
        elif arg not in (
            "-v",
            "--verbose",
            "-s",
            "--skipVerification",
            "-d",
            "--disableAffinity",
            "-m",
            "--useMean",
        ):
            print("ERROR: Invalid Arguments\nnvbandwidth " + " ".join(argv))
            return 1
    runs, banner = capture_runs()
    cases = []
    for name in wanted or NVBANDWIDTH_TESTCASES:
        if name.isdigit() and int(name) < len(NVBANDWIDTH_TESTCASES):
            name = NVBANDWIDTH_TESTCASES[int(name)]
        if name not in NVBANDWIDTH_TESTCASES:
            cases.append((name, "ERROR", f"Testcase {name} not found!", None))
        elif name not in runs:  # the capture has no such run: nvbandwidth's answer where it cannot run
            cases.append((name, "Waived", "", None))
        else:
            run = dict(runs[name])
            run["degraded"] = degrade(name, run["rows"], faults)
            cases.append((name, "Passed", run["title"], run))
    version = banner[0].split(": ", 1)[1] if banner else "v0.10.0"
    driver = next((b.split(": ", 1)[1] for b in banner if b.startswith("Driver Version")), "")
    if as_json:
        print(nvbandwidth_json(version, driver, cases, len(runs["device_to_device_memcpy_read_ce"]["rows"])))
        return 0
    print("\n".join(banner))
    for name, status, message, run in cases:
        if status != "Passed":
            print(f"{status}: {message}")
            continue
        print(f"Running {name}.")
        print(run["title"])
        print(run["columns"])
        for row, cells in sorted(run["degraded"].items()):
            print(f"{row:>2}" + "".join(f"{c:>10}" for c in cells))
        for line in run["tail"]:
            if line.startswith("SUM ") and run["degraded"] != run["rows"]:
                line = "SUM {} {:.2f}".format(name, matrix_sum(run["degraded"].values()))
            print(line)
    print(
        "NOTE: The reported results may not reflect the full capabilities of the platform.\n"
        "Performance can vary with software drivers, hardware clocks, and system topology."
    )
    return 0


def matrix_sum(rows):
    return sum(float(c) for cells in rows for c in cells if c != "N/A")


def nvbandwidth_json(version, driver, cases, count):
    """v0.8's -j document (json_output.cpp): cells as strings (`buf << value`: 6 significant digits)."""
    testcases = []
    for name, status, message, run in cases:
        if status != "Passed":
            testcases.append({"name": name, "status": "Not Found" if status == "ERROR" else status})
            continue
        table = [run["degraded"][row] for row in sorted(run["degraded"])]
        testcases.append(
            {
                "bandwidth_description": message,
                "bandwidth_matrix": [[c if c == "N/A" else f"{float(c):g}" for c in row] for row in table],
                "name": name,
                "status": "Passed",
                "sum": matrix_sum(table),
            }
        )
    host = socket.gethostname()
    document = {
        "nvbandwidth": {
            "CUDA Runtime Version": 13020,
            "Driver Version": driver,
            "GPU Device list": [
                f"{i}: NVIDIA H100 80GB HBM3 (00000000:{BUS_IDS[i % 8]:02x}:00): ({host})"
                for i in range(count)
            ],
            "git_version": version,
            "testcases": testcases,
            "version": version.lstrip("v"),
        }
    }
    # jsoncpp's toStyledString: three-space indent, `"key" : value`, keys sorted
    return json.dumps(document, indent=3, separators=(",", " : "), sort_keys=True)


def latency_test(argv):
    fail(f" {tool_name()}: latency tests are not supported by the test cluster's stand-in", 2)


TOOLS = {
    "ib_write_bw": ib_write_bw,
    "ib_read_bw": ib_write_bw,  # the same bytes over the rail, under the read test's title
    "ib_send_bw": ib_write_bw,
    "ib_write_lat": latency_test,
    "ib_read_lat": latency_test,
    "ib_send_lat": latency_test,
    "ibstat": ibstat,
    "ibv_devinfo": ibv_devinfo,
    "ibdev2netdev": ibdev2netdev,
    "nvbandwidth": nvbandwidth,
}


def main(argv):
    name = tool_name()
    if name in TOOLS:
        return TOOLS[name](argv)
    if argv[:1] == ["relay"]:
        return relay(argv[1:])
    if argv[:1] and argv[0] in TOOLS:
        return TOOLS[argv[0]](argv[1:])
    fail("node_standins: invoke as one of {} (or `relay ADDR:PORT ...`)".format(", ".join(TOOLS)), 2)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
