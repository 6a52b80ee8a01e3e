#include "dataplane/overlay/vlt.hh"

#include <gtest/gtest.h>

#include "tests/unit/frames.hh"

namespace jakiro::overlay {
namespace {

using test::ip;

std::unique_ptr<vlt> make_table(uint32_t capacity = 16) {
    std::string error;
    auto table = vlt::create(capacity, error);
    EXPECT_TRUE(table) << error;
    return table;
}

vlt_entry local(uint16_t slot) {
    vlt_entry e{};
    e.kind = vlt_kind::local_vnic;
    e.vnic = slot;
    return e;
}

vlt_entry remote(const char* host) {
    vlt_entry e{};
    e.kind = vlt_kind::remote_host;
    e.host_ip = ip(host);
    return e;
}

TEST(Vlt, FindsLocalAndRemoteEntries) {
    auto table = make_table();
    ASSERT_TRUE(table->add(0, ip("198.19.1.1"), local(3)));
    ASSERT_TRUE(table->add(0, ip("198.19.1.2"), remote("198.18.0.2")));
    const auto* a = table->lookup(0, ip("198.19.1.1"));
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->kind, vlt_kind::local_vnic);
    EXPECT_EQ(a->vnic, 3);
    const auto* b = table->lookup(0, ip("198.19.1.2"));
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->host_ip, ip("198.18.0.2"));
    EXPECT_EQ(table->lookup(0, ip("198.19.1.7")), nullptr);
}

TEST(Vlt, SameAddressInTwoVpcsResolvesSeparately) {
    auto table = make_table();
    ASSERT_TRUE(table->add(0, ip("198.19.1.1"), local(0)));
    ASSERT_TRUE(table->add(1, ip("198.19.1.1"), local(1)));
    EXPECT_EQ(table->lookup(0, ip("198.19.1.1"))->vnic, 0);
    EXPECT_EQ(table->lookup(1, ip("198.19.1.1"))->vnic, 1);
    EXPECT_EQ(table->lookup(2, ip("198.19.1.1")), nullptr) << "a third VPC sees nothing";
}

TEST(Vlt, RejectsDuplicatesAndOverflow) {
    auto table = make_table(2);
    EXPECT_TRUE(table->add(0, ip("198.19.1.1"), local(0)));
    EXPECT_FALSE(table->add(0, ip("198.19.1.1"), local(1)));
    EXPECT_TRUE(table->add(0, ip("198.19.1.2"), local(1)));
    EXPECT_FALSE(table->add(0, ip("198.19.1.3"), local(2))) << "capacity is 2";
    EXPECT_EQ(table->size(), 2u);
}

TEST(Vlt, BulkLookupMatchesSingleLookups) {
    auto table = make_table(64);
    for (uint16_t i = 0; i < 40; ++i) {
        ASSERT_TRUE(table->add(i % 2, rte_cpu_to_be_32(0xc6130100u + i), local(i)));
    }
    vlt_key keys[vlt::max_bulk];
    const vlt_entry* found[vlt::max_bulk];
    for (unsigned i = 0; i < vlt::max_bulk; ++i) {
        keys[i] = {i % 2, rte_cpu_to_be_32(0xc6130100u + i)};
    }
    table->lookup_bulk(keys, vlt::max_bulk, found);
    for (unsigned i = 0; i < vlt::max_bulk; ++i) {
        EXPECT_EQ(found[i], table->lookup(keys[i].vpc, keys[i].ip)) << i;
        EXPECT_EQ(found[i] != nullptr, i < 40) << i;
    }
}

}  // namespace
}  // namespace jakiro::overlay
