#include "dataplane/overlay/vlt.hh"

#include <cstring>

#include "dataplane/lookup_hash.hh"

namespace jakiro::overlay {

std::unique_ptr<vlt> vlt::create(uint32_t capacity, std::string& error, uint32_t ipv6_capacity) {
    rte_hash* hash = create_lookup_hash("vlt", capacity, sizeof(vlt_key), error);
    if (hash == nullptr) {
        return nullptr;
    }
    rte_hash* hash6 = create_lookup_hash("vlt6", ipv6_capacity, sizeof(vlt6_key), error);
    if (hash6 == nullptr) {
        rte_hash_free(hash);
        return nullptr;
    }
    return std::unique_ptr<vlt>(
        new vlt(hash, hash6, capacity + ipv6_capacity, capacity, ipv6_capacity));
}

vlt::vlt(rte_hash* hash, rte_hash* hash6, uint32_t capacity, uint32_t capacity4, uint32_t capacity6)
    : _hash(hash), _hash6(hash6), _capacity4(capacity4), _capacity6(capacity6) {
    _entries.reserve(capacity);
}

std::unique_ptr<vlt> vlt::clone(std::string& error) const {
    auto copy = create(_capacity4, error, _capacity6);
    if (!copy) {
        return nullptr;
    }
    for (rte_hash* from : {_hash, _hash6}) {
        rte_hash* to = from == _hash ? copy->_hash : copy->_hash6;
        const void* key = nullptr;
        void* data = nullptr;
        uint32_t next = 0;
        while (rte_hash_iterate(from, &key, &data, &next) >= 0) {
            if (!copy->add_key(to, key, *static_cast<const vlt_entry*>(data))) {
                error = "cannot copy the VLT";
                return nullptr;
            }
        }
    }
    return copy;
}

vlt::~vlt() {
    rte_hash_free(_hash);
    rte_hash_free(_hash6);
}

bool vlt::add_key(rte_hash* hash, const void* key, const vlt_entry& entry) {
    if (_free.empty() && _entries.size() == _entries.capacity()) {
        return false;
    }
    if (rte_hash_lookup(hash, key) >= 0) {
        return false;
    }
    if (!_free.empty()) {
        const uint32_t index = _free.back();
        if (rte_hash_add_key_data(hash, key, &_entries[index]) != 0) {
            return false;
        }
        _entries[index] = entry;
        _free.pop_back();
        return true;
    }
    _entries.push_back(entry);
    if (rte_hash_add_key_data(hash, key, &_entries.back()) != 0) {
        _entries.pop_back();
        return false;
    }
    return true;
}

bool vlt::remove_key(rte_hash* hash, const void* key) {
    void* data = nullptr;
    if (rte_hash_lookup_data(hash, key, &data) < 0 || rte_hash_del_key(hash, key) < 0) {
        return false;
    }
    _free.push_back(static_cast<uint32_t>(static_cast<vlt_entry*>(data) - _entries.data()));
    return true;
}

bool vlt::remove(uint32_t vpc, rte_be32_t ip) {
    const vlt_key key{vpc, ip};
    return remove_key(_hash, &key);
}

bool vlt::remove6(uint32_t vpc, const uint8_t* ip) {
    vlt6_key key{vpc, {}};
    std::memcpy(key.ip, ip, sizeof(key.ip));
    return remove_key(_hash6, &key);
}

bool vlt::add(uint32_t vpc, rte_be32_t ip, const vlt_entry& entry) {
    const vlt_key key{vpc, ip};
    return add_key(_hash, &key, entry);
}

bool vlt::add6(uint32_t vpc, const uint8_t* ip, const vlt_entry& entry) {
    vlt6_key key{vpc, {}};
    std::memcpy(key.ip, ip, sizeof(key.ip));
    return add_key(_hash6, &key, entry);
}

const vlt_entry* vlt::lookup6(uint32_t vpc, const uint8_t* ip) const {
    vlt6_key key{vpc, {}};
    std::memcpy(key.ip, ip, sizeof(key.ip));
    void* data = nullptr;
    if (rte_hash_lookup_data(_hash6, &key, &data) < 0) {
        return nullptr;
    }
    return static_cast<const vlt_entry*>(data);
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
