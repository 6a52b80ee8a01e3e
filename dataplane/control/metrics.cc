#include "metrics.hh"

#include <prometheus/text_serializer.h>
#include <rte_ethdev.h>

#include <chrono>
#include <sstream>

#include "../roce/engine.hh"
#include "../verbs/channel_server.hh"
#include "../worker/egress_shaper.hh"
#include "../worker/ingress_policer.hh"
#include "jakiro_version.hh"
#include "reports.hh"

namespace jakiro {

// ---------------------------------------------------------------- QP totals

qp_totals::sums qp_totals::of(const roce::qp_report& q) {
    sums s{};
    s[packets_sent] = q.packets_sent;
    s[packets_received] = q.packets_received;
    s[bytes_sent] = q.bytes_sent;
    s[bytes_received] = q.bytes_received;
    s[retransmitted] = q.retransmitted;
    s[timeouts] = q.timeouts;
    s[naks_sent] = q.naks_sent;
    s[naks_received] = q.naks_received;
    s[rnr_naks_sent] = q.rnr_naks_sent;
    s[rnr_naks_received] = q.rnr_naks_received;
    s[cnps_sent] = q.cnps_sent;
    s[cnps_received] = q.cnps_received;
    s[duplicates] = q.duplicates;
    s[out_of_sequence] = q.out_of_sequence;
    s[completions] = q.completions;
    s[error_completions] = q.error_completions;
    s[messages_dropped] = q.messages_dropped;
    return s;
}

namespace {

void add_to(qp_totals::sums& total, const qp_totals::sums& more) {
    for (std::size_t i = 0; i < total.size(); ++i) {
        total[i] += more[i];
    }
}

}  // namespace

void qp_totals::observe(const std::vector<roce::qp_report>& qps) {
    std::map<std::pair<uint16_t, uint32_t>, sums> now;
    for (const auto& q : qps) {
        const auto key = std::make_pair(q.vnic, q.qpn);
        const sums s = of(q);
        const auto old = _live.find(key);
        if (old != _live.end()) {
            // A counter that went down belongs to a new QP with a reused number: the old one
            // retires with what it had.
            for (std::size_t i = 0; i < s.size(); ++i) {
                if (s[i] < old->second[i]) {
                    add_to(_retired[key.first], old->second);
                    break;
                }
            }
            _live.erase(old);
        }
        now[key] = s;
    }
    for (const auto& [key, s] : _live) {
        add_to(_retired[key.first], s);  // gone since the last look
    }
    _live = std::move(now);
}

std::map<uint16_t, qp_totals::sums> qp_totals::by_vnic() const {
    auto out = _retired;
    for (const auto& [key, s] : _live) {
        add_to(out[key.first], s);
    }
    return out;
}

// ---------------------------------------------------------------- collection

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using labels = std::vector<ClientMetric::Label>;

class families {
  public:
    // A new family; samples go to the last one added.
    families& counter(const char* name, const char* help) {
        _out.push_back({name, help, MetricType::Counter, {}});
        return *this;
    }
    families& gauge(const char* name, const char* help) {
        _out.push_back({name, help, MetricType::Gauge, {}});
        return *this;
    }
    families& sample(labels l, double value) {
        ClientMetric m;
        m.label = std::move(l);
        if (_out.back().type == MetricType::Counter) {
            m.counter.value = value;
        } else {
            m.gauge.value = value;
        }
        _out.back().metric.push_back(std::move(m));
        return *this;
    }
    std::vector<MetricFamily> take() { return std::move(_out); }

  private:
    std::vector<MetricFamily> _out;
};

template <typename Get>
uint64_t total(const daemon_state& state, Get get) {
    uint64_t sum = 0;
    for (const auto* worker : state.workers) {
        sum += get(worker->counters).read();
    }
    return sum;
}

// The vNICs that exist now, with their counter slots.
std::vector<std::pair<uint16_t, std::string>> live_vnics(const daemon_state& state) {
    std::vector<std::pair<uint16_t, std::string>> out;
    for (std::size_t slot = 0; slot < state.slot_names.size(); ++slot) {
        if (!state.slot_names[slot].empty()) {
            out.emplace_back(static_cast<uint16_t>(slot), state.slot_names[slot]);
        }
    }
    return out;
}

void ports(const daemon_state& state, families& f) {
    std::vector<std::pair<std::string, rte_eth_stats>> stats;
    std::vector<std::pair<std::string, bool>> links;
    for (const auto& port : state.ports) {
        rte_eth_stats s{};
        rte_eth_stats_get(port.port_id, &s);
        stats.emplace_back(port.role, s);
        rte_eth_link link{};
        links.emplace_back(port.role, rte_eth_link_get_nowait(port.port_id, &link) == 0 &&
                                          link.link_status == RTE_ETH_LINK_UP);
    }
    f.gauge("jakiro_port_link_up", "1 when the port's link is up (port: uplink or a vNIC's name)");
    for (const auto& [role, up] : links) {
        f.sample({{"port", role}}, up ? 1 : 0);
    }
    f.counter("jakiro_port_packets_total",
              "Packets the port received (direction=rx) and sent (direction=tx)");
    for (const auto& [role, s] : stats) {
        f.sample({{"direction", "rx"}, {"port", role}}, static_cast<double>(s.ipackets));
        f.sample({{"direction", "tx"}, {"port", role}}, static_cast<double>(s.opackets));
    }
    f.counter("jakiro_port_bytes_total", "Bytes the port received (rx) and sent (tx)");
    for (const auto& [role, s] : stats) {
        f.sample({{"direction", "rx"}, {"port", role}}, static_cast<double>(s.ibytes));
        f.sample({{"direction", "tx"}, {"port", role}}, static_cast<double>(s.obytes));
    }
    f.counter("jakiro_port_missed_total",
              "Frames the port dropped because rx was not polled in time");
    for (const auto& [role, s] : stats) {
        f.sample({{"port", role}}, static_cast<double>(s.imissed));
    }
    f.counter("jakiro_port_errors_total", "Erroneous received (rx) and failed sent (tx) frames");
    for (const auto& [role, s] : stats) {
        f.sample({{"direction", "rx"}, {"port", role}}, static_cast<double>(s.ierrors));
        f.sample({{"direction", "tx"}, {"port", role}}, static_cast<double>(s.oerrors));
    }
}

void vnics(const daemon_state& state, families& f) {
    const auto live = live_vnics(state);
    auto per_vnic = [&](const char* name, const char* help, auto pick) {
        f.counter(name, help);
        for (const auto& [slot, vnic] : live) {
            const uint16_t s = slot;
            const double value =
                static_cast<double>(total(state, [&](const lcore_counters& c) -> const counter& {
                    return pick(c.vnics[s]);
                }));
            f.sample({{"vnic", vnic}}, value);
        }
    };
    // direction: egress = from the tenant, ingress = to the tenant (as in security groups).
    auto per_direction = [&](const char* name, const char* help, auto pick_in, auto pick_out) {
        f.counter(name, help);
        for (const auto& [slot, vnic] : live) {
            const uint16_t s = slot;
            f.sample(
                {{"direction", "ingress"}, {"vnic", vnic}},
                static_cast<double>(total(state, [&](const lcore_counters& c) -> const counter& {
                    return pick_in(c.vnics[s]);
                })));
            f.sample(
                {{"direction", "egress"}, {"vnic", vnic}},
                static_cast<double>(total(state, [&](const lcore_counters& c) -> const counter& {
                    return pick_out(c.vnics[s]);
                })));
        }
    };
    using V = const vnic_counters&;
    per_direction(
        "jakiro_vnic_packets_total",
        "Tenant frames of the vNIC's Ethernet face: to the tenant (ingress), from it (egress)",
        [](V v) -> const counter& { return v.to_tenant_packets; },
        [](V v) -> const counter& { return v.from_tenant_packets; });
    per_direction(
        "jakiro_vnic_bytes_total", "Bytes of the vNIC's tenant frames: to (ingress), from (egress)",
        [](V v) -> const counter& { return v.to_tenant_bytes; },
        [](V v) -> const counter& { return v.from_tenant_bytes; });
    per_direction(
        "jakiro_vnic_rdma_packets_total",
        "RoCEv2 frames of the vNIC's RDMA face: received for it (ingress), sent by it (egress)",
        [](V v) -> const counter& { return v.rdma_rx_packets; },
        [](V v) -> const counter& { return v.rdma_tx_packets; });
    per_direction(
        "jakiro_vnic_rdma_bytes_total", "Bytes of the vNIC's RoCEv2 frames (ingress, egress)",
        [](V v) -> const counter& { return v.rdma_rx_bytes; },
        [](V v) -> const counter& { return v.rdma_tx_bytes; });
    per_vnic("jakiro_vnic_drops_total", "Frames of the vNIC dropped (any reason)",
             [](V v) -> const counter& { return v.drops; });
    per_direction(
        "jakiro_sg_allowed_total",
        "Packets the vNIC's security groups let in (ingress) and out (egress)",
        [](V v) -> const counter& { return v.sg_allowed[0]; },
        [](V v) -> const counter& { return v.sg_allowed[1]; });
    per_direction(
        "jakiro_sg_denied_total", "Packets the vNIC's security groups refused (ingress, egress)",
        [](V v) -> const counter& { return v.sg_denied[0]; },
        [](V v) -> const counter& { return v.sg_denied[1]; });
}

void security_groups(const daemon_state& state, families& f) {
    f.counter("jakiro_sg_rule_hits_total",
              "Packets of flows each security-group rule allowed (rule: index in its list, "
              "line: in the YAML)");
    const secgroup::rule_catalog catalog(state.config.security_groups);
    for (std::size_t g = 0; g < state.config.security_groups.size(); ++g) {
        const auto& group = state.config.security_groups[g];
        for (auto dir : {secgroup::direction::ingress, secgroup::direction::egress}) {
            const auto& rules = dir == secgroup::direction::ingress ? group.ingress : group.egress;
            for (std::size_t r = 0; r < rules.size(); ++r) {
                const uint32_t id = catalog.id(g, dir, r);
                const uint64_t hits = id < max_rules
                                          ? total(state,
                                                  [&](const lcore_counters& c) -> const counter& {
                                                      return c.rule_hits[id];
                                                  })
                                          : 0;
                f.sample({{"direction", dir == secgroup::direction::ingress ? "ingress" : "egress"},
                          {"group", group.name},
                          {"line", std::to_string(rules[r].line)},
                          {"rule", std::to_string(r)},
                          {"vpc", group.vpc}},
                         static_cast<double>(hits));
            }
        }
    }
    uint64_t flows = 0, capacity = 0, inserts = 0, evictions = 0, expirations = 0;
    for (const auto* worker : state.workers) {
        flows += worker->flows->size();
        capacity += worker->flows->capacity();
        inserts += worker->flows->inserts();
        evictions += worker->flows->evictions();
        expirations += worker->flows->expirations();
    }
    f.gauge("jakiro_conntrack_flows", "Flows in the conntrack table now").sample({}, flows);
    f.gauge("jakiro_conntrack_capacity", "Flows the conntrack table holds").sample({}, capacity);
    f.counter("jakiro_conntrack_created_total", "Flows created").sample({}, inserts);
    f.counter("jakiro_conntrack_evicted_total", "Flows evicted because the table was full")
        .sample({}, evictions);
    f.counter("jakiro_conntrack_expired_total", "Flows removed after their idle timeout")
        .sample({}, expirations);
    f.counter("jakiro_conntrack_classifications_total",
              "Packets that missed the flow table and were classified against the rules")
        .sample({}, total(state,
                          [](const lcore_counters& c) -> const counter& { return c.flow_misses; }));
}

void drops_and_globals(const daemon_state& state, families& f) {
    f.counter("jakiro_drops_total", "Frames the datapath dropped, by reason (jakiroctl stats)");
    for (std::size_t reason = 0; reason < drop_reason_count; ++reason) {
        f.sample({{"reason", std::string(drop_reason_names[reason])}},
                 total(state,
                       [&](const lcore_counters& c) -> const counter& { return c.drops[reason]; }));
    }
    struct global {
        const char* name;
        const char* help;
        const counter& (*get)(const lcore_counters&);
    };
#define JK_GET(field) [](const lcore_counters& c) -> const counter& { return c.field; }
    const global globals[] = {
        {"jakiro_encapsulated_packets_total", "Tenant frames sent to the fabric in VXLAN",
         JK_GET(encapsulated)},
        {"jakiro_decapsulated_packets_total", "VXLAN frames from the fabric delivered to a vNIC",
         JK_GET(decapsulated)},
        {"jakiro_switched_locally_packets_total", "Tenant frames sent port to port on this host",
         JK_GET(switched_locally)},
        {"jakiro_rdma_local_messages_total",
         "RDMA messages moved memory to memory between two local vNICs",
         JK_GET(rdma_local_messages)},
        {"jakiro_arp_requests_sent_total", "ARP requests sent for underlay neighbours",
         JK_GET(arp_requests_sent)},
        {"jakiro_ecn_ce_marked_on_decap_total",
         "Inner packets marked CE on decapsulation (RFC 6040)", JK_GET(ce_marked_on_decap)},
        {"jakiro_qos_ce_marked_total", "Packets marked CE by DHTB ingress metering (all vNICs)",
         JK_GET(qos_ce_marked)},
    };
    for (const auto& g : globals) {
        f.counter(g.name, g.help).sample({}, total(state, g.get));
    }
    f.counter("jakiro_arp_replies_total",
              "ARP replies jakirod sent: to tenants (the VPC gateway), on the underlay, in the "
              "overlay");
    f.sample({{"to", "tenants"}}, total(state, JK_GET(arp_replies_to_tenants)));
    f.sample({{"to", "underlay"}}, total(state, JK_GET(arp_replies_on_underlay)));
    f.sample({{"to", "overlay"}}, total(state, JK_GET(arp_replies_in_overlay)));

    // The worker: how it spent its time. Polls that found work (or busy polling), idle naps,
    // naps while only shaped frames waited, and naps cut short by an arriving frame.
    const global worker[] = {
        {"jakiro_worker_busy_polls_total",
         "Worker loop iterations that found work (every iteration with --busy-poll)",
         JK_GET(busy_polls)},
        {"jakiro_worker_idle_sleeps_total", "Times the idle worker slept (10 us doubling to 2 ms)",
         JK_GET(idle_sleeps)},
        {"jakiro_worker_throttled_sleeps_total",
         "Times the worker napped while only shaped frames waited for tokens",
         JK_GET(throttled_sleeps)},
        {"jakiro_worker_rx_wakes_total", "Idle sleeps cut short by an arriving frame",
         JK_GET(rx_wakes)},
    };
#undef JK_GET
    for (const auto& w : worker) {
        f.counter(w.name, w.help);
        for (std::size_t i = 0; i < state.workers.size(); ++i) {
            f.sample({{"worker", std::to_string(i)}},
                     static_cast<double>(w.get(state.workers[i]->counters).read()));
        }
    }
    f.gauge("jakiro_worker_busy_poll", "1 when the worker never sleeps (--busy-poll)")
        .sample({}, state.busy_poll ? 1 : 0);
}

void qos_metrics(const daemon_state& state, families& f) {
    struct row {
        std::string vnic;
        qos::traffic_class cls;
        uint64_t rate, weight, share, min, max;
        qos::class_counters sent;
        uint64_t tail_drops, busy_grants;
        qos::ingress_class_counters in;
    };
    std::vector<row> rows;
    std::vector<std::tuple<std::string, uint64_t, uint64_t, uint64_t>>
        per_vnic;  // rate, grants, waits
    for (const auto& v : state.config.vnics) {
        if (!v.qos) {
            continue;
        }
        uint16_t slot = 0;
        while (slot < state.slot_names.size() && state.slot_names[slot] != v.name) {
            ++slot;
        }
        if (slot >= state.slot_names.size()) {
            continue;
        }
        const auto& q = *v.qos;
        uint32_t weights = 0;
        for (const auto& c : q.classes) {
            weights += c.weight;
        }
        const bool shaped = state.shaper != nullptr && state.shaper->scheduler().configured(slot);
        const auto* sc = state.shaper != nullptr ? &state.shaper->counters(slot) : nullptr;
        per_vnic.emplace_back(v.name, q.rate_bps, shaped ? sc->grants.read() : 0,
                              shaped ? sc->rdma_waits.read() : 0);
        for (const auto c : qos::all_classes) {
            const auto& k = q.classes[qos::index_of(c)];
            row r{v.name,    c,         q.rate_bps, k.weight, q.rate_bps / weights * k.weight,
                  k.min_bps, k.max_bps, {},         0,        0,
                  {}};
            if (shaped) {
                r.sent = state.shaper->scheduler().counters(slot, c);
                const bool rdma = c == qos::traffic_class::rdma;
                r.tail_drops = rdma ? 0 : sc->tcp_queue_drops.read();
                r.busy_grants = rdma ? sc->rdma_busy_grants.read() : sc->tcp_busy_grants.read();
            }
            if (state.policer != nullptr) {
                if (const auto* meter = state.policer->meter(slot)) {
                    r.in = meter->counters(c);
                }
            }
            rows.push_back(r);
        }
    }
    auto vnic_class = [](const row& r) -> labels {
        return {{"class", qos::class_name(r.cls)}, {"vnic", r.vnic}};
    };
    f.gauge("jakiro_qos_rate_bps", "DHTB: the shaped vNIC's configured rate, bit/s");
    for (const auto& [vnic, rate, grants, waits] : per_vnic) {
        f.sample({{"vnic", vnic}}, static_cast<double>(rate));
    }
    f.counter("jakiro_qos_grants_total", "DHTB: token grants made to the vNIC's classes");
    for (const auto& [vnic, rate, grants, waits] : per_vnic) {
        f.sample({{"vnic", vnic}}, static_cast<double>(grants));
    }
    f.counter("jakiro_qos_rdma_waits_total",
              "DHTB: times the RoCE engine found the vNIC's rdma grant spent");
    for (const auto& [vnic, rate, grants, waits] : per_vnic) {
        f.sample({{"vnic", vnic}}, static_cast<double>(waits));
    }
    struct per_class {
        const char* name;
        const char* help;
        bool counter;
        uint64_t (*get)(const row&);
    };
    const per_class classes[] = {
        {"jakiro_qos_weight", "DHTB: the class's weight", false,
         [](const row& r) { return r.weight; }},
        {"jakiro_qos_share_bps", "DHTB: the class's configured share of the rate, bit/s", false,
         [](const row& r) { return r.share; }},
        {"jakiro_qos_min_bps", "DHTB: the class's guaranteed minimum, bit/s (0: none)", false,
         [](const row& r) { return r.min; }},
        {"jakiro_qos_max_bps", "DHTB: the class's ceiling, bit/s (0: none)", false,
         [](const row& r) { return r.max; }},
        {"jakiro_qos_sent_bytes_total", "DHTB egress: charged bytes the class sent", true,
         [](const row& r) { return r.sent.bytes; }},
        {"jakiro_qos_sent_packets_total", "DHTB egress: packets the class sent", true,
         [](const row& r) { return r.sent.packets; }},
        {"jakiro_qos_tail_drops_total", "DHTB egress: frames tail-dropped (the tcp queue was full)",
         true, [](const row& r) { return r.tail_drops; }},
        {"jakiro_qos_busy_grants_total", "DHTB egress: grants made while the class had work", true,
         [](const row& r) { return r.busy_grants; }},
        {"jakiro_qos_received_bytes_total", "DHTB ingress: charged bytes received for the class",
         true, [](const row& r) { return r.in.bytes; }},
        {"jakiro_qos_received_packets_total", "DHTB ingress: packets received for the class", true,
         [](const row& r) { return r.in.packets; }},
        {"jakiro_qos_ingress_ce_marked_total",
         "DHTB ingress: packets marked CE above the class's share", true,
         [](const row& r) { return r.in.ce_marked; }},
        {"jakiro_qos_ingress_dropped_total", "DHTB ingress: packets dropped beyond the burst", true,
         [](const row& r) { return r.in.dropped; }},
        {"jakiro_qos_cnps_total", "DHTB ingress: RoCEv2 CNPs sent to the class's senders", true,
         [](const row& r) { return r.in.cnps; }},
    };
    for (const auto& c : classes) {
        c.counter ? f.counter(c.name, c.help) : f.gauge(c.name, c.help);
        for (const auto& r : rows) {
            f.sample(vnic_class(r), static_cast<double>(c.get(r)));
        }
    }
}

void rdma_metrics(const daemon_state& state, qp_totals& totals, families& f) {
    static const char* states[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
    const auto qps =
        state.engine != nullptr ? state.engine->report() : std::vector<roce::qp_report>{};
    totals.observe(qps);
    auto name_of_slot = [&](uint16_t slot) -> std::string {
        return slot < state.slot_names.size() ? state.slot_names[slot] : "";
    };
    std::map<std::tuple<std::string, std::string, std::string>, uint64_t> counts;
    for (const auto& q : qps) {
        const char* type = q.type == IBV_QPT_UD ? "UD" : q.type == IBV_QPT_UC ? "UC" : "RC";
        const std::string name = name_of_slot(q.vnic);
        if (!name.empty()) {
            ++counts[{name, type, q.state < 7 ? states[q.state] : "unknown"}];
        }
    }
    f.gauge("jakiro_rdma_qps", "RDMA queue pairs now, by vNIC, transport and state");
    for (const auto& [key, n] : counts) {
        f.sample(
            {{"state", std::get<2>(key)}, {"type", std::get<1>(key)}, {"vnic", std::get<0>(key)}},
            static_cast<double>(n));
    }
    const auto sums = totals.by_vnic();
    const auto live = live_vnics(state);
    auto value = [&](uint16_t slot, qp_totals::field field) -> double {
        const auto it = sums.find(slot);
        return it == sums.end() ? 0 : static_cast<double>(it->second[field]);
    };
    struct one {
        const char* name;
        const char* help;
        qp_totals::field field;
    };
    const one singles[] = {
        {"jakiro_rdma_retransmitted_packets_total",
         "Packets the vNIC's QPs sent again (go-back-N after a NAK or a timeout)",
         qp_totals::retransmitted},
        {"jakiro_rdma_timeouts_total", "Retransmit timer expiries of the vNIC's QPs",
         qp_totals::timeouts},
        {"jakiro_rdma_duplicates_total", "Duplicate packets the vNIC's QPs received",
         qp_totals::duplicates},
        {"jakiro_rdma_out_of_sequence_total", "Out-of-sequence packets the vNIC's QPs received",
         qp_totals::out_of_sequence},
        {"jakiro_rdma_messages_dropped_total", "UC and UD messages the vNIC's QPs dropped",
         qp_totals::messages_dropped},
    };
    for (const auto& s : singles) {
        f.counter(s.name, s.help);
        for (const auto& [slot, vnic] : live) {
            f.sample({{"vnic", vnic}}, value(slot, s.field));
        }
    }
    struct two {
        const char* name;
        const char* help;
        const char* first_label;
        qp_totals::field first;
        const char* second_label;
        qp_totals::field second;
    };
    const two pairs[] = {
        {"jakiro_rdma_naks_total", "Sequence NAKs of the vNIC's QPs: sent (tx), received (rx)",
         "tx", qp_totals::naks_sent, "rx", qp_totals::naks_received},
        {"jakiro_rdma_rnr_naks_total", "RNR NAKs of the vNIC's QPs: sent (tx), received (rx)", "tx",
         qp_totals::rnr_naks_sent, "rx", qp_totals::rnr_naks_received},
        {"jakiro_rdma_cnps_total", "RoCEv2 CNPs of the vNIC's QPs: sent (tx), received (rx)", "tx",
         qp_totals::cnps_sent, "rx", qp_totals::cnps_received},
        {"jakiro_rdma_qp_packets_total", "Packets of the vNIC's QPs: sent (tx), received (rx)",
         "tx", qp_totals::packets_sent, "rx", qp_totals::packets_received},
        {"jakiro_rdma_qp_bytes_total", "Bytes of the vNIC's QPs: sent (tx), received (rx)", "tx",
         qp_totals::bytes_sent, "rx", qp_totals::bytes_received},
    };
    for (const auto& p : pairs) {
        f.counter(p.name, p.help);
        for (const auto& [slot, vnic] : live) {
            f.sample({{"direction", p.first_label}, {"vnic", vnic}}, value(slot, p.first));
            f.sample({{"direction", p.second_label}, {"vnic", vnic}}, value(slot, p.second));
        }
    }
    f.counter("jakiro_rdma_completions_total",
              "Work completions of the vNIC's QPs (status: ok or error)");
    for (const auto& [slot, vnic] : live) {
        const double all = value(slot, qp_totals::completions);
        const double errors = value(slot, qp_totals::error_completions);
        f.sample({{"status", "error"}, {"vnic", vnic}}, errors);
        f.sample({{"status", "ok"}, {"vnic", vnic}}, all > errors ? all - errors : 0);
    }

    if (state.engine != nullptr) {
        const auto& c = state.engine->counters();
        f.counter("jakiro_rdma_engine_packets_total",
                  "RoCEv2 packets the engine received (rx) and sent (tx)");
        f.sample({{"direction", "rx"}}, static_cast<double>(c.received.load()));
        f.sample({{"direction", "tx"}}, static_cast<double>(c.sent.load()));
        f.counter("jakiro_rdma_doorbells_total", "Doorbells the engine answered")
            .sample({}, static_cast<double>(c.doorbells.load()));
        f.counter("jakiro_rdma_policy_rechecks_total",
                  "Connected QPs admitted again after a policy change")
            .sample({}, static_cast<double>(c.rechecks.load()));
        f.counter("jakiro_rdma_qps_revoked_total",
                  "QPs sent to ERR because a policy change no longer allows their peer")
            .sample({}, static_cast<double>(c.qps_revoked.load()));
        f.counter("jakiro_rdma_drops_total", "RoCEv2 packets the engine dropped, by reason");
        for (std::size_t d = 0; d < static_cast<std::size_t>(roce::engine_drop::count); ++d) {
            f.sample({{"reason", roce::engine_drop_name(static_cast<roce::engine_drop>(d))}},
                     static_cast<double>(c.drops[d].load()));
        }
    }
    if (state.verbs != nullptr) {
        const verbs::channel_stats v = state.verbs->stats();
        f.gauge("jakiro_rdma_clients", "Verbs connections (contexts) open now")
            .sample({}, static_cast<double>(state.verbs->client_count()));
        f.counter("jakiro_rdma_connections_total",
                  "Verbs connections by outcome: accepted, refused over the vNIC's limit, refused "
                  "from a foreign namespace, closed without HELLO in time");
        f.sample({{"result", "accepted"}}, static_cast<double>(v.accepted));
        f.sample({{"result", "refused_over_limit"}}, static_cast<double>(v.refused));
        f.sample({{"result", "refused_foreign"}}, static_cast<double>(v.refused_foreign));
        f.sample({{"result", "hello_timeout"}}, static_cast<double>(v.hello_timeouts));
        f.counter("jakiro_rdma_requests_total",
                  "Verbs requests served (bad: refused as malformed)");
        f.sample(
            {{"result", "ok"}},
            static_cast<double>(v.requests > v.bad_requests ? v.requests - v.bad_requests : 0));
        f.sample({{"result", "bad"}}, static_cast<double>(v.bad_requests));
    }
}

}  // namespace

std::vector<MetricFamily> collect_metrics(const daemon_state& state, qp_totals& qps,
                                          const control_counters& control) {
    families f;
    const auto uptime =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - state.started).count();
    f.gauge("jakiro_info", "Always 1; the labels say which host and version")
        .sample({{"host", state.config.name}, {"version", JAKIRO_VERSION}}, 1);
    f.gauge("jakiro_ready",
            "1 when every port has link and every remote host's underlay MAC is resolved")
        .sample({}, daemon_ready(state) ? 1 : 0);
    f.gauge("jakiro_uptime_seconds", "Seconds since jakirod started").sample({}, uptime);
    f.gauge("jakiro_vnics", "vNICs configured")
        .sample({}, static_cast<double>(state.config.vnics.size()));
    uint16_t resolved = 0;
    for (uint16_t slot = 0; slot < state.neighbors->size(); ++slot) {
        resolved += state.neighbors->mac(slot).has_value();
    }
    f.gauge("jakiro_underlay_neighbors", "Remote hosts' underlay addresses by ARP state");
    f.sample({{"state", "resolved"}}, resolved);
    f.sample({{"state", "unresolved"}}, state.neighbors->size() - resolved);
    ports(state, f);
    vnics(state, f);
    security_groups(state, f);
    drops_and_globals(state, f);
    qos_metrics(state, f);
    rdma_metrics(state, qps, f);
    f.counter("jakiro_control_dropped_clients_total",
              "Control and metrics clients dropped at their deadline (slow to ask or not reading)")
        .sample({}, static_cast<double>(control.control_dropped));
    f.counter("jakiro_metrics_scrapes_total", "/metrics requests answered (this one included)")
        .sample({}, static_cast<double>(control.scrapes));
    f.counter("jakiro_log_lines_suppressed_total", "Log lines the rate limit held back")
        .sample({}, static_cast<double>(control.log_suppressed));
    return f.take();
}

std::string render_metrics_text(const std::vector<MetricFamily>& families) {
    std::ostringstream out;
    prometheus::TextSerializer().Serialize(out, families);
    return out.str();
}

// ---------------------------------------------------------------- HTTP

namespace {

std::string response(const char* status, const std::string& type, const std::string& body,
                     bool head_only, const char* extra = "") {
    std::string out = std::string("HTTP/1.1 ") + status + "\r\n";
    out += "Content-Type: " + type + "\r\n";
    out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    out += extra;
    out += "Connection: close\r\n\r\n";
    if (!head_only) {
        out += body;
    }
    return out;
}

}  // namespace

std::string http_metrics_response(const std::string& request_head,
                                  const std::function<std::string()>& body) {
    const auto end = request_head.find_first_of("\r\n");
    const bool complete = request_head.find("\r\n\r\n") != std::string::npos ||
                          request_head.find("\n\n") != std::string::npos;
    std::istringstream line(request_head.substr(0, end));
    std::string method, target, version, more;
    line >> method >> target >> version;
    const char* text = "text/plain; charset=utf-8";
    if (!complete || method.empty() || target.empty() || version.rfind("HTTP/1.", 0) != 0 ||
        (line >> more)) {
        return response("400 Bad Request", text, "bad request\n", false);
    }
    const bool head = method == "HEAD";
    if (method != "GET" && !head) {
        return response("405 Method Not Allowed", text, "only GET and HEAD\n", false,
                        "Allow: GET, HEAD\r\n");
    }
    const std::string path = target.substr(0, target.find('?'));
    if (path == "/metrics") {
        return response("200 OK", "text/plain; version=0.0.4; charset=utf-8", body(), head);
    }
    if (path == "/") {
        return response("200 OK", text, "jakirod: metrics are at /metrics\n", head);
    }
    return response("404 Not Found", text, "not found; metrics are at /metrics\n", head);
}

}  // namespace jakiro
