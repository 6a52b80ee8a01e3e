#pragma once
// NFT — the network flow table: one entry per (vNIC, 5-tuple) seen from the vNIC's side, so
// both directions of a connection find the same entry with one rte_hash lookup. An entry holds
// the conntrack state, which side opened the flow, the rule that allowed it, the policy
// generation it was checked against, counters and the last time it was seen.
//
// Shared by every vNIC of a worker, so each vNIC has an allowance of entries (per zone, as
// OVS/OVN limit conntrack; AWS ENA's conntrack allowance): a new flow beyond its vNIC's
// allowance is refused, and when the table itself is full a new flow may take only an entry
// of its own vNIC. So no vNIC's flows ever push out another's. Each vNIC's entries are chained
// oldest to newest through the entries themselves (no allocation), which is where a full table
// looks for one to evict.
//
// Thread-safety: one flow_table per worker; only that worker inserts, updates and erases.
// The control thread may list entries with snapshot(), which retries around the per-entry
// sequence counter the worker bumps on insert and erase, and read the counters.

#include <rte_byteorder.h>
#include <rte_hash.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "secgroup/rule.hh"
#include "secgroup/tcp_tracker.hh"
#include "stats/counter.hh"

namespace jakiro::secgroup {

// An IPv4 flow is its first 16 bytes (`ipv6` false; the IPv6 fields are not read and need not
// be set); an IPv6 flow keeps its addresses in `local_ip6` and `remote_ip6` (`local_ip` and
// `remote_ip` zero). The table hashes and compares only those 16 bytes of an IPv4 key
// (flow_key_hash, same_flow), so IPv4 pays for the wider key only where it is copied.
struct flow_key {
    uint16_t vnic;
    uint8_t ip_proto;
    uint8_t ipv6 = 0;  // 1: an IPv6 flow
    rte_be32_t local_ip;
    rte_be32_t remote_ip;
    rte_be16_t local_port;  // ICMP and ICMPv6 echo: the identifier, on both sides
    rte_be16_t remote_port;
    uint8_t local_ip6[16];
    uint8_t remote_ip6[16];
};
static_assert(sizeof(flow_key) == 48);
constexpr std::size_t ipv4_flow_key_bytes = 16;

// The table's hash: an IPv4 key's first 16 bytes, an IPv6 key whole.
uint32_t flow_key_hash(const void* key, uint32_t key_len, uint32_t init_val);

// Whether two keys name the same flow (the `ipv6` byte is in the first 16).
inline bool same_flow(const flow_key& a, const flow_key& b) {
    return std::memcmp(&a, &b, ipv4_flow_key_bytes) == 0 &&
           (a.ipv6 == 0 ||
            std::memcmp(a.local_ip6, b.local_ip6, sizeof(a.local_ip6) + sizeof(a.remote_ip6)) == 0);
}

struct flow_entry {
    flow_key key;
    uint64_t last_seen;   // TSC
    uint64_t packets[2];  // by direction (ingress, egress)
    uint64_t bytes[2];
    uint32_t rule;        // id + 1 of the rule that allowed the opening packet
    uint32_t generation;  // policy generation the verdict was computed under
    flow_state state;
    direction initiator;
    uint8_t fins;
    bool in_use;
    // Refused by a policy change: kept (rather than erased) so both directions stay blocked
    // until the flow goes idle or a later change allows it again; erasing it would let the
    // next packet reopen the flow from the other side.
    bool revoked;
    std::atomic<uint32_t> sequence;  // odd while the worker rewrites the entry
    // The vNIC's entries in the order they were created (slot numbers; no_entry ends).
    uint32_t older;
    uint32_t newer;
};

struct flow_timeouts {
    // Seconds of silence after which a flow in each state is forgotten.
    std::array<uint32_t, static_cast<std::size_t>(flow_state::count_)> idle_s = {
        30,    // syn_sent
        30,    // syn_received
        3600,  // established
        60,    // fin_wait
        10,    // closing
        5,     // closed
        60,    // udp
        30,    // icmp
        60,    // other
    };
};

// What insert() did.
enum class insert_result : uint8_t {
    found,           // the key had an entry already
    created,         // a new entry (perhaps in the place of one of the same vNIC's)
    over_allowance,  // refused: the vNIC holds its allowance of entries
    table_full,      // refused: the table is full and holds no entry of the vNIC
};

class flow_table {
  public:
    // Entries are counted for vNICs 0 .. vnic_slots-1 (flow_key::vnic).
    static constexpr uint16_t default_vnic_slots = 256;
    static constexpr uint32_t no_entry = UINT32_MAX;

    static std::unique_ptr<flow_table> create(uint32_t capacity, const flow_timeouts& timeouts,
                                              uint64_t tsc_hz, std::string& error,
                                              uint16_t vnic_slots = default_vnic_slots);
    ~flow_table();
    flow_table(const flow_table&) = delete;
    flow_table& operator=(const flow_table&) = delete;

    static constexpr unsigned max_bulk = RTE_HASH_LOOKUP_BULK_MAX;

    // Entries for `n` <= max_bulk keys; nullptr for misses.
    void lookup_bulk(const flow_key* keys, unsigned n, flow_entry** out);
    flow_entry* lookup(const flow_key& key);

    // The entry for `key`, created if it did not exist and `key.vnic` holds fewer than
    // `allowance` entries; when the table is full, the stalest of the vNIC's oldest entries
    // makes room. nullptr when refused (`result` says why).
    flow_entry* insert(const flow_key& key, uint64_t now, uint32_t allowance,
                       insert_result& result);
    void erase(flow_entry* entry);
    // A take-over (docs/restart.md): an entry a predecessor's table held, as it was, whatever
    // the vNIC's allowance (it held it already). Not counted as an insert. False when the table
    // is full.
    bool restore(const flow_entry& saved);

    // Forgets flows idle past their state's timeout, looking at no more than `budget` slots.
    void expire(uint64_t now, uint32_t budget);
    bool expired(const flow_entry& entry, uint64_t now) const {
        return now - entry.last_seen > _timeout_tsc[static_cast<std::size_t>(entry.state)];
    }

    // Entry changes the control thread must see consistently go through these.
    void begin_update(flow_entry& e) { e.sequence.fetch_add(1, std::memory_order_acq_rel); }
    void end_update(flow_entry& e) { e.sequence.fetch_add(1, std::memory_order_release); }

    // Control thread: a consistent copy of slot `i` if it holds a flow.
    bool snapshot(uint32_t i, flow_entry& out) const;

    uint32_t capacity() const { return _capacity; }
    uint32_t size() const { return _size.load(std::memory_order_relaxed); }
    uint64_t inserts() const { return _inserts.read(); }
    uint64_t evictions() const { return _evictions.read(); }
    uint64_t expirations() const { return _expirations.read(); }
    // Entries vNIC `vnic` holds now (0 for a slot out of range).
    uint32_t flows_of(uint16_t vnic) const {
        return vnic < _vnic_slots ? _vnics[vnic].flows.load(std::memory_order_relaxed) : 0;
    }

  private:
    // One vNIC's entries: how many, and both ends of their chain.
    struct vnic_entries {
        std::atomic<uint32_t> flows{0};
        uint32_t oldest = no_entry;
        uint32_t newest = no_entry;
    };

    flow_table(rte_hash* hash, uint32_t capacity, const flow_timeouts& timeouts, uint64_t hz,
               uint16_t vnic_slots);
    // Erases the stalest of the first few of `vnic`'s entries, oldest first; false if it has none.
    bool evict_own(uint16_t vnic);
    void link(uint32_t position, uint16_t vnic);
    void unlink(uint32_t position);

    rte_hash* _hash;
    uint32_t _capacity;
    std::unique_ptr<flow_entry[]> _entries;  // indexed by the key's rte_hash position
    std::array<uint64_t, static_cast<std::size_t>(flow_state::count_)> _timeout_tsc{};
    uint32_t _expire_cursor = 0;
    uint16_t _vnic_slots;
    std::unique_ptr<vnic_entries[]> _vnics;
    // Written by the owning worker only; atomics so the control thread reads them whole.
    std::atomic<uint32_t> _size{0};
    stats::counter _inserts;
    stats::counter _evictions;
    stats::counter _expirations;
};

}  // namespace jakiro::secgroup
