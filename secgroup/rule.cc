#include "secgroup/rule.hh"

#include <algorithm>

namespace jakiro::secgroup {

bool rule_allows(const rule& r, const packet_view& p, const membership& members) {
    switch (r.proto) {
        case protocol::any:
            break;
        case protocol::tcp:
        case protocol::udp:
            if (p.ip_proto != (r.proto == protocol::tcp ? ip_proto_tcp : ip_proto_udp) ||
                !r.ports.contains(p.dst_port)) {
                return false;
            }
            break;
        case protocol::icmp:
            if (p.ip_proto != ip_proto_icmp) {
                return false;
            }
            break;
        case protocol::rdma:
            if (p.ip_proto != ip_proto_udp || p.dst_port != rocev2_udp_port) {
                return false;
            }
            break;
    }
    if (r.remote) {
        return r.remote->contains(p.remote_ip);
    }
    if (r.remote6) {
        return false;  // an IPv6 CIDR says nothing of IPv4 packets
    }
    const auto* ips = members.of(r.remote_group_index);
    return ips != nullptr && std::find(ips->begin(), ips->end(), p.remote_ip) != ips->end();
}

const char* to_string(protocol proto) {
    switch (proto) {
        case protocol::any:
            return "any";
        case protocol::tcp:
            return "tcp";
        case protocol::udp:
            return "udp";
        case protocol::icmp:
            return "icmp";
        case protocol::rdma:
            return "rdma";
    }
    return "?";
}

std::optional<protocol> parse_protocol(const std::string& text) {
    for (auto proto :
         {protocol::any, protocol::tcp, protocol::udp, protocol::icmp, protocol::rdma}) {
        if (text == to_string(proto)) {
            return proto;
        }
    }
    return std::nullopt;
}

}  // namespace jakiro::secgroup
