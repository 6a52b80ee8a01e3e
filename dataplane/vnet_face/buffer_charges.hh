#pragma once
// Which vNIC holds each buffer of the super-frame pool, and how many each holds: the charge
// behind a vNIC's packet-buffer allowance (YAML vnics[].limits.max_packet_buffers).
//
// A vnet face receives every frame of its tenant, a 60-byte datagram as much as a 64 KB TCP
// super-frame, into a 64 KB buffer of one pool the whole host shares (face_registry.hh).
// Wherever such a buffer then waits (the face's spares, the vNIC's QoS queue, a transmit batch
// whose port is slow, a ring to another worker) it is still its sender's: the face tags each
// buffer it takes with its vNIC and charges it, and the pool gives the charge back when the
// buffer comes home, whoever frees it and however (a free, a bulk free, the last indirect
// mbuf of a cut super-frame). The pool's mempool handler does that: DPDK's lock-free stack
// handler plus the bookkeeping, with no per-lcore cache so that every free reaches it (one
// stack operation per burst; LIFO, so the buffers stay as warm as a cache would keep them). A
// face compares its vNIC's charge with its allowance before it receives (vnet_face.hh), so
// one vNIC can never hold the buffers the others need.
//
// Buffers nobody charged (the uplink's, the RDMA engines' super-datagrams) carry no tag and
// come from the host's own share of the pool (control/vnic_limits.hh).
//
// Thread-safety: charge() from the worker that owns the vNIC; the release from any thread that
// frees a buffer (relaxed atomics: the charge is a count, it orders nothing); held() from any.

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "dataplane/counters.hh"

namespace jakiro::vnet_face {

class buffer_charges {
  public:
    // A pktmbuf pool of `buffers` mbufs with `data_room` bytes each whose buffers give their
    // charge back to `charges` when freed; nullptr (and `error`) if DPDK cannot make it.
    static rte_mempool* create_pool(const std::string& name, unsigned buffers, uint16_t data_room,
                                    buffer_charges& charges, std::string& error);

    // Tags `n` buffers just taken from a pool of create_pool() as `vnic`'s and charges them.
    void charge(uint16_t vnic, rte_mbuf* const* buffers, unsigned n);
    // Buffers charged to `vnic` that have not come home yet.
    uint32_t held(uint16_t vnic) const {
        const int32_t n = _held[vnic].load(std::memory_order_relaxed);
        return n > 0 ? static_cast<uint32_t>(n) : 0;
    }

    // The pool handler's side: `n` buffers are coming home.
    void release(void* const* buffers, unsigned n);

  private:
    // Signed: a release on one thread may be seen before the charge of another's.
    std::array<std::atomic<int32_t>, max_vnics> _held{};
};

}  // namespace jakiro::vnet_face
