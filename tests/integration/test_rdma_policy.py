"""Security groups and the RDMA face, as a hostile tenant would try them (docs/threat-model.md).

- Removing the `rdma` rule that admitted a live RC connection (`jakiroctl apply`) stops it: the
  engine checks every connected QP again under the new policy, moves the refused one to ERR
  (IBV_EVENT_QP_FATAL, its WRs flushed) and counts it (`jakiroctl qps`: qps_revoked, drops
  `revoked`). A long ib_write_bw fails within a bound; the same apply keeping the rule leaves
  it running (control).
- ibv_rereg_mr (access, translation, PD) keeps the MR usable with the rkey a peer already has
  (tests/rdma/pyverbs_rereg.py, rdma-core's own pyverbs).
- A tenant's crafted RoCEv2 (UDP 4791, BTH + RETH) on its Ethernet face, sent with a raw
  socket, crosses neither the fabric nor the host: `tenant_roce` drops, nothing with an inner
  UDP 4791 on br0, nothing at the receiver; the same sender's UDP to port 4792 arrives
  (control).
"""

import json
import struct
import subprocess
import time

import pytest
from scapy.layers.inet import IP as IPv4, UDP
from scapy.layers.l2 import Ether
from scapy.layers.vxlan import VXLAN
from scapy.utils import rdpcap

from conftest import (IP, PYTHON, T1, T2, T5, drops, jakiroctl, neighbor_mac, ns, ping,
                      send_frames, stop, uplinks_cut_by_the_kernel, wait_listening, wait_until)
from test_qos import finish
from test_rdma_rc import JAKIRO_RUN, shim_env
from test_secgroups import policy  # noqa: F401 (a fixture)

pytestmark = pytest.mark.usefixtures("testbed")

# TCP for perftest's out-of-band exchange and ICMP; RDMA only through RDMA_OK.
BASE = {"name": "base", "vpc": "blue",
        "ingress": [{"proto": "tcp", "ports": "1-65535", "from": "198.19.0.0/16"},
                    {"proto": "icmp", "from": "198.19.0.0/16"}]}
RDMA_OK = {"name": "rdma-ok", "vpc": "blue",
           "ingress": [{"proto": "rdma", "from": "198.19.1.0/24"}]}
GROUPS = [BASE, RDMA_OK]
WITH_RDMA = {"t1": ["base", "rdma-ok"], "t2": ["base", "rdma-ok"], "t5": ["default"]}
WITHOUT_RDMA = {"t1": ["base"], "t2": ["base", "rdma-ok"], "t5": ["default"]}

# apply -> perftest gone, both hosts' applies included: 0.04-0.075 s over 6 runs of commit
# 7c6f21f on the 2-core machine.
REVOKE_BOUND_S = 2.0
PERF_PORT = iter(range(18700, 18800))


def engine_counters(host):
    out = json.loads(jakiroctl(host, "qps", "--json").stdout)
    return out["engine"]


def start_write_bw(seconds):
    port = next(PERF_PORT)
    args = ["ib_write_bw", "-x", "0", "-F", "-s", "65536", "-p", str(port), "-D", str(seconds)]
    server = subprocess.Popen(["ip", "netns", "exec", T2, str(JAKIRO_RUN), "--", *args],
                              env=shim_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True)
    wait_listening(T2, port, timeout=15)
    client = subprocess.Popen(["ip", "netns", "exec", T1, str(JAKIRO_RUN), "--", *args, IP[T2]],
                              env=shim_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True)
    return server, client


def transferring():
    """True once a QP of t1 on h1 has sent data (perftest connected and running)."""
    out = json.loads(jakiroctl("h1", "qps", "--json").stdout)
    return any(q.get("packets_sent", 0) > 100 for q in out["qps"])


@pytest.mark.parametrize("keep_rule", [True, False], ids=["rule_kept", "rule_removed"])
def test_removing_the_rdma_rule_stops_a_live_rc_connection(policy, keep_rule):  # noqa: F811
    policy(GROUPS, WITH_RDMA)
    before = engine_counters("h1")
    server, client = start_write_bw(12)
    try:
        wait_until(transferring, 20, "ib_write_bw to start sending")
        time.sleep(1)
        t0 = time.monotonic()
        policy(GROUPS, WITH_RDMA if keep_rule else WITHOUT_RDMA)
        t_applied = time.monotonic()
        if keep_rule:
            # Control: a new policy generation that still allows t2 changes nothing.
            code, out = finish(client, 60)
            assert code == 0, f"ib_write_bw broke although the rule stayed: {out[-800:]}"
            after = engine_counters("h1")
            assert after["rechecks"] > before["rechecks"], "the QP was not checked again"
            assert after["qps_revoked"] == before["qps_revoked"]
            return
        client.wait(timeout=REVOKE_BOUND_S + 30)
        t_gone = time.monotonic()
        out = client.stdout.read()
        print(f"\napply (h1, then h2) took {t_applied - t0:.3f} s; ib_write_bw failed "
              f"{t_gone - t0:.3f} s after the apply began")
        assert client.returncode != 0, f"ib_write_bw went on without its rule: {out[-800:]}"
        assert t_gone - t0 < REVOKE_BOUND_S, out[-800:]
        after = engine_counters("h1")
        print(f"h1 engine: rechecks {after['rechecks']}, qps_revoked {after['qps_revoked']}, "
              f"revoked drops {after['drops']['revoked']}")
        assert after["qps_revoked"] > before["qps_revoked"], "no QP counted as revoked"
    finally:
        for p in (client, server):
            stop(p)


# ---------------------------------------------------------------- crafted RoCE on eth0

# Receives UDP on 4792 and 4791 for a while; prints one line per datagram: "<port> <len>".
_LISTEN = ("import select, socket, sys, time\n"
           "socks = []\n"
           "for port in (4792, 4791):\n"
           "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
           "    s.bind(('0.0.0.0', port)); socks.append((s, port))\n"
           "print('ready', flush=True)\n"
           "end = time.time() + float(sys.argv[1])\n"
           "while time.time() < end:\n"
           "    r, _, _ = select.select([s for s, _ in socks], [], [], 0.1)\n"
           "    for s, port in socks:\n"
           "        if s in r: print(port, len(s.recv(4096)), flush=True)\n")


def rocev2_write(dst_ip, sport, dport, gateway_mac, src_mac):
    """RC RDMA WRITE Only: BTH (opcode 0x0A, P_Key 0xFFFF, QP 0x000100, AckReq, PSN 0) + RETH
    (VA, rkey, 64 bytes) + data + a zero ICRC: what ReDMArk-style injection looks like."""
    bth = struct.pack("!BBHII", 0x0A, 0, 0xFFFF, 0x000100, 0x80000000)
    reth = struct.pack("!QII", 0x7F0000001000, 0x1234, 64)
    payload = bth + reth + b"\x41" * 64 + b"\0\0\0\0"
    return (Ether(dst=gateway_mac, src=src_mac) / IPv4(src=IP[T1], dst=dst_ip) /
            UDP(sport=sport, dport=dport) / payload)


def test_crafted_rocev2_on_the_ethernet_face_goes_nowhere(tmp_path):
    assert ping(T1, IP[T2], count=1) and ping(T1, IP[T5], count=1)
    gw = {dst: neighbor_mac(T1, IP[dst]) for dst in (T2, T5)}
    src_mac = json.loads(ns(T1, "ip", "-j", "link", "show", "eth0").stdout)[0]["address"]
    before = drops("h1").get("tenant_roce", 0)
    pcap = tmp_path / "br0.pcap"
    # The kernel cuts what the uplinks send (as a NIC without offloads would): the capture
    # sees every frame on its own, as a wire carries them, not UDP GSO datagrams of several.
    with uplinks_cut_by_the_kernel():
        capture = subprocess.Popen(["ip", "netns", "exec", "jk-fabric", "tcpdump", "-i", "br0",
                                    "-U", "-w", str(pcap), "udp", "port", "4789"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        listeners = {}
        try:
            for tenant in (T2, T5):
                listeners[tenant] = subprocess.Popen(
                    ["ip", "netns", "exec", tenant, PYTHON, "-c", _LISTEN, "6"],
                    stdout=subprocess.PIPE, text=True)
                assert listeners[tenant].stdout.readline().strip() == "ready"
            time.sleep(0.5)  # tcpdump up
            frames = []
            for dst in (T2, T5):
                frames += [rocev2_write(IP[dst], 50000, 4791, gw[dst], src_mac)] * 5  # RoCE
                frames += [rocev2_write(IP[dst], 4791, 4791, gw[dst], src_mac)] * 2   # "responses"
                frames += [rocev2_write(IP[dst], 50000, 4792, gw[dst], src_mac)] * 3  # control
            send_frames(T1, "eth0", frames)
            got = {}
            for tenant, p in listeners.items():
                out, _ = p.communicate(timeout=20)
                got[tenant] = [line.split()[0] for line in out.splitlines() if line.strip()]
        finally:
            for p in listeners.values():
                stop(p)
            time.sleep(0.5)
            stop(capture)
    dropped = drops("h1").get("tenant_roce", 0) - before
    print(f"\nreceived: {got}; tenant_roce drops on h1: {dropped}")
    for tenant in (T2, T5):
        assert got[tenant].count("4792") == 3, f"control UDP did not reach {tenant}: {got}"
        assert "4791" not in got[tenant], f"crafted RoCE reached {tenant}: {got}"
    assert dropped == 14, "every crafted RoCE frame is a counted tenant_roce drop"
    inner_4791 = 0
    vxlan_control = 0
    for pkt in rdpcap(str(pcap)):
        if VXLAN in pkt and UDP in pkt[VXLAN]:
            inner = pkt[VXLAN][UDP]
            inner_4791 += 4791 in (inner.sport, inner.dport)
            vxlan_control += inner.dport == 4792
    assert vxlan_control >= 3, "the control crossed the fabric"
    assert inner_4791 == 0, "crafted RoCE crossed the fabric"


# ---------------------------------------------------------------- ibv_rereg_mr, end to end


def test_rereg_mr_keeps_the_rkey_working_with_every_flag():
    """tests/rdma/pyverbs_rereg.py under jakiro-run: rdma-core's pyverbs calls ibv_rereg_mr
    (access, translation, PD) and real RDMA WRITE/READ with the rkey learnt before must work;
    the control shows the WRITE refused before the rereg granted remote write."""
    script = JAKIRO_RUN.parents[1] / "tests" / "rdma" / "pyverbs_rereg.py"
    r = ns(T1, JAKIRO_RUN, "--", PYTHON, script, timeout=60, check=False, env=shim_env())
    print(r.stdout)
    assert r.returncode == 0, r.stdout[-1500:] + r.stderr[-1500:]
    assert "all verified" in r.stdout
