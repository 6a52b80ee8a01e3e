#include "reports.hh"

#include <rte_ethdev.h>

#include <cstdio>
#include <sstream>

#include "json_writer.hh"

namespace jakiro {

namespace {

bool link_up(uint16_t port) {
    rte_eth_link link{};
    return rte_eth_link_get_nowait(port, &link) == 0 && link.link_status == RTE_ETH_LINK_UP;
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
    rte_ether_addr mac{};
    rte_eth_macaddr_get(port, &mac);
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
    JK_GLOBAL(arp_replies_to_tenants),
    JK_GLOBAL(arp_replies_on_underlay),
    JK_GLOBAL(arp_replies_in_overlay),
    JK_GLOBAL(arp_requests_sent),
    JK_GLOBAL(ce_marked_on_decap),
    JK_GLOBAL(busy_polls),
    JK_GLOBAL(idle_sleeps),
};
#undef JK_GLOBAL

}  // namespace

bool daemon_ready(const daemon_state& state) {
    for (const auto& port : state.ports) {
        if (!link_up(port.port_id)) {
            return false;
        }
    }
    return resolved_neighbors(state) == state.neighbors->size();
}

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
        out.end_array().end_object();
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
    return text.str();
}

std::string render_stats(const daemon_state& state, bool json) {
    json_writer out;
    std::ostringstream text;
    out.begin_object().value("host", state.config.name).begin_object("ports");
    text << "ports            rx_pkts      rx_bytes      tx_pkts      tx_bytes   missed   errors\n";
    for (const auto& port : state.ports) {
        rte_eth_stats stats{};
        rte_eth_stats_get(port.port_id, &stats);
        out.begin_object(port.role)
            .value("rx_packets", stats.ipackets)
            .value("rx_bytes", stats.ibytes)
            .value("tx_packets", stats.opackets)
            .value("tx_bytes", stats.obytes)
            .value("rx_missed", stats.imissed)
            .value("rx_errors", stats.ierrors)
            .value("tx_errors", stats.oerrors)
            .end_object();
        char line[160];
        std::snprintf(line, sizeof(line), "  %-10s %12lu %13lu %12lu %13lu %8lu %8lu\n",
                      port.role.c_str(), stats.ipackets, stats.ibytes, stats.opackets, stats.obytes,
                      stats.imissed, stats.ierrors + stats.oerrors);
        text << line;
    }
    out.end_object().begin_object("vnics");
    text << "vnics      from_tenant_pkts   from_tenant_bytes  to_tenant_pkts   to_tenant_bytes    "
            "drops\n";
    for (std::size_t slot = 0; slot < state.config.vnics.size(); ++slot) {
        auto get = [&](auto member) {
            return total(state, [&](const lcore_counters& c) -> const counter& {
                return c.vnics[slot].*member;
            });
        };
        const uint64_t values[] = {
            get(&vnic_counters::from_tenant_packets), get(&vnic_counters::from_tenant_bytes),
            get(&vnic_counters::to_tenant_packets), get(&vnic_counters::to_tenant_bytes),
            get(&vnic_counters::drops)};
        const auto& name = state.config.vnics[slot].name;
        out.begin_object(name)
            .value("from_tenant_packets", values[0])
            .value("from_tenant_bytes", values[1])
            .value("to_tenant_packets", values[2])
            .value("to_tenant_bytes", values[3])
            .value("drops", values[4])
            .end_object();
        char line[160];
        std::snprintf(line, sizeof(line), "  %-8s %16lu %19lu %15lu %17lu %8lu\n", name.c_str(),
                      values[0], values[1], values[2], values[3], values[4]);
        text << line;
    }
    out.end_object().begin_object("overlay");
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
    out.end_object().end_object();
    return json ? out.str() + "\n" : text.str();
}

}  // namespace jakiro
