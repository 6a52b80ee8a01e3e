"""256 vNICs on one host: vnet faces are not ethdevs, so a host is not bound by
Debian DPDK's 32 ports. h1 gets 253 vNICs more than the test bed's 3, in a VPC of their own;
8 pairs of them, each in a tenant namespace, pass ping and TCP to each other, the VPCs stay
apart, and the daemon with 256 faces still sleeps when idle. The others are veths in h1's
namespace with nobody behind them. Prints idle CPU (3 vs 256 vNICs) and memory per vNIC."""

import hashlib
import os
import subprocess
import time

import pytest
import yaml

from conftest import (IP, PYTHON, RUN_DIR, T1, cpu_seconds, jakiroctl, jakirod_pids, ns, ns_bg,
                      quiet_machine, run, stats, wait_listening)

pytestmark = pytest.mark.usefixtures("testbed")

HOST, HOST_NS = "h1", "jk-h1"
TOTAL = 256                     # vNIC slots per host (dataplane/counters.hh max_vnics)
ADDED = TOTAL - 3               # t1, t5 and t3 are there already
PAIRS = [(31 * k, 31 * k + 1) for k in range(8)]  # spread over the slots
SAMPLE = {i for pair in PAIRS for i in pair}
IDLE_S = 4
IDLE_LIMIT_PERCENT = 5          # as test_idle_cpu: a spinning loop shows ~100 %


# Receives one TCP stream and prints its length and SHA-256; sends a file (test_superframes).
_SINK = ("import hashlib, socket, sys\n"
         "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
         "s.bind((sys.argv[1], 5310)); s.listen(1); s.settimeout(20)\n"
         "c, _ = s.accept(); c.settimeout(20); h = hashlib.sha256(); n = 0\n"
         "while True:\n"
         "    b = c.recv(1 << 20)\n"
         "    if not b: break\n"
         "    h.update(b); n += len(b)\n"
         "print(n, h.hexdigest(), flush=True)\n")
_SOURCE = ("import socket, sys\n"
           "data = open(sys.argv[2], 'rb').read()\n"
           "c = socket.create_connection((sys.argv[1], 5310), timeout=20)\n"
           "c.sendall(data); c.close()\n")


def name(i):
    return f"jm{i}"


def address(i):
    return f"198.19.{16 + i // 250}.{1 + i % 250}"  # 198.19.16.0/20: VPC "many" only


def mac(i):
    return f"02:00:c6:14:{i >> 8:02x}:{i & 0xff:02x}"


def tenant_ns(i):
    return f"jk-h1-{name(i)}"


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def idle_percent(pid):
    time.sleep(1)
    with quiet_machine():
        before, t0 = cpu_seconds(pid), time.monotonic()
        time.sleep(IDLE_S)
        return 100 * (cpu_seconds(pid) - before) / (time.monotonic() - t0)


def build_ports(tmp_path):
    """Samples get a tenant namespace behind their veth; the rest a veth whose peer stays in
    h1 with IPv6 off (no router solicitations: the idle figure is jakirod's, not theirs)."""
    batch = []
    for i in range(ADDED):
        if i in SAMPLE:
            run("ip", "netns", "add", tenant_ns(i))
            batch.append(f"link add {name(i)} type veth peer name eth0 netns {tenant_ns(i)}")
        else:
            batch.append(f"link add {name(i)} type veth peer name {name(i)}p")
            batch.append(f"link set {name(i)}p up")
        batch.append(f"link set {name(i)} up")
    (tmp_path / "links.batch").write_text("\n".join(batch) + "\n")
    ns(HOST_NS, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1")
    ns(HOST_NS, "ip", "-batch", tmp_path / "links.batch", timeout=60)
    for i in SAMPLE:
        t = tenant_ns(i)
        ns(t, "ip", "link", "set", "eth0", "address", mac(i), "mtu", "1450", "up")
        ns(t, "ip", "addr", "add", f"{address(i)}/20", "dev", "eth0")
        # The blue VPC's subnet through the gateway too, so the isolation probe leaves the tenant.
        ns(t, "ip", "route", "add", "198.19.1.0/24", "dev", "eth0")


def many_config():
    cfg = yaml.safe_load((RUN_DIR / f"{HOST}.yaml").read_text())
    cfg["vpcs"].append({"name": "many", "vni": 300})
    cfg["security_groups"].append({"name": "default", "vpc": "many",
                                   "ingress": [{"proto": "any", "from_group": "default"}]})
    for i in range(ADDED):
        cfg["vnics"].append({"name": name(i), "vpc": "many", "mac": mac(i),
                             "ip": f"{address(i)}/20", "port": f"vnet:iface={name(i)}",
                             "security_groups": ["default"]})
    return cfg


def test_256_vnics_on_one_host_pass_traffic_stay_apart_and_sleep_when_idle(tmp_path):
    t0 = time.monotonic()
    pid = jakirod_pids()[HOST]
    idle_few, rss_few = idle_percent(pid), rss_kib(pid)
    build_ports(tmp_path)
    path = tmp_path / "h1-many.yaml"
    path.write_text(yaml.safe_dump(many_config(), default_flow_style=None, sort_keys=False))
    try:
        jakiroctl(HOST, "apply", path, timeout=60)
        ports = stats(HOST)["ports"]
        assert len(ports) == TOTAL + 1, f"256 vNIC ports and the uplink, got {len(ports)}"
        setup_s = time.monotonic() - t0

        for a, b in PAIRS:
            ns(tenant_ns(a), "ping", "-c", "2", "-i", "0.2", "-W", "3", address(b), timeout=20)
        blob = tmp_path / "blob"
        body = os.urandom(4 << 20)
        blob.write_bytes(body)
        for a, b in PAIRS[:4]:
            with ns_bg(tenant_ns(b), PYTHON, "-c", _SINK, address(b), stdout=subprocess.PIPE,
                       text=True) as sink:
                wait_listening(tenant_ns(b), 5310)
                ns(tenant_ns(a), PYTHON, "-c", _SOURCE, address(b), blob, timeout=30)
                out, _ = sink.communicate(timeout=30)
            assert out.split() == [str(len(body)), hashlib.sha256(body).hexdigest()], \
                f"{name(a)} -> {name(b)}: the TCP stream arrived altered or short: {out!r}"

        # VPC "many" and VPC "blue" stay apart, whichever way: jakirod finds no such address
        # in the sender's VPC (and so answers no ARP for it).
        def refusals():
            drops = stats(HOST)["drops"]
            return drops["vlt_miss"] + drops["tenant_arp_ignored"]
        misses = refusals()
        a = PAIRS[0][0]
        r = ns(tenant_ns(a), "ping", "-c", "3", "-i", "0.2", "-W", "1", IP[T1], check=False)
        assert r.returncode != 0, "a tenant of VPC many reached blue's t1"
        r = ns(T1, "ping", "-c", "2", "-i", "0.2", "-W", "1", address(a), check=False)
        assert r.returncode != 0, "blue's t1 reached a tenant of VPC many"
        assert refusals() > misses, "refused by the VPC lookup"

        idle_many, rss_many = idle_percent(pid), rss_kib(pid)
        per_vnic = (rss_many - rss_few) / ADDED
        print(f"\n256 vNICs up and applied in {setup_s:.1f} s; jakirod h1 idle CPU "
              f"{idle_few:.1f} % with 3 vNICs, {idle_many:.1f} % with {TOTAL}; RSS "
              f"{rss_few / 1024:.1f} -> {rss_many / 1024:.1f} MiB, {per_vnic:.0f} KiB per vNIC")
        assert idle_many < IDLE_LIMIT_PERCENT, f"idle with {TOTAL} vNICs: {idle_many:.1f} %"
    finally:
        jakiroctl(HOST, "apply", RUN_DIR / f"{HOST}.yaml", timeout=60)
        ns(HOST_NS, "ip", "-batch", "-", check=False,
           input="".join(f"link del {name(i)}\n" for i in range(ADDED)), timeout=60)
        for i in SAMPLE:
            run("ip", "netns", "del", tenant_ns(i), check=False)
