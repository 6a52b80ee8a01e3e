#pragma once
// Three vNICs' rdma_cm agents (198.19.1.1 to .3) back to back over a test wire that can lose
// MADs, driven with the ucma commands librdmacm writes: the fixture of the agent's tests.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_user_cm.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "rnic/rdmacm/cm_agent.hh"
#include "rnic/rdmacm/cma_header.hh"
#include "verbs_abi/cm_protocol.hh"

using namespace jakiro::rdmacm;

namespace {

const uint32_t ip_a = inet_addr("198.19.1.1");
const uint32_t ip_b = inet_addr("198.19.1.2");
const uint32_t ip_c = inet_addr("198.19.1.3");

struct wire {
    struct mad {
        gid from, to;  // IPv4-mapped, or IPv6
        mad_buffer bytes;
    };
    std::deque<mad> queue;
    int drop_next = 0;  // lose this many MADs
    std::vector<cm_attribute> seen;
};

struct node {
    int events[2] = {-1, -1};  // [0] the agent's end, [1] the shim's
    std::unique_ptr<cm_agent> agent;
    uint64_t client = 1;
    ~node() {
        close(events[0]);
        close(events[1]);
    }
};

template <typename T>
std::vector<uint8_t> command(uint32_t cmd, const T& body, uint16_t out = 512) {
    rdma_ucm_cmd_hdr h{cmd, sizeof(T), out};
    std::vector<uint8_t> v(sizeof(h) + sizeof(T));
    std::memcpy(v.data(), &h, sizeof(h));
    std::memcpy(v.data() + sizeof(h), &body, sizeof(T));
    return v;
}

class CmAgentTest : public ::testing::Test {
  protected:
    void SetUp() override {
        make(a, ip_a, 0x0211'22ff'fe00'0001ull);
        make(b, ip_b, 0x0211'22ff'fe00'0002ull);
        make(c, ip_c, 0x0211'22ff'fe00'0003ull);
    }

    void make(node& n, uint32_t ip, uint64_t guid) {
        ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, n.events), 0);
        agent_identity self{0, ip, htobe64(guid), 3};
        self.ip6 = ip6_of(ip);
        n.agent = std::make_unique<cm_agent>(
            self,
            // A MAD leaves from the vNIC's address of its destination's family.
            [this, ip](const gid& dst, const mad_buffer& m) {
                w.queue.push_back({is_ipv4_gid(dst) ? ipv4_gid(ip) : ip6_of(ip), dst, m});
            },
            [this](const gid& remote) {
                return remote == ipv4_gid(refused) || remote == ip6_of(refused) ? EACCES : 0;
            });
        ASSERT_TRUE(n.agent->open_channel(n.client, n.events[0]));
    }

    // Each vNIC's IPv6 address: 2001:2::1:<last byte of its IPv4 address>.
    static gid ip6_of(uint32_t ip_be) {
        gid g = {0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0};
        g[15] = static_cast<uint8_t>(ntohl(ip_be));
        return g;
    }
    node& node_at(const gid& ip) {
        return ip == ipv4_gid(ip_a) || ip == ip6_of(ip_a)   ? a
               : ip == ipv4_gid(ip_b) || ip == ip6_of(ip_b) ? b
                                                            : c;
    }

    // Delivers queued MADs (and what they cause) until the wire is quiet.
    void pump() {
        while (!w.queue.empty()) {
            auto m = w.queue.front();
            w.queue.pop_front();
            if (auto d = decode(m.bytes)) {
                w.seen.push_back(attribute_of(d->body));
            }
            if (w.drop_next > 0) {
                --w.drop_next;
                continue;
            }
            node_at(m.to).agent->on_mad(m.from, m.bytes);
        }
    }

    int run(node& n, const std::vector<uint8_t>& cmd, std::vector<uint8_t>* out = nullptr,
            std::span<const uint8_t> option = {}) {
        std::vector<uint8_t> response;
        const int rc = n.agent->command(n.client, cmd, option, response);
        if (out != nullptr) {
            *out = response;
        }
        return rc;
    }

    uint32_t create(node& n, uint16_t ps = port_space_tcp, uint8_t qp_type = IBV_QPT_RC) {
        rdma_ucm_create_id c{};
        c.uid = 0x1000 + n.client;
        c.ps = ps;
        c.qp_type = qp_type;
        std::vector<uint8_t> out;
        EXPECT_EQ(run(n, command(RDMA_USER_CM_CMD_CREATE_ID, c), &out), 0);
        rdma_ucm_create_id_resp r;
        std::memcpy(&r, out.data(), sizeof(r));
        return r.id;
    }

    std::optional<rdma_ucm_event_resp> next_event(node& n) {
        alignas(8) uint8_t buf[1024];
        const ssize_t len = recv(n.events[1], buf, sizeof(buf), MSG_DONTWAIT);
        if (len != sizeof(jakiro::cm_proto::event_header) + sizeof(rdma_ucm_event_resp)) {
            return std::nullopt;
        }
        rdma_ucm_event_resp r;
        std::memcpy(&r, buf + sizeof(jakiro::cm_proto::event_header), sizeof(r));
        return r;
    }

    uint32_t listen_on(node& n, uint16_t port, uint16_t ps = port_space_tcp,
                       uint8_t qp_type = IBV_QPT_RC) {
        const uint32_t id = create(n, ps, qp_type);
        rdma_ucm_bind_ip bind{};
        bind.id = id;
        sockaddr_in sin{};
        sin.sin_family = AF_INET;
        sin.sin_port = htons(port);
        std::memcpy(&bind.addr, &sin, sizeof(sin));
        EXPECT_EQ(run(n, command(RDMA_USER_CM_CMD_BIND_IP, bind)), 0);
        rdma_ucm_listen l{id, 8};
        EXPECT_EQ(run(n, command(RDMA_USER_CM_CMD_LISTEN, l)), 0);
        return id;
    }

    // Resolve address and route to `dst`:`port`, as rdma_resolve_addr/route do.
    uint32_t resolved(node& n, uint32_t dst, uint16_t port, uint16_t ps = port_space_tcp,
                      uint8_t qp_type = IBV_QPT_RC) {
        const uint32_t id = create(n, ps, qp_type);
        rdma_ucm_resolve_ip r{};
        r.id = id;
        sockaddr_in sin{};
        sin.sin_family = AF_INET;
        sin.sin_port = htons(port);
        sin.sin_addr.s_addr = dst;
        std::memcpy(&r.dst_addr, &sin, sizeof(sin));
        EXPECT_EQ(run(n, command(RDMA_USER_CM_CMD_RESOLVE_IP, r)), 0);
        EXPECT_EQ(next_event(n)->event, 0u);  // ADDR_RESOLVED
        rdma_ucm_resolve_route rr{id, 2000};
        EXPECT_EQ(run(n, command(RDMA_USER_CM_CMD_RESOLVE_ROUTE, rr)), 0);
        EXPECT_EQ(next_event(n)->event, 2u);  // ROUTE_RESOLVED
        return id;
    }

    int connect(node& n, uint32_t id, uint32_t qpn) {
        rdma_ucm_connect c{};
        c.id = id;
        c.conn_param.qp_num = qpn;
        c.conn_param.valid = 1;
        c.conn_param.responder_resources = 4;
        c.conn_param.initiator_depth = 4;
        c.conn_param.retry_count = 7;
        c.conn_param.rnr_retry_count = 7;
        c.conn_param.private_data_len = 4;
        std::memcpy(c.conn_param.private_data, "ping", 4);
        return run(n, command(RDMA_USER_CM_CMD_CONNECT, c));
    }

    ib_uverbs_qp_attr init_qp_attr(node& n, uint32_t id, uint32_t state) {
        rdma_ucm_init_qp_attr c{};
        c.id = id;
        c.qp_state = state;
        std::vector<uint8_t> out;
        EXPECT_EQ(run(n, command(RDMA_USER_CM_CMD_INIT_QP_ATTR, c), &out), 0);
        ib_uverbs_qp_attr r{};
        if (out.size() == sizeof(r)) {
            std::memcpy(&r, out.data(), sizeof(r));
        }
        return r;
    }

    wire w;
    node a, b, c;
    uint32_t refused = 0;
};

}  // namespace
