#pragma once
// What the rdma_cm agent's files share and nobody else needs (cm_agent.cc: ids, channels,
// events, timers; ucma_commands.cc: the ucma ABI commands; cm_messages.cc: the IB CM MADs):
// event numbers, timing constants, command-buffer and sockaddr helpers, and the parameters an
// event carries.

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_user_cm.h>
#include <sys/socket.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "rnic/rdmacm/cm_agent.hh"
#include "rnic/rdmacm/cma_header.hh"

namespace jakiro::rdmacm {
namespace detail {

// rdma_cm_event_type values (rdma/rdma_cma.h), as the ucma ABI carries them.
enum : uint32_t {
    ev_addr_resolved = 0,
    ev_addr_error = 1,
    ev_route_resolved = 2,
    ev_route_error = 3,
    ev_connect_request = 4,
    ev_connect_response = 5,
    ev_connect_error = 6,
    ev_unreachable = 7,
    ev_rejected = 8,
    ev_established = 9,
    ev_disconnected = 10,
};

// RDMA_UDP_QKEY: the Q_Key of every rdma_cm UD QP (librdmacm and the kernel agree on it).
constexpr uint32_t udp_qkey = 0x0123'4567;
// How long we wait for an answer before resending (4.096 µs × 2^16 ≈ 268 ms, the value our
// REQs announce as the remote CM response timeout), and how often.
constexpr uint8_t cm_response_timeout = 16;
constexpr auto resend_interval = std::chrono::microseconds(4096ull << cm_response_timeout) / 1000;
constexpr int max_cm_retries = 15;
// A disconnect is not worth that long: the peer may be gone.
constexpr int max_dreq_retries = 5;
constexpr std::size_t req_user_private = req_private_bytes - cma_header_bytes;  // 56
constexpr std::size_t sidr_user_private = sidr_req_private_bytes - cma_header_bytes;

template <typename T>
inline bool read_cmd(std::span<const uint8_t> in, T& out) {
    // The kernel copies the struct's size from the caller; a shorter `in` is EINVAL.
    if (in.size() < sizeof(T)) {
        return false;
    }
    std::memcpy(&out, in.data(), sizeof(T));
    return true;
}

template <typename T>
inline void put_response(std::vector<uint8_t>& out, const T& resp) {
    out.resize(sizeof(T));
    std::memcpy(out.data(), &resp, sizeof(T));
}

// An address a program handed over, as the agent keeps it (cma_header.hh: its GID; zero for
// "any"), with its port (host order) and whether it came as AF_INET6.
struct ip_sockaddr {
    gid ip{};
    uint16_t port = 0;
    bool inet6 = false;
};

inline bool is_any(const gid& g) {
    return g == gid{};
}

// A sockaddr_in6-sized or sockaddr_storage field: AF_INET, or AF_INET6 (its "::" is any
// address, ::ffff:a.b.c.d an IPv4 one, as programs that bind with getaddrinfo(AI_PASSIVE) hand
// over). nullopt for anything else (AF_IB).
inline std::optional<ip_sockaddr> address_of(const void* p) {
    sockaddr_in a;
    std::memcpy(&a, p, sizeof(a));
    ip_sockaddr out;
    if (a.sin_family == AF_INET) {
        out.port = ntohs(a.sin_port);
        if (a.sin_addr.s_addr != 0) {
            out.ip = ipv4_gid(a.sin_addr.s_addr);
        }
        return out;
    }
    if (a.sin_family != AF_INET6) {
        return std::nullopt;
    }
    sockaddr_in6 six;
    std::memcpy(&six, p, sizeof(six));
    out.inet6 = true;
    out.port = ntohs(six.sin6_port);
    std::memcpy(out.ip.data(), six.sin6_addr.s6_addr, 16);
    if (is_ipv4_gid(out.ip) && out.ip[12] == 0 && out.ip[13] == 0 && out.ip[14] == 0 &&
        out.ip[15] == 0) {
        out.ip = {};  // ::ffff:0.0.0.0, any
    }
    return out;
}

inline bool is_ipv4_loopback(const gid& g) {
    return is_ipv4_gid(g) && g[12] == 127;
}

inline bool is_ipv6_loopback(const gid& g) {
    static constexpr gid loopback = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    return g == loopback;
}

inline bool is_multicast(const gid& g) {
    return is_ipv4_gid(g) ? (g[12] >> 4) == 0xE : g[0] == 0xFF;
}

// A peer a connection can go to: IPv4 unicast, or IPv6 global/unique-local unicast (not
// link-local: the overlay has no links; not loopback, any or IPv4-compatible forms).
inline bool unicast(const gid& g) {
    if (is_ipv4_gid(g)) {
        uint32_t ip_be = 0;
        std::memcpy(&ip_be, g.data() + 12, 4);
        const uint32_t ip = ntohl(ip_be);
        return ip != 0 && ip != 0xFFFF'FFFFu && (ip >> 28) != 0xE && (ip >> 24) != 127;
    }
    return g[0] != 0 && g[0] != 0xFF && !(g[0] == 0xFE && (g[1] & 0xC0) == 0x80);
}

// `ip` (any when zero) and `port` as AF_INET, or AF_INET6 when `inet6` or `ip` is IPv6.
inline void write_sockaddr(void* dst, std::size_t room, const gid& ip, uint16_t port,
                           bool inet6 = false) {
    std::memset(dst, 0, room);
    if (inet6 || (!is_any(ip) && !is_ipv4_gid(ip))) {
        sockaddr_in6 a{};
        a.sin6_family = AF_INET6;
        a.sin6_port = htons(port);
        std::memcpy(a.sin6_addr.s6_addr, ip.data(), 16);
        std::memcpy(dst, &a, sizeof(a));
        return;
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    std::memcpy(&a.sin_addr.s_addr, ip.data() + 12, 4);
    std::memcpy(dst, &a, sizeof(a));
}

// The GID index of the vNIC's address of `dst`'s family (verbs_proto::gid_index_ipv4/_ipv6).
inline uint8_t sgid_index_for(const gid& dst) {
    return is_ipv4_gid(dst) ? 0 : 1;
}

inline void fill_ah(ib_uverbs_ah_attr& ah, const gid& dst, uint8_t tos) {
    ah = {};
    std::memcpy(ah.grh.dgid, dst.data(), 16);
    ah.grh.sgid_index = sgid_index_for(dst);
    ah.grh.hop_limit = 64;
    ah.grh.traffic_class = tos;
    ah.is_global = 1;
    ah.port_num = 1;
}

}  // namespace detail

struct cm_agent::event_params {
    const uint8_t* private_data = nullptr;
    std::size_t private_len = 0;
    uint32_t qp_num = 0;
    uint32_t qkey = 0;
    uint8_t responder_resources = 0;
    uint8_t initiator_depth = 0;
    uint8_t retry_count = 0;
    uint8_t rnr_retry_count = 0;
    bool srq = false;
    bool ud = false;
    gid ah_ip{};
};

}  // namespace jakiro::rdmacm
