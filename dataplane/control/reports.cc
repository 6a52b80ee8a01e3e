#include "dataplane/control/reports.hh"

#include "dataplane/control/overlay_report.hh"
#include "dataplane/control/restart_report.hh"

#include <rte_cycles.h>
#include <rte_ethdev.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "dataplane/control/control_plane_report.hh"
#include "dataplane/control/json_writer.hh"
#include "dataplane/ports.hh"

namespace jakiro {

namespace {

bool link_up(uint16_t port) {
    return port_link_up(port);
}

uint16_t resolved_neighbors(const daemon_state& state) {
    uint16_t resolved = 0;
    for (uint32_t slot = 0; slot < state.neighbors->size(); ++slot) {
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
        for (uint32_t slot = 0; slot < state.neighbors->size(); ++slot) {
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

}  // namespace jakiro
