"""IPv6 between the dual-stack tenants of one VPC, as IPv4: ping -6 and HTTP on one host and
across hosts (the inner IPv6 frame in an IPv4 VXLAN tunnel), the VPCs isolated although they
reuse their IPv6 addresses, and a spoofed IPv6 source a counted drop. TCP over IPv6 moves in
super-frames (the tenants keep TSO6 on) and tshark decodes it on the fabric: VXLAN, inner
IPv6, TCP with checksums right."""

import hashlib
import os
import subprocess
import time

import pytest
from scapy.layers.inet6 import ICMPv6EchoRequest, IPv6
from scapy.layers.l2 import Ether

from conftest import (IP6, MAC, T1, T2, T3, T4, T5, drops, http_server, iperf3_gbps,
                      iperf3_server, ns, send_frames, stats, uplinks_cut_by_the_kernel,
                      wait_until)

pytestmark = pytest.mark.usefixtures("testbed")
GATEWAY_MAC = "02:6a:6b:00:00:01"  # host.gateway_mac's default


def ping6(tenant, address, count=3):
    r = ns(tenant, "ping", "-6", "-c", count, "-i", "0.2", "-W", 2, address,
           timeout=count * 3 + 5, check=False)
    return r.returncode == 0


def fetch6(client, address, port):
    """True when an HTTP GET from `client` to [address]:port succeeds within 3 s."""
    r = ns(client, "curl", "-s", "-o", "/dev/null", "-m", "3", f"http://[{address}]:{port}/",
           timeout=10, check=False)
    return r.returncode == 0


@pytest.mark.parametrize("client, server", [(T1, T2), (T2, T1), (T1, T5), (T3, T4)],
                         ids=["across_hosts", "back", "same_host", "red_across_hosts"])
def test_ping6_between_tenants_of_a_vpc(client, server):
    assert ping6(client, IP6[server]), f"{client} cannot ping -6 {IP6[server]}"


def test_red_cannot_fetch_from_blue_at_an_address_red_also_has(tmp_path):
    # Blue t2 listens on [2001:2::1:2]:8080; in red that address is t4's, which does not.
    with http_server(T2, IP6[T2], 8080, tmp_path):
        assert fetch6(T1, IP6[T2], 8080), "blue t1 cannot fetch from blue t2 (control)"
        assert not fetch6(T3, IP6[T2], 8080), "ISOLATION BROKEN: red t3 fetched from blue t2"


def test_a_spoofed_ipv6_source_is_a_counted_drop():
    assert ping6(T1, IP6[T2], count=1)  # the control, and t1 knows the gateway
    before = drops("h1")["tenant_src_spoofed"]
    frames = [Ether(src=MAC[T1], dst=GATEWAY_MAC) / IPv6(src=IP6[T5], dst=IP6[T2]) /
              ICMPv6EchoRequest(),
              Ether(src="02:00:c6:13:01:77", dst=GATEWAY_MAC) / IPv6(src=IP6[T1], dst=IP6[T2]) /
              ICMPv6EchoRequest()]
    send_frames(T1, "eth0", frames)
    wait_until(lambda: drops("h1")["tenant_src_spoofed"] >= before + 2, 3,
               "two more tenant_src_spoofed drops on h1")


@pytest.mark.parametrize("client, server", [(T1, T2), (T1, T5)], ids=["across_hosts", "same_host"])
def test_tcp_over_ipv6_carries_a_stream_whole(client, server, tmp_path):
    # 256 KiB spans many full-size segments: a segment the path could not carry would stall
    # the transfer or change its bytes.
    body = os.urandom(256 * 1024)
    (tmp_path / "blob").write_bytes(body)
    with http_server(server, IP6[server], 8080, tmp_path):
        r = ns(client, "curl", "-sf", "-m", "10", f"http://[{IP6[server]}]:8080/blob",
               timeout=20, text=False)
    assert hashlib.sha256(r.stdout).hexdigest() == hashlib.sha256(body).hexdigest()
    with iperf3_server(server):
        gbps = iperf3_gbps(client, IP6[server], seconds=3)
    print(f"\niperf3 over IPv6 {client} -> {server}: {gbps:.2f} Gbit/s")
    assert gbps > 0.05, f"TCP over IPv6 barely moves: {gbps * 1000:.2f} Mbit/s"


# Average bytes per frame twice the MTU: super-frames were moved (as test_superframes.py).
SUPER = 3000
FABRIC = "jk-fabric"


def face_counters(host, vnic):
    return stats(host)["ports"][vnic]


def bytes_per_frame(after, before, packets, bytes_):
    n = after[packets] - before[packets]
    return (after[bytes_] - before[bytes_]) / n if n else 0


def test_tcp_over_ipv6_crosses_hosts_in_super_frames():
    assert "tx-tcp6-segmentation: on" in ns(T1, "ethtool", "-k", "eth0").stdout, \
        "the tenant keeps TSO for IPv6 on"
    t1_before, t2_before = face_counters("h1", "t1"), face_counters("h2", "t2")
    with iperf3_server(T2):
        ns(T1, "iperf3", "-c", IP6[T2], "-n", "50M", timeout=60)
    t1_after, t2_after = face_counters("h1", "t1"), face_counters("h2", "t2")
    sent = bytes_per_frame(t1_after, t1_before, "rx_packets", "rx_bytes")
    received = bytes_per_frame(t2_after, t2_before, "tx_packets", "tx_bytes")
    print(f"\n{sent:.0f} B per frame from t1, {received:.0f} B per frame to t2")
    assert sent > SUPER, "t1's TSO6 frames should reach jakirod whole"
    assert received > SUPER, "t2 should receive TCPv6 super-frames"


def test_tshark_decodes_tcp_over_ipv6_inside_vxlan_on_the_fabric(tmp_path):
    # h1's ul0 offloads off: the kernel cuts what jakirod sends into MTU frames with their
    # checksums filled, as a NIC on a wire would; the capture is decoded afterwards.
    pcap = tmp_path / "fabric.pcap"
    with uplinks_cut_by_the_kernel("jk-h1"):
        capture = subprocess.Popen(
            ["ip", "netns", "exec", FABRIC, "tshark", "-n", "-i", "br0", "-a", "duration:4",
             "-c", "1500", "-w", str(pcap)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)  # tshark needs a moment before it captures
        with iperf3_server(T2):
            ns(T1, "iperf3", "-c", IP6[T2], "-t", "1", timeout=30)
        capture.wait(timeout=60)
    fields = ["vxlan.vni", "ipv6.src", "ipv6.dst", "ipv6.nxt", "tcp.dstport",
              "tcp.checksum.status", "frame.len"]
    cmd = ["tshark", "-n", "-r", str(pcap), "-o", "tcp.check_checksum:TRUE",
           "-Y", f"vxlan && ipv6.dst == {IP6[T2]} && tcp.len > 0", "-T", "fields"]
    for f in fields:
        cmd += ["-e", f]
    out = ns(FABRIC, *cmd, timeout=120).stdout
    rows = [dict(zip(fields, line.split("\t"))) for line in out.splitlines() if line.strip()]
    print(f"\n{len(rows)} TCP segments over IPv6 decoded inside VXLAN")
    assert len(rows) > 100, "tshark should decode the transfer's segments"
    for r in rows:
        assert r["vxlan.vni"] == "100", r
        assert (r["ipv6.src"], r["ipv6.dst"]) == (IP6[T1], IP6[T2]), r
        assert r["ipv6.nxt"] == "6", r  # TCP right after the fixed header
        assert r["tcp.dstport"] == "5201", r
        assert int(r["frame.len"]) <= 1514, r
    bad = [r for r in rows if r["tcp.checksum.status"] != "1"]
    assert not bad, f"TCP checksums over the IPv6 pseudo-header not right: {bad[:3]}"
