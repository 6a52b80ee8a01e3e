#include "secgroup/flow_table.hh"

#include <rte_errno.h>
#include <rte_hash_crc.h>

#include <cstring>

namespace jakiro::secgroup {

namespace {
// Entries compared to pick the stalest when a full table makes room: a vNIC's oldest few,
// which after a while of steady traffic are mostly the ones it stopped using.
constexpr uint32_t eviction_sample = 8;

std::string next_table_name() {
    static std::atomic<unsigned> counter{0};
    return "nft_" + std::to_string(counter.fetch_add(1));
}

// The table's sizes move with one writer, the owning worker; readers just load.
void adjust(std::atomic<uint32_t>& gauge, int32_t by) {
    gauge.store(gauge.load(std::memory_order_relaxed) + static_cast<uint32_t>(by),
                std::memory_order_relaxed);
}
}  // namespace

uint32_t flow_key_hash(const void* key, uint32_t key_len, uint32_t init_val) {
    const auto* k = static_cast<const flow_key*>(key);
    return rte_hash_crc(key, k->ipv6 != 0 ? key_len : ipv4_flow_key_bytes, init_val);
}

namespace {
// rte_hash's compare: 0 when equal.
int flow_key_compare(const void* a, const void* b, size_t /*len*/) {
    return same_flow(*static_cast<const flow_key*>(a), *static_cast<const flow_key*>(b)) ? 0 : 1;
}
}  // namespace

std::unique_ptr<flow_table> flow_table::create(uint32_t capacity, const flow_timeouts& timeouts,
                                               uint64_t tsc_hz, std::string& error,
                                               uint16_t vnic_slots) {
    const auto name = next_table_name();
    rte_hash_parameters params{};
    params.name = name.c_str();
    params.entries = std::max<uint32_t>(capacity, 8);
    params.key_len = sizeof(flow_key);
    params.hash_func = flow_key_hash;
    params.socket_id = SOCKET_ID_ANY;
    // Extendable buckets: inserts succeed until the table really holds `capacity` flows.
    params.extra_flag = RTE_HASH_EXTRA_FLAGS_EXT_TABLE;
    rte_hash* hash = rte_hash_create(&params);
    if (hash == nullptr) {
        error = std::string("cannot create the flow table: ") + rte_strerror(rte_errno);
        return nullptr;
    }
    rte_hash_set_cmp_func(hash, flow_key_compare);
    return std::unique_ptr<flow_table>(
        new flow_table(hash, params.entries, timeouts, tsc_hz, vnic_slots));
}

flow_table::flow_table(rte_hash* hash, uint32_t capacity, const flow_timeouts& timeouts,
                       uint64_t hz, uint16_t vnic_slots)
    : _hash(hash),
      _capacity(capacity),
      _entries(new flow_entry[capacity]()),
      _vnic_slots(vnic_slots),
      _vnics(new vnic_entries[vnic_slots]) {
    for (std::size_t s = 0; s < _timeout_tsc.size(); ++s) {
        _timeout_tsc[s] = timeouts.idle_s[s] * hz;
    }
}

flow_table::~flow_table() {
    rte_hash_free(_hash);
}

void flow_table::lookup_bulk(const flow_key* keys, unsigned n, flow_entry** out) {
    const void* key_ptrs[max_bulk];
    int32_t positions[max_bulk];
    for (unsigned i = 0; i < n; ++i) {
        key_ptrs[i] = &keys[i];
    }
    rte_hash_lookup_bulk(_hash, key_ptrs, n, positions);
    for (unsigned i = 0; i < n; ++i) {
        out[i] = positions[i] >= 0 ? &_entries[positions[i]] : nullptr;
    }
}

flow_entry* flow_table::lookup(const flow_key& key) {
    const int32_t position = rte_hash_lookup(_hash, &key);
    return position >= 0 ? &_entries[position] : nullptr;
}

flow_entry* flow_table::insert(const flow_key& key, uint64_t now, uint32_t allowance,
                               insert_result& result) {
    if (key.vnic >= _vnic_slots) {
        result = insert_result::table_full;  // a vNIC the table does not count: never one
        return nullptr;
    }
    vnic_entries& vnic = _vnics[key.vnic];
    if (vnic.flows.load(std::memory_order_relaxed) >= allowance) {
        // An earlier packet of the same burst may have created this very flow.
        const int32_t known = rte_hash_lookup(_hash, &key);
        if (known >= 0) {
            result = insert_result::found;
            return &_entries[known];
        }
        result = insert_result::over_allowance;
        return nullptr;
    }
    int32_t position = rte_hash_add_key(_hash, &key);
    if (position == -ENOSPC && evict_own(key.vnic)) {
        position = rte_hash_add_key(_hash, &key);
    }
    if (position < 0) {
        result = insert_result::table_full;
        return nullptr;
    }
    flow_entry& e = _entries[position];
    // rte_hash_add_key returns the existing slot for a key it already holds.
    if (e.in_use && same_flow(e.key, key)) {
        result = insert_result::found;
        return &e;
    }
    result = insert_result::created;
    begin_update(e);
    e.key = key;
    e.last_seen = now;
    e.packets[0] = e.packets[1] = 0;
    e.bytes[0] = e.bytes[1] = 0;
    e.rule = 0;
    e.generation = 0;
    e.fins = 0;
    e.revoked = false;
    e.in_use = true;
    end_update(e);
    link(static_cast<uint32_t>(position), key.vnic);
    adjust(vnic.flows, 1);
    adjust(_size, 1);
    _inserts.add();
    return &e;
}

bool flow_table::restore(const flow_entry& saved) {
    insert_result result{};
    flow_entry* e = insert(saved.key, saved.last_seen, UINT32_MAX, result);
    if (e == nullptr) {
        return false;
    }
    if (result == insert_result::created) {
        // Not a new flow: the inserts counter counts what tenants opened, once.
        _inserts.sub(1);
    }
    begin_update(*e);
    e->last_seen = saved.last_seen;
    e->packets[0] = saved.packets[0];
    e->packets[1] = saved.packets[1];
    e->bytes[0] = saved.bytes[0];
    e->bytes[1] = saved.bytes[1];
    e->rule = saved.rule;
    e->generation = saved.generation;
    e->state = saved.state;
    e->initiator = saved.initiator;
    e->fins = saved.fins;
    e->revoked = saved.revoked;
    end_update(*e);
    return true;
}

void flow_table::erase(flow_entry* entry) {
    begin_update(*entry);
    entry->in_use = false;
    end_update(*entry);
    unlink(static_cast<uint32_t>(entry - _entries.get()));
    adjust(_vnics[entry->key.vnic].flows, -1);
    rte_hash_del_key(_hash, &entry->key);
    adjust(_size, -1);
}

void flow_table::link(uint32_t position, uint16_t vnic) {
    vnic_entries& v = _vnics[vnic];
    flow_entry& e = _entries[position];
    e.older = v.newest;
    e.newer = no_entry;
    if (v.newest != no_entry) {
        _entries[v.newest].newer = position;
    } else {
        v.oldest = position;
    }
    v.newest = position;
}

void flow_table::unlink(uint32_t position) {
    const flow_entry& e = _entries[position];
    vnic_entries& v = _vnics[e.key.vnic];
    if (e.older != no_entry) {
        _entries[e.older].newer = e.newer;
    } else {
        v.oldest = e.newer;
    }
    if (e.newer != no_entry) {
        _entries[e.newer].older = e.older;
    } else {
        v.newest = e.older;
    }
}

bool flow_table::evict_own(uint16_t vnic) {
    flow_entry* stalest = nullptr;
    uint32_t seen = 0;
    for (uint32_t i = _vnics[vnic].oldest; i != no_entry && seen < eviction_sample;
         i = _entries[i].newer, ++seen) {
        if (stalest == nullptr || _entries[i].last_seen < stalest->last_seen) {
            stalest = &_entries[i];
        }
    }
    if (stalest == nullptr) {
        return false;
    }
    erase(stalest);
    _evictions.add();
    return true;
}

void flow_table::expire(uint64_t now, uint32_t budget) {
    for (uint32_t step = 0; step < budget && step < _capacity; ++step) {
        flow_entry& e = _entries[_expire_cursor];
        _expire_cursor = (_expire_cursor + 1) % _capacity;
        if (e.in_use && expired(e, now)) {
            erase(&e);
            _expirations.add();
        }
    }
}

bool flow_table::snapshot(uint32_t i, flow_entry& out) const {
    const flow_entry& e = _entries[i];
    for (int attempt = 0; attempt < 8; ++attempt) {
        const uint32_t before = e.sequence.load(std::memory_order_acquire);
        if (before & 1) {
            continue;
        }
        out.key = e.key;
        out.last_seen = e.last_seen;
        out.packets[0] = e.packets[0];
        out.packets[1] = e.packets[1];
        out.bytes[0] = e.bytes[0];
        out.bytes[1] = e.bytes[1];
        out.rule = e.rule;
        out.generation = e.generation;
        out.state = e.state;
        out.initiator = e.initiator;
        out.in_use = e.in_use;
        out.revoked = e.revoked;
        std::atomic_thread_fence(std::memory_order_acquire);
        if (e.sequence.load(std::memory_order_relaxed) == before) {
            return out.in_use;
        }
    }
    return false;
}

}  // namespace jakiro::secgroup
