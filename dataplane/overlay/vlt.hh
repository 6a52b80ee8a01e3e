#pragma once
// VLT — VPC lookup table: (VPC, inner IPv4 or IPv6 address) -> a local vNIC or the remote host
// that owns the address. Built on the control thread, then read-only while a snapshot that
// holds it is published; lookups may run on any worker. A dual-stack vNIC has one entry per
// address family, each in its own hash (the keys differ in size, and rte_hash compares whole
// keys).
//
// A change of a few peers does not rebuild it: the control thread keeps a second table, the
// one the snapshot before last held (no worker reads it any more), patches it with remove()
// and add(), and publishes it (control/table_patcher.hh).

#include <rte_ether.h>
#include <rte_hash.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace jakiro::overlay {

enum class vlt_kind : uint8_t { local_vnic, remote_host };

struct vlt_entry {
    vlt_kind kind;
    uint16_t vnic;       // local_vnic: vNIC slot on this host
    uint32_t neighbor;   // remote_host: slot in underlay_neighbors
    rte_be32_t host_ip;  // remote_host: the host's underlay address
    bool has_inner_mac;
    rte_ether_addr inner_mac;  // remote_host: inner destination MAC when configured
};

// Keys are 8 bytes so rte_hash compares them with one 64-bit load.
struct vlt_key {
    uint32_t vpc;
    rte_be32_t ip;
};
static_assert(sizeof(vlt_key) == 8);

struct vlt6_key {
    uint32_t vpc;
    uint8_t ip[16];  // network order
};
static_assert(sizeof(vlt6_key) == 20);

class vlt {
  public:
    static constexpr unsigned max_bulk = RTE_HASH_LOOKUP_BULK_MAX;

    // Room for `capacity` IPv4 and `ipv6_capacity` IPv6 entries. Returns nullptr (and sets
    // `error`) if DPDK cannot allocate the hashes.
    static std::unique_ptr<vlt> create(uint32_t capacity, std::string& error,
                                       uint32_t ipv6_capacity = 0);
    ~vlt();
    vlt(const vlt&) = delete;
    vlt& operator=(const vlt&) = delete;

    // Control thread only, while no worker reads the table. False if the key exists or the
    // table is full.
    bool add(uint32_t vpc, rte_be32_t ip, const vlt_entry& entry);
    bool add6(uint32_t vpc, const uint8_t* ip, const vlt_entry& entry);
    // The same contract: false if the key is not there. Its entry's room is reused by a later
    // add.
    bool remove(uint32_t vpc, rte_be32_t ip);
    bool remove6(uint32_t vpc, const uint8_t* ip);
    // A table with the same entries and room (nullptr and `error` when DPDK cannot allocate
    // it). Reads only: the source may be published.
    std::unique_ptr<vlt> clone(std::string& error) const;
    // How many more entries (of both families) fit.
    std::size_t room() const { return _entries.capacity() - _entries.size() + _free.size(); }

    const vlt_entry* lookup(uint32_t vpc, rte_be32_t ip) const;
    // Looks up `n` <= max_bulk keys at once; misses yield nullptr.
    void lookup_bulk(const vlt_key* keys, unsigned n, const vlt_entry** out) const;
    const vlt_entry* lookup6(uint32_t vpc, const uint8_t* ip) const;

    std::size_t size() const { return _entries.size() - _free.size(); }

  private:
    vlt(rte_hash* hash, rte_hash* hash6, uint32_t capacity, uint32_t capacity4, uint32_t capacity6);
    bool add_key(rte_hash* hash, const void* key, const vlt_entry& entry);
    bool remove_key(rte_hash* hash, const void* key);
    rte_hash* _hash;
    rte_hash* _hash6;
    uint32_t _capacity4;  // what create() was asked for, for clone()
    uint32_t _capacity6;
    std::vector<vlt_entry> _entries;  // reserved at capacity: hash data points into it
    std::vector<uint32_t> _free;      // indices in _entries whose key was removed
};

}  // namespace jakiro::overlay
