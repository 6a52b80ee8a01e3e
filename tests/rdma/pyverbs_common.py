"""What the single-process pyverbs scripts of tests/rdma share: the failure type, the check
that prints each verified step, private anonymous buffers, and connecting an RC QP to another
of the same vNIC (loopback through jakirod's engine). Imported from the scripts' own folder."""

import ctypes
import json
import mmap
import socket
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import GID, AHAttr, GlobalRoute
from pyverbs.qp import QPAttr


class Failed(Exception):
    pass


def checker(script):
    """check(cond, what): raises Failed(what), or prints "<script>: ok: <what>"."""
    def check(cond, what):
        if not cond:
            raise Failed(what)
        print(f"{script}: ok: {what}", flush=True)
    return check


def buffer(size):
    """Private anonymous pages and their address, as malloc'd memory is (the shim moves its
    pages onto a memfd; a MAP_SHARED mapping is already someone's file)."""
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    return m, ctypes.addressof(ctypes.c_char.from_buffer(m))


def connect(qp, remote_qpn, gid, mtu, access=0, retry_cnt=7):
    """RESET -> INIT -> RTR -> RTS towards `remote_qpn` at `gid` (PSNs 0, one READ/atomic in
    flight each way, RNR retried for ever)."""
    a = QPAttr(qp_state=e.IBV_QPS_INIT)
    a.pkey_index = 0
    a.port_num = 1
    a.qp_access_flags = access
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS)
    a = QPAttr(qp_state=e.IBV_QPS_RTR)
    a.path_mtu = mtu
    a.dest_qp_num = remote_qpn
    a.rq_psn = 0
    a.max_dest_rd_atomic = 1
    a.min_rnr_timer = 12
    a.ah_attr = AHAttr(gr=GlobalRoute(dgid=GID(gid), sgid_index=0), is_global=1, port_num=1)
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN |
              e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER)
    a = QPAttr(qp_state=e.IBV_QPS_RTS)
    a.sq_psn = 0
    a.timeout = 14
    a.retry_cnt = retry_cnt
    a.rnr_retry = 7
    a.max_rd_atomic = 1
    qp.modify(a, e.IBV_QP_STATE | e.IBV_QP_SQ_PSN | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT |
              e.IBV_QP_RNR_RETRY | e.IBV_QP_MAX_QP_RD_ATOMIC)


def rendezvous(args, port):
    """The TCP connection the two sides swap QP numbers and keys over: `--server` listens on
    `port`, a client (`--connect HOST`) connects, retrying while nobody listens yet (30 s)."""
    if args[0] == "--server":
        srv = socket.create_server(("", port))
        srv.settimeout(30)
        conn, _ = srv.accept()
        srv.close()
    else:
        deadline = time.monotonic() + 30
        while True:
            try:
                conn = socket.create_connection((args[1], port), timeout=30)
                break
            except ConnectionRefusedError:
                if time.monotonic() > deadline:
                    raise Failed(f"nobody listens on {args[1]}:{port} within 30 s")
                time.sleep(0.2)
    conn.settimeout(30)
    return conn, conn.makefile("rw")


def say(f, **kw):
    f.write(json.dumps(kw) + "\n")
    f.flush()


def hear(f):
    line = f.readline()
    if not line:
        raise Failed("the peer hung up")
    return json.loads(line)


def wait_wc(cq, what):
    """The next completion on `cq`, polled for up to 10 s."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        n, wcs = cq.poll(1)
        if n > 0:
            return wcs[0]
        time.sleep(0.001)
    raise Failed(f"no completion for {what} within 10 s")


def two_sided_main(name, doc, server, client):
    """A two-host program's main: `--server` or `--connect HOST`; 1 with the failure, 2 on bad
    arguments."""
    args = sys.argv[1:]
    if not args or args[0] not in ("--server", "--connect") or \
            (args[0] == "--connect" and len(args) != 2):
        print(doc, file=sys.stderr)
        return 2
    try:
        (server if args[0] == "--server" else client)(args)
    except Failed as exc:
        print(f"{name}: FAILED: {exc}", flush=True)
        return 1
    return 0
