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

inline gid ipv4_gid(uint32_t ip_be) {
    gid g{};
    g[10] = 0xFF;
    g[11] = 0xFF;
    std::memcpy(g.data() + 12, &ip_be, 4);
    return g;
}

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

// An IPv4 sockaddr out of a sockaddr_in6-sized or sockaddr_storage field: AF_INET, or the
// IPv6 forms of IPv4 ("::" for any address, ::ffff:a.b.c.d), which programs that bind with
// getaddrinfo(AI_PASSIVE) hand over. nullopt for anything else (AF_IB, real IPv6: the overlay
// is IPv4).
inline std::optional<sockaddr_in> ipv4_of(const void* p) {
    sockaddr_in a;
    std::memcpy(&a, p, sizeof(a));
    if (a.sin_family == AF_INET) {
        return a;
    }
    if (a.sin_family != AF_INET6) {
        return std::nullopt;
    }
    sockaddr_in6 six;
    std::memcpy(&six, p, sizeof(six));
    const uint8_t* b = six.sin6_addr.s6_addr;
    static constexpr uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
    const bool any = IN6_IS_ADDR_UNSPECIFIED(&six.sin6_addr);
    if (!any && std::memcmp(b, mapped, sizeof(mapped)) != 0) {
        return std::nullopt;
    }
    sockaddr_in out{};
    out.sin_family = AF_INET;
    out.sin_port = six.sin6_port;
    if (!any) {
        std::memcpy(&out.sin_addr.s_addr, b + 12, 4);
    }
    return out;
}

inline bool unicast(uint32_t ip_be) {
    const uint32_t ip = ntohl(ip_be);
    return ip != 0 && ip != 0xFFFF'FFFFu && (ip >> 28) != 0xE && (ip >> 24) != 127;
}

inline void write_sockaddr(void* dst, std::size_t room, uint32_t ip_be, uint16_t port) {
    std::memset(dst, 0, room);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = ip_be;
    std::memcpy(dst, &a, sizeof(a));
}

inline void fill_ah(ib_uverbs_ah_attr& ah, uint32_t dst_ip_be, uint8_t tos) {
    ah = {};
    const gid g = ipv4_gid(dst_ip_be);
    std::memcpy(ah.grh.dgid, g.data(), 16);
    ah.grh.sgid_index = 0;
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
    uint32_t ah_ip_be = 0;
};

}  // namespace jakiro::rdmacm
