// The engine's view of registered memory: keys, and the IB protection checks find() applies
// (key, PD, rights, bounds, wrap-around), and pins that keep a region mapped while in use.

#include "rnic/queues/mr_table.hh"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <limits>
#include <set>
#include <thread>

#include "verbs_abi/protocol.hh"

namespace jakiro::verbs {
namespace {

namespace proto = verbs_proto;

constexpr uint64_t top = std::numeric_limits<uint64_t>::max();
constexpr uint32_t all = proto::mr_access_all;

// An entry over `length` bytes of fresh anonymous memory (unmapped by the entry).
std::shared_ptr<mr_entry> region(uint32_t pd, uint64_t iova, uint64_t length, uint32_t access = all,
                                 uint64_t owner = 1) {
    auto e = std::make_shared<mr_entry>();
    const std::size_t map = (length + 4095) / 4096 * 4096;
    void* p = mmap(nullptr, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    e->map_base = p;
    e->map_length = map;
    e->data = static_cast<std::byte*>(p);
    e->pd = pd;
    e->iova = iova;
    e->length = length;
    e->access = access;
    e->owner = owner;
    return e;
}

bool mapped(const void* p) {
    unsigned char v;
    return mincore(const_cast<void*>(p), 1, &v) == 0;
}

static_assert(range_inside(100, 10, 100, 10));
static_assert(range_inside(100, 10, 110, 0), "zero bytes just past the end");
static_assert(!range_inside(100, 10, 110, 1));
static_assert(!range_inside(100, 10, 99, 1));
static_assert(!range_inside(100, 10, 105, top), "105 + 2^64-1 wraps to 104: still outside");
static_assert(range_inside(top - 9, 10, top, 1), "the very last byte of the address space");
static_assert(!range_inside(top - 9, 10, top, 2));

TEST(MrTable, KeysAreNonZeroUniqueAndNameTheirSlot) {
    mr_table t(100);
    std::set<uint32_t> keys;
    for (int i = 0; i < 100; ++i) {
        auto e = region(1, 0x1000, 64);
        ASSERT_TRUE(t.insert(e));
        EXPECT_NE(e->key, 0u);
        EXPECT_GE(e->key >> 8, 1u) << "slot numbers start at 1";
        EXPECT_TRUE(keys.insert(e->key).second);
    }
    EXPECT_EQ(t.size(), 100u);
    EXPECT_FALSE(t.insert(region(1, 0, 64))) << "max_mr reached";
}

TEST(MrTable, AReusedSlotGetsANewKeyAndTheOldOneStopsWorking) {
    mr_table t(1);
    auto a = region(1, 0x1000, 64);
    ASSERT_TRUE(t.insert(a));
    const uint32_t old_key = a->key;
    t.erase(old_key);
    a.reset();
    auto b = region(1, 0x1000, 64);
    ASSERT_TRUE(t.insert(b));
    EXPECT_EQ(b->key >> 8, old_key >> 8) << "same slot";
    EXPECT_NE(b->key, old_key) << "new tag";
    EXPECT_EQ(t.find(1, old_key, 0x1000, 8, 0).status, mr_status::bad_key);
    EXPECT_EQ(t.find(1, b->key, 0x1000, 8, 0).status, mr_status::ok);
    EXPECT_EQ(t.get(old_key), nullptr);
}

TEST(MrTable, FindChecksKeyThenPdThenRightsThenBounds) {
    mr_table t(8);
    auto e = region(7, 0x10000, 4096, proto::access_local_write | proto::access_remote_read);
    ASSERT_TRUE(t.insert(e));
    const uint32_t k = e->key;
    EXPECT_EQ(t.find(7, 0, 0x10000, 8, 0).status, mr_status::bad_key);
    EXPECT_EQ(t.find(7, k ^ 0xff, 0x10000, 8, 0).status, mr_status::bad_key) << "wrong tag";
    EXPECT_EQ(t.find(7, k + 0x100, 0x10000, 8, 0).status, mr_status::bad_key) << "empty slot";
    EXPECT_EQ(t.find(7, 0xffffff00, 0x10000, 8, 0).status, mr_status::bad_key) << "no such slot";
    EXPECT_EQ(t.find(8, k, 0x10000, 8, 0).status, mr_status::pd_mismatch);
    EXPECT_EQ(t.find(8, k, 0, 1u << 30, proto::access_remote_write).status, mr_status::pd_mismatch)
        << "the PD is checked before anything else about the access";
    EXPECT_EQ(t.find(7, k, 0x10000, 8, proto::access_remote_write).status, mr_status::no_access);
    EXPECT_EQ(t.find(7, k, 0x10000, 8, proto::access_remote_atomic).status, mr_status::no_access);
    EXPECT_EQ(t.find(7, k, 0x10000, 8, proto::access_remote_read).status, mr_status::ok);
    EXPECT_EQ(t.find(7, k, 0x10000, 8, proto::access_local_write).status, mr_status::ok);
    EXPECT_EQ(t.find(7, k, 0x10000, 8, 0).status, mr_status::ok) << "local read: always";
    EXPECT_EQ(t.find(7, k, 0xffff, 8, 0).status, mr_status::out_of_bounds);
    EXPECT_EQ(t.find(7, k, 0x10ff9, 8, 0).status, mr_status::out_of_bounds);
    EXPECT_EQ(t.find(7, k, 0x10ff8, 8, 0).status, mr_status::ok);
}

TEST(MrTable, FindReturnsTheBytesAtTheIova) {
    mr_table t(8);
    auto e = region(1, 0xabc000, 8192);
    for (int i = 0; i < 8192; ++i) {
        e->data[i] = static_cast<std::byte>(i & 0xff);
    }
    ASSERT_TRUE(t.insert(e));
    const auto r = t.find(1, e->key, 0xabc000 + 300, 100, proto::access_remote_write);
    ASSERT_TRUE(r);
    EXPECT_EQ(r.bytes.size(), 100u);
    EXPECT_EQ(r.bytes[0], std::byte{300 & 0xff});
    EXPECT_EQ(r.bytes.data(), e->data + 300);
    const auto empty = t.find(1, e->key, 0xabc000 + 8192, 0, 0);
    ASSERT_TRUE(empty) << "zero bytes at the end are inside";
    EXPECT_TRUE(empty.bytes.empty());
}

TEST(MrTable, BoundsChecksNeverWrapAround) {
    mr_table t(8);
    // An MR whose last byte is the last address there is (ibv_reg_mr_iova may say so).
    auto e = region(1, top - 8191, 8192);
    ASSERT_TRUE(t.insert(e));
    const uint32_t k = e->key;
    EXPECT_EQ(t.find(1, k, top, 1, 0).status, mr_status::ok);
    EXPECT_EQ(t.find(1, k, top, 2, 0).status, mr_status::out_of_bounds) << "iova+len wraps to 0";
    EXPECT_EQ(t.find(1, k, top - 8191, 8192, 0).status, mr_status::ok);
    EXPECT_EQ(t.find(1, k, top - 8191, 8193, 0).status, mr_status::out_of_bounds);
    EXPECT_EQ(t.find(1, k, 0, 16, 0).status, mr_status::out_of_bounds) << "wrapped past the top";

    auto low = region(1, 0x1000, 0x1000);
    ASSERT_TRUE(t.insert(low));
    // 0x1800 + (2^64 - 0x1000) wraps to 0x800, "inside" for a naive end check.
    EXPECT_EQ(t.find(1, low->key, 0x1800, top - 0xfff, 0).status, mr_status::out_of_bounds);
    EXPECT_EQ(t.find(1, low->key, 0x1800, top, 0).status, mr_status::out_of_bounds);
}

TEST(MrTable, ProtectionErrorsMapToTheirWorkCompletionStatus) {
    for (mr_status s : {mr_status::bad_key, mr_status::pd_mismatch, mr_status::no_access,
                        mr_status::out_of_bounds}) {
        EXPECT_EQ(wc_status_for(s, mr_side::local), IBV_WC_LOC_PROT_ERR);
        EXPECT_EQ(wc_status_for(s, mr_side::remote), IBV_WC_REM_ACCESS_ERR);
    }
    EXPECT_EQ(wc_status_for(mr_status::ok, mr_side::remote), IBV_WC_SUCCESS);
}

TEST(MrTable, ALookupKeepsTheRegionMappedUntilItIsDropped) {
    mr_table t(4);
    auto e = region(1, 0x5000, 4096);
    const void* base = e->map_base;
    ASSERT_TRUE(t.insert(e));
    const uint32_t k = e->key;
    e.reset();
    auto r = t.find(1, k, 0x5000, 4096, proto::access_local_write);
    ASSERT_TRUE(r);
    t.erase(k);  // deregistered while the engine is mid-copy
    EXPECT_EQ(t.find(1, k, 0x5000, 1, 0).status, mr_status::bad_key);
    std::memset(r.bytes.data(), 0x42, r.bytes.size());  // still mapped: no fault
    EXPECT_TRUE(mapped(base));
    r = {};
    EXPECT_FALSE(mapped(base)) << "the last pin unmapped it";
}

TEST(MrTable, ErasesAndCountsByOwner) {
    mr_table t(8);
    for (uint64_t owner : {1, 1, 2}) {
        ASSERT_TRUE(t.insert(region(1, 0, 64, all, owner)));
    }
    EXPECT_EQ(t.count_owned_by(1), 2u);
    t.erase_owned_by(1);
    EXPECT_EQ(t.count_owned_by(1), 0u);
    EXPECT_EQ(t.count_owned_by(2), 1u);
    EXPECT_EQ(t.size(), 1u);
}

TEST(MrTable, LookupsRaceRegistrationsSafely) {
    mr_table t(4);
    auto e = region(1, 0x1000, 4096);
    ASSERT_TRUE(t.insert(e));
    std::atomic<uint32_t> key{e->key};
    e.reset();
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> hits{0};
    std::thread engine([&] {
        while (!stop.load(std::memory_order_relaxed)) {
            const auto r = t.find(1, key.load(), 0x1000, 4096, proto::access_remote_write);
            if (r) {
                r.bytes[4095] = std::byte{1};  // touches the last byte: must be mapped
                hits.fetch_add(1, std::memory_order_relaxed);
            }
        }
    });
    // At least 2000 re-registrations, and until the engine thread has had real work (it may
    // be scheduled late on a loaded machine); ten seconds at most.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (int i = 0; (i < 2000 || hits.load() < 100) && std::chrono::steady_clock::now() < deadline;
         ++i) {
        t.erase(key.load());
        auto next = region(1, 0x1000, 4096);
        ASSERT_TRUE(t.insert(next));
        key = next->key;
    }
    stop = true;
    engine.join();
    EXPECT_GT(hits.load(), 0u);
}

}  // namespace
}  // namespace jakiro::verbs
