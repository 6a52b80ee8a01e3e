#!/usr/bin/python3
"""Writes the seed corpus of packet_fuzzer into DIR: valid frames of the fuzzer's h1 (tenant
frames of t1/t5/t3, VXLAN from h2, ARP, IPv6 both ways with neighbour discovery, RoCE v2 over
IPv4 and IPv6) in the input layout packet_fuzzer.cc describes.

  tests/fuzz/make_seeds.py DIR
"""

import struct
import sys
from pathlib import Path

from scapy.layers.inet import ICMP, TCP, UDP, IP
from scapy.layers.inet6 import (ICMPv6EchoRequest, ICMPv6MLReport2, ICMPv6ND_NA, ICMPv6ND_NS,
                                ICMPv6ND_RA, ICMPv6NDOptSrcLLAddr, IPv6, IPv6ExtHdrDestOpt,
                                IPv6ExtHdrFragment, IPv6ExtHdrHopByHop, IPv6ExtHdrRouting)
from scapy.layers.l2 import ARP, Ether
from scapy.layers.vxlan import VXLAN

GW = "02:6a:6b:00:00:01"
T1, T5, T3 = ("02:00:c6:13:01:01", "198.19.1.1"), ("02:00:c6:13:01:03", "198.19.1.3"), \
    ("02:00:c6:13:02:01", "198.19.1.1")
T2_MAC, T2_IP = "02:00:c6:13:01:02", "198.19.1.2"
H1 = ("02:00:c6:12:00:01", "198.18.0.1")
H2 = ("02:00:c6:12:00:02", "198.18.0.2")

# control byte bits (packet_fuzzer.cc): 0-1 slot, 2 policy B, 3-4 VNI, 5 from .9, 6 burst,
# 7 aim RoCE at t1's QP
SLOT_T1, SLOT_T5, SLOT_T3 = 0, 1, 2
POLICY_B, VNI_RED, BURST, AIM_QP = 0x04, 0x08, 0x40, 0x80


def roce(opcode, psn, ext=b"", payload=b"", ack_req=True):
    """A RoCEv2 UDP payload: BTH (destination QP rewritten by the harness), extension headers,
    payload, pad, and an ICRC placeholder (the harness recomputes it under AIM_QP)."""
    pad = (4 - len(payload) % 4) % 4
    bth = struct.pack(">BBHI", opcode, pad << 4, 0xFFFF, 0) + struct.pack(
        ">I", (0x80000000 if ack_req else 0) | (psn & 0xFFFFFF))
    return UDP(sport=49152, dport=4791, chksum=0) / (bth + ext + payload + b"\0" * pad + b"\0" * 4)


def reth(va, rkey, length):
    return struct.pack(">QII", va, rkey, length)


def tenant(who, dst_ip, l4):
    mac, ip = who
    return Ether(src=mac, dst=GW) / IP(src=ip, dst=dst_ip) / l4


def from_t2(l4, src=T2_IP, dst="198.19.1.1"):
    return Ether(src=T2_MAC, dst=GW) / IP(src=src, dst=dst) / l4


T1_6, T2_6 = "2001:2::1:1", "2001:2::1:2"


def from_t2_6(l4, src=T2_6, dst=T1_6):
    """An IPv6 frame of t2's, as it arrives inside the tunnel (the harness wraps a copy)."""
    return Ether(src=T2_MAC, dst=GW) / IPv6(src=src, dst=dst) / l4


def vxlan_from_h2(inner, vni=100):
    return (Ether(src=H2[0], dst=H1[0]) / IP(src=H2[1], dst=H1[1]) / UDP(sport=50000, dport=4789)
            / VXLAN(flags=0x08, vni=vni) / inner)


NEW_BURST, NEW_POLICY = 0x4000, 0x8000  # flags of a burst-mode length word


def burst(frames, flags=None):
    """Burst-mode body; flags[i] are ORed into frame i's length word."""
    flags = flags or [0] * len(frames)
    return b"".join(struct.pack(">H", len(bytes(f)) | fl) + bytes(f)
                    for f, fl in zip(frames, flags))


def seeds():
    syn = TCP(sport=40000, dport=8080, flags="S")
    yield "t1_tcp_syn_to_t2", SLOT_T1, tenant(T1, T2_IP, syn)
    yield "t1_udp_dns_to_t2", SLOT_T1, tenant(T1, T2_IP, UDP(sport=40001, dport=53) / (b"q" * 12))
    yield "t1_ping_t5_same_host", SLOT_T1, tenant(T1, T5[1], ICMP(id=7, seq=1))
    yield "t5_rdma_to_t2", SLOT_T5, tenant(T5, T2_IP, UDP(sport=49152, dport=4791) / (b"\0" * 28))
    yield "t3_red_udp_to_t2", SLOT_T3, tenant(T3, T2_IP, UDP(sport=1000, dport=5050))
    yield "t1_arp_for_t2", SLOT_T1, Ether(src=T1[0], dst="ff:ff:ff:ff:ff:ff") / ARP(
        hwsrc=T1[0], psrc=T1[1], pdst=T2_IP)
    yield "t1_fragment", SLOT_T1, tenant(T1, T2_IP, UDP(sport=1, dport=53)) / (b"x" * 40)
    yield "t2_synack_inner", SLOT_T1, from_t2(TCP(sport=8080, dport=40000, flags="SA"))
    yield "t2_udp_5050_inner", SLOT_T1, from_t2(UDP(sport=5050, dport=5050) / (b"d" * 16))
    yield "t2_ping_inner", SLOT_T1, from_t2(ICMP(id=9))
    yield "vxlan_t2_to_t1_tcp", SLOT_T1, vxlan_from_h2(from_t2(TCP(sport=1234, dport=8080,
                                                                   flags="S")))
    yield "vxlan_red_t4_to_t3", VNI_RED, vxlan_from_h2(from_t2(UDP(sport=7, dport=7)), vni=200)
    yield "vxlan_arp_from_h2", SLOT_T1, vxlan_from_h2(Ether(src=T2_MAC, dst="ff:ff:ff:ff:ff:ff")
                                                      / ARP(psrc=T2_IP, pdst="198.19.1.1"))
    yield "underlay_arp_request", SLOT_T1, Ether(src=H2[0], dst="ff:ff:ff:ff:ff:ff") / ARP(
        hwsrc=H2[0], psrc=H2[1], pdst=H1[1])
    # IPv6 from dual-stack t1: neighbour discovery for t2 (answered), for an unknown address and
    # as a DAD probe (not), a router advertisement, an MLD report, extension-header chains, a
    # fragment, and data (forwarded).
    t1_6, t2_6 = "2001:2::1:1", "2001:2::1:2"
    yield "t1_nd_for_t2", SLOT_T1, Ether(src=T1[0], dst="33:33:ff:01:00:02") / IPv6(
        src=t1_6, dst="ff02::1:ff01:2", hlim=255) / ICMPv6ND_NS(tgt=t2_6) / ICMPv6NDOptSrcLLAddr(
        lladdr=T1[0])
    yield "t1_nd_unknown", SLOT_T1, Ether(src=T1[0], dst="33:33:ff:01:00:77") / IPv6(
        src="fe80::1", dst="ff02::1:ff01:77", hlim=255) / ICMPv6ND_NS(tgt="2001:2::1:77")
    yield "t1_nd_dad", SLOT_T1, Ether(src=T1[0], dst="33:33:ff:01:00:02") / IPv6(
        src="::", dst="ff02::1:ff01:2", hlim=255) / ICMPv6ND_NS(tgt=t2_6)
    yield "t1_router_advertisement", SLOT_T1, Ether(src=T1[0], dst="33:33:00:00:00:01") / IPv6(
        src="fe80::1", dst="ff02::1", hlim=255) / ICMPv6ND_RA()
    yield "t1_mld_report", SLOT_T1, Ether(src=T1[0], dst="33:33:00:00:00:16") / IPv6(
        src="fe80::1", dst="ff02::16", hlim=1) / IPv6ExtHdrHopByHop() / ICMPv6MLReport2()
    v6 = Ether(src=T1[0], dst=GW) / IPv6(src=t1_6, dst=t2_6)
    yield "t1_ipv6_header_chain", SLOT_T1, v6 / IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt() / \
        IPv6ExtHdrRouting() / ICMPv6EchoRequest()
    yield "t1_ipv6_fragment", SLOT_T1, v6 / IPv6ExtHdrFragment(m=1, id=3) / ICMPv6EchoRequest()
    yield "t1_ipv6_tcp_to_t2", SLOT_T1, v6 / TCP(sport=40000, dport=8080, flags="S")
    yield "t3_ipv6_ping_red", SLOT_T3, Ether(src=T3[0], dst=GW) / IPv6(src=t1_6, dst=t2_6) / \
        ICMPv6EchoRequest()
    # One flow's packets in a burst, under each policy: known flows get re-checked and revoked.
    stream = [tenant(T1, T2_IP, TCP(sport=40002, dport=8080, flags="S"))] + \
        [tenant(T1, T2_IP, TCP(sport=40002, dport=8080, flags="A") / (b"p" * 20))] * 7
    yield "burst_one_tcp_flow", BURST | SLOT_T1, burst(stream)
    yield "burst_one_tcp_flow_policy_b", BURST | POLICY_B | SLOT_T1, burst(stream)
    # The same flow over a live change: known under A, re-checked under B in the next burst.
    yield "burst_tcp_flow_across_a_change", BURST | SLOT_T1, burst(
        stream + stream[1:], [0] * len(stream) + [NEW_POLICY] + [0] * (len(stream) - 2))
    inbound = [from_t2(UDP(sport=5055, dport=5055) / (b"u" * 8))] * 8
    yield "burst_inbound_udp", BURST | SLOT_T1, burst(inbound)
    yield "burst_inbound_udp_policy_b", BURST | POLICY_B | SLOT_T1, burst(inbound)
    yield "burst_many_flows", BURST | SLOT_T5, burst(
        [tenant(T5, T2_IP, UDP(sport=2000 + i, dport=53)) for i in range(32)])
    # RoCEv2 from t2 into t1's QP (the harness connects it at PSN 0, rkey unknown: a bad
    # rkey NAK is a path too): SEND only, a SEND in three packets, WRITE, READ, an ACK.
    yield "roce_send_only", AIM_QP | SLOT_T1, vxlan_from_h2(
        from_t2(roce(0x04, 0, payload=b"hello rdma")))
    yield "roce_send_three_packets", AIM_QP | BURST | SLOT_T1, burst([
        vxlan_from_h2(from_t2(roce(0x00, 0, payload=b"a" * 1024, ack_req=False))),
        vxlan_from_h2(from_t2(roce(0x01, 1, payload=b"b" * 1024, ack_req=False))),
        vxlan_from_h2(from_t2(roce(0x02, 2, payload=b"c" * 100)))])
    yield "roce_write_only", AIM_QP | SLOT_T1, vxlan_from_h2(
        from_t2(roce(0x0A, 0, reth(0x10000, 0x100, 8), b"12345678")))
    yield "roce_read_request", AIM_QP | SLOT_T1, vxlan_from_h2(
        from_t2(roce(0x0C, 0, reth(0x10000, 0x100, 3000), ack_req=False)))
    yield "roce_ack", AIM_QP | SLOT_T1, vxlan_from_h2(
        from_t2(roce(0x11, 0, struct.pack(">I", 0x1F000000), ack_req=False)))
    # UC (0x20 + the RC operation) and UD (0x64/0x65 with a DETH: Q_Key, source QP).
    yield "roce_uc_send_three_packets", AIM_QP | BURST | SLOT_T1, burst([
        vxlan_from_h2(from_t2(roce(0x20, 0, payload=b"a" * 1024, ack_req=False))),
        vxlan_from_h2(from_t2(roce(0x21, 1, payload=b"b" * 1024, ack_req=False))),
        vxlan_from_h2(from_t2(roce(0x22, 2, payload=b"c" * 100, ack_req=False)))])
    yield "roce_uc_write_only", AIM_QP | SLOT_T1, vxlan_from_h2(
        from_t2(roce(0x2A, 0, reth(0x10000, 0x100, 8), b"12345678", ack_req=False)))
    deth = struct.pack(">IxBH", 0x11111111, 0, 0x777)
    yield "roce_ud_send_only", AIM_QP | SLOT_T1, vxlan_from_h2(
        from_t2(roce(0x64, 0, deth, b"datagram", ack_req=False)))
    yield "roce_ud_send_only_imm", AIM_QP | SLOT_T1, vxlan_from_h2(
        from_t2(roce(0x65, 0, deth + struct.pack(">I", 42), b"datagram", ack_req=False)))
    # IPv6 from the fabric (t2 on h2 to t1): data through the inner IPv6 checks, the IPv6
    # security groups and the flow table (as the wrapped copy, and whole as underlay frames);
    # a neighbour solicitation inside the tunnel (answered) and an advertisement (not); RoCE v2
    # over IPv6 to t1's QPs (RC over IPv6, UD) through pipeline/roce_ipv6_ingress.
    yield "t2_ipv6_tcp_syn_inner", SLOT_T1, from_t2_6(TCP(sport=40000, dport=8080, flags="S"))
    yield "t2_ipv6_udp_inner", SLOT_T1, from_t2_6(UDP(sport=5050, dport=5050) / (b"d" * 16))
    yield "t2_ipv6_ping_inner", SLOT_T1, from_t2_6(ICMPv6EchoRequest(id=9))
    yield "vxlan_t2_ipv6_tcp_to_t1", SLOT_T1, vxlan_from_h2(
        from_t2_6(TCP(sport=1234, dport=8080, flags="S")))
    yield "vxlan_red_ipv6_to_t3", VNI_RED, vxlan_from_h2(from_t2_6(UDP(sport=7, dport=7)),
                                                         vni=200)
    solicit = Ether(src=T2_MAC, dst="33:33:ff:01:00:01") / IPv6(
        src=T2_6, dst="ff02::1:ff01:1", hlim=255) / ICMPv6ND_NS(tgt=T1_6) / \
        ICMPv6NDOptSrcLLAddr(lladdr=T2_MAC)
    yield "t2_nd_for_t1_inner", SLOT_T1, solicit
    yield "vxlan_t2_nd_for_t1", SLOT_T1, vxlan_from_h2(solicit)
    yield "t2_nd_advertisement_inner", SLOT_T1, Ether(src=T2_MAC, dst=GW) / IPv6(
        src=T2_6, dst=T1_6, hlim=255) / ICMPv6ND_NA(tgt=T2_6, S=1)
    yield "roce6_send_only", AIM_QP | SLOT_T1, from_t2_6(roce(0x04, 0, payload=b"hello rdma"))
    yield "roce6_write_only", AIM_QP | SLOT_T1, from_t2_6(
        roce(0x0A, 0, reth(0x10000, 0x100, 8), b"12345678"))
    yield "roce6_read_request", AIM_QP | SLOT_T1, from_t2_6(
        roce(0x0C, 0, reth(0x10000, 0x100, 3000), ack_req=False))
    yield "roce6_send_three_packets", AIM_QP | BURST | SLOT_T1, burst([
        from_t2_6(roce(0x00, 0, payload=b"a" * 1024, ack_req=False)),
        from_t2_6(roce(0x01, 1, payload=b"b" * 1024, ack_req=False)),
        from_t2_6(roce(0x02, 2, payload=b"c" * 100))])
    yield "roce6_ud_send_only", AIM_QP | SLOT_T1, from_t2_6(
        roce(0x64, 0, deth, b"datagram", ack_req=False))
    yield "vxlan_roce6_write_only", SLOT_T1, vxlan_from_h2(from_t2_6(
        roce(0x0A, 0, reth(0x10000, 0x100, 8), b"12345678")))


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name, control, frame in seeds():
        body = frame if isinstance(frame, bytes) else bytes(frame)
        if name == "t1_fragment":  # MF set after scapy built the header: a first fragment
            b = bytearray(body)
            b[20] |= 0x20
            body = bytes(b)
        (out / name).write_bytes(bytes([control]) + body)


if __name__ == "__main__":
    main()
