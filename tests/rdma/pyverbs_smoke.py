#!/usr/bin/python3
"""pyverbs_smoke: the extended verbs through rdma-core's own Python bindings, on Jakiro vNICs.

    ip netns exec jk-h1-t5 tools/jakiro-run -- /usr/bin/python3 tests/rdma/pyverbs_smoke.py \\
        --server --port 7475
    ip netns exec jk-h1-t1 tools/jakiro-run -- /usr/bin/python3 tests/rdma/pyverbs_smoke.py \\
        --connect 198.19.1.5 --port 7475

Each side opens its vNIC's device and makes an extended CQ (ibv_create_cq_ex, polled with
start/next/end_poll and the ibv_wc_read_* accessors) and an RC QP created with send ops
(ibv_create_qp_ex + ibv_qp_to_qp_ex); the server's QP receives on a shared receive queue
(--no-srq: on its own receive queue). QP numbers, GIDs and the server's buffer travel over a TCP
line protocol. The client then moves data with the ibv_wr_* API only: SEND, SEND with immediate
and inline data (its buffer overwritten right after the setter), RDMA WRITE and RDMA READ in one
region, FETCH_AND_ADD and CMP_AND_SWP, and a region that ibv_wr_abort discards. The server
checks what arrived (receive completions and bytes), the client what came back.

Exit status: 0 when everything was verified, 1 on a failed check or verb, 2 on bad usage.
"""

import argparse
import json
import socket
import struct
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import GID, AHAttr, GlobalRoute
from pyverbs.cq import CQEX, CqInitAttrEx, PollCqAttr
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsError
from pyverbs.qp import QPAttr, QPCap, QPEx, QPInitAttrEx
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.wr import SGE, RecvWR

SIZE = 4096
POLL_S = 10.0
TCP_S = 30.0
ACCESS = (e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ |
          e.IBV_ACCESS_REMOTE_ATOMIC)
SEND_OPS = (e.IBV_QP_EX_WITH_SEND | e.IBV_QP_EX_WITH_SEND_WITH_IMM |
            e.IBV_QP_EX_WITH_RDMA_WRITE | e.IBV_QP_EX_WITH_RDMA_READ |
            e.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | e.IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
            e.IBV_QP_EX_WITH_ATOMIC_WRITE)

# The server's buffer: where each operation lands.
RECV1, RECV1_LEN = 0, 2048       # first SEND
RECV2, RECV2_LEN = 2048, 512     # SEND with immediate (inline)
WRITE_AT = 2560                  # RDMA WRITE target (1024 bytes)
READ_AT = 3584                   # RDMA READ source (256 bytes of 'R')
ATOMIC_AT = 3840                 # the 8-byte word of the atomics
ABORT_AT = 3904                  # what an aborted WRITE would have hit (16 bytes)
ATOMIC_WRITE_AT = 3856           # the 8-byte word ATOMIC WRITE places (IBTA 1.5)
ATOMIC_WRITE_VALUE = 0x0123456789ABCDEF
# The kernel's IB_UVERBS_DEVICE_ATOMIC_WRITE (newer than rdma-core 44's enums).
DEVICE_ATOMIC_WRITE = 1 << 40

PAYLOAD = bytes((i * 7 + 3) % 251 for i in range(1000))
INLINE = b"inline data travels in the WQE!!"
BLOCK = bytes((i * 13 + 5) % 256 for i in range(1024))
IMM = 0x12345678


class Failed(Exception):
    pass


def check(role, cond, what):
    if not cond:
        raise Failed(what)
    print(f"pyverbs_smoke: {role}: ok: {what}", flush=True)


def poll(cq, n, timeout=POLL_S):
    """n completions as dicts, read with the extended CQ's iterator and accessors."""
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        if cq.start_poll(PollCqAttr()) != 0:  # ENOENT: nothing yet, and no end_poll
            if time.monotonic() > deadline:
                raise Failed(f"{len(out)} of {n} completions after {timeout}s: {out}")
            time.sleep(0.001)
            continue
        while True:
            out.append({"wr_id": cq.wr_id, "status": cq.status, "opcode": cq.read_opcode(),
                        "byte_len": cq.read_byte_len(), "qp_num": cq.read_qp_num(),
                        "wc_flags": cq.read_wc_flags(), "imm": cq.read_imm_data(),
                        "vendor_err": cq.read_vendor_err()})
            if len(out) == n or cq.poll_next() != 0:
                break
        cq.end_poll()
    for c in out:
        if c["status"] != e.IBV_WC_SUCCESS:
            raise Failed(f"completion with status {c['status']}: {c}")
    return out


def connect_qp(qp, remote_qpn, remote_gid, port_attr):
    init = QPAttr(qp_state=e.IBV_QPS_INIT)
    init.pkey_index = 0
    init.port_num = 1
    init.qp_access_flags = ACCESS
    qp.modify(init, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT |
              e.IBV_QP_ACCESS_FLAGS)
    rtr = QPAttr(qp_state=e.IBV_QPS_RTR)
    rtr.path_mtu = port_attr.active_mtu
    rtr.dest_qp_num = remote_qpn
    rtr.rq_psn = 0
    rtr.max_dest_rd_atomic = 4
    rtr.min_rnr_timer = 12
    rtr.ah_attr = AHAttr(gr=GlobalRoute(dgid=GID(remote_gid), sgid_index=0), is_global=1,
                         port_num=1)
    rtr.ah_attr.hop_limit = 64
    qp.modify(rtr, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN |
              e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
    rts = QPAttr(qp_state=e.IBV_QPS_RTS)
    rts.sq_psn = 0
    rts.timeout = 14
    rts.retry_cnt = 7
    rts.rnr_retry = 7
    rts.max_rd_atomic = 4
    qp.modify(rts, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT |
              e.IBV_QP_RNR_RETRY | e.IBV_QP_MAX_QP_RD_ATOMIC)


class Line:
    """One JSON object per line over TCP, every wait bounded."""

    def __init__(self, sock):
        sock.settimeout(TCP_S)
        self.sock = sock
        self.file = sock.makefile("rwb")

    def send(self, **msg):
        self.file.write(json.dumps(msg).encode() + b"\n")
        self.file.flush()

    def recv(self):
        line = self.file.readline()
        if not line:
            raise Failed("the peer closed the TCP connection")
        return json.loads(line)


class Side:
    """Device, PD, extended CQ, buffer and one QP with send ops (and the server's SRQ)."""

    def __init__(self, role, device, use_srq):
        self.role = role
        names = [d.name.decode() for d in get_device_list()]
        name = device or next((n for n in names if n.startswith("jakiro_")), None)
        if name is None:
            raise Failed(f"no jakiro device (devices: {names})")
        self.ctx = Context(name=name)
        self.port_attr = self.ctx.query_port(1)
        self.gid = str(self.ctx.query_gid(1, 0))
        self.pd = PD(self.ctx)
        self.cq = CQEX(self.ctx, CqInitAttrEx(cqe=64, wc_flags=e.IBV_WC_STANDARD_FLAGS))
        self.srq = SRQ(self.pd, SrqInitAttr(SrqAttr(max_wr=16, max_sge=1))) if use_srq else None
        cap = QPCap(max_send_wr=16, max_recv_wr=0 if self.srq else 16, max_send_sge=1,
                    max_recv_sge=0 if self.srq else 1, max_inline_data=64)
        self.qp = QPEx(self.ctx, QPInitAttrEx(
            qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, srq=self.srq, cap=cap, pd=self.pd,
            comp_mask=e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
            send_ops_flags=SEND_OPS))
        self.mr = MR(self.pd, SIZE, ACCESS)
        print(f"pyverbs_smoke: {role}: {name}, GID {self.gid}, QP {self.qp.qp_num:#x}" +
              (", receiving on an SRQ" if self.srq else ""), flush=True)

    def close(self):
        for obj in (self.qp, self.srq, self.mr, self.cq, self.pd, self.ctx):
            if obj is not None:
                obj.close()


def server(args):
    s = Side("server", args.device, not args.no_srq)
    s.mr.write(b"\0" * SIZE, SIZE, 0)
    s.mr.write(b"R" * 256, 256, READ_AT)
    s.mr.write(struct.pack("<Q", 40), 8, ATOMIC_AT)
    listener = socket.create_server(("0.0.0.0", args.port))
    listener.settimeout(TCP_S)
    conn, _ = listener.accept()
    line = Line(conn)
    line.send(qpn=s.qp.qp_num, gid=s.gid, addr=s.mr.buf, rkey=s.mr.rkey)
    peer = line.recv()
    connect_qp(s.qp, peer["qpn"], peer["gid"], s.port_attr)
    # A QP's own receive queue takes work from INIT on; an SRQ at any time.
    receiver = s.srq if s.srq else s.qp
    receiver.post_recv(RecvWR(wr_id=0xb1, num_sge=1,
                              sg=[SGE(s.mr.buf + RECV1, RECV1_LEN, s.mr.lkey)]))
    receiver.post_recv(RecvWR(wr_id=0xb2, num_sge=1,
                              sg=[SGE(s.mr.buf + RECV2, RECV2_LEN, s.mr.lkey)]))
    line.send(ready=True)

    done = {c["wr_id"]: c for c in poll(s.cq, 2)}
    r = done[0xb1]
    check("server", r["opcode"] == e.IBV_WC_RECV and r["byte_len"] == len(PAYLOAD) and
          r["qp_num"] == s.qp.qp_num, f"RECV: {r['byte_len']} bytes on QP {r['qp_num']:#x}")
    check("server", s.mr.read(len(PAYLOAD), RECV1) == PAYLOAD, "SEND: every byte arrived")
    r = done[0xb2]
    # pyverbs' wr_send_imm converts to network order; read_imm_data hands back the raw __be32.
    check("server", r["wc_flags"] & e.IBV_WC_WITH_IMM and r["imm"] == socket.htonl(IMM) and
          r["byte_len"] == len(INLINE), f"SEND with immediate: the immediate data arrived ({r})")
    check("server", s.mr.read(len(INLINE), RECV2) == INLINE,
          "inline SEND: the bytes as they were at the setter")

    msg = line.recv()  # the client is done with WRITE, READ, atomics and the abort
    check("server", msg.get("done"), "the client finished its work")
    check("server", s.mr.read(len(BLOCK), WRITE_AT) == BLOCK, "RDMA WRITE: every byte")
    check("server", struct.unpack("<Q", s.mr.read(8, ATOMIC_AT))[0] == 1000,
          "atomics: the word is 40 + 2, then swapped for 1000")
    check("server", s.mr.read(16, ABORT_AT) == b"\0" * 16, "wr_abort: nothing arrived")
    check("server", s.mr.read(24, ATOMIC_WRITE_AT - 8) ==
          b"\0" * 8 + struct.pack("<Q", ATOMIC_WRITE_VALUE) + b"\0" * 8,
          "ATOMIC WRITE: its 8 bytes and nothing around them")
    line.send(ok=True)
    conn.close()
    listener.close()
    s.close()
    print("pyverbs_smoke: server: all checks passed", flush=True)


def client(args):
    c = Side("client", args.device, False)
    line = Line(socket.create_connection((args.connect, args.port), timeout=TCP_S))
    peer = line.recv()
    line.send(qpn=c.qp.qp_num, gid=c.gid)
    connect_qp(c.qp, peer["qpn"], peer["gid"], c.port_attr)
    check("client", line.recv().get("ready"), "both QPs in RTS")
    qp, mr, raddr, rkey = c.qp, c.mr, peer["addr"], peer["rkey"]

    # SEND, then SEND with immediate and inline data, in one region.
    mr.write(PAYLOAD, len(PAYLOAD), 0)
    mr.write(INLINE, len(INLINE), 1024)
    qp.wr_start()
    qp.wr_id = 0xa1
    qp.wr_flags = e.IBV_SEND_SIGNALED
    qp.wr_send()
    qp.wr_set_sge(SGE(mr.buf, len(PAYLOAD), mr.lkey))
    qp.wr_id = 0xa2
    qp.wr_send_imm(IMM)
    qp.wr_set_inline_data(mr.buf + 1024, len(INLINE))
    mr.write(b"X" * len(INLINE), len(INLINE), 1024)  # copied at the setter: free already
    qp.wr_complete()
    done = {x["wr_id"]: x for x in poll(c.cq, 2)}
    check("client", done[0xa1]["opcode"] == e.IBV_WC_SEND and
          done[0xa2]["opcode"] == e.IBV_WC_SEND and done[0xa1]["qp_num"] == qp.qp_num,
          "SEND and SEND with immediate completed")

    # RDMA WRITE (unsignaled) and RDMA READ in one region.
    mr.write(BLOCK, len(BLOCK), 2048)
    qp.wr_start()
    qp.wr_id = 0xa3
    qp.wr_flags = 0
    qp.wr_rdma_write(rkey, raddr + WRITE_AT)
    qp.wr_set_sge(SGE(mr.buf + 2048, len(BLOCK), mr.lkey))
    qp.wr_id = 0xa4
    qp.wr_flags = e.IBV_SEND_SIGNALED
    qp.wr_rdma_read(rkey, raddr + READ_AT)
    qp.wr_set_sge(SGE(mr.buf + 3072, 256, mr.lkey))
    qp.wr_complete()
    done = poll(c.cq, 1)
    check("client", done[0]["wr_id"] == 0xa4 and done[0]["opcode"] == e.IBV_WC_RDMA_READ and
          done[0]["byte_len"] == 256, "RDMA READ completed (the unsignaled WRITE did not)")
    check("client", mr.read(256, 3072) == b"R" * 256, "RDMA READ: every byte")

    # Atomics on the server's word (40).
    qp.wr_start()
    qp.wr_id = 0xa5
    qp.wr_flags = e.IBV_SEND_SIGNALED
    qp.wr_atomic_fetch_add(rkey, raddr + ATOMIC_AT, 2)
    qp.wr_set_sge(SGE(mr.buf + 3840, 8, mr.lkey))
    qp.wr_id = 0xa6
    qp.wr_atomic_cmp_swp(rkey, raddr + ATOMIC_AT, 42, 1000)
    qp.wr_set_sge(SGE(mr.buf + 3848, 8, mr.lkey))
    qp.wr_complete()
    done = {x["wr_id"]: x for x in poll(c.cq, 2)}
    check("client", done[0xa5]["opcode"] == e.IBV_WC_FETCH_ADD and
          done[0xa6]["opcode"] == e.IBV_WC_COMP_SWAP, "both atomics completed")
    check("client", struct.unpack("<Q", mr.read(8, 3840))[0] == 40, "FETCH_AND_ADD returned 40")
    check("client", struct.unpack("<Q", mr.read(8, 3848))[0] == 42, "CMP_AND_SWP returned 42")

    # ATOMIC WRITE: the device says it has it, the value is taken at the call.
    check("client", c.ctx.query_device_ex().device_cap_flags_ex & DEVICE_ATOMIC_WRITE,
          "the device advertises ATOMIC WRITE")
    value = struct.pack("<Q", ATOMIC_WRITE_VALUE)
    qp.wr_start()
    qp.wr_id = 0xa8
    qp.wr_flags = e.IBV_SEND_SIGNALED
    qp.wr_atomic_write(rkey, raddr + ATOMIC_WRITE_AT, value)
    qp.wr_complete()
    done = poll(c.cq, 1)
    check("client", done[0]["wr_id"] == 0xa8 and done[0]["opcode"] == e.IBV_WC_ATOMIC_WRITE,
          "ATOMIC WRITE completed")

    # A region ibv_wr_abort discards.
    mr.write(b"A" * 16, 16, 3900)
    qp.wr_start()
    qp.wr_id = 0xa7
    qp.wr_flags = e.IBV_SEND_SIGNALED
    qp.wr_rdma_write(rkey, raddr + ABORT_AT)
    qp.wr_set_inline_data(mr.buf + 3900, 16)
    qp.wr_abort()
    time.sleep(0.2)
    check("client", c.cq.start_poll(PollCqAttr()) != 0, "wr_abort: no completion")

    line.send(done=True)
    check("client", line.recv().get("ok"), "the server verified what arrived")
    c.close()
    print("pyverbs_smoke: client: all checks passed", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    role = p.add_mutually_exclusive_group(required=True)
    role.add_argument("--server", action="store_true")
    role.add_argument("--connect", metavar="IPV4", help="the server's address")
    p.add_argument("--port", type=int, required=True, help="TCP port of the side channel")
    p.add_argument("--device", help="device name (default: the first jakiro_* device)")
    p.add_argument("--no-srq", action="store_true",
                   help="server: receive on the QP's own receive queue, not an SRQ")
    args = p.parse_args()
    try:
        server(args) if args.server else client(args)
    except (Failed, PyverbsError, OSError, KeyError, ValueError) as err:
        print(f"pyverbs_smoke: FAILED: {err}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
