#include "secgroup/ipv6_rules.hh"

namespace jakiro::secgroup {

std::vector<flat_rule6> expand_rules6(const std::vector<group>& groups,
                                      std::span<const std::size_t> vnic_groups, direction dir,
                                      const membership6& members, const rule_catalog& catalog) {
    std::vector<flat_rule6> out;
    for (const std::size_t g : vnic_groups) {
        const auto& rules = dir == direction::ingress ? groups[g].ingress : groups[g].egress;
        for (std::size_t i = 0; i < rules.size(); ++i) {
            const rule& r = rules[i];
            if (!r.remote6 && r.remote) {
                continue;  // an IPv4 CIDR: nothing of IPv6
            }
            flat_rule6 flat{};
            flat.rule_id = catalog.id(g, dir, i);
            switch (r.proto) {
                case protocol::any:
                    flat.any_proto = true;
                    break;
                case protocol::tcp:
                    flat.ip_proto = ip_proto_tcp;
                    flat.ports = r.ports;
                    break;
                case protocol::udp:
                    flat.ip_proto = ip_proto_udp;
                    flat.ports = r.ports;
                    break;
                case protocol::icmp:
                    flat.ip_proto = ip_proto_icmpv6;
                    break;
                case protocol::rdma:
                    flat.ip_proto = ip_proto_udp;
                    flat.ports = {rocev2_udp_port, rocev2_udp_port};
                    break;
            }
            if (r.remote6) {
                flat.remote = *r.remote6;
                out.push_back(flat);
                continue;
            }
            if (const auto* ips = members.of(r.remote_group_index)) {
                for (const auto& ip : *ips) {
                    flat.remote = {ip, 128};
                    out.push_back(flat);
                }
            }
        }
    }
    return out;
}

uint32_t ipv6_rules::classify(uint8_t ip_proto, const uint8_t* remote, uint16_t dst_port) const {
    for (const auto& r : _rules) {
        if ((r.any_proto || (r.ip_proto == ip_proto && r.ports.contains(dst_port))) &&
            r.remote.contains(remote)) {
            return r.rule_id + 1;
        }
    }
    return acl_table::no_match;
}

}  // namespace jakiro::secgroup
