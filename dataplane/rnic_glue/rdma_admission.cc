#include "dataplane/rnic_glue/rdma_admission.hh"

#include <netinet/in.h>

#include <cerrno>

#include "secgroup/rule.hh"

namespace jakiro {

namespace {

bool rdma_rule_allows(const secgroup::acl_table* acl, uint32_t remote_ip_be) {
    secgroup::acl_key key{};
    key.ip_proto = IPPROTO_UDP;
    key.remote_ip = remote_ip_be;
    key.dst_port = rte_cpu_to_be_16(secgroup::rocev2_udp_port);
    key.src_port = rte_cpu_to_be_16(secgroup::rocev2_udp_port);
    const secgroup::acl_key* keys[] = {&key};
    uint32_t verdict = secgroup::acl_table::no_match;
    if (acl != nullptr) {
        acl->classify(keys, &verdict, 1);
    }
    return verdict != secgroup::acl_table::no_match;
}

// The IPv6 side of the same rules (secgroup/ipv6_rules.hh): an `rdma` rule with an IPv6 CIDR,
// or naming a group whose members' IPv6 addresses include `remote`.
bool rdma_rule_allows6(const secgroup::ipv6_rules* rules, const std::array<uint8_t, 16>& remote) {
    return rules != nullptr &&
           rules->classify(IPPROTO_UDP, remote.data(), secgroup::rocev2_udp_port) !=
               secgroup::acl_table::no_match;
}

}  // namespace

int admit_rdma_peer_ipv6(const datapath_tables& tables, uint16_t vnic_slot,
                         const std::array<uint8_t, 16>& remote) {
    if (vnic_slot >= tables.vnics.size() || vnic_slot >= tables.policies.size()) {
        return ENETUNREACH;
    }
    const vnic_view& vnic = tables.vnics[vnic_slot];
    if (vnic.vpc == no_vpc || !vnic.has_ip6) {
        return ENETUNREACH;  // removed, or no IPv6 address to talk from
    }
    if (remote == vnic.ip6) {
        return 0;  // loopback between two QPs of one vNIC
    }
    if (tables.vlt->lookup6(vnic.vpc, remote.data()) == nullptr) {
        return ENETUNREACH;
    }
    for (const auto& rules : tables.policies[vnic_slot].acl6) {
        if (!rdma_rule_allows6(rules.get(), remote)) {
            return EACCES;
        }
    }
    return 0;
}

bool admit_rdma_datagram_ipv6(const datapath_tables& tables, uint16_t vnic_slot,
                              const std::array<uint8_t, 16>& remote, secgroup::direction dir) {
    if (vnic_slot >= tables.policies.size()) {
        return false;
    }
    return rdma_rule_allows6(tables.policies[vnic_slot].acl6[static_cast<int>(dir)].get(), remote);
}

int admit_rdma_peer(const datapath_tables& tables, uint16_t vnic_slot, uint32_t remote_ip_be) {
    if (vnic_slot >= tables.vnics.size() || vnic_slot >= tables.policies.size()) {
        return ENETUNREACH;
    }
    const vnic_view& vnic = tables.vnics[vnic_slot];
    if (vnic.vpc == no_vpc) {
        return ENETUNREACH;  // the vNIC was removed
    }
    if (remote_ip_be == vnic.ip) {
        return 0;  // loopback between two QPs of one vNIC: nothing crosses a security group
    }
    if (tables.vlt->lookup(vnic.vpc, remote_ip_be) == nullptr) {
        return ENETUNREACH;
    }
    for (const auto& acl : tables.policies[vnic_slot].acl) {
        if (!rdma_rule_allows(acl.get(), remote_ip_be)) {
            return EACCES;
        }
    }
    return 0;
}

bool admit_rdma_datagram(const datapath_tables& tables, uint16_t vnic_slot, uint32_t remote_ip_be,
                         secgroup::direction dir) {
    if (vnic_slot >= tables.policies.size()) {
        return false;
    }
    return rdma_rule_allows(tables.policies[vnic_slot].acl[static_cast<int>(dir)].get(),
                            remote_ip_be);
}

}  // namespace jakiro
