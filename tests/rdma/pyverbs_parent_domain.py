#!/usr/bin/python3
"""pyverbs_parent_domain: a parent domain with custom allocators, as a Python user makes one.

    ip netns exec jk-h1-t1 tools/jakiro-run -- /usr/bin/python3 tests/rdma/pyverbs_parent_domain.py

One process, one vNIC. A parent domain is made on a PD with Python alloc/free callbacks
(ParentDomainContext); an extended CQ (IBV_CQ_INIT_ATTR_MASK_PD), two RC QPs and an MR are made
with the parent domain, the QPs are connected to each other (loopback) and a SEND and an RDMA
WRITE move data that is checked byte for byte. The allocators are never called: jakirod's rings
are memfds it creates itself, so no provider buffer is placed in the program's memory (the
script prints how often they were, 0). Control: an MR registered on a *different* PD cannot be
written through the parent domain's QPs (remote access error), so the parent domain really is
its PD at jakirod.

Exit status: 0 when everything was verified, 1 otherwise.
"""

import sys
import time

import pyverbs.enums as e
from pyverbs.cq import CQEX, CqInitAttrEx, PollCqAttr
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD, ParentDomain, ParentDomainContext, ParentDomainInitAttr
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

from pyverbs_common import Failed, buffer, checker, connect

check = checker("pyverbs_parent_domain")

SIZE = 4096
POLL_S = 10.0
ACCESS = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
STANDARD = (e.IBV_WC_EX_WITH_BYTE_LEN | e.IBV_WC_EX_WITH_IMM | e.IBV_WC_EX_WITH_QP_NUM |
            e.IBV_WC_EX_WITH_SRC_QP | e.IBV_WC_EX_WITH_SLID | e.IBV_WC_EX_WITH_SL |
            e.IBV_WC_EX_WITH_DLID_PATH_BITS)

calls = {"alloc": 0, "free": 0}


def alloc(pd, pd_context, size, alignment, resource_type):
    calls["alloc"] += 1
    return 0xFFFFFFFFFFFFFFFF  # IBV_ALLOCATOR_USE_DEFAULT


def free(pd, pd_context, ptr, resource_type):
    calls["free"] += 1


def poll(cq, n):
    out = []
    deadline = time.monotonic() + POLL_S
    while len(out) < n:
        if cq.start_poll(PollCqAttr()) != 0:
            if time.monotonic() > deadline:
                raise Failed(f"{len(out)} of {n} completions after {POLL_S}s")
            time.sleep(0.001)
            continue
        while True:
            out.append((cq.wr_id, cq.status))
            if len(out) == n or cq.poll_next() != 0:
                break
        cq.end_poll()
    return out


def main():
    names = [d.name.decode() for d in get_device_list()]
    name = next((n for n in names if n.startswith("jakiro_")), None)
    if name is None:
        raise Failed(f"no jakiro device in {names}")
    ctx = Context(name=name)
    pd = PD(ctx)
    other_pd = PD(ctx)
    pd_context = ParentDomainContext(pd, alloc, free)
    parent = ParentDomain(ctx, attr=ParentDomainInitAttr(pd=pd, pd_context=pd_context))
    check(True, "parent domain with Python allocators made")
    gid = str(ctx.query_gid(1, 0))
    mtu = ctx.query_port(1).active_mtu
    cq = CQEX(ctx, CqInitAttrEx(cqe=32, wc_flags=STANDARD, parent_domain=parent,
                                comp_mask=e.IBV_CQ_INIT_ATTR_MASK_PD))
    check(True, "extended CQ made with the parent domain")
    cap = QPCap(max_send_wr=8, max_recv_wr=8, max_send_sge=1, max_recv_sge=1)
    a = QP(parent, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
    b = QP(parent, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
    connect(a, b.qp_num, gid, mtu, access=ACCESS, retry_cnt=1)
    connect(b, a.qp_num, gid, mtu, access=ACCESS, retry_cnt=1)
    src_mem, src = buffer(SIZE)
    dst_mem, dst = buffer(SIZE)
    foreign_mem, foreign = buffer(SIZE)
    src_mr = MR(parent, SIZE, ACCESS, address=src)
    dst_mr = MR(parent, SIZE, ACCESS, address=dst)
    foreign_mr = MR(other_pd, SIZE, ACCESS, address=foreign)
    src_mem[:SIZE] = bytes((i * 11 + 7) % 256 for i in range(SIZE))

    b.post_recv(RecvWR(wr_id=10, num_sge=1, sg=[SGE(dst, 1024, dst_mr.lkey)]))
    a.post_send(SendWR(wr_id=1, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(src, 1024, src_mr.lkey)],
                       send_flags=e.IBV_SEND_SIGNALED))
    write = SendWR(wr_id=2, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                   sg=[SGE(src + 1024, 2048, src_mr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
    write.set_wr_rdma(dst_mr.rkey, dst + 2048)
    a.post_send(write)
    got = sorted(poll(cq, 3))
    check(got == [(1, e.IBV_WC_SUCCESS), (2, e.IBV_WC_SUCCESS), (10, e.IBV_WC_SUCCESS)],
          f"SEND and RDMA WRITE through the parent domain's QPs completed: {got}")
    check(bytes(dst_mem[:1024]) == bytes(src_mem[:1024]), "the SEND's bytes arrived")
    check(bytes(dst_mem[2048:4096]) == bytes(src_mem[1024:3072]), "the WRITE's bytes arrived")

    # Control: an rkey of another PD is refused at the responder, so the parent domain's QPs
    # carry its PD's identity, not a wildcard.
    bad = SendWR(wr_id=3, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(src, 64, src_mr.lkey)],
                 send_flags=e.IBV_SEND_SIGNALED)
    bad.set_wr_rdma(foreign_mr.rkey, foreign)
    a.post_send(bad)
    deadline = time.monotonic() + POLL_S
    status = None
    while status is None:
        if cq.start_poll(PollCqAttr()) == 0:
            status = cq.status
            cq.end_poll()
        elif time.monotonic() > deadline:
            raise Failed("no completion for the WRITE to another PD's MR")
        else:
            time.sleep(0.001)
    check(status == e.IBV_WC_REM_ACCESS_ERR,
          f"a WRITE to another PD's MR is a remote access error (status {status})")
    check(bytes(foreign_mem[:64]) == bytes(64), "and that MR is untouched")
    print(f"pyverbs_parent_domain: allocator calls: alloc {calls['alloc']}, free {calls['free']}",
          flush=True)
    print("pyverbs_parent_domain: all verified", flush=True)


if __name__ == "__main__":
    try:
        main()
    except (Failed, PyverbsRDMAError) as err:
        print(f"pyverbs_parent_domain: FAILED: {err}", flush=True)
        sys.exit(1)
    sys.exit(0)
