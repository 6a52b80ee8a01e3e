#include "dataplane/pipeline/firewall.hh"

#include <rte_icmp.h>
#include <rte_tcp.h>
#include <rte_udp.h>

#include <cstring>

namespace jakiro {

namespace {

using secgroup::direction;
using secgroup::flow_entry;
using secgroup::flow_key;
using secgroup::flow_state;

constexpr unsigned max_burst = secgroup::flow_table::max_bulk;
constexpr uint8_t icmp_echo_reply = 0;
constexpr uint8_t icmp_echo_request = 8;
constexpr uint8_t icmpv6_echo_request = 128;
constexpr uint8_t icmpv6_echo_reply = 129;

int dir_index(direction dir) {
    return static_cast<int>(dir);
}

// The key's ports from the L4 header `key.ip_proto` names: TCP's and UDP's, or the echo
// identifier of ICMP (`icmp_proto`: ICMP or ICMPv6, whose echo types differ), which a request and
// its reply share, so a ping and its answer are one flow. False (with `reason`) when the header
// is cut short.
bool fill_l4(flow_key& key, const uint8_t* l4, uint32_t l4_len, bool egress, uint8_t icmp_proto,
             uint8_t echo_request, uint8_t echo_reply, uint8_t& tcp_flags, drop_reason& reason) {
    key.local_port = key.remote_port = 0;
    tcp_flags = 0;
    const uint8_t proto = key.ip_proto;
    if (proto == IPPROTO_TCP || proto == IPPROTO_UDP) {
        const uint32_t need = proto == IPPROTO_TCP ? sizeof(rte_tcp_hdr) : sizeof(rte_udp_hdr);
        if (l4_len < need) {
            reason = drop_reason::l4_truncated;
            return false;
        }
        rte_be16_t ports[2];
        std::memcpy(ports, l4, sizeof(ports));
        key.local_port = egress ? ports[0] : ports[1];
        key.remote_port = egress ? ports[1] : ports[0];
        if (proto == IPPROTO_TCP) {
            tcp_flags = reinterpret_cast<const rte_tcp_hdr*>(l4)->tcp_flags;
        }
        return true;
    }
    if (proto == icmp_proto) {
        if (l4_len < sizeof(rte_icmp_hdr)) {
            reason = drop_reason::l4_truncated;
            return false;
        }
        const auto* icmp = reinterpret_cast<const rte_icmp_hdr*>(l4);
        if (icmp->icmp_type == echo_request || icmp->icmp_type == echo_reply) {
            key.local_port = key.remote_port = icmp->icmp_ident;
        }
    }
    return true;
}

// Fills the flow key as the vNIC sees the packet. False (with `reason`) when the packet cannot
// be judged: fragments carry no ports after the first, truncated headers carry none at all.
bool make_key6(const firewall_request& r, flow_key& key, uint8_t& tcp_flags, drop_reason& reason);

bool make_key(const firewall_request& r, flow_key& key, uint8_t& tcp_flags, drop_reason& reason) {
    if (r.ip == nullptr) {
        return make_key6(r, key, tcp_flags, reason);
    }
    const rte_ipv4_hdr* ip = r.ip;
    if ((ip->fragment_offset & rte_cpu_to_be_16(RTE_IPV4_HDR_MF_FLAG | RTE_IPV4_HDR_OFFSET_MASK)) !=
        0) {
        reason = drop_reason::fragment;
        return false;
    }
    const uint32_t ihl = (ip->version_ihl & 0x0f) * 4u;
    const uint8_t* l4 = reinterpret_cast<const uint8_t*>(ip) + ihl;
    const uint32_t l4_len = r.ip_len - ihl;
    const bool egress = r.dir == direction::egress;
    key.vnic = r.vnic;
    key.ip_proto = ip->next_proto_id;
    key.ipv6 = 0;
    key.local_ip = egress ? ip->src_addr : ip->dst_addr;
    key.remote_ip = egress ? ip->dst_addr : ip->src_addr;
    return fill_l4(key, l4, l4_len, egress, IPPROTO_ICMP, icmp_echo_request, icmp_echo_reply,
                   tcp_flags, reason);
}

// The same for IPv6: the addresses go in the key's IPv6 fields; ICMPv6 echo shares its
// identifier between request and reply as ICMP's does.
bool make_key6(const firewall_request& r, flow_key& key, uint8_t& tcp_flags, drop_reason& reason) {
    const rte_ipv6_hdr* ip = r.ip6;
    const uint8_t* l4 = reinterpret_cast<const uint8_t*>(ip + 1);
    const uint32_t l4_len = r.ip_len - static_cast<uint32_t>(sizeof(rte_ipv6_hdr));
    const bool egress = r.dir == direction::egress;
    key.vnic = r.vnic;
    key.ip_proto = ip->proto;
    key.ipv6 = 1;
    key.local_ip = key.remote_ip = 0;
    std::memcpy(key.local_ip6, egress ? ip->src_addr : ip->dst_addr, 16);
    std::memcpy(key.remote_ip6, egress ? ip->dst_addr : ip->src_addr, 16);
    return fill_l4(key, l4, l4_len, egress, IPPROTO_ICMPV6, icmpv6_echo_request, icmpv6_echo_reply,
                   tcp_flags, reason);
}

// The ACL's view of a flow when judged in direction `dir`: the port is the destination port
// of a packet going that way.
secgroup::acl_key acl_key_of(const flow_key& key, direction dir) {
    secgroup::acl_key a{};
    a.ip_proto = key.ip_proto;
    a.remote_ip = key.remote_ip;
    a.dst_port = dir == direction::egress ? key.remote_port : key.local_port;
    a.src_port = dir == direction::egress ? key.local_port : key.remote_port;
    return a;
}

flow_state initial_state(uint8_t ip_proto, uint8_t tcp_flags) {
    switch (ip_proto) {
        case IPPROTO_TCP:
            return secgroup::tcp_initial_state(tcp_flags);
        case IPPROTO_UDP:
            return flow_state::udp;
        case IPPROTO_ICMP:
        case IPPROTO_ICMPV6:
            return flow_state::icmp;
        default:
            return flow_state::other;
    }
}

}  // namespace

void firewall_burst(worker_context& ctx, const datapath_tables& tables,
                    const firewall_request* requests, unsigned n, uint64_t now, bool* pass,
                    drop_reason* reasons) {
    auto& flows = *ctx.flows;
    const uint32_t generation = tables.policy_generation;

    // 1. Keys for the burst, one bulk NFT lookup.
    flow_key keys[max_burst];
    uint8_t flags[max_burst];
    unsigned valid[max_burst];
    flow_key valid_keys[max_burst];
    unsigned valid_count = 0;
    for (unsigned i = 0; i < n; ++i) {
        pass[i] = false;
        if (make_key(requests[i], keys[i], flags[i], reasons[i])) {
            valid_keys[valid_count] = keys[i];
            valid[valid_count++] = i;
        }
    }
    flow_entry* found[max_burst];
    flows.lookup_bulk(valid_keys, valid_count, found);
    flow_entry* entry_of[max_burst];  // by request index, once known

    // 2. Known flows checked under the current policy are decided at once, and so are new
    //    flows of a vNIC that holds its allowance of entries (refused whatever the rules say:
    //    a vNIC that floods new flows costs one lookup per packet, not a classification); the
    //    rest (new flows, and flows whose verdict predates a policy change) are classified in
    //    runs of one vNIC and direction, which is how bursts arrive.
    unsigned pending[max_burst];
    direction judged_as[max_burst];
    unsigned pending_count = 0;
    for (unsigned v = 0; v < valid_count; ++v) {
        const unsigned i = valid[v];
        flow_entry* e = found[v];
        entry_of[i] = e;
        if (e != nullptr && e->generation == generation) {
            pass[i] = !e->revoked;
            reasons[i] = drop_reason::sg_revoked;
            continue;
        }
        if (e == nullptr && flows.flows_of(keys[i].vnic) >= tables.vnics[keys[i].vnic].max_flows) {
            reasons[i] = drop_reason::conntrack_allowance_exceeded;
            continue;
        }
        pending[pending_count] = i;
        // A flow is always judged the way it was opened: a reply is allowed by the rule that
        // allowed the request.
        judged_as[pending_count++] = e != nullptr ? e->initiator : requests[i].dir;
    }
    uint32_t verdicts[max_burst];
    for (unsigned start = 0; start < pending_count;) {
        const uint16_t vnic = requests[pending[start]].vnic;
        const direction dir = judged_as[start];
        unsigned end = start + 1;
        while (end < pending_count && requests[pending[end]].vnic == vnic &&
               judged_as[end] == dir) {
            ++end;
        }
        secgroup::acl_key acl_keys[max_burst];
        const secgroup::acl_key* acl_ptrs[max_burst];
        unsigned acl_of[max_burst];
        unsigned acl_count = 0;
        const auto& policy = tables.policies[vnic];
        for (unsigned p = start; p < end; ++p) {
            const flow_key& key = keys[pending[p]];
            if (key.ipv6 != 0) {
                // A new IPv6 flow: its own rules (secgroup/ipv6_rules.hh).
                const auto& rules6 = policy.acl6[dir_index(dir)];
                const rte_be16_t port = dir == direction::egress ? key.remote_port : key.local_port;
                verdicts[p] = rules6 == nullptr ? secgroup::acl_table::no_match
                                                : rules6->classify(key.ip_proto, key.remote_ip6,
                                                                   rte_be_to_cpu_16(port));
                continue;
            }
            acl_keys[acl_count] = acl_key_of(key, dir);
            acl_ptrs[acl_count] = &acl_keys[acl_count];
            acl_of[acl_count++] = p;
        }
        if (acl_count == end - start) {
            policy.acl[dir_index(dir)]->classify(acl_ptrs, verdicts + start, acl_count);
        } else if (acl_count > 0) {
            uint32_t acl_verdicts[max_burst];
            policy.acl[dir_index(dir)]->classify(acl_ptrs, acl_verdicts, acl_count);
            for (unsigned a = 0; a < acl_count; ++a) {
                verdicts[acl_of[a]] = acl_verdicts[a];
            }
        }
        start = end;
    }
    for (unsigned p = 0; p < pending_count; ++p) {
        const unsigned i = pending[p];
        const firewall_request& r = requests[i];
        ctx.counters.flow_misses.add(1);
        flow_entry* e = entry_of[i];
        // An insert for an earlier packet of this burst may have evicted and reused the slot.
        if (e != nullptr && (!e->in_use || !secgroup::same_flow(e->key, keys[i]))) {
            e = nullptr;
        }
        const bool allowed = verdicts[p] != secgroup::acl_table::no_match;
        if (e == nullptr && !allowed) {
            reasons[i] = r.dir == direction::ingress ? drop_reason::sg_denied_ingress
                                                     : drop_reason::sg_denied_egress;
            continue;
        }
        if (e == nullptr) {
            secgroup::insert_result result;
            e = flows.insert(keys[i], now, tables.vnics[r.vnic].max_flows, result);
            if (e == nullptr) {
                reasons[i] = result == secgroup::insert_result::over_allowance
                                 ? drop_reason::conntrack_allowance_exceeded
                                 : drop_reason::flow_table_full;
                continue;
            }
            if (result == secgroup::insert_result::created) {
                flows.begin_update(*e);
                e->initiator = r.dir;
                e->state = initial_state(keys[i].ip_proto, flags[i]);
                flows.end_update(*e);
                // The opening packet's flags are in the initial state already.
                flags[i] = 0;
            }
        }
        entry_of[i] = e;
        e->generation = generation;
        if (e->revoked != !allowed) {
            flows.begin_update(*e);
            e->revoked = !allowed;
            flows.end_update(*e);
        }
        if (!allowed) {
            reasons[i] = drop_reason::sg_revoked;
            continue;
        }
        e->rule = verdicts[p];
        pass[i] = true;
    }

    // 3. Account every packet that passes on its flow: counters, idle timer, TCP state.
    for (unsigned i = 0; i < n; ++i) {
        const firewall_request& r = requests[i];
        auto& vnic_counters = ctx.counters.vnics[r.vnic];
        if (!pass[i]) {
            if (reasons[i] == drop_reason::conntrack_allowance_exceeded) {
                vnic_counters.conntrack_allowance_exceeded.add(1);
            } else if (reasons[i] != drop_reason::flow_table_full) {
                vnic_counters.sg_denied[dir_index(r.dir)].add(1);
            }
            continue;
        }
        // A later insert in step 2 may have evicted (and reused) this packet's entry.
        flow_entry* e = entry_of[i];
        if (!e->in_use || !secgroup::same_flow(e->key, keys[i])) {
            e = flows.lookup(keys[i]);
            if (e == nullptr) {
                continue;
            }
        }
        vnic_counters.sg_allowed[dir_index(r.dir)].add(1);
        ctx.counters.rule_hits[e->rule - 1].add(1);
        e->last_seen = now;
        e->packets[dir_index(r.dir)] += 1;
        e->bytes[dir_index(r.dir)] += r.ip_len;
        if (keys[i].ip_proto == IPPROTO_TCP && flags[i] != 0) {
            uint8_t fins = e->fins;
            const flow_state next =
                secgroup::tcp_advance(e->state, flags[i], r.dir == e->initiator, fins);
            if (next != e->state || fins != e->fins) {
                flows.begin_update(*e);
                e->state = next;
                e->fins = fins;
                flows.end_update(*e);
            }
        }
    }
}

}  // namespace jakiro
