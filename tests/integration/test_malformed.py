"""Malformed underlay frames injected from the fabric at h1 are dropped and counted with a
reason; jakirod stays up and the overlay keeps working."""

import pytest
from scapy.layers.inet import ICMP, UDP, IP as IPv4
from scapy.layers.l2 import Ether
from scapy.layers.vxlan import VXLAN

from conftest import (IP, MAC, T1, T2, alive, drops, jakirod_pids, link_mac, ping, send_frames,
                      wait_until)

pytestmark = pytest.mark.usefixtures("testbed")

H1_IP, H2_IP = "198.18.0.1", "198.18.0.2"
# A made-up fabric MAC: injecting with h2's real MAC would teach br0 that h2 sits on br0.
INJECT_MAC = "02:00:c6:12:00:fe"


def vxlan_frame(h1_mac, vni=100, flags=0x08, dport=4789, ip=None, inner=None):
    """h2 -> h1 VXLAN frame carrying blue t2 -> t1 ICMP, with one field possibly broken."""
    if inner is None:
        inner = Ether(src=MAC[T2], dst=MAC[T1]) / IPv4(src=IP[T2], dst=IP[T1]) / ICMP()
    outer_ip = IPv4(**{"src": H2_IP, "dst": H1_IP, **(ip or {})})
    return (Ether(src=INJECT_MAC, dst=h1_mac) / outer_ip / UDP(sport=49152, dport=dport)
            / VXLAN(flags=flags, vni=vni) / inner)


# case -> (frame builder taking h1's underlay MAC, words one of which names the reason)
CASES = {
    "vxlan_without_valid_vni_flag": (lambda m: vxlan_frame(m, flags=0x00), ["flag"]),
    "unknown_vni": (lambda m: vxlan_frame(m, vni=4242), ["vni"]),
    "not_vxlan_udp_port": (lambda m: vxlan_frame(m, dport=4790), ["port"]),
    "wrong_outer_dst_ip": (lambda m: vxlan_frame(m, ip={"dst": "198.18.0.77"}), ["ip"]),
    "bad_outer_ip_checksum": (lambda m: vxlan_frame(m, ip={"chksum": 0xDEAD}),
                              ["checksum", "csum"]),
    "outer_ip_length_beyond_frame": (lambda m: vxlan_frame(m, ip={"len": 1400}),
                                     ["len", "header", "trunc"]),
    "outer_ip_length_below_header": (lambda m: vxlan_frame(m, ip={"len": 12}),
                                     ["len", "header", "trunc"]),
    "truncated_in_vxlan_header": (lambda m: bytes(vxlan_frame(m))[:14 + 20 + 8 + 4],
                                  ["trunc", "len", "header"]),
    "truncated_inner_ip_header": (lambda m: vxlan_frame(m, inner=bytes(
        Ether(src=MAC[T2], dst=MAC[T1]) / IPv4(src=IP[T2], dst=IP[T1]))[:14 + 10]),
                                  ["trunc", "len", "header"]),
    "runt_ethernet_frame": (lambda m: bytes(Ether(src=INJECT_MAC, dst=m, type=0x0800))
                            + b"\x45\x00", ["trunc", "len", "header"]),
}


@pytest.fixture(scope="module")
def h1_mac():
    assert ping(T1, IP[T2], count=1)  # the bridge learns where h1 is
    return link_mac("jk-h1", "ul0")


@pytest.mark.parametrize("case", CASES)
def test_malformed_frame_is_dropped_with_reason(case, h1_mac):
    build, words = CASES[case]
    before = drops("h1")
    send_frames("jk-fabric", "br0", [build(h1_mac)] * 3)

    def grown():
        after = drops("h1")
        return {k: after[k] - before[k] for k in after if after[k] > before[k]}

    wait_until(lambda: grown(), 3, f"h1 drop counters to grow after {case}")
    reasons = grown()
    print(f"\n{case}: {reasons}")
    assert any(w in k.lower() for k in reasons for w in words), \
        f"no drop reason mentioning {words} grew: {reasons}"
    assert alive(jakirod_pids()["h1"]), "jakirod h1 died"


def test_overlay_still_works_after_malformed_frames(h1_mac):
    for build, _ in CASES.values():
        send_frames("jk-fabric", "br0", [build(h1_mac)] * 10)
    assert all(alive(pid) for pid in jakirod_pids().values()), "a jakirod died"
    assert ping(T1, IP[T2], count=3)
