#pragma once
// Creation of the read-mostly rte_hash tables of a snapshot (VLT, VNI map): unique names, CRC
// hashing, and headroom so a full bucket pair never rejects a key the config allows.

#include <rte_errno.h>
#include <rte_hash.h>
#include <rte_hash_crc.h>

#include <algorithm>
#include <atomic>
#include <string>

namespace jakiro {

// `what` names the table in errors and, with a counter, in DPDK (rte_hash names are global).
inline rte_hash* create_lookup_hash(const char* what, uint32_t capacity, uint32_t key_len,
                                    std::string& error) {
    static std::atomic<unsigned> counter{0};
    const std::string name = std::string(what) + "_" + std::to_string(counter.fetch_add(1));
    rte_hash_parameters params{};
    params.name = name.c_str();
    params.entries = std::max<uint32_t>(capacity * 2, 64);
    params.key_len = key_len;
    params.hash_func = rte_hash_crc;
    params.socket_id = SOCKET_ID_ANY;
    rte_hash* hash = rte_hash_create(&params);
    if (hash == nullptr) {
        error = std::string("cannot create the ") + what + " hash: " + rte_strerror(rte_errno);
    }
    return hash;
}

}  // namespace jakiro
