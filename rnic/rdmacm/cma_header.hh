#pragma once
// The RDMA-CM IP addressing header (IBTA annex A11, "RDMA IP CM Service"): the first 36 bytes
// of a REQ's or SIDR_REQ's private data when the service ID is in the IP range
// (0x0000'0000'01PP'PPPP: port space << 16 | port). The application's own private data follows
// it, and the listener sees only that part. Layout: version (0), IP version in the high nibble
// (4), source port, source address, destination address (16 bytes each; IPv4 in the last 4).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

namespace jakiro::rdmacm {

constexpr std::size_t cma_header_bytes = 36;
constexpr uint16_t port_space_tcp = 0x0106;  // RDMA_PS_TCP
constexpr uint16_t port_space_udp = 0x0111;  // RDMA_PS_UDP
constexpr uint16_t port_space_ib = 0x013F;   // RDMA_PS_IB

constexpr uint64_t service_id(uint16_t port_space, uint16_t port) {
    return (uint64_t{port_space} << 16) | port;
}
constexpr uint16_t port_space_of(uint64_t sid) {
    return static_cast<uint16_t>(sid >> 16);
}
constexpr uint16_t port_of(uint64_t sid) {
    return static_cast<uint16_t>(sid);
}
// Is `sid` an rdma_cm IP service ID (upper 40 bits 0x0000000001)?
constexpr bool is_ip_service(uint64_t sid) {
    return (sid >> 24) == 1;
}

struct cma_ip_header {
    uint16_t src_port = 0;  // host order
    uint32_t src_ip_be = 0;
    uint32_t dst_ip_be = 0;
};

inline void write_cma_header(std::span<uint8_t> out, const cma_ip_header& h) {
    std::memset(out.data(), 0, cma_header_bytes);
    out[0] = 0x00;  // CMA version
    out[1] = 0x40;  // IPv4
    out[2] = static_cast<uint8_t>(h.src_port >> 8);
    out[3] = static_cast<uint8_t>(h.src_port);
    std::memcpy(out.data() + 4 + 12, &h.src_ip_be, 4);
    std::memcpy(out.data() + 20 + 12, &h.dst_ip_be, 4);
}

// nullopt unless version 0 and IPv4 (IPv6 peers are not served: the overlay is IPv4).
inline std::optional<cma_ip_header> read_cma_header(std::span<const uint8_t> in) {
    if (in.size() < cma_header_bytes || in[0] != 0x00 || (in[1] >> 4) != 4) {
        return std::nullopt;
    }
    cma_ip_header h;
    h.src_port = static_cast<uint16_t>((in[2] << 8) | in[3]);
    std::memcpy(&h.src_ip_be, in.data() + 4 + 12, 4);
    std::memcpy(&h.dst_ip_be, in.data() + 20 + 12, 4);
    return h;
}

}  // namespace jakiro::rdmacm
