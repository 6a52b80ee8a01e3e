#include "dataplane/control_plane/schema_migration.hh"

#include <gtest/gtest.h>

#include <algorithm>

#include "dataplane/control_plane/key_schema.hh"

using namespace jakiro;
using namespace jakiro::control_plane;

namespace {

const std::string t1_value =
    "{name: t1, vpc: blue, ip: 198.19.1.1/24, mac: '02:00:c6:13:01:01', host: h1}";
const std::string t2_value =
    "{name: t2, vpc: blue, ip: 198.19.1.2/24, mac: '02:00:c6:13:01:02', host: h2}";

// A cluster written before vNIC keys were grouped per VPC: h1 upgraded (it says it reads
// per-VPC keys), h2 not yet.
cluster_records legacy_cluster() {
    cluster_records records;
    records.reset(20);
    records.put("/jakiro/v1/hosts/h1", "{name: h1, underlay_ip: 198.18.0.1}", 2);
    records.put("/jakiro/v1/hosts/h2", "{name: h2, underlay_ip: 198.18.0.2}", 3);
    records.put("/jakiro/v1/readers/h1", readers_value_of("h1"), 4);
    records.put("/jakiro/v1/vpcs/blue", "{name: blue, vni: 100}", 5);
    records.put("/jakiro/v1/vnics/t1", t1_value, 6);
    records.put("/jakiro/v1/vnics/t2", t2_value, 7);
    return records;
}

// What etcd holds after the transaction a diff makes (as jakiroctl writes it).
void commit(cluster_records& records, const record_diff& diff, int64_t revision) {
    for (const auto& put : diff.puts) {
        records.put(put.key, put.value, revision);
    }
    for (const auto& del : diff.deletes) {
        records.erase(del.key);
    }
    records.set_revision(revision);
}

bool has(const std::map<std::string, std::string>& records, const std::string& key) {
    return records.count(key) != 0;
}

}  // namespace

TEST(SchemaMigration, ANewClusterIsMarkedByItsFirstApplyAndWrittenPerVpcOnly) {
    cluster_records empty;
    empty.reset(1);
    const auto state = migration_state_of(empty.records());
    EXPECT_FALSE(state.in_transition());
    std::map<std::string, std::string> desired{{"/jakiro/v1/vnics/blue/t1", t1_value}};
    add_schema_records(desired, state);
    EXPECT_TRUE(has(desired, "/jakiro/v1/schema"));
    EXPECT_FALSE(has(desired, "/jakiro/v1/vnics/t1"));
}

TEST(SchemaMigration, ApplyWritesEveryVnicUnderBothKeysWhileAHostReadsOnlyLegacyOnes) {
    cluster_records records;
    records.reset(5);
    // h2 registered with a jakirod from before: no readers/ key.
    records.put("/jakiro/v1/hosts/h2", "{name: h2, underlay_ip: 198.18.0.2}", 3);
    const auto state = migration_state_of(records.records());
    EXPECT_TRUE(state.in_transition());
    EXPECT_EQ(state.old_readers, std::vector<std::string>{"h2"});
    std::map<std::string, std::string> desired{{"/jakiro/v1/vnics/blue/t1", t1_value},
                                               {"/jakiro/v1/homes/h1/blue/t1", "{name: t1}"}};
    add_schema_records(desired, state);
    EXPECT_EQ(desired.at("/jakiro/v1/vnics/t1"), t1_value);
    EXPECT_FALSE(has(desired, "/jakiro/v1/schema"));
    // Once h2 says it reads per-VPC keys (and no legacy key is left), apply marks the cluster.
    records.put("/jakiro/v1/readers/h2", readers_value_of("h2"), 6);
    EXPECT_FALSE(migration_state_of(records.records()).in_transition());
}

TEST(SchemaMigration, MigrateMovesLegacyVnicsUnderTheirVpcAndKeepsThemWhileOldHostsRemain) {
    const auto records = legacy_cluster();
    const auto plan = plan_migration(records.records(), false);
    ASSERT_TRUE(plan.problems.empty()) << plan.problems[0];
    EXPECT_EQ(plan.moved, 2u);
    EXPECT_FALSE(plan.finishes);
    EXPECT_EQ(plan.holding_back, std::vector<std::string>{"h2"});
    EXPECT_EQ(plan.desired.at("/jakiro/v1/vnics/blue/t1"), t1_value);
    EXPECT_EQ(plan.desired.at("/jakiro/v1/homes/h1/blue/t1"), "{name: t1}");
    EXPECT_EQ(plan.desired.at("/jakiro/v1/homes/h2/blue/t2"), "{name: t2}");
    // h2 still reads the legacy keys: they stay, and no marker yet.
    EXPECT_EQ(plan.desired.at("/jakiro/v1/vnics/t2"), t2_value);
    EXPECT_FALSE(has(plan.desired, "/jakiro/v1/schema"));
    const auto diff = diff_records(plan.desired, records.records());
    EXPECT_EQ(diff.puts.size(), 4u);  // two vNICs and their index
    EXPECT_TRUE(diff.deletes.empty());
}

TEST(SchemaMigration, MigrateFinishesOnceEveryRegisteredHostReadsPerVpcKeys) {
    auto records = legacy_cluster();
    commit(records,
           diff_records(plan_migration(records.records(), false).desired, records.records()), 21);
    records.put("/jakiro/v1/readers/h2", readers_value_of("h2"), 22);  // h2 upgraded
    const auto plan = plan_migration(records.records(), false);
    EXPECT_TRUE(plan.finishes);
    EXPECT_EQ(plan.moved, 0u);
    EXPECT_EQ(plan.removed, 2u);
    const auto diff = diff_records(plan.desired, records.records());
    commit(records, diff, 23);
    EXPECT_TRUE(records.migrated());
    for (const auto& [key, record] : records.records()) {
        EXPECT_FALSE(record.legacy) << key;
    }
    const auto view = records.build_view();
    EXPECT_EQ(view->cluster.vnics.size(), 2u);
    EXPECT_TRUE(view->rejected.empty());
}

TEST(SchemaMigration, MigrateAgainChangesNothing) {
    auto records = legacy_cluster();
    for (int64_t revision = 21; revision < 24; ++revision) {
        commit(records,
               diff_records(plan_migration(records.records(), false).desired, records.records()),
               revision);
    }
    EXPECT_TRUE(
        diff_records(plan_migration(records.records(), false).desired, records.records()).empty());
}

TEST(SchemaMigration, ForceFinishesWithoutTheHostsThatHoldItBack) {
    const auto records = legacy_cluster();
    const auto plan = plan_migration(records.records(), true);
    EXPECT_TRUE(plan.finishes);
    EXPECT_EQ(plan.holding_back, std::vector<std::string>{"h2"});
    EXPECT_FALSE(has(plan.desired, "/jakiro/v1/vnics/t1"));
    EXPECT_TRUE(has(plan.desired, "/jakiro/v1/vnics/blue/t1"));
    EXPECT_TRUE(has(plan.desired, "/jakiro/v1/schema"));
}

TEST(SchemaMigration, ALegacyRecordThatCannotBePlacedStopsTheMigrationByName) {
    auto records = legacy_cluster();
    records.put("/jakiro/v1/vnics/t3", "{name: t3, ip: 198.19.1.3/24, host: h1}", 8);
    records.put("/jakiro/v1/vnics/t4", "{name: t9, vpc: blue, host: h1}", 9);
    records.put("/jakiro/v1/vnics/t5", "{not yaml", 10);
    const auto plan = plan_migration(records.records(), false);
    ASSERT_EQ(plan.problems.size(), 3u);
    EXPECT_NE(plan.problems[0].find("/jakiro/v1/vnics/t3: vpc"), std::string::npos)
        << plan.problems[0];
    EXPECT_NE(plan.problems[1].find("/jakiro/v1/vnics/t4: name does not match"), std::string::npos)
        << plan.problems[1];
    EXPECT_NE(plan.problems[2].find("/jakiro/v1/vnics/t5: "), std::string::npos);
}

TEST(SchemaMigration, ALegacyValueWrittenLaterWinsAndItsIndexFollowsItsHost) {
    auto records = legacy_cluster();
    commit(records,
           diff_records(plan_migration(records.records(), false).desired, records.records()), 21);
    // A jakiroctl from before moves t2 to h1 (it writes the legacy key only).
    const auto moved =
        "{name: t2, vpc: blue, ip: 198.19.1.2/24, mac: '02:00:c6:13:01:02', "
        "host: h1}";
    records.put("/jakiro/v1/vnics/t2", moved, 30);
    auto plan = plan_migration(records.records(), false);
    EXPECT_EQ(plan.moved, 1u);
    EXPECT_EQ(plan.desired.at("/jakiro/v1/vnics/blue/t2"), moved);
    EXPECT_TRUE(has(plan.desired, "/jakiro/v1/homes/h1/blue/t2"));
    EXPECT_FALSE(has(plan.desired, "/jakiro/v1/homes/h2/blue/t2"));
    // The per-VPC key written later (by apply) wins over an older legacy one instead.
    commit(records, diff_records(plan.desired, records.records()), 31);
    records.put("/jakiro/v1/vnics/blue/t1",
                t1_value.substr(0, t1_value.size() - 1) + ", qos: {rate: 1Gbit}}", 32);
    plan = plan_migration(records.records(), false);
    EXPECT_EQ(plan.moved, 0u);
    EXPECT_EQ(plan.desired.at("/jakiro/v1/vnics/t1"), plan.desired.at("/jakiro/v1/vnics/blue/t1"));
    EXPECT_EQ(plan.legacy_copies, 1u);
}

TEST(SchemaMigration, ADiffNeverDeletesWhatHostsWriteThemselves) {
    auto records = legacy_cluster();
    const auto diff = diff_records({}, records.records());
    for (const auto& del : diff.deletes) {
        EXPECT_EQ(del.key.find("/jakiro/v1/readers/"), std::string::npos) << del.key;
        EXPECT_EQ(del.key.find("/jakiro/v1/hosts/"), std::string::npos) << del.key;
    }
}

TEST(SchemaMigration, ApplyInTransitionDeletesAVnicUnderBothKeys) {
    auto records = legacy_cluster();
    commit(records,
           diff_records(plan_migration(records.records(), false).desired, records.records()), 21);
    const auto state = migration_state_of(records.records());
    ASSERT_TRUE(state.in_transition());
    // The document lists t1 only: t2 goes, under both keys, with its index.
    std::map<std::string, std::string> desired{{"/jakiro/v1/vpcs/blue", "{name: blue, vni: 100}"},
                                               {"/jakiro/v1/vnics/blue/t1", t1_value},
                                               {"/jakiro/v1/homes/h1/blue/t1", "{name: t1}"}};
    add_schema_records(desired, state);
    std::vector<std::string> deleted;
    for (const auto& del : diff_records(desired, records.records()).deletes) {
        deleted.push_back(del.key);
    }
    std::sort(deleted.begin(), deleted.end());
    EXPECT_EQ(deleted,
              (std::vector<std::string>{"/jakiro/v1/homes/h2/blue/t2", "/jakiro/v1/vnics/blue/t2",
                                        "/jakiro/v1/vnics/t2"}));
}
