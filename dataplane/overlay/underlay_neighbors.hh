#pragma once
// The underlay MAC of every remote host the VLT points at, learnt by ARP on the uplink.
//
// The table grows with the hosts this jakirod actually tunnels to (those carrying vNICs of the
// VPCs it serves), in chunks allocated as they are needed; nothing is sized by the cluster.
// The directory of chunks bounds it at about a million hosts (ten times a cloud region's),
// for 8 KiB of pointers whether it holds one host or all of them.
//
// Thread-safety: slots are added by the control thread (before a snapshot that uses them is
// published) and never removed; a chunk, once published through its atomic pointer, never
// moves or goes away. A slot's MAC is written by the worker that owns the uplink and read by
// workers and the control thread, through one atomic 64-bit word.

#include <rte_ether.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>

namespace jakiro::overlay {

class underlay_neighbors {
  public:
    static constexpr uint32_t none = UINT32_MAX;
    static constexpr uint32_t chunk_slots = 1024;
    static constexpr uint32_t max_chunks = 1024;
    static constexpr uint32_t capacity = chunk_slots * max_chunks;

    underlay_neighbors() = default;
    ~underlay_neighbors();
    underlay_neighbors(const underlay_neighbors&) = delete;
    underlay_neighbors& operator=(const underlay_neighbors&) = delete;

    // Control thread: the slot for `host_ip`, created if needed; `none` when full.
    uint32_t slot_for(rte_be32_t host_ip);
    uint32_t size() const { return _size.load(std::memory_order_acquire); }
    rte_be32_t ip(uint32_t slot) const { return at(slot).ip; }
    // Bytes held by the table: what its hosts cost.
    std::size_t memory_bytes() const;

    // Worker: the resolved MAC of a slot, if any.
    std::optional<rte_ether_addr> mac(uint32_t slot) const {
        const uint64_t word = at(slot).mac_word.load(std::memory_order_relaxed);
        if ((word & resolved_bit) == 0) {
            return std::nullopt;
        }
        rte_ether_addr mac;
        for (int i = 0; i < RTE_ETHER_ADDR_LEN; ++i) {
            mac.addr_bytes[i] = static_cast<uint8_t>(word >> (8 * i));
        }
        return mac;
    }

    // Worker: records what an ARP message from `ip` said; ignores hosts we do not tunnel to
    // (false).
    bool learn(rte_be32_t ip, const rte_ether_addr& mac);

  private:
    static constexpr uint64_t resolved_bit = uint64_t{1} << 63;
    struct slot {
        rte_be32_t ip = 0;
        std::atomic<uint64_t> mac_word{0};
    };
    using chunk = std::array<slot, chunk_slots>;
    slot& at(uint32_t index) const {
        return (*_chunks[index / chunk_slots].load(std::memory_order_acquire))[index % chunk_slots];
    }
    std::array<std::atomic<chunk*>, max_chunks> _chunks{};
    std::atomic<uint32_t> _size{0};
    std::unordered_map<rte_be32_t, uint32_t> _index;  // control thread only
};

}  // namespace jakiro::overlay
