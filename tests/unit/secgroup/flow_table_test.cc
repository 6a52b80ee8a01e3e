#include "secgroup/flow_table.hh"

#include <gtest/gtest.h>

namespace jakiro::secgroup {
namespace {

constexpr uint64_t hz = 1000;  // one tick per millisecond keeps the timeouts readable

constexpr uint32_t unlimited = UINT32_MAX;

flow_key key(uint16_t port, uint16_t vnic = 1) {
    flow_key k{};
    k.vnic = vnic;
    k.ip_proto = ip_proto_tcp;
    k.local_ip = rte_cpu_to_be_32(0xc6130101);
    k.remote_ip = rte_cpu_to_be_32(0xc6130102);
    k.local_port = rte_cpu_to_be_16(port);
    k.remote_port = rte_cpu_to_be_16(80);
    return k;
}

flow_entry* add(flow_table& table, const flow_key& k, uint64_t now,
                uint32_t allowance = unlimited) {
    insert_result result;
    flow_entry* e = table.insert(k, now, allowance, result);
    EXPECT_EQ(e != nullptr, result == insert_result::created);
    return e;
}

insert_result try_add(flow_table& table, const flow_key& k, uint64_t now, uint32_t allowance) {
    insert_result result;
    table.insert(k, now, allowance, result);
    return result;
}

std::unique_ptr<flow_table> make(uint32_t capacity) {
    std::string error;
    auto table = flow_table::create(capacity, {}, hz, error);
    EXPECT_TRUE(table) << error;
    return table;
}

TEST(FlowTable, InsertedFlowIsFoundAndErasedFlowIsNot) {
    auto table = make(64);
    flow_entry* e = add(*table, key(1000), 0);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(table->lookup(key(1000)), e);
    EXPECT_EQ(table->lookup(key(1001)), nullptr);
    EXPECT_EQ(table->size(), 1u);
    EXPECT_EQ(table->flows_of(1), 1u);
    table->erase(e);
    EXPECT_EQ(table->lookup(key(1000)), nullptr);
    EXPECT_EQ(table->size(), 0u);
    EXPECT_EQ(table->flows_of(1), 0u);
}

TEST(FlowTable, InsertingAKnownKeyReturnsTheExistingFlowUntouched) {
    auto table = make(64);
    flow_entry* e = add(*table, key(1000), 0);
    e->packets[0] = 5;
    insert_result result;
    EXPECT_EQ(table->insert(key(1000), 99, unlimited, result), e);
    EXPECT_EQ(result, insert_result::found);
    EXPECT_EQ(e->packets[0], 5u);
    EXPECT_EQ(table->size(), 1u);
}

TEST(FlowTable, ANewFlowBeyondItsVnicsAllowanceIsRefusedAndOnlyThatVnicsIs) {
    auto table = make(64);
    for (uint16_t i = 0; i < 10; ++i) {
        ASSERT_NE(add(*table, key(1000 + i, 2), i, 10), nullptr) << i;
    }
    EXPECT_EQ(try_add(*table, key(2000, 2), 20, 10), insert_result::over_allowance);
    EXPECT_EQ(table->lookup(key(2000, 2)), nullptr);
    EXPECT_EQ(table->flows_of(2), 10u);
    // Control: another vNIC with the same allowance still opens flows, and a flow vNIC 2
    // already has is still found (a later packet of the burst that created it).
    EXPECT_EQ(try_add(*table, key(2000, 3), 20, 10), insert_result::created);
    EXPECT_EQ(try_add(*table, key(1005, 2), 20, 10), insert_result::found);
    EXPECT_EQ(table->evictions(), 0u) << "refusing a flow evicts nothing";
    // A raised allowance lets the vNIC's next flow in.
    EXPECT_EQ(try_add(*table, key(2000, 2), 20, 11), insert_result::created);
}

TEST(FlowTable, ErasedAndExpiredFlowsGiveTheirVnicItsAllowanceBack) {
    auto table = make(64);
    flow_entry* first = add(*table, key(1, 2), 0, 2);
    flow_entry* second = add(*table, key(2, 2), 0, 2);
    ASSERT_NE(first, nullptr);
    ASSERT_NE(second, nullptr);
    first->state = flow_state::udp;    // 60 s
    second->state = flow_state::icmp;  // 30 s
    EXPECT_EQ(try_add(*table, key(3, 2), 0, 2), insert_result::over_allowance);
    table->erase(first);
    flow_entry* third = add(*table, key(3, 2), 0, 2);
    ASSERT_NE(third, nullptr);
    third->state = flow_state::tcp_established;  // 3600 s
    table->expire(31 * hz, table->capacity());   // `second` goes
    EXPECT_EQ(table->flows_of(2), 1u);
    EXPECT_EQ(try_add(*table, key(4, 2), 31 * hz, 2), insert_result::created);
}

// Fills all of a 64-entry table: vNIC 1 holds one flow, idle since t=0 (the stalest of all),
// vNIC 2 the rest, each seen later than the one before. Allowances over-subscribe the table
// (what a YAML may do), so it really fills.
std::unique_ptr<flow_table> full_table() {
    auto table = make(64);
    flow_entry* idle = add(*table, key(7, 1), 0);
    EXPECT_NE(idle, nullptr);
    idle->state = flow_state::tcp_established;
    for (uint32_t i = 1; i < table->capacity(); ++i) {
        flow_entry* e = add(*table, key(static_cast<uint16_t>(1000 + i), 2), 100 + i);
        EXPECT_NE(e, nullptr) << i;
        if (e != nullptr) {
            e->state = flow_state::tcp_established;
        }
    }
    EXPECT_EQ(table->size(), table->capacity());
    return table;
}

TEST(FlowTable, AFullTableMakesRoomFromTheInsertingVnicsOwnStalestFlow) {
    auto table = full_table();
    // vNIC 2's flow seen at t=101 has been used again since; its next oldest is now stalest.
    table->lookup(key(1001, 2))->last_seen = 5000;
    flow_entry* fresh = add(*table, key(5000, 2), 10000);
    ASSERT_NE(fresh, nullptr) << "a full table makes room instead of refusing";
    EXPECT_EQ(table->size(), table->capacity());
    EXPECT_EQ(table->evictions(), 1u);
    EXPECT_NE(table->lookup(key(7, 1)), nullptr) << "another vNIC's idle flow stayed";
    EXPECT_NE(table->lookup(key(1001, 2)), nullptr);
    EXPECT_EQ(table->lookup(key(1002, 2)), nullptr) << "the stalest of its oldest went";
    EXPECT_EQ(table->flows_of(1), 1u);
    EXPECT_EQ(table->flows_of(2), table->capacity() - 1);
}

TEST(FlowTable, AFullTableRefusesAVnicWithoutFlowsOfItsOwnAndEvictsNothing) {
    auto table = full_table();
    EXPECT_EQ(try_add(*table, key(5000, 3), 10000, unlimited), insert_result::table_full);
    EXPECT_EQ(table->evictions(), 0u);
    EXPECT_NE(table->lookup(key(7, 1)), nullptr);
    EXPECT_EQ(table->flows_of(2), table->capacity() - 1);
}

TEST(FlowTable, EvictionsFollowEachVnicsOwnFlowsOldestFirstAcrossErasures) {
    auto table = full_table();
    // Erase a few of vNIC 2's flows out of the middle and the ends of its chain, fill the
    // table again with new ones: the chain stays whole, so a long run of evictions takes
    // vNIC 2's flows oldest first and never vNIC 1's.
    for (uint16_t port : {1001, 1030, 1063}) {
        table->erase(table->lookup(key(port, 2)));
    }
    for (uint16_t i = 0; i < 3; ++i) {
        ASSERT_NE(add(*table, key(3000 + i, 2), 200 + i), nullptr);
    }
    for (uint16_t i = 0; i < 200; ++i) {
        ASSERT_NE(add(*table, key(6000 + i, 2), 1000 + i), nullptr) << i;
    }
    EXPECT_EQ(table->evictions(), 200u);
    EXPECT_NE(table->lookup(key(7, 1)), nullptr);
    EXPECT_EQ(table->flows_of(2), table->capacity() - 1);
    // The newest of vNIC 2 are all there.
    for (uint16_t i = 200 - 62; i < 200; ++i) {
        EXPECT_NE(table->lookup(key(6000 + i, 2)), nullptr) << i;
    }
}

TEST(FlowTable, IdleFlowsExpireByStateTimeout) {
    auto table = make(64);
    flow_entry* syn = add(*table, key(1), 0);
    syn->state = flow_state::tcp_syn_sent;  // 30 s
    flow_entry* est = add(*table, key(2), 0);
    est->state = flow_state::tcp_established;  // 3600 s
    table->expire(31 * hz, table->capacity());
    EXPECT_EQ(table->lookup(key(1)), nullptr);
    EXPECT_NE(table->lookup(key(2)), nullptr);
    EXPECT_EQ(table->expirations(), 1u);
    table->expire(3601 * hz, table->capacity());
    EXPECT_EQ(table->lookup(key(2)), nullptr);
}

TEST(FlowTable, SnapshotSeesLiveEntriesOnly) {
    auto table = make(64);
    flow_entry* e = add(*table, key(7), 5);
    e->state = flow_state::udp;
    unsigned live = 0;
    flow_entry copy;
    for (uint32_t i = 0; i < table->capacity(); ++i) {
        if (table->snapshot(i, copy)) {
            ++live;
            EXPECT_EQ(copy.state, flow_state::udp);
            EXPECT_EQ(copy.key.local_port, rte_cpu_to_be_16(7));
        }
    }
    EXPECT_EQ(live, 1u);
}

TEST(FlowTable, ARestoredFlowIsTheSameFlowAndNotCountedAsNew) {
    auto old_table = make(64);
    flow_entry* e = add(*old_table, key(1000), 5);
    ASSERT_NE(e, nullptr);
    e->state = flow_state::tcp_established;
    e->initiator = direction::egress;
    e->packets[1] = 42;
    e->bytes[1] = 4200;
    e->rule = 3;
    e->revoked = true;
    // What the successor's table gets: the entry as the predecessor held it.
    flow_entry copy{};
    copy.key = e->key;
    copy.last_seen = e->last_seen;
    copy.packets[1] = e->packets[1];
    copy.bytes[1] = e->bytes[1];
    copy.rule = e->rule;
    copy.state = e->state;
    copy.initiator = e->initiator;
    copy.revoked = e->revoked;
    auto table = make(64);
    // Over any allowance: the vNIC held the flow already.
    ASSERT_TRUE(table->restore(copy));
    const flow_entry* restored = table->lookup(key(1000));
    ASSERT_NE(restored, nullptr);
    EXPECT_EQ(restored->state, flow_state::tcp_established);
    EXPECT_EQ(restored->initiator, direction::egress);
    EXPECT_EQ(restored->packets[1], 42u);
    EXPECT_EQ(restored->bytes[1], 4200u);
    EXPECT_TRUE(restored->revoked);
    EXPECT_EQ(restored->last_seen, 5u);
    EXPECT_EQ(table->flows_of(1), 1u);
    EXPECT_EQ(table->inserts(), 0u);
    // Control: a flow a tenant opens counts.
    add(*table, key(1001), 6);
    EXPECT_EQ(table->inserts(), 1u);
}

}  // namespace
}  // namespace jakiro::secgroup
