#include "dataplane/control_plane/cluster_records.hh"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>

using namespace jakiro;
using namespace jakiro::control_plane;

namespace {

// A small cluster as the records jakiroctl writes.
cluster_records two_host_cluster() {
    cluster_records records;
    records.reset(10);
    records.put("/jakiro/v1/hosts/h1", "{name: h1, underlay_ip: 198.18.0.1}", 2);
    records.put("/jakiro/v1/hosts/h2", "{name: h2, underlay_ip: 198.18.0.2}", 3);
    records.put("/jakiro/v1/alive/h1", "{name: h1}", 4);
    records.put("/jakiro/v1/vpcs/blue", "{name: blue, vni: 100}", 5);
    records.put("/jakiro/v1/groups/blue/default",
                "{name: default, vpc: blue, ingress: [{proto: any, from_group: default}]}", 6);
    records.put("/jakiro/v1/vnics/t1",
                R"({"name": "t1", "vpc": "blue", "ip": "198.19.1.1/24", "mac": "02:00:c6:13:01:01",
                    "host": "h1", "security_groups": ["default"]})",
                7);
    records.put("/jakiro/v1/vnics/t2",
                "{name: t2, vpc: blue, ip: 198.19.1.2/24, mac: '02:00:c6:13:01:02', host: h2, "
                "security_groups: [default], qos: {rate: 1Gbit}, rdma: {max_qps: 16}}",
                8);
    return records;
}

bool mentions(const std::vector<std::string>& list, const std::string& text) {
    return std::any_of(list.begin(), list.end(),
                       [&](const std::string& s) { return s.find(text) != std::string::npos; });
}

}  // namespace

TEST(ClusterRecords, BuildViewReadsEveryKindOfRecordIncludingJson) {
    const auto view = two_host_cluster().build_view();
    ASSERT_TRUE(view->usable);
    EXPECT_TRUE(view->rejected.empty());
    EXPECT_EQ(view->revision, 10);
    ASSERT_EQ(view->cluster.hosts.size(), 2u);
    ASSERT_EQ(view->cluster.vpcs.size(), 1u);
    ASSERT_EQ(view->cluster.security_groups.size(), 1u);
    ASSERT_EQ(view->cluster.vnics.size(), 2u);
    EXPECT_EQ(view->cluster.vnics[0].host, "h1");
    EXPECT_EQ(view->cluster.vnics[1].rdma.max_qps, 16u);
    EXPECT_TRUE(view->cluster.vnics[1].qos.has_value());
    EXPECT_EQ(view->alive_hosts, std::set<std::string>{"h1"});
}

TEST(ClusterRecords, ARecordThatDoesNotFitIsRefusedAndTheRestStays) {
    auto records = two_host_cluster();
    records.put("/jakiro/v1/vnics/t9",
                "{name: t9, vpc: green, ip: 198.19.1.9/24, mac: '02:00:00:00:00:09', host: h2}", 9);
    records.put("/jakiro/v1/vnics/t8", "{name: other, vpc: blue}", 9);  // name is not its key
    records.put("/jakiro/v1/vnics/t7", "{unclosed", 9);
    const auto view = records.build_view();
    ASSERT_TRUE(view->usable);
    EXPECT_EQ(view->cluster.vnics.size(), 2u);
    EXPECT_TRUE(mentions(view->rejected, "/jakiro/v1/vnics/t9: vnics[*].vpc: unknown VPC"));
    EXPECT_TRUE(mentions(view->rejected, "/jakiro/v1/vnics/t8: name does not match the key"));
    EXPECT_TRUE(mentions(view->rejected, "/jakiro/v1/vnics/t7: not YAML"));
}

TEST(ClusterRecords, ADuplicateAddressLosesOnlyTheSecondClaimant) {
    auto records = two_host_cluster();
    records.put("/jakiro/v1/vnics/t3",
                "{name: t3, vpc: blue, ip: 198.19.1.1/24, mac: '02:00:00:00:00:03', host: h2}", 9);
    const auto view = records.build_view();
    ASSERT_TRUE(view->usable);
    ASSERT_EQ(view->cluster.vnics.size(), 2u);
    EXPECT_TRUE(mentions(view->rejected, "/jakiro/v1/vnics/t3"));
}

TEST(ClusterRecords, EraseAndPutFollowWatchEvents) {
    auto records = two_host_cluster();
    records.erase("/jakiro/v1/vnics/t2");
    records.erase("/jakiro/v1/alive/h1");  // the lease expired
    records.put("/elsewhere/key", "ignored", 11);
    records.set_revision(11);
    const auto view = records.build_view();
    EXPECT_EQ(view->revision, 11);
    EXPECT_EQ(view->cluster.vnics.size(), 1u);
    EXPECT_TRUE(view->alive_hosts.empty());
    EXPECT_EQ(records.records().count("/elsewhere/key"), 0u);
}

TEST(ClusterRecords, AnEmptyStoreIsAnEmptyUsableCluster) {
    cluster_records records;
    records.reset(1);
    const auto view = records.build_view();
    EXPECT_TRUE(view->usable);
    EXPECT_TRUE(view->cluster.vnics.empty());
}

TEST(ClusterRecords, RecordsOfDocumentGiveOneKeyPerEntry) {
    const auto root = YAML::Load(
        "hosts: [{name: h1, underlay_ip: 198.18.0.1}]\n"
        "vpcs: [{name: blue, vni: 100}]\n"
        "security_groups: [{name: default, vpc: blue}]\n"
        "vnics: [{name: t1, vpc: blue, ip: 198.19.1.1/24, mac: '02:00:00:00:00:01', host: h1}]\n");
    const auto records = records_of_document(root);
    std::vector<std::string> keys;
    for (const auto& [key, value] : records) {
        keys.push_back(key);
    }
    EXPECT_EQ(keys,
              (std::vector<std::string>{"/jakiro/v1/groups/blue/default", "/jakiro/v1/hosts/h1",
                                        "/jakiro/v1/vnics/t1", "/jakiro/v1/vpcs/blue"}));
    // Each value reads back as the same entry.
    EXPECT_EQ(YAML::Load(records.at("/jakiro/v1/vpcs/blue"))["vni"].as<int>(), 100);
}

TEST(RecordDiff, CreatesChangesAndDeletesWithTheRevisionsTheyExpect) {
    const std::map<std::string, std::string> desired{
        {"/jakiro/v1/vpcs/blue", "{name: blue, vni: 100}"},  // unchanged
        {"/jakiro/v1/vnics/t1", "{name: t1, host: h2}"},     // changed
        {"/jakiro/v1/vnics/t19", "{name: t19, host: h3}"},   // new
    };
    const std::map<std::string, stored_record> current{
        {"/jakiro/v1/vpcs/blue", {"{name: blue, vni: 100}", 5, "", ""}},
        {"/jakiro/v1/vnics/t1", {"{name: t1, host: h1}", 7, "", ""}},
        {"/jakiro/v1/vnics/t2", {"{name: t2, host: h2}", 8, "", ""}},  // gone from the file
        {"/jakiro/v1/hosts/h1", {"{name: h1}", 2, "", ""}},            // registered: kept
        {"/jakiro/v1/alive/h1", {"{name: h1}", 3, "", ""}},            // lease: kept
    };
    const auto diff = diff_records(desired, current);
    ASSERT_EQ(diff.puts.size(), 2u);
    EXPECT_EQ(diff.puts[0].key, "/jakiro/v1/vnics/t1");
    EXPECT_EQ(diff.puts[0].expected_revision, 7);  // compare-and-swap on what we read
    EXPECT_EQ(diff.puts[1].key, "/jakiro/v1/vnics/t19");
    EXPECT_EQ(diff.puts[1].expected_revision, 0);  // must not exist yet
    ASSERT_EQ(diff.deletes.size(), 1u);
    EXPECT_EQ(diff.deletes[0].key, "/jakiro/v1/vnics/t2");
    EXPECT_EQ(diff.deletes[0].expected_revision, 8);
}

TEST(RecordDiff, IdenticalStateNeedsNoTransaction) {
    const std::map<std::string, std::string> desired{{"/jakiro/v1/vpcs/blue", "{name: blue}"}};
    const std::map<std::string, stored_record> current{
        {"/jakiro/v1/vpcs/blue", {"{name: blue}", 5, "", ""}}};
    EXPECT_TRUE(diff_records(desired, current).empty());
}

TEST(ClusterRecords, AVnicRefusedForAMissingVpcIsTakenOnceTheVpcArrives) {
    auto records = two_host_cluster();
    records.put("/jakiro/v1/vnics/t9",
                "{name: t9, vpc: green, ip: 198.19.1.9/24, mac: '02:00:00:00:00:09', host: h2}", 9);
    EXPECT_EQ(records.build_view()->cluster.vnics.size(), 2u);
    records.put("/jakiro/v1/vpcs/green", "{name: green, vni: 300}", 10);
    const auto view = records.build_view();
    EXPECT_EQ(view->cluster.vnics.size(), 3u);
    EXPECT_TRUE(view->rejected.empty());
}
