#include "dataplane/control/table_patcher.hh"

#include <gtest/gtest.h>
#include <rte_byteorder.h>

#include "dataplane/config/config_loader.hh"
#include "dataplane/control/table_builder.hh"
#include "tests/unit/frames.hh"

namespace jakiro {
namespace {

using test::ip;

// t1's group admits the members of db (remote vNICs); t5's admits everyone, so no peer
// change touches its ACLs.
constexpr const char* host_yaml = R"(host:
  name: h1
  underlay: {port: "net_null0", ip: 198.18.0.1}
vpcs: [{name: blue, vni: 100}]
security_groups:
  - {name: web, vpc: blue, ingress: [{proto: any, from_group: db}]}
  - {name: db, vpc: blue}
  - {name: open, vpc: blue, ingress: [{proto: any, from: 0.0.0.0/0}]}
vnics:
  - {name: t1, vpc: blue, mac: "02:00:c6:13:01:01", ip: 198.19.1.1/24, port: "net_null1", security_groups: [web]}
  - {name: t5, vpc: blue, mac: "02:00:c6:13:01:05", ip: 198.19.1.5/24, port: "net_null2", security_groups: [open]}
peers:
  - {vpc: blue, ip: 198.19.1.2, host: 198.18.0.2, mac: "02:00:c6:13:01:02", security_groups: [db]}
  - {vpc: blue, ip: 198.19.1.9, host: 198.18.0.9, mac: "02:00:c6:13:01:09"}
)";

peer_config peer(const char* address, const char* host, const char* mac,
                 std::vector<std::string> groups = {}) {
    peer_config p;
    p.vpc = "blue";
    p.ip = *parse_ipv4(address);
    p.host = *parse_ipv4(host);
    p.mac = parse_mac(mac);
    p.security_groups = std::move(groups);
    return p;
}

// What apply_peers does to the configuration.
void apply_to(host_config& config, const std::vector<peer_change>& changes) {
    for (const auto& change : changes) {
        if (change.before) {
            std::erase_if(config.peers, [&](const peer_config& p) {
                return p.vpc == change.before->vpc && p.ip == change.before->ip;
            });
        }
    }
    for (const auto& change : changes) {
        if (change.after) {
            config.peers.push_back(*change.after);
        }
    }
}

struct TablePatcherTest : testing::Test {
    overlay::underlay_neighbors neighbors;
    host_config config;
    const std::vector<uint16_t> slots{0, 1};
    std::unique_ptr<datapath_tables> current;
    table_patcher patcher;

    void SetUp() override {
        const auto loaded = load_host_config_text(host_yaml, "h1.yaml");
        ASSERT_TRUE(loaded.ok()) << loaded.errors[0].to_string();
        config = loaded.config;
        port_assignment ports{0, {}, {1, 2}, {}, {}};
        std::string error;
        current = build_tables(config, ports, neighbors, 1, error);
        ASSERT_TRUE(current) << error;
    }

    // Publishes `next` as tables_publisher would: the snapshot it replaces is freed, and its
    // VLT handed back to the patcher.
    void publish(std::unique_ptr<datapath_tables> next) {
        std::shared_ptr<overlay::vlt> previous = current->vlt;
        current = std::move(next);
        patcher.retired(std::move(previous));
    }

    const overlay::vlt_entry* find(const datapath_tables& tables, const char* address) const {
        return tables.vlt->lookup(0, ip(address));
    }

    // Whether t1 (slot 0) admits a TCP connection from `source`.
    bool t1_admits(const datapath_tables& tables, const char* source) const {
        secgroup::acl_key key{};
        key.ip_proto = secgroup::ip_proto_tcp;
        key.remote_ip = ip(source);
        key.dst_port = rte_cpu_to_be_16(80);
        const secgroup::acl_key* keys[] = {&key};
        uint32_t result = 0;
        tables.policies[0].acl[static_cast<int>(secgroup::direction::ingress)]->classify(
            keys, &result, 1);
        return result != secgroup::acl_table::no_match;
    }
};

TEST_F(TablePatcherTest, APatchedSnapshotResolvesAsAFullBuildWould) {
    const std::vector<peer_change> changes{
        {peer("198.19.1.2", "198.18.0.2", "02:00:c6:13:01:02", {"db"}),
         peer("198.19.1.2", "198.18.0.3", "02:00:c6:13:01:22", {"db"})},  // moved host, new MAC
        {std::nullopt, peer("198.19.1.20", "198.18.0.4", "02:00:c6:13:01:20", {"db"})},
        {peer("198.19.1.9", "198.18.0.9", "02:00:c6:13:01:09"), std::nullopt},
    };
    apply_to(config, changes);
    std::string error;
    auto next = patcher.patch(*current, config, changes, slots, neighbors, 2, error);
    ASSERT_TRUE(next) << error;
    port_assignment ports{0, {}, {1, 2}, {}, {}};
    const auto full = build_tables(config, ports, neighbors, 2, error);
    ASSERT_TRUE(full) << error;
    for (const char* address :
         {"198.19.1.1", "198.19.1.5", "198.19.1.2", "198.19.1.20", "198.19.1.9", "198.19.1.77"}) {
        const auto* patched = find(*next, address);
        const auto* built = find(*full, address);
        ASSERT_EQ(patched == nullptr, built == nullptr) << address;
        if (built != nullptr) {
            EXPECT_EQ(patched->kind, built->kind) << address;
            EXPECT_EQ(patched->vnic, built->vnic) << address;
            EXPECT_EQ(patched->host_ip, built->host_ip) << address;
            EXPECT_EQ(patched->neighbor, built->neighbor) << address;
            EXPECT_TRUE(rte_is_same_ether_addr(&patched->inner_mac, &built->inner_mac)) << address;
        }
    }
    EXPECT_EQ(find(*next, "198.19.1.2")->host_ip, ip("198.18.0.3"));
    EXPECT_EQ(find(*next, "198.19.1.9"), nullptr);
    EXPECT_EQ(next->vlt->size(), full->vlt->size());
    EXPECT_EQ(next->policy_generation, 2u);
    EXPECT_EQ(patcher.last().vlt_entries, 4u);  // 1.2 and 1.9 removed, 1.2 and 1.20 added
}

TEST_F(TablePatcherTest, OnlyVnicsWhoseRulesNameAChangedGroupGetNewAcls) {
    EXPECT_FALSE(t1_admits(*current, "198.19.1.20"));
    const std::vector<peer_change> changes{
        {std::nullopt, peer("198.19.1.20", "198.18.0.4", "02:00:c6:13:01:20", {"db"})}};
    apply_to(config, changes);
    std::string error;
    auto next = patcher.patch(*current, config, changes, slots, neighbors, 2, error);
    ASSERT_TRUE(next) << error;
    EXPECT_TRUE(t1_admits(*next, "198.19.1.20")) << "the new member of db reaches t1";
    EXPECT_TRUE(t1_admits(*next, "198.19.1.2")) << "and so does the one it had";
    EXPECT_FALSE(t1_admits(*next, "198.19.1.9"));
    EXPECT_EQ(patcher.last().acl_vnics, 1u);
    EXPECT_NE(next->policies[0].acl[0].get(), current->policies[0].acl[0].get());
    EXPECT_EQ(next->policies[1].acl[0].get(), current->policies[1].acl[0].get())
        << "t5's rules name no changed group: its ACL context is shared, not compiled";
    // A peer in no group a rule names changes no ACL.
    const std::vector<peer_change> plain{
        {std::nullopt, peer("198.19.1.30", "198.18.0.4", "02:00:c6:13:01:30")}};
    apply_to(config, plain);
    publish(std::move(next));
    next = patcher.patch(*current, config, plain, slots, neighbors, 3, error);
    ASSERT_TRUE(next) << error;
    EXPECT_EQ(patcher.last().acl_vnics, 0u);
    EXPECT_EQ(next->policies[0].acl[0].get(), current->policies[0].acl[0].get());
}

TEST_F(TablePatcherTest, ThePublishedTableIsNeverWrittenAndTheTwoTakeTurns) {
    const auto* first_vlt = current->vlt.get();
    const std::vector<peer_change> one{
        {peer("198.19.1.9", "198.18.0.9", "02:00:c6:13:01:09"), std::nullopt}};
    apply_to(config, one);
    std::string error;
    auto next = patcher.patch(*current, config, one, slots, neighbors, 2, error);
    ASSERT_TRUE(next) << error;
    EXPECT_TRUE(patcher.last().copied_vlt) << "the second table is made once, after a build";
    EXPECT_NE(find(*current, "198.19.1.9"), nullptr) << "the snapshot in force is untouched";
    EXPECT_NE(next->vlt.get(), first_vlt);
    const auto* second_vlt = next->vlt.get();
    publish(std::move(next));

    const std::vector<peer_change> two{
        {std::nullopt, peer("198.19.1.40", "198.18.0.4", "02:00:c6:13:01:40")}};
    apply_to(config, two);
    next = patcher.patch(*current, config, two, slots, neighbors, 3, error);
    ASSERT_TRUE(next) << error;
    EXPECT_FALSE(patcher.last().copied_vlt);
    EXPECT_EQ(next->vlt.get(), first_vlt) << "the retired table comes back, brought up to date";
    EXPECT_EQ(find(*next, "198.19.1.9"), nullptr) << "it has the change before this one too";
    EXPECT_NE(find(*next, "198.19.1.40"), nullptr);
    EXPECT_EQ(find(*current, "198.19.1.40"), nullptr);
    publish(std::move(next));

    const std::vector<peer_change> three{
        {peer("198.19.1.40", "198.18.0.4", "02:00:c6:13:01:40"), std::nullopt}};
    apply_to(config, three);
    next = patcher.patch(*current, config, three, slots, neighbors, 4, error);
    ASSERT_TRUE(next) << error;
    EXPECT_EQ(next->vlt.get(), second_vlt);
    EXPECT_EQ(find(*next, "198.19.1.40"), nullptr);
    EXPECT_EQ(find(*next, "198.19.1.9"), nullptr);
    EXPECT_NE(find(*next, "198.19.1.2"), nullptr);
}

TEST_F(TablePatcherTest, AChangeLargerThanTheVltsRoomIsLeftToAFullBuild) {
    std::vector<peer_change> many;
    for (int i = 0; i < 200; ++i) {
        const auto address = "198.19.2." + std::to_string(i);
        many.push_back({std::nullopt, peer(address.c_str(), "198.18.0.4", "02:00:c6:13:02:00")});
    }
    apply_to(config, many);
    std::string error;
    EXPECT_EQ(patcher.patch(*current, config, many, slots, neighbors, 2, error), nullptr);
    EXPECT_FALSE(error.empty());
    EXPECT_EQ(find(*current, "198.19.2.1"), nullptr) << "the snapshot in force is untouched";
    port_assignment ports{0, {}, {1, 2}, {}, {}};
    const auto full = build_tables(config, ports, neighbors, 2, error);
    ASSERT_TRUE(full) << error;
    EXPECT_NE(find(*full, "198.19.2.199"), nullptr);
}

}  // namespace
}  // namespace jakiro
