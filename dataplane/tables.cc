#include "tables.hh"

#include <rte_errno.h>
#include <rte_hash_crc.h>

#include <atomic>
#include <string>

namespace jakiro {

std::unique_ptr<vni_map> vni_map::create(uint32_t capacity, std::string& error) {
    static std::atomic<unsigned> counter{0};
    const auto name = "vni_" + std::to_string(counter.fetch_add(1));
    rte_hash_parameters params{};
    params.name = name.c_str();
    params.entries = std::max<uint32_t>(capacity * 2, 64);
    params.key_len = sizeof(uint32_t);
    params.hash_func = rte_hash_crc;
    params.socket_id = SOCKET_ID_ANY;
    rte_hash* hash = rte_hash_create(&params);
    if (hash == nullptr) {
        error = std::string("cannot create VNI hash: ") + rte_strerror(rte_errno);
        return nullptr;
    }
    return std::unique_ptr<vni_map>(new vni_map(hash));
}

vni_map::~vni_map() {
    rte_hash_free(_hash);
}

bool vni_map::add(uint32_t vni, uint32_t vpc) {
    // The VPC index is stored as the data pointer's value: no separate storage to keep alive.
    return rte_hash_add_key_data(_hash, &vni, reinterpret_cast<void*>(uintptr_t{vpc})) == 0;
}

uint32_t vni_map::find(uint32_t vni) const {
    void* data = nullptr;
    if (rte_hash_lookup_data(_hash, &vni, &data) < 0) {
        return no_vpc;
    }
    return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(data));
}

}  // namespace jakiro
