"""jakirod speaks standard VXLAN: a Linux kernel VTEP (jk-kvtep, vxlan100, 198.19.1.9 and
2001:2::1:9 in VPC blue) and tenant t1 behind jakirod on h1 exchange ICMP and TCP both ways,
over IPv4 and over IPv6. The kernel resolves t1's IPv6 address by a neighbour solicitation
inside the tunnel, which jakirod answers with the gateway MAC."""

import json

import pytest

from conftest import IP, IP6, T1, iperf3_gbps, iperf3_server, jakiroctl, ns, ping

TESTBED_ARGS = ["--kernel-vtep"]
KVTEP, KVTEP_IP, KVTEP_IP6 = "jk-kvtep", "198.19.1.9", "2001:2::1:9"
GATEWAY_MAC = "02:6a:6b:00:00:01"  # host.gateway_mac's default

pytestmark = pytest.mark.usefixtures("testbed")


def test_tenant_pings_kernel_vtep():
    assert ping(T1, KVTEP_IP, count=3)


def test_kernel_vtep_pings_tenant():
    assert ping(KVTEP, IP[T1], count=3)


@pytest.mark.parametrize("client,server,server_ip", [(T1, KVTEP, KVTEP_IP), (KVTEP, T1, IP[T1])],
                         ids=["t1_to_kernel", "kernel_to_t1"])
def test_tcp_transfer_with_kernel_vtep(client, server, server_ip):
    with iperf3_server(server):
        gbps = iperf3_gbps(client, server_ip, seconds=3)
    print(f"\niperf3 {client} -> {server}: {gbps:.2f} Gbit/s")
    assert gbps > 0


def overlay_counter(name):
    return json.loads(jakiroctl("h1", "stats", "--json").stdout)["overlay"][name]


def test_tenant_pings6_kernel_vtep():
    assert ping(T1, KVTEP_IP6, count=3), f"t1 cannot ping -6 {KVTEP_IP6}"


def test_kernel_vtep_resolves_the_tenant_in_the_tunnel_and_pings6_it():
    # Forgotten first, so the kernel solicits t1's address again across the tunnel.
    ns(KVTEP, "ip", "-6", "neigh", "flush", "dev", "vxlan100")
    answered = overlay_counter("nd_replies_in_overlay")
    assert ping(KVTEP, IP6[T1], count=3), f"the kernel VTEP cannot ping -6 {IP6[T1]}"
    assert overlay_counter("nd_replies_in_overlay") > answered, "no solicitation answered"
    entries = json.loads(ns(KVTEP, "ip", "-j", "-6", "neigh", "show", IP6[T1], "dev",
                            "vxlan100").stdout)
    assert [e.get("lladdr") for e in entries] == [GATEWAY_MAC], entries


@pytest.mark.parametrize("client,server,server_ip", [(T1, KVTEP, KVTEP_IP6),
                                                     (KVTEP, T1, IP6[T1])],
                         ids=["t1_to_kernel", "kernel_to_t1"])
def test_tcp_over_ipv6_with_kernel_vtep(client, server, server_ip):
    with iperf3_server(server):
        gbps = iperf3_gbps(client, server_ip, seconds=2)
    print(f"\niperf3 over IPv6 {client} -> {server}: {gbps:.2f} Gbit/s")
    assert gbps > 0
