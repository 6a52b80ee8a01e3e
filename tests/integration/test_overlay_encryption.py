"""The sealed overlay (tools/testbed up --encrypt): frames between hosts are ESP-in-UDP under
per-host-pair keys. A fabric attacker in jk-fabric, the underlay bridge's namespace, reads no
tenant byte and gets nothing to a tenant: a replayed frame, a flipped bit, a forged plaintext
frame in a host's name and a frame sealed under another key are counted drops; the same
traffic unmodified arrives. TCP and RDMA cross sealed, and a rekey mid-stream loses nothing."""

import base64
import json
import os
import re
import signal
import struct
import subprocess

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from scapy.layers.inet import ICMP, UDP, IP as IPv4
from scapy.layers.l2 import Ether
from scapy.layers.vxlan import VXLAN
from scapy.packet import Raw
from scapy.utils import rdpcap

from conftest import (IP, JAKIRO_RUN, MAC, PYTHON, RUN_DIR, T1, T2, integrity_pair, iperf3_server,
                      jakiroctl, ns, ns_bg, ping, send_frames, shim_env, stats, underlay_mac,
                      verbs_pair, wait_listening, wait_until)

# A small byte budget per epoch, so a few seconds of traffic rekeys several times.
os.environ["JAKIRO_TESTBED_REKEY_BYTES"] = "2MiB"
TESTBED_ARGS = ["--encrypt"]
pytestmark = pytest.mark.usefixtures("testbed")

H1_IP, H2_IP = "198.18.0.1", "198.18.0.2"
MARKER = b"JAKIRO-SEALED-MARKER-7f3a"
INJECT_MAC = "02:00:c6:12:00:fe"  # not a host's: the bridge must not learn a host here


def overlay_peer(host, peer_ip):
    status = json.loads(jakiroctl(host, "status", "--json").stdout)
    return next(p for p in status["overlay"]["peers"] if p["host"] == peer_ip)


def drop_count(host, reason):
    return stats(host)["drops"].get(reason, 0)


def to_tenant_packets(host, vnic):
    return stats(host)["vnics"][vnic]["to_tenant_packets"]


@pytest.fixture(scope="module")
def wire(tmp_path_factory):
    """A pcap of br0 while t1 pings t2 and sends MARKER over TCP, and the frames in it."""
    d = tmp_path_factory.mktemp("wire")
    pcap = d / "br0.pcap"
    with ns_bg("jk-fabric", "tcpdump", "-U", "-n", "-i", "br0", "-w", str(pcap), "udp") as dump:
        wait_until(lambda: pcap.exists() and pcap.stat().st_size > 0, 10, "tcpdump to start")
        assert ping(T1, IP[T2], count=3)
        with ns_bg(T2, "nc", "-l", "-p", "7000", "-q", "1") as server:
            wait_until(lambda: ns(T2, "ss", "-Hltn", "sport = :7000").stdout.strip(), 5,
                       "nc to listen")
            ns(T1, "sh", "-c", f"printf '{MARKER.decode() * 20}' | nc -q 1 {IP[T2]} 7000",
               timeout=15)
            wait_until(lambda: server.poll() is not None, 10, "nc to finish")
        os.kill(dump.pid, signal.SIGINT)
        wait_until(lambda: dump.poll() is not None, 10, "tcpdump to finish")
    return pcap, rdpcap(str(pcap))


def test_tenants_ping_and_talk_tcp_across_sealed_hosts(wire):
    peer = overlay_peer("h1", H2_IP)
    assert peer["sealed"] and peer["encryption"] == "required"
    assert peer["frames_sealed"] > 0 and overlay_peer("h2", H1_IP)["frames_opened"] > 0


def test_the_fabric_sees_esp_only_and_no_tenant_byte(wire):
    pcap, frames = wire
    assert MARKER not in pcap.read_bytes(), "a tenant's bytes crossed the fabric in the clear"
    between_hosts = [f for f in frames
                     if IPv4 in f and {f[IPv4].src, f[IPv4].dst} == {H1_IP, H2_IP}]
    assert between_hosts, "nothing captured between h1 and h2"
    assert all(f[UDP].dport == 4500 for f in between_hosts), "a frame left as plain VXLAN"
    # tshark labels it without preferences: UDP-encapsulated ESP.
    out = ns("jk-fabric", "tshark", "-n", "-r", str(pcap), "-Y", "esp", "-T", "fields",
             "-e", "esp.spi", timeout=30).stdout.split()
    assert len(out) == len(between_hosts)


def sealed_from(frames, src, dst):
    return [f for f in frames if IPv4 in f and f[IPv4].src == src and f[IPv4].dst == dst
            and UDP in f and f[UDP].dport == 4500]


def blue_icmp_t1_to_t2():
    return (VXLAN(flags=0x08, vni=100) / Ether(src=MAC[T1], dst=MAC[T2])
            / IPv4(src=IP[T1], dst=IP[T2]) / ICMP())


def sealed_for_h2(private, sender_ip, seq):
    """A frame as h1 -> h2 (outer addresses, the SPI h2 expects from h1, sequence number `seq`)
    carrying blue t1 -> t2 ICMP, sealed under the pair key of `private` (an X25519 private
    key) at `sender_ip` with h2, derived as overlay/sealing/pair_keys.hh says."""
    h2_public = base64.b64decode(
        json.loads(jakiroctl("h2", "status", "--json").stdout)["overlay"]["public_key"])
    spi = overlay_peer("h2", H1_IP)["rx_spi"]
    public = private.public_key().public_bytes(serialization.Encoding.Raw,
                                               serialization.PublicFormat.Raw)
    shared = private.exchange(X25519PublicKey.from_public_bytes(h2_public))
    info = (public + h2_public + bytes(map(int, sender_ip.split(".")))
            + bytes(map(int, H2_IP.split("."))) + struct.pack("!I", spi))
    okm = HKDF(algorithm=hashes.SHA256(), length=36, salt=b"jakiro overlay v1",
               info=info).derive(shared)
    header = struct.pack("!IIQ", spi, seq & 0xFFFFFFFF, seq)
    plain = bytes(blue_icmp_t1_to_t2())
    pad = (4 - (len(plain) + 2) % 4) % 4
    plain += bytes(range(1, pad + 1)) + bytes([pad, 253])
    aad = header + bytes(map(int, H1_IP.split("."))) + bytes(map(int, H2_IP.split(".")))
    sealed = AESGCM(okm[:32]).encrypt(okm[32:] + header[8:], plain, aad)
    return (Ether() / IPv4(src=H1_IP, dst=H2_IP) / UDP(sport=49152, dport=4500)
            / Raw(header + sealed))


def h1_private_key():
    return X25519PrivateKey.from_private_bytes(
        base64.b64decode((RUN_DIR / "h1.key").read_text().strip()))


def inject_at_h2(frame):
    """Sends `frame` (outer headers as captured) into the fabric towards h2."""
    f = frame.copy()
    f[Ether].src = INJECT_MAC
    f[Ether].dst = underlay_mac(2)
    send_frames("jk-fabric", "br0", [f])


@pytest.mark.parametrize("attack,reason", [
    ("replayed", "replayed"),
    ("bit_flipped", "auth_failed"),
    ("other_pairs_key", "auth_failed"),
    ("forged_plaintext", "plaintext_refused"),
])
def test_a_fabric_attack_is_a_counted_drop_that_reaches_no_tenant(wire, attack, reason):
    _, frames = wire
    to_h2 = sealed_from(frames, H1_IP, H2_IP)
    assert to_h2
    if attack == "replayed":
        forged = to_h2[0]
    elif attack == "bit_flipped":
        # One bit of the 64-bit sequence number (the IV): a number h2 has not seen yet, so
        # the frame passes the replay window and must fail authentication.
        raw = bytearray(bytes(to_h2[-1]))
        raw[14 + 20 + 8 + 8] ^= 0x40
        forged = Ether(bytes(raw))
    elif attack == "other_pairs_key":
        # What a compromised third host (198.18.0.3) can make in h1's name: its own pair key.
        forged = sealed_for_h2(X25519PrivateKey.generate(), "198.18.0.3", 1 << 40)
    else:
        # Plain VXLAN in h1's name with blue's VNI: what reached t2 before the overlay was sealed.
        forged = (Ether() / IPv4(src=H1_IP, dst=H2_IP) / UDP(sport=49152, dport=4789)
                  / blue_icmp_t1_to_t2())
    before_drop = drop_count("h2", reason)
    before_t2 = to_tenant_packets("h2", "t2")
    inject_at_h2(forged)
    wait_until(lambda: drop_count("h2", reason) > before_drop, 5, f"h2 to count {reason}")
    assert to_tenant_packets("h2", "t2") == before_t2, "the forged frame reached t2"
    # Control: the overlay still carries the same traffic, unmodified.
    assert ping(T1, IP[T2], count=2)


def losses():
    return {h: (drop_count(h, "auth_failed"), drop_count(h, "replayed")) for h in ("h1", "h2")}


def test_rdma_crosses_sealed_and_leaves_no_plain_roce_on_the_wire(tmp_path):
    before = losses()
    pcap = tmp_path / "rdma.pcap"
    with ns_bg("jk-fabric", "tcpdump", "-U", "-n", "-i", "br0", "-w", str(pcap), "udp") as dump:
        wait_until(lambda: pcap.exists() and pcap.stat().st_size > 0, 10, "tcpdump to start")
        moved = integrity_pair(T2, T1, IP[T2], 18515, ops=200)
        os.kill(dump.pid, signal.SIGINT)
        wait_until(lambda: dump.poll() is not None, 10, "tcpdump to finish")
    assert moved > 0
    plain = ns("jk-fabric", "tshark", "-n", "-r", str(pcap), "-Y", "vxlan || infiniband",
               "-T", "fields", "-e", "frame.number", timeout=30).stdout.split()
    assert not plain, f"{len(plain)} frames of plain VXLAN or RoCE on the fabric"
    assert losses() == before, "sealed RoCE frames were dropped"


def test_the_fabric_sees_no_rdma_payload_byte(tmp_path):
    """ibv_rc_pingpong's buffers are 0x7b ('{') but for one byte per page: 4 KiB messages put
    runs of thousands of them in every RoCE payload. None of it may cross the fabric."""
    pcap = tmp_path / "rdma_payload.pcap"
    with ns_bg("jk-fabric", "tcpdump", "-U", "-n", "-i", "br0", "-w", str(pcap), "udp") as dump:
        wait_until(lambda: pcap.exists() and pcap.stat().st_size > 0, 10, "tcpdump to start")
        cmd = ["ibv_rc_pingpong", "-g", "0", "-s", "4096", "-n", "50", "-p", "18520"]
        verbs_pair(T2, T1, cmd, cmd + [IP[T2]], 18520)
        os.kill(dump.pid, signal.SIGINT)
        wait_until(lambda: dump.poll() is not None, 10, "tcpdump to finish")
    between_hosts = [f for f in rdpcap(str(pcap))
                     if IPv4 in f and {f[IPv4].src, f[IPv4].dst} == {H1_IP, H2_IP}]
    assert len(between_hosts) >= 50, "the ping-pong should have crossed the fabric"
    assert b"{" * 256 not in pcap.read_bytes(), "an RDMA payload crossed the fabric in the clear"


def test_a_rekey_during_a_stream_loses_nothing():
    before = losses()
    rekeys = overlay_peer("h1", H2_IP)["tx_rekeys"]
    with iperf3_server(T2):
        out = json.loads(ns(T1, "iperf3", "-c", IP[T2], "-t", "3", "-b", "40M", "-J",
                            timeout=40).stdout)
    assert out["end"]["sum_received"]["bytes"] > 10_000_000
    assert overlay_peer("h1", H2_IP)["tx_rekeys"] - rekeys >= 2, "the stream did not rekey"
    after = losses()
    assert after == before, f"frames lost at a rekey: {before} -> {after}"
    assert overlay_peer("h2", H1_IP)["rx_spi"] == overlay_peer("h1", H2_IP)["tx_spi"]


def uplink(host):
    return stats(host)["ports"]["uplink"]


def test_sealed_tcp_and_rdma_cross_in_udp_gso_super_datagrams():
    """Sealed frames of one flow leave as one UDP GSO super-datagram (each segment its own ESP
    frame), not one tap write each: h1 counts the datagrams it sent, h2 the ones it cut."""
    before = losses()
    h1_before, h2_before = uplink("h1"), uplink("h2")
    with iperf3_server(T2):
        ns(T1, "iperf3", "-c", IP[T2], "-n", "30M", timeout=60)
    moved = integrity_pair(T2, T1, IP[T2], 18517, ops=200)
    h1_after, h2_after = uplink("h1"), uplink("h2")
    sent = h1_after["tx_superframes"] - h1_before["tx_superframes"]
    received = h2_after["rx_superframes"] - h2_before["rx_superframes"]
    per_message = ((h1_after["tx_bytes"] - h1_before["tx_bytes"])
                   / max(1, h1_after["tx_packets"] - h1_before["tx_packets"]))
    print(f"\nh1 uplink: {sent} super-datagrams, {per_message:.0f} B per message; "
          f"h2 cut {received}; RDMA moved {moved} bytes")
    # 30 MB is ~460 tenant super-frames of 64 KB; each leaves as at least one datagram.
    assert sent > 30e6 / 65536 * 0.5, "h1 should send sealed super-datagrams"
    assert received > sent * 0.9, "h2 should take them whole and cut them itself"
    assert per_message > 4 * 1514, "h1 should send several sealed frames per message"
    assert losses() == before, "a frame of a super-datagram failed to open"


def test_a_rekey_during_20_s_of_rdma_and_tcp_loses_nothing():
    """ib_write_bw and an iperf3 stream side by side for 20 s while the 2 MiB budget moves
    the epoch on every 100 ms: both finish with all their data, no frame fails to open."""
    before = losses()
    epoch_before = overlay_peer("h1", H2_IP)["tx_spi"]
    bw = ["ib_write_bw", "-x", "0", "-F", "-s", "65536", "-p", "18610", "-D", "20",
          "--report_gbits"]
    env = shim_env()
    with iperf3_server(T2):
        server = subprocess.Popen(["ip", "netns", "exec", T2, str(JAKIRO_RUN), "--", *bw],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, start_new_session=True)
        try:
            wait_listening(T2, 18610, timeout=15)
            client = subprocess.Popen(
                ["ip", "netns", "exec", T1, str(JAKIRO_RUN), "--", *bw, IP[T2]], env=env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                start_new_session=True)
            try:
                tcp = json.loads(ns(T1, "iperf3", "-c", IP[T2], "-t", "20", "-J",
                                    timeout=60).stdout)
                rdma_out, _ = client.communicate(timeout=60)
            finally:
                if client.poll() is None:
                    os.killpg(client.pid, signal.SIGKILL)
                    client.wait()
            server_out, _ = server.communicate(timeout=30)
        finally:
            if server.poll() is None:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
    assert client.returncode == 0 and server.returncode == 0, (
        f"ib_write_bw broke:\n{rdma_out[-800:]}\n{server_out[-800:]}")
    # perftest's result row: bytes, iterations, peak and average Gbit/s, message rate.
    row = re.search(r"^\s*65536\s+(\d+)\s+[\d.]+\s+([\d.]+)", rdma_out, re.M)
    assert row and int(row.group(1)) > 0 and float(row.group(2)) > 0, rdma_out[-800:]
    end = tcp["end"]
    # What the sender wrote in 20 s arrived but for what was still in flight when the timer
    # stopped the count (a few socket buffers at most).
    assert end["sum_sent"]["bytes"] > 10_000_000
    assert end["sum_sent"]["bytes"] - end["sum_received"]["bytes"] < 8 << 20
    rekeys = overlay_peer("h1", H2_IP)["tx_spi"] - epoch_before
    print(f"\nRDMA {row.group(2)} Gbit/s, TCP {end['sum_received']['bits_per_second'] / 1e9:.2f}"
          f" Gbit/s, {rekeys} epochs in 20 s")
    assert rekeys >= 10, "the epoch should have moved on many times under load"
    assert losses() == before, "frames failed to open at a rekey"
    assert overlay_peer("h2", H1_IP)["rx_spi"] == overlay_peer("h1", H2_IP)["tx_spi"]


# Sends frame `argv[2]` (hex) out of `argv[1]` every 10 ms for `argv[3]` seconds, the 32-bit
# SPI at byte 42 one higher each time; prints how many it sent.
_SPI_FLOOD = ("import socket, struct, sys, time\n"
              "s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)\n"
              "s.bind((sys.argv[1], 0))\n"
              "f = bytearray.fromhex(sys.argv[2])\n"
              "spi = struct.unpack_from('!I', f, 42)[0]\n"
              "end, n = time.monotonic() + float(sys.argv[3]), 0\n"
              "while time.monotonic() < end:\n"
              "    struct.pack_into('!I', f, 42, spi + n)\n"
              "    s.send(f)\n"
              "    n += 1\n"
              "    time.sleep(0.01)\n"
              "print(n)\n")


def test_forged_future_spis_from_the_fabric_delay_no_rekey():
    """A fabric attacker sends frames in h1's name with a new far-future SPI every 10 ms, as
    often as h2 derives a key on sight of one, during a stream that rekeys every ~100 ms. Each
    forgery is an auth_failed drop, and nothing else is: h1's real rekeys open at once."""
    failed_before, replayed_before = losses()["h2"]
    spi = overlay_peer("h2", H1_IP)["rx_spi"] + 100_000
    forged = (Ether(src=INJECT_MAC, dst=underlay_mac(2)) / IPv4(src=H1_IP, dst=H2_IP)
              / UDP(sport=49152, dport=4500)
              / Raw(struct.pack("!IIQ", spi, 1, 1) + os.urandom(96)))
    epoch_before = overlay_peer("h2", H1_IP)["rx_spi"]
    with iperf3_server(T2):
        with ns_bg("jk-fabric", PYTHON, "-c", _SPI_FLOOD, "br0", bytes(forged).hex(), "6",
                   stdout=subprocess.PIPE, text=True) as flood:
            out = json.loads(ns(T1, "iperf3", "-c", IP[T2], "-t", "5", "-J", timeout=40).stdout)
            sent, _ = flood.communicate(timeout=20)
    forgeries = int(sent)
    failed = losses()["h2"][0] - failed_before
    epochs = overlay_peer("h2", H1_IP)["rx_spi"] - epoch_before
    print(f"\n{forgeries} forgeries, h2 auth_failed +{failed}, {epochs} epochs of h1 opened, "
          f"{out['end']['sum_received']['bits_per_second'] / 1e9:.2f} Gbit/s")
    assert epochs >= 5, "h1 should have rekeyed under the stream"
    assert failed >= forgeries * 0.9, "the forgeries should reach h2 and fail there"
    assert failed <= forgeries, f"{failed - forgeries} of h1's real frames failed to open"
    assert losses()["h2"][1] == replayed_before


def test_a_frame_sealed_under_the_pairs_own_key_reaches_the_tenant(wire):
    """The control of the forgery above: the same construction under h1's own key opens. Last
    in the module: its sequence number, far ahead, moves h2's window past h1's own."""
    before = to_tenant_packets("h2", "t2")
    inject_at_h2(sealed_for_h2(h1_private_key(), H1_IP, 1 << 41))
    wait_until(lambda: to_tenant_packets("h2", "t2") > before, 5, "t2 to get the frame")
