#pragma once
// The IPv6 side of one vNIC's security groups in one direction: the rules whose remote side can
// be an IPv6 address (an IPv6 CIDR, or a group, whose members are matched by their IPv6
// addresses), flattened as compiler.hh flattens the IPv4 ones and matched in order. Only a new
// IPv6 flow is classified (the NFT decides the rest), so a list a vNIC's rules bound is walked
// once per flow, not per packet.
//
// IPv6 meaning of a rule's protocol: `icmp` is ICMPv6, `rdma` is UDP to 4791 as in IPv4.
// Built on the control thread, read-only afterwards.

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "secgroup/compiler.hh"
#include "secgroup/rule.hh"

namespace jakiro::secgroup {

constexpr uint8_t ip_proto_icmpv6 = 58;

struct flat_rule6 {
    uint32_t rule_id;
    bool any_proto;
    uint8_t ip_proto;
    cidr6 remote;
    port_range ports;  // destination port
};

// Addresses of every member of each group that has an IPv6 one, by group index.
struct membership6 {
    std::vector<std::vector<ipv6_bytes>> of_group;
    const std::vector<ipv6_bytes>* of(int group_index) const {
        return group_index >= 0 && static_cast<std::size_t>(group_index) < of_group.size()
                   ? &of_group[group_index]
                   : nullptr;
    }
};

std::vector<flat_rule6> expand_rules6(const std::vector<group>& groups,
                                      std::span<const std::size_t> vnic_groups, direction dir,
                                      const membership6& members, const rule_catalog& catalog);

class ipv6_rules {
  public:
    explicit ipv6_rules(std::vector<flat_rule6> rules) : _rules(std::move(rules)) {}

    // The first matching rule's id + 1, or acl_table::no_match. `remote` is the other side's
    // address (network order bytes), `dst_port` in host order (0 without ports).
    uint32_t classify(uint8_t ip_proto, const uint8_t* remote, uint16_t dst_port) const;
    std::size_t rule_count() const { return _rules.size(); }

  private:
    std::vector<flat_rule6> _rules;
};

}  // namespace jakiro::secgroup
