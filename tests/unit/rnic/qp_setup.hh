#pragma once
// What the RNIC's tests and its message benchmark do alike when they stand in for the shim: the
// requests that make a side's MR and CQs, the work requests they write into the SQ ring, the
// attributes that connect two QPs over the test's fabric, and their own mappings of the rings.
// Plain C++ (no GoogleTest), so that perf/ can use it.

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "verbs_abi/protocol.hh"
#include "verbs_abi/rings.hh"

namespace jakiro::rnic::test {

// The program's own view of a ring jakirod shares through `fd` (read and written, as the
// shim maps it).
template <class Ring>
Ring* map_shared(int fd, std::size_t bytes) {
    return static_cast<Ring*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
}

// Registers `bytes` of a region at `iova`, its address in the program too, with every access.
inline verbs_proto::reg_mr_request region_mr_request(uint32_t pd, uint64_t iova,
                                                     std::size_t bytes) {
    auto mr = verbs_proto::make_message<verbs_proto::reg_mr_request>(
        static_cast<uint16_t>(verbs_proto::opcode::reg_mr), 1);
    mr.pd_handle = pd;
    mr.access = verbs_proto::mr_access_all;
    mr.addr = iova;
    mr.iova = iova;
    mr.length = bytes;
    return mr;
}

inline verbs_proto::create_cq_request cq_request(uint32_t cqe) {
    auto cq = verbs_proto::make_message<verbs_proto::create_cq_request>(
        static_cast<uint16_t>(verbs_proto::opcode::create_cq), 1);
    cq.cqe = cqe;
    return cq;
}

// A QP of `type` on `pd` completing into `send_cq` and `recv_cq`, `depth` work requests of
// `sges` entries each way.
inline verbs_proto::create_qp_request qp_create_request(uint32_t pd, uint32_t send_cq,
                                                        uint32_t recv_cq, uint32_t depth,
                                                        uint32_t sges, uint8_t type) {
    auto r = verbs_proto::make_message<verbs_proto::create_qp_request>(
        static_cast<uint16_t>(verbs_proto::opcode::create_qp), 1);
    r.pd_handle = pd;
    r.send_cq = send_cq;
    r.recv_cq = recv_cq;
    r.max_send_wr = depth;
    r.max_recv_wr = depth;
    r.max_send_sge = sges;
    r.max_recv_sge = sges;
    r.qp_type = type;
    return r;
}

// A signaled one-SGE work request, as ibv_post_send writes it into the SQ ring.
inline verbs_proto::send_wqe wqe(uint64_t wr_id, ibv_wr_opcode op, uint64_t local, uint32_t length,
                                 uint32_t lkey, uint64_t remote = 0, uint32_t rkey = 0) {
    verbs_proto::send_wqe w{};
    w.wr_id = wr_id;
    w.opcode = op;
    w.send_flags = IBV_SEND_SIGNALED;
    w.num_sge = 1;
    w.sg[0] = {local, length, lkey};
    w.remote_addr = remote;
    w.rkey = rkey;
    return w;
}

// The address vector of the peer at IPv4 `ip` (host order): its IPv4-mapped GID.
inline ibv_ah_attr av_to(uint32_t ip) {
    ibv_ah_attr ah{};
    ah.is_global = 1;
    ah.port_num = 1;
    ah.grh.dgid.raw[10] = 0xff;
    ah.grh.dgid.raw[11] = 0xff;
    const uint32_t be = htonl(ip);
    std::memcpy(ah.grh.dgid.raw + 12, &be, 4);
    return ah;
}

// The address vector of the peer at IPv6 `ip`: the GID is the address, from GID index 1.
inline ibv_ah_attr av_to_ipv6(const std::array<uint8_t, 16>& ip, uint8_t traffic_class = 0,
                              uint32_t flow_label = 0, uint8_t hop_limit = 64) {
    ibv_ah_attr ah{};
    ah.is_global = 1;
    ah.port_num = 1;
    std::memcpy(ah.grh.dgid.raw, ip.data(), 16);
    ah.grh.sgid_index = 1;
    ah.grh.traffic_class = traffic_class;
    ah.grh.flow_label = flow_label;
    ah.grh.hop_limit = hop_limit;
    return ah;
}

// RTR towards QP `peer_qpn` at `peer_ip`, expecting `rq_psn` first: path MTU 1024, 16 reads
// in flight, the shortest RNR timer (the tests' clock is virtual).
inline ibv_qp_attr rtr_attr(uint32_t peer_qpn, uint32_t peer_ip, uint32_t rq_psn) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = IBV_MTU_1024;
    attr.dest_qp_num = peer_qpn;
    attr.rq_psn = rq_psn;
    attr.max_dest_rd_atomic = 16;
    attr.min_rnr_timer = 1;
    attr.ah_attr = av_to(peer_ip);
    return attr;
}

// RTS sending from `sq_psn` with 16 reads in flight.
inline ibv_qp_attr rts_attr(uint32_t sq_psn, uint8_t timeout, uint8_t retry_cnt,
                            uint8_t rnr_retry) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = timeout;
    attr.retry_cnt = retry_cnt;
    attr.rnr_retry = rnr_retry;
    attr.sq_psn = sq_psn;
    attr.max_rd_atomic = 16;
    return attr;
}

}  // namespace jakiro::rnic::test
