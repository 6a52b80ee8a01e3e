#pragma once
// The security-group stage: stateful filtering of a burst for one direction, through the NFT
// (one hash lookup per packet on a known flow) and the vNIC's rte_acl context on a miss.

#include <rte_ip.h>

#include "dataplane/tables.hh"
#include "dataplane/worker/worker_context.hh"

namespace jakiro {

struct firewall_request {
    uint16_t vnic;            // whose security groups apply
    secgroup::direction dir;  // ingress: into that vNIC; egress: out of it
    const rte_ipv4_hdr* ip;   // the IPv4 header, already length-checked; nullptr: IPv6
    uint32_t ip_len;          // bytes from the IP header to the end of the packet
    // An IPv6 packet instead (checked: TCP, UDP or ICMPv6 right after the fixed header).
    const rte_ipv6_hdr* ip6 = nullptr;
};

// Decides every request; `pass[i]` says whether packet i may go on. Refused packets are only
// counted here; the caller drops them with the returned reason.
void firewall_burst(worker_context& ctx, const datapath_tables& tables,
                    const firewall_request* requests, unsigned n, uint64_t now, bool* pass,
                    drop_reason* reasons);

}  // namespace jakiro
