#!/usr/bin/env python3
"""Writes the seed corpus of verbs_fuzzer.cc: valid operation sequences in its input layout
(HELLO, a PD, an MR on a sealed memfd, CQs, QPs on two vNICs, connected, receives posted, a work
request through the ring, polls), so the fuzzer starts deep instead of at the HELLO handshake.

    make_verbs_seeds.py OUT_DIR

The layout is verbs_fuzzer.cc's (see the top of that file); every multi-byte field is little-
endian. Object selectors: 0xFD is the requesting client's newest object of the kind, 0xFC its
second newest. MR selectors index the harness's MR list, which starts with the two victims'
MRs (0, 1), then the MRs the sequence registers, in order.
"""
import os
import struct
import sys

OP_REQUEST, OP_SEND, OP_RECV, OP_SRQ, OP_SCRIBBLE, OP_CQ, OP_POLL, OP_CONNECT, OP_RELEASE, \
    OP_MEMFD, OP_INJECT = range(11)
# Opcode selectors (the harness's `ops` table).
HELLO, QUERY, ALLOC_PD, DEALLOC_PD, REG_MR, DEREG_MR, CREATE_CQ, DESTROY_CQ, CREATE_QP, \
    MODIFY_QP, QUERY_QP, DESTROY_QP, CREATE_SRQ, MODIFY_SRQ, DESTROY_SRQ, QUERY_SRQ = range(16)
NEWEST, SECOND = 0xFD, 0xFC
RC, UC, UD = 0, 1, 2  # qp type selectors
# IBV_WR_*
WRITE, WRITE_IMM, SEND, SEND_IMM, READ, CAS, FADD = range(7)
SIGNALED, SOLICITED, INLINE = 2, 4, 8


def u8(v):
    return struct.pack('<B', v & 0xFF)


def u16(v):
    return struct.pack('<H', v & 0xFFFF)


def u32(v):
    return struct.pack('<I', v & 0xFFFFFFFF)


def u64(v):
    return struct.pack('<Q', v & 0xFFFFFFFFFFFFFFFF)


def req(client, sel, fields=b'', mut=0, fd_spec=0, fds=b''):
    return u8(OP_REQUEST) + u8(client) + u8(sel) + u8(mut) + u8(fd_spec) + fds + fields


def hello(c):
    return req(c, HELLO, u32(4242) + u8(0))


def alloc_pd(c):
    return req(c, ALLOC_PD, u8(0) + u8(0))


def reg_mr(c, pages=16, access=15, fd_kind=0, shape=0):
    # reg_mr takes one fd by default: kind, then size in pages - 1.
    fields = u8(NEWEST) + u8(access) + u8(shape) + u16(pages * 4096 - 1) + u8(0) + u16(0) + u8(0)
    return req(c, REG_MR, fields, fds=u8(fd_kind) + u8(pages - 1))


def create_cq(c, cqe=256):
    return req(c, CREATE_CQ, u8(0) + u16(cqe) + u8(0) + u8(0))


def create_qp(c, qp_type=RC, srq=False, wr=64):
    fields = u8(NEWEST) + u8(SECOND) + u8(NEWEST)
    fields += u8(1) + u8(NEWEST) if srq else u8(0)
    fields += u8(0) + u8(wr // 4) + u8(wr // 4) + u8(4) + u8(4) + u16(64) + u8(qp_type) + u8(0)
    return req(c, CREATE_QP, fields)


def create_srq(c, wr=64):
    return req(c, CREATE_SRQ, u8(NEWEST) + u8(wr // 4) + u8(0) + u8(4) + u8(0) + u8(0) + u8(0))


def modify_srq_limit(c, limit):
    return req(c, MODIFY_SRQ, u8(NEWEST) + u8(2) + u16(0) + u8(limit) + u8(0))


def connect(a, b, flags=0, psn=0x1234):
    return u8(OP_CONNECT) + u8(a) + u8(b) + u8(flags) + u32(psn)


def sge(mr, off=0, length=4096):
    return u8(mr) + u16(off) + u16(length)


def post_recv(ring, mr, wr_id=7, length=4096, off=0):
    return u8(OP_RECV) + u8(ring) + u32(wr_id) + u8(1) + sge(mr, off, length) + u8(0)


def post_srq(ring, mr, wr_id=9, length=4096):
    return u8(OP_SRQ) + u8(ring) + u32(wr_id) + u8(1) + sge(mr, 0, length) + u8(0)


def post_send(ring, opcode, local_mr, remote_mr, length=4096, flags=SIGNALED, dst=1,
              ud_qp=NEWEST, inline=b'', remote_off=0, how=0x10, compare=0, swap=1):
    f = opcode | 0x10  # remote address aligned to 8 (atomics)
    out = u8(OP_SEND) + u8(ring) + u8(f) + u32(0x1000 + opcode) + u8(flags) + u32(0xfeed)
    if flags & INLINE:
        out += u8(len(inline) // 4) + inline
    else:
        out += u8(1) + sge(local_mr, 0, length)
    out += sge(remote_mr, remote_off, 0)  # remote: the MR's key and an address in it
    out += u64(compare) + u64(swap) + u8(dst) + u8(ud_qp) + u8(how)
    return out


def poll(rounds=8, step=1, mode=0, drop=0):
    return u8(OP_POLL) + u8(rounds - 1) + u8(step) + u8(mode) + u32(drop)


def drain(ring):
    return u8(OP_CQ) + u8(ring) + u8(0) + u32(0)


def two_sides(qp_type=RC, srq=False, mr_pages=16, wr=64):
    """Client 0 on vNIC 0 and client 2 on vNIC 1, each with a PD, an MR, two CQs and a QP
    (QP rings 0 and 1), connected to each other. MRs: 2 (client 0) and 3 (client 2)."""
    out = b''
    for c in (0, 2):
        out += hello(c) + alloc_pd(c) + reg_mr(c, mr_pages) + create_cq(c) + create_cq(c)
        if srq:
            out += create_srq(c)
        out += create_qp(c, qp_type, srq, wr)
    out += connect(0, 1) + connect(1, 0)
    return out


def seeds():
    s = {}
    base = two_sides()
    s['rc_write'] = base + post_send(0, WRITE, 2, 3) + poll() + drain(0) + drain(1)
    s['rc_send'] = base + post_recv(1, 3) + post_send(0, SEND, 2, 3) + poll() + drain(0)
    s['rc_send_imm_solicited'] = (base + post_recv(1, 3) + u8(OP_CQ) + u8(1) + u8(3) + u32(2) +
                                  post_send(0, SEND_IMM, 2, 3, flags=SIGNALED | SOLICITED) + poll())
    s['rc_read'] = base + post_send(0, READ, 2, 3, length=8192) + poll() + drain(0)
    s['rc_atomics'] = (base + post_send(0, CAS, 2, 3, length=8) +
                       post_send(0, FADD, 2, 3, length=8) + poll())
    s['rc_write_imm'] = base + post_recv(1, 3) + post_send(0, WRITE_IMM, 2, 3) + poll()
    s['rc_inline'] = (base + post_recv(1, 3) +
                      post_send(0, SEND, 2, 3, flags=SIGNALED | INLINE, inline=b'x' * 64) + poll())
    # RNR: a SEND before any receive, then the receive, then time for the RNR wait.
    s['rc_rnr'] = (base + post_send(0, SEND, 2, 3) + poll(2) + post_recv(1, 3) +
                   poll(4, step=0x81))
    # Loss: every other frame dropped, then a jump that fires the ACK timeout.
    s['rc_loss'] = (base + post_send(0, WRITE, 2, 3, length=16384) +
                    poll(2, mode=1, drop=0x55555555) + poll(4, step=0x85))
    s['rc_reorder_dup'] = (base + post_send(0, WRITE, 2, 3, length=16384) + poll(2, mode=2) +
                           poll(2, mode=3))
    # Same host: the memory-to-memory shortcut.
    s['rc_same_host'] = (base + post_recv(1, 3) + post_send(0, SEND, 2, 3) +
                         post_send(0, WRITE, 2, 3) + post_send(0, READ, 2, 3) + poll(mode=8))
    # A remote access error: WRITE into the peer's MR with the victim's key (MR 1).
    s['rc_bad_rkey'] = base + post_send(0, WRITE, 2, 1) + poll()
    # The tenant lets go mid-flight.
    s['rc_release_midflight'] = (base + post_send(0, WRITE, 2, 3, length=16384) + poll(1) +
                                 u8(OP_RELEASE) + u8(2) + poll())
    # SQ producer far beyond the ring, and to exactly retired + capacity.
    s['rc_sq_overflow'] = (base + post_send(0, WRITE, 2, 3, how=0xE0) + u32(100000) + poll() +
                           post_send(0, SEND, 2, 3, how=0xC0) + poll(2))
    s['rc_modify_err'] = (base + post_send(0, WRITE, 2, 3) +
                          req(0, MODIFY_QP, u8(NEWEST) + u32(1) + u8(6) + bytes(33)) + poll())
    # The MR's memfd hole-punched and grown under jakirod's mapping, then used.
    s['memfd_punch'] = (base + u8(OP_MEMFD) + u8(0) + u8(2) + u32(0) + u32(3) +
                        u8(OP_MEMFD) + u8(0) + u8(1) + u32(3) + u32(0) +
                        post_send(0, WRITE, 2, 3) + poll())
    s['uc_write_send'] = (two_sides(UC) + post_recv(1, 3) + post_send(0, WRITE, 2, 3) +
                          post_send(0, SEND, 2, 3) + poll())
    s['ud_send'] = (two_sides(UD) + post_recv(1, 3) +
                    post_send(0, SEND, 2, 3, length=512, dst=1) + poll())
    s['srq_send'] = (two_sides(RC, srq=True) + modify_srq_limit(2, 1) + post_srq(0, 2) +
                     post_srq(1, 3) + post_srq(1, 3) + post_send(0, SEND, 2, 3) + poll())
    # Every object's query and destroy verbs, in an order that meets EBUSY first.
    life = two_sides(RC, srq=True) + post_send(0, WRITE, 2, 3) + poll(2)
    life += req(0, QUERY_QP, u8(NEWEST) + u32(0xFFFFFFFF)) + req(0, QUERY_SRQ, u8(NEWEST) + u8(0))
    life += req(0, QUERY, u8(0) + u8(0))
    life += req(0, DEALLOC_PD, u8(NEWEST) + u8(0)) + req(0, DESTROY_CQ, u8(NEWEST) + u8(0))
    life += req(0, DESTROY_SRQ, u8(NEWEST) + u8(0)) + req(0, DESTROY_QP, u8(NEWEST) + u8(0))
    life += req(0, DESTROY_SRQ, u8(NEWEST) + u8(0)) + req(0, DESTROY_CQ, u8(NEWEST) + u8(0))
    life += req(0, DESTROY_CQ, u8(SECOND) + u8(0)) + req(0, DEREG_MR, u8(NEWEST) + u8(0))
    life += req(0, DEALLOC_PD, u8(NEWEST) + u8(0)) + poll(2)
    s['lifecycle'] = life
    # Requests with hostile descriptors and sizes (each fd kind once).
    hostile = hello(0) + alloc_pd(0)
    for kind in range(14):
        hostile += reg_mr(0, 4, fd_kind=kind)
    hostile += req(0, CREATE_CQ, u8(1) + u16(16) + u8(0) + u8(0), fd_spec=0x90, fds=u8(10) + u8(0))
    hostile += req(0, CREATE_CQ, u8(1) + u16(16) + u8(0) + u8(0), fd_spec=0x90, fds=u8(11) + u8(0))
    hostile += req(0, QUERY, u8(0) + u8(0), mut=0x04) + u8(8)
    hostile += req(0, ALLOC_PD, u8(0) + u8(0), mut=0x02)
    s['hostile_fds'] = hostile
    # Crafted packets from the peer at a connected QP.
    s['inject'] = base + u8(OP_INJECT) + u8(0) + u8(0) + u16(40) + bytes([0x0A, 0, 0, 0] + [0] * 36)
    return s


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, data in seeds().items():
        with open(os.path.join(out, name), 'wb') as f:
            f.write(data)


if __name__ == '__main__':
    main()
