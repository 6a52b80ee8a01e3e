#!/usr/bin/python3
"""Generates icrc_vectors.hh: RoCEv2 packets with ICRCs computed independently of Jakiro.

The ICRC of each IPv4 packet comes from scapy's RoCE layer (scapy.contrib.roce, Debian's
python3-scapy), which masks the variant fields on a copy of the packet and runs zlib.crc32;
scapy has no IPv6 ICRC, so for IPv6 the fields are masked here on scapy's dissection of the
packet (traffic class, flow label, hop limit, UDP checksum, BTH byte 4) before zlib.crc32.
This script checks that value against a second, hand-written masking over zlib.crc32 before
writing it out, and checks that packets differing only in variant fields (TOS, TTL, checksums,
BTH byte 4) get the same ICRC. The unit test then needs neither Python nor scapy.

Regenerate (Debian's interpreter: the python3 on PATH cannot import Debian packages):

    /usr/bin/python3 tests/unit/rnic/wire/make_icrc_vectors.py

It rewrites icrc_vectors.hh next to this script and runs clang-format on it when available.
"""

import os
import shutil
import struct
import subprocess
import zlib

from scapy.all import IP, IPv6, UDP, Raw, raw
from scapy.layers.inet import IPOption_NOP
from scapy.contrib.roce import BTH, AETH

SRC, DST = "198.19.1.1", "198.19.1.2"  # the test bed's tenant addresses (docs/testbed.md)
SRC6, DST6 = "2001:2::1:1", "2001:2::1:2"  # and their IPv6 ones


def pattern(n, seed):
    return bytes((seed + 7 * i) & 0xFF for i in range(n))


def reth(va, rkey, dma_len):
    return struct.pack("!QII", va, rkey, dma_len)


def deth(qkey, src_qp):
    return struct.pack("!II", qkey, src_qp & 0xFFFFFF)


def padded(payload):
    pad = (4 - len(payload) % 4) % 4
    return payload + b"\0" * pad, pad


def icrc_by_hand(packet):
    """Annex A17 masking over zlib.crc32, written from docs/roce-wire.md without scapy's help."""
    body = bytearray(packet[:-4])
    if packet[0] >> 4 == 6:
        hdr = 40
        body[0] |= 0x0F  # traffic class, high nibble (the version stays)
        body[1:4] = b"\xff\xff\xff"  # traffic class, low nibble, and flow label
        body[7] = 0xFF  # hop limit
    else:
        hdr = (packet[0] & 0x0F) * 4
        body[1] = 0xFF  # TOS
        body[8] = 0xFF  # TTL
        body[10:12] = b"\xff\xff"  # IPv4 header checksum
    body[hdr + 6:hdr + 8] = b"\xff\xff"  # UDP checksum
    body[hdr + 8 + 4] = 0xFF  # BTH byte 4
    return zlib.crc32(b"\xff" * 8 + bytes(body)) & 0xFFFFFFFF


def icrc_by_fields_ipv6(packet):
    """The IPv6 masking field by field on scapy's dissection (scapy's RoCE layer computes the
    ICRC over IPv4 only): traffic class, flow label and hop limit to ones, as rxe_icrc.c does."""
    masked = IPv6(packet[:-4])
    masked.tc = 0xFF
    masked.fl = 0xFFFFF
    masked.hlim = 0xFF
    masked[UDP].chksum = 0xFFFF
    masked[BTH].fecn = 1
    masked[BTH].becn = 1
    masked[BTH].resv6 = 0x3F
    return zlib.crc32(b"\xff" * 8 + raw(masked)[:len(packet) - 4]) & 0xFFFFFFFF


def build(name, ip, udp, bth, layers, payload_len):
    packet = raw(ip / udp / bth / layers)
    if packet[0] >> 4 == 6:
        # Two independent maskings agree, then the ICRC goes into the packet.
        icrc = icrc_by_fields_ipv6(packet)
        packet = packet[:-4] + struct.pack("<I", icrc)
    stored = packet[-4:]
    icrc = struct.unpack("<I", stored)[0]  # on the wire least significant byte first
    assert icrc == icrc_by_hand(packet), name
    fields = (IPv6(packet) if packet[0] >> 4 == 6 else IP(packet))[BTH]
    return {
        "name": name,
        "bytes": packet,
        "icrc": icrc,
        "opcode": fields.opcode,
        "dest_qp": fields.dqpn,
        "psn": fields.psn,
        "pad": fields.padcount,
        "payload_len": payload_len,
    }


def vectors():
    out = []

    # RC SEND Only, 13-byte payload padded to 16, AckReq, default TOS and TTL.
    payload, pad = padded(b"hello, roce!!")
    out.append(
        build(
            "rc_send_only",
            IP(src=SRC, dst=DST, tos=0x00, ttl=64),
            UDP(sport=49152, dport=4791),
            BTH(opcode=0x04, padcount=pad, dqpn=0x000011, psn=0x000100, ackreq=1),
            Raw(payload),
            13,
        )
    )

    # RC WRITE First with RETH and a full 1024-byte path MTU of payload, PSN at the 2^24 edge,
    # ECT(0) and a decremented TTL, UDP checksum filled in.
    out.append(
        build(
            "rc_write_first_reth",
            IP(src=SRC, dst=DST, tos=0xB8 | 0x02, ttl=63),
            UDP(sport=50000, dport=4791),
            BTH(opcode=0x06, dqpn=0x123456, psn=0xFFFFFF),
            Raw(reth(0x00007F0012345678, 0xDEADBEEF, 2048)) / Raw(pattern(1024, 3)),
            1024,
        )
    )

    # RC ACK with AETH (credits invalid), CE-marked, TTL 1, UDP checksum zero, BECN set in BTH
    # byte 4: every variant field differs from its neighbour below.
    ack_bth = dict(opcode=0x11, dqpn=0xABCDEF, psn=0x000042)
    out.append(
        build(
            "rc_ack_aeth",
            IP(src=DST, dst=SRC, tos=0x03, ttl=1),
            UDP(sport=61234, dport=4791, chksum=0),
            BTH(becn=1, resv6=0x15, **ack_bth),
            AETH(syndrome=0x1F, msn=0x000007),
            0,
        )
    )
    # The same ACK as another router would leave it: TOS, TTL, checksums and BTH byte 4 differ.
    out.append(
        build(
            "rc_ack_aeth_rewritten",
            IP(src=DST, dst=SRC, tos=0x00, ttl=200),
            UDP(sport=61234, dport=4791, chksum=0x1234),
            BTH(**ack_bth),
            AETH(syndrome=0x1F, msn=0x000007),
            0,
        )
    )
    assert out[-1]["icrc"] == out[-2]["icrc"], "variant fields leaked into the ICRC"

    # UD SEND Only with Immediate behind an IPv4 header with options (IHL 6): DETH, ImmDt, 41
    # bytes of payload padded to 44.
    payload, pad = padded(pattern(41, 0x5A))
    out.append(
        build(
            "ud_send_only_imm_ip_options",
            IP(src=SRC, dst=DST, tos=0x48, ttl=17, options=[IPOption_NOP()] * 4),
            UDP(sport=49999, dport=4791),
            BTH(opcode=0x65, padcount=pad, dqpn=0x000102, psn=0x7FFFFF, solicited=1),
            Raw(deth(0x00001234, 0x000203)) / Raw(b"\x01\x02\x03\x04") / Raw(payload),
            41,
        )
    )
    return out


def vectors_ipv6():
    out = []

    # RC SEND Only over IPv6: traffic class 0, no flow label, hop limit 64.
    payload, pad = padded(b"hello, roce over ipv6")
    out.append(
        build(
            "ipv6_rc_send_only",
            IPv6(src=SRC6, dst=DST6, tc=0x00, fl=0, hlim=64),
            UDP(sport=49152, dport=4791, chksum=0),
            BTH(opcode=0x04, padcount=pad, dqpn=0x000011, psn=0x000100, ackreq=1),
            Raw(payload),
            21,
        )
    )

    # RC WRITE Only with RETH and a 1024-byte payload: DSCP 46 with ECT(0), a flow label, a
    # decremented hop limit, UDP checksum filled in.
    out.append(
        build(
            "ipv6_rc_write_only_reth",
            IPv6(src=SRC6, dst=DST6, tc=0xB8 | 0x02, fl=0xABCDE, hlim=63),
            UDP(sport=50000, dport=4791),
            BTH(opcode=0x0A, dqpn=0x123456, psn=0xFFFFFF),
            Raw(reth(0x00007F0012345678, 0xDEADBEEF, 1024)) / Raw(pattern(1024, 3)),
            1024,
        )
    )

    # RC ACK, CE-marked, hop limit 1, BECN set; then the same ACK as another router would leave
    # it: traffic class, flow label, hop limit, UDP checksum and BTH byte 4 differ.
    ack_bth = dict(opcode=0x11, dqpn=0xABCDEF, psn=0x000042)
    out.append(
        build(
            "ipv6_rc_ack_aeth",
            IPv6(src=DST6, dst=SRC6, tc=0x03, fl=0x12345, hlim=1),
            UDP(sport=61234, dport=4791, chksum=0),
            BTH(becn=1, resv6=0x15, **ack_bth),
            AETH(syndrome=0x1F, msn=0x000007),
            0,
        )
    )
    out.append(
        build(
            "ipv6_rc_ack_aeth_rewritten",
            IPv6(src=DST6, dst=SRC6, tc=0xFC, fl=0, hlim=255),
            UDP(sport=61234, dport=4791, chksum=0x1234),
            BTH(**ack_bth),
            AETH(syndrome=0x1F, msn=0x000007),
            0,
        )
    )
    assert out[-1]["icrc"] == out[-2]["icrc"], "variant fields leaked into the ICRC"

    # UD SEND Only with Immediate: DETH, ImmDt, 41 bytes of payload padded to 44.
    payload, pad = padded(pattern(41, 0x5A))
    out.append(
        build(
            "ipv6_ud_send_only_imm",
            IPv6(src=SRC6, dst=DST6, tc=0x48, fl=0x00001, hlim=17),
            UDP(sport=49999, dport=4791, chksum=0),
            BTH(opcode=0x65, padcount=pad, dqpn=0x000102, psn=0x7FFFFF, solicited=1),
            Raw(deth(0x00001234, 0x000203)) / Raw(b"\x01\x02\x03\x04") / Raw(payload),
            41,
        )
    )
    return out


def c_bytes(data):
    return ", ".join(f"0x{b:02x}" for b in data)


def render(vs, vs6):
    lines = [
        "#pragma once",
        "// GENERATED by make_icrc_vectors.py from scapy.contrib.roce + zlib. Do not edit;",
        "// regenerate with: /usr/bin/python3 tests/unit/rnic/wire/make_icrc_vectors.py",
        "",
        "#include <cstddef>",
        "#include <cstdint>",
        "",
        "namespace jakiro::rnic::test {",
        "",
        "// One RoCEv2 packet from its IP header (IPv4 or IPv6) through its ICRC.",
        "struct icrc_vector {",
        "    const char* name;",
        "    const uint8_t* packet;",
        "    size_t len;",
        "    uint32_t icrc;  // as zlib.crc32 returns it; stored least significant byte first",
        "    uint8_t opcode;",
        "    uint32_t dest_qp;",
        "    uint32_t psn;",
        "    uint8_t pad;",
        "    size_t payload_len;  // pad excluded",
        "};",
        "",
    ]
    for v in vs + vs6:
        lines.append(f"inline constexpr uint8_t {v['name']}_packet[] = {{{c_bytes(v['bytes'])}}};")
        lines.append("")
    for array, comment, rows in (
        ("icrc_vectors", "// Over IPv4.", vs),
        ("icrc_vectors_ipv6", "// Over IPv6.", vs6),
    ):
        lines.append(comment)
        lines.append(f"inline constexpr icrc_vector {array}[] = {{")
        for v in rows:
            lines.append(
                f"    {{\"{v['name']}\", {v['name']}_packet, sizeof({v['name']}_packet), "
                f"0x{v['icrc']:08x}, 0x{v['opcode']:02x}, 0x{v['dest_qp']:06x}, "
                f"0x{v['psn']:06x}, {v['pad']}, {v['payload_len']}}},"
            )
        lines.append("};")
        lines.append("")
    lines.append("}  // namespace jakiro::rnic::test")
    return "\n".join(lines) + "\n"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "icrc_vectors.hh")
    text = render(vectors(), vectors_ipv6())  # before the file is opened: a failed check
    with open(path, "w") as f:                # leaves the old vectors in place
        f.write(text)
    if shutil.which("clang-format"):
        subprocess.run(["clang-format", "-i", path], check=True)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
