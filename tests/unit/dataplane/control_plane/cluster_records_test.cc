#include "dataplane/control_plane/cluster_records.hh"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>

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
    records.put("/jakiro/v1/vnics/blue/t1",
                R"({"name": "t1", "vpc": "blue", "ip": "198.19.1.1/24", "mac": "02:00:c6:13:01:01",
                    "host": "h1", "security_groups": ["default"]})",
                7);
    records.put("/jakiro/v1/vnics/blue/t2",
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
    ASSERT_EQ(view->hosts->underlay.size(), 2u);
    EXPECT_EQ(view->hosts->underlay.at("h2"), 0xc6120002u);
    ASSERT_EQ(view->cluster.vpcs.size(), 1u);
    ASSERT_EQ(view->cluster.security_groups.size(), 1u);
    ASSERT_EQ(view->cluster.vnics.size(), 2u);
    EXPECT_EQ(view->cluster.vnics[0].host, "h1");
    EXPECT_EQ(view->cluster.vnics[1].rdma.max_qps, 16u);
    EXPECT_TRUE(view->cluster.vnics[1].qos.has_value());
    EXPECT_EQ(view->hosts->alive, std::unordered_set<std::string>{"h1"});
    EXPECT_EQ(view->hosts->stale, std::vector<std::string>{"h2"});
}

TEST(ClusterRecords, ARecordThatDoesNotFitIsRefusedAndTheRestStays) {
    auto records = two_host_cluster();
    records.put("/jakiro/v1/vnics/green/t9",
                "{name: t9, vpc: green, ip: 198.19.1.9/24, mac: '02:00:00:00:00:09', host: h2}", 9);
    records.put("/jakiro/v1/vnics/blue/t8",  // name is not its key
                "{name: other, vpc: blue, ip: 198.19.1.8/24, mac: '02:00:00:00:00:08', host: h2}",
                9);
    records.put("/jakiro/v1/vnics/blue/t7", "{unclosed", 9);
    const auto view = records.build_view();
    ASSERT_TRUE(view->usable);
    EXPECT_EQ(view->cluster.vnics.size(), 2u);
    EXPECT_TRUE(mentions(view->rejected, "/jakiro/v1/vnics/green/t9: vnics[*].vpc: unknown VPC"));
    EXPECT_TRUE(mentions(view->rejected, "/jakiro/v1/vnics/blue/t8: name does not match the key"));
    EXPECT_TRUE(mentions(view->rejected, "/jakiro/v1/vnics/blue/t7: not YAML"));
}

TEST(ClusterRecords, ADuplicateAddressLosesOnlyTheSecondClaimant) {
    auto records = two_host_cluster();
    records.put("/jakiro/v1/vnics/blue/t3",
                "{name: t3, vpc: blue, ip: 198.19.1.1/24, mac: '02:00:00:00:00:03', host: h2}", 9);
    const auto view = records.build_view();
    ASSERT_TRUE(view->usable);
    ASSERT_EQ(view->cluster.vnics.size(), 2u);
    EXPECT_TRUE(mentions(view->rejected, "/jakiro/v1/vnics/blue/t3"));
}

TEST(ClusterRecords, ADuplicateIpv6AddressLosesOnlyTheSecondClaimant) {
    auto records = two_host_cluster();
    records.put("/jakiro/v1/vnics/blue/t3",
                "{name: t3, vpc: blue, ip: 198.19.1.3/24, ip6: 2001:2::1:3/64, "
                "mac: '02:00:00:00:00:03', host: h2}",
                9);
    records.put("/jakiro/v1/vnics/blue/t4",
                "{name: t4, vpc: blue, ip: 198.19.1.4/24, ip6: 2001:2::1:3/64, "
                "mac: '02:00:00:00:00:04', host: h2}",
                9);
    const auto view = records.build_view();
    ASSERT_TRUE(view->usable);
    ASSERT_EQ(view->cluster.vnics.size(), 3u);
    const auto& t3 = view->cluster.vnics[2];
    EXPECT_EQ(t3.name, "t3");
    ASSERT_TRUE(t3.ip6);
    EXPECT_EQ(format_ipv6(t3.ip6->address), "2001:2::1:3");
    EXPECT_EQ(t3.ip6->length, 64);
    EXPECT_TRUE(mentions(view->rejected,
                         "/jakiro/v1/vnics/blue/t4: vnics[*].ip6: address "
                         "2001:2::1:3 already used in VPC 'blue'"));
}

TEST(ClusterRecords, EraseAndPutFollowWatchEvents) {
    auto records = two_host_cluster();
    records.erase("/jakiro/v1/vnics/blue/t2");
    records.erase("/jakiro/v1/alive/h1");  // the lease expired
    records.put("/elsewhere/key", "ignored", 11);
    records.set_revision(11);
    const auto view = records.build_view();
    EXPECT_EQ(view->revision, 11);
    EXPECT_EQ(view->cluster.vnics.size(), 1u);
    EXPECT_TRUE(view->hosts->alive.empty());
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
    EXPECT_EQ(keys, (std::vector<std::string>{"/jakiro/v1/groups/blue/default",
                                              "/jakiro/v1/homes/h1/blue/t1", "/jakiro/v1/hosts/h1",
                                              "/jakiro/v1/vnics/blue/t1", "/jakiro/v1/vpcs/blue"}));
    // Each value reads back as the same entry.
    EXPECT_EQ(YAML::Load(records.at("/jakiro/v1/vpcs/blue"))["vni"].as<int>(), 100);
}

TEST(ClusterRecords, AGroupWithIpv6CidrsKeepsThemFromTheDocumentThroughItsRecord) {
    // As jakiroctl apply writes the entry and a host reads it back.
    const auto root = YAML::Load(
        "security_groups: [{name: v6, vpc: blue, ingress: [{proto: tcp, ports: 8080, from: "
        "2001:2::/64}], egress: [{proto: any, to: '::/0'}]}]\n");
    const auto written = records_of_document(root);
    auto records = two_host_cluster();
    records.put("/jakiro/v1/groups/blue/v6", written.at("/jakiro/v1/groups/blue/v6"), 9);
    const auto view = records.build_view();
    ASSERT_TRUE(view->rejected.empty()) << view->rejected[0];
    const auto& groups = view->cluster.security_groups;
    const auto v6 = std::find_if(groups.begin(), groups.end(),
                                 [](const secgroup::group& g) { return g.name == "v6"; });
    ASSERT_NE(v6, groups.end());
    ASSERT_TRUE(v6->ingress.at(0).remote6);
    EXPECT_EQ(format_ipv6(v6->ingress[0].remote6->address), "2001:2::");
    EXPECT_EQ(v6->ingress[0].remote6->length, 64);
    ASSERT_TRUE(v6->egress.at(0).remote6);
    EXPECT_EQ(v6->egress[0].remote6->length, 0);
    EXPECT_FALSE(v6->egress[0].remote) << "::/0 names no IPv4 peer";
}

TEST(RecordDiff, CreatesChangesAndDeletesWithTheRevisionsTheyExpect) {
    const std::map<std::string, std::string> desired{
        {"/jakiro/v1/vpcs/blue", "{name: blue, vni: 100}"},      // unchanged
        {"/jakiro/v1/vnics/blue/t1", "{name: t1, host: h2}"},    // changed
        {"/jakiro/v1/vnics/blue/t19", "{name: t19, host: h3}"},  // new
    };
    const std::map<std::string, stored_record> current{
        {"/jakiro/v1/vpcs/blue", {"{name: blue, vni: 100}", 5, "", ""}},
        {"/jakiro/v1/vnics/blue/t1", {"{name: t1, host: h1}", 7, "", ""}},
        {"/jakiro/v1/vnics/blue/t2", {"{name: t2, host: h2}", 8, "", ""}},  // gone from the file
        {"/jakiro/v1/hosts/h1", {"{name: h1}", 2, "", ""}},                 // registered: kept
        {"/jakiro/v1/alive/h1", {"{name: h1}", 3, "", ""}},                 // lease: kept
    };
    const auto diff = diff_records(desired, current);
    ASSERT_EQ(diff.puts.size(), 2u);
    EXPECT_EQ(diff.puts[0].key, "/jakiro/v1/vnics/blue/t1");
    EXPECT_EQ(diff.puts[0].expected_revision, 7);  // compare-and-swap on what we read
    EXPECT_EQ(diff.puts[1].key, "/jakiro/v1/vnics/blue/t19");
    EXPECT_EQ(diff.puts[1].expected_revision, 0);  // must not exist yet
    ASSERT_EQ(diff.deletes.size(), 1u);
    EXPECT_EQ(diff.deletes[0].key, "/jakiro/v1/vnics/blue/t2");
    EXPECT_EQ(diff.deletes[0].expected_revision, 8);
}

constexpr const char* h2_key = "u9Sx0M7t1H5AdWJvVQ0uAbO4Q3XzX0eCq4wWS3yrO3g=";

TEST(ClusterRecords, AHostRecordsOverlayKeyReachesTheHostDirectory) {
    auto records = two_host_cluster();
    records.put("/jakiro/v1/hosts/h2",
                std::string("{name: h2, underlay_ip: 198.18.0.2, overlay_key: \"") + h2_key + "\"}",
                11);
    const auto view = records.build_view();
    ASSERT_TRUE(view->usable);
    EXPECT_TRUE(view->rejected.empty());
    EXPECT_EQ(view->hosts->overlay_keys,
              (std::unordered_map<std::string, std::string>{{"h2", h2_key}}));
    // A lease coming keeps the keys (the directory is copied with the addresses).
    records.put("/jakiro/v1/alive/h2", "{name: h2}", 12);
    EXPECT_EQ(records.build_view()->hosts->overlay_keys.count("h2"), 1u);
}

TEST(ClusterRecords, AHostRecordWithAKeyThatIsNotOneIsRefused) {
    auto records = two_host_cluster();
    records.put("/jakiro/v1/hosts/h2", "{name: h2, underlay_ip: 198.18.0.2, overlay_key: abc}", 11);
    const auto view = records.build_view();
    EXPECT_TRUE(mentions(view->rejected, "overlay_key"));
    EXPECT_EQ(view->hosts->overlay_keys.count("h2"), 0u);
}

TEST(RecordDiff, AFileWithoutAHostsKeyLeavesTheRegisteredKeyInPlace) {
    const std::string registered =
        std::string("{name: h2, underlay_ip: 198.18.0.2, overlay_key: \"") + h2_key + "\"}";
    const std::map<std::string, stored_record> current{
        {"/jakiro/v1/hosts/h2", {registered, 5, "", ""}}};
    EXPECT_TRUE(
        diff_records({{"/jakiro/v1/hosts/h2", "{name: h2, underlay_ip: 198.18.0.2}"}}, current)
            .empty());
    // A new address is written (and the host registers its key again when it restarts there).
    EXPECT_EQ(
        diff_records({{"/jakiro/v1/hosts/h2", "{name: h2, underlay_ip: 198.18.0.9}"}}, current)
            .puts.size(),
        1u);
}

TEST(RecordDiff, IdenticalStateNeedsNoTransaction) {
    const std::map<std::string, std::string> desired{{"/jakiro/v1/vpcs/blue", "{name: blue}"}};
    const std::map<std::string, stored_record> current{
        {"/jakiro/v1/vpcs/blue", {"{name: blue}", 5, "", ""}}};
    EXPECT_TRUE(diff_records(desired, current).empty());
}

TEST(ClusterRecords, AVnicRefusedForAMissingVpcIsTakenOnceTheVpcArrives) {
    auto records = two_host_cluster();
    records.put("/jakiro/v1/vnics/green/t9",
                "{name: t9, vpc: green, ip: 198.19.1.9/24, mac: '02:00:00:00:00:09', host: h2}", 9);
    EXPECT_EQ(records.build_view()->cluster.vnics.size(), 2u);
    records.put("/jakiro/v1/vpcs/green", "{name: green, vni: 300}", 10);
    const auto view = records.build_view();
    EXPECT_EQ(view->cluster.vnics.size(), 3u);
    EXPECT_TRUE(view->rejected.empty());
}

namespace {

// Host h1 serves blue (t1 is there); green lives on h2 only.
cluster_records h1_following(const cluster_records& all) {
    cluster_records mine;
    mine.follow_only("h1");
    mine.reset(all.revision());
    // As jakirod reads: its index first, which says what else it keeps.
    for (const bool index : {true, false}) {
        for (const auto& [key, record] : all.records()) {
            if ((key.rfind("/jakiro/v1/homes/", 0) == 0) == index) {
                mine.put(key, record.value, record.mod_revision);
            }
        }
    }
    mine.take_pulled();
    return mine;
}

cluster_records two_vpc_cluster() {
    cluster_records records;
    records.reset(20);
    const std::map<std::string, std::string> document = records_of_document(YAML::Load(
        "hosts: [{name: h1, underlay_ip: 198.18.0.1}, {name: h2, underlay_ip: 198.18.0.2}]\n"
        "vpcs: [{name: blue, vni: 100}, {name: green, vni: 200}]\n"
        "security_groups: [{name: default, vpc: blue, ingress: [{proto: any, from_group: db}]},\n"
        "  {name: db, vpc: blue}, {name: default, vpc: green}]\n"
        "vnics: [{name: t1, vpc: blue, ip: 198.19.1.1/24, mac: '02:00:00:00:00:01', host: h1,\n"
        "         security_groups: [default]},\n"
        "  {name: d1, vpc: blue, ip: 198.19.1.2/24, mac: '02:00:00:00:00:02', host: h2,\n"
        "   security_groups: [db]},\n"
        "  {name: g1, vpc: green, ip: 198.19.1.1/24, mac: '02:00:00:00:00:03', host: h2}]\n"));
    for (const auto& [key, value] : document) {
        records.put(key, value, 11);
    }
    return records;
}

std::vector<std::string> vnic_names(const cluster_view& view) {
    std::vector<std::string> out;
    for (const auto& v : view.cluster.vnics) {
        out.push_back(v.name);
    }
    return out;
}

}  // namespace

TEST(ClusterInterest, AHostKeepsOnlyTheVpcsItsOwnVnicsAreIn) {
    auto mine = h1_following(two_vpc_cluster());
    EXPECT_EQ(mine.served_vpcs(), (std::set<std::string>{"blue"}));
    const auto view = mine.build_view();
    EXPECT_EQ(vnic_names(*view), (std::vector<std::string>{"d1", "t1"}));
    ASSERT_EQ(view->cluster.vpcs.size(), 1u);
    EXPECT_EQ(view->cluster.vpcs[0].name, "blue");
    for (const auto& [key, record] : mine.records()) {
        EXPECT_EQ(key.find("green"), std::string::npos) << key;
    }
}

TEST(ClusterInterest, ARecordOfAnotherVpcIsDroppedByItsKey) {
    auto mine = h1_following(two_vpc_cluster());
    const auto before = mine.records().size();
    EXPECT_FALSE(mine.put("/jakiro/v1/vnics/green/g2", "{not even yaml", 30));
    EXPECT_FALSE(mine.put("/jakiro/v1/groups/green/web", "{name: web, vpc: green}", 30));
    EXPECT_FALSE(mine.put("/jakiro/v1/homes/h2/green/g2", "{name: g2}", 30));
    EXPECT_FALSE(mine.erase("/jakiro/v1/vnics/green/g1"));
    EXPECT_EQ(mine.records().size(), before);
    EXPECT_TRUE(mine.take_pulled().empty());
}

TEST(ClusterInterest, TheFirstLocalVnicOfAVpcPullsItInAndTheLastDropsIt) {
    auto mine = h1_following(two_vpc_cluster());
    EXPECT_TRUE(mine.put("/jakiro/v1/homes/h1/green/g9", "{name: g9}", 31));
    EXPECT_EQ(mine.take_pulled(), (std::vector<std::string>{"green"}));
    // The caller reads green at that revision: its records are now kept.
    EXPECT_TRUE(mine.put("/jakiro/v1/vpcs/green", "{name: green, vni: 200}", 31));
    EXPECT_TRUE(mine.put("/jakiro/v1/vnics/green/g1",
                         "{name: g1, vpc: green, ip: 198.19.1.1/24, mac: '02:00:00:00:00:03', "
                         "host: h2}",
                         31));
    // A second local vNIC of green pulls nothing more.
    EXPECT_TRUE(mine.put("/jakiro/v1/homes/h1/green/g8", "{name: g8}", 32));
    EXPECT_TRUE(mine.take_pulled().empty());
    EXPECT_EQ(vnic_names(*mine.build_view()), (std::vector<std::string>{"d1", "t1", "g1"}));
    mine.erase("/jakiro/v1/homes/h1/green/g9");
    EXPECT_TRUE(mine.serves("green"));
    mine.erase("/jakiro/v1/homes/h1/green/g8");
    EXPECT_FALSE(mine.serves("green"));
    EXPECT_EQ(mine.take_dropped(), (std::vector<std::string>{"green"}));
    EXPECT_EQ(vnic_names(*mine.build_view()), (std::vector<std::string>{"d1", "t1"}));
    for (const auto& [key, record] : mine.records()) {
        EXPECT_EQ(key.find("green"), std::string::npos) << key;
    }
}

TEST(ClusterInterest, ARemoteGroupsMembersOnOtherHostsAreFollowed) {
    // t1's group admits group db, whose only member d1 lives on h2: h1 holds d1 as db's member.
    const auto view = h1_following(two_vpc_cluster()).build_view();
    const auto* d1 = [&]() -> const vnic_config* {
        for (const auto& v : view->cluster.vnics) {
            if (v.name == "d1") {
                return &v;
            }
        }
        return nullptr;
    }();
    ASSERT_NE(d1, nullptr);
    EXPECT_EQ(d1->security_groups, (std::vector<std::string>{"db"}));
    EXPECT_NE(view->cluster.find_group("blue", "db"), nullptr);
}

TEST(ClusterInterest, AVnicIsCheckedAgainOnlyWhenItOrItsVpcChanges) {
    auto all = two_vpc_cluster();
    EXPECT_EQ(all.build_view()->vnics_checked, 3u);
    EXPECT_EQ(all.build_view()->vnics_checked, 0u);  // nothing changed
    // A host registering (its address) changes no vNIC.
    all.put("/jakiro/v1/hosts/h3", "{name: h3, underlay_ip: 198.18.0.3}", 40);
    EXPECT_EQ(all.build_view()->vnics_checked, 0u);
    // One vNIC's record: that vNIC alone.
    all.put("/jakiro/v1/vnics/blue/t1",
            "{name: t1, vpc: blue, ip: 198.19.1.1/24, mac: '02:00:00:00:00:01', host: h1, "
            "security_groups: [default], qos: {rate: 1Gbit}}",
            41);
    EXPECT_EQ(all.build_view()->vnics_checked, 1u);
    // A group of green: green's vNICs, not blue's.
    all.put("/jakiro/v1/groups/green/web", "{name: web, vpc: green}", 42);
    const auto view = all.build_view();
    EXPECT_EQ(view->vnics_checked, 1u);
    EXPECT_EQ(view->cluster.vnics.size(), 3u);
}

TEST(ClusterInterest, ALegacyVnicKeyIsReadByJakiroctlButNotFollowedByAHost) {
    auto all = two_host_cluster();
    all.put("/jakiro/v1/vnics/t5",
            "{name: t5, vpc: blue, ip: 198.19.1.5/24, mac: '02:00:c6:13:01:05', host: h2}", 12);
    EXPECT_EQ(all.build_view()->cluster.vnics.size(), 3u);
    cluster_records mine;
    mine.follow_only("h1");
    mine.reset(12);
    mine.put("/jakiro/v1/homes/h1/blue/t1", "{name: t1}", 12);
    EXPECT_FALSE(mine.put("/jakiro/v1/vnics/t5", "{name: t5, vpc: blue}", 12));
}

TEST(ClusterInterest, AVnicWhoseValueNamesAnotherVpcThanItsKeyIsRefused) {
    auto all = two_host_cluster();
    all.put("/jakiro/v1/vpcs/red", "{name: red, vni: 200}", 12);
    all.put("/jakiro/v1/vnics/blue/t6",
            "{name: t6, vpc: red, ip: 198.19.1.6/24, mac: '02:00:c6:13:01:06', host: h2}", 12);
    EXPECT_TRUE(mentions(all.build_view()->rejected,
                         "/jakiro/v1/vnics/blue/t6: vpc does not match the key"));
}

namespace {

// A host reading a cluster that has no schema marker yet: its vNICs only under legacy keys.
cluster_records h1_following_legacy_keys() {
    cluster_records mine;
    mine.follow_only("h1");
    mine.reset(50);
    mine.follow_legacy(true);
    // As the full read brings them: every legacy key, then each VPC of this host's.
    mine.put("/jakiro/v1/vnics/g1",
             "{name: g1, vpc: green, ip: 198.19.3.1/24, mac: '02:00:00:00:03:01', host: h2}", 41);
    mine.put("/jakiro/v1/vnics/t1",
             "{name: t1, vpc: blue, ip: 198.19.1.1/24, mac: '02:00:00:00:01:01', host: h1}", 42);
    mine.put("/jakiro/v1/vnics/t2",
             "{name: t2, vpc: blue, ip: 198.19.1.2/24, mac: '02:00:00:00:01:02', host: h2}", 43);
    mine.put("/jakiro/v1/hosts/h1", "{name: h1, underlay_ip: 198.18.0.1}", 2);
    mine.put("/jakiro/v1/hosts/h2", "{name: h2, underlay_ip: 198.18.0.2}", 3);
    mine.put("/jakiro/v1/vpcs/blue", "{name: blue, vni: 100}", 5);
    mine.put("/jakiro/v1/vpcs/green", "{name: green, vni: 200}", 5);  // dropped: not served
    return mine;
}

}  // namespace

TEST(ClusterInterest, WithoutTheSchemaMarkerAHostFollowsTheLegacyKeysOfItsVpcs) {
    auto mine = h1_following_legacy_keys();
    EXPECT_EQ(mine.served_vpcs(), (std::set<std::string>{"blue"}));
    EXPECT_EQ(mine.take_pulled(), (std::vector<std::string>{"blue"}));
    const auto view = mine.build_view();
    EXPECT_EQ(vnic_names(*view), (std::vector<std::string>{"t1", "t2"}));
    EXPECT_TRUE(view->rejected.empty()) << view->rejected[0];
    EXPECT_TRUE(view->legacy_keys);
    ASSERT_EQ(view->cluster.vpcs.size(), 1u);
}

TEST(ClusterInterest, AVnicUnderBothKeysIsThePerVpcOne) {
    auto mine = h1_following_legacy_keys();
    mine.put("/jakiro/v1/homes/h1/blue/t1", "{name: t1}", 60);
    mine.put("/jakiro/v1/vnics/blue/t1",
             "{name: t1, vpc: blue, ip: 198.19.1.1/24, mac: '02:00:00:00:01:01', host: h1, "
             "qos: {rate: 1Gbit}}",
             60);
    const auto view = mine.build_view();
    EXPECT_EQ(vnic_names(*view), (std::vector<std::string>{"t1", "t2"}));
    EXPECT_TRUE(view->rejected.empty()) << view->rejected[0];  // no "MAC used by two vNICs"
    EXPECT_TRUE(view->cluster.vnics[0].qos.has_value());
    // jakiroctl, which reads everything, lists it once too.
    cluster_records all;
    all.reset(60);
    for (const auto& [key, record] : mine.records()) {
        all.put(key, record.value, record.mod_revision);
    }
    EXPECT_EQ(all.build_view()->cluster.vnics.size(), 2u);
}

TEST(ClusterInterest, TheLastLegacyLocalVnicLeavingOrMovingAwayDropsItsVpc) {
    auto mine = h1_following_legacy_keys();
    mine.take_pulled();
    // t1 changes but stays in blue on h1: nothing is pulled or dropped.
    mine.put("/jakiro/v1/vnics/t1",
             "{name: t1, vpc: blue, ip: 198.19.1.1/24, mac: '02:00:00:00:01:09', host: h1}", 61);
    EXPECT_TRUE(mine.take_pulled().empty());
    EXPECT_TRUE(mine.take_dropped().empty());
    // It moves to h2: blue is no longer this host's.
    mine.put("/jakiro/v1/vnics/t1",
             "{name: t1, vpc: blue, ip: 198.19.1.1/24, mac: '02:00:00:00:01:09', host: h2}", 62);
    EXPECT_EQ(mine.take_dropped(), (std::vector<std::string>{"blue"}));
    EXPECT_TRUE(mine.build_view()->cluster.vnics.empty());
    // Back on h1, then deleted.
    mine.put("/jakiro/v1/vnics/t1",
             "{name: t1, vpc: blue, ip: 198.19.1.1/24, mac: '02:00:00:00:01:09', host: h1}", 63);
    EXPECT_EQ(mine.take_pulled(), (std::vector<std::string>{"blue"}));
    EXPECT_TRUE(mine.erase("/jakiro/v1/vnics/t1"));
    EXPECT_EQ(mine.take_dropped(), (std::vector<std::string>{"blue"}));
    EXPECT_FALSE(mine.serves("blue"));
}

TEST(ClusterInterest, WithTheSchemaMarkerAHostIgnoresLegacyKeys) {
    cluster_records mine;
    mine.follow_only("h1");
    mine.reset(12);
    mine.follow_legacy(false);
    mine.put("/jakiro/v1/schema", "{vnic_keys: per_vpc}", 11);
    EXPECT_TRUE(mine.migrated());
    EXPECT_FALSE(mine.put("/jakiro/v1/vnics/t5", "{name: t5, vpc: blue, host: h1}", 12));
    EXPECT_TRUE(mine.take_pulled().empty());
}

TEST(ClusterInterest, TheSchemaMarkerComingOrGoingIsNewsOnce) {
    auto mine = h1_following_legacy_keys();
    EXPECT_FALSE(mine.take_schema_changed());
    EXPECT_TRUE(mine.put("/jakiro/v1/schema", "{vnic_keys: per_vpc}", 70));
    EXPECT_TRUE(mine.take_schema_changed());
    EXPECT_FALSE(mine.take_schema_changed());
    mine.put("/jakiro/v1/schema", "{vnic_keys: per_vpc}", 71);  // the same again
    EXPECT_FALSE(mine.take_schema_changed());
    EXPECT_TRUE(mine.erase("/jakiro/v1/schema"));
    EXPECT_TRUE(mine.take_schema_changed());
    // Other hosts' readers/ keys are no business of a host's.
    EXPECT_FALSE(mine.put("/jakiro/v1/readers/h2", "{name: h2, vnic_keys: per_vpc}", 72));
}

TEST(ClusterInterest, AVnicChangeGoesOverNoHostAndSharesTheHostDirectory) {
    auto records = two_host_cluster();
    for (int i = 3; i <= 200; ++i) {
        const auto h = "h" + std::to_string(i);
        records.put("/jakiro/v1/hosts/" + h,
                    "{name: " + h + ", underlay_ip: 198.18." + std::to_string(i / 250) + "." +
                        std::to_string(i % 250) + "}",
                    20);
    }
    const auto first = records.build_view();
    EXPECT_TRUE(first->frame_checked);
    EXPECT_EQ(first->hosts->underlay.size(), 200u);
    // One vNIC changes: neither the hosts nor their leases are gone over again.
    records.put("/jakiro/v1/vnics/blue/t2",
                "{name: t2, vpc: blue, ip: 198.19.1.2/24, mac: '02:00:c6:13:01:22', host: h2}", 21);
    const auto second = records.build_view();
    EXPECT_FALSE(second->frame_checked);
    EXPECT_EQ(second->hosts.get(), first->hosts.get());
    EXPECT_EQ(second->vnics_checked, 1u);
    EXPECT_TRUE(second->cluster.hosts.empty());  // not copied into each view
    // A lease that comes: the directory is new, the frame is not checked again.
    records.put("/jakiro/v1/alive/h2", "{name: h2}", 22);
    const auto third = records.build_view();
    EXPECT_FALSE(third->frame_checked);
    EXPECT_NE(third->hosts.get(), first->hosts.get());
    EXPECT_TRUE(third->hosts->alive.count("h2"));
    EXPECT_EQ(third->hosts->underlay.size(), 200u);
    // A host that moves: the frame is checked again and the directory has its new address.
    records.put("/jakiro/v1/hosts/h2", "{name: h2, underlay_ip: 198.18.1.2}", 23);
    const auto fourth = records.build_view();
    EXPECT_TRUE(fourth->frame_checked);
    EXPECT_EQ(fourth->hosts->underlay.at("h2"), 0xc6120102u);
    EXPECT_TRUE(fourth->hosts->alive.count("h2"));
}

namespace {

const char* d1_value(const char* mac, const char* ip = "198.19.1.2/24") {
    static std::string value;
    value = std::string("{name: d1, vpc: blue, ip: ") + ip + ", mac: '" + mac +
            "', host: h2, security_groups: [db]}";
    return value.c_str();
}

}  // namespace

TEST(ClusterDelta, AnotherHostsVnicChangingGivesADeltaOfThatVnicAlone) {
    auto mine = h1_following(two_vpc_cluster());
    ASSERT_FALSE(mine.build_view()->delta);  // the first view is whole
    mine.put("/jakiro/v1/vnics/blue/d1", d1_value("02:00:00:00:00:22"), 50);
    const auto view = mine.build_view();
    ASSERT_TRUE(view->delta);
    EXPECT_TRUE(view->cluster.vnics.empty()) << "a delta copies no vNIC that did not change";
    EXPECT_EQ(view->vnics_checked, 1u);
    ASSERT_EQ(view->changes.size(), 1u);
    const auto& change = view->changes[0];
    EXPECT_EQ(change.key, "/jakiro/v1/vnics/blue/d1");
    ASSERT_TRUE(change.before && change.after);
    EXPECT_EQ(format_mac(change.before->mac), "02:00:00:00:00:02");
    EXPECT_EQ(format_mac(change.after->mac), "02:00:00:00:00:22");
    EXPECT_EQ(change.after->security_groups, (std::vector<std::string>{"db"}));
}

TEST(ClusterDelta, AVnicAddedAndOneRemovedAreDeltasWithOneSideEach) {
    auto mine = h1_following(two_vpc_cluster());
    mine.build_view();
    mine.put("/jakiro/v1/vnics/blue/d2",
             "{name: d2, vpc: blue, ip: 198.19.1.3/24, mac: '02:00:00:00:00:05', host: h2}", 51);
    mine.erase("/jakiro/v1/vnics/blue/d1");
    const auto view = mine.build_view();
    ASSERT_TRUE(view->delta);
    ASSERT_EQ(view->changes.size(), 2u);
    EXPECT_TRUE(view->changes[0].before && !view->changes[0].after);  // d1, in key order
    EXPECT_EQ(view->changes[0].before->name, "d1");
    EXPECT_TRUE(!view->changes[1].before && view->changes[1].after);
    EXPECT_EQ(view->changes[1].after->name, "d2");
    // d1's address is free again: another vNIC may take it in a delta of its own.
    mine.put("/jakiro/v1/vnics/blue/d3",
             "{name: d3, vpc: blue, ip: 198.19.1.2/24, mac: '02:00:00:00:00:06', host: h2}", 52);
    const auto next = mine.build_view();
    ASSERT_TRUE(next->delta);
    ASSERT_EQ(next->changes.size(), 1u);
}

TEST(ClusterDelta, AChangeTheDeltaCannotDecideAloneGivesAWholeView) {
    auto mine = h1_following(two_vpc_cluster());
    mine.build_view();
    // An address another vNIC holds: which one keeps it is the whole view's to say.
    mine.put("/jakiro/v1/vnics/blue/d2",
             "{name: d2, vpc: blue, ip: 198.19.1.2/24, mac: '02:00:00:00:00:07', host: h2}", 53);
    auto view = mine.build_view();
    EXPECT_FALSE(view->delta);
    EXPECT_TRUE(mentions(view->rejected, "/jakiro/v1/vnics/blue/d2: vnics[*].ip"));
    // The refused one goes: its refusal goes with it, in a whole view.
    mine.erase("/jakiro/v1/vnics/blue/d2");
    EXPECT_FALSE(mine.build_view()->delta);
    // This host's own vNIC: its port is opened or closed by a whole view.
    mine.put("/jakiro/v1/vnics/blue/t1",
             "{name: t1, vpc: blue, ip: 198.19.1.1/24, mac: '02:00:00:00:00:11', host: h1, "
             "security_groups: [default]}",
             54);
    EXPECT_FALSE(mine.build_view()->delta);
    // A group, a host's lease.
    mine.put("/jakiro/v1/groups/blue/db",
             "{name: db, vpc: blue, ingress: [{proto: tcp, from: 198.19.0.0/16}]}", 55);
    EXPECT_FALSE(mine.build_view()->delta);
    mine.put("/jakiro/v1/alive/h2", "{name: h2}", 56);
    EXPECT_FALSE(mine.build_view()->delta);
    // Asked for: a reader that lost track.
    mine.put("/jakiro/v1/vnics/blue/d1", d1_value("02:00:00:00:00:23"), 57);
    view = mine.build_view(true);
    EXPECT_FALSE(view->delta);
    EXPECT_TRUE(view->rejected.empty()) << view->rejected[0];
    // And after all that, deltas again.
    mine.put("/jakiro/v1/vnics/blue/d1", d1_value("02:00:00:00:00:24"), 58);
    view = mine.build_view();
    ASSERT_TRUE(view->delta);
    ASSERT_EQ(view->changes.size(), 1u);
    EXPECT_EQ(format_mac(view->changes[0].before->mac), "02:00:00:00:00:23");
}

TEST(ClusterDelta, ARecordStoredAgainUnchangedIsAnEmptyDelta) {
    auto mine = h1_following(two_vpc_cluster());
    mine.build_view();
    const auto value = mine.records().at("/jakiro/v1/vnics/blue/d1").value;
    EXPECT_TRUE(mine.put("/jakiro/v1/vnics/blue/d1", value, 60));
    const auto view = mine.build_view();
    EXPECT_TRUE(view->delta);
    EXPECT_TRUE(view->changes.empty());
}

TEST(ClusterDelta, JakiroctlAlwaysGetsWholeViews) {
    auto all = two_vpc_cluster();
    all.build_view();
    all.put("/jakiro/v1/vnics/blue/d1", d1_value("02:00:00:00:00:25"), 61);
    EXPECT_FALSE(all.build_view()->delta);
}

TEST(ClusterRecords, ThousandsOfVnicsCheckedAtOnceGiveTheViewOfOneByOne) {
    // Enough records that a whole view shares their checks out between threads: every record
    // is checked exactly once, refusals keep their reasons, and the first claimant of an
    // address (in key order) keeps it, as when they are checked one by one.
    auto records = two_host_cluster();
    constexpr int count = 10000;
    for (int i = 0; i < count; ++i) {
        char name[16];
        std::snprintf(name, sizeof(name), "s%05d", i);
        // Every 1000th record claims the address of the record before it: refused.
        const int j = i % 1000 == 500 ? i - 1 : i;
        const int octet3 = 2 + j / 250, octet4 = 1 + j % 250;
        const bool unknown_group = i % 1000 == 7;  // refused
        char value[256];
        std::snprintf(value, sizeof(value),
                      R"({"name": "%s", "vpc": "blue", "ip": "198.19.%d.%d/16", )"
                      R"("mac": "02:01:00:%02x:%02x:01", "host": "h2", "security_groups": )"
                      R"(["%s"]})",
                      name, octet3, octet4, i >> 8, i & 255,
                      unknown_group ? "nosuchgroup" : "default");
        records.put("/jakiro/v1/vnics/blue/" + std::string(name), value, 100 + i);
    }
    const auto view = records.build_view();
    ASSERT_TRUE(view->usable);
    EXPECT_EQ(view->vnics_checked, count + 2u);
    EXPECT_EQ(view->cluster.vnics.size(), count + 2u - 10 - 10);
    EXPECT_EQ(view->rejected.size(), 20u);
    EXPECT_TRUE(mentions(view->rejected,
                         "/jakiro/v1/vnics/blue/s00007: vnics[*].security_groups[0]: unknown "
                         "security group 'nosuchgroup'"));
    EXPECT_TRUE(mentions(view->rejected,
                         "/jakiro/v1/vnics/blue/s00500: vnics[*].ip: address "
                         "198.19.3.250 already used in VPC 'blue'"));
    // Accepted in key order, each as its record says.
    for (std::size_t k = 1; k < view->cluster.vnics.size(); ++k) {
        ASSERT_LT(view->cluster.vnics[k - 1].name, view->cluster.vnics[k].name);
    }
    const auto s09999 = std::find_if(view->cluster.vnics.begin(), view->cluster.vnics.end(),
                                     [](const vnic_config& v) { return v.name == "s09999"; });
    ASSERT_NE(s09999, view->cluster.vnics.end());
    EXPECT_EQ(s09999->mac, (mac_address{0x02, 0x01, 0x00, 0x27, 0x0f, 0x01}));
    EXPECT_EQ(s09999->ip.address, 0xc61329fau);  // 198.19.41.250
    // Checked once: a second whole view with nothing changed checks nothing again.
    EXPECT_EQ(records.build_view(true)->vnics_checked, 0u);
}
