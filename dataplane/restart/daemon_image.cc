#include "dataplane/restart/daemon_image.hh"

#include <rte_ether.h>

#include <array>
#include <cstring>
#include <map>

#include "dataplane/restart/qos_image.hh"
#include "dataplane/vnet_face/vnet_face.hh"
#include "dataplane/worker/clock.hh"
#include "secgroup/flow_table.hh"

namespace jakiro {

namespace {

using handover::section_kind;

// Bounds on what a reader accepts (a corrupt count is an error, not an allocation).
constexpr uint32_t max_slots = 65536;
constexpr uint32_t max_neighbours = overlay::underlay_neighbors::capacity;
constexpr uint32_t max_flows = 64u << 20;
constexpr uint32_t max_counters = 1u << 22;
// A restored flow's verdict is checked again on its first packet (docs/architecture.md §7,
// live changes): the successor's rules and generations are its own.
constexpr uint32_t recheck_generation = UINT32_MAX;

int64_t monotonic_ns(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

void write_image(handover::image_writer& w, const daemon_state& state, const image_sources& s) {
    w.begin(section_kind::daemon);
    w.string(state.config.name);
    // steady_clock is CLOCK_MONOTONIC, one clock for every process of the host.
    w.i64(monotonic_ns(s.frozen));
    for (const uint64_t n : state.restarts.counts) {
        w.u64(n);
    }
    w.u32(static_cast<uint32_t>(state.slot_names.size()));
    for (const auto& name : state.slot_names) {
        w.string(name);
    }
    w.end();

    w.begin(section_kind::listeners);
    w.boolean(s.metrics_listener >= 0);
    if (s.metrics_listener >= 0) {
        w.fd(s.metrics_listener);
    }
    w.boolean(s.tap_fd >= 0);
    if (s.tap_fd >= 0) {
        w.string(s.tap_iface);
        w.fd(s.tap_fd);
    }
    w.end();

    w.begin(section_kind::neighbours);
    std::vector<std::pair<uint32_t, rte_ether_addr>> resolved;
    for (uint32_t slot = 0; slot < state.neighbors->size(); ++slot) {
        if (const auto mac = state.neighbors->mac(slot)) {
            resolved.emplace_back(state.neighbors->ip(slot), *mac);
        }
    }
    w.u32(static_cast<uint32_t>(resolved.size()));
    for (const auto& [ip, mac] : resolved) {
        w.u32(ip);
        w.pod(mac);
    }
    w.end();

    // Flows by vNIC name: the successor's slots are its own.
    w.begin(section_kind::flows);
    // The workers are stopped: two passes see the same entries.
    uint32_t count = 0;
    for (const worker_context* worker : state.workers) {
        for (uint32_t i = 0; i < worker->flows->capacity(); ++i) {
            secgroup::flow_entry e;
            count += worker->flows->snapshot(i, e) ? 1 : 0;
        }
    }
    w.u32(count);
    for (const worker_context* worker : state.workers) {
        for (uint32_t i = 0; i < worker->flows->capacity(); ++i) {
            secgroup::flow_entry e;
            if (!worker->flows->snapshot(i, e)) {
                continue;
            }
            w.pod(e.key);
            w.u64(e.last_seen);
            w.u64(e.packets[0]);
            w.u64(e.packets[1]);
            w.u64(e.bytes[0]);
            w.u64(e.bytes[1]);
            w.u32(e.rule);
            w.u8(static_cast<uint8_t>(e.state));
            w.u8(static_cast<uint8_t>(e.initiator));
            w.u8(e.fins);
            w.boolean(e.revoked);
        }
    }
    w.end();

    write_qos_buckets(w, {state.slot_names, state.slot_workers, state.workers});

    w.begin(section_kind::counters);
    w.u32(static_cast<uint32_t>(s.counters.size()));
    for (const auto& [key, value] : s.counters) {
        w.string(key);
        w.pod(value);
    }
    w.end();
}

bool read_image_early(handover::image_reader& r, daemon_state& state, early_inheritance& out) {
    auto d = r.section(section_kind::daemon);
    const std::string host = d.string();
    if (d.ok() && host != state.config.name) {
        d.fail("the running jakirod is host '" + host + "', this configuration is '" +
               state.config.name + "'");
        return false;
    }
    out.frozen = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(d.i64()));
    for (auto& n : state.restarts.counts) {
        n = d.u64();
    }
    // The slot names are read again by read_image_late.
    out.from_version = r.writer();

    auto l = r.section(section_kind::listeners);
    if (l.boolean()) {
        out.metrics_listener = l.fd();
    }
    if (l.boolean()) {
        const std::string iface = l.string();
        const int fd = l.fd();
        if (fd >= 0) {
            vnet_face::inherit_tap(iface, fd);
        }
    }
    if (r.has(section_kind::counters)) {
        auto c = r.section(section_kind::counters);
        const uint32_t n = c.count(max_counters);
        for (uint32_t i = 0; i < n && c.ok(); ++i) {
            const std::string key = c.string();
            state.counter_bases[key] = c.pod<double>();
        }
        state.restarts.carried["counters"] = n;
    }
    return r.ok();
}

bool read_image_late(handover::image_reader& r, daemon_state& state,
                     const std::vector<worker_context*>& workers) {
    auto d = r.section(section_kind::daemon);
    (void)d.string();
    (void)d.i64();
    for (std::size_t i = 0; i < state.restarts.counts.size(); ++i) {
        (void)d.u64();
    }
    const uint32_t slots = d.count(max_slots);
    std::vector<std::string> old_names(slots);
    for (auto& name : old_names) {
        name = d.string();
    }
    std::map<std::string, uint16_t> new_slot;
    for (std::size_t slot = 0; slot < state.slot_names.size(); ++slot) {
        if (!state.slot_names[slot].empty()) {
            new_slot[state.slot_names[slot]] = static_cast<uint16_t>(slot);
        }
    }

    if (r.has(section_kind::neighbours)) {
        auto n = r.section(section_kind::neighbours);
        const uint32_t count = n.count(max_neighbours);
        uint64_t learnt = 0;
        for (uint32_t i = 0; i < count && n.ok(); ++i) {
            const uint32_t ip = n.u32();
            const auto mac = n.pod<rte_ether_addr>();
            // Only hosts this configuration tunnels to (their slots exist after start).
            learnt += state.neighbors->learn(ip, mac) ? 1 : 0;
        }
        state.restarts.carried["neighbours"] = learnt;
    }

    if (r.has(section_kind::flows)) {
        auto f = r.section(section_kind::flows);
        const uint32_t count = f.count(max_flows);
        uint64_t restored = 0, dropped = 0;
        for (uint32_t i = 0; i < count && f.ok(); ++i) {
            secgroup::flow_entry e{};
            if (f.version() >= 2) {
                e.key = f.pod<secgroup::flow_key>();
            } else {
                // Version 1 keys were IPv4 only: the first 16 bytes of today's.
                const auto v4 = f.pod<std::array<uint8_t, secgroup::ipv4_flow_key_bytes>>();
                std::memcpy(static_cast<void*>(&e.key), v4.data(), v4.size());
            }
            e.last_seen = f.u64();
            e.packets[0] = f.u64();
            e.packets[1] = f.u64();
            e.bytes[0] = f.u64();
            e.bytes[1] = f.u64();
            e.rule = f.u32();
            const uint8_t flow_state = f.u8();
            const uint8_t initiator = f.u8();
            e.fins = f.u8();
            e.revoked = f.boolean();
            if (flow_state >= static_cast<uint8_t>(secgroup::flow_state::count_) || initiator > 1) {
                f.fail("a flow with state " + std::to_string(flow_state));
                break;
            }
            e.state = static_cast<secgroup::flow_state>(flow_state);
            e.initiator = static_cast<secgroup::direction>(initiator);
            e.generation = recheck_generation;
            // A vNIC the new configuration no longer has keeps no flows.
            const auto it = e.key.vnic < old_names.size() ? new_slot.find(old_names[e.key.vnic])
                                                          : new_slot.end();
            if (it == new_slot.end()) {
                ++dropped;
                continue;
            }
            e.key.vnic = it->second;
            const unsigned w = state.worker_of(it->second);
            worker_context* owner = w < workers.size() ? workers[w] : nullptr;
            if (owner != nullptr && owner->flows->restore(e)) {
                ++restored;
            } else {
                ++dropped;
            }
        }
        state.restarts.carried["flows"] = restored;
        if (dropped != 0) {
            state.restarts.lost["flows"] = dropped;
        }
    }

    // Without the section (an older predecessor) every bucket starts full.
    if (r.has(section_kind::qos_buckets)) {
        uint64_t carried = 0;
        if (!read_qos_buckets(r, {state.slot_names, state.slot_workers, workers}, now_ns(),
                              carried)) {
            return false;
        }
        state.restarts.carried["qos_buckets"] = carried;
    }
    return r.ok();
}

}  // namespace jakiro
