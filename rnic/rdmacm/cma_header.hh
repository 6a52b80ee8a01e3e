#pragma once
// The RDMA-CM IP addressing header (IBTA annex A11, "RDMA IP CM Service"): the first 36 bytes
// of a REQ's or SIDR_REQ's private data when the service ID is in the IP range
// (0x0000'0000'01PP'PPPP: port space << 16 | port). The application's own private data follows
// it, and the listener sees only that part. Layout: version (0), IP version in the high nibble
// (4 or 6), source port, source address, destination address (16 bytes each; IPv4 in the last
// 4).
//
// The agent keeps every address as its RoCE v2 GID: an IPv4 address IPv4-mapped
// (::ffff:a.b.c.d), an IPv6 address as itself; all zero is "any" (an unbound source).

#include <array>
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

using ip_gid = std::array<uint8_t, 16>;

inline bool is_ipv4_gid(const ip_gid& g) {
    static constexpr uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
    return std::memcmp(g.data(), mapped, sizeof(mapped)) == 0;
}

inline ip_gid ipv4_gid(uint32_t ip_be) {
    ip_gid g{};
    g[10] = 0xFF;
    g[11] = 0xFF;
    std::memcpy(g.data() + 12, &ip_be, 4);
    return g;
}

struct cma_ip_header {
    uint16_t src_port = 0;  // host order
    ip_gid src_ip{};
    ip_gid dst_ip{};

    cma_ip_header() = default;
    cma_ip_header(uint16_t port, const ip_gid& src, const ip_gid& dst)
        : src_port(port), src_ip(src), dst_ip(dst) {}
    cma_ip_header(uint16_t port, uint32_t src_be, uint32_t dst_be)
        : cma_ip_header(port, ipv4_gid(src_be), ipv4_gid(dst_be)) {}
};

inline void write_cma_header(std::span<uint8_t> out, const cma_ip_header& h) {
    std::memset(out.data(), 0, cma_header_bytes);
    const bool ipv4 = is_ipv4_gid(h.src_ip) && is_ipv4_gid(h.dst_ip);
    out[0] = 0x00;                // CMA version
    out[1] = ipv4 ? 0x40 : 0x60;  // IP version
    out[2] = static_cast<uint8_t>(h.src_port >> 8);
    out[3] = static_cast<uint8_t>(h.src_port);
    if (ipv4) {
        std::memcpy(out.data() + 4 + 12, h.src_ip.data() + 12, 4);
        std::memcpy(out.data() + 20 + 12, h.dst_ip.data() + 12, 4);
    } else {
        std::memcpy(out.data() + 4, h.src_ip.data(), 16);
        std::memcpy(out.data() + 20, h.dst_ip.data(), 16);
    }
}

// nullopt unless version 0 and IPv4 or IPv6.
inline std::optional<cma_ip_header> read_cma_header(std::span<const uint8_t> in) {
    if (in.size() < cma_header_bytes || in[0] != 0x00 || ((in[1] >> 4) != 4 && (in[1] >> 4) != 6)) {
        return std::nullopt;
    }
    cma_ip_header h;
    h.src_port = static_cast<uint16_t>((in[2] << 8) | in[3]);
    if ((in[1] >> 4) == 4) {
        uint32_t src = 0, dst = 0;
        std::memcpy(&src, in.data() + 4 + 12, 4);
        std::memcpy(&dst, in.data() + 20 + 12, 4);
        h.src_ip = ipv4_gid(src);
        h.dst_ip = ipv4_gid(dst);
    } else {
        std::memcpy(h.src_ip.data(), in.data() + 4, 16);
        std::memcpy(h.dst_ip.data(), in.data() + 20, 16);
    }
    return h;
}

}  // namespace jakiro::rdmacm
