#include "dataplane/control/reports.hh"

#include "dataplane/control/overlay_report.hh"
#include "dataplane/control/restart_report.hh"

#include <arpa/inet.h>
#include <rte_cycles.h>
#include <rte_ethdev.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string_view>

#include "dataplane/control/control_plane_report.hh"
#include "dataplane/control/json_writer.hh"
#include "dataplane/control/rdma_memory_report.hh"
#include "dataplane/ports.hh"

namespace jakiro {

namespace {

// A QP's IPv6 peer as `jakiroctl qps` prints it (RFC 5952 form).
std::string ipv6_text(const rnic::ipv6_address& a) {
    char text[INET6_ADDRSTRLEN] = {};
    inet_ntop(AF_INET6, a.data(), text, sizeof(text));
    return text;
}

double mbit(uint64_t bits_per_s) {
    return static_cast<double>(bits_per_s) / 1e6;
}

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

std::string mac_of_port(uint16_t port) {
    const rte_ether_addr mac = port_mac(port);
    char text[RTE_ETHER_ADDR_FMT_SIZE];
    rte_ether_format_addr(text, sizeof(text), &mac);
    return text;
}

// The host's datapath totals by name (datapath_counters.def), as `stats` shows them.
void write_datapath(const datapath_totals& totals, json_writer& out, std::ostringstream& text) {
#define JAKIRO_DATAPATH_COUNTER(name) \
    out.value(#name, totals.name);    \
    text << "  " << #name << " " << totals.name << "\n";
#include "dataplane/control/datapath_counters.def"
#undef JAKIRO_DATAPATH_COUNTER
}

// Each worker's share (host.workers): the vNICs it owns and its own counters; the totals above
// are their sums.
void render_workers(const stats_snapshot& snapshot, json_writer& out, std::ostringstream& text) {
    static constexpr const char* columns[] = {"from_tenant_pkts", "to_tenant_pkts", "encapsulated",
                                              "decapsulated",     "handed_fabric",  "handed_port",
                                              "handed_roce",      "taken_handoffs", "idle_sleeps"};
    out.begin_array("workers");
    text << "workers  vnics";
    for (const char* column : columns) {
        text << "  " << column;
    }
    text << "\n";
    for (const auto& w : snapshot.workers) {
        std::string owned;
        out.begin_object().value("id", uint64_t{w.id}).begin_array("vnics");
        for (const auto& name : w.vnics) {
            out.value({}, name);
            owned += (owned.empty() ? "" : ",") + name;
        }
        out.end_array();
        const datapath_totals& c = w.counters;
        const uint64_t values[] = {w.from_tenant_packets, w.to_tenant_packets, c.encapsulated,
                                   c.decapsulated,        c.handed_fabric,     c.handed_port,
                                   c.handed_roce,         c.taken_handoffs,    c.idle_sleeps};
        text << "  " << w.id << "      " << (owned.empty() ? "-" : owned);
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
                // "" for an IPv4-only vNIC, so every entry has the same keys.
                .value("ip6", vnic.ip6 ? format_ipv6(vnic.ip6->address) : "")
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
        write_overlay_json(state.workers.empty() ? nullptr : state.workers[0]->sealing, out);
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
    text << overlay_text(state.workers.empty() ? nullptr : state.workers[0]->sealing);
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

std::string render_stats(const stats_snapshot& snapshot, bool json) {
    json_writer out;
    std::ostringstream text;
    out.begin_object().value("host", snapshot.host).begin_object("ports");
    text << "ports            rx_pkts      rx_bytes      tx_pkts      tx_bytes   missed   errors\n";
    std::string superframes;
    for (const auto& port : snapshot.ports) {
        out.begin_object(port.role)
            .value("rx_packets", port.rx_packets)
            .value("rx_bytes", port.rx_bytes)
            .value("tx_packets", port.tx_packets)
            .value("tx_bytes", port.tx_bytes)
            .value("rx_missed", port.rx_missed)
            .value("rx_errors", port.rx_errors)
            .value("tx_errors", port.tx_errors)
            .value("rx_superframes", port.rx_superframes)
            .value("tx_superframes", port.tx_superframes)
            .end_object();
        if (port.rx_superframes != 0 || port.tx_superframes != 0) {
            superframes += " " + port.role + " " + std::to_string(port.rx_superframes) + "/" +
                           std::to_string(port.tx_superframes);
        }
        char line[160];
        std::snprintf(line, sizeof(line), "  %-10s %12lu %13lu %12lu %13lu %8lu %8lu\n",
                      port.role.c_str(), port.rx_packets, port.rx_bytes, port.tx_packets,
                      port.tx_bytes, port.rx_missed, port.rx_errors + port.tx_errors);
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
    for (const auto& v : snapshot.vnics) {
        const vnic_bounds& bounds = v.bounds;
        out.begin_object(v.name);
#define JAKIRO_VNIC_COUNTER(name, field) out.value(#name, v.name);
#include "dataplane/control/vnic_counters.def"
#undef JAKIRO_VNIC_COUNTER
        out.value("conntrack_flows", bounds.flows)
            .value("max_flows", bounds.max_flows)
            .value("conntrack_allowance_exceeded", bounds.flows_refused)
            .value("packet_buffers", bounds.packet_buffers)
            .value("max_packet_buffers", bounds.max_packet_buffers)
            .value("buffer_allowance_exceeded", bounds.buffers_refused)
            .value("max_packet_rate", bounds.max_packet_rate)
            .value("packet_rate_exceeded", bounds.packet_rate_exceeded)
            .value("qos_queue_drops", bounds.qos_queue_drops)
            .value("qos_queue_holds", bounds.qos_queue_holds)
            .value("rdma_max_local_work_rate", bounds.max_local_work_rate)
            .value("rdma_local_work_over_allowance", bounds.local_work_over_allowance)
            .value("rdma_qp_visits", bounds.rdma_qp_visits)
            .value("rdma_poller_wakes", bounds.rdma_poller_wakes);
        write_rdma_memory(out, v.rdma_memory);
        out.end_object();
        char line[256];
        std::snprintf(line, sizeof(line),
                      "  %-8s %16lu %19lu %15lu %17lu %8lu %13lu %11lu %12lu %11lu\n",
                      v.name.c_str(), v.from_tenant_packets, v.from_tenant_bytes,
                      v.to_tenant_packets, v.to_tenant_bytes, v.drops, v.sg_allowed_ingress,
                      v.sg_denied_ingress, v.sg_allowed_egress, v.sg_denied_egress);
        text << line;
        limits_text += "  " + v.name + std::string(v.name.size() < 8 ? 8 - v.name.size() : 0, ' ') +
                       " " + std::to_string(bounds.flows) + "/" + std::to_string(bounds.max_flows) +
                       " flows, " + std::to_string(bounds.flows_refused) + " refused; " +
                       std::to_string(bounds.packet_buffers) + "/" +
                       std::to_string(bounds.max_packet_buffers) + " buffers, " +
                       std::to_string(bounds.buffers_refused) + " refused; " +
                       std::to_string(bounds.max_packet_rate) + " frames/s, " +
                       std::to_string(bounds.packet_rate_exceeded) + " over; " +
                       std::to_string(bounds.qos_queue_drops) + " qos queue drops, " +
                       std::to_string(bounds.qos_queue_holds) + " holds\n";
    }
    out.end_object();
    text << "vnic limits (now/allowance, refused at the bound)\n" << limits_text;
    // Each vNIC's RDMA face, by name: what its tenant's verbs and rdma_cm calls hold of
    // jakirod's control side, and what its bounds refused.
    out.begin_object("rdma_faces");
    if (snapshot.rdma) {
        for (const auto& r : snapshot.rdma->faces) {
            write_rdma_face(out, r);
        }
    }
    out.end_object();

    // Conntrack: the flow tables of all workers.
    const conntrack_snapshot& ct = snapshot.conntrack;
    out.begin_object("conntrack")
        .value("flows", ct.flows)
        .value("capacity", ct.capacity)
        .value("created", ct.created)
        .value("evicted", ct.evicted)
        .value("expired", ct.expired)
        .value("classifications", ct.classifications)
        .end_object();
    text << "conntrack: " << ct.flows << "/" << ct.capacity << " flows, " << ct.created
         << " created, " << ct.evicted << " evicted (table full), " << ct.expired << " expired, "
         << ct.classifications << " full classifications\n";

    // Security-group rules with their hit counts (packets of flows each rule let in or out).
    out.begin_array("rules");
    text << "security-group rules                                   hits\n";
    for (const auto& rule : snapshot.rules) {
        out.begin_object()
            .value("vpc", rule.vpc)
            .value("group", rule.group)
            .value("direction", rule.direction)
            .value("index", uint64_t{rule.index})
            .value("line", rule.line)
            .value("proto", rule.proto)
            .value("ports", rule.ports)
            .value("remote", rule.remote)
            .value("hits", rule.hits)
            .end_object();
        const bool ingress = std::string_view(rule.direction) == "ingress";
        char line[256];
        std::snprintf(line, sizeof(line), "  %s/%s %s[%zu] %s %s %s %s%*lu\n", rule.vpc.c_str(),
                      rule.group.c_str(), rule.direction, rule.index, rule.proto.c_str(),
                      rule.ports.c_str(), ingress ? "from" : "to", rule.remote.c_str(), 8,
                      rule.hits);
        text << line;
    }
    out.end_array();

    out.begin_object("overlay");
    text << "overlay\n";
    write_datapath(snapshot.datapath, out, text);
    out.end_object().begin_object("drops");
    text << "drops by reason\n";
    for (std::size_t reason = 0; reason < drop_reason_count; ++reason) {
        const uint64_t value = snapshot.drops[reason];
        out.value(drop_reason_names[reason], value);
        if (value > 0) {
            text << "  " << drop_reason_names[reason] << " " << value << "  ("
                 << drop_reason_texts[reason] << ")\n";
        }
    }
    out.end_object();
    render_workers(snapshot, out, text);
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
            const std::string proto = e.key.ip_proto == IPPROTO_TCP    ? "tcp"
                                      : e.key.ip_proto == IPPROTO_UDP  ? "udp"
                                      : e.key.ip_proto == IPPROTO_ICMP ? "icmp"
                                      : e.key.ip_proto == IPPROTO_ICMPV6
                                          ? "icmpv6"
                                          : std::to_string(e.key.ip_proto);
            // "198.19.1.2:8080", or for an IPv6 flow "[2001:2::1:2]:8080" (RFC 5952 §6).
            auto endpoint = [&e](rte_be32_t ip, const uint8_t* ip6, rte_be16_t port) {
                std::string address;
                if (e.key.ipv6 != 0) {
                    ipv6_address a;
                    std::memcpy(a.data(), ip6, a.size());
                    address = "[" + format_ipv6(a) + "]";
                } else {
                    address = format_ipv4(rte_be_to_cpu_32(ip));
                }
                return address + ":" + std::to_string(rte_be_to_cpu_16(port));
            };
            const std::string local = endpoint(e.key.local_ip, e.key.local_ip6, e.key.local_port);
            const std::string remote =
                endpoint(e.key.remote_ip, e.key.remote_ip6, e.key.remote_port);
            const char* opened = e.initiator == secgroup::direction::egress ? "egress" : "ingress";
            const double idle =
                now > e.last_seen ? static_cast<double>(now - e.last_seen) / hz : 0.0;
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

std::string render_qps(const stats_snapshot& snapshot, const std::string& vnic, bool json) {
    json_writer out;
    std::ostringstream text;
    out.begin_object();
    out.begin_array("qps");
    text << "vnic     qpn      type state remote            rqpn     next-psn una-psn  exp-psn  "
            "pkts-out   pkts-in    retrans  timeouts naks-in naks-out rnr-in rnr-out dropped\n";
    static const char* states[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
    for (const auto& q : snapshot.qps) {
        const std::string name =
            q.vnic < snapshot.slot_names.size() ? snapshot.slot_names[q.vnic] : "?";
        if (!vnic.empty() && name != vnic) {
            continue;
        }
        const char* st = q.state < 7 ? states[q.state] : "?";
        const char* type = q.type == IBV_QPT_UD ? "UD" : q.type == IBV_QPT_UC ? "UC" : "RC";
        const std::string remote = rnic::is_unspecified(q.remote_ip6)
                                       ? format_ipv4(rte_be_to_cpu_32(q.remote_ip_be))
                                       : ipv6_text(q.remote_ip6);
        out.begin_object()
            .value("vnic", name)
            .value("worker", uint64_t{snapshot.worker_of(q.vnic)})  // whose engine runs it
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
    if (snapshot.engine) {
        // Summed over the engines, one per worker.
        const engine_snapshot& c = *snapshot.engine;
        out.value("engines", uint64_t{c.engines});
        out.value("received", c.received).value("sent", c.sent);
        out.value("doorbells", c.doorbells);
        out.value("rechecks", c.rechecks).value("qps_revoked", c.qps_revoked);
        // "engine: received N, ..." is read by scripts; the engine count goes last.
        text << " received " << c.received << ", sent " << c.sent << ", doorbells " << c.doorbells
             << ", policy rechecks " << c.rechecks << ", QPs revoked " << c.qps_revoked << " ("
             << c.engines << (c.engines == 1 ? " engine)" : " engines)");
        out.begin_object("drops");
        for (std::size_t d = 0; d < static_cast<std::size_t>(rnic::engine_drop::count); ++d) {
            const auto reason = static_cast<rnic::engine_drop>(d);
            const uint64_t n = c.drops[d];
            out.value(rnic::engine_drop_name(reason), n);
            if (n > 0) {
                text << "\n  drop " << rnic::engine_drop_name(reason) << ": " << n << " ("
                     << rnic::engine_drop_text(reason) << ")";
            }
        }
        out.end_object();
    }
    text << "\n";
    out.end_object();
    // The RDMA faces' endpoints: who was let in, who was turned away and why.
    out.begin_object("endpoints");
    if (snapshot.rdma) {
        const verbs::channel_stats& v = snapshot.rdma->stats;
        out.value("clients", uint64_t{snapshot.rdma->clients})
            .value("accepted", v.faces.accepted)
            .value("refused_over_limit", v.faces.refused)
            .value("refused_foreign", v.faces.refused_foreign)
            .value("hello_timeouts", v.faces.hello_timeouts)
            .value("disconnected", v.faces.disconnected)
            .value("requests", v.faces.requests)
            .value("bad_requests", v.faces.bad_requests)
            .value("vnics_removed", v.vnics_removed);
        text << "endpoints: " << snapshot.rdma->clients << " clients, accepted " << v.faces.accepted
             << ", refused over limit " << v.faces.refused << ", refused foreign "
             << v.faces.refused_foreign << ", hello timeouts " << v.faces.hello_timeouts
             << ", bad requests " << v.faces.bad_requests << ", vNICs removed " << v.vnics_removed
             << "\n";
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
        for (const auto& r : snapshot.rdma->faces) {
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
    write_rdma_reserve(out, snapshot.rdma);
    out.begin_object("vnics");
    for (const auto& v : snapshot.vnics) {
        if (!v.rdma_memory || (!vnic.empty() && v.name != vnic)) {
            continue;
        }
        const verbs::memory_report& m = *v.rdma_memory;
        out.begin_object(v.name);
        write_rdma_memory(out, v.rdma_memory);
        out.end_object();
        text << "memory " << v.name << ": " << m.mrs << " MRs (" << m.mrs_pinned
             << " pinned after dereg), " << m.held.mappings << "/" << m.share.mappings
             << " mappings, " << m.held.descriptors << "/" << m.share.descriptors
             << " descriptors, refused " << m.refused.mappings + m.refused.descriptors
             << " at the host reserve, " << m.quota_refusals << " over quota, " << m.cq_resizes
             << " CQ resizes\n";
    }
    out.end_object();
    out.end_object();
    return json ? out.str() + "\n" : text.str();
}

std::string render_qos(const stats_snapshot& snapshot, bool json, bool raw) {
    json_writer out;
    std::ostringstream text;
    std::ostringstream lines;
    out.begin_array();
    text << "vnic     rate Mbit/s  class weight share Mbit/s  min Mbit/s  max Mbit/s  sent_bytes   "
            "   "
            "sent_pkts  tail_drops rdma_waits\n";
    // When the counters were read, on jakirod's monotonic clock: a rate is the difference of two
    // reports over the difference of their times, exact however long the client took to ask.
    lines << "time_ns " << snapshot.time_ns << "\n";
    for (const auto& v : snapshot.qos) {
        out.begin_object()
            .value("vnic", v.name)
            .value("rate_bps", v.rate_bps)
            .value("time_ns", snapshot.time_ns);
        out.begin_array("classes");
        lines << v.name << " rate " << v.rate_bps;
        for (const auto& c : v.classes) {
            const char* name = qos::class_name(c.cls);
            out.begin_object()
                .value("class", name)
                .value("weight", c.weight)
                .value("share_bps", c.share_bps)
                .value("min_bps", c.min_bps)
                .value("max_bps", c.max_bps)
                .value("sent_bytes", c.sent.bytes)
                .value("sent_packets", c.sent.packets)
                .value("tail_drops", c.tail_drops)
                .value("rdma_waits", c.rdma_waits)
                .value("rdma_granted", c.rdma_granted)
                .value("rdma_busy_grants", c.rdma_busy_grants)
                .value("grants", c.grants)
                .value("busy_grants", c.busy_grants)
                .value("received_bytes", c.received.bytes)
                .value("received_packets", c.received.packets)
                .value("ce_marked", c.received.ce_marked)
                .value("ingress_dropped", c.received.dropped)
                .value("cnps", c.received.cnps)
                .end_object();
            // `jakiroctl top` reads these lines (tools/jakiroctl/top.cc).
            lines << " " << name << " " << c.share_bps << " " << c.sent.bytes << " "
                  << c.sent.packets << " " << c.received.bytes;
            char line[256];
            std::snprintf(line, sizeof(line),
                          "%-8s %12.1f %-5s %6lu %12.1f %11.1f %11.1f %14lu %10lu %11lu %10lu "
                          "%14lu %10lu %9lu %6lu\n",
                          v.name.c_str(), mbit(v.rate_bps), name, c.weight, mbit(c.share_bps),
                          mbit(c.min_bps), mbit(c.max_bps), c.sent.bytes, c.sent.packets,
                          c.tail_drops, c.rdma_waits, c.received.bytes, c.received.ce_marked,
                          c.received.dropped, c.received.cnps);
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
