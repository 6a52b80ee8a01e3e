// The security-group check of an RDMA peer (rnic_glue/rdma_admission): an IPv6 peer is judged by
// the `rdma` rules on its IPv6 address alone, as an IPv4 peer is on its IPv4 address, each
// direction on its own, for connections (modify_qp) and datagrams (UD).

#include <cerrno>

#include "dataplane/rnic_glue/rdma_admission.hh"
#include "tests/unit/dataplane/pipeline/pipeline_fixture.hh"

namespace jakiro::test {
namespace {

using secgroup::direction;

// t1 takes RDMA from t2's IPv6 address only, t5 from its IPv4 address only, red t3 from the
// members of its group (red t4, by either address); their egress is the implicit all. narrow6
// (ingress from the /64, egress to 2001:2::1:4 only) is for the test that moves t1 into it.
const char* admission_yaml = R"(host:
  name: h1
  underlay: {port: "net_null0", ip: 198.18.0.1}
vpcs: [{name: blue, vni: 100}, {name: red, vni: 200}]
security_groups:
  - {name: v6, vpc: blue, ingress: [{proto: rdma, from: "2001:2::1:2/128"}]}
  - {name: v4, vpc: blue, ingress: [{proto: rdma, from: 198.19.1.2/32}]}
  - name: narrow6
    vpc: blue
    ingress: [{proto: rdma, from: "2001:2::/64"}]
    egress: [{proto: rdma, to: "2001:2::1:4/128"}]
  - {name: members, vpc: red, ingress: [{proto: rdma, from_group: members}]}
vnics:
  - {name: t1, vpc: blue, mac: "02:00:c6:13:01:01", ip: 198.19.1.1/24, ip6: 2001:2::1:1/64, port: "net_null1", security_groups: [v6]}
  - {name: t5, vpc: blue, mac: "02:00:c6:13:01:03", ip: 198.19.1.3/24, ip6: 2001:2::1:3/64, port: "net_null2", security_groups: [v4]}
  - {name: t3, vpc: red, mac: "02:00:c6:13:02:01", ip: 198.19.1.1/24, ip6: 2001:2::1:1/64, port: "net_null3", security_groups: [members]}
peers:
  - {vpc: blue, ip: 198.19.1.2, ip6: 2001:2::1:2, host: 198.18.0.2}
  - {vpc: blue, ip: 198.19.1.4, ip6: 2001:2::1:4, host: 198.18.0.2}
  - {vpc: red, ip: 198.19.1.2, ip6: 2001:2::1:2, host: 198.18.0.2, security_groups: [members]}
  - {vpc: red, ip: 198.19.1.4, ip6: 2001:2::1:4, host: 198.18.0.2}
)";

struct RdmaAdmission : PipelineTest {
    const char* config_yaml() const override { return admission_yaml; }

    int connect6(uint16_t slot, const char* peer) {
        return admit_rdma_peer_ipv6(*tables, slot, ip6(peer));
    }
    int connect4(uint16_t slot, const char* peer) {
        return admit_rdma_peer(*tables, slot, ip(peer));
    }
};

TEST_F(RdmaAdmission, ARuleForThePeersIpv6AddressAdmitsItsIpv6ConnectionAlone) {
    EXPECT_EQ(connect6(slot_t1, "2001:2::1:2"), 0);
    EXPECT_EQ(connect4(slot_t1, "198.19.1.2"), EACCES) << "no rule names its IPv4 address";
    EXPECT_EQ(connect6(slot_t1, "2001:2::1:4"), EACCES) << "nor another IPv6 peer";
}

TEST_F(RdmaAdmission, ARuleForThePeersIpv4AddressAdmitsNoIpv6Connection) {
    EXPECT_EQ(connect4(slot_t5, "198.19.1.2"), 0) << "the control: IPv4 is admitted";
    EXPECT_EQ(connect6(slot_t5, "2001:2::1:2"), EACCES);
}

TEST_F(RdmaAdmission, ARemoteGroupRuleMatchesItsMembersIpv6Addresses) {
    EXPECT_EQ(connect6(slot_t3, "2001:2::1:2"), 0) << "red t4 is a member";
    EXPECT_EQ(connect4(slot_t3, "198.19.1.2"), 0);
    EXPECT_EQ(connect6(slot_t3, "2001:2::1:4"), EACCES) << "red's .4 is not";
}

TEST_F(RdmaAdmission, BothDirectionsMustAdmitAnIpv6Peer) {
    // t1 in narrow6 instead: ingress from the whole /64, egress to 2001:2::1:4 only.
    auto loaded = load_host_config_text(admission_yaml, "h1.yaml");
    ASSERT_TRUE(loaded.ok());
    loaded.config.vnics[0].security_groups = {"narrow6"};
    std::string error;
    tables = build_tables(loaded.config, {uplink, h1_mac, {port_t1, port_t5, port_t3}, {}},
                          neighbors, 2, error);
    ASSERT_TRUE(tables) << error;
    EXPECT_EQ(connect6(slot_t1, "2001:2::1:4"), 0);
    EXPECT_EQ(connect6(slot_t1, "2001:2::1:2"), EACCES) << "its egress names only ::1:4";
}

TEST_F(RdmaAdmission, AnIpv6PeerOutsideTheVpcOrAVnicWithoutIpv6IsUnreachable) {
    EXPECT_EQ(connect6(slot_t1, "2001:2::1:77"), ENETUNREACH);
    EXPECT_EQ(connect6(slot_t1, "2001:2::1:1"), 0) << "loopback between two QPs of one vNIC";
    auto loaded = load_host_config_text(admission_yaml, "h1.yaml");
    ASSERT_TRUE(loaded.ok());
    loaded.config.vnics[0].ip6.reset();
    std::string error;
    tables = build_tables(loaded.config, {uplink, h1_mac, {port_t1, port_t5, port_t3}, {}},
                          neighbors, 2, error);
    ASSERT_TRUE(tables) << error;
    EXPECT_EQ(connect6(slot_t1, "2001:2::1:2"), ENETUNREACH) << "no IPv6 address to talk from";
}

TEST_F(RdmaAdmission, AnIpv6DatagramIsJudgedByTheRulesOfItsDirection) {
    EXPECT_TRUE(admit_rdma_datagram_ipv6(*tables, slot_t1, ip6("2001:2::1:2"), direction::ingress));
    EXPECT_FALSE(
        admit_rdma_datagram_ipv6(*tables, slot_t1, ip6("2001:2::1:4"), direction::ingress));
    EXPECT_TRUE(admit_rdma_datagram_ipv6(*tables, slot_t1, ip6("2001:2::1:4"), direction::egress))
        << "the implicit all-egress covers IPv6";
    EXPECT_FALSE(
        admit_rdma_datagram_ipv6(*tables, slot_t5, ip6("2001:2::1:2"), direction::ingress));
    EXPECT_TRUE(admit_rdma_datagram(*tables, slot_t5, ip("198.19.1.2"), direction::ingress));
}

}  // namespace
}  // namespace jakiro::test
