#include "secgroup/compiler.hh"

#include <gtest/gtest.h>

#include <random>

namespace jakiro::secgroup {
namespace {

// Classifies one packet as the ACL does; returns the matched rule id, or -1.
int64_t classify(const acl_table& table, const packet_view& p) {
    acl_key key{};
    key.ip_proto = p.ip_proto;
    key.remote_ip = rte_cpu_to_be_32(p.remote_ip);
    key.dst_port = rte_cpu_to_be_16(p.dst_port);
    key.src_port = rte_cpu_to_be_16(40000);
    const acl_key* keys[] = {&key};
    uint32_t result = 0;
    table.classify(keys, &result, 1);
    return result == acl_table::no_match ? -1 : int64_t{result} - 1;
}

std::unique_ptr<acl_table> compile(const std::vector<group>& groups,
                                   std::vector<std::size_t> vnic_groups, direction dir,
                                   const membership& members) {
    const rule_catalog catalog(groups);
    const auto flat = expand_rules(groups, vnic_groups, dir, members, catalog);
    std::string error;
    auto table = acl_table::build(flat, error);
    EXPECT_TRUE(table) << error;
    return table;
}

rule cidr_rule(protocol proto, uint32_t ip, uint8_t len, port_range ports = {}) {
    rule r;
    r.proto = proto;
    r.remote = cidr{ip, len};
    r.ports = ports;
    return r;
}

TEST(SecgroupCompiler, EmptyRuleSetDeniesEverything) {
    const std::vector<group> groups = {{"g", "blue", {}, {}}};
    auto table = compile(groups, {0}, direction::ingress, {});
    EXPECT_EQ(classify(*table, {ip_proto_tcp, 0xc6130101, 80}), -1);
}

TEST(SecgroupCompiler, TcpPortRangeAndCidr) {
    const std::vector<group> groups = {
        {"web", "blue", {cidr_rule(protocol::tcp, 0xc6130000, 16, {8080, 8090})}, {}}};
    auto table = compile(groups, {0}, direction::ingress, {});
    EXPECT_EQ(classify(*table, {ip_proto_tcp, 0xc6130202, 8080}), 0);
    EXPECT_EQ(classify(*table, {ip_proto_tcp, 0xc6130202, 8090}), 0);
    EXPECT_EQ(classify(*table, {ip_proto_tcp, 0xc6130202, 8091}), -1) << "port outside range";
    EXPECT_EQ(classify(*table, {ip_proto_udp, 0xc6130202, 8080}), -1) << "wrong protocol";
    EXPECT_EQ(classify(*table, {ip_proto_tcp, 0xc6140202, 8080}), -1) << "outside the CIDR";
}

TEST(SecgroupCompiler, RdmaRuleMeansRoceV2Only) {
    const std::vector<group> groups = {{"g", "blue", {cidr_rule(protocol::rdma, 0, 0)}, {}}};
    auto table = compile(groups, {0}, direction::ingress, {});
    EXPECT_EQ(classify(*table, {ip_proto_udp, 1, rocev2_udp_port}), 0);
    EXPECT_EQ(classify(*table, {ip_proto_udp, 1, 4789}), -1);
    EXPECT_EQ(classify(*table, {ip_proto_tcp, 1, rocev2_udp_port}), -1);
}

TEST(SecgroupCompiler, RemoteGroupRuleFollowsMembership) {
    rule from_web;
    from_web.proto = protocol::any;
    from_web.remote_group = "web";
    from_web.remote_group_index = 0;
    const std::vector<group> groups = {{"web", "blue", {from_web}, {}}};
    membership members{{{0xc6130101, 0xc6130102}}};
    auto table = compile(groups, {0}, direction::ingress, members);
    EXPECT_EQ(classify(*table, {ip_proto_icmp, 0xc6130102, 0}), 0);
    EXPECT_EQ(classify(*table, {ip_proto_icmp, 0xc6130103, 0}), -1);
    members.of_group[0].push_back(0xc6130103);  // a vNIC joins the group
    table = compile(groups, {0}, direction::ingress, members);
    EXPECT_EQ(classify(*table, {ip_proto_icmp, 0xc6130103, 0}), 0);
}

TEST(SecgroupCompiler, FirstMatchingRuleGetsTheHit) {
    const std::vector<group> groups = {
        {"g",
         "blue",
         {cidr_rule(protocol::tcp, 0xc6130000, 16, {80, 80}), cidr_rule(protocol::any, 0, 0)},
         {}}};
    auto table = compile(groups, {0}, direction::ingress, {});
    EXPECT_EQ(classify(*table, {ip_proto_tcp, 0xc6130101, 80}), 0);
    EXPECT_EQ(classify(*table, {ip_proto_tcp, 0xc6130101, 81}), 1);
}

TEST(SecgroupCompiler, CatalogLocatesEveryRule) {
    const std::vector<group> groups = {
        {"a", "blue", {rule{}, rule{}}, {rule{}}},
        {"b", "blue", {}, {rule{}, rule{}}},
    };
    const rule_catalog catalog(groups);
    EXPECT_EQ(catalog.size(), 5u);
    for (std::size_t g = 0; g < groups.size(); ++g) {
        for (auto dir : {direction::ingress, direction::egress}) {
            const auto& rules = dir == direction::ingress ? groups[g].ingress : groups[g].egress;
            for (std::size_t r = 0; r < rules.size(); ++r) {
                const auto where = catalog.locate(catalog.id(g, dir, r));
                EXPECT_EQ(where.group_index, g);
                EXPECT_EQ(where.dir, dir);
                EXPECT_EQ(where.rule_index, r);
            }
        }
    }
}

// An id names the same rule after a new policy only where nothing before it moved and the rule
// itself is the one written there before.
TEST(SecgroupCompiler, ARuleIdIsKeptOnlyWhileItNamesTheSameRule) {
    rule web;
    web.proto = protocol::tcp;
    web.ports = {80, 80};
    web.line = 5;
    rule dns = web;
    dns.ports = {53, 53};
    dns.line = 6;
    const std::vector<group> before = {{"a", "blue", {web}, {dns}}};
    EXPECT_EQ(rule_ids_kept(before, before), (std::vector<bool>{true, true}));
    // A rule added in front moves both.
    rule ssh = web;
    ssh.ports = {22, 22};
    EXPECT_EQ(rule_ids_kept(before, {{"a", "blue", {ssh, web}, {dns}}}),
              (std::vector<bool>{false, false, false}));
    // Another port, another line, another group or VPC: another rule.
    rule moved = web;
    moved.line = 7;
    EXPECT_EQ(rule_ids_kept(before, {{"a", "blue", {moved}, {dns}}}),
              (std::vector<bool>{false, true}));
    EXPECT_EQ(rule_ids_kept(before, {{"b", "blue", {web}, {dns}}}),
              (std::vector<bool>{false, false}));
    EXPECT_EQ(rule_ids_kept(before, {{"a", "red", {web}, {dns}}}),
              (std::vector<bool>{false, false}));
    // An ingress rule removed: the egress rule takes its id, and is not the rule it named.
    EXPECT_EQ(rule_ids_kept(before, {{"a", "blue", {}, {dns}}}), (std::vector<bool>{false}));
    EXPECT_TRUE(rule_ids_kept({}, before) == (std::vector<bool>{false, false}));
}

// Property: for random groups, memberships and packets, the compiled ACL allows exactly what
// the reference semantics (rule_allows over every rule of the vNIC's groups) allows, and
// credits the first such rule.
TEST(SecgroupCompiler, MatchesTheReferenceEvaluatorOnRandomRulesAndPackets) {
    std::mt19937 rng(20261130);
    auto pick = [&](uint32_t n) { return std::uniform_int_distribution<uint32_t>(0, n - 1)(rng); };
    // Addresses and ports from small pools so random packets hit rules often.
    const uint32_t base = 0xc6130000;
    auto random_ip = [&] { return base + (pick(4) << 8) + pick(8); };
    auto random_port = [&] { return static_cast<uint16_t>(pick(3) == 0 ? 4791 : 1000 + pick(40)); };
    const uint8_t protos[] = {ip_proto_tcp, ip_proto_udp, ip_proto_icmp, 47};
    int cases = 0, allowed = 0;
    for (int round = 0; round < 60; ++round) {
        std::vector<group> groups(1 + pick(3));
        membership members;
        members.of_group.resize(groups.size());
        for (std::size_t g = 0; g < groups.size(); ++g) {
            groups[g].name = "g" + std::to_string(g);
            for (uint32_t m = pick(4); m > 0; --m) {
                members.of_group[g].push_back(random_ip());
            }
            for (auto* list : {&groups[g].ingress, &groups[g].egress}) {
                for (uint32_t r = pick(6); r > 0; --r) {
                    rule x;
                    x.proto = static_cast<protocol>(pick(5));
                    if (x.proto == protocol::tcp || x.proto == protocol::udp) {
                        const uint16_t low = random_port();
                        x.ports = {low, static_cast<uint16_t>(low + pick(10))};
                    }
                    if (pick(3) == 0) {
                        x.remote_group_index = static_cast<int>(pick(groups.size()));
                        x.remote_group = "g" + std::to_string(x.remote_group_index);
                    } else {
                        const uint8_t len = static_cast<uint8_t>(pick(4) * 8 + pick(2) * 3);
                        x.remote = cidr{random_ip(), len};
                    }
                    list->push_back(x);
                }
            }
        }
        std::vector<std::size_t> vnic_groups;
        for (std::size_t g = 0; g < groups.size(); ++g) {
            if (pick(2) == 0 || vnic_groups.empty()) {
                vnic_groups.push_back(g);
            }
        }
        const rule_catalog catalog(groups);
        for (auto dir : {direction::ingress, direction::egress}) {
            auto table = compile(groups, vnic_groups, dir, members);
            for (int p = 0; p < 100; ++p) {
                packet_view packet{protos[pick(4)], random_ip(), 0};
                if (packet.ip_proto == ip_proto_tcp || packet.ip_proto == ip_proto_udp) {
                    packet.dst_port = random_port();
                }
                int64_t expected = -1;
                for (const std::size_t g : vnic_groups) {
                    const auto& rules =
                        dir == direction::ingress ? groups[g].ingress : groups[g].egress;
                    for (std::size_t r = 0; r < rules.size() && expected < 0; ++r) {
                        if (rule_allows(rules[r], packet, members)) {
                            expected = catalog.id(g, dir, r);
                        }
                    }
                    if (expected >= 0) {
                        break;
                    }
                }
                const int64_t got = classify(*table, packet);
                ASSERT_EQ(got >= 0, expected >= 0)
                    << "round " << round << " proto " << int(packet.ip_proto) << " ip " << std::hex
                    << packet.remote_ip << std::dec << " port " << packet.dst_port;
                if (expected >= 0) {
                    EXPECT_EQ(got, expected) << "the first allowing rule is credited";
                    ++allowed;
                }
                ++cases;
            }
        }
    }
    EXPECT_EQ(cases, 12000);
    EXPECT_GT(allowed, 1000) << "the random pools must exercise matches, not only misses";
}

}  // namespace
}  // namespace jakiro::secgroup
