#include "secgroup/flow_table.hh"

#include <gtest/gtest.h>

namespace jakiro::secgroup {
namespace {

constexpr uint64_t hz = 1000;  // one tick per millisecond keeps the timeouts readable

flow_key key(uint16_t port) {
    flow_key k{};
    k.vnic = 1;
    k.ip_proto = ip_proto_tcp;
    k.local_ip = rte_cpu_to_be_32(0xc6130101);
    k.remote_ip = rte_cpu_to_be_32(0xc6130102);
    k.local_port = rte_cpu_to_be_16(port);
    k.remote_port = rte_cpu_to_be_16(80);
    return k;
}

flow_entry* add(flow_table& table, const flow_key& k, uint64_t now) {
    bool created = false;
    flow_entry* e = table.insert(k, now, created);
    EXPECT_TRUE(e == nullptr || created);
    return e;
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
    table->erase(e);
    EXPECT_EQ(table->lookup(key(1000)), nullptr);
    EXPECT_EQ(table->size(), 0u);
}

TEST(FlowTable, InsertingAKnownKeyReturnsTheExistingFlowUntouched) {
    auto table = make(64);
    flow_entry* e = add(*table, key(1000), 0);
    e->packets[0] = 5;
    bool created = true;
    EXPECT_EQ(table->insert(key(1000), 99, created), e);
    EXPECT_FALSE(created);
    EXPECT_EQ(e->packets[0], 5u);
    EXPECT_EQ(table->size(), 1u);
}

TEST(FlowTable, FullTableEvictsTheStalestSampledFlow) {
    auto table = make(64);
    const uint32_t capacity = table->capacity();
    for (uint32_t i = 0; i < capacity; ++i) {
        flow_entry* e = add(*table, key(static_cast<uint16_t>(1000 + i)), 100 + i);
        ASSERT_NE(e, nullptr) << i;
        e->state = flow_state::tcp_established;
    }
    EXPECT_EQ(table->size(), capacity);
    // The oldest flow (seen at t=100) sits in the first sampled slots.
    flow_entry* fresh = add(*table, key(5000), 10000);
    ASSERT_NE(fresh, nullptr) << "a full table makes room instead of refusing";
    EXPECT_EQ(table->size(), capacity);
    EXPECT_EQ(table->evictions(), 1u);
    EXPECT_EQ(table->lookup(key(1000)), nullptr) << "the stalest flow went";
    EXPECT_NE(table->lookup(key(1001)), nullptr);
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

}  // namespace
}  // namespace jakiro::secgroup
