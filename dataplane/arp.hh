#pragma once
// ARP (RFC 826) for Ethernet/IPv4: parsing, in-place replies and requests. jakirod answers ARP
// itself on both faces: for the VPC's addresses towards tenants (virtual gateway) and for its
// own underlay address towards the fabric.

#include <rte_arp.h>
#include <rte_ether.h>

#include <cstdint>
#include <optional>

namespace jakiro {

constexpr uint32_t arp_frame_bytes = sizeof(rte_ether_hdr) + sizeof(rte_arp_hdr);  // 42
constexpr uint32_t min_ethernet_frame = 60;  // without FCS; shorter frames get padded

struct arp_message {
    uint16_t opcode;  // RTE_ARP_OP_REQUEST or RTE_ARP_OP_REPLY
    rte_ether_addr sender_mac;
    rte_be32_t sender_ip;
    rte_be32_t target_ip;
};

// Parses an Ethernet frame carrying ARP; nullopt if it is short or not Ethernet/IPv4 ARP.
std::optional<arp_message> parse_arp(const uint8_t* frame, uint32_t len);

// Rewrites the ARP request at `frame` into the reply "answered_ip is at answer_mac", addressed
// back to the requester. The frame keeps its length.
void make_arp_reply(uint8_t* frame, const rte_ether_addr& answer_mac, rte_be32_t answered_ip);

// Writes a broadcast "who has target_ip" request, padded to the Ethernet minimum; returns its
// length.
uint32_t write_arp_request(uint8_t* frame, const rte_ether_addr& sender_mac, rte_be32_t sender_ip,
                           rte_be32_t target_ip);

}  // namespace jakiro
