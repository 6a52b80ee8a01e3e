#!/usr/bin/python3
"""pyverbs_rereg_traffic: ibv_rereg_mr with every combination of its flags, then RC traffic
through the MR with another host, as rdma-core's own MR tests drive it.

    ip netns exec jk-h2-t2 tools/jakiro-run -- /usr/bin/python3 \\
        tests/rdma/pyverbs_rereg_traffic.py --server
    ip netns exec jk-h1-t1 tools/jakiro-run -- /usr/bin/python3 \\
        tests/rdma/pyverbs_rereg_traffic.py --connect 198.19.1.2

Each side has one CQ and two RC QPs, one in each of two PDs, connected pairwise. For each of
the seven combinations of CHANGE_TRANSLATION, CHANGE_PD and CHANGE_ACCESS the server registers
one page in PD 1 with local write and remote read, checks a SEND into it, keeps two receives
posted into it (as a server keeps its queue filled) and re-registers it: to three pages
elsewhere, to PD 2, to remote write as well. Where the receives it posted no longer name the
MR (a new range or PD), the client's next SEND must fail with IBV_WC_REM_OP_ERR and the
server's receive with a local error; both sides then bring their QPs back through RESET to RTS
(that QP's old completions go with RESET). Then, through the QP of the MR's PD, with the keys
and address the server reports after the rereg: a SEND lands in the MR, an RDMA WRITE (where
remote write was granted) lands past the old page, an RDMA READ returns the MR's bytes, and a
SEND from the MR reaches the client. Every byte is checked where it lands.

Exit status: 0 when everything was verified, 1 otherwise.
"""

import sys
import time

import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SGE, SendWR

from pyverbs_common import Failed, buffer, checker, connect, hear, rendezvous, say, two_sided_main

PORT = 7499
PAGE = 4096
MSG = 256
QP_ACCESS = e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_LOCAL_WRITE
BEFORE = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ
AFTER = BEFORE | e.IBV_ACCESS_REMOTE_WRITE
NAMES = {e.IBV_REREG_MR_CHANGE_TRANSLATION: "translation", e.IBV_REREG_MR_CHANGE_PD: "pd",
         e.IBV_REREG_MR_CHANGE_ACCESS: "access"}
WAIT_S = 10


def label(flags):
    return "+".join(n for f, n in NAMES.items() if flags & f)


def pattern(seed, n=MSG):
    return bytes((i * 29 + seed * 7 + 1) % 251 for i in range(n))


def next_wc(cq, what):
    """The CQ's next completion, whatever it is: the caller checks it is the one it expects
    (a stale one from an earlier life of a QP must fail the check)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        n, wcs = cq.poll(1)
        if n > 0:
            return wcs[0]
        time.sleep(0.0005)
    raise Failed(f"no completion for {what} within {WAIT_S} s")


def expect_wc(cq, check, wr_id, status, what):
    wc = next_wc(cq, what)
    check(wc.wr_id == wr_id and wc.status == status,
          f"{what}: wr_id {wc.wr_id} status {wc.status}; "
          f"expected wr_id {wr_id} status {status}")
    return wc


class Side:
    """One CQ, two PDs, an RC QP in each, connected to the peer's twins."""

    def __init__(self):
        name = next(d.name.decode() for d in get_device_list()
                    if d.name.decode().startswith("jakiro_"))
        self.ctx = Context(name=name)
        self.pds = [PD(self.ctx), PD(self.ctx)]
        self.cq = CQ(self.ctx, 64)
        cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)
        self.qps = [QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap))
                    for pd in self.pds]
        self.gid = str(self.ctx.query_gid(1, 0))
        self.mtu = self.ctx.query_port(1).active_mtu
        self.peer = None

    def hello(self):
        return {"qpns": [q.qp_num for q in self.qps], "gid": self.gid}

    def connect(self, peer, which=(0, 1)):
        self.peer = peer
        for i in which:
            connect(self.qps[i], peer["qpns"][i], peer["gid"], self.mtu, access=QP_ACCESS)

    def restate(self, i):
        """ERR -> RESET -> INIT -> RTR -> RTS, as rdma-core's tests bring a QP back."""
        self.qps[i].modify(QPAttr(qp_state=e.IBV_QPS_RESET), e.IBV_QP_STATE)
        self.connect(self.peer, (i,))

    def send(self, i, wr_id, addr, length, lkey, opcode=e.IBV_WR_SEND, remote=None):
        wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[SGE(addr, length, lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        if remote is not None:
            wr.set_wr_rdma(remote[1], remote[0])
        self.qps[i].post_send(wr)

    def recv(self, i, wr_id, addr, length, lkey):
        self.qps[i].post_recv(RecvWR(wr_id=wr_id, num_sge=1, sg=[SGE(addr, length, lkey)]))


def server(args):
    check = checker("pyverbs_rereg_traffic: server")
    side = Side()
    conn, f = rendezvous(args, PORT)
    say(f, **side.hello())
    side.connect(hear(f))
    small, small_addr = buffer(PAGE)  # the MR's first translation: one page
    large, large_addr = buffer(3 * PAGE)  # its second: three pages elsewhere
    for flags in range(1, 8):
        what = label(flags)
        small[:] = b"\0" * PAGE
        large[:] = b"\0" * (3 * PAGE)
        mr = MR(side.pds[0], PAGE, BEFORE, address=small_addr)
        # Before the rereg: a SEND lands in the MR through the QP of its PD.
        side.recv(0, 1, small_addr, MSG, mr.lkey)
        say(f, step="send")
        expect_wc(side.cq, check, 1, e.IBV_WC_SUCCESS, f"{what}: receive before the rereg")
        check(small[:MSG] == pattern(flags), f"{what}: the SEND before the rereg landed")
        # Two receives wait in the old registration; then the rereg (libibverbs wants access
        # 0 unless the access changes).
        side.recv(0, 2, small_addr + MSG, MSG, mr.lkey)
        side.recv(0, 3, small_addr + 2 * MSG, MSG, mr.lkey)
        moved = flags & e.IBV_REREG_MR_CHANGE_TRANSLATION
        new_pd = flags & e.IBV_REREG_MR_CHANGE_PD
        granted = flags & e.IBV_REREG_MR_CHANGE_ACCESS
        mr.rereg(flags, side.pds[1], large_addr, 3 * PAGE, AFTER if granted else 0)
        buf, addr, size = (large, large_addr, 3 * PAGE) if moved else (small, small_addr, PAGE)
        check(mr.buf == addr and mr.length == size,
              f"{what}: ibv_rereg_mr done; the MR covers {size} bytes at its "
              f"{'new' if moved else 'old'} address")
        stale = bool(moved or new_pd)
        say(f, step="send", stale=stale)
        if stale:
            wc = next_wc(side.cq, f"{what}: the receive the rereg left behind")
            check(wc.wr_id == 2 and wc.status in (e.IBV_WC_LOC_PROT_ERR, e.IBV_WC_LOC_QP_OP_ERR),
                  f"{what}: the receive posted into the old registration failed "
                  f"(status {wc.status})")
            check(small[MSG:] == b"\0" * (PAGE - MSG) and large[:] == b"\0" * (3 * PAGE),
                  f"{what}: the refused SEND left no byte behind")
            hear(f)  # the client saw its SEND fail and brought its QP back
            side.restate(0)  # the flushed receive 3 goes with RESET
            say(f, restated=True)
        else:
            expect_wc(side.cq, check, 2, e.IBV_WC_SUCCESS, f"{what}: receive after the rereg")
            check(buf[MSG:2 * MSG] == pattern(flags + 10),
                  f"{what}: a SEND into a receive posted before the rereg landed")
            say(f, step="send again")
            expect_wc(side.cq, check, 3, e.IBV_WC_SUCCESS, f"{what}: the other early receive")
            check(buf[2 * MSG:3 * MSG] == pattern(flags + 10),
                  f"{what}: the second early receive landed too")
        # Traffic through the QP of the MR's PD, with the keys and address the rereg left.
        i = 1 if new_pd else 0
        tail = size - MSG  # past the old page when the MR moved
        side.recv(i, 4, addr + tail, MSG, mr.lkey)
        buf[MSG:2 * MSG] = pattern(flags + 20)
        say(f, step="traffic", qp=i, addr=addr, rkey=mr.rkey, write=bool(granted))
        expect_wc(side.cq, check, 4, e.IBV_WC_SUCCESS, f"{what}: receive into the new MR")
        check(buf[tail:size] == pattern(flags + 30),
              f"{what}: a SEND landed at the end of the re-registered MR")
        hear(f)  # the client wrote and read
        if granted:
            check(buf[3 * MSG:4 * MSG] == pattern(flags + 40),
                  f"{what}: the RDMA WRITE the new rights allow landed")
        # The MR as a local source: the server SENDs from it.
        buf[4 * MSG:5 * MSG] = pattern(flags + 50)
        side.send(i, 5, addr + 4 * MSG, MSG, mr.lkey)
        expect_wc(side.cq, check, 5, e.IBV_WC_SUCCESS, f"{what}: the SEND from the MR")
        say(f, sent=True)
        hear(f)  # the client checked it
        mr.close()
        print(f"pyverbs_rereg_traffic: server: {what}: verified", flush=True)
    print("pyverbs_rereg_traffic: server: all verified", flush=True)


def client(args):
    check = checker("pyverbs_rereg_traffic: client")
    side = Side()
    conn, f = rendezvous(args, PORT)
    peer = hear(f)
    say(f, **side.hello())
    side.connect(peer)
    local, local_addr = buffer(4 * PAGE)
    mrs = [MR(pd, 4 * PAGE, e.IBV_ACCESS_LOCAL_WRITE, address=local_addr) for pd in side.pds]
    inbox = local_addr + 3 * PAGE
    for flags in range(1, 8):
        what = label(flags)
        # A receive kept posted, as a program keeps its queue filled.
        side.recv(0, 100, inbox, MSG, mrs[0].lkey)
        local[:MSG] = pattern(flags)
        hear(f)
        side.send(0, 10, local_addr, MSG, mrs[0].lkey)
        expect_wc(side.cq, check, 10, e.IBV_WC_SUCCESS, f"{what}: SEND before the rereg")
        stale = hear(f)["stale"]
        local[:MSG] = pattern(flags + 10)
        side.send(0, 11, local_addr, MSG, mrs[0].lkey)
        if stale:
            expect_wc(side.cq, check, 11, e.IBV_WC_REM_OP_ERR,
                      f"{what}: a SEND into a receive the rereg invalidated")
            side.restate(0)  # its flushed receive goes with RESET
            say(f, failed=True)
            hear(f)
        else:
            expect_wc(side.cq, check, 11, e.IBV_WC_SUCCESS, f"{what}: SEND after the rereg")
            hear(f)
            side.send(0, 12, local_addr, MSG, mrs[0].lkey)
            expect_wc(side.cq, check, 12, e.IBV_WC_SUCCESS, f"{what}: a second SEND")
        t = hear(f)
        i, addr, rkey = t["qp"], t["addr"], t["rkey"]
        local[:MSG] = pattern(flags + 30)
        side.send(i, 13, local_addr, MSG, mrs[i].lkey)
        expect_wc(side.cq, check, 13, e.IBV_WC_SUCCESS, f"{what}: SEND into the new MR")
        if t["write"]:
            local[MSG:2 * MSG] = pattern(flags + 40)
            side.send(i, 14, local_addr + MSG, MSG, mrs[i].lkey, e.IBV_WR_RDMA_WRITE,
                      (addr + 3 * MSG, rkey))
            expect_wc(side.cq, check, 14, e.IBV_WC_SUCCESS, f"{what}: RDMA WRITE")
        local[2 * MSG:3 * MSG] = b"\xee" * MSG
        side.send(i, 15, local_addr + 2 * MSG, MSG, mrs[i].lkey, e.IBV_WR_RDMA_READ,
                  (addr + MSG, rkey))
        expect_wc(side.cq, check, 15, e.IBV_WC_SUCCESS, f"{what}: RDMA READ")
        check(local[2 * MSG:3 * MSG] == pattern(flags + 20),
              f"{what}: the RDMA READ returned the re-registered MR's bytes")
        if stale:  # the receive posted at the start went with RESET, or waits on the other QP
            side.recv(i, 100, inbox, MSG, mrs[i].lkey)
        local[3 * PAGE:3 * PAGE + MSG] = b"\0" * MSG
        say(f, done=True)
        hear(f)  # the server sent from its MR
        expect_wc(side.cq, check, 100, e.IBV_WC_SUCCESS, f"{what}: receive of the MR's SEND")
        check(local[3 * PAGE:3 * PAGE + MSG] == pattern(flags + 50),
              f"{what}: the SEND from the re-registered MR carried its bytes")
        say(f, checked=True)
        print(f"pyverbs_rereg_traffic: client: {what}: verified", flush=True)
    print("pyverbs_rereg_traffic: client: all verified", flush=True)


def main():
    return two_sided_main("pyverbs_rereg_traffic", __doc__, server, client)


if __name__ == "__main__":
    sys.exit(main())
