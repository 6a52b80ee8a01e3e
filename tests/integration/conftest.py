"""Shared helpers for the integration tests: the test bed, commands in namespaces, stats.

The tests run as root with Debian's /usr/bin/python3 (scapy, pytest). The binaries come
from JAKIROD / JAKIROCTL (meson sets them to the build tree) or from PATH; the sources
from JAKIRO_SRC (default: this checkout).
"""

import collections
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

SRC = Path(os.environ.get("JAKIRO_SRC") or Path(__file__).resolve().parents[2])
TESTBED = SRC / "tools" / "testbed"
RUN_DIR = Path("/run/jakiro/testbed")
PYTHON = "/usr/bin/python3"  # Debian's, the one that can import scapy

# Test bed plan (docs/testbed.md).
T1, T2, T5 = "jk-h1-t1", "jk-h2-t2", "jk-h1-t5"  # blue, VNI 100
T3, T4 = "jk-h1-t3", "jk-h2-t4"  # red, VNI 200
IP = {T1: "198.19.1.1", T2: "198.19.1.2", T5: "198.19.1.3", T3: "198.19.1.1", T4: "198.19.1.2"}
# Dual stack: RFC 5180's 2001:2::/48, one /64 per VPC subnet, overlapping as the IPv4 plan does.
IP6 = {T1: "2001:2::1:1", T2: "2001:2::1:2", T5: "2001:2::1:3", T3: "2001:2::1:1",
       T4: "2001:2::1:2"}
MAC = {T1: "02:00:c6:13:01:01", T2: "02:00:c6:13:01:02", T5: "02:00:c6:13:01:03",
       T3: "02:00:c6:13:02:01", T4: "02:00:c6:13:02:02"}


def tool(env_name, default):
    return os.environ.get(env_name) or shutil.which(default) or default


JAKIROD = tool("JAKIROD", "jakirod")
JAKIROCTL = tool("JAKIROCTL", "jakiroctl")


def run(*cmd, timeout=30, check=True, text=True, **kw):
    """Run a command, capture its output; on failure raise with what it printed."""
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=text,
                       timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} exited {r.returncode}\n"
                             f"stdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-2000:]}")
    return r


def ns(name, *cmd, timeout=30, check=True, **kw):
    """Run a command inside network namespace `name`."""
    return run("ip", "netns", "exec", name, *cmd, timeout=timeout, check=check, **kw)


@contextlib.contextmanager
def ns_bg(name, *cmd, **kw):
    """Run a command in the background inside `name`; it is killed when the block ends."""
    kw.setdefault("stdout", subprocess.DEVNULL)
    kw.setdefault("stderr", subprocess.DEVNULL)
    p = subprocess.Popen(["ip", "netns", "exec", name, *map(str, cmd)],
                         stdin=subprocess.DEVNULL, start_new_session=True, **kw)
    try:
        yield p
    finally:
        stop(p)


def stop(p, grace=3):
    """End a Popen started in its own session: SIGTERM its group, then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def wait_until(predicate, timeout, what, interval=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def wait_listening(name, port, timeout=5):
    """Wait until something in namespace `name` listens on TCP `port`."""
    wait_until(lambda: ns(name, "ss", "-Hltn", f"sport = :{port}", timeout=5).stdout.strip(),
               timeout, f"a TCP listener on port {port} in {name}")


@contextlib.contextmanager
def http_server(name, ip, port, directory):
    with ns_bg(name, PYTHON, "-m", "http.server", port, "--bind", ip,
               "--directory", directory) as p:
        wait_listening(name, port)
        yield p


@contextlib.contextmanager
def iperf3_server(name, port=5201):
    with ns_bg(name, "iperf3", "-s", "-1", "-p", port) as p:
        wait_listening(name, port)
        yield p


def iperf3_gbps(client, server_ip, seconds, port=5201, extra=()):
    """Run an iperf3 client (a server must listen); return received Gbit/s."""
    out = ns(client, "iperf3", "-c", server_ip, "-p", port, "-t", seconds, "-J", *extra,
             timeout=seconds + 30).stdout
    return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e9


def ping(name, dst, count=3, timeout_s=2):
    """True when every one of `count` pings is answered."""
    r = ns(name, "ping", "-c", count, "-i", "0.2", "-W", timeout_s, dst,
           timeout=count * (timeout_s + 1) + 5, check=False)
    return r.returncode == 0


# ---------------------------------------------------------------- the test bed's YAML


# Receives UDP on port 5320 until the given number of datagrams came or 10 s passed; prints
# how many, how many distinct, and how many of each size.
_UDP_SINK = ("import collections, socket, sys\n"
             "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
             "s.bind((sys.argv[1], 5320)); s.settimeout(10); print('ready', flush=True)\n"
             "got = []\n"
             "try:\n"
             "    while len(got) < int(sys.argv[2]):\n"
             "        got.append(s.recv(65535))\n"
             "except socket.timeout:\n"
             "    pass\n"
             "sizes = collections.Counter(len(d) for d in got)\n"
             "print(len(got), len(set(got)), dict(sizes), flush=True)\n")
# Makes the given number of UDP_SEGMENT sends (as QUIC stacks do) of 3 segments of 1000 bytes
# each, every segment's bytes its own.
_UDP_GSO_SOURCE = ("import socket, sys, time\n"
                   "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                   "s.setsockopt(socket.SOL_UDP, 103, 1000)  # UDP_SEGMENT\n"
                   "for i in range(int(sys.argv[2])):\n"
                   "    s.sendto(b''.join(b'%06d%06d' % (i, k) * 83 + b'....' for k in range(3)),\n"
                   "             (sys.argv[1], 5320))\n"
                   "    time.sleep(0.002)\n")


def udp_gso_datagrams_received(src, dst, dst_ip, sends):
    """`sends` UDP_SEGMENT sends of 3 x 1000 bytes from namespace `src` to `dst_ip` in `dst`:
    (datagrams received, distinct payloads among them, {size: count})."""
    with ns_bg(dst, PYTHON, "-c", _UDP_SINK, dst_ip, 3 * sends, stdout=subprocess.PIPE,
               text=True) as sink:
        assert sink.stdout.readline().strip() == "ready"
        ns(src, PYTHON, "-c", _UDP_GSO_SOURCE, dst_ip, sends)
        out, _ = sink.communicate(timeout=30)
    received, distinct, sizes = out.split(maxsplit=2)
    return int(received), int(distinct), sizes.strip()


def host_config_with(tmp_path, vnic, extra, host="h1"):
    """`host`'s test-bed YAML, written under `tmp_path`, with the line of `vnic` changed:
    `extra` (flow-map entries, e.g. "netns: jk-h1-t1") added to it, or, with `extra` None,
    the vNIC left out."""
    lines, found = [], False
    for line in (RUN_DIR / f"{host}.yaml").read_text().splitlines():
        if line.strip().startswith(f"- {{name: {vnic},"):
            found = True
            assert line.rstrip().endswith("}"), line
            if extra is None:
                continue
            line = line.rstrip()[:-1] + f", {extra}}}"
        lines.append(line)
    assert found, f"no vNIC {vnic} in {host}.yaml"
    path = tmp_path / f"{host}-{vnic}-{zlib.crc32(str(extra).encode()):08x}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


# ---------------------------------------------------------------- jakiroctl and stats


def jakiroctl(host, *args, timeout=10):
    return run(JAKIROCTL, "--host", host, *args, timeout=timeout)


def stats(host):
    return json.loads(jakiroctl(host, "stats", "--json").stdout)


def flatten(obj, path=()):
    """{path tuple: number} for every number in a JSON tree. List items that carry a
    "name" are addressed by it, so a vNIC's counters read as ("vnics", "t1", ...)."""
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, path + (str(k),)))
    elif isinstance(obj, list):
        for n, v in enumerate(obj):
            key = v.get("name", n) if isinstance(v, dict) else n
            out.update(flatten(v, path + (str(key),)))
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        out[path] = obj
    return out


def drops(host):
    """{reason: count} for every counter below a "drops" key of `stats --json`; the
    reason is the path below "drops" (summed where several places count the same one)."""
    out = collections.Counter()
    for p, v in flatten(stats(host)).items():
        if "drops" in p:
            out["/".join(p[p.index("drops") + 1:])] += v
    return out


def drops_matching(host, word):
    return sum(v for k, v in drops(host).items() if word in k.lower())


def vnic_packets(host, vnic):
    """(rx, tx) packet counters of a vNIC, summed over however stats --json nests them."""
    rx = tx = 0
    for p, v in flatten(stats(host)).items():
        if vnic not in p or "drops" in p:
            continue
        leaf = "_".join(p[p.index(vnic) + 1:]).lower()
        if "packets" in leaf or "pkts" in leaf:
            # Names seen: rx_/tx_packets, DPDK's i/opackets, from_/to_tenant_packets.
            rx += v if any(w in leaf for w in ("rx", "ipackets", "from")) else 0
            tx += v if any(w in leaf for w in ("tx", "opackets", "to_")) else 0
    return rx, tx


def jakirod_pids():
    """{host: pid} of the daemons the test bed started."""
    return {p.stem: int(p.read_text()) for p in RUN_DIR.glob("h*.pid")}


def global_counter(host, name):
    """A global counter of `jakiroctl stats` on `host` (busy_polls, idle_sleeps, ...)."""
    for line in jakiroctl(host, "stats").stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == name:
            return int(parts[1])
    raise AssertionError(f"no {name} in jakiroctl stats of {host}")


def cpu_seconds(pid):
    """utime + stime of the whole process (all threads), from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # fields 14, 15


_quiet_depth = 0


@contextlib.contextmanager
def quiet_machine():
    """For a measurement of CPU use or of rates a CPU-bound sender reaches: pauses the process
    group named by JAKIRO_PAUSE_PGID while it runs (nested uses pause once). tools/test-all names
    its background compiles there: they run at SCHED_IDLE, so they take no CPU from a test, but
    they still fill the caches and memory bus a daemon's wake-ups share, which shows in a
    figure of a few percent."""
    global _quiet_depth
    pgid = int(os.environ.get("JAKIRO_PAUSE_PGID", "0") or 0)
    paused = False
    if pgid > 0 and _quiet_depth == 0:
        try:
            os.killpg(pgid, signal.SIGSTOP)
            paused = True
            time.sleep(0.2)  # let the cores' caches settle
        except ProcessLookupError:
            pass  # it has finished
    _quiet_depth += 1
    try:
        yield
    finally:
        _quiet_depth -= 1
        if paused:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGCONT)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purposes.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


# ---------------------------------------------------------------- fixtures


def testbed_down():
    run(TESTBED, "down", timeout=60, check=False)


@pytest.fixture(scope="module")
def testbed(request):
    """The test bed, up for one test module and always brought down after it.
    A module sets TESTBED_ARGS (e.g. ["--kernel-vtep"]) to change how it comes up."""
    if os.geteuid() != 0:
        pytest.fail("needs root (network namespaces)")
    args = getattr(request.module, "TESTBED_ARGS", [])
    env = dict(os.environ, JAKIROD=JAKIROD, JAKIROCTL=JAKIROCTL)
    try:
        r = run(TESTBED, "up", *args, timeout=150, check=False, env=env)
        sys.stdout.write(r.stdout)
        if r.returncode != 0:
            pytest.fail(f"testbed up {' '.join(args)} failed:\n{r.stdout}{r.stderr}")
        yield
    finally:
        testbed_down()


# ---------------------------------------------------------------- raw frames

# Sends raw Ethernet frames (hex arguments) on an interface; stdlib only, so it starts fast.
_SEND_RAW = ("import socket, sys\n"
             "s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)\n"
             "s.bind((sys.argv[1], 0))\n"
             "for h in sys.argv[2:]: s.send(bytes.fromhex(h))\n")


@contextlib.contextmanager
def uplinks_cut_by_the_kernel(*hosts):
    """The hosts' ul0 (default: every host's) with tx checksumming (and so scatter-gather and
    UDP segmentation) off: the kernel cuts jakirod's super-datagrams into MTU frames and
    checksums each in software, as a NIC would on a wire, so a capture on the fabric sees what
    a wire would carry (veth with its offloads on carries a super-datagram whole)."""
    hosts = hosts or ("jk-h1", "jk-h2")
    for h in hosts:
        ns(h, "ethtool", "-K", "ul0", "tx", "off")
    try:
        yield
    finally:
        for h in hosts:
            ns(h, "ethtool", "-K", "ul0", "tx", "on", "sg", "on", "tx-udp-segmentation", "on")


def send_frames(name, ifname, frames):
    """Send raw frames (bytes, e.g. bytes(scapy_packet)) out of `ifname` in namespace `name`."""
    ns(name, PYTHON, "-c", _SEND_RAW, ifname, *(bytes(f).hex() for f in frames), timeout=15)


def neighbor_mac(name, ip):
    """The MAC the kernel of namespace `name` resolved for `ip` (ping it first)."""
    out = json.loads(ns(name, "ip", "-j", "neigh", "show", ip, timeout=5).stdout)
    macs = [n["lladdr"] for n in out if "lladdr" in n]
    assert macs, f"{name} has no neighbor entry for {ip}"
    return macs[0]


def link_mac(name, ifname):
    return json.loads(ns(name, "ip", "-j", "link", "show", ifname, timeout=5).stdout)[0]["address"]


def underlay_mac(host_index):
    """The MAC jakirod on host i answers to on the underlay (tools/testbed's underlay_mac: ul0's
    own with a vnet or af_packet uplink, the one the tap uplink is given with a tap)."""
    return f"02:00:c6:12:00:{host_index:02x}"


# ---------------------------------------------------------------- an impaired fabric

FABRIC_NS = "jk-fabric"
_IMPAIR = Path(__file__).resolve().parent / "fabric_impair.py"


@contextlib.contextmanager
def impaired_fabric(tmp_path, report, ports, options, seed=None):
    """Impairs the frames the fabric bridge sends out of `ports`, a dict {port: (NFQUEUE
    number, extra options for that port)}, with fabric_impair.py behind one NFQUEUE rule per
    port (this kernel has no sch_netem). `options` are fabric_impair.py's (--loss, --reorder,
    --delay-ms, --duplicate); the seed is `seed` or the queue number, so the same packets are
    hit run after run. Each port's final counters (dropped, delayed, duplicated...) land in
    report[port]; the rules and processes go away afterwards, also when the body fails."""
    sysctl = "net.bridge.bridge-nf-call-iptables"
    before = ns(FABRIC_NS, "sysctl", "-n", sysctl).stdout.strip()
    procs, rules = {}, []
    try:
        for port, (queue, extra) in ports.items():
            out, err = tmp_path / f"impair-{port}.out", tmp_path / f"impair-{port}.err"
            with open(out, "w") as o, open(err, "w") as e:
                procs[port] = (subprocess.Popen(
                    ["ip", "netns", "exec", FABRIC_NS, PYTHON, str(_IMPAIR), "--queue",
                     str(queue), *map(str, options), *map(str, extra), "--seed",
                     str(seed if seed is not None else queue)],
                    stdin=subprocess.DEVNULL, stdout=o, stderr=e, start_new_session=True),
                    out, err)
        for port, (proc, _, err) in procs.items():
            wait_until(lambda: "ready" in err.read_text() or proc.poll() is not None, 10,
                       f"fabric_impair.py for {port}")
            assert proc.poll() is None, f"fabric_impair.py failed: {err.read_text()}"
        ns(FABRIC_NS, "sysctl", "-qw", f"{sysctl}=1")
        for port, (queue, _) in ports.items():
            rule = ["FORWARD", "-m", "physdev", "--physdev-out", port, "-j", "NFQUEUE",
                    "--queue-num", str(queue), "--queue-bypass"]
            ns(FABRIC_NS, "iptables", "-I", *rule)
            rules.append(rule)
        yield
    finally:
        for rule in rules:
            ns(FABRIC_NS, "iptables", "-D", *rule, check=False)
        ns(FABRIC_NS, "sysctl", "-qw", f"{sysctl}={before or 0}", check=False)
        for port, (proc, out, err) in procs.items():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    stop(proc)
            lines = out.read_text().splitlines()
            report[port] = json.loads(lines[-1]) if lines else err.read_text()


# ---------------------------------------------------------------- verbs programs in tenants

JAKIRO_RUN = SRC / "tools" / "jakiro-run"


def shim_env():
    """The build tree's shim beside the jakirod under test (jakiro-run's JAKIRO_VERBS_LIB)."""
    env = dict(os.environ)
    lib = Path(JAKIROD).resolve().parents[1] / "verbs_shim" / "libjakiro_verbs.so"
    if lib.exists():
        env["JAKIRO_VERBS_LIB"] = str(lib)
    return env


def build_tool(env_name, name):
    """A tests/rdma program: from meson's environment, else beside the jakirod under test."""
    path = os.environ.get(env_name)
    if path:
        return path
    guess = Path(JAKIROD).resolve().parents[1] / "tests" / "rdma" / name
    return str(guess) if guess.exists() else name


def verbs_pair(server_tenant, client_tenant, server_cmd, client_cmd, port, timeout=40):
    """Runs a verbs server (listening on TCP `port` for its out-of-band exchange) and then its
    client, both under jakiro-run; both must exit 0 within `timeout` seconds. Returns (client
    output, server output)."""
    env = shim_env()
    srv = subprocess.Popen(under_jakiro_run(server_tenant, server_cmd), stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                           start_new_session=True)
    try:
        wait_until(lambda: srv.poll() is not None or ns(
            server_tenant, "ss", "-Hltn", f"sport = :{port}", check=False).stdout.strip(),
            15, f"{server_cmd[0]} to listen in {server_tenant}")
        cli = ns(client_tenant, JAKIRO_RUN, "--", *client_cmd, timeout=timeout, check=False,
                 env=env)
        srv_out, _ = srv.communicate(timeout=timeout)
    finally:
        if srv.poll() is None:
            os.killpg(srv.pid, 9)
            srv.wait()
    assert cli.returncode == 0 and srv.returncode == 0, (
        f"client {cli.returncode}:\n{cli.stdout}{cli.stderr}\nserver {srv.returncode}:\n{srv_out}")
    return cli.stdout, srv_out


def integrity_pair(server_tenant, client_tenant, server_ip, port, ops=300, seed=1):
    """rdma_integrity (every byte of every WRITE, READ and SEND checked) from `client_tenant` to
    `server_tenant`; asserts all `ops` completed with no failure on either side and returns the
    bytes moved."""
    integrity = build_tool("JAKIRO_RDMA_INTEGRITY", "rdma_integrity")
    common = ["--port", port, "--timeout", 30]
    out, srv_out = verbs_pair(server_tenant, client_tenant, [integrity, "--server", *common],
                              [integrity, "--connect", server_ip, "--ops", ops, "--seed", seed,
                               *common], port)
    m = re.search(r"rdma_integrity: (\d+) of (\d+) ops \([^)]*\), (\d+) bytes, (\d+) failures",
                  out)
    assert m and m.group(1) == m.group(2) == str(ops) and m.group(4) == "0", out
    assert " 0 failures" in srv_out, srv_out
    return int(m.group(3))


def under_jakiro_run(tenant, cmd):
    """`cmd` run on `tenant`'s vNIC: inside its namespace, through jakiro-run."""
    return ["ip", "netns", "exec", tenant, str(JAKIRO_RUN), "--", *map(str, cmd)]
