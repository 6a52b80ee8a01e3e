#include "rnic/packet_port.hh"

#include <cstring>

#include "rnic/wire/headers.hh"
#include "rnic/wire/icrc.hh"

namespace jakiro::rnic {

namespace {

uint16_t ipv4_checksum(const uint8_t* h) {
    uint32_t sum = 0;
    for (int i = 0; i < 20; i += 2) {
        sum += (uint32_t{h[i]} << 8) | h[i + 1];
    }
    while (sum >> 16) {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    return static_cast<uint16_t>(~sum);
}

void write_udp_header(uint8_t* udp, uint16_t udp_src_port, uint32_t roce_len) {
    const uint32_t udp_len = 8 + roce_len;
    udp[0] = static_cast<uint8_t>(udp_src_port >> 8);
    udp[1] = static_cast<uint8_t>(udp_src_port);
    udp[2] = static_cast<uint8_t>(roce_udp_port >> 8);
    udp[3] = static_cast<uint8_t>(roce_udp_port & 0xFF);
    udp[4] = static_cast<uint8_t>(udp_len >> 8);
    udp[5] = static_cast<uint8_t>(udp_len);
    udp[6] = udp[7] = 0;
}

}  // namespace

void write_frame_headers(uint8_t* f, const std::array<uint8_t, 6>& src_mac, uint32_t src_ip_be,
                         uint32_t dst_ip_be, uint16_t udp_src_port, uint8_t traffic_class,
                         uint32_t roce_len) {
    std::memset(f, 0, 6);
    std::memcpy(f + 6, src_mac.data(), 6);
    f[12] = 0x08;
    f[13] = 0x00;
    uint8_t* ip = f + 14;
    const uint32_t ip_len = 20 + 8 + roce_len;
    ip[0] = 0x45;
    // ECT(0): the receiver's ingress meter may mark CE instead of dropping (DCQCN).
    ip[1] = static_cast<uint8_t>((traffic_class & 0xFC) | 0x02);
    ip[2] = static_cast<uint8_t>(ip_len >> 8);
    ip[3] = static_cast<uint8_t>(ip_len);
    ip[4] = ip[5] = 0;
    ip[6] = 0x40;  // DF: RoCE segments to the path MTU itself
    ip[7] = 0;
    ip[8] = 64;
    ip[9] = 17;
    ip[10] = ip[11] = 0;
    std::memcpy(ip + 12, &src_ip_be, 4);
    std::memcpy(ip + 16, &dst_ip_be, 4);
    const uint16_t sum = ipv4_checksum(ip);
    ip[10] = static_cast<uint8_t>(sum >> 8);
    ip[11] = static_cast<uint8_t>(sum);
    write_udp_header(ip + 20, udp_src_port, roce_len);
}

void write_frame_headers_ipv6(uint8_t* f, const std::array<uint8_t, 6>& src_mac,
                              const ipv6_address& src, const ipv6_address& dst,
                              uint16_t udp_src_port, uint8_t traffic_class, uint32_t flow_label,
                              uint8_t hop_limit, uint32_t roce_len) {
    std::memset(f, 0, 6);
    std::memcpy(f + 6, src_mac.data(), 6);
    f[12] = 0x86;
    f[13] = 0xDD;
    uint8_t* ip = f + 14;
    // ECT(0), as over IPv4: the receiver's ingress meter may mark CE instead of dropping.
    const uint8_t tc = static_cast<uint8_t>((traffic_class & 0xFC) | 0x02);
    ip[0] = static_cast<uint8_t>(0x60 | (tc >> 4));
    ip[1] = static_cast<uint8_t>((tc << 4) | ((flow_label >> 16) & 0x0F));
    ip[2] = static_cast<uint8_t>(flow_label >> 8);
    ip[3] = static_cast<uint8_t>(flow_label);
    const uint32_t payload_len = 8 + roce_len;
    ip[4] = static_cast<uint8_t>(payload_len >> 8);
    ip[5] = static_cast<uint8_t>(payload_len);
    ip[6] = 17;  // UDP
    ip[7] = hop_limit != 0 ? hop_limit : 64;
    std::memcpy(ip + 8, src.data(), 16);
    std::memcpy(ip + 24, dst.data(), 16);
    write_udp_header(ip + 40, udp_src_port, roce_len);
}

void seal_icrc(uint8_t* frame, uint32_t roce_len) {
    uint8_t* ip = frame + 14;
    const uint32_t ip_header = (ip[0] >> 4) == 6 ? 40 : 20;
    const uint32_t covered = ip_header + 8 + roce_len - icrc_bytes;
    store_icrc(ip + covered, compute_icrc(ip, covered).value_or(0));
}

}  // namespace jakiro::rnic
