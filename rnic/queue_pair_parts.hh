#pragma once
// What the parts of queue_pair (queue_pair.cc, requester.cc, completer.cc, responder.cc,
// unreliable.cc, local_path.cc, dcqcn.cc) share: the window and ACK constants, the WQE predicates,
// gather and scatter over SGE lists, the atomic operations, and DCQCN's starting point. Private to
// those files; nothing else includes it.

#include <infiniband/verbs.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "qos/rate_control.hh"
#include "qos/rdma_class.hh"
#include "verbs_abi/protocol.hh"

namespace jakiro::rnic::queue_pair_parts {

namespace proto = verbs_proto;

// Unacknowledged packets a requester keeps in flight per QP: enough to cover the RTT of a
// software path on a shared host, where a poll loop that loses its core for tens of
// milliseconds holds the ACKs back (1024 packets, 43 ms at 27 MB/s, left a QP idle several
// times a second on two cores, and its share went to TCP). Half a hand-off ring
// (dataplane/worker/handoff.hh): with 4096 one QP arriving from the fabric filled a
// descheduled worker's ring and lost packets. Packets in flight are in rings and the kernel's
// queues, not held by the requester (a retransmission rereads the MR), so one QP still cannot
// drain the mbuf pool.
inline constexpr uint32_t send_window_packets = 2048;
// The requester asks for an ACK at least every ack_request_interval packets and once a packet
// sent without asking is ack_request_gap_ns old, so the window opens long before it fills
// (an eighth of it) and a slow (paced, shaped) stream is acknowledged as promptly as a single
// message, far within any retransmit timeout a program sets. Between those, a run of plain
// WRITEs asks only when nothing ready follows: one ACK per four 64 KiB WRITEs at path MTU 1024
// instead of one each (each ACK is a message through the uplink on both hosts).
inline constexpr uint32_t ack_request_interval = 256;
inline constexpr uint64_t ack_request_gap_ns = 100'000;
// READs the responder queues beyond max_dest_rd_atomic (re-executed duplicates).
inline constexpr std::size_t read_job_slack = 4;
// What a UD receive buffer holds before the payload: the GRH, or on RoCE v2 its 40-byte area
// (IB spec 11.4.1.2, and what every RoCE v2 NIC delivers): the IPv6 header whole, or the IPv4
// header in its last 20 bytes.
inline constexpr uint32_t ud_grh_bytes = 40;
// What RoCE NICs (mlx5's CQE l3 header type) report in a UD receive's wc.sl: the network
// header the datagram came with, 0 IB GRH, 1 RoCE v2 over IPv6, 2 RoCE v2 over IPv4. UCX
// (uct_ud_iface_check_grh) reads it to find the destination: with 2 the IPv4 address at bytes
// 36-39 of the GRH area, otherwise bytes 24-39 as a GID, which would drop every datagram.
inline constexpr uint8_t ud_network_header_roce_v2_ipv6 = 1;
inline constexpr uint8_t ud_network_header_roce_v2_ipv4 = 2;

// Copies `len` bytes from position `offset` of a gather list into `out`.
inline void gather(const std::byte* const* data, const uint32_t* lens, uint8_t n, uint64_t offset,
                   uint8_t* out, uint32_t len) {
    for (uint8_t i = 0; i < n && len > 0; ++i) {
        if (offset >= lens[i]) {
            offset -= lens[i];
            continue;
        }
        const uint32_t chunk = std::min<uint64_t>(len, lens[i] - offset);
        std::memcpy(out, data[i] + offset, chunk);
        out += chunk;
        len -= chunk;
        offset = 0;
    }
}

// Copies `len` bytes into position `offset` of a scatter list.
inline void scatter(std::byte* const* data, const uint32_t* lens, uint8_t n, uint64_t offset,
                    const uint8_t* in, uint32_t len) {
    for (uint8_t i = 0; i < n && len > 0; ++i) {
        if (offset >= lens[i]) {
            offset -= lens[i];
            continue;
        }
        const uint32_t chunk = std::min<uint64_t>(len, lens[i] - offset);
        std::memcpy(data[i] + offset, in, chunk);
        in += chunk;
        len -= chunk;
        offset = 0;
    }
}

inline uint32_t packets_for(uint64_t length, uint32_t mtu) {
    return length == 0 ? 1 : static_cast<uint32_t>((length + mtu - 1) / mtu);
}

inline bool is_read(const proto::send_wqe& w) {
    return w.opcode == IBV_WR_RDMA_READ;
}

inline bool is_atomic(const proto::send_wqe& w) {
    return w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

// IBTA 1.5 ATOMIC WRITE: 8 bytes the responder places as one store; the shim carries them in
// the WQE (ibv_wr_atomic_write takes the value, not a buffer), ACKed as a WRITE is.
inline bool is_atomic_write(const proto::send_wqe& w) {
    return w.opcode == IBV_WR_ATOMIC_WRITE;
}
inline constexpr uint32_t atomic_write_bytes = 8;

// Places an ATOMIC WRITE's 8 bytes with one store: a program reading the word at the same
// time sees the old or the new value, never a mix (a memcpy gives no such promise).
inline void store_atomic_write(std::byte* at, const uint8_t* value) {
    uint64_t word = 0;
    std::memcpy(&word, value, sizeof(word));
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(at))
        .store(word, std::memory_order_release);
}

// Operations whose completion needs a response from the responder (READ data, atomic ACK):
// an ACK for a later PSN does not complete them.
inline bool needs_response(const proto::send_wqe& w) {
    return is_read(w) || is_atomic(w);
}

// Executes one atomic on 8 bytes of registered memory; returns the value found there. The
// engine thread runs every QP of the host, so atomics are atomic with respect to each other;
// std::atomic_ref also keeps them atomic with respect to the CPU of a program touching the
// word at the same time.
inline uint64_t execute_atomic(std::byte* at, uint32_t wr_opcode, uint64_t compare_add,
                               uint64_t swap) {
    std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(at));
    if (wr_opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        return word.fetch_add(compare_add, std::memory_order_seq_cst);
    }
    uint64_t expected = compare_add;
    word.compare_exchange_strong(expected, swap, std::memory_order_seq_cst);
    return expected;  // the old value, whether or not it was swapped
}

inline bool has_imm(const proto::send_wqe& w) {
    return w.opcode == IBV_WR_SEND_WITH_IMM || w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
}

// Where DCQCN starts and what it recovers to until the QP learns its vNIC's rate
// (queue_pair::set_line_rate; qos/rdma_class.hh says why).
inline constexpr uint64_t dcqcn_line_rate_bps = qos::unshaped_rdma_line_rate_bps;
// After this long without a CNP a lowered ceiling goes back to the line rate.
inline constexpr uint64_t ceiling_restore_ns = 10'000'000;

inline qos::dcqcn_params dcqcn_defaults() {
    qos::dcqcn_params p;
    p.line_rate_bps = dcqcn_line_rate_bps;
    return p;
}

}  // namespace jakiro::rnic::queue_pair_parts
