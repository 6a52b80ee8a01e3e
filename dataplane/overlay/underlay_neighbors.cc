#include "dataplane/overlay/underlay_neighbors.hh"

namespace jakiro::overlay {

underlay_neighbors::~underlay_neighbors() {
    for (auto& c : _chunks) {
        delete c.load(std::memory_order_relaxed);
    }
}

uint32_t underlay_neighbors::slot_for(rte_be32_t host_ip) {
    if (const auto found = _index.find(host_ip); found != _index.end()) {
        return found->second;
    }
    const uint32_t count = size();
    if (count == capacity) {
        return none;
    }
    auto& holder = _chunks[count / chunk_slots];
    if (holder.load(std::memory_order_relaxed) == nullptr) {
        holder.store(new chunk{}, std::memory_order_release);
    }
    at(count).ip = host_ip;
    _index.emplace(host_ip, count);
    _size.store(count + 1, std::memory_order_release);
    return count;
}

std::size_t underlay_neighbors::memory_bytes() const {
    std::size_t chunks = 0;
    for (const auto& c : _chunks) {
        chunks += c.load(std::memory_order_relaxed) != nullptr;
    }
    return chunks * sizeof(chunk) + _index.size() * (sizeof(rte_be32_t) + sizeof(uint32_t) + 16);
}

bool underlay_neighbors::learn(rte_be32_t ip, const rte_ether_addr& mac) {
    const uint32_t count = size();
    // ARP traffic is rare (requests once a second per unresolved host), so a scan is fine.
    for (uint32_t i = 0; i < count; ++i) {
        auto& s = at(i);
        if (s.ip == ip) {
            uint64_t word = resolved_bit;
            for (int b = 0; b < RTE_ETHER_ADDR_LEN; ++b) {
                word |= uint64_t{mac.addr_bytes[b]} << (8 * b);
            }
            s.mac_word.store(word, std::memory_order_relaxed);
            return true;
        }
    }
    return false;
}

}  // namespace jakiro::overlay
