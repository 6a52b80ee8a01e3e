"""IPv6 between the dual-stack tenants of one VPC, as IPv4: ping -6 and HTTP on one host and
across hosts (the inner IPv6 frame in an IPv4 VXLAN tunnel), the VPCs isolated although they
reuse their IPv6 addresses, and a spoofed IPv6 source a counted drop."""

import hashlib
import os

import pytest
from scapy.layers.inet6 import ICMPv6EchoRequest, IPv6
from scapy.layers.l2 import Ether

from conftest import (IP6, MAC, T1, T2, T3, T4, T5, drops, http_server, iperf3_gbps,
                      iperf3_server, ns, send_frames, wait_until)

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
