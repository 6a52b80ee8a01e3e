"""A tap uplink (`vnet:tap=ultap`, `tools/testbed up --uplink-face tap`: the tap bridged to ul0
in each host namespace, as a hypervisor bridges a VM's tap to its NIC) carries a tenant's TCP
super-frame to the other host as ONE VXLAN frame (UDP-tunnel GSO): the kernel cuts it into MTU
frames only where a receiver needs them (a wire, an interface without the offload), the other
jakirod takes it whole. RoCE, ARP and a Linux VTEP's traffic pass as on any uplink. A rogue
host's super-frame that lies about its segment size is a counted drop."""

import hashlib
import os
import subprocess

import pytest

from conftest import (IP, MAC, PYTHON, T1, T2, drops_matching, integrity_pair, iperf3_gbps,
                      iperf3_server, ns, ns_bg, ping, stats, wait_listening, wait_until)
from test_superframes import _SINK, _SOURCE, average, capture_cut_transfer

pytestmark = pytest.mark.usefixtures("testbed")
TESTBED_ARGS = ["--tenant-face", "vnet", "--uplink-face", "tap", "--kernel-vtep"]
FABRIC = "jk-fabric"
KVTEP, KVTEP_IP = "jk-kvtep", "198.19.1.9"


def port(host, name):
    return stats(host)["ports"][name]


def send_blob(src, dst, dst_ip, tmp_path, size=24 << 20):
    body = os.urandom(size)
    (tmp_path / "blob").write_bytes(body)
    with ns_bg(dst, PYTHON, "-c", _SINK, dst_ip, stdout=subprocess.PIPE, text=True) as sink:
        wait_listening(dst, 5310)
        ns(src, PYTHON, "-c", _SOURCE, dst_ip, tmp_path / "blob", timeout=60)
        out, _ = sink.communicate(timeout=30)
    length, digest = out.split()
    assert int(length) == len(body)
    assert digest == hashlib.sha256(body).hexdigest()


def test_bulk_tcp_between_hosts_arrives_intact(tmp_path):
    send_blob(T1, T2, IP[T2], tmp_path)


def test_super_frames_cross_the_fabric_as_one_vxlan_frame_each():
    t1_before, h1_before, h2_before = port("h1", "t1"), port("h1", "uplink"), port("h2", "uplink")
    with iperf3_server(T2):
        ns(T1, "iperf3", "-c", IP[T2], "-n", "60M", "-C", "cubic", timeout=60)
    t1_after, h1_after, h2_after = port("h1", "t1"), port("h1", "uplink"), port("h2", "uplink")
    from_tenant = t1_after["rx_superframes"] - t1_before["rx_superframes"]
    sent = h1_after["tx_superframes"] - h1_before["tx_superframes"]
    received = h2_after["rx_superframes"] - h2_before["rx_superframes"]
    per_message = average(h2_after, h2_before, "rx_packets", "rx_bytes")
    print(f"\nt1 super-frames {from_tenant}, h1 uplink sent {sent}, h2 uplink took {received} "
          f"({per_message:.0f} B per message)")
    assert from_tenant > 60e6 / 65536 * 0.5, "t1's TSO frames should reach jakirod whole"
    # One VXLAN super-frame per tenant super-frame, not two super-datagrams of cut frames.
    assert sent >= from_tenant * 0.95, "h1 should send each tenant super-frame whole"
    assert received >= sent * 0.95, "h2 should take them whole (no cutting, no GRO)"
    assert per_message > 16 * 1514, "h2's uplink messages should be super-frames"


def test_where_the_kernel_must_cut_the_wire_carries_valid_mtu_vxlan_frames(tmp_path):
    # ul0's offloads off on h1: the kernel cuts each tunnel super-frame in software as a NIC
    # without VXLAN TSO would, so the fabric shows what a wire would carry.
    pcap = tmp_path / "fabric.pcap"
    capture_cut_transfer(pcap)
    out = ns(FABRIC, "tshark", "-n", "-r", str(pcap), "-o", "tcp.check_checksum:TRUE",
             "-o", "udp.check_checksum:TRUE", "-Y", "udp.dstport == 4789 && tcp.len > 0",
             "-T", "fields", "-e", "frame.len", "-e", "udp.checksum", "-e", "udp.checksum.status",
             "-e", "tcp.checksum.status", timeout=120).stdout
    frames = [line.split("\t") for line in out.splitlines() if line.strip()]
    assert len(frames) > 1000, "the capture should have seen the transfer"
    assert max(int(f[0]) for f in frames) <= 1514, "every frame fits the underlay MTU"
    # RFC 7348: 0 (a tunnel super-frame's segments, single frames) or a correct checksum (the
    # segments of a UDP GSO datagram of small frames, which the kernel fills in).
    wrong = [f for f in frames if f[1] not in ("0x0000", "0x0", "0") and f[2] != "1"]
    assert not wrong, f"UDP checksums neither 0 nor right: {wrong[:5]}"
    bad = [f for f in frames if f[3] != "1"]
    assert not bad, f"inner TCP checksums the kernel should have completed: {bad[:5]}"


@pytest.mark.parametrize("client,server,server_ip", [(T1, KVTEP, KVTEP_IP), (KVTEP, T1, IP[T1])],
                         ids=["t1_to_kernel", "kernel_to_t1"])
def test_a_linux_vtep_exchanges_tcp_with_a_tap_uplink(client, server, server_ip, tmp_path):
    # The kernel's VXLAN device takes a tunnel super-frame whole, as from its own kind.
    assert ping(client, server_ip, count=2)
    send_blob(client, server, server_ip, tmp_path, size=8 << 20)
    with iperf3_server(server):
        assert iperf3_gbps(client, server_ip, seconds=2) > 0


def test_rdma_between_hosts_arrives_intact():
    h1_before = port("h1", "uplink")
    moved = integrity_pair(T2, T1, IP[T2], 19631, seed=13)
    h1_after = port("h1", "uplink")
    sent = average(h1_after, h1_before, "tx_packets", "tx_bytes")
    print(f"\nh1 uplink: {sent:.0f} B per message; {moved} bytes moved")
    assert sent > 2 * 1514, "RoCE packets should leave joined in UDP GSO super-datagrams"


# A rogue host on the fabric: a tap of its own on br0 in jk-fabric, through which it writes a
# VXLAN super-frame "from h1's t1" to h2's t2 with a segment size of its choosing.
_ROGUE = r"""
import fcntl, os, socket, struct, subprocess, sys, time
gso_size = int(sys.argv[1])
dst_mac, t2_mac, t1_mac = (bytes.fromhex(a.replace(":", "")) for a in sys.argv[2:5])
fd = os.open("/dev/net/tun", os.O_RDWR)
fcntl.ioctl(fd, 0x400454ca, struct.pack("16sH", b"rogue0", 0x0002 | 0x1000 | 0x4000))
fcntl.ioctl(fd, 0x400454d8, struct.pack("i", 24))           # TUNSETVNETHDRSZ
fcntl.ioctl(fd, 0x400454d0, 0x01 | 0x02 | 0x20 | 0x40 | 0x80)  # TUNSETOFFLOAD
subprocess.run(["ip", "link", "set", "rogue0", "master", "br0", "up"], check=True)
time.sleep(0.5)

def csum(b):
    b += b"\0" * (len(b) % 2)
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s

def ipv4(src, dst, proto, payload_len, ident):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + payload_len, ident, 0x4000, 64, proto, 0,
                    socket.inet_aton(src), socket.inet_aton(dst))
    return h[:10] + struct.pack("!H", 0xFFFF - csum(h)) + h[12:]

payload = bytes(i & 0xFF for i in range(20000))
inner_ip = ipv4("198.19.1.1", "198.19.1.2", 6, 20 + len(payload), 7)
pseudo = csum(socket.inet_aton("198.19.1.1") + socket.inet_aton("198.19.1.2") +
              struct.pack("!BBH", 0, 6, 20 + len(payload)))
tcp = struct.pack("!HHIIBBHHH", 40000, 5999, 1, 0, 5 << 4, 0x02, 65535, pseudo, 0)
inner = t2_mac + t1_mac + b"\x08\x00" + inner_ip + tcp + payload
vxlan = struct.pack("!II", 0x08000000, 100 << 8) + inner
udp = struct.pack("!HHHH", 50000, 4789, 8 + len(vxlan), 0) + vxlan
frame = (dst_mac + bytes.fromhex("0200c6120077") + b"\x08\x00" +
         ipv4("198.18.0.1", "198.18.0.2", 17, len(udp), 9) + udp)
header = struct.pack("<BBHHHHH", 1, 0x21, 104, gso_size, 84, 16, 0) + bytes(8) + \
         struct.pack("<HH", 34, 64)
os.write(fd, header + frame)
time.sleep(0.5)
"""


def rogue_super_frame(gso_size):
    ns(FABRIC, PYTHON, "-c", _ROGUE, str(gso_size), "02:00:c6:12:00:02", MAC[T2], MAC[T1],
       timeout=20)


def test_a_super_frame_that_lies_about_its_segment_size_is_a_counted_drop():
    # t2's vnet face counts the super-frames it is handed (ARP replies and the like are not).
    def to_t2():
        return port("h2", "t2")["tx_superframes"]

    # Control first: the same frame with a segment size that fits t2's MTU is delivered.
    before = to_t2()
    rogue_super_frame(1400)
    wait_until(lambda: to_t2() > before, 5,
               "the well-formed rogue super-frame reaching t2 (the probe's control)")
    # 8000-byte segments on a 1450-byte overlay: no tenant may be handed that.
    dropped, before = drops_matching("h2", "uplink_bad_superframe"), to_t2()
    rogue_super_frame(8000)
    wait_until(lambda: drops_matching("h2", "uplink_bad_superframe") > dropped, 5,
               "h2 counting the lying super-frame")
    assert to_t2() == before, "nothing of it reached t2"
