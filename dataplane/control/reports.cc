#include "reports.hh"
#include "restart_report.hh"

#include "../ports.hh"
#include "../shaping/egress_shaper.hh"
#include "../shaping/ingress_policer.hh"
#include "../vnet_face/face_registry.hh"
#include "control_plane_report.hh"
#include "rdma_engines.hh"
#include "rdma_memory_report.hh"
#include "rnic/engine.hh"
#include "rnic/verbs/channel_server.hh"

#include <chrono>

#include <rte_cycles.h>
#include <rte_ethdev.h>

#include <cstdio>
#include <sstream>

#include "json_writer.hh"

namespace jakiro {

namespace {

bool link_up(uint16_t port) {
    return port_link_up(port);
}

uint16_t resolved_neighbors(const daemon_state& state) {
    uint16_t resolved = 0;
    for (uint16_t slot = 0; slot < state.neighbors->size(); ++slot) {
        resolved += state.neighbors->mac(slot).has_value();
    }
    return resolved;
}

// Sums one counter over all workers.
template <typename Get>
uint64_t total(const daemon_state& state, Get get) {
    uint64_t sum = 0;
    for (const auto* worker : state.workers) {
        sum += get(worker->counters).read();
    }
    return sum;
}

std::string mac_of_port(uint16_t port) {
    const rte_ether_addr mac = port_mac(port);
    char text[RTE_ETHER_ADDR_FMT_SIZE];
    rte_ether_format_addr(text, sizeof(text), &mac);
    return text;
}

struct global_counter {
    const char* name;
    const counter& (*get)(const lcore_counters&);
};

#define JK_GLOBAL(field)                                                          \
    {                                                                             \
#field, [](const lcore_counters& c) -> const counter& { return c.field; } \
    }
const global_counter global_counters[] = {
    JK_GLOBAL(encapsulated),
    JK_GLOBAL(decapsulated),
    JK_GLOBAL(switched_locally),
    JK_GLOBAL(rdma_local_messages),
    JK_GLOBAL(arp_replies_to_tenants),
    JK_GLOBAL(arp_replies_on_underlay),
    JK_GLOBAL(arp_replies_in_overlay),
    JK_GLOBAL(arp_requests_sent),
    JK_GLOBAL(ce_marked_on_decap),
    JK_GLOBAL(qos_ce_marked),
    JK_GLOBAL(busy_polls),
    JK_GLOBAL(idle_sleeps),
    JK_GLOBAL(throttled_sleeps),
    JK_GLOBAL(rx_wakes),
    JK_GLOBAL(slow_yields),
    JK_GLOBAL(waiting_naps),
    JK_GLOBAL(handed_fabric),
    JK_GLOBAL(handed_port),
    JK_GLOBAL(handed_roce),
    JK_GLOBAL(taken_handoffs),
};
#undef JK_GLOBAL

// Each worker's share (host.workers): the vNICs it owns and its own counters; the totals above
// are their sums.
void render_workers(const daemon_state& state, json_writer& out, std::ostringstream& text) {
    static constexpr const char* columns[] = {"from_tenant_pkts", "to_tenant_pkts", "encapsulated",
                                              "decapsulated",     "handed_fabric",  "handed_port",
                                              "handed_roce",      "taken_handoffs", "idle_sleeps"};
    out.begin_array("workers");
    text << "workers  vnics";
    for (const char* column : columns) {
        text << "  " << column;
    }
    text << "\n";
    for (std::size_t w = 0; w < state.workers.size(); ++w) {
        const lcore_counters& c = state.workers[w]->counters;
        std::string owned;
        out.begin_object().value("id", static_cast<uint64_t>(w)).begin_array("vnics");
        for (std::size_t slot = 0; slot < state.slot_names.size(); ++slot) {
            if (!state.slot_names[slot].empty() && slot < state.slot_workers.size() &&
                state.slot_workers[slot] == w) {
                out.value({}, state.slot_names[slot]);
                owned += (owned.empty() ? "" : ",") + state.slot_names[slot];
            }
        }
        out.end_array();
        uint64_t from_tenant = 0;
        uint64_t to_tenant = 0;
        for (const auto& v : c.vnics) {
            from_tenant += v.from_tenant_packets.read();
            to_tenant += v.to_tenant_packets.read();
        }
        const uint64_t values[] = {from_tenant,
                                   to_tenant,
                                   c.encapsulated.read(),
                                   c.decapsulated.read(),
                                   c.handed_fabric.read(),
                                   c.handed_port.read(),
                                   c.handed_roce.read(),
                                   c.taken_handoffs.read(),
                                   c.idle_sleeps.read()};
        text << "  " << w << "      " << (owned.empty() ? "-" : owned);
        for (std::size_t i = 0; i < std::size(columns); ++i) {
            out.value(columns[i], values[i]);
            text << "  " << values[i];
        }
        text << "\n";
        out.end_object();
    }
    out.end_array();
}

}  // namespace

std::string render_status(const daemon_state& state, bool json) {
    const auto uptime = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::steady_clock::now() - state.started)
                            .count();
    const auto& config = state.config;
    if (json) {
        json_writer out;
        out.begin_object()
            .value("host", config.name)
            .value("ready", daemon_ready(state))
            .value("uptime_s", static_cast<uint64_t>(uptime))
            .value("memory", state.memory_mode)
            .value("polling", state.busy_poll ? "busy" : "adaptive")
            .value("underlay_ip", format_ipv4(config.underlay.ip))
            .value("underlay_mtu", uint64_t{config.underlay.mtu})
            .value("tenant_mtu", uint64_t{config.tenant_mtu()});
        out.begin_array("ports");
        for (const auto& port : state.ports) {
            out.begin_object()
                .value("role", port.role)
                .value("port_id", uint64_t{port.port_id})
                .value("device", port.devargs)
                .value("mac", mac_of_port(port.port_id))
                .value("link_up", link_up(port.port_id))
                .end_object();
        }
        out.end_array().begin_array("vnics");
        for (const auto& vnic : config.vnics) {
            out.begin_object()
                .value("name", vnic.name)
                .value("vpc", vnic.vpc)
                .value("vni", uint64_t{config.find_vpc(vnic.vpc)->vni})
                .value("ip", format_ipv4(vnic.ip.address))
                .value("mac", format_mac(vnic.mac))
                .end_object();
        }
        out.end_array().begin_array("underlay_neighbors");
        for (uint16_t slot = 0; slot < state.neighbors->size(); ++slot) {
            const auto mac = state.neighbors->mac(slot);
            char text[RTE_ETHER_ADDR_FMT_SIZE] = "";
            if (mac) {
                rte_ether_format_addr(text, sizeof(text), &*mac);
            }
            out.begin_object()
                .value("ip", format_ipv4(rte_be_to_cpu_32(state.neighbors->ip(slot))))
                .value("resolved", mac.has_value())
                .value("mac", text)
                .end_object();
        }
        out.end_array();
        write_restart_json(out, state.restarts);
        if (state.control_plane != nullptr) {
            state.control_plane->write_json(out);
        }
        out.end_object();
        return out.str() + "\n";
    }
    std::ostringstream text;
    text << "host " << config.name << ": " << (daemon_ready(state) ? "ready" : "NOT READY")
         << ", up " << uptime << " s, memory " << state.memory_mode << ", polling "
         << (state.busy_poll ? "busy" : "adaptive") << "\n"
         << "underlay " << format_ipv4(config.underlay.ip) << " mtu " << config.underlay.mtu
         << " (tenant mtu " << config.tenant_mtu() << ")\n";
    for (const auto& port : state.ports) {
        text << "  port " << port.port_id << " " << port.role << " " << port.devargs << " "
             << mac_of_port(port.port_id) << (link_up(port.port_id) ? " up" : " DOWN") << "\n";
    }
    text << "  underlay neighbors resolved: " << resolved_neighbors(state) << "/"
         << state.neighbors->size() << "\n";
    text << restart_text(state.restarts);
    if (state.control_plane != nullptr) {
        text << state.control_plane->text();
    }
    return text.str();
}

namespace {

// One vNIC's RDMA face: its connections, its rdma_cm agent and QP1, each bound with what it
// refused at it (rnic/verbs/vnic_endpoint.hh), as `stats --json` and `qps --json` show it.
void write_rdma_face(json_writer& out, const verbs::endpoint_report& r) {
    out.begin_object(r.name)
        .value("clients", uint64_t{r.clients})
        .value("max_contexts", uint64_t{r.quota.max_contexts})
        .value("accepted", r.counters.accepted)
        .value("refused_over_limit", r.counters.refused)
        .value("refused_foreign", r.counters.refused_foreign)
        .value("hello_timeouts", r.counters.hello_timeouts)
        .value("requests", r.counters.requests)
        .value("bad_requests", r.counters.bad_requests);
    out.begin_object("rdma_cm")
        .value("ids", uint64_t{r.cm_ids})
        .value("max_ids", uint64_t{r.quota.max_cm_ids})
        .value("ids_refused", r.cm.ids_refused)
        .value("max_backlog", uint64_t{r.quota.max_cm_backlog})
        .value("requests_over_backlog", r.cm.requests_over_backlog)
        .value("max_held_reqs", uint64_t{r.quota.max_cm_held_reqs})
        .value("held_reqs_refused", r.cm.held_reqs_refused)
        .value("commands", r.cm.commands)
        .value("bad_commands", r.cm.bad_commands)
        .value("mads_sent", r.cm.mads_sent)
        .value("mads_received", r.cm.mads_received)
        .value("mads_dropped", r.cm.mads_dropped)
        .value("rejected_by_policy", r.cm.rejected_by_policy)
        .value("rejected_no_listener", r.cm.rejected_no_listener)
        .value("mads_forged", r.cm.mads_forged)
        .value("events_dropped", r.cm.events_dropped)
        .end_object();
    out.begin_object("qp1")
        .value("max_queue", uint64_t{r.quota.max_qp1_queue})
        .value("received", r.qp1.received)
        .value("sent", r.qp1.sent)
        .value("rx_dropped", r.qp1.rx_dropped)
        .value("tx_dropped", r.qp1.tx_dropped)
        .end_object();
    out.end_object();
}

}  // namespace

std::string render_stats(const daemon_state& state, bool json) {
    json_writer out;
    std::ostringstream text;
    out.begin_object().value("host", state.config.name).begin_object("ports");
    text << "ports            rx_pkts      rx_bytes      tx_pkts      tx_bytes   missed   errors\n";
    std::string superframes;
    for (const auto& port : state.ports) {
        const rte_eth_stats stats = port_stats(port.port_id);
        const superframe_counts super = port_superframes(port.port_id);
        out.begin_object(port.role)
            .value("rx_packets", stats.ipackets)
            .value("rx_bytes", stats.ibytes)
            .value("tx_packets", stats.opackets)
            .value("tx_bytes", stats.obytes)
            .value("rx_missed", stats.imissed)
            .value("rx_errors", stats.ierrors)
            .value("tx_errors", stats.oerrors)
            .value("rx_superframes", super.rx)
            .value("tx_superframes", super.tx)
            .end_object();
        if (super.rx != 0 || super.tx != 0) {
            superframes +=
                " " + port.role + " " + std::to_string(super.rx) + "/" + std::to_string(super.tx);
        }
        char line[160];
        std::snprintf(line, sizeof(line), "  %-10s %12lu %13lu %12lu %13lu %8lu %8lu\n",
                      port.role.c_str(), stats.ipackets, stats.ibytes, stats.opackets, stats.obytes,
                      stats.imissed, stats.ierrors + stats.oerrors);
        text << line;
    }
    if (!superframes.empty()) {
        text << "super-frames rx/tx:" << superframes << "\n";
    }
    out.end_object().begin_object("vnics");
    text << "vnics      from_tenant_pkts   from_tenant_bytes  to_tenant_pkts   to_tenant_bytes    "
            "drops"
            "   sg_allow_in  sg_deny_in sg_allow_out sg_deny_out\n";
    std::string limits_text;
    for (std::size_t slot = 0; slot < state.slot_names.size(); ++slot) {
        const auto& name = state.slot_names[slot];
        if (name.empty()) {
            continue;
        }
        auto sum = [&](auto pick) {
            return total(state, [&](const lcore_counters& c) -> const counter& {
                return pick(c.vnics[slot]);
            });
        };
        const uint64_t values[] = {
            sum([](const vnic_counters& v) -> const counter& { return v.from_tenant_packets; }),
            sum([](const vnic_counters& v) -> const counter& { return v.from_tenant_bytes; }),
            sum([](const vnic_counters& v) -> const counter& { return v.to_tenant_packets; }),
            sum([](const vnic_counters& v) -> const counter& { return v.to_tenant_bytes; }),
            sum([](const vnic_counters& v) -> const counter& { return v.drops; }),
            sum([](const vnic_counters& v) -> const counter& { return v.sg_allowed[0]; }),
            sum([](const vnic_counters& v) -> const counter& { return v.sg_denied[0]; }),
            sum([](const vnic_counters& v) -> const counter& { return v.sg_allowed[1]; }),
            sum([](const vnic_counters& v) -> const counter& { return v.sg_denied[1]; }),
            sum([](const vnic_counters& v) -> const counter& { return v.rdma_rx_packets; }),
            sum([](const vnic_counters& v) -> const counter& { return v.rdma_rx_bytes; }),
            sum([](const vnic_counters& v) -> const counter& { return v.rdma_tx_packets; }),
            sum([](const vnic_counters& v) -> const counter& { return v.rdma_tx_bytes; })};
        const vnic_bounds bounds = bounds_of(state, static_cast<uint16_t>(slot));
        out.begin_object(name)
            .value("from_tenant_packets", values[0])
            .value("from_tenant_bytes", values[1])
            .value("to_tenant_packets", values[2])
            .value("to_tenant_bytes", values[3])
            .value("drops", values[4])
            .value("sg_allowed_ingress", values[5])
            .value("sg_denied_ingress", values[6])
            .value("sg_allowed_egress", values[7])
            .value("sg_denied_egress", values[8])
            .value("rdma_rx_packets", values[9])
            .value("rdma_rx_bytes", values[10])
            .value("rdma_tx_packets", values[11])
            .value("rdma_tx_bytes", values[12])
            .value("conntrack_flows", bounds.flows)
            .value("max_flows", bounds.max_flows)
            .value("conntrack_allowance_exceeded", bounds.flows_refused)
            .value("packet_buffers", bounds.packet_buffers)
            .value("max_packet_buffers", bounds.max_packet_buffers)
            .value("buffer_allowance_exceeded", bounds.buffers_refused)
            .value("max_packet_rate", bounds.max_packet_rate)
            .value("packet_rate_exceeded", bounds.packet_rate_exceeded)
            .value("qos_queue_drops", bounds.qos_queue_drops)
            .value("rdma_max_local_work_rate", bounds.max_local_work_rate)
            .value("rdma_local_work_over_allowance", bounds.local_work_over_allowance);
        write_rdma_memory(out, state, static_cast<uint16_t>(slot));
        out.end_object();
        char line[256];
        std::snprintf(line, sizeof(line),
                      "  %-8s %16lu %19lu %15lu %17lu %8lu %13lu %11lu %12lu %11lu\n", name.c_str(),
                      values[0], values[1], values[2], values[3], values[4], values[5], values[6],
                      values[7], values[8]);
        text << line;
        limits_text += "  " + name + std::string(name.size() < 8 ? 8 - name.size() : 0, ' ') + " " +
                       std::to_string(bounds.flows) + "/" + std::to_string(bounds.max_flows) +
                       " flows, " + std::to_string(bounds.flows_refused) + " refused; " +
                       std::to_string(bounds.packet_buffers) + "/" +
                       std::to_string(bounds.max_packet_buffers) + " buffers, " +
                       std::to_string(bounds.buffers_refused) + " refused; " +
                       std::to_string(bounds.max_packet_rate) + " frames/s, " +
                       std::to_string(bounds.packet_rate_exceeded) + " over; " +
                       std::to_string(bounds.qos_queue_drops) + " qos queue drops\n";
    }
    out.end_object();
    text << "vnic limits (now/allowance, refused at the bound)\n" << limits_text;
    // Each vNIC's RDMA face, by name: what its tenant's verbs and rdma_cm calls hold of
    // jakirod's control side, and what its bounds refused.
    out.begin_object("rdma_faces");
    if (state.verbs != nullptr) {
        for (const auto& r : state.verbs->reports()) {
            write_rdma_face(out, r);
        }
    }
    out.end_object();

    // Conntrack: the flow tables of all workers.
    uint64_t flows = 0, capacity = 0, inserts = 0, evictions = 0, expirations = 0;
    for (const auto* worker : state.workers) {
        flows += worker->flows->size();
        capacity += worker->flows->capacity();
        inserts += worker->flows->inserts();
        evictions += worker->flows->evictions();
        expirations += worker->flows->expirations();
    }
    const uint64_t misses =
        total(state, [](const lcore_counters& c) -> const counter& { return c.flow_misses; });
    out.begin_object("conntrack")
        .value("flows", flows)
        .value("capacity", capacity)
        .value("created", inserts)
        .value("evicted", evictions)
        .value("expired", expirations)
        .value("classifications", misses)
        .end_object();
    text << "conntrack: " << flows << "/" << capacity << " flows, " << inserts << " created, "
         << evictions << " evicted (table full), " << expirations << " expired, " << misses
         << " full classifications\n";

    // Security-group rules with their hit counts (packets of flows each rule let in or out).
    out.begin_array("rules");
    text << "security-group rules                                   hits\n";
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
                const auto& rule = rules[r];
                std::string remote = rule.remote ? format_ipv4(rule.remote->address) + "/" +
                                                       std::to_string(rule.remote->length)
                                                 : "group " + rule.remote_group;
                const bool has_ports =
                    rule.proto == secgroup::protocol::tcp || rule.proto == secgroup::protocol::udp;
                std::string ports =
                    !has_ports                          ? "-"
                    : rule.ports.low == rule.ports.high ? std::to_string(rule.ports.low)
                    : rule.ports.low == 0 && rule.ports.high == 65535
                        ? "any"
                        : std::to_string(rule.ports.low) + "-" + std::to_string(rule.ports.high);
                const char* dir_name = dir == secgroup::direction::ingress ? "ingress" : "egress";
                out.begin_object()
                    .value("vpc", group.vpc)
                    .value("group", group.name)
                    .value("direction", dir_name)
                    .value("index", uint64_t{r})
                    .value("line", uint64_t(rule.line))
                    .value("proto", secgroup::to_string(rule.proto))
                    .value("ports", ports)
                    .value("remote", remote)
                    .value("hits", hits)
                    .end_object();
                char line[256];
                std::snprintf(
                    line, sizeof(line), "  %s/%s %s[%zu] %s %s %s %s%*lu\n", group.vpc.c_str(),
                    group.name.c_str(), dir_name, r, secgroup::to_string(rule.proto), ports.c_str(),
                    dir == secgroup::direction::ingress ? "from" : "to", remote.c_str(), 8, hits);
                text << line;
            }
        }
    }
    out.end_array();

    out.begin_object("overlay");
    text << "overlay\n";
    for (const auto& global : global_counters) {
        const uint64_t value = total(state, global.get);
        out.value(global.name, value);
        text << "  " << global.name << " " << value << "\n";
    }
    out.end_object().begin_object("drops");
    text << "drops by reason\n";
    for (std::size_t reason = 0; reason < drop_reason_count; ++reason) {
        const uint64_t value = total(
            state, [&](const lcore_counters& c) -> const counter& { return c.drops[reason]; });
        out.value(drop_reason_names[reason], value);
        if (value > 0) {
            text << "  " << drop_reason_names[reason] << " " << value << "  ("
                 << drop_reason_texts[reason] << ")\n";
        }
    }
    out.end_object();
    render_workers(state, out, text);
    out.end_object();
    return json ? out.str() + "\n" : text.str();
}

}  // namespace jakiro

namespace jakiro {

std::string render_flows(const daemon_state& state, const std::string& vnic, bool json) {
    json_writer out;
    std::ostringstream text;
    const double hz = static_cast<double>(rte_get_tsc_hz());
    const uint64_t now = rte_get_tsc_cycles();
    out.begin_array();
    text << "vnic     proto local                 remote                state        opened-by"
            "     pkts-in    pkts-out  idle-s\n";
    for (const auto* worker : state.workers) {
        const auto& table = *worker->flows;
        secgroup::flow_entry e;
        for (uint32_t i = 0; i < table.capacity(); ++i) {
            if (!table.snapshot(i, e) || e.key.vnic >= state.slot_names.size()) {
                continue;
            }
            const auto& name = state.slot_names[e.key.vnic];
            if (!vnic.empty() && name != vnic) {
                continue;
            }
            const std::string proto = e.key.ip_proto == IPPROTO_TCP   ? "tcp"
                                      : e.key.ip_proto == IPPROTO_UDP ? "udp"
                                      : e.key.ip_proto == IPPROTO_ICMP
                                          ? "icmp"
                                          : std::to_string(e.key.ip_proto);
            auto endpoint = [](rte_be32_t ip, rte_be16_t port) {
                return format_ipv4(rte_be_to_cpu_32(ip)) + ":" +
                       std::to_string(rte_be_to_cpu_16(port));
            };
            const std::string local = endpoint(e.key.local_ip, e.key.local_port);
            const std::string remote = endpoint(e.key.remote_ip, e.key.remote_port);
            const char* opened = e.initiator == secgroup::direction::egress ? "egress" : "ingress";
            const double idle = now > e.last_seen ? (now - e.last_seen) / hz : 0.0;
            out.begin_object()
                .value("vnic", name)
                .value("proto", proto)
                .value("local", local)
                .value("remote", remote)
                .value("state", e.revoked ? "revoked" : secgroup::to_string(e.state))
                .value("opened_by", opened)
                .value("packets_in", e.packets[0])
                .value("packets_out", e.packets[1])
                .value("bytes_in", e.bytes[0])
                .value("bytes_out", e.bytes[1])
                .value("idle_s", idle)
                .end_object();
            char line[256];
            std::snprintf(line, sizeof(line),
                          "%-8s %-5s %-21s %-21s %-12s %-9s %11lu %11lu %7.1f\n", name.c_str(),
                          proto.c_str(), local.c_str(), remote.c_str(),
                          e.revoked ? "revoked" : secgroup::to_string(e.state), opened,
                          e.packets[0], e.packets[1], idle);
            text << line;
        }
    }
    out.end_array();
    return json ? out.str() + "\n" : text.str();
}

std::string render_qps(const daemon_state& state, const std::string& vnic, bool json) {
    json_writer out;
    std::ostringstream text;
    out.begin_object();
    out.begin_array("qps");
    text << "vnic     qpn      type state remote            rqpn     next-psn una-psn  exp-psn  "
            "pkts-out   pkts-in    retrans  timeouts naks-in naks-out rnr-in rnr-out dropped\n";
    static const char* states[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
    const auto qps = report_qps(state);
    for (const auto& q : qps) {
        const std::string name = q.vnic < state.slot_names.size() ? state.slot_names[q.vnic] : "?";
        if (!vnic.empty() && name != vnic) {
            continue;
        }
        const char* st = q.state < 7 ? states[q.state] : "?";
        const char* type = q.type == IBV_QPT_UD ? "UD" : q.type == IBV_QPT_UC ? "UC" : "RC";
        const std::string remote = format_ipv4(rte_be_to_cpu_32(q.remote_ip_be));
        out.begin_object()
            .value("vnic", name)
            .value("worker", uint64_t{state.worker_of(q.vnic)})  // whose engine runs it
            .value("qpn", uint64_t{q.qpn})
            .value("type", type)
            .value("state", st)
            .value("remote", remote)
            .value("remote_qpn", uint64_t{q.remote_qpn})
            .value("next_psn", uint64_t{q.next_psn})
            .value("una_psn", uint64_t{q.una_psn})
            .value("expected_psn", uint64_t{q.expected_psn});
#define JAKIRO_QP_COUNTER(name) out.value(#name, q.name);
#include "rnic/qp_counters.def"
#undef JAKIRO_QP_COUNTER
        out.value("rate_bps", q.rate_bps).end_object();
        char line[320];
        std::snprintf(line, sizeof(line),
                      "%-8s 0x%06x %-4s %-5s %-17s 0x%06x 0x%06x 0x%06x 0x%06x %10lu %10lu %8lu "
                      "%8lu %7lu %8lu %6lu %7lu %7lu\n",
                      name.c_str(), q.qpn, type, st, remote.c_str(), q.remote_qpn, q.next_psn,
                      q.una_psn, q.expected_psn, q.packets_sent, q.packets_received,
                      q.retransmitted, q.timeouts, q.naks_received, q.naks_sent,
                      q.rnr_naks_received, q.rnr_naks_sent, q.messages_dropped);
        text << line;
    }
    out.end_array();
    out.begin_object("engine");
    text << "engine:";
    if (const engine_summary engines = sum_engines(state); engines.engines > 0) {
        // Summed over the engines, one per worker.
        const engine_totals& c = engines.totals;
        out.value("engines", uint64_t{engines.engines});
        out.value("received", c.received).value("sent", c.sent);
        out.value("doorbells", c.doorbells);
        out.value("rechecks", c.rechecks).value("qps_revoked", c.qps_revoked);
        // "engine: received N, ..." is read by scripts; the engine count goes last.
        text << " received " << c.received << ", sent " << c.sent << ", doorbells " << c.doorbells
             << ", policy rechecks " << c.rechecks << ", QPs revoked " << c.qps_revoked << " ("
             << engines.engines << (engines.engines == 1 ? " engine)" : " engines)");
        out.begin_object("drops");
        for (std::size_t d = 0; d < static_cast<std::size_t>(roce::engine_drop::count); ++d) {
            const auto reason = static_cast<roce::engine_drop>(d);
            const uint64_t n = c.drops[d];
            out.value(roce::engine_drop_name(reason), n);
            if (n > 0) {
                text << "\n  drop " << roce::engine_drop_name(reason) << ": " << n << " ("
                     << roce::engine_drop_text(reason) << ")";
            }
        }
        out.end_object();
    }
    text << "\n";
    out.end_object();
    // The RDMA faces' endpoints: who was let in, who was turned away and why.
    out.begin_object("endpoints");
    if (state.verbs != nullptr) {
        const verbs::channel_stats v = state.verbs->stats();
        out.value("clients", uint64_t{state.verbs->client_count()})
            .value("accepted", v.faces.accepted)
            .value("refused_over_limit", v.faces.refused)
            .value("refused_foreign", v.faces.refused_foreign)
            .value("hello_timeouts", v.faces.hello_timeouts)
            .value("disconnected", v.faces.disconnected)
            .value("requests", v.faces.requests)
            .value("bad_requests", v.faces.bad_requests)
            .value("vnics_removed", v.vnics_removed);
        text << "endpoints: " << state.verbs->client_count() << " clients, accepted "
             << v.faces.accepted << ", refused over limit " << v.faces.refused
             << ", refused foreign " << v.faces.refused_foreign << ", hello timeouts "
             << v.faces.hello_timeouts << ", bad requests " << v.faces.bad_requests
             << ", vNICs removed " << v.vnics_removed << "\n";
        out.begin_object("rdma_cm")
            .value("commands", v.cm_commands)
            .value("bad_commands", v.cm_bad_commands)
            .value("mads_sent", v.cm_mads_sent)
            .value("mads_received", v.cm_mads_received)
            .value("mads_dropped", v.cm_mads_dropped)
            .value("retransmissions", v.cm_retransmissions)
            .value("timeouts", v.cm_timeouts)
            .value("rejected_by_policy", v.cm_rejected_by_policy)
            .value("rejected_no_listener", v.cm_rejected_no_listener)
            .value("mads_forged", v.cm_mads_forged);
        out.end_object();
        out.begin_object("vnics");
        for (const auto& r : state.verbs->reports()) {
            if (vnic.empty() || r.name == vnic) {
                write_rdma_face(out, r);
                text << "rdma face " << r.name << ": clients " << r.clients << "/"
                     << r.quota.max_contexts << ", rdma_cm ids " << r.cm_ids << "/"
                     << r.quota.max_cm_ids << " (refused " << r.cm.ids_refused
                     << "), requests over backlog " << r.cm.requests_over_backlog
                     << ", held REQs refused " << r.cm.held_reqs_refused << ", QP1 drops rx "
                     << r.qp1.rx_dropped << " tx " << r.qp1.tx_dropped << "\n";
            }
        }
        out.end_object();
        text << "rdma_cm: " << v.cm_commands << " commands (" << v.cm_bad_commands
             << " refused), MADs sent " << v.cm_mads_sent << ", received " << v.cm_mads_received
             << ", dropped " << v.cm_mads_dropped << ", retransmitted " << v.cm_retransmissions
             << ", timeouts " << v.cm_timeouts << ", REQs rejected by security groups "
             << v.cm_rejected_by_policy << ", with no listener " << v.cm_rejected_no_listener
             << ", forged REQs " << v.cm_mads_forged << "\n";
    }
    out.end_object();
    // What each vNIC's RDMA objects hold of the host's mappings and descriptors.
    write_rdma_reserve(out, state);
    out.begin_object("vnics");
    for (std::size_t slot = 0; slot < state.slot_names.size(); ++slot) {
        const auto& name = state.slot_names[slot];
        if (name.empty() || (!vnic.empty() && name != vnic)) {
            continue;
        }
        if (const auto m = rdma_memory_of(state, static_cast<uint16_t>(slot))) {
            out.begin_object(name);
            write_rdma_memory(out, state, static_cast<uint16_t>(slot));
            out.end_object();
            text << "memory " << name << ": " << m->mrs << " MRs (" << m->mrs_pinned
                 << " pinned after dereg), " << m->held.mappings << "/" << m->share.mappings
                 << " mappings, " << m->held.descriptors << "/" << m->share.descriptors
                 << " descriptors, refused " << m->refused.mappings + m->refused.descriptors
                 << " at the host reserve, " << m->quota_refusals << " over quota, "
                 << m->cq_resizes << " CQ resizes\n";
        }
    }
    out.end_object();
    out.end_object();
    return json ? out.str() + "\n" : text.str();
}

std::string render_qos(const daemon_state& state, bool json, bool raw) {
    json_writer out;
    std::ostringstream text;
    std::ostringstream lines;
    out.begin_array();
    text << "vnic     rate Mbit/s  class weight share Mbit/s  min Mbit/s  max Mbit/s  sent_bytes   "
            "   "
            "sent_pkts  tail_drops rdma_waits\n";
    // When the counters were read, on jakirod's monotonic clock: a rate is the difference of two
    // reports over the difference of their times, exact however long the client took to ask.
    const auto time_ns =
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::steady_clock::now().time_since_epoch())
                                  .count());
    lines << "time_ns " << time_ns << "\n";
    for (std::size_t i = 0; i < state.config.vnics.size(); ++i) {
        const auto& v = state.config.vnics[i];
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
        out.begin_object()
            .value("vnic", v.name)
            .value("rate_bps", q.rate_bps)
            .value("time_ns", time_ns);
        out.begin_array("classes");
        lines << v.name << " rate " << q.rate_bps;
        // The vNIC's owner shapes and meters both of its classes (its engine runs its QPs).
        const egress_shaper* shaper = state.shaper_of(slot);
        const ingress_policer* policer = state.policer_of(slot);
        for (const auto c : qos::all_classes) {
            const auto& k = q.classes[qos::index_of(c)];
            qos::class_counters sent{};
            uint64_t drops = 0, waits = 0;
            const bool shaped = shaper != nullptr && shaper->scheduler().configured(slot);
            if (shaped) {
                sent = shaper->scheduler().counters(slot, c);
                drops = c == qos::traffic_class::tcp ? shaper->counters(slot).tcp_queue_drops.read()
                                                     : 0;
                waits =
                    c == qos::traffic_class::rdma ? shaper->counters(slot).rdma_waits.read() : 0;
            }
            // How many of the vNIC's grants found this class with something to send: a class
            // that was not backlogged throughout had its unused share given to the other.
            uint64_t grants = 0, busy_grants = 0;
            if (shaped) {
                const auto& sc = shaper->counters(slot);
                grants = sc.grants.read();
                busy_grants = c == qos::traffic_class::rdma ? sc.rdma_busy_grants.read()
                                                            : sc.tcp_busy_grants.read();
            }
            qos::ingress_class_counters in{};
            if (policer != nullptr) {
                if (const auto* meter = policer->meter(slot)) {
                    in = meter->counters(c);
                }
            }
            const uint64_t share = qos::class_share_bps(q, c);
            out.begin_object()
                .value("class", qos::class_name(c))
                .value("weight", uint64_t{k.weight})
                .value("share_bps", share)
                .value("min_bps", k.min_bps)
                .value("max_bps", k.max_bps)
                .value("sent_bytes", sent.bytes)
                .value("sent_packets", sent.packets)
                .value("tail_drops", drops)
                .value("rdma_waits", waits)
                .value("rdma_granted", c == qos::traffic_class::rdma && shaper != nullptr
                                           ? shaper->counters(slot).rdma_granted.read()
                                           : 0)
                .value("rdma_busy_grants", c == qos::traffic_class::rdma && shaper != nullptr
                                               ? shaper->counters(slot).rdma_busy_grants.read()
                                               : 0)
                // How many of the vNIC's grants found this class with something to send: a
                // class that was not backlogged throughout had its unused share given away.
                .value("grants", grants)
                .value("busy_grants", busy_grants)
                .value("received_bytes", in.bytes)
                .value("received_packets", in.packets)
                .value("ce_marked", in.ce_marked)
                .value("ingress_dropped", in.dropped)
                .value("cnps", in.cnps)
                .end_object();
            lines << " " << qos::class_name(c) << " " << share << " " << sent.bytes << " "
                  << sent.packets << " " << in.bytes;
            char line[256];
            std::snprintf(line, sizeof(line),
                          "%-8s %12.1f %-5s %6u %12.1f %11.1f %11.1f %14lu %10lu %11lu %10lu "
                          "%14lu %10lu %9lu %6lu\n",
                          v.name.c_str(), q.rate_bps / 1e6, qos::class_name(c), k.weight,
                          share / 1e6, k.min_bps / 1e6, k.max_bps / 1e6, sent.bytes, sent.packets,
                          drops, waits, in.bytes, in.ce_marked, in.dropped, in.cnps);
            text << line;
        }
        lines << "\n";
        out.end_array().end_object();
    }
    out.end_array();
    if (raw) {
        return lines.str();
    }
    return json ? out.str() + "\n" : text.str();
}

}  // namespace jakiro
