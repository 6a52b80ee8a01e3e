#include "dataplane/overlay/underlay_neighbors.hh"

namespace jakiro::overlay {

uint16_t underlay_neighbors::slot_for(rte_be32_t host_ip) {
    const uint16_t count = size();
    for (uint16_t i = 0; i < count; ++i) {
        if (_slots[i].ip == host_ip) {
            return i;
        }
    }
    if (count == capacity) {
        return none;
    }
    _slots[count].ip = host_ip;
    _size.store(count + 1, std::memory_order_release);
    return count;
}

void underlay_neighbors::learn(rte_be32_t ip, const rte_ether_addr& mac) {
    const uint16_t count = size();
    // ARP traffic is rare (requests once a second per unresolved host), so a scan is fine.
    for (uint16_t i = 0; i < count; ++i) {
        if (_slots[i].ip == ip) {
            uint64_t word = resolved_bit;
            for (int b = 0; b < RTE_ETHER_ADDR_LEN; ++b) {
                word |= uint64_t{mac.addr_bytes[b]} << (8 * b);
            }
            _slots[i].mac_word.store(word, std::memory_order_relaxed);
            return;
        }
    }
}

}  // namespace jakiro::overlay
