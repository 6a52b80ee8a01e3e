"""RoCE v2 over IPv6 for dual-stack tenants (docs/roce-wire.md): every vNIC with an IPv6
address has it as GID 1 next to its IPv4-mapped GID 0, and unmodified programs use it.
perftest's ib_write_bw -x 1 across hosts and on one host; the project's rdma_integrity
(--gid-index 1) on a clean and on a lossy, reordering fabric; rdma_cm by IPv6 address (rping
-a 2001:2::1:2, udaddy, ucmatose); a UCX ping-pong on GID 1; tshark and scapy on the fabric see
RoCE v2 inside VXLAN behind an inner IPv6 header whose ICRC is right. The `rdma` rules judge an
IPv6 peer by its IPv6 address alone: a rule for the peer's IPv6 address admits an IPv6
connection that no IPv4 rule would, and a rule for its IPv4 address admits no IPv6 connection.

The tenants' IPv6 addresses are the test bed's (docs/testbed.md): blue t1 2001:2::1:1,
t2 2001:2::1:2, t5 2001:2::1:3.
"""

import json
import os
import re
import signal
import struct
import subprocess
import time
import zlib

import pytest

from conftest import (IP, IP6, T1, T2, T5, ns_bg, run, stop, under_jakiro_run,
                      uplinks_cut_by_the_kernel, wait_until)
import test_rdma_rc as rc
import test_rdmacm as cm
from test_secgroups import policy  # noqa: F401 (a fixture)

pytestmark = pytest.mark.usefixtures("testbed")

GID_IPV6 = 1  # the GID index of a vNIC's IPv6 address


def gid_text(ip6):
    """The GID as ibv_devinfo -v and perftest print it: the address's 16 bytes, 2 at a time."""
    import ipaddress
    b = ipaddress.IPv6Address(ip6).packed
    return ":".join(f"{b[i]:02x}{b[i + 1]:02x}" for i in range(0, 16, 2))


def perftest_gid(ip6):
    """The GID as perftest prints it: each byte in decimal ("32:01:00:02:..." for 2001:2::)."""
    import ipaddress
    return ":".join(f"{b:02d}" for b in ipaddress.IPv6Address(ip6).packed)


def test_each_vnic_shows_its_ipv6_address_as_roce_v2_gid_1():
    for tenant in (T1, T2, T5):
        r = rc.client(tenant, ["ibv_devinfo", "-v"], timeout=30)
        assert r.returncode == 0, r.stderr
        assert "GID[  0]:" in r.stdout and "::ffff:" + IP[tenant] in r.stdout.replace(
            "0000:0000:0000:0000:0000:ffff:", "::ffff:"), r.stdout
        gid1 = [line for line in r.stdout.splitlines() if "GID[  1]:" in line]
        assert gid1, f"no GID 1 on {tenant}: {r.stdout}"
        assert gid_text(IP6[tenant]) in gid1[0] or IP6[tenant] in gid1[0], gid1[0]
        assert "RoCE v2" in gid1[0], gid1[0]


@pytest.mark.parametrize("placement", rc.PLACEMENTS)
def test_ib_write_bw_over_the_ipv6_gid(placement, tmp_path):
    srv_tenant, cli_tenant = rc.PLACEMENTS[placement]
    port = next(rc._ports)
    tool = ["ib_write_bw", "-x", GID_IPV6, "-F", "-s", 65536, "-n", 500, "-p", port]
    cli, srv_out = rc.run_pair(placement, [*tool, "-d", "jakiro_" + rc.VNIC[srv_tenant]],
                               [*tool, "-d", "jakiro_" + rc.VNIC[cli_tenant], IP[srv_tenant]],
                               port, tmp_path)
    # perftest prints both ends' GIDs: each the other's IPv6 address, not an IPv4-mapped one.
    assert perftest_gid(IP6[cli_tenant]) in cli.stdout, cli.stdout
    assert perftest_gid(IP6[srv_tenant]) in cli.stdout, cli.stdout
    assert "65536      500" in cli.stdout, cli.stdout


@pytest.fixture(scope="module")
def ipv6_capture(tmp_path_factory):
    """A pcap of br0 while t1 runs a short ib_write_bw -x 1 to t2."""
    d = tmp_path_factory.mktemp("roce6")
    pcap = d / "fabric.pcap"
    err = open(d / "tshark.err", "w+")
    cmd = ["tshark", "-n", "-i", "br0", "-f", "udp port 4789", "-a", "duration:60",
           "-w", str(pcap)]
    with uplinks_cut_by_the_kernel(), ns_bg(rc.FABRIC, *cmd, stderr=err) as tshark:
        wait_until(lambda: "Capturing on" in (d / "tshark.err").read_text(), 10,
                   "tshark to start")
        port = next(rc._ports)
        tool = ["ib_write_bw", "-x", GID_IPV6, "-F", "-s", 65536, "-n", 20, "-p", port]
        rc.run_pair("cross_host", [*tool, "-d", "jakiro_t2"],
                    [*tool, "-d", "jakiro_t1", IP[T2]], port, d)
        time.sleep(0.5)
        os.killpg(tshark.pid, signal.SIGINT)
        wait_until(lambda: tshark.poll() is not None, 10, "tshark to finish")
    assert pcap.exists() and pcap.stat().st_size > 0, (d / "tshark.err").read_text()
    return pcap


FIELDS = ["vxlan.vni", "ipv6.src", "ipv6.dst", "ipv6.nxt", "udp.dstport",
          "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.reth.dmalen"]


def test_tshark_decodes_roce_v2_behind_an_inner_ipv6_header(ipv6_capture):
    cmd = ["tshark", "-n", "-r", str(ipv6_capture), "-Y", "infiniband && ipv6", "-T", "fields",
           "-E", "separator=\t", "-E", "aggregator=,"]
    for f in FIELDS:
        cmd += ["-e", f]
    out = run(*cmd, timeout=60).stdout
    rows = [dict(zip(FIELDS, line.split("\t"))) for line in out.splitlines()]
    print(f"\n{len(rows)} RoCE v2 packets over IPv6 decoded")
    assert rows, "tshark decoded no InfiniBand packet behind an inner IPv6 header"
    opcodes = set()
    for r in rows:
        assert r["vxlan.vni"] == "100"
        assert {r["ipv6.src"], r["ipv6.dst"]} == {IP6[T1], IP6[T2]}, r
        assert r["ipv6.nxt"] == "17", r  # UDP, no extension headers
        assert r["udp.dstport"].split(",")[-1] == "4791"
        opcodes.add(int(r["infiniband.bth.opcode"], 0))
    assert {rc.WRITE_FIRST, rc.WRITE_MIDDLE, rc.WRITE_LAST, rc.ACK} <= opcodes, opcodes
    assert any(r["infiniband.reth.dmalen"] == "65536" for r in rows)


def icrc_by_hand(ip_bytes):
    """docs/roce-wire.md's ICRC over IPv6: CRC-32 over 8 bytes of 0xFF and the inner IPv6
    packet up to the ICRC, with traffic class, flow label, hop limit, UDP checksum and BTH
    byte 4 set to ones."""
    body = bytearray(ip_bytes[:-4])
    body[0] |= 0x0F
    body[1:4] = b"\xff\xff\xff"
    body[7] = 0xFF
    body[46:48] = b"\xff\xff"
    body[52] = 0xFF
    return zlib.crc32(b"\xff" * 8 + bytes(body)) & 0xFFFFFFFF


def icrc_by_fields(ip_bytes):
    """The same masking field by field on scapy's dissection (scapy's RoCE layer computes the
    ICRC over IPv4 only), as Linux's rxe_icrc.c does it: an independent second path."""
    from scapy.all import raw
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6

    masked = IPv6(ip_bytes[:-4])
    masked.tc, masked.fl, masked.hlim = 0xFF, 0xFFFFF, 0xFF
    masked[UDP].chksum = 0xFFFF
    masked[BTH].fecn, masked[BTH].becn, masked[BTH].resv6 = 1, 1, 0x3F
    return zlib.crc32(b"\xff" * 8 + raw(masked)[:len(ip_bytes) - 4]) & 0xFFFFFFFF


def test_captured_ipv6_icrcs_match_the_spec_computed_two_ways(ipv6_capture):
    from scapy.all import raw, rdpcap
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.vxlan import VXLAN

    checked = {}
    for frame in rdpcap(str(ipv6_capture)):
        if VXLAN not in frame:
            continue
        inner = frame[VXLAN].payload
        if IPv6 not in inner or UDP not in inner[IPv6] or inner[IPv6][UDP].dport != 4791:
            continue
        ip_bytes = raw(inner[IPv6])[:40 + inner[IPv6].plen]
        stored = struct.unpack("<I", ip_bytes[-4:])[0]
        opcode = ip_bytes[48]
        if checked.get(opcode, 0) >= 3:
            continue
        assert BTH in IPv6(ip_bytes), f"scapy did not dissect BTH: {IPv6(ip_bytes).summary()}"
        assert stored == icrc_by_fields(ip_bytes), f"opcode {opcode:#04x}: {stored:#010x}"
        assert stored == icrc_by_hand(ip_bytes), f"opcode {opcode:#04x}: hand-made ICRC differs"
        checked[opcode] = checked.get(opcode, 0) + 1
    print(f"\nICRC verified per opcode: {checked}")
    assert rc.ACK in checked and (rc.WRITE_FIRST in checked or rc.WRITE_ONLY in checked), checked


@pytest.mark.parametrize("placement", rc.PLACEMENTS)
def test_integrity_over_ipv6_verifies_every_byte(placement, tmp_path):
    rc.run_integrity(placement, tmp_path, ops=500, seed=61, extra=["--gid-index", GID_IPV6])


def test_integrity_over_ipv6_survives_loss_and_reordering(tmp_path):
    impairment = {}
    watcher = rc.QpWatcher()
    with rc.lossy_fabric(tmp_path, impairment), watcher:
        rc.run_integrity("cross_host", tmp_path, ops=200, seed=67, timeout=150,
                         extra=["--max-size", 65536, "--gid-index", GID_IPV6])
    stats = impairment.get(rc.FABRIC_LINK)
    print(f"impairment: {stats}")
    assert isinstance(stats, dict) and stats["dropped"] > 0, f"nothing was impaired: {stats}"
    assert watcher.peak, f"jakiroctl qps never showed a QP ({watcher.error})"
    assert watcher.total("retransmitted") > 0, "loss and reordering, yet no QP retransmitted"


@pytest.mark.parametrize("placement", cm.PLACEMENTS)
def test_rping_by_ipv6_address_validates_its_pings(placement, tmp_path):
    port = next(cm._ports)
    ip6 = IP6[cm.PLACEMENTS[placement][0]]
    args = ["-a", ip6, "-p", port, "-C", 100, "-S", 4000, "-V", "-v"]
    cli, srv = cm.run_pair(placement, ["rping", "-s", *args], ["rping", "-c", *args], tmp_path)
    assert cli.count("ping data: rdma-ping-") == 100, cli[-2000:]
    assert "data mismatch" not in cli
    assert srv.count("server ping data: rdma-ping-") == 100, srv[-2000:]


@pytest.mark.parametrize("placement", cm.PLACEMENTS)
def test_udaddy_resolves_an_ipv6_peer_by_sidr_and_exchanges_datagrams(placement, tmp_path):
    srv_ip6 = IP6[cm.PLACEMENTS[placement][0]]
    cli, srv = cm.run_pair(placement, ["udaddy", "-b", srv_ip6, "-c", 2, "-C", 20],
                           ["udaddy", "-s", srv_ip6, "-c", 2, "-C", 20], tmp_path)
    assert "data transfers complete" in cli and "return status 0" in cli, cli
    assert "data transfers complete" in srv, srv


def test_ucmatose_connects_to_an_ipv6_address(tmp_path):
    port = next(cm._ports)
    srv_ip6 = IP6[T2]
    cli, srv = cm.run_pair("cross_host",
                           ["ucmatose", "-b", srv_ip6, "-p", port, "-c", 2, "-C", 20],
                           ["ucmatose", "-s", srv_ip6, "-p", port, "-c", 2, "-C", 20], tmp_path)
    assert "data transfers complete" in cli and "return status 0" in cli, cli
    assert "return status 0" in srv, srv


class RemoteWatcher(rc.QpWatcher):
    """QpWatcher that also keeps the peer address (`remote`) of every QP it saw."""

    def __init__(self):
        super().__init__()
        self.remotes = set()

    def _run(self):
        while not self._stop.is_set():
            for host in self.hosts:
                r = self.query(host)
                if r.returncode == 0:
                    self.remotes |= {q.get("remote") for q in json.loads(r.stdout).get("qps", [])}
            self._stop.wait(self.interval)


def test_ucx_tag_ping_pong_over_the_ipv6_gid(tmp_path):
    """UCX picks its GID by UCX_IB_GID_INDEX: with 1 its rc_verbs QPs connect by IPv6, which
    jakiroctl qps shows as their peers' addresses."""
    port = next(cm._ports)
    env = dict(rc.shim_env(), UCX_TLS="rc_v", UCX_IB_GID_INDEX=str(GID_IPV6))
    log = tmp_path / "server.log"
    watcher = RemoteWatcher()
    with watcher, open(log, "w") as o:
        srv = subprocess.Popen(under_jakiro_run(T2, ["ucx_perftest", "-p", port]), stdout=o,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                               start_new_session=True)
        try:
            time.sleep(2.0)
            cli = subprocess.run(under_jakiro_run(T1, ["ucx_perftest", IP[T2], "-p", port, "-t",
                                                       "tag_lat", "-n", 20000]),
                                 capture_output=True, text=True, timeout=60, env=env)
            status = srv.wait(timeout=20)
        finally:
            stop(srv)
    out = cli.stdout + cli.stderr
    print(f"\n{out[-700:]}\nQP peers seen: {watcher.remotes}")
    assert cli.returncode == 0 and status == 0, out[-3000:] + log.read_text()[-2000:]
    assert re.search(r"^Final:\s+20000\s", out, re.M), out[-3000:]
    assert {IP6[T1], IP6[T2]} <= watcher.remotes, watcher.remotes


def test_mpi_pingpong_over_the_ipv6_gid_verifies_every_byte(tmp_path):
    """Open MPI (pml ucx) between t1 (h1) and t2 (h2) with UCX on GID 1: the ranks' rc_verbs QPs
    connect by IPv6 (jakiroctl qps shows the peers' IPv6 addresses), and the ping-pong (1 B ..
    4 MiB) compares every byte. The launcher reaches the ranks by their IPv4 addresses."""
    import test_ucx_mpi as mpi

    program = tmp_path / "pingpong.openmpi"
    run("mpicc.openmpi", "-O2", "-o", str(program), str(mpi.PINGPONG_C), timeout=60)
    agent = mpi.rsh_agent(tmp_path, (T1, T2))
    cmd = mpi.MPI_LAUNCH["openmpi"]((IP[T1], IP[T2]), agent) + [
        "-x", f"UCX_IB_GID_INDEX={GID_IPV6}", program]
    watcher = RemoteWatcher()
    with watcher:
        r = subprocess.run(under_jakiro_run(T1, cmd), capture_output=True, text=True,
                           timeout=mpi.TIMEOUT_S, env=rc.shim_env(), stdin=subprocess.DEVNULL)
    out = r.stdout + r.stderr
    print(f"\n{out[-600:]}\nQP peers seen: {watcher.remotes}")
    assert r.returncode == 0, out[-3000:]
    assert "mpi pingpong: 12 sizes, 0 bad bytes" in out, out[-3000:]
    assert {IP6[T1], IP6[T2]} <= watcher.remotes, watcher.remotes


# ---------------------------------------------------------------- rdma rules, per address family

# ibv_rc_pingpong exchanges its QP numbers over TCP on IPv4, which every case allows; RDMA only as
# the case's rule says. t1 and t2 carry the same group, so each end's ingress must admit the
# other (and egress is the group's implicit all, both families).
OOB = {"proto": "tcp", "ports": "1-65535", "from": "198.19.0.0/16"}
RDMA_FROM = {"ipv6": "2001:2::/64", "ipv4": "198.19.1.0/24"}


def rc_pingpong(gid_index, tmp_path):
    """ibv_rc_pingpong t1 -> t2 over GID `gid_index` (0: IPv4, 1: IPv6): (connected, output)."""
    port = next(rc._ports)
    args = ["ibv_rc_pingpong", "-g", gid_index, "-n", 5, "-p", port]
    with rc.server(T2, args, port, tmp_path) as srv:
        cli = rc.client(T1, [*args, IP[T2]], timeout=30)
        try:
            srv.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        out = f"{cli.stdout}{cli.stderr}{srv.output()}"
    return cli.returncode == 0 and srv.proc.returncode == 0, out


@pytest.mark.parametrize("rule", ["ipv6", "ipv4"],
                         ids=["ipv6_rule_admits_ipv6_only", "ipv4_rule_admits_ipv4_only"])
def test_an_ipv6_rdma_peer_is_judged_by_its_ipv6_address(policy, rule, tmp_path):  # noqa: F811
    name = f"rdma-{rule}"
    policy([{"name": name, "vpc": "blue",
             "ingress": [OOB, {"proto": "rdma", "from": RDMA_FROM[rule]}]}],
           {"t1": [name], "t2": [name]})
    over_ipv6, out6 = rc_pingpong(GID_IPV6, tmp_path)
    over_ipv4, out4 = rc_pingpong(0, tmp_path)
    print(f"\nrule rdma from {RDMA_FROM[rule]}: GID 1 (IPv6) "
          f"{'connected' if over_ipv6 else 'refused'}, GID 0 (IPv4) "
          f"{'connected' if over_ipv4 else 'refused'}")
    refused = "Failed to modify QP to RTR"  # EACCES from the admission, not some other failure
    if rule == "ipv6":
        assert over_ipv6, f"the IPv6 rule did not admit the IPv6 peer: {out6[-2500:]}"
        # The control: the peer's IPv4 address is not allowed, so nothing admitted it as such.
        assert not over_ipv4 and refused in out4, f"IPv4 connected without a rule: {out4[-2500:]}"
    else:
        assert not over_ipv6 and refused in out6, \
            f"the IPv4 rule admitted the IPv6 peer: {out6[-2500:]}"
        assert over_ipv4, f"the IPv4 rule did not admit the IPv4 peer (control): {out4[-2500:]}"
