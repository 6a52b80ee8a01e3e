#!/usr/bin/python3
"""pyverbs_mw: memory windows as a Python user drives them, across two hosts.

    ip netns exec jk-h2-t2 tools/jakiro-run -- /usr/bin/python3 tests/rdma/pyverbs_mw.py --server
    ip netns exec jk-h1-t1 tools/jakiro-run -- /usr/bin/python3 tests/rdma/pyverbs_mw.py \\
        --connect 198.19.1.2

The server registers a buffer with IBV_ACCESS_MW_BIND, binds a type-1 window onto its first
page with ibv_bind_mw (remote write) and a type-2 window onto its second page with an
IBV_WR_BIND_MW work request (remote read), and tells the client both rkeys over TCP. The
client writes through the type-1 window and reads through the type-2 one (content checked on
both sides), then sends a SEND_WITH_INV naming the type-2 rkey: the server's receive must
carry IBV_WC_WITH_INV and that rkey. A READ through the invalidated rkey must then complete
IBV_WC_REM_ACCESS_ERR (the same READ succeeded before: the control). The server's pages
outside the windows must never change.

Exit status: 0 when everything was verified, 1 otherwise.
"""

import sys

import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR, MW, MWBind, MWBindInfo
from pyverbs.pd import PD
from pyverbs.qp import QP, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SGE, SendWR

from pyverbs_common import checker, connect, hear, rendezvous, say, two_sided_main, wait_wc

PORT = 7491
PAGE = 4096
QP_ACCESS = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_LOCAL_WRITE
check = checker("pyverbs_mw")


def pattern(seed, n=PAGE):
    return bytes((i * 31 + seed) % 251 for i in range(n))


def setup():
    name = next(d.name.decode() for d in get_device_list()
                if d.name.decode().startswith("jakiro_"))
    ctx = Context(name=name)
    attr = ctx.query_device()
    check(attr.max_mw > 0 and attr.device_cap_flags & e.IBV_DEVICE_MEM_WINDOW,
          f"the device advertises memory windows (max_mw {attr.max_mw})")
    pd = PD(ctx)
    cq = CQ(ctx, 16)
    cap = QPCap(max_send_wr=8, max_recv_wr=8, max_send_sge=1, max_recv_sge=1)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
    gid = str(ctx.query_gid(1, 0))
    mtu = ctx.query_port(1).active_mtu
    return ctx, pd, cq, qp, gid, mtu


def server(args):
    ctx, pd, cq, qp, gid, mtu = setup()
    mr = MR(pd, 4 * PAGE, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE |
            e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_MW_BIND)
    mr.write(b"\0" * PAGE + pattern(2) + pattern(3) + pattern(4), 4 * PAGE, 0)
    mw1 = MW(pd, e.IBV_MW_TYPE_1)
    mw2 = MW(pd, e.IBV_MW_TYPE_2)
    conn, f = rendezvous(args, PORT)
    say(f, qpn=qp.qp_num, gid=gid)
    peer = hear(f)
    connect(qp, peer["qpn"], peer["gid"], mtu, access=QP_ACCESS)
    old1 = mw1.rkey
    qp.bind_mw(mw1, MWBind(MWBindInfo(mr, mr.buf, PAGE, e.IBV_ACCESS_REMOTE_WRITE),
                           e.IBV_SEND_SIGNALED))
    wc = wait_wc(cq, "ibv_bind_mw")
    check(wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_BIND_MW,
          f"ibv_bind_mw completed IBV_WC_BIND_MW; rkey {old1:#x} -> {mw1.rkey:#x}")
    check(mw1.rkey != old1 and mw1.rkey >> 8 == old1 >> 8, "the bind changed the consumer key only")
    wr = SendWR(wr_id=2, opcode=e.IBV_WR_BIND_MW, num_sge=0, send_flags=e.IBV_SEND_SIGNALED)
    wr.set_bind_wr(mw2, MWBindInfo(mr, mr.buf + PAGE, PAGE, e.IBV_ACCESS_REMOTE_READ))
    qp.post_send(wr)
    wc = wait_wc(cq, "IBV_WR_BIND_MW")
    check(wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_BIND_MW,
          "a type-2 window bound by an IBV_WR_BIND_MW work request")
    # pyverbs' set_bind_wr asks for the window's next consumer key, as ibv_inc_rkey makes it.
    rkey2 = (mw2.rkey & ~0xff) | ((mw2.rkey + 1) & 0xff)
    qp.post_recv(RecvWR(wr_id=9, num_sge=1, sg=[SGE(mr.buf + 3 * PAGE, 64, mr.lkey)]))
    say(f, w1=[mr.buf, mw1.rkey], w2=[mr.buf + PAGE, rkey2])
    hear(f)  # the client wrote and read
    got = mr.read(4 * PAGE, 0)
    check(got[:PAGE] == pattern(1), "the WRITE through the type-1 window landed, whole")
    check(got[PAGE:3 * PAGE] == pattern(2) + pattern(3), "the read-only window's pages unchanged")
    say(f, ok=True)
    wc = wait_wc(cq, "the SEND with invalidate")
    check(wc.status == e.IBV_WC_SUCCESS and wc.wc_flags & e.IBV_WC_WITH_INV and
          wc.imm_data == rkey2,
          f"the receive reports IBV_WC_WITH_INV and invalidated_rkey {wc.imm_data:#x}")
    say(f, invalidated=True)
    hear(f)  # the client's READ after the invalidation
    got = mr.read(4 * PAGE, 0)
    check(got[PAGE:3 * PAGE] == pattern(2) + pattern(3), "nothing changed behind the windows")
    for o in (mw1, mw2):
        o.close()
    print("pyverbs_mw: server: all verified", flush=True)


def client(args):
    ctx, pd, cq, qp, gid, mtu = setup()
    mr = MR(pd, 2 * PAGE, e.IBV_ACCESS_LOCAL_WRITE)
    conn, f = rendezvous(args, PORT)
    peer = hear(f)
    say(f, qpn=qp.qp_num, gid=gid)
    connect(qp, peer["qpn"], peer["gid"], mtu, access=QP_ACCESS)
    w = hear(f)

    def rdma(opcode, addr, rkey, offset, length, what):
        wr = SendWR(wr_id=1, opcode=opcode, num_sge=1,
                    sg=[SGE(mr.buf + offset, length, mr.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(rkey, addr)
        qp.post_send(wr)
        return wait_wc(cq, what)

    mr.write(pattern(1), PAGE, 0)
    wc = rdma(e.IBV_WR_RDMA_WRITE, w["w1"][0], w["w1"][1], 0, PAGE, "WRITE via type 1")
    check(wc.status == e.IBV_WC_SUCCESS, "a WRITE through the type-1 window completed")
    wc = rdma(e.IBV_WR_RDMA_READ, w["w2"][0], w["w2"][1], PAGE, PAGE, "READ via type 2")
    check(wc.status == e.IBV_WC_SUCCESS and mr.read(PAGE, PAGE) == pattern(2),
          "a READ through the type-2 window returned the server's page (control)")
    say(f, done=True)
    hear(f)
    wr = SendWR(wr_id=3, opcode=e.IBV_WR_SEND_WITH_INV, num_sge=1,
                sg=[SGE(mr.buf, 16, mr.lkey)], send_flags=e.IBV_SEND_SIGNALED,
                imm_data=w["w2"][1])
    qp.post_send(wr)
    wc = wait_wc(cq, "SEND with invalidate")
    check(wc.status == e.IBV_WC_SUCCESS, "the SEND with invalidate completed")
    hear(f)
    mr.write(b"\xee" * PAGE, PAGE, PAGE)
    wc = rdma(e.IBV_WR_RDMA_READ, w["w2"][0], w["w2"][1], PAGE, PAGE, "READ after invalidate")
    check(wc.status == e.IBV_WC_REM_ACCESS_ERR and mr.read(PAGE, PAGE) == b"\xee" * PAGE,
          "a READ through the invalidated window is a remote access error and returns no data")
    say(f, done=True)
    print("pyverbs_mw: client: all verified", flush=True)


def main():
    return two_sided_main("pyverbs_mw", __doc__, server, client)


if __name__ == "__main__":
    sys.exit(main())
