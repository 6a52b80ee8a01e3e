#!/usr/bin/python3
"""pyverbs_qp_ex: ibv_create_qp_ex as rdma-core's own QP tests call it, then traffic across hosts.

    ip netns exec jk-h1-t1 tools/jakiro-run -- /usr/bin/python3 tests/rdma/pyverbs_qp_ex.py --local
    ip netns exec jk-h2-t2 tools/jakiro-run -- /usr/bin/python3 tests/rdma/pyverbs_qp_ex.py --server
    ip netns exec jk-h1-t1 tools/jakiro-run -- /usr/bin/python3 tests/rdma/pyverbs_qp_ex.py \\
        --connect 198.19.1.2

The init attributes are built the way rdma-core's tests/utils.py builds them from the device's
own ibv_query_device(_ex) answers: caps of max_qp_wr / 8 work requests and max_sge / 2 SGEs,
comp_mask PD | CREATE_FLAGS with no creation flag (the device is not a Mellanox one), and for
QPs that use the ibv_wr_* API, SEND_OPS_FLAGS as well.

--local: an RC, a UC and a UD QP each created with ibv_create_qp_ex, without and with a QPAttr
(pyverbs then moves RC and UC to INIT, UD to RTS); ibv_query_qp reports the state and at least
the caps asked for; a UD QP walks INIT (qkey) -> RTR -> RTS (sq_psn) -> RESET with each value
queried back, as rdma-core's test_modify_ud_qp does. What the device does not advertise
(creation flags, TSO, RSS, XRC) is refused with EOPNOTSUPP.

--server / --connect: each side makes an RC, a UC and a UD QP with ibv_create_qp_ex from the
device's limits, moves them to RTS, and the client sends one message on each (RC through the
ibv_wr_* API of its ibv_qp_ex); the server checks every byte and completion.

Exit status: 0 when everything was verified, 1 otherwise.
"""

import errno
import sys

import pyverbs.enums as e
from pyverbs.addr import AH, AHAttr, GID, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPEx, QPInitAttrEx
from pyverbs.wr import RecvWR, SGE, SendWR

from pyverbs_common import Failed, checker, hear, rendezvous, say, wait_wc

PORT = 7495
QKEY = 0x11111111
GRH = 40  # a UD receive starts with the GRH
MSG = 1024
NAMES = {e.IBV_QPT_RC: "RC", e.IBV_QPT_UC: "UC", e.IBV_QPT_UD: "UD"}
check = checker("pyverbs_qp_ex")


def open_device():
    name = next(d.name.decode() for d in get_device_list()
                if d.name.decode().startswith("jakiro_"))
    return Context(name=name)


def init_attr_from_device(ctx, pd, cq, qpt, send_ops=0, cap=None):
    """What rdma-core's random_qp_init_attr_ex gives, at the top of its ranges."""
    attr = ctx.query_device()
    if cap is None:
        cap = QPCap(max_send_wr=attr.max_qp_wr // 8, max_recv_wr=attr.max_qp_wr // 8,
                    max_send_sge=attr.max_sge // 2, max_recv_sge=attr.max_sge // 2)
    mask = e.IBV_QP_INIT_ATTR_PD | e.IBV_QP_INIT_ATTR_CREATE_FLAGS
    if send_ops:
        mask |= e.IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
    qia = QPInitAttrEx(qp_type=qpt, cap=cap, sq_sig_all=1, comp_mask=mask, create_flags=0,
                       max_tso_header=0, send_ops_flags=send_ops)
    qia.send_cq = cq
    qia.recv_cq = cq
    qia.pd = pd
    return qia


def verify_caps(qp, asked, state, what):
    attr, init = qp.query(e.IBV_QP_STATE | e.IBV_QP_CAP)
    check(attr.qp_state == state and attr.cur_qp_state == state,
          f"{what}: ibv_query_qp says state {attr.qp_state}")
    got = init.cap
    check(got.max_send_wr >= asked.max_send_wr and got.max_recv_wr >= asked.max_recv_wr and
          got.max_send_sge >= asked.max_send_sge and got.max_recv_sge >= asked.max_recv_sge and
          got.max_inline_data >= asked.max_inline_data,
          f"{what}: caps {got.max_send_wr}/{got.max_recv_wr} WRs, {got.max_send_sge}/"
          f"{got.max_recv_sge} SGEs cover the {asked.max_send_wr}/{asked.max_recv_wr}, "
          f"{asked.max_send_sge}/{asked.max_recv_sge} asked")


def expect_eopnotsupp(what, make):
    try:
        qp = make()
    except PyverbsRDMAError as exc:
        check(exc.error_code == errno.EOPNOTSUPP, f"{what} refused with EOPNOTSUPP")
        return
    qp.close()
    raise Failed(f"{what} was created although the device does not advertise it")


def local():
    ctx = open_device()
    attr = ctx.query_device()
    attr_ex = ctx.query_device_ex()
    check(attr.max_qp_wr >= 8 and attr.max_sge >= 2,
          f"the device advertises max_qp_wr {attr.max_qp_wr}, max_sge {attr.max_sge}")
    pd = PD(ctx)
    cq = CQ(ctx, 100, None, None, 0)
    for qpt in (e.IBV_QPT_RC, e.IBV_QPT_UC, e.IBV_QPT_UD):
        name = NAMES[qpt]
        for with_attr in (False, True):
            for send_ops in (0, e.IBV_QP_EX_WITH_SEND):
                qia = init_attr_from_device(ctx, pd, cq, qpt, send_ops)
                asked = QPCap(qia.cap.max_send_wr, qia.cap.max_recv_wr, qia.cap.max_send_sge,
                              qia.cap.max_recv_sge)
                what = (f"{name} QP by ibv_create_qp_ex {'with' if with_attr else 'without'} "
                        f"a QPAttr{', with send ops' if send_ops else ''}")
                try:
                    qp = QP(ctx, qia, QPAttr(port_num=1)) if with_attr else QP(ctx, qia)
                except PyverbsRDMAError as exc:
                    raise Failed(f"{what}: {exc}") from exc
                want = e.IBV_QPS_RESET
                if with_attr:
                    want = e.IBV_QPS_RTS if qpt == e.IBV_QPT_UD else e.IBV_QPS_INIT
                check(qp.qp_state == want, f"{what}: created, in state {qp.qp_state}")
                verify_caps(qp, asked, want, what)
                qp.close()

    # rdma-core's test_modify_ud_qp, on an extended QP.
    qp = QP(ctx, init_attr_from_device(ctx, pd, cq, e.IBV_QPT_UD))
    qa = QPAttr()
    qa.qkey = 0x123
    qp.to_init(qa)
    got, _ = qp.query(e.IBV_QP_QKEY)
    check(got.qkey == 0x123, "extended UD QP: INIT with qkey 0x123, queried back")
    qp.to_rtr(qa)
    qa.sq_psn = 0x45
    qp.to_rts(qa)
    got, _ = qp.query(e.IBV_QP_SQ_PSN)
    check(got.sq_psn == 0x45, "extended UD QP: RTS with sq_psn 0x45, queried back")
    qa.qp_state = e.IBV_QPS_RESET
    qp.modify(qa, e.IBV_QP_STATE)
    check(qp.qp_state == e.IBV_QPS_RESET, "extended UD QP: back to RESET")
    qp.close()

    # Not advertised, refused at creation.
    check(attr_ex.tso_caps.max_tso == 0 and attr_ex.rss_caps.max_rwq_indirection_tables == 0 and
          attr_ex.raw_packet_caps == 0 and attr.max_mcast_grp == 0 and
          not attr.device_cap_flags & e.IBV_DEVICE_XRC,
          "the device advertises no TSO, RSS, raw packet offloads, multicast or XRC")
    for flag in (e.IBV_QP_CREATE_BLOCK_SELF_MCAST_LB, e.IBV_QP_CREATE_SCATTER_FCS,
                 e.IBV_QP_CREATE_CVLAN_STRIPPING, e.IBV_QP_CREATE_SOURCE_QPN,
                 e.IBV_QP_CREATE_PCI_WRITE_END_PADDING):
        qia = init_attr_from_device(ctx, pd, cq, e.IBV_QPT_UD)
        qia.create_flags = flag
        qia.source_qpn = 0x1234
        expect_eopnotsupp(f"creation flag {flag:#x}", lambda: QP(ctx, qia))
    qia = init_attr_from_device(ctx, pd, cq, e.IBV_QPT_UD)
    qia.comp_mask |= e.IBV_QP_INIT_ATTR_MAX_TSO_HEADER
    qia.max_tso_header = 64
    expect_eopnotsupp("a TSO header", lambda: QP(ctx, qia))
    print("pyverbs_qp_ex: local: all verified", flush=True)


# ---------------------------------------------------------------- across hosts


def global_ah(gid):
    return AHAttr(gr=GlobalRoute(dgid=GID(gid), sgid_index=0), is_global=1, port_num=1)


def to_rts(qp, qpt, remote_qpn, gid, mtu):
    """RESET (or INIT, where pyverbs moved it) -> INIT -> RTR -> RTS with each type's own
    attribute masks."""
    if qp.qp_state == e.IBV_QPS_RESET:
        a = QPAttr(qp_state=e.IBV_QPS_INIT)
        a.pkey_index = 0
        a.port_num = 1
        mask = e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT
        if qpt == e.IBV_QPT_UD:
            a.qkey = QKEY
            mask |= e.IBV_QP_QKEY
        else:
            a.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE
            mask |= e.IBV_QP_ACCESS_FLAGS
        qp.modify(a, mask)
    a = QPAttr(qp_state=e.IBV_QPS_RTR)
    mask = e.IBV_QP_STATE
    if qpt != e.IBV_QPT_UD:
        a.path_mtu = mtu
        a.dest_qp_num = remote_qpn
        a.rq_psn = 0
        a.ah_attr = global_ah(gid)
        mask |= e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN | e.IBV_QP_RQ_PSN
    if qpt == e.IBV_QPT_RC:
        a.max_dest_rd_atomic = 1
        a.min_rnr_timer = 12
        mask |= e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER
    qp.modify(a, mask)
    a = QPAttr(qp_state=e.IBV_QPS_RTS)
    a.sq_psn = 0
    mask = e.IBV_QP_STATE | e.IBV_QP_SQ_PSN
    if qpt == e.IBV_QPT_RC:
        a.timeout = 14
        a.retry_cnt = 7
        a.rnr_retry = 7
        a.max_rd_atomic = 1
        mask |= (e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY |
                 e.IBV_QP_MAX_QP_RD_ATOMIC)
    qp.modify(a, mask)
    got, _ = qp.query(e.IBV_QP_STATE)
    check(got.qp_state == e.IBV_QPS_RTS, f"{NAMES[qpt]} QP {qp.qp_num:#x} in RTS")


def setup():
    ctx = open_device()
    pd = PD(ctx)
    qps = {}
    for qpt in (e.IBV_QPT_RC, e.IBV_QPT_UC, e.IBV_QPT_UD):
        cq = CQ(ctx, 64, None, None, 0)
        ops = e.IBV_QP_EX_WITH_SEND if qpt == e.IBV_QPT_RC else 0
        qia = init_attr_from_device(ctx, pd, cq, qpt, ops)
        try:
            # RC through pyverbs' QPEx (moved to INIT by pyverbs), UC and UD as plain QPs.
            qp = QPEx(ctx, qia, QPAttr(port_num=1)) if ops else QP(ctx, qia)
        except PyverbsRDMAError as exc:
            raise Failed(f"ibv_create_qp_ex of the {NAMES[qpt]} QP: {exc}") from exc
        print(f"pyverbs_qp_ex: ok: {NAMES[qpt]} QP {qp.qp_num:#x} created by ibv_create_qp_ex "
              f"from the device's limits ({qia.cap.max_send_wr} WRs, {qia.cap.max_send_sge} "
              f"SGEs)", flush=True)
        qps[qpt] = (qp, cq)
    mr = MR(pd, 3 * (GRH + MSG), e.IBV_ACCESS_LOCAL_WRITE)
    return ctx, pd, qps, mr, str(ctx.query_gid(1, 0)), ctx.query_port(1).active_mtu


def payload(qpt):
    return bytes((i * 7 + qpt * 13) % 251 for i in range(MSG))


def server(args):
    ctx, pd, qps, mr, gid, mtu = setup()
    mr.write(b"\0" * (3 * (GRH + MSG)), 3 * (GRH + MSG), 0)
    conn, f = rendezvous(args, PORT)
    say(f, gid=gid, qpns={str(t): qp.qp_num for t, (qp, _) in qps.items()})
    peer = hear(f)
    for i, (qpt, (qp, cq)) in enumerate(qps.items()):
        to_rts(qp, qpt, peer["qpns"][str(qpt)], peer["gid"], mtu)
        off = i * (GRH + MSG)
        length = GRH + MSG if qpt == e.IBV_QPT_UD else MSG
        qp.post_recv(RecvWR(wr_id=qpt, num_sge=1, sg=[SGE(mr.buf + off, length, mr.lkey)]))
    say(f, ready=True)
    for i, (qpt, (qp, cq)) in enumerate(qps.items()):
        wc = wait_wc(cq, f"the {NAMES[qpt]} receive")
        check(wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_RECV and
              wc.wr_id == qpt and wc.byte_len == MSG + (GRH if qpt == e.IBV_QPT_UD else 0),
              f"{NAMES[qpt]}: the receive completed, {wc.byte_len} bytes")
        off = i * (GRH + MSG) + (GRH if qpt == e.IBV_QPT_UD else 0)
        check(mr.read(MSG, off) == payload(qpt), f"{NAMES[qpt]}: every byte arrived as sent")
        if qpt == e.IBV_QPT_UD:
            check(wc.src_qp == peer["qpns"][str(qpt)], "UD: the source QPN is the client's")
    say(f, done=True)
    print("pyverbs_qp_ex: server: all verified", flush=True)


def client(args):
    ctx, pd, qps, mr, gid, mtu = setup()
    conn, f = rendezvous(args, PORT)
    peer = hear(f)
    say(f, gid=gid, qpns={str(t): qp.qp_num for t, (qp, _) in qps.items()})
    for qpt, (qp, _) in qps.items():
        to_rts(qp, qpt, peer["qpns"][str(qpt)], peer["gid"], mtu)
    hear(f)  # the server's QPs are in RTS, its receives posted
    ah = AH(pd, attr=global_ah(peer["gid"]))
    for i, (qpt, (qp, cq)) in enumerate(qps.items()):
        off = i * (GRH + MSG)
        mr.write(payload(qpt), MSG, off)
        sge = SGE(mr.buf + off, MSG, mr.lkey)
        if qpt == e.IBV_QPT_RC:
            qp.wr_start()
            qp.wr_id = qpt
            qp.wr_flags = e.IBV_SEND_SIGNALED
            qp.wr_send()
            qp.wr_set_sge(sge)
            qp.wr_complete()
        else:
            wr = SendWR(wr_id=qpt, opcode=e.IBV_WR_SEND, num_sge=1, sg=[sge],
                        send_flags=e.IBV_SEND_SIGNALED)
            if qpt == e.IBV_QPT_UD:
                wr.set_wr_ud(ah, peer["qpns"][str(qpt)], QKEY)
            qp.post_send(wr)
        wc = wait_wc(cq, f"the {NAMES[qpt]} send")
        check(wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_SEND and wc.wr_id == qpt,
              f"{NAMES[qpt]}: the SEND of {MSG} bytes completed")
    hear(f)
    print("pyverbs_qp_ex: client: all verified", flush=True)


def main():
    args = sys.argv[1:]
    if not args or args[0] not in ("--local", "--server", "--connect") or \
            (args[0] == "--connect" and len(args) != 2):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        {"--local": lambda: local(), "--server": lambda: server(args),
         "--connect": lambda: client(args)}[args[0]]()
    except (Failed, PyverbsRDMAError) as exc:
        print(f"pyverbs_qp_ex: FAILED: {exc}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
