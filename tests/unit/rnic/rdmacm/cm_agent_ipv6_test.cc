// rdma_cm over IPv6, as rping -a <IPv6> and udaddy use it: ids bound and resolved with
// sockaddr_in6, a REQ carrying IPv6 GIDs and an IP version 6 RDMA-CM header, QPs readied with
// the peer's IPv6 GID from GID index 1, addresses reported back as AF_INET6; a listener bound
// to "::" takes both families; a peer the security groups refuse is rejected as over IPv4.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_user_cm.h>
#include <sys/socket.h>

#include <cstring>
#include <vector>

#include "rnic/rdmacm/cm_agent.hh"
#include "rnic/rdmacm/cma_header.hh"
#include "tests/unit/rnic/rdmacm/cm_agents.hh"

namespace {

class CmAgentIpv6Test : public CmAgentTest {
  protected:
    static sockaddr_in6 six(const gid& ip, uint16_t port) {
        sockaddr_in6 s{};
        s.sin6_family = AF_INET6;
        s.sin6_port = htons(port);
        std::memcpy(s.sin6_addr.s6_addr, ip.data(), 16);
        return s;
    }

    uint32_t listen6(node& n, const gid& ip, uint16_t port, uint16_t ps = port_space_tcp,
                     uint8_t qp_type = IBV_QPT_RC) {
        const uint32_t id = create(n, ps, qp_type);
        rdma_ucm_bind_ip bind{};
        bind.id = id;
        const sockaddr_in6 s = six(ip, port);
        std::memcpy(&bind.addr, &s, sizeof(s));
        EXPECT_EQ(run(n, command(RDMA_USER_CM_CMD_BIND_IP, bind)), 0);
        rdma_ucm_listen l{id, 8};
        EXPECT_EQ(run(n, command(RDMA_USER_CM_CMD_LISTEN, l)), 0);
        return id;
    }

    // rdma_resolve_addr with a sockaddr_in6 (the sockaddr_storage command), then the route.
    uint32_t resolved6(node& n, const gid& dst, uint16_t port, uint16_t ps = port_space_tcp,
                       uint8_t qp_type = IBV_QPT_RC) {
        const uint32_t id = create(n, ps, qp_type);
        rdma_ucm_resolve_addr r{};
        r.id = id;
        r.dst_size = sizeof(sockaddr_in6);
        const sockaddr_in6 s = six(dst, port);
        std::memcpy(&r.dst_addr, &s, sizeof(s));
        EXPECT_EQ(run(n, command(RDMA_USER_CM_CMD_RESOLVE_ADDR, r)), 0);
        EXPECT_EQ(next_event(n)->event, 0u);  // ADDR_RESOLVED
        rdma_ucm_resolve_route rr{id, 2000};
        EXPECT_EQ(run(n, command(RDMA_USER_CM_CMD_RESOLVE_ROUTE, rr)), 0);
        EXPECT_EQ(next_event(n)->event, 2u);  // ROUTE_RESOLVED
        return id;
    }

    rdma_ucm_query_route_resp route_of(node& n, uint32_t id) {
        rdma_ucm_query q{};
        q.id = id;
        q.option = RDMA_USER_CM_QUERY_ADDR;
        std::vector<uint8_t> out;
        EXPECT_EQ(run(n, command(RDMA_USER_CM_CMD_QUERY_ROUTE, q), &out), 0);
        rdma_ucm_query_route_resp r{};
        std::memcpy(&r, out.data(), std::min(out.size(), sizeof(r)));
        return r;
    }
};

TEST_F(CmAgentIpv6Test, ConnectAcceptAndEstablishBetweenIpv6Addresses) {
    const gid a6 = ip6_of(ip_a);
    const gid b6 = ip6_of(ip_b);
    listen6(b, b6, 7100);
    const uint32_t id = resolved6(a, b6, 7100);

    // The route names both IPv6 GIDs, the addresses come back as AF_INET6.
    const auto route = route_of(a, id);
    EXPECT_EQ(std::memcmp(route.ib_route[0].sgid, a6.data(), 16), 0);
    EXPECT_EQ(std::memcmp(route.ib_route[0].dgid, b6.data(), 16), 0);
    sockaddr_in6 dst{};
    std::memcpy(&dst, &route.dst_addr, sizeof(dst));
    EXPECT_EQ(dst.sin6_family, AF_INET6);
    EXPECT_EQ(ntohs(dst.sin6_port), 7100);
    EXPECT_EQ(std::memcmp(dst.sin6_addr.s6_addr, b6.data(), 16), 0);

    ASSERT_EQ(connect(a, id, 0x111), 0);
    ASSERT_FALSE(w.queue.empty());
    EXPECT_EQ(w.queue.front().to, b6) << "the REQ goes to the IPv6 address";
    EXPECT_EQ(w.queue.front().from, a6);
    const auto req_mad = decode(w.queue.front().bytes);
    ASSERT_TRUE(req_mad.has_value());
    const auto& req_body = std::get<cm_req>(req_mad->body);
    EXPECT_EQ(req_body.primary_local_gid, a6);
    EXPECT_EQ(req_body.primary_remote_gid, b6);
    EXPECT_EQ(req_body.private_data[1], 0x60) << "RDMA-CM header of IP version 6";
    pump();
    const auto req = next_event(b);
    ASSERT_TRUE(req.has_value());
    EXPECT_EQ(req->event, 4u);  // CONNECT_REQUEST
    EXPECT_EQ(std::memcmp(req->param.conn.private_data, "ping", 4), 0);
    const uint32_t child = req->id;

    // Both sides ready their QPs towards the other's IPv6 GID, from GID index 1.
    const auto rtr_b = init_qp_attr(b, child, IBV_QPS_RTR);
    EXPECT_EQ(rtr_b.ah_attr.is_global, 1);
    EXPECT_EQ(std::memcmp(rtr_b.ah_attr.grh.dgid, a6.data(), 16), 0);
    EXPECT_EQ(rtr_b.ah_attr.grh.sgid_index, 1);
    const auto child_route = route_of(b, child);
    sockaddr_in6 peer{};
    std::memcpy(&peer, &child_route.dst_addr, sizeof(peer));
    EXPECT_EQ(peer.sin6_family, AF_INET6);
    EXPECT_EQ(std::memcmp(peer.sin6_addr.s6_addr, a6.data(), 16), 0);

    rdma_ucm_accept acc{};
    acc.id = child;
    acc.conn_param.valid = 1;
    acc.conn_param.qp_num = 0x222;
    ASSERT_EQ(run(b, command(RDMA_USER_CM_CMD_ACCEPT, acc)), 0);
    pump();
    EXPECT_EQ(next_event(a)->event, 5u);  // CONNECT_RESPONSE
    const auto rtr_a = init_qp_attr(a, id, IBV_QPS_RTR);
    EXPECT_EQ(std::memcmp(rtr_a.ah_attr.grh.dgid, b6.data(), 16), 0);
    EXPECT_EQ(rtr_a.ah_attr.grh.sgid_index, 1);
    rdma_ucm_accept rtu{};
    rtu.id = id;
    ASSERT_EQ(run(a, command(RDMA_USER_CM_CMD_ACCEPT, rtu)), 0);
    pump();
    EXPECT_EQ(next_event(b)->event, 9u);  // ESTABLISHED
}

// rping -s binds "::" by default: such a listener takes IPv4 and IPv6 requests alike.
TEST_F(CmAgentIpv6Test, AListenerBoundToTheIpv6AnyAddressTakesBothFamilies) {
    listen6(b, gid{}, 7101);
    const uint32_t v6 = resolved6(a, ip6_of(ip_b), 7101);
    ASSERT_EQ(connect(a, v6, 0x111), 0);
    pump();
    EXPECT_EQ(next_event(b)->event, 4u);
    const uint32_t v4 = resolved(c, ip_b, 7101);
    ASSERT_EQ(connect(c, v4, 0x333), 0);
    pump();
    EXPECT_EQ(next_event(b)->event, 4u);
}

TEST_F(CmAgentIpv6Test, AnIpv6PeerTheSecurityGroupsRefuseIsRejected) {
    listen6(b, ip6_of(ip_b), 7102);
    refused = ip_b;  // a's own rules refuse b (both of its addresses)
    const uint32_t id = resolved6(a, ip6_of(ip_b), 7102);
    ASSERT_EQ(connect(a, id, 0x111), 0);
    pump();
    const auto ev = next_event(a);
    ASSERT_TRUE(ev.has_value());
    EXPECT_EQ(ev->event, 8u);  // REJECTED by a's own rules, nothing sent
    EXPECT_TRUE(w.seen.empty());
}

// udaddy: SIDR over IPv6, the UD QP's address handle from the IPv6 GID.
TEST_F(CmAgentIpv6Test, SidrResolvesAUdPeerByItsIpv6Address) {
    listen6(b, ip6_of(ip_b), 7103, port_space_udp, IBV_QPT_UD);
    const uint32_t id = resolved6(a, ip6_of(ip_b), 7103, port_space_udp, IBV_QPT_UD);
    ASSERT_EQ(connect(a, id, 0x111), 0);
    pump();
    const auto req = next_event(b);
    ASSERT_TRUE(req.has_value());
    EXPECT_EQ(req->event, 4u);
    EXPECT_EQ(std::memcmp(req->param.ud.ah_attr.grh.dgid, ip6_of(ip_a).data(), 16), 0);
    EXPECT_EQ(req->param.ud.ah_attr.grh.sgid_index, 1);
}

TEST_F(CmAgentIpv6Test, ALinkLocalOrForeignIpv6AddressIsNotOneToBindOrReach) {
    const uint32_t id = create(a);
    rdma_ucm_bind_ip bind{};
    bind.id = id;
    const sockaddr_in6 other = six(ip6_of(ip_b), 7104);  // b's address, not a's
    std::memcpy(&bind.addr, &other, sizeof(other));
    EXPECT_EQ(run(a, command(RDMA_USER_CM_CMD_BIND_IP, bind)), EADDRNOTAVAIL);
    rdma_ucm_resolve_addr r{};
    r.id = id;
    r.dst_size = sizeof(sockaddr_in6);
    const gid link_local = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
    const sockaddr_in6 s = six(link_local, 7104);
    std::memcpy(&r.dst_addr, &s, sizeof(s));
    EXPECT_EQ(run(a, command(RDMA_USER_CM_CMD_RESOLVE_ADDR, r)), 0);
    const auto ev = next_event(a);
    ASSERT_TRUE(ev.has_value());
    EXPECT_EQ(ev->event, 1u);  // ADDR_ERROR
}

}  // namespace
