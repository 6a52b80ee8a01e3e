#pragma once
// The underlay MAC of every remote host the VLT points at, learnt by ARP on the uplink.
//
// Thread-safety: slots are added by the control thread (before a snapshot that uses them is
// published) and never removed; a slot's MAC is written by the worker that owns the uplink and
// read by workers and the control thread, through one atomic 64-bit word.

#include <rte_ether.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>

namespace jakiro::overlay {

class underlay_neighbors {
  public:
    static constexpr uint16_t capacity = 4096;  // remote hosts one jakirod can tunnel to
    static constexpr uint16_t none = UINT16_MAX;

    // Control thread: the slot for `host_ip`, created if needed; `none` when full.
    uint16_t slot_for(rte_be32_t host_ip);
    uint16_t size() const { return _size.load(std::memory_order_acquire); }
    rte_be32_t ip(uint16_t slot) const { return _slots[slot].ip; }

    // Worker: the resolved MAC of a slot, if any.
    std::optional<rte_ether_addr> mac(uint16_t slot) const {
        const uint64_t word = _slots[slot].mac_word.load(std::memory_order_relaxed);
        if ((word & resolved_bit) == 0) {
            return std::nullopt;
        }
        rte_ether_addr mac;
        for (int i = 0; i < RTE_ETHER_ADDR_LEN; ++i) {
            mac.addr_bytes[i] = static_cast<uint8_t>(word >> (8 * i));
        }
        return mac;
    }

    // Worker: records what an ARP message from `ip` said; ignores hosts we do not tunnel to.
    void learn(rte_be32_t ip, const rte_ether_addr& mac);

  private:
    static constexpr uint64_t resolved_bit = uint64_t{1} << 63;
    struct slot {
        rte_be32_t ip = 0;
        std::atomic<uint64_t> mac_word{0};
    };
    std::array<slot, capacity> _slots{};
    std::atomic<uint16_t> _size{0};
};

}  // namespace jakiro::overlay
