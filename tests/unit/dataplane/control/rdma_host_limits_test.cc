// The kernel's limits as they bound every tenant's RDMA objects: what jakirod keeps for itself,
// host.rdma_limits lowering the rest, RLIMIT_NOFILE raised towards what the quotas need, and the
// operator warned when the quotas overcommit the host.

#include "dataplane/control/rdma_host_limits.hh"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include "dataplane/control/rdma_endpoints.hh"

namespace jakiro {
namespace {

TEST(RdmaHostLimits, TenantsGetTheKernelsLimitsLessWhatJakirodKeepsForItself) {
    kernel_limits k;
    k.max_map_count = 65530;
    k.mappings_now = 1700;  // 1000 of them the tenants'
    k.nofile = 65536;
    const auto c = tenant_capacity(k, {1000, 0}, {});
    EXPECT_EQ(c.mappings, 65530u - 700 - own_mappings_margin);
    EXPECT_EQ(c.descriptors, 65536u - own_descriptors);
    rdma_host_limits lower;
    lower.mappings = 3000;
    lower.descriptors = 100000;  // above the kernel's: the kernel's stays
    const auto lowered = tenant_capacity(k, {1000, 0}, lower);
    EXPECT_EQ(lowered.mappings, 3000u);
    EXPECT_EQ(lowered.descriptors, c.descriptors);
    k.nofile = 10;
    EXPECT_EQ(tenant_capacity(k, {}, {}).descriptors, 0u) << "never below zero";
}

TEST(RdmaHostLimits, TheDescriptorLimitIsRaisedTowardsWhatTheQuotasNeed) {
    rlimit before{};
    ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &before), 0);
    const rlim_t wanted = std::min<rlim_t>(before.rlim_max, before.rlim_cur + 100);
    const kernel_limits k = read_kernel_limits(wanted);
    EXPECT_GE(k.nofile, wanted);
    EXPECT_GT(k.max_map_count, 0u);
    EXPECT_GT(k.mappings_now, 0u);
    setrlimit(RLIMIT_NOFILE, &before);
}

// Sixteen vNICs of the default quota need more mappings than one process has: the operator
// hears it, and each vNIC is guaranteed its part.
TEST(RdmaHostLimits, QuotasThatOvercommitTheHostAreNamedInAWarning) {
    host_config config;
    auto reserve = std::make_shared<verbs::host_reserve>();
    std::vector<std::shared_ptr<verbs::vnic_account>> vnics;
    const verbs::vnic_quota quota = quota_of(rdma_config{});
    for (int i = 0; i < 16; ++i) {
        vnics.push_back(verbs::vnic_account::open(reserve, verbs::host_demand(quota)));
    }
    const std::string warning = size_rdma_reserve(*reserve, config);
    EXPECT_NE(warning.find("vm.max_map_count"), std::string::npos) << warning;
    EXPECT_TRUE(reserve->overcommitted(verbs::host_resource::mappings));
    EXPECT_LT(vnics[0]->share().mappings, verbs::host_demand(quota).mappings);
    // Control: two vNICs fit; host.rdma_limits lowers the capacity live.
    vnics.resize(2);
    EXPECT_EQ(size_rdma_reserve(*reserve, config), "");
    EXPECT_EQ(vnics[0]->share().mappings, verbs::host_demand(quota).mappings);
    config.rdma_limits.mappings = 1000;
    EXPECT_NE(size_rdma_reserve(*reserve, config).find("host.rdma_limits.mappings"),
              std::string::npos);
    EXPECT_EQ(reserve->capacity().mappings, 1000u);
    EXPECT_EQ(vnics[0]->share().mappings, 500u);
}

}  // namespace
}  // namespace jakiro
