#include "vlt.hh"

#include <rte_errno.h>
#include <rte_hash_crc.h>

#include <atomic>

namespace jakiro::overlay {

namespace {
// rte_hash names are global in the process; every table gets a fresh one.
std::string next_table_name() {
    static std::atomic<unsigned> counter{0};
    return "vlt_" + std::to_string(counter.fetch_add(1));
}
}  // namespace

std::unique_ptr<vlt> vlt::create(uint32_t capacity, std::string& error) {
    const auto name = next_table_name();
    rte_hash_parameters params{};
    params.name = name.c_str();
    // rte_hash wants at least 8 entries and rounds up; keep headroom so a full bucket pair
    // never rejects a key the config allows.
    params.entries = std::max<uint32_t>(capacity * 2, 64);
    params.key_len = sizeof(vlt_key);
    params.hash_func = rte_hash_crc;
    params.socket_id = SOCKET_ID_ANY;
    rte_hash* hash = rte_hash_create(&params);
    if (hash == nullptr) {
        error = std::string("cannot create VLT hash: ") + rte_strerror(rte_errno);
        return nullptr;
    }
    return std::unique_ptr<vlt>(new vlt(hash, capacity));
}

vlt::vlt(rte_hash* hash, uint32_t capacity) : _hash(hash) {
    _entries.reserve(capacity);
}

vlt::~vlt() {
    rte_hash_free(_hash);
}

bool vlt::add(uint32_t vpc, rte_be32_t ip, const vlt_entry& entry) {
    if (_entries.size() == _entries.capacity()) {
        return false;
    }
    const vlt_key key{vpc, ip};
    if (rte_hash_lookup(_hash, &key) >= 0) {
        return false;
    }
    _entries.push_back(entry);
    if (rte_hash_add_key_data(_hash, &key, &_entries.back()) != 0) {
        _entries.pop_back();
        return false;
    }
    return true;
}

const vlt_entry* vlt::lookup(uint32_t vpc, rte_be32_t ip) const {
    const vlt_key key{vpc, ip};
    void* data = nullptr;
    if (rte_hash_lookup_data(_hash, &key, &data) < 0) {
        return nullptr;
    }
    return static_cast<const vlt_entry*>(data);
}

void vlt::lookup_bulk(const vlt_key* keys, unsigned n, const vlt_entry** out) const {
    const void* key_ptrs[max_bulk];
    void* data[max_bulk];
    for (unsigned i = 0; i < n; ++i) {
        key_ptrs[i] = &keys[i];
    }
    uint64_t hits = 0;
    rte_hash_lookup_bulk_data(_hash, key_ptrs, n, &hits, data);
    for (unsigned i = 0; i < n; ++i) {
        out[i] = (hits >> i) & 1 ? static_cast<const vlt_entry*>(data[i]) : nullptr;
    }
}

}  // namespace jakiro::overlay
