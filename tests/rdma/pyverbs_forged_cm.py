#!/usr/bin/python3
"""pyverbs_forged_cm: a hostile tenant aiming forged IB CM MADs at a peer's QP1
(docs/threat-model.md), through rdma-core's own Python bindings and nothing else.

    ip netns exec jk-h2-t2 tools/jakiro-run -- /usr/bin/python3 tests/rdma/pyverbs_forged_cm.py \\
        --receiver --port 7476
    ip netns exec jk-h1-t1 tools/jakiro-run -- /usr/bin/python3 tests/rdma/pyverbs_forged_cm.py \\
        --attack 198.19.1.2 --port 7476 --cm-port 7300 --as 198.19.1.5

The attacker opens its own vNIC's device and one UD QP. It first asks for the GSI Q_Key
0x80010000 (controlled: the high-order bit set) at INIT, which must be refused (EPERM, as
Linux refuses an unprivileged process), then takes an ordinary Q_Key. It builds a well-formed
CM REQ MAD (base version 1, class 0x07, class version 2, method Send, attribute 0x0010) for the
rdma_cm service RDMA_PS_TCP:<cm-port> at the peer, its RDMA-CM IP header naming the attacker
itself, and a second one naming `--as` (another vNIC, whose connection it would hijack), and
sends each several times to QP1 of the peer's vNIC, once with the GSI Q_Key in the work request
and once with its own. The engine puts the QP's own Q_Key in a WR whose Q_Key has the high bit
set (IBTA 10.2.5) and its own QPN in the DETH; the peer's QP1 takes only the GSI Q_Key from a
QP1, so none of them may reach the peer's CM agent (the integration test checks the peer's
counters and its listener).

The control, on the same path: the same bytes sent the same way (the GSI Q_Key in the WR) to
the receiver's UD QP, which uses the attacker's Q_Key, arrive intact there. So the datagrams do
cross the fabric; only QP1 refuses them.

Exit status: 0 when every check held, 1 on a failed check or verb, 2 on bad usage.
"""

import argparse
import json
import socket
import struct
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AH, GID, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

GSI_QKEY = 0x80010000
GSI_QPN = 1
QKEY = 0x4A4B0D02  # the tenants' own, any without the high bit
MAD_BYTES = 256
GRH_BYTES = 40
RDMA_PS_TCP = 0x0106
ATTEMPTS = 5  # per variant: a lossy fabric could eat one, not five
POLL_S = 10.0
TCP_S = 30.0


class Failed(Exception):
    pass


def check(role, cond, what):
    if not cond:
        raise Failed(what)
    print(f"pyverbs_forged_cm: {role}: ok: {what}", flush=True)


def forged_req(src_ip, dst_ip, cm_port, qpn, comm_id):
    """A CM REQ as a kernel rdma_cm sends it (IBTA 12.6.5, MAD header 13.4.3)."""
    mad = bytearray(MAD_BYTES)
    mad[0:4] = bytes([1, 0x07, 2, 0x03])  # base version, CM class, class version 2, Send
    struct.pack_into(">Q", mad, 8, 0x4A4B000000000000 | comm_id)  # transaction ID
    struct.pack_into(">H", mad, 16, 0x0010)  # REQ
    body = 24
    struct.pack_into(">I", mad, body + 0, comm_id)
    struct.pack_into(">Q", mad, body + 8, (RDMA_PS_TCP << 16) | cm_port)
    struct.pack_into(">I", mad, body + 28, 0)
    struct.pack_into(">I", mad, body + 32, (qpn << 8) | 4)  # QPN, responder resources
    mad[body + 39] = 4  # initiator depth
    mad[body + 43] = 16 << 3  # remote CM response timeout, RC
    struct.pack_into(">I", mad, body + 44, (0x123456 << 8) | (16 << 3) | 7)  # PSN, timeout, retry
    struct.pack_into(">H", mad, body + 48, 0xFFFF)  # P_Key
    mad[body + 50] = (3 << 4) | 7  # path MTU 1024, RNR retry 7
    mad[body + 51] = 15 << 4  # max CM retries
    struct.pack_into(">HH", mad, body + 52, 0xFFFF, 0xFFFF)  # permissive LIDs
    mad[body + 56:body + 72] = bytes(10) + b"\xff\xff" + socket.inet_aton(src_ip)
    mad[body + 72:body + 88] = bytes(10) + b"\xff\xff" + socket.inet_aton(dst_ip)
    mad[body + 93] = 64  # hop limit
    mad[body + 95] = 14 << 3  # local ACK timeout
    private = body + 140  # the RDMA-CM IP header: version 0, IPv4, source port, addresses
    mad[private + 1] = 0x40
    struct.pack_into(">H", mad, private + 2, 40000 + comm_id % 1000)
    mad[private + 16:private + 20] = socket.inet_aton(src_ip)
    mad[private + 32:private + 36] = socket.inet_aton(dst_ip)
    return bytes(mad)


class Side:
    """The vNIC's device, a PD, one CQ, a registered buffer and one UD QP."""

    def __init__(self, role):
        self.role = role
        names = [d.name.decode() for d in get_device_list()]
        name = next((n for n in names if n.startswith("jakiro_")), None)
        if name is None:
            raise Failed(f"no jakiro_* device among {names}")
        self.ctx = Context(name=name)
        self.gid = str(self.ctx.query_gid(1, 0))
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 64)
        self.mr = MR(self.pd, 16 * (GRH_BYTES + MAD_BYTES), e.IBV_ACCESS_LOCAL_WRITE)
        cap = QPCap(max_send_wr=32, max_recv_wr=32, max_send_sge=1, max_recv_sge=1)
        self.qp = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=self.cq, rcq=self.cq,
                                         cap=cap))
        print(f"pyverbs_forged_cm: {role}: {name}, GID {self.gid}, QP {self.qp.qp_num:#x}",
              flush=True)

    def init_with_qkey(self, qkey):
        attr = QPAttr(qp_state=e.IBV_QPS_INIT)
        attr.pkey_index = 0
        attr.port_num = 1
        attr.qkey = qkey
        self.qp.modify(attr, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT |
                       e.IBV_QP_QKEY)

    def ready(self):
        self.init_with_qkey(QKEY)
        self.qp.modify(QPAttr(qp_state=e.IBV_QPS_RTR), e.IBV_QP_STATE)
        rts = QPAttr(qp_state=e.IBV_QPS_RTS)
        rts.sq_psn = 0
        self.qp.modify(rts, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN)

    def completions(self, n, timeout=POLL_S):
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            got, wcs = self.cq.poll(n - len(out))
            out.extend(wcs[:got])
            if got == 0:
                time.sleep(0.001)
        return out


class Line:
    """One JSON object per line over TCP, every wait bounded."""

    def __init__(self, sock):
        sock.settimeout(TCP_S)
        self.file = sock.makefile("rwb")

    def send(self, **msg):
        self.file.write(json.dumps(msg).encode() + b"\n")
        self.file.flush()

    def recv(self):
        line = self.file.readline()
        if not line:
            raise Failed("the peer closed the TCP connection")
        return json.loads(line)


def receiver(args):
    s = Side("receiver")
    s.ready()
    slot = GRH_BYTES + MAD_BYTES
    for i in range(16):
        s.qp.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[SGE(s.mr.buf + i * slot, slot,
                                                          s.mr.lkey)]))
    lsock = socket.create_server(("0.0.0.0", args.port))
    lsock.settimeout(TCP_S)
    conn, _ = lsock.accept()
    line = Line(conn)
    line.send(qpn=s.qp.qp_num, gid=s.gid)
    expected = bytes.fromhex(line.recv()["mad"])
    wcs = s.completions(1)
    time.sleep(0.2)  # anything more that was coming
    got, more = s.cq.poll(16)
    wcs.extend(more[:got])
    intact = [w for w in wcs if w.status == e.IBV_WC_SUCCESS and w.byte_len == slot and
              s.mr.read(MAD_BYTES, w.wr_id * slot + GRH_BYTES) == expected]
    line.send(received=len(wcs), intact=len(intact))
    check("receiver", intact, f"{len(intact)} of {len(wcs)} datagrams hold the MAD intact")
    print("pyverbs_forged_cm: receiver: all checks passed", flush=True)


def attacker(args):
    s = Side("attacker")
    try:
        s.init_with_qkey(GSI_QKEY)
        raise Failed("INIT with the GSI Q_Key 0x80010000 was accepted")
    except PyverbsRDMAError as err:
        check("attacker", err.error_code in (1, 22),  # EPERM (Linux), EINVAL
              f"INIT with the controlled Q_Key 0x80010000 is refused (errno {err.error_code})")
    attr, _ = s.qp.query(e.IBV_QP_STATE)
    check("attacker", attr.qp_state == e.IBV_QPS_RESET, "and the QP stays in RESET")
    s.ready()
    attr, _ = s.qp.query(e.IBV_QP_QKEY)
    check("attacker", attr.qkey == QKEY, f"its Q_Key is its own {QKEY:#x}")

    # The receiver's QP and GID first (the control needs them); then the attack.
    sock = socket.create_connection((args.attack, args.port), timeout=TCP_S)
    line = Line(sock)
    peer = line.recv()
    groups = s.gid.split(":")
    own_ip = socket.inet_ntoa(bytes.fromhex(groups[-2] + groups[-1]))
    variants = [forged_req(own_ip, args.attack, args.cm_port, s.qp.qp_num, 1000 + i)
                for i in range(ATTEMPTS)]
    if args.as_ip:
        variants += [forged_req(args.as_ip, args.attack, args.cm_port, s.qp.qp_num, 2000 + i)
                     for i in range(ATTEMPTS)]
    ah = AH(s.pd, attr=AHAttr(gr=GlobalRoute(dgid=GID(peer["gid"]), sgid_index=0),
                              is_global=1, port_num=1))

    def send_all(mads, qpn, qkey):
        for i, mad in enumerate(mads):
            s.mr.write(mad, MAD_BYTES, 0)
            wr = SendWR(wr_id=i, opcode=e.IBV_WR_SEND, num_sge=1,
                        sg=[SGE(s.mr.buf, MAD_BYTES, s.mr.lkey)])
            wr.set_wr_ud(ah, qpn, qkey)
            s.qp.post_send(wr)
            wcs = s.completions(1)
            if len(wcs) != 1 or wcs[0].status != e.IBV_WC_SUCCESS:
                raise Failed(f"datagram {i} to QP {qpn:#x} with Q_Key {qkey:#x}: {wcs}")

    send_all(variants, GSI_QPN, GSI_QKEY)
    send_all(variants, GSI_QPN, QKEY)
    print(f"pyverbs_forged_cm: attacker: sent {2 * len(variants)} forged REQs to QP1 of "
          f"{args.attack} (half with the GSI Q_Key in the work request)", flush=True)

    # The control: the same bytes, the same way, to the receiver's QP.
    line.send(mad=variants[0].hex())
    send_all(variants[:1], peer["qpn"], GSI_QKEY)
    result = line.recv()
    check("attacker", result["intact"] >= 1,
          f"control: the receiver's QP {peer['qpn']:#x} got the MAD intact "
          f"({result['intact']} of {result['received']})")
    print("pyverbs_forged_cm: attacker: all checks passed", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--receiver", action="store_true")
    ap.add_argument("--attack", metavar="IP")
    ap.add_argument("--port", type=int, default=7476, help="TCP port of the receiver")
    ap.add_argument("--cm-port", type=int, default=7300, help="rdma_cm port at the peer")
    ap.add_argument("--as", dest="as_ip", metavar="IP",
                    help="also forge REQs naming this address as their source")
    args = ap.parse_args()
    if args.receiver == bool(args.attack):
        ap.print_usage(sys.stderr)
        return 2
    try:
        receiver(args) if args.receiver else attacker(args)
    except (Failed, PyverbsRDMAError) as err:
        print(f"pyverbs_forged_cm: {'receiver' if args.receiver else 'attacker'}: FAILED: {err}",
              flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
