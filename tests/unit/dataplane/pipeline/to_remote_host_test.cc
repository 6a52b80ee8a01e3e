// The one road to another host (pipeline/to_remote_host): the outer headers RFC 7348 asks for,
// the UDP source port as the inner flow's entropy, and a counted drop while the remote host's
// underlay MAC is unknown. Tenant frames and the RNIC's frames both take it.

#include <rte_udp.h>
#include <rte_vxlan.h>

#include <set>

#include "dataplane/pipeline/to_remote_host.hh"
#include "tests/unit/dataplane/pipeline/pipeline_fixture.hh"

namespace jakiro::test {
namespace {

struct ToRemoteHost : PipelineTest {
    // The VLT entry a blue vNIC reaches `dst` by.
    const overlay::vlt_entry& route(const char* dst) const {
        const auto* entry = tables->vlt->lookup(tables->vnics[slot_t1].vpc, ip(dst));
        EXPECT_NE(entry, nullptr);
        EXPECT_EQ(entry->kind, overlay::vlt_kind::remote_host);
        return *entry;
    }

    // Sends one t1 frame to `dst` down the road; returns the mbuf when it was encapsulated.
    rte_mbuf* send(const char* dst, ipv4_frame_spec spec) {
        spec.dst_ip = ip(dst);
        rte_mbuf* m = ipv4_mbuf(pool, spec);
        const auto* inner = rte_pktmbuf_mtod_offset(m, const rte_ipv4_hdr*, sizeof(rte_ether_hdr));
        return encapsulate_to_remote_host(*ctx, *tables, slot_t1, route(dst), m, inner,
                                          rte_be_to_cpu_16(inner->total_length))
                   ? m
                   : nullptr;
    }

    ipv4_frame_spec t1_spec() const {
        return {t1_mac, gateway, ip("198.19.1.1"), ip("198.19.1.2")};
    }
};

TEST_F(ToRemoteHost, OuterHeadersAreVxlanPerRfc7348ToTheRemoteHost) {
    neighbors.learn(ip("198.18.0.2"), h2_mac);
    auto spec = t1_spec();
    spec.tos = 0xb8 | 0x02;  // DSCP EF, ECT(0)
    rte_mbuf* m = send("198.19.1.2", spec);
    ASSERT_NE(m, nullptr);
    const uint32_t inner_len =
        sizeof(rte_ether_hdr) + sizeof(rte_ipv4_hdr) + sizeof(rte_udp_hdr) + spec.payload;
    ASSERT_EQ(rte_pktmbuf_pkt_len(m), inner_len + overlay::outer_header_bytes);

    const auto* eth = rte_pktmbuf_mtod(m, const rte_ether_hdr*);
    EXPECT_TRUE(rte_is_same_ether_addr(&eth->dst_addr, &h2_mac)) << "the remote host's MAC";
    EXPECT_TRUE(rte_is_same_ether_addr(&eth->src_addr, &h1_mac)) << "this host's underlay MAC";
    EXPECT_EQ(eth->ether_type, rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4));

    const auto* outer_ip = reinterpret_cast<const rte_ipv4_hdr*>(eth + 1);
    EXPECT_EQ(outer_ip->version_ihl, RTE_IPV4_VHL_DEF) << "no options";
    EXPECT_EQ(outer_ip->src_addr, ip("198.18.0.1"));
    EXPECT_EQ(outer_ip->dst_addr, ip("198.18.0.2"));
    EXPECT_EQ(outer_ip->next_proto_id, IPPROTO_UDP);
    EXPECT_EQ(outer_ip->time_to_live, overlay::outer_ttl);
    EXPECT_EQ(outer_ip->fragment_offset, rte_cpu_to_be_16(RTE_IPV4_HDR_DF_FLAG));
    EXPECT_EQ(outer_ip->type_of_service, spec.tos) << "DSCP and ECN copied (RFC 6040 normal mode)";
    EXPECT_EQ(rte_be_to_cpu_16(outer_ip->total_length), m->pkt_len - sizeof(rte_ether_hdr));
    EXPECT_EQ(rte_raw_cksum(outer_ip, sizeof(rte_ipv4_hdr)), 0xffff) << "header checksum";

    const auto* udp = reinterpret_cast<const rte_udp_hdr*>(outer_ip + 1);
    EXPECT_EQ(udp->dst_port, rte_cpu_to_be_16(4789)) << "IANA VXLAN port";
    EXPECT_EQ(udp->dgram_cksum, 0) << "zero UDP checksum over IPv4 (RFC 7348 §5)";
    EXPECT_EQ(rte_be_to_cpu_16(udp->dgram_len),
              sizeof(rte_udp_hdr) + sizeof(rte_vxlan_hdr) + inner_len);

    const auto* vx = reinterpret_cast<const uint8_t*>(udp + 1);
    EXPECT_EQ(vx[0], 0x08) << "only the I flag";
    EXPECT_EQ(vx[1] | vx[2] | vx[3] | vx[7], 0) << "reserved bits zero";
    EXPECT_EQ((uint32_t{vx[4]} << 16) | (uint32_t{vx[5]} << 8) | vx[6], 100u) << "blue's VNI";

    const auto* inner_eth = reinterpret_cast<const rte_ether_hdr*>(vx + sizeof(rte_vxlan_hdr));
    EXPECT_TRUE(rte_is_same_ether_addr(&inner_eth->dst_addr, &gateway))
        << "a Jakiro host's tenants are behind its gateway MAC";
    EXPECT_TRUE(rte_is_same_ether_addr(&inner_eth->src_addr, &t1_mac));
    EXPECT_EQ(ctx->counters.encapsulated.read(), 1u);
    rte_pktmbuf_free(m);
}

TEST_F(ToRemoteHost, ForeignVtepTenantGetsItsConfiguredInnerMac) {
    neighbors.learn(ip("198.18.0.9"), mac("02:00:00:00:00:09"));
    rte_mbuf* m = send("198.19.1.9", t1_spec());
    ASSERT_NE(m, nullptr);
    const auto* inner =
        rte_pktmbuf_mtod_offset(m, const rte_ether_hdr*, overlay::outer_header_bytes);
    const auto expected = mac("02:00:c6:13:01:09");
    EXPECT_TRUE(rte_is_same_ether_addr(&inner->dst_addr, &expected));
    rte_pktmbuf_free(m);
}

TEST_F(ToRemoteHost, SourcePortIsTheInnerFlowsEntropyInTheDynamicRange) {
    neighbors.learn(ip("198.18.0.2"), h2_mac);
    auto outer_source_port = [&](uint16_t inner_src_port) {
        auto spec = t1_spec();
        spec.src_port = inner_src_port;
        rte_mbuf* m = send("198.19.1.2", spec);
        EXPECT_NE(m, nullptr);
        if (m == nullptr) {
            return uint16_t{0};
        }
        const auto* udp = rte_pktmbuf_mtod_offset(m, const rte_udp_hdr*,
                                                  sizeof(rte_ether_hdr) + sizeof(rte_ipv4_hdr));
        const uint16_t port = rte_be_to_cpu_16(udp->src_port);
        rte_pktmbuf_free(m);
        return port;
    };
    std::set<uint16_t> seen;
    for (uint16_t flow = 0; flow < 32; ++flow) {
        const uint16_t port = outer_source_port(static_cast<uint16_t>(40000 + flow));
        EXPECT_GE(port, 49152) << "IANA dynamic range (RFC 7348 §5)";
        EXPECT_EQ(port, outer_source_port(static_cast<uint16_t>(40000 + flow)))
            << "one flow stays on one underlay path";
        seen.insert(port);
    }
    EXPECT_GE(seen.size(), 24u) << "different flows spread over the underlay's ECMP paths";
}

TEST_F(ToRemoteHost, UnresolvedNeighbourIsACountedDropChargedToTheVnic) {
    EXPECT_EQ(send("198.19.1.2", t1_spec()), nullptr);
    EXPECT_EQ(drops(drop_reason::underlay_neighbor_unresolved), 1u);
    EXPECT_EQ(ctx->counters.vnics[slot_t1].drops.read(), 1u);
    EXPECT_EQ(ctx->counters.encapsulated.read(), 0u);
    // TearDown checks the mbuf went back to the pool.
}

}  // namespace
}  // namespace jakiro::test
