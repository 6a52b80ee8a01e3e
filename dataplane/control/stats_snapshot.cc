#include "dataplane/control/stats_snapshot.hh"

#include "dataplane/control/overlay_report.hh"

#include <rte_ethdev.h>

#include <chrono>

#include "dataplane/control/daemon_state.hh"
#include "dataplane/control/rdma_engines.hh"
#include "dataplane/control/rdma_memory_report.hh"
#include "dataplane/ports.hh"
#include "dataplane/shaping/egress_shaper.hh"
#include "dataplane/shaping/ingress_policer.hh"
#include "dataplane/vnet_face/face_registry.hh"

namespace jakiro {

// ---------------------------------------------------------------- QP totals

qp_totals::sums qp_totals::of(const rnic::qp_report& q) {
    sums s{};
#define JAKIRO_QP_COUNTER(name) s[name] = q.name;
#include "rnic/qp_counters.def"
#undef JAKIRO_QP_COUNTER
    return s;
}

std::map<uint16_t, qp_totals::sums> qp_totals::by_vnic(
    const std::vector<rnic::qp_report>& live, const std::vector<rnic::qp_report>& retired) {
    std::map<uint16_t, sums> out;
    for (const auto* rows : {&live, &retired}) {
        for (const auto& q : *rows) {
            sums& total = out[q.vnic];
            const sums more = of(q);
            for (std::size_t i = 0; i < total.size(); ++i) {
                total[i] += more[i];
            }
        }
    }
    return out;
}

// ---------------------------------------------------------------- collection

const std::string& stats_snapshot::name_of(uint16_t slot) const {
    static const std::string none;
    return slot < slot_names.size() ? slot_names[slot] : none;
}

namespace {

uint64_t resolved_neighbors(const daemon_state& state) {
    uint64_t resolved = 0;
    for (uint32_t slot = 0; slot < state.neighbors->size(); ++slot) {
        resolved += state.neighbors->mac(slot).has_value();
    }
    return resolved;
}

datapath_totals datapath_of(const lcore_counters& c) {
    datapath_totals t;
#define JAKIRO_DATAPATH_COUNTER(name) t.name = c.name.read();
#include "dataplane/control/datapath_counters.def"
#undef JAKIRO_DATAPATH_COUNTER
    return t;
}

void add(datapath_totals& total, const datapath_totals& more) {
#define JAKIRO_DATAPATH_COUNTER(name) total.name += more.name;
#include "dataplane/control/datapath_counters.def"
#undef JAKIRO_DATAPATH_COUNTER
}

std::vector<port_snapshot> ports_of(const daemon_state& state) {
    std::vector<port_snapshot> out;
    for (const auto& port : state.ports) {
        const rte_eth_stats s = port_stats(port.port_id);
        const superframe_counts super = port_superframes(port.port_id);
        out.push_back({port.role, port_link_up(port.port_id), s.ipackets, s.ibytes, s.opackets,
                       s.obytes, s.imissed, s.ierrors, s.oerrors, super.rx, super.tx});
    }
    return out;
}

vnic_bounds bounds_of(const daemon_state& state, uint16_t slot) {
    vnic_bounds b;
    for (const auto* worker : state.workers) {
        b.flows += worker->flows->flows_of(slot);
        b.flows_refused += worker->counters.vnics[slot].conntrack_allowance_exceeded.read();
        b.buffers_refused += worker->counters.vnics[slot].buffer_allowance_exceeded.read();
        b.packet_rate_exceeded += worker->counters.vnics[slot].packet_rate_exceeded.read();
        if (worker->engine != nullptr) {
            b.local_work_over_allowance += worker->engine->vnic_over_allowance(slot);
            b.rdma_qp_visits += worker->engine->vnic_visits(slot);
            b.rdma_poller_wakes += worker->engine->vnic_poller_wakes(slot);
            b.rdma_sleep_asks += worker->engine->vnic_sleep_asks(slot);
        }
    }
    // The snapshot is the truth of what the datapath enforces (publish() runs on this thread).
    state.publisher->read_current([&](const datapath_tables& tables) {
        if (slot < tables.vnics.size()) {
            b.max_flows = tables.vnics[slot].max_flows;
            b.max_packet_buffers = tables.vnics[slot].max_packet_buffers;
            b.max_packet_rate = tables.vnics[slot].max_packet_rate;
            b.max_local_work_rate = tables.vnics[slot].rdma_local_work_rate;
        }
    });
    b.packet_buffers = vnet_face::superframe_charges().held(slot);
    if (const egress_shaper* shaper = state.shaper_of(slot)) {
        b.qos_queue_drops = shaper->counters(slot).tcp_queue_drops.read();
        b.qos_queue_holds = shaper->counters(slot).tcp_queue_holds.read();
    }
    return b;
}

// Every live vNIC's counters, summed over the workers, with its QPs' totals.
std::vector<vnic_snapshot> vnics_of(const daemon_state& state,
                                    const std::map<uint16_t, qp_totals::sums>& qps) {
    std::vector<vnic_snapshot> out;
    for (std::size_t s = 0; s < state.slot_names.size(); ++s) {
        if (state.slot_names[s].empty()) {
            continue;
        }
        const auto slot = static_cast<uint16_t>(s);
        vnic_snapshot v;
        v.slot = slot;
        v.name = state.slot_names[s];
        for (const auto* worker : state.workers) {
            const vnic_counters& c = worker->counters.vnics[slot];
#define JAKIRO_VNIC_COUNTER(name, field) v.name += c.field.read();
#include "dataplane/control/vnic_counters.def"
#undef JAKIRO_VNIC_COUNTER
        }
        v.bounds = bounds_of(state, slot);
        if (const auto it = qps.find(slot); it != qps.end()) {
            v.qps = it->second;
        }
        v.rdma_memory = rdma_memory_of(state, slot);
        out.push_back(std::move(v));
    }
    return out;
}

// The rule's remote side as written: a CIDR of either family (both for the implicit all-egress
// rule), or a group.
std::string remote_text(const secgroup::rule& rule) {
    std::string text;
    if (rule.remote) {
        text = format_ipv4(rule.remote->address) + "/" + std::to_string(rule.remote->length);
    }
    if (rule.remote6) {
        text += (text.empty() ? "" : " ") + format_ipv6(rule.remote6->address) + "/" +
                std::to_string(rule.remote6->length);
    }
    return text.empty() ? "group " + rule.remote_group : text;
}

std::string ports_text(const secgroup::rule& rule) {
    const bool has_ports =
        rule.proto == secgroup::protocol::tcp || rule.proto == secgroup::protocol::udp;
    if (!has_ports) {
        return "-";
    }
    if (rule.ports.low == rule.ports.high) {
        return std::to_string(rule.ports.low);
    }
    if (rule.ports.low == 0 && rule.ports.high == 65535) {
        return "any";
    }
    return std::to_string(rule.ports.low) + "-" + std::to_string(rule.ports.high);
}

uint64_t rule_hits_counted(const daemon_state& state, uint32_t id) {
    uint64_t counted = 0;
    for (const auto* worker : state.workers) {
        counted += worker->counters.rule_hits[id].read();
    }
    return counted;
}

std::vector<rule_snapshot> rules_of(const daemon_state& state) {
    std::vector<rule_snapshot> out;
    const secgroup::rule_catalog catalog(state.config.security_groups);
    for (std::size_t g = 0; g < state.config.security_groups.size(); ++g) {
        const auto& group = state.config.security_groups[g];
        for (auto dir : {secgroup::direction::ingress, secgroup::direction::egress}) {
            const auto& rules = dir == secgroup::direction::ingress ? group.ingress : group.egress;
            for (std::size_t r = 0; r < rules.size(); ++r) {
                const auto& rule = rules[r];
                rule_snapshot row;
                row.vpc = group.vpc;
                row.group = group.name;
                row.direction = dir == secgroup::direction::ingress ? "ingress" : "egress";
                row.index = r;
                row.line = rule.line;
                row.proto = secgroup::to_string(rule.proto);
                row.ports = ports_text(rule);
                row.remote = remote_text(rule);
                if (const uint32_t id = catalog.id(g, dir, r); id < max_rules) {
                    row.hits = state.rule_hits.hits(id, rule_hits_counted(state, id));
                }
                out.push_back(std::move(row));
            }
        }
    }
    return out;
}

conntrack_snapshot conntrack_of(const daemon_state& state) {
    conntrack_snapshot c;
    for (const auto* worker : state.workers) {
        c.flows += worker->flows->size();
        c.capacity += worker->flows->capacity();
        c.created += worker->flows->inserts();
        c.evicted += worker->flows->evictions();
        c.expired += worker->flows->expirations();
        c.classifications += worker->counters.flow_misses.read();
    }
    return c;
}

// Each worker's share (host.workers): the vNICs it owns and its own counters.
std::vector<worker_snapshot> workers_of(const daemon_state& state) {
    std::vector<worker_snapshot> out;
    for (std::size_t w = 0; w < state.workers.size(); ++w) {
        const lcore_counters& c = state.workers[w]->counters;
        worker_snapshot row;
        row.id = static_cast<unsigned>(w);
        for (std::size_t slot = 0; slot < state.slot_names.size(); ++slot) {
            if (!state.slot_names[slot].empty() && slot < state.slot_workers.size() &&
                state.slot_workers[slot] == w) {
                row.vnics.push_back(state.slot_names[slot]);
            }
        }
        for (const auto& v : c.vnics) {
            row.from_tenant_packets += v.from_tenant_packets.read();
            row.to_tenant_packets += v.to_tenant_packets.read();
        }
        row.counters = datapath_of(c);
        out.push_back(std::move(row));
    }
    return out;
}

// The shaped vNICs (a qos: block), in the configuration's order. Their owner shapes and meters
// both of their classes (its engine runs their QPs).
std::vector<qos_vnic_snapshot> qos_of(const daemon_state& state) {
    std::vector<qos_vnic_snapshot> out;
    for (const auto& v : state.config.vnics) {
        if (!v.qos) {
            continue;
        }
        // The vNIC's slot: slot_names holds every slot ever used, by name.
        uint16_t slot = 0;
        while (slot < state.slot_names.size() && state.slot_names[slot] != v.name) {
            ++slot;
        }
        if (slot >= state.slot_names.size()) {
            continue;
        }
        const auto& q = *v.qos;
        const egress_shaper* shaper = state.shaper_of(slot);
        const ingress_policer* policer = state.policer_of(slot);
        const bool shaped = shaper != nullptr && shaper->scheduler().configured(slot);
        qos_vnic_snapshot row;
        row.name = v.name;
        row.rate_bps = q.rate_bps;
        if (shaped) {
            row.grants = shaper->counters(slot).grants.read();
            row.rdma_waits = shaper->counters(slot).rdma_waits.read();
        }
        for (const auto c : qos::all_classes) {
            const auto& k = q.classes[qos::index_of(c)];
            const bool rdma = c == qos::traffic_class::rdma;
            qos_class_snapshot cls;
            cls.cls = c;
            cls.weight = k.weight;
            cls.share_bps = qos::class_share_bps(q, c);
            cls.min_bps = k.min_bps;
            cls.max_bps = k.max_bps;
            if (shaped) {
                const auto& sc = shaper->counters(slot);
                cls.sent = shaper->scheduler().counters(slot, c);
                cls.tail_drops = rdma ? 0 : sc.tcp_queue_drops.read();
                cls.rdma_waits = rdma ? sc.rdma_waits.read() : 0;
                cls.grants = sc.grants.read();
                cls.busy_grants = rdma ? sc.rdma_busy_grants.read() : sc.tcp_busy_grants.read();
            }
            if (rdma && shaper != nullptr) {
                cls.rdma_granted = shaper->counters(slot).rdma_granted.read();
                cls.rdma_busy_grants = shaper->counters(slot).rdma_busy_grants.read();
            }
            if (policer != nullptr) {
                if (const auto* meter = policer->meter(slot)) {
                    cls.received = meter->counters(c);
                }
            }
            row.classes.push_back(cls);
        }
        out.push_back(std::move(row));
    }
    return out;
}

std::optional<engine_snapshot> engines_of(const daemon_state& state) {
    const engine_summary summary = sum_engines(state);
    if (summary.engines == 0) {
        return std::nullopt;
    }
    const engine_totals& c = summary.totals;
    return engine_snapshot{summary.engines, c.received,    c.sent, c.doorbells,
                           c.rechecks,      c.qps_revoked, c.drops};
}

std::optional<verbs_snapshot> rdma_of(const daemon_state& state) {
    if (state.verbs == nullptr) {
        return std::nullopt;
    }
    const verbs::host_reserve& reserve = state.verbs->reserve();
    return verbs_snapshot{state.verbs->client_count(), state.verbs->stats(), state.verbs->reports(),
                          reserve.capacity(),          reserve.demand(),     reserve.held()};
}

}  // namespace

bool daemon_ready(const daemon_state& state) {
    for (const auto& port : state.ports) {
        if (!port_link_up(port.port_id)) {
            return false;
        }
    }
    return resolved_neighbors(state) == state.neighbors->size();
}

stats_snapshot collect_stats(const daemon_state& state, const control_counters& control) {
    stats_snapshot s;
    const auto now = std::chrono::steady_clock::now();
    s.host = state.config.name;
    s.uptime_s = std::chrono::duration<double>(now - state.started).count();
    s.ready = daemon_ready(state);
    s.busy_poll = state.busy_poll;
    s.vnics_configured = state.config.vnics.size();
    s.neighbors = state.neighbors->size();
    s.neighbors_resolved = resolved_neighbors(state);
    if (const auto* sealing = state.workers.empty() ? nullptr : state.workers[0]->sealing) {
        auto& peers = s.overlay_peers.emplace();
        for (const auto& p : sealing->peers()) {
            const auto& c = p.counters;
            peers.push_back({format_ipv4(rte_be_to_cpu_32(p.ip_be)),
                             std::string(encryption_policy_name(p.policy)), p.seals(),
                             __atomic_load_n(&p.shown_tx_epoch, __ATOMIC_RELAXED),
                             __atomic_load_n(&p.shown_rx_epoch, __ATOMIC_RELAXED), c.sealed.read(),
                             c.opened.read(), c.plaintext_sent.read(), c.plaintext_received.read(),
                             c.auth_failed.read(), c.replayed.read(), c.plaintext_refused.read(),
                             c.tx_rekeys.read(), c.rx_epochs.read()});
        }
    }
    s.ports = ports_of(state);

    std::vector<rnic::qp_report> retired;
    s.qps = report_qps(state, &retired);
    s.vnics = vnics_of(state, qp_totals::by_vnic(s.qps, retired));
    s.rules = rules_of(state);
    s.conntrack = conntrack_of(state);
    s.workers = workers_of(state);
    for (const auto& w : s.workers) {
        add(s.datapath, w.counters);
    }
    for (const auto* worker : state.workers) {
        for (std::size_t reason = 0; reason < drop_reason_count; ++reason) {
            s.drops[reason] += worker->counters.drops[reason].read();
        }
    }
    // Taken next to the QoS counters it dates (jakiroctl top divides by its differences).
    s.time_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count());
    s.qos = qos_of(state);
    s.engine = engines_of(state);
    s.rdma = rdma_of(state);
    s.control = control;
    s.restarts = state.restarts;
    s.counter_bases = state.counter_bases;
    s.slot_names = state.slot_names;
    s.slot_workers = state.slot_workers;
    return s;
}

}  // namespace jakiro
