#include "dataplane/tables.hh"

#include <string>

#include "dataplane/lookup_hash.hh"

namespace jakiro {

std::unique_ptr<vni_map> vni_map::create(uint32_t capacity, std::string& error) {
    rte_hash* hash = create_lookup_hash("vni", capacity, sizeof(uint32_t), error);
    if (hash == nullptr) {
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
