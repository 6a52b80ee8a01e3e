#include "rnic/verbs/device_model.hh"

#include <gtest/gtest.h>

namespace jakiro::verbs {
namespace {

TEST(DeviceModel, PathMtuIsTheLargestIbMtuThatFitsTheTenantMtu) {
    EXPECT_EQ(path_mtu_for(1450), 1024u) << "underlay 1500";
    EXPECT_EQ(path_mtu_for(8950), 4096u) << "underlay 9000";
    EXPECT_EQ(path_mtu_for(1230), 1024u) << "underlay 1280, the smallest allowed";
    EXPECT_EQ(path_mtu_for(2112), 2048u) << "2048 + 64 bytes of RoCEv2 headers fit exactly";
    EXPECT_EQ(path_mtu_for(2111), 1024u);
    EXPECT_EQ(path_mtu_for(200), 0u);
}

TEST(DeviceModel, NodeGuidIsTheModifiedEui64OfTheMac) {
    EXPECT_EQ(node_guid_from_mac({0x02, 0x00, 0xc6, 0x13, 0x01, 0x01}), 0x0000c6fffe130101ull);
    EXPECT_EQ(node_guid_from_mac({0x00, 0x11, 0x22, 0x33, 0x44, 0x55}), 0x021122fffe334455ull);
}

TEST(DeviceModel, GidIsTheIpv4MappedAddress) {
    const auto gid = ipv4_mapped_gid(0xc6130101);  // 198.19.1.1
    const std::array<uint8_t, 16> want = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 19, 1, 1};
    EXPECT_EQ(gid, want);
}

TEST(DeviceModel, QueryDescribesOneActiveRoceV2Port) {
    const vnic_identity vnic{"t1", {0x02, 0x00, 0xc6, 0x13, 0x01, 0x01}, 0xc6130101};
    verbs_proto::query_reply r{};
    fill_query(r, vnic, 1450);
    EXPECT_EQ(r.device.phys_port_cnt, 1);
    EXPECT_NE(r.device.vendor_id, 0x02c9u) << "not Mellanox: perftest must take generic paths";
    EXPECT_EQ(r.device.lim.atomics, 1u);
    EXPECT_EQ(r.device.lim.max_qp, 1024u);
    EXPECT_EQ(r.port.state, static_cast<uint8_t>(verbs_proto::port_state::active));
    EXPECT_EQ(r.port.active_mtu, 1024u);
    EXPECT_EQ(r.port.max_mtu, 4096u);
    EXPECT_EQ(r.port.gid_tbl_len, 1);
    EXPECT_EQ(r.port.gid0[12], 198);
    EXPECT_EQ(r.port.gid0[15], 1);
}

// A vNIC with an IPv6 address has two RoCE v2 GIDs: its IPv4-mapped address at index 0 (so
// that what worked with index 0 keeps working) and its IPv6 address at index 1, as the hello
// tells the shim (its sysfs gid_attrs and ibv_init_ah_from_wc need it without a query).
TEST(DeviceModel, AVnicWithAnIpv6AddressHasItsIpv6GidAtIndexOne) {
    vnic_identity vnic{"t1", {0x02, 0x00, 0xc6, 0x13, 0x01, 0x01}, 0xc6130101};
    vnic.ip6 = {0x20, 0x01, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1};  // 2001:2::1:1
    verbs_proto::query_reply r{};
    fill_query(r, vnic, 1450);
    EXPECT_EQ(r.port.gid_tbl_len, 2);
    EXPECT_EQ(r.port.gid0[10], 0xff);
    EXPECT_EQ(r.port.gid0[12], 198);
    EXPECT_TRUE(std::equal(vnic.ip6.begin(), vnic.ip6.end(), r.port.gid1));
    EXPECT_EQ(verbs_proto::gid_index_ipv6, 1);
    verbs_proto::hello_reply h{};
    fill_hello(h, vnic, "h1", 1450);
    EXPECT_TRUE(std::equal(vnic.ip6.begin(), vnic.ip6.end(), h.ipv6));
}

TEST(DeviceModel, AVnicWithoutAnIpv6AddressHasOneGid) {
    const vnic_identity vnic{"t1", {0x02, 0x00, 0xc6, 0x13, 0x01, 0x01}, 0xc6130101};
    verbs_proto::query_reply r{};
    fill_query(r, vnic, 1450);
    EXPECT_EQ(r.port.gid_tbl_len, 1);
    const uint8_t zero[16] = {};
    EXPECT_TRUE(std::equal(zero, zero + 16, r.port.gid1));
    verbs_proto::hello_reply h{};
    fill_hello(h, vnic, "h1", 1450);
    EXPECT_TRUE(std::equal(zero, zero + 16, h.ipv6));
}

// ibv_query_device never promises what the vNIC's quota would refuse on an empty vNIC.
TEST(DeviceModel, AdvertisedLimitsAreLoweredToTheVnicsQuota) {
    vnic_quota quota;
    quota.max_qps = 8;
    quota.max_pds = 2;
    quota.max_mrs = 3;
    quota.max_mr_bytes = 1 << 20;
    quota.max_cqs = 4;
    quota.max_cqes = 3000;  // rings are powers of two: one of 2048 fits
    quota.max_srqs = 1;
    quota.max_wqes = 1000;  // a QP of 256 + 256 fits, an SRQ of 512
    const vnic_identity vnic{"t1", {0x02, 0x00, 0xc6, 0x13, 0x01, 0x01}, 0xc6130101};
    verbs_proto::hello_reply h{};
    fill_hello(h, vnic, "h1", 1450);
    clamp_to_quota(h.lim, quota);
    verbs_proto::query_reply q{};
    fill_query(q, vnic, 1450);
    clamp_to_quota(q.device.lim, quota);
    for (const verbs_proto::limits* l : {&h.lim, &q.device.lim}) {
        EXPECT_EQ(l->max_qp, 8u);
        EXPECT_EQ(l->max_pd, 2u);
        EXPECT_EQ(l->max_mr, 3u);
        EXPECT_EQ(l->max_mr_size, 1u << 20);
        EXPECT_EQ(l->max_cq, 4u);
        EXPECT_EQ(l->max_cqe, 2048u);
        EXPECT_EQ(l->max_srq, 1u);
        EXPECT_EQ(l->max_qp_wr, 256u);
        EXPECT_EQ(l->max_srq_wr, 512u);
    }
    // The defaults lower nothing but the counts the engine has more of.
    const vnic_identity plain{"t2", {0x02, 0x00, 0xc6, 0x13, 0x01, 0x02}, 0xc6130102};
    fill_query(q, plain, 1450);
    clamp_to_quota(q.device.lim, vnic_quota{});
    const auto engine = engine_limits();
    EXPECT_EQ(q.device.lim.max_qp_wr, engine.max_qp_wr);
    EXPECT_EQ(q.device.lim.max_cqe, engine.max_cqe);
    EXPECT_EQ(q.device.lim.max_mr_size, engine.max_mr_size);
    EXPECT_EQ(q.device.lim.max_mr, 1024u);
}

TEST(DeviceModel, HelloCarriesIdentityAndPathMtu) {
    const vnic_identity vnic{"t2", {0x02, 0x00, 0xc6, 0x13, 0x01, 0x02}, 0xc6130102};
    verbs_proto::hello_reply r{};
    fill_hello(r, vnic, "h2", 8950);
    EXPECT_STREQ(r.vnic_name, "t2");
    EXPECT_STREQ(r.host_name, "h2");
    EXPECT_EQ(r.ipv4[0], 198);
    EXPECT_EQ(r.ipv4[3], 2);
    EXPECT_EQ(r.mac[5], 2);
    EXPECT_EQ(r.tenant_mtu, 8950u);
    EXPECT_EQ(r.path_mtu, 4096u);
    EXPECT_EQ(mac_text(vnic.mac), "02:00:c6:13:01:02");
}

}  // namespace
}  // namespace jakiro::verbs
