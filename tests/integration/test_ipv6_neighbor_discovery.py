"""A dual-stack tenant resolves every IPv6 address of its VPC, on its host or another, to the
VPC gateway's MAC (jakirod answers its Neighbor Solicitations as it answers ARP), and nothing
of another VPC. What a tenant sends that jakirod does not carry is a counted drop with a reason:
router and advertisement messages, spoofed solicitations, multicast, extension headers,
fragments (IPv6 data itself is forwarded: test_ipv6_forwarding.py)."""

import json
import time

import pytest
from scapy.layers.inet6 import (ICMPv6EchoRequest, ICMPv6ND_NA, ICMPv6ND_NS, ICMPv6ND_RA,
                                ICMPv6ND_Redirect, ICMPv6ND_RS, ICMPv6NDOptSrcLLAddr,
                                IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrFragment,
                                IPv6ExtHdrHopByHop, IPv6ExtHdrRouting)
from scapy.layers.l2 import Ether
from scapy.utils6 import in6_getnsma, in6_getnsmac
from socket import AF_INET6, inet_ntop, inet_pton

from conftest import IP6, MAC, T1, T2, T3, T5, drops, jakiroctl, ns, send_frames, wait_until

pytestmark = pytest.mark.usefixtures("testbed")
GATEWAY_MAC = "02:6a:6b:00:00:01"  # host.gateway_mac's default


def nd_replies(host):
    return json.loads(jakiroctl(host, "stats", "--json").stdout)["overlay"]["nd_replies_to_tenants"]


def resolved_mac(tenant, address):
    """Sends one echo request to `address` (which makes the kernel solicit it) and returns the
    MAC the tenant's neighbour table holds for it within 3 s, or None."""
    ns(tenant, "ip", "-6", "neigh", "flush", "dev", "eth0")
    ns(tenant, "ping", "-6", "-c", "1", "-W", "1", address, check=False, timeout=10)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        entries = json.loads(ns(tenant, "ip", "-j", "-6", "neigh", "show", address,
                                "dev", "eth0").stdout)
        macs = [e["lladdr"] for e in entries if "lladdr" in e]
        if macs:
            return macs[0]
        time.sleep(0.1)
    return None


@pytest.mark.parametrize("tenant, address", [(T1, IP6[T2]), (T1, IP6[T5]), (T2, IP6[T1])],
                         ids=["across_hosts", "same_host", "from_h2"])
def test_a_tenant_resolves_an_ipv6_address_of_its_vpc_to_the_gateway_mac(tenant, address):
    host = "h1" if tenant in (T1, T5, T3) else "h2"
    before = nd_replies(host)
    assert resolved_mac(tenant, address) == GATEWAY_MAC
    assert nd_replies(host) >= before + 1


def test_red_cannot_resolve_an_ipv6_address_only_blue_has():
    # 2001:2::1:3 is blue t5's; red has no such address. The control: blue t1 resolves it.
    assert resolved_mac(T1, IP6[T5]) == GATEWAY_MAC
    before = drops("h1")["tenant_nd_ignored"]
    assert resolved_mac(T3, IP6[T5]) is None
    wait_until(lambda: drops("h1")["tenant_nd_ignored"] > before, 3,
               "red t3's solicitation counted as tenant_nd_ignored")


def solicitation(src_mac, src, target):
    group = inet_ntop(AF_INET6, in6_getnsma(inet_pton(AF_INET6, target)))
    return (Ether(src=src_mac, dst=in6_getnsmac(inet_pton(AF_INET6, group))) /
            IPv6(src=src, dst=group, hlim=255) / ICMPv6ND_NS(tgt=target) /
            ICMPv6NDOptSrcLLAddr(lladdr=src_mac))


def expect_counted(frames, reason, host="h1", tenant=T1):
    before = drops(host)[reason]
    send_frames(tenant, "eth0", frames)
    wait_until(lambda: drops(host)[reason] >= before + len(frames), 3,
               f"{len(frames)} more {reason} drops on {host}")


def test_a_well_formed_solicitation_is_answered_and_spoofed_ones_are_counted_drops():
    good = solicitation(MAC[T1], IP6[T1], IP6[T2])
    before = nd_replies("h1")
    send_frames(T1, "eth0", [good])
    wait_until(lambda: nd_replies("h1") > before, 3, "the control solicitation answered")
    expect_counted([solicitation("02:00:c6:13:01:77", IP6[T1], IP6[T2]),
                    solicitation(MAC[T1], IP6[T5], IP6[T2])], "tenant_src_spoofed")


def test_router_and_advertisement_messages_and_dad_probes_from_a_tenant_are_counted_drops():
    to_all = (Ether(src=MAC[T1], dst="33:33:00:00:00:01") /
              IPv6(src="fe80::1", dst="ff02::1", hlim=255))
    dad = (Ether(src=MAC[T1], dst="33:33:ff:01:00:02") /
           IPv6(src="::", dst="ff02::1:ff01:2", hlim=255) / ICMPv6ND_NS(tgt=IP6[T2]))
    expect_counted([to_all / ICMPv6ND_RA(), to_all / ICMPv6ND_NA(tgt=IP6[T2], R=1, O=1),
                    to_all / ICMPv6ND_Redirect(tgt=IP6[T2], dst=IP6[T5]),
                    Ether(src=MAC[T1], dst="33:33:00:00:00:02") /
                    IPv6(src="fe80::1", dst="ff02::2", hlim=255) / ICMPv6ND_RS(), dad],
                   "tenant_nd_ignored")


def test_ipv6_extension_header_chains_and_fragments_are_counted_drops():
    base = Ether(src=MAC[T1], dst=GATEWAY_MAC) / IPv6(src=IP6[T1], dst=IP6[T2])
    chain = (base / IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt() / IPv6ExtHdrRouting() /
             IPv6ExtHdrDestOpt() / ICMPv6EchoRequest())
    expect_counted([chain, base / IPv6ExtHdrRouting(addresses=[IP6[T5]]) / ICMPv6EchoRequest()],
                   "tenant_ipv6_extension_header")
    expect_counted([base / IPv6ExtHdrFragment(offset=0, m=1, id=7) / ICMPv6EchoRequest(),
                    base / IPv6ExtHdrFragment(offset=8, m=0, id=7) / (b"x" * 16)], "fragment")


def test_a_spoofed_or_multicast_ipv6_packet_is_a_counted_drop():
    expect_counted([Ether(src=MAC[T1], dst=GATEWAY_MAC) / IPv6(src=IP6[T5], dst=IP6[T2]) /
                    ICMPv6EchoRequest(),
                    Ether(src="02:00:c6:13:01:77", dst=GATEWAY_MAC) /
                    IPv6(src=IP6[T1], dst=IP6[T2]) / ICMPv6EchoRequest()], "tenant_src_spoofed")
    expect_counted([Ether(src=MAC[T1], dst="33:33:00:00:00:01") /
                    IPv6(src=IP6[T1], dst="ff02::1") / ICMPv6EchoRequest()], "tenant_not_unicast")
