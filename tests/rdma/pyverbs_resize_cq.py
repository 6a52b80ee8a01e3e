#!/usr/bin/python3
"""pyverbs_resize_cq: ibv_resize_cq through rdma-core's own Python bindings, under real traffic.

    ip netns exec jk-h1-t1 tools/jakiro-run -- /usr/bin/python3 tests/rdma/pyverbs_resize_cq.py

One process, one vNIC, two RC QPs connected to each other (loopback, as on any RNIC port). The
receiver's CQ is the one resized; jakirod's engine completes into it from its own thread.

1. Below the outstanding count: SENDs whose receive completions nobody polls fill the CQ;
   CQ.resize() to fewer entries than wait is refused (EINVAL, as rxe) and nothing is lost.
2. Grow and shrink while completions are outstanding and SENDs are still arriving: every
   receive completion comes out exactly once, in posting order, with its bytes in place.
3. A drained CQ shrinks to one entry and still works.

Exit status: 0 when everything was verified, 1 otherwise.
"""

import errno
import sys
import time

import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

from pyverbs_common import Failed, buffer, checker, connect

check = checker("pyverbs_resize_cq")

MSG = 64  # bytes per SEND; receive slot i is at i * MSG
SLOTS = 64
POLL_S = 10.0
ARRIVAL_S = 0.05  # after a payload is visible, its completion (pushed right after) is there
ACCESS = e.IBV_ACCESS_LOCAL_WRITE


def payload(i):
    return bytes(((i * 31 + k * 7 + 1) % 251) for k in range(MSG))


class Loopback:
    def __init__(self):
        names = [d.name.decode() for d in get_device_list()]
        name = next((n for n in names if n.startswith("jakiro_")), None)
        if name is None:
            raise Failed(f"no jakiro device in {names}")
        self.ctx = Context(name=name)
        self.pd = PD(self.ctx)
        gid = str(self.ctx.query_gid(1, 0))
        mtu = self.ctx.query_port(1).active_mtu
        self.send_cq = CQ(self.ctx, 2 * SLOTS)
        self.recv_cq = CQ(self.ctx, 8)  # the one resized
        cap = QPCap(max_send_wr=SLOTS, max_recv_wr=SLOTS, max_send_sge=1, max_recv_sge=1)
        self.sender = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.send_cq,
                                             rcq=self.send_cq, cap=cap))
        self.receiver = QP(self.pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.send_cq,
                                               rcq=self.recv_cq, cap=cap))
        connect(self.sender, self.receiver.qp_num, gid, mtu)
        connect(self.receiver, self.sender.qp_num, gid, mtu)
        self.src_mem, self.src_addr = buffer(SLOTS * MSG)
        self.dst_mem, self.dst_addr = buffer(SLOTS * MSG)
        self.src = MR(self.pd, SLOTS * MSG, ACCESS, address=self.src_addr)
        self.dst = MR(self.pd, SLOTS * MSG, ACCESS, address=self.dst_addr)
        self.sent = 0
        self.sends_polled = 0

    def post_recv(self, first, count):
        for i in range(first, first + count):
            slot = i % SLOTS
            sge = SGE(self.dst_addr + slot * MSG, MSG, self.dst.lkey)
            self.receiver.post_recv(RecvWR(wr_id=i, num_sge=1, sg=[sge]))

    def send(self, count):
        for _ in range(count):
            i = self.sent
            slot = i % SLOTS
            self.src_mem[slot * MSG:(slot + 1) * MSG] = payload(i)
            sge = SGE(self.src_addr + slot * MSG, MSG, self.src.lkey)
            self.sender.post_send(SendWR(wr_id=i, opcode=e.IBV_WR_SEND, num_sge=1, sg=[sge],
                                         send_flags=e.IBV_SEND_SIGNALED))
            self.sent += 1
            self.reap_sends()

    def reap_sends(self):
        """Keeps the send CQ drained (it is not under test)."""
        while True:
            n, wcs = self.send_cq.poll(16)
            for wc in wcs[:n]:
                if wc.status != e.IBV_WC_SUCCESS:
                    raise Failed(f"send completion {wc.wr_id} status {wc.status}")
            self.sends_polled += n
            if n == 0:
                return

    def arrived(self, i):
        slot = i % SLOTS
        return bytes(self.dst_mem[slot * MSG:(slot + 1) * MSG]) == payload(i)

    def wait_arrived(self, i):
        deadline = time.monotonic() + POLL_S
        while not self.arrived(i):
            self.reap_sends()
            if time.monotonic() > deadline:
                raise Failed(f"SEND {i} never arrived")
            time.sleep(0.001)
        time.sleep(ARRIVAL_S)

    def poll_recv(self, n):
        got = []
        deadline = time.monotonic() + POLL_S
        while len(got) < n:
            k, wcs = self.recv_cq.poll(min(16, n - len(got)))
            got.extend(wcs[:k])
            self.reap_sends()
            if k == 0:
                if time.monotonic() > deadline:
                    raise Failed(f"{len(got)} of {n} receive completions after {POLL_S}s")
                time.sleep(0.001)
        return got


def expect_in_order(lb, wcs, first):
    for k, wc in enumerate(wcs):
        if wc.status != e.IBV_WC_SUCCESS or wc.opcode != e.IBV_WC_RECV:
            raise Failed(f"receive completion {wc.wr_id}: status {wc.status} opcode {wc.opcode}")
        if wc.wr_id != first + k:
            raise Failed(f"receive completion {k} is wr_id {wc.wr_id}, expected {first + k}")
        if wc.byte_len != MSG:
            raise Failed(f"receive completion {wc.wr_id}: byte_len {wc.byte_len}")


def main():
    lb = Loopback()
    check(lb.recv_cq.cqe >= 8, f"receive CQ created with {lb.recv_cq.cqe} entries")

    # 1. Six receive completions wait in a CQ of eight; four entries cannot hold them.
    lb.post_recv(0, SLOTS)
    lb.send(6)
    lb.wait_arrived(5)
    try:
        lb.recv_cq.resize(4)
        raise Failed("resize to 4 entries with 6 completions waiting succeeded")
    except PyverbsRDMAError as err:
        check(err.error_code == errno.EINVAL,
              f"resize below the outstanding count refused with EINVAL ({err.error_code})")
    check(lb.recv_cq.cqe >= 6, f"the CQ keeps its {lb.recv_cq.cqe} entries")

    # 2. Grow with those six waiting, keep sending, resize again mid-stream, shrink.
    lb.recv_cq.resize(40)
    check(lb.recv_cq.cqe >= 40, f"grown to {lb.recv_cq.cqe} entries with 6 outstanding")
    lb.send(20)
    lb.recv_cq.resize(200)
    check(lb.recv_cq.cqe >= 200, f"grown to {lb.recv_cq.cqe} entries while SENDs arrive")
    lb.send(20)
    lb.wait_arrived(45)
    lb.recv_cq.resize(50)
    check(lb.recv_cq.cqe >= 50, f"shrunk to {lb.recv_cq.cqe} entries with 46 outstanding")
    wcs = lb.poll_recv(46)
    expect_in_order(lb, wcs, 0)
    check(True, "46 receive completions, each once, in posting order")
    bad = [i for i in range(46) if not lb.arrived(i)]
    check(not bad, f"every payload in its receive buffer (wrong: {bad})")
    n, _ = lb.recv_cq.poll(4)
    check(n == 0, "no completion twice")

    # 3. Drained: one entry is enough, and it still completes.
    lb.recv_cq.resize(1)
    check(lb.recv_cq.cqe >= 1, f"a drained CQ shrinks to {lb.recv_cq.cqe} entry")
    lb.send(1)
    expect_in_order(lb, lb.poll_recv(1), 46)
    check(lb.arrived(46), "and still completes SENDs with their bytes")
    deadline = time.monotonic() + POLL_S
    while lb.sends_polled < lb.sent and time.monotonic() < deadline:
        lb.reap_sends()
        time.sleep(0.001)
    check(lb.sends_polled == lb.sent, f"all {lb.sent} SENDs completed at the sender")
    print("pyverbs_resize_cq: all verified", flush=True)


if __name__ == "__main__":
    try:
        main()
    except (Failed, PyverbsRDMAError) as err:
        print(f"pyverbs_resize_cq: FAILED: {err}", flush=True)
        sys.exit(1)
    sys.exit(0)
