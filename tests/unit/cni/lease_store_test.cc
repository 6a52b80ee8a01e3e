// The plugin's address leases: one file per address, never one address twice, and names that
// find a container's vNIC again with nothing else.

#include "cni/lease_store.hh"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "cni/attachment.hh"

namespace jakiro::cni {
namespace {

class LeaseStore : public ::testing::Test {
  protected:
    void SetUp() override {
        char pattern[] = "/tmp/jakiro-cni-test-XXXXXX";
        ASSERT_NE(mkdtemp(pattern), nullptr);
        dir = pattern;
    }
    void TearDown() override { std::filesystem::remove_all(dir); }
    std::string dir;
};

TEST_F(LeaseStore, PutFindErase) {
    lease_store store(dir, "blue");
    std::string error;
    ASSERT_TRUE(store.put({0xc6130164, "c1", "eth0", "jc01"}, error)) << error;
    ASSERT_TRUE(store.put({0xc6130165, "c2", "eth0", "jc02"}, error)) << error;
    const auto found = store.find("c2", "eth0");
    ASSERT_TRUE(found);
    EXPECT_EQ(found->ip, 0xc6130165u);
    EXPECT_EQ(found->vnic, "jc02");
    EXPECT_FALSE(store.find("c2", "eth1"));
    EXPECT_EQ(store.all().size(), 2u);
    ASSERT_TRUE(store.erase(0xc6130165, error));
    ASSERT_TRUE(store.erase(0xc6130165, error));  // already gone: no error
    EXPECT_EQ(store.all().size(), 1u);
    EXPECT_TRUE(std::filesystem::exists(dir + "/blue/198.19.1.100"));
}

TEST_F(LeaseStore, TheLastLeaseGoneLeavesNoDirectoryBehind) {
    lease_store store(dir, "blue");
    std::string error;
    ASSERT_TRUE(store.put({0xc6130164, "c1", "eth0", "jc01"}, error)) << error;
    ASSERT_TRUE(store.put({0xc6130165, "c2", "eth0", "jc02"}, error)) << error;
    ASSERT_TRUE(store.erase(0xc6130164, error)) << error;
    EXPECT_TRUE(std::filesystem::exists(dir + "/blue")) << "c2's lease keeps it";
    ASSERT_TRUE(store.erase(0xc6130165, error)) << error;
    EXPECT_FALSE(std::filesystem::exists(dir + "/blue"));
    ASSERT_TRUE(store.put({0xc6130164, "c3", "eth0", "jc03"}, error)) << error;
    EXPECT_EQ(store.all().size(), 1u) << "the next ADD makes it again";
}

TEST_F(LeaseStore, NetworksKeepTheirOwnLeases) {
    std::string error;
    ASSERT_TRUE(lease_store(dir, "blue").put({0xc6130164, "c1", "eth0", "jc01"}, error));
    EXPECT_TRUE(lease_store(dir, "red").all().empty());
}

TEST(PickAddress, TakesTheLowestFreeAndNoneWhenFull) {
    EXPECT_EQ(pick_address(10, 12, {10, 12}, std::nullopt), 11u);
    EXPECT_EQ(pick_address(10, 12, {10, 11, 12}, std::nullopt), std::nullopt);
    EXPECT_EQ(pick_address(10, 12, {}, 12u), 12u);
    EXPECT_EQ(pick_address(10, 12, {12}, 12u), std::nullopt);  // wanted but taken
    EXPECT_EQ(pick_address(0xfffffffe, 0xffffffff, {0xfffffffe, 0xffffffff}, std::nullopt),
              std::nullopt);  // the loop ends at the top of the address space
}

TEST_F(LeaseStore, TheLockKeepsASecondHolderOut) {
    host_lock first(dir, 1000);
    ASSERT_TRUE(first.held()) << first.error();
    const pid_t child = fork();
    if (child == 0) {
        host_lock second(dir, 100);  // a second process: flock locks are per open file
        _exit(second.held() ? 1 : 0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(VnicName, IsAStableValidInterfaceNamePerContainerAndInterface) {
    const auto a = vnic_name("blue", "c1", "eth0");
    EXPECT_EQ(a, vnic_name("blue", "c1", "eth0"));
    EXPECT_NE(a, vnic_name("blue", "c1", "eth1"));
    EXPECT_NE(a, vnic_name("red", "c1", "eth0"));
    EXPECT_NE(vnic_name("blue", "c1e", "th0"), vnic_name("blue", "c1", "eth0"));
    EXPECT_EQ(a.size(), 12u);  // under IFNAMSIZ with room for the temporary peer's suffix
    EXPECT_EQ(a.rfind("jc", 0), 0u);
}

TEST(VnicMac, IsLocallyAdministeredAndDiffersBetweenVpcs) {
    EXPECT_EQ(vnic_mac(100, 0xc6130164), "02:64:c6:13:01:64");
    EXPECT_NE(vnic_mac(100, 0xc6130164), vnic_mac(200, 0xc6130164));
}

}  // namespace
}  // namespace jakiro::cni
