#!/usr/bin/python3
"""pyverbs_rereg: ibv_rereg_mr through rdma-core's own Python bindings, then real traffic.

    ip netns exec jk-h1-t1 tools/jakiro-run -- /usr/bin/python3 tests/rdma/pyverbs_rereg.py

One process, one vNIC, two RC QPs connected to each other (loopback, as on any RNIC port). An
MR is registered with remote read only; the peer QP learns its rkey. ibv_rereg_mr then changes
its rights (remote write), its translation (another buffer) and its PD, each flag alone and all
together; after each, an RDMA WRITE with the rkey learnt before must land in the new buffer and
an RDMA READ must return it. Control: before any rereg, the WRITE is refused (remote access
error), so the rights really come from the rereg.

Exit status: 0 when everything was verified, 1 otherwise.
"""

import ctypes
import mmap
import sys
import time

import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPCap, QPInitAttr
from pyverbs.wr import SGE, SendWR

from pyverbs_common import Failed, connect

SIZE = 4096
QP_ACCESS = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_LOCAL_WRITE
WRITABLE = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ
READ_ONLY = e.IBV_ACCESS_REMOTE_READ


def page():
    """A page-aligned buffer and its address: private anonymous memory, as malloc'd memory is
    (the shim moves its pages onto a memfd; a MAP_SHARED mapping is already someone's file)."""
    m = mmap.mmap(-1, SIZE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return m, ctypes.addressof(ctypes.c_char.from_buffer(m))


class Pair:
    """Two RC QPs of one vNIC connected to each other; the requester's source buffer."""

    def __init__(self, ctx, pd, target_pd, gid, mtu):
        self.cq = CQ(ctx, 16)
        cap = QPCap(max_send_wr=8, max_recv_wr=8, max_send_sge=1, max_recv_sge=1)
        self.requester = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq,
                                           cap=cap))
        self.responder = QP(target_pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq,
                                                  rcq=self.cq, cap=cap))
        connect(self.requester, self.responder.qp_num, gid, mtu, access=QP_ACCESS)
        connect(self.responder, self.requester.qp_num, gid, mtu, access=QP_ACCESS)
        self.src = MR(pd, SIZE, WRITABLE)

    def rdma(self, opcode, addr, rkey, length=64):
        wr = SendWR(wr_id=1, opcode=opcode, num_sge=1,
                    sg=[SGE(self.src.buf, length, self.src.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(rkey, addr)
        self.requester.post_send(wr)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            n, wcs = self.cq.poll(1)
            if n > 0:
                return wcs[0].status
            time.sleep(0.001)
        raise Failed("no completion within 10 s")

    def close(self):
        for o in (self.requester, self.responder, self.src, self.cq):
            o.close()


def main():
    name = next(d.name.decode() for d in get_device_list()
                if d.name.decode().startswith("jakiro_"))
    ctx = Context(name=name)
    gid = str(ctx.query_gid(1, 0))
    mtu = ctx.query_port(1).active_mtu
    pd1, pd2 = PD(ctx), PD(ctx)
    first, first_addr = page()
    second, second_addr = page()
    ok = True
    cases = [("access", e.IBV_REREG_MR_CHANGE_ACCESS),
             ("translation+access", e.IBV_REREG_MR_CHANGE_TRANSLATION |
              e.IBV_REREG_MR_CHANGE_ACCESS),
             ("pd+access", e.IBV_REREG_MR_CHANGE_PD | e.IBV_REREG_MR_CHANGE_ACCESS),
             ("all", e.IBV_REREG_MR_CHANGE_TRANSLATION | e.IBV_REREG_MR_CHANGE_PD |
              e.IBV_REREG_MR_CHANGE_ACCESS)]
    for label, flags in [("control: no rereg", 0)] + cases:
        first[:] = b"\0" * SIZE
        second[:] = b"\0" * SIZE
        mr = MR(pd1, SIZE, READ_ONLY, address=first_addr)
        rkey = mr.rkey  # what the peer learnt before the rereg
        if flags:
            mr.rereg(flags, pd2, second_addr, SIZE, WRITABLE)
        moved = flags & e.IBV_REREG_MR_CHANGE_TRANSLATION
        target_pd = pd2 if flags & e.IBV_REREG_MR_CHANGE_PD else pd1
        buf, addr = (second, second_addr) if moved else (first, first_addr)
        pair = Pair(ctx, pd1, target_pd, gid, mtu)
        pattern = bytes((i * 29 + len(label)) % 256 for i in range(64))
        pair.src.write(pattern, 64, 0)
        status = pair.rdma(e.IBV_WR_RDMA_WRITE, addr, rkey)
        if not flags:
            good = status == e.IBV_WC_REM_ACCESS_ERR and buf[:64] == b"\0" * 64
            print(f"pyverbs_rereg: {label}: WRITE into a read-only MR -> status {status}: "
                  f"{'refused, as it must be' if good else 'NOT refused'}", flush=True)
        else:
            good = status == e.IBV_WC_SUCCESS and buf[:64] == pattern
            if good:
                pair.src.write(b"\0" * 64, 64, 0)
                status = pair.rdma(e.IBV_WR_RDMA_READ, addr, rkey)
                good = status == e.IBV_WC_SUCCESS and pair.src.read(64, 0) == pattern
            print(f"pyverbs_rereg: {label}: rkey {rkey:#x} -> {mr.rkey:#x}, WRITE and READ "
                  f"with the old rkey: {'ok' if good else f'FAILED (status {status})'}",
                  flush=True)
            good = good and mr.rkey == rkey
        ok = ok and good
        pair.close()
        mr.close()
    print(f"pyverbs_rereg: {'all verified' if ok else 'FAILED'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failed as err:
        print(f"pyverbs_rereg: FAILED: {err}", flush=True)
        sys.exit(1)
