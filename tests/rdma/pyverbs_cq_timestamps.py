#!/usr/bin/python3
"""pyverbs_cq_timestamps: completion timestamps through rdma-core's own Python bindings.

    ip netns exec jk-h1-t1 tools/jakiro-run -- /usr/bin/python3 tests/rdma/pyverbs_cq_timestamps.py

One process, one vNIC, two RC QPs connected to each other (loopback). The device advertises its
clock (ibv_query_device_ex: hca_core_clock, completion_timestamp_mask), ibv_query_rt_values_ex
reads it, and an extended CQ created with IBV_WC_EX_WITH_COMPLETION_TIMESTAMP and _WALLCLOCK
gets both stamps on every completion of real traffic, each between the clock read before the
work was posted and the clock read after it was polled. A CQ that did not ask reads 0; the flags
jakirod cannot honour (CVLAN, flow tag) are refused at creation with EOPNOTSUPP.

Exit status: 0 when everything was verified, 1 otherwise.
"""

import errno
import sys
import time

import pyverbs.enums as e
from pyverbs.cq import CQEX, CqInitAttrEx, PollCqAttr
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

from pyverbs_common import Failed, buffer, checker, connect

check = checker("pyverbs_cq_timestamps")

SIZE = 4096
MSGS = 8
POLL_S = 10.0
STANDARD = (e.IBV_WC_EX_WITH_BYTE_LEN | e.IBV_WC_EX_WITH_IMM | e.IBV_WC_EX_WITH_QP_NUM |
            e.IBV_WC_EX_WITH_SRC_QP | e.IBV_WC_EX_WITH_SLID | e.IBV_WC_EX_WITH_SL |
            e.IBV_WC_EX_WITH_DLID_PATH_BITS)
STAMPS = e.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | e.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK


def mono_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def raw_clock_ns(ctx):
    """ibv_query_rt_values_ex's raw clock, in ns (pyverbs returns (tv_sec, tv_nsec))."""
    v = ctx.query_rt_values_ex()
    if isinstance(v, tuple):
        return v[0] * 1_000_000_000 + v[1]
    return int(v)


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
            out.append({"wr_id": cq.wr_id, "status": cq.status, "ts": cq.read_timestamp(),
                        "wallclock": cq.read_completion_wallclock_ns()})
            if len(out) == n or cq.poll_next() != 0:
                break
        cq.end_poll()
    for c in out:
        if c["status"] != e.IBV_WC_SUCCESS:
            raise Failed(f"completion with status {c['status']}: {c}")
    return out


def main():
    names = [d.name.decode() for d in get_device_list()]
    name = next((n for n in names if n.startswith("jakiro_")), None)
    if name is None:
        raise Failed(f"no jakiro device in {names}")
    ctx = Context(name=name)
    attr = ctx.query_device_ex()
    check(attr.hca_core_clock == 1_000_000, f"hca_core_clock {attr.hca_core_clock} kHz (1 GHz)")
    check(attr.completion_timestamp_mask != 0,
          f"completion_timestamp_mask {attr.completion_timestamp_mask:#x}")
    before = mono_ns()
    raw = raw_clock_ns(ctx)
    after = mono_ns()
    check(before <= raw <= after, "ibv_query_rt_values_ex reads the device clock")

    for refused, what in ((e.IBV_WC_EX_WITH_CVLAN, "CVLAN"),
                          (e.IBV_WC_EX_WITH_FLOW_TAG, "flow tag")):
        try:
            CQEX(ctx, CqInitAttrEx(cqe=8, wc_flags=STANDARD | refused))
            raise Failed(f"a CQ with {what} was created")
        except PyverbsRDMAError as err:
            check(err.error_code == errno.EOPNOTSUPP,
                  f"{what} refused at creation with EOPNOTSUPP ({err.error_code})")

    pd = PD(ctx)
    gid = str(ctx.query_gid(1, 0))
    mtu = ctx.query_port(1).active_mtu
    stamped = CQEX(ctx, CqInitAttrEx(cqe=4 * MSGS, wc_flags=STANDARD | STAMPS))
    plain = CQEX(ctx, CqInitAttrEx(cqe=4 * MSGS, wc_flags=STANDARD))
    cap = QPCap(max_send_wr=MSGS, max_recv_wr=MSGS, max_send_sge=1, max_recv_sge=1)
    sender = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=stamped, rcq=stamped, cap=cap))
    receiver = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=plain, rcq=plain, cap=cap))
    connect(sender, receiver.qp_num, gid, mtu)
    connect(receiver, sender.qp_num, gid, mtu)
    mem, addr = buffer(SIZE)
    mr = MR(pd, SIZE, e.IBV_ACCESS_LOCAL_WRITE, address=addr)
    for i in range(MSGS):
        receiver.post_recv(RecvWR(wr_id=100 + i, num_sge=1,
                                  sg=[SGE(addr + SIZE // 2 + i * 64, 64, mr.lkey)]))

    mono_before = mono_ns()
    real_before = time.time_ns()
    for i in range(MSGS):
        sender.post_send(SendWR(wr_id=i, opcode=e.IBV_WR_SEND, num_sge=1,
                                sg=[SGE(addr + i * 64, 64, mr.lkey)],
                                send_flags=e.IBV_SEND_SIGNALED))
    sends = poll(stamped, MSGS)
    receives = poll(plain, MSGS)
    mono_after = mono_ns()
    real_after = time.time_ns()
    check([c["wr_id"] for c in sends] == list(range(MSGS)), f"{MSGS} SENDs completed")
    check(all(mono_before <= c["ts"] <= mono_after for c in sends),
          "every completion_ts lies between the device clock before posting and after polling")
    check(all(real_before <= c["wallclock"] <= real_after for c in sends),
          "every completion_wallclock_ns lies between the wall clock before and after")
    stamps = [c["ts"] for c in sends]
    check(stamps == sorted(stamps), "completion timestamps never go back")
    check(all(c["ts"] == 0 and c["wallclock"] == 0 for c in receives),
          "a CQ that did not ask for timestamps reads 0")
    print("pyverbs_cq_timestamps: all verified", flush=True)


if __name__ == "__main__":
    try:
        main()
    except (Failed, PyverbsRDMAError) as err:
        print(f"pyverbs_cq_timestamps: FAILED: {err}", flush=True)
        sys.exit(1)
    sys.exit(0)
