"""Malformed underlay frames for h1, from the fabric: the outer headers broken one field at a
time (test_malformed.py with one worker, test_two_workers.py with two, where worker 0's
dispatcher reads them before any ingress check), and VXLAN frames whose outer headers are sound
but whose inner packet is not (handed to the receiving vNIC's worker, which must refuse them)."""

from scapy.layers.inet import ICMP, UDP, IP as IPv4
from scapy.layers.l2 import Ether
from scapy.layers.vxlan import VXLAN

from conftest import IP, MAC, T1, T2

H1_IP, H2_IP = "198.18.0.1", "198.18.0.2"
# A made-up fabric MAC: injecting with h2's real MAC would teach br0 that h2 sits on br0.
INJECT_MAC = "02:00:c6:12:00:fe"


def vxlan_frame(h1_mac, vni=100, flags=0x08, dport=4789, ip=None, inner=None, to=T1,
                inner_ip=None):
    """h2 -> h1 VXLAN frame carrying blue t2 -> `to` ICMP, with one field possibly broken
    (`ip`: outer IPv4 fields; `inner_ip`: inner IPv4 fields; `inner`: the whole inner frame)."""
    if inner is None:
        inner = (Ether(src=MAC[T2], dst=MAC[to])
                 / IPv4(**{"src": IP[T2], "dst": IP[to], **(inner_ip or {})}) / ICMP())
    outer_ip = IPv4(**{"src": H2_IP, "dst": H1_IP, **(ip or {})})
    return (Ether(src=INJECT_MAC, dst=h1_mac) / outer_ip / UDP(sport=49152, dport=dport)
            / VXLAN(flags=flags, vni=vni) / inner)


# case -> (frame builder taking h1's underlay MAC and the receiving tenant, words one of which
# names the reason)
CASES = {
    "vxlan_without_valid_vni_flag": (lambda m, to: vxlan_frame(m, to=to, flags=0x00),
                                     ["flag"]),
    "unknown_vni": (lambda m, to: vxlan_frame(m, to=to, vni=4242), ["vni"]),
    "not_vxlan_udp_port": (lambda m, to: vxlan_frame(m, to=to, dport=4790), ["port"]),
    "wrong_outer_dst_ip": (lambda m, to: vxlan_frame(m, to=to, ip={"dst": "198.18.0.77"}),
                           ["ip"]),
    "bad_outer_ip_checksum": (lambda m, to: vxlan_frame(m, to=to, ip={"chksum": 0xDEAD}),
                              ["checksum", "csum"]),
    "outer_ip_length_beyond_frame": (lambda m, to: vxlan_frame(m, to=to, ip={"len": 1400}),
                                     ["len", "header", "trunc"]),
    "outer_ip_length_below_header": (lambda m, to: vxlan_frame(m, to=to, ip={"len": 12}),
                                     ["len", "header", "trunc"]),
    "truncated_in_vxlan_header": (lambda m, to: bytes(vxlan_frame(m, to=to))[:14 + 20 + 8 + 4],
                                  ["trunc", "len", "header"]),
    "truncated_inner_ip_header": (lambda m, to: vxlan_frame(m, to=to, inner=bytes(
        Ether(src=MAC[T2], dst=MAC[T1]) / IPv4(src=IP[T2], dst=IP[T1]))[:14 + 10]),
                                  ["trunc", "len", "header"]),
    "runt_ethernet_frame": (lambda m, to: bytes(Ether(src=INJECT_MAC, dst=m, type=0x0800))
                            + b"\x45\x00", ["trunc", "len", "header"]),
}


# case -> (inner IPv4 fields, outer IPv4 fields, the drop reason): sound outer headers.
INNER_CASES = {
    "inner_header_length_4": ({"ihl": 4}, {}, "inner_bad_ip_header"),
    "inner_length_beyond_frame": ({"len": 1400}, {}, "inner_bad_ip_header"),
    "inner_source_not_on_h2": ({"src": "198.19.1.77"}, {}, "inner_src_spoofed"),
    "inner_fragment": ({"flags": "MF"}, {}, "fragment"),
    "outer_ce_on_not_ect": ({"tos": 0}, {"tos": 0x03}, "inner_ce_on_not_ect"),
}
