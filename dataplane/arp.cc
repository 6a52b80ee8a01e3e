#include "dataplane/arp.hh"

#include <cstring>

namespace jakiro {

std::optional<arp_message> parse_arp(const uint8_t* frame, uint32_t len) {
    if (len < arp_frame_bytes) {
        return std::nullopt;
    }
    const auto* arp = reinterpret_cast<const rte_arp_hdr*>(frame + sizeof(rte_ether_hdr));
    if (arp->arp_hardware != rte_cpu_to_be_16(RTE_ARP_HRD_ETHER) ||
        arp->arp_protocol != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4) ||
        arp->arp_hlen != RTE_ETHER_ADDR_LEN || arp->arp_plen != sizeof(rte_be32_t)) {
        return std::nullopt;
    }
    arp_message message;
    message.opcode = rte_be_to_cpu_16(arp->arp_opcode);
    message.sender_mac = arp->arp_data.arp_sha;
    // The IP fields of rte_arp_ipv4 are unaligned; copy rather than dereference.
    std::memcpy(&message.sender_ip, &arp->arp_data.arp_sip, sizeof(rte_be32_t));
    std::memcpy(&message.target_ip, &arp->arp_data.arp_tip, sizeof(rte_be32_t));
    return message;
}

void make_arp_reply(uint8_t* frame, const rte_ether_addr& answer_mac, rte_be32_t answered_ip) {
    auto* eth = reinterpret_cast<rte_ether_hdr*>(frame);
    auto* arp = reinterpret_cast<rte_arp_hdr*>(eth + 1);
    rte_be32_t requester_ip;
    std::memcpy(&requester_ip, &arp->arp_data.arp_sip, sizeof(requester_ip));

    eth->dst_addr = arp->arp_data.arp_sha;
    eth->src_addr = answer_mac;
    arp->arp_opcode = rte_cpu_to_be_16(RTE_ARP_OP_REPLY);
    arp->arp_data.arp_tha = arp->arp_data.arp_sha;
    std::memcpy(&arp->arp_data.arp_tip, &requester_ip, sizeof(requester_ip));
    arp->arp_data.arp_sha = answer_mac;
    std::memcpy(&arp->arp_data.arp_sip, &answered_ip, sizeof(answered_ip));
}

uint32_t write_arp_request(uint8_t* frame, const rte_ether_addr& sender_mac, rte_be32_t sender_ip,
                           rte_be32_t target_ip) {
    std::memset(frame, 0, min_ethernet_frame);
    auto* eth = reinterpret_cast<rte_ether_hdr*>(frame);
    auto* arp = reinterpret_cast<rte_arp_hdr*>(eth + 1);
    std::memset(&eth->dst_addr, 0xff, sizeof(eth->dst_addr));
    eth->src_addr = sender_mac;
    eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_ARP);
    arp->arp_hardware = rte_cpu_to_be_16(RTE_ARP_HRD_ETHER);
    arp->arp_protocol = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
    arp->arp_hlen = RTE_ETHER_ADDR_LEN;
    arp->arp_plen = sizeof(rte_be32_t);
    arp->arp_opcode = rte_cpu_to_be_16(RTE_ARP_OP_REQUEST);
    arp->arp_data.arp_sha = sender_mac;
    std::memcpy(&arp->arp_data.arp_sip, &sender_ip, sizeof(sender_ip));
    std::memcpy(&arp->arp_data.arp_tip, &target_ip, sizeof(target_ip));
    return min_ethernet_frame;
}

}  // namespace jakiro
