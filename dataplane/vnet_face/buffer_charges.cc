#include "dataplane/vnet_face/buffer_charges.hh"

#include <rte_errno.h>
#include <rte_lcore.h>

#include <cstring>
#include <mutex>

namespace jakiro::vnet_face {

namespace {

constexpr const char* handler_name = "jakiro_charged";
// The handler underneath, the first DPDK has: its lock-free stack, LIFO, so the buffer freed
// last (still in the core's caches and TLB) is the next one taken, as a per-lcore cache would
// give; a FIFO ring hands out the coldest of 1023 buffers 64 KB apart (one TLB miss and cold
// header lines each: jakirod spent 13 % more CPU per byte of one TCP stream between two
// vNICs of a host, 600 against 530 ns/KB; the stack, 475). Else DPDK's default ring.
constexpr const char* base_handler_names[] = {"lf_stack", "ring_mp_mc"};

// The tag: vNIC slot + 1 in the buffer's private area (0: charged to nobody). The area is the
// pool's own (rte_pktmbuf_init zeroes it), so no other code reads or writes it.
constexpr uint16_t priv_bytes = RTE_MBUF_PRIV_ALIGN;

uint16_t& tag_of(rte_mbuf* m) {
    return *static_cast<uint16_t*>(rte_mbuf_to_priv(m));
}

const rte_mempool_ops* base_handler = nullptr;

int charged_enqueue(rte_mempool* mp, void* const* objs, unsigned n) {
    // pool_config is set once the pool is populated: the buffers the pool is filled with at
    // creation are not coming home from anyone.
    if (auto* charges = static_cast<buffer_charges*>(mp->pool_config)) {
        charges->release(objs, n);
    }
    return base_handler->enqueue(mp, objs, n);
}

// Registers the handler once: a DPDK handler with an enqueue that releases charges first.
bool register_handler(std::string& error) {
    static std::once_flag once;
    static std::string failure;
    std::call_once(once, [] {
        for (const char* name : base_handler_names) {
            for (uint32_t i = 0; i < rte_mempool_ops_table.num_ops && base_handler == nullptr;
                 ++i) {
                if (std::strcmp(rte_mempool_ops_table.ops[i].name, name) == 0) {
                    base_handler = &rte_mempool_ops_table.ops[i];
                }
            }
        }
        if (base_handler == nullptr) {
            failure = "no mempool handler to build the charged one on (lf_stack, ring_mp_mc)";
            return;
        }
        static rte_mempool_ops charged = *base_handler;
        std::strncpy(charged.name, handler_name, sizeof(charged.name) - 1);
        charged.enqueue = charged_enqueue;
        if (rte_mempool_register_ops(&charged) < 0) {
            failure = "cannot register the charged mempool handler";
        }
    });
    error = failure;
    return failure.empty();
}

}  // namespace

rte_mempool* buffer_charges::create_pool(const std::string& name, unsigned buffers,
                                         uint16_t data_room, buffer_charges& charges,
                                         std::string& error) {
    if (!register_handler(error)) {
        return nullptr;
    }
    // No per-lcore cache: a buffer parked in one would be home for DPDK and still charged here.
    rte_mempool* pool =
        rte_pktmbuf_pool_create_by_ops(name.c_str(), buffers, 0, priv_bytes, data_room,
                                       static_cast<int>(rte_socket_id()), handler_name);
    if (pool == nullptr) {
        error = "cannot create the pool '" + name + "': " + rte_strerror(rte_errno);
        return nullptr;
    }
    pool->pool_config = &charges;
    return pool;
}

void buffer_charges::charge(uint16_t vnic, rte_mbuf* const* buffers, unsigned n) {
    for (unsigned i = 0; i < n; ++i) {
        tag_of(buffers[i]) = static_cast<uint16_t>(vnic + 1);
    }
    _held[vnic].fetch_add(static_cast<int32_t>(n), std::memory_order_relaxed);
}

void buffer_charges::release(void* const* buffers, unsigned n) {
    // A bulk free is mostly one vNIC's: one atomic per run of the same tag.
    uint16_t run_tag = 0;
    int32_t run = 0;
    for (unsigned i = 0; i < n; ++i) {
        uint16_t& tag = tag_of(static_cast<rte_mbuf*>(buffers[i]));
        if (tag != run_tag) {
            if (run_tag != 0) {
                _held[run_tag - 1].fetch_sub(run, std::memory_order_relaxed);
            }
            run_tag = tag;
            run = 0;
        }
        run += tag != 0;
        tag = 0;
    }
    if (run_tag != 0) {
        _held[run_tag - 1].fetch_sub(run, std::memory_order_relaxed);
    }
}

}  // namespace jakiro::vnet_face
