#pragma once
// The security-group model, cloud style (AWS / OpenStack): allow-only rules per direction,
// matched on protocol, destination port range and the remote side (a CIDR or the members of a
// group). Plain C++: no DPDK, so the semantics can be tested and used as the reference.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace jakiro::secgroup {

enum class protocol : uint8_t { any, tcp, udp, icmp, rdma };
enum class direction : uint8_t { ingress = 0, egress = 1 };

constexpr uint8_t ip_proto_icmp = 1;
constexpr uint8_t ip_proto_tcp = 6;
constexpr uint8_t ip_proto_udp = 17;
constexpr uint16_t rocev2_udp_port = 4791;  // RoCEv2 (IANA); `rdma` rules match it

struct port_range {
    uint16_t low = 0;
    uint16_t high = 65535;
    bool contains(uint16_t port) const { return port >= low && port <= high; }
    bool operator==(const port_range&) const = default;
};

struct cidr {
    uint32_t address = 0;  // host byte order
    uint8_t length = 0;
    bool contains(uint32_t ip) const {
        const uint32_t mask = length == 0 ? 0 : ~uint32_t{0} << (32 - length);
        return (ip & mask) == (address & mask);
    }
    bool operator==(const cidr&) const = default;
};

using ipv6_bytes = std::array<uint8_t, 16>;  // network order

struct cidr6 {
    ipv6_bytes address{};
    uint8_t length = 0;
    bool contains(const uint8_t* ip) const {
        unsigned bits = length;
        for (unsigned i = 0; i < 16 && bits > 0; ++i, bits = bits > 8 ? bits - 8 : 0) {
            const uint8_t mask = bits >= 8 ? 0xff : static_cast<uint8_t>(0xff00u >> bits);
            if ((ip[i] & mask) != (address[i] & mask)) {
                return false;
            }
        }
        return true;
    }
    bool operator==(const cidr6&) const = default;
};

struct rule {
    protocol proto = protocol::any;
    port_range ports;  // tcp and udp only; `rdma` means UDP port 4791
    // The remote side: a group, or a CIDR of either family. The implicit "all egress" rule of
    // a group that names no egress has both CIDRs (0.0.0.0/0 and ::/0), as a cloud's does.
    std::optional<cidr> remote;
    std::optional<cidr6> remote6;
    std::string remote_group;     // by name, as written (groups are named per VPC)
    int remote_group_index = -1;  // the same group as an index into the host's group list
    int line = 0;                 // where the rule was written, for messages and `jakiroctl stats`
};

struct group {
    std::string name;
    std::string vpc;
    std::vector<rule> ingress;
    std::vector<rule> egress;
};

// One packet as a security group sees it, from the vNIC's side: the remote address is the
// source for ingress and the destination for egress; the port is the destination port.
struct packet_view {
    uint8_t ip_proto;
    uint32_t remote_ip;  // host byte order
    uint16_t dst_port;   // 0 for protocols without ports
};

// Addresses (host order) of every vNIC in each group, local or remote, by group index.
struct membership {
    std::vector<std::vector<uint32_t>> of_group;
    const std::vector<uint32_t>* of(int group_index) const {
        return group_index >= 0 && static_cast<std::size_t>(group_index) < of_group.size()
                   ? &of_group[group_index]
                   : nullptr;
    }
};

// The reference semantics: does `r` allow `p`? Used by tests to check the compiled form.
bool rule_allows(const rule& r, const packet_view& p, const membership& members);

const char* to_string(protocol proto);
std::optional<protocol> parse_protocol(const std::string& text);

}  // namespace jakiro::secgroup
