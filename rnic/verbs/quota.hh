#pragma once
// A vNIC's RDMA quota (YAML `vnics[].rdma`, docs/configuration.md): how much of jakirod one
// tenant's verbs objects may hold, so that no tenant can exhaust the host's memory, mappings or the
// engine's tables for the others. vnic_resources enforces it (EDQUOT beyond) and takes a new
// one live (set_quota: lowering refuses new objects, never destroys existing ones); HELLO and
// QUERY advertise device limits no larger than it allows (clamp_to_quota).
//
// Plain values; std only.

#include <algorithm>
#include <cstdint>

#include "rnic/queues/host_reserve.hh"
#include "verbs_abi/protocol.hh"

namespace jakiro::verbs {

struct vnic_quota {
    // QPs of any transport held at once (ibv_device_attr.max_qp is 1024).
    uint32_t max_qps = 1024;
    uint32_t max_pds = 1024;
    // MRs held at once: each is one mapping in jakirod, and a process has ~65 530
    // (vm.max_map_count) for every vNIC of the host together.
    uint32_t max_mrs = 1024;
    // Memory windows held at once (keys of the MR table, whose capacity they share).
    uint32_t max_mws = 1024;
    // Bytes registered at once, summed over the MRs (overlapping MRs count twice). jakirod
    // maps them; pages the engine writes into a hole of the memfd are allocated to jakirod.
    uint64_t max_mr_bytes = uint64_t{4} << 30;
    // CQ entries held at once, summed over the CQs as allocated (each CQ's ring is a power of
    // two of 64-byte entries, in memory jakirod allocates): 2^18 entries = 16 MiB.
    uint64_t max_cqes = uint64_t{1} << 18;
    // CQs held at once (each one mapping in jakirod).
    uint32_t max_cqs = 1024;
    // SRQs held at once (each one mapping and a ring of 512-byte WQE slots).
    uint32_t max_srqs = 256;
    // Work-queue slots held at once, summed over every SQ, RQ and SRQ ring as allocated (a
    // power of two each; a QP on an SRQ has a one-slot RQ). A slot is 512 bytes of ring plus,
    // for a send slot, ~1 KiB of engine state: 2^17 slots stay under ~200 MiB.
    uint64_t max_wqes = uint64_t{1} << 17;
    // Verbs connections (contexts, device scans) of the vNIC at once; the channel server
    // enforces it.
    uint32_t max_contexts = 64;
    // rdma_cm (rnic/rdmacm/cm_agent.hh, agent_limits): ids held at once (CREATE_ID beyond is
    // EDQUOT); requests from peers its applications have not taken yet, so that peers never
    // hold more than these of its ids; REQs waiting for a listener to appear.
    uint32_t max_cm_ids = 1024;
    uint32_t max_cm_backlog = 128;
    uint32_t max_cm_held_reqs = 16;
    // MADs queued on the vNIC's QP1 each way (rnic/gsi_port.hh), 256 bytes and a little each.
    uint32_t max_qp1_queue = 256;
};

// Descriptors one verbs connection holds in jakirod: the connection, its async event channel
// and its rdma_cm event channel (rnic/verbs/channel_server.cc).
constexpr uint64_t descriptors_per_context = 3;

// The most of the host's mappings and descriptors a vNIC's quota lets its objects hold: an MR,
// a QP's ring and an SRQ's ring are one mapping each, a CQ two (its ring, and the header page of
// the ring a resize replaced, kept until the next one: cq_ring::retire); a connection holds
// descriptors_per_context descriptors and a CQ its completion channel's. The host reserve
// guarantees each vNIC this much when the host has it for all (host_reserve.hh).
constexpr host_amounts host_demand(const vnic_quota& q) {
    return {uint64_t{q.max_mrs} + 2 * uint64_t{q.max_cqs} + q.max_qps + q.max_srqs,
            uint64_t{q.max_cqs} + descriptors_per_context * q.max_contexts};
}

// The largest power of two <= n (0 for 0): ring sizes a quota of n slots always admits.
constexpr uint64_t floor_power_of_two(uint64_t n) {
    uint64_t p = 1;
    if (n == 0) {
        return 0;
    }
    while (p <= n / 2) {
        p <<= 1;
    }
    return p;
}

// What ibv_query_device should say under `q`: the engine's limits, lowered where the quota is
// smaller, so a program that sizes itself by them is not refused with EDQUOT on an empty vNIC.
inline void clamp_to_quota(verbs_proto::limits& l, const vnic_quota& q) {
    auto clamp32 = [](uint32_t& limit, uint64_t quota) {
        limit = static_cast<uint32_t>(std::min<uint64_t>(limit, quota));
    };
    clamp32(l.max_qp, q.max_qps);
    clamp32(l.max_pd, q.max_pds);
    clamp32(l.max_mr, q.max_mrs);
    l.max_mr_size = std::min<uint64_t>(l.max_mr_size, q.max_mr_bytes);
    clamp32(l.max_cq, q.max_cqs);
    clamp32(l.max_cqe, floor_power_of_two(q.max_cqes));
    clamp32(l.max_srq, q.max_srqs);
    // A QP with a full send and a full receive queue fits, as does one full SRQ.
    clamp32(l.max_qp_wr, floor_power_of_two(q.max_wqes / 2));
    clamp32(l.max_srq_wr, floor_power_of_two(q.max_wqes));
}

// The windows ibv_query_device reports (device_attrs.max_mw), lowered to the quota likewise.
inline uint32_t clamp_max_mw(uint32_t engine_max_mw, const vnic_quota& q) {
    return std::min(engine_max_mw, q.max_mws);
}

}  // namespace jakiro::verbs
