// qos/config.hh's class_share_bps: the one place a class's share of its vNIC's rate is worked
// out, for the ingress meter, jakiroctl qos/top and the metrics alike.

#include "qos/config.hh"

#include <gtest/gtest.h>

#include "qos/rdma_class.hh"

namespace jakiro::qos {
namespace {

vnic_qos shaped(uint64_t rate_bps, uint32_t rdma_weight, uint32_t tcp_weight) {
    vnic_qos q;
    q.rate_bps = rate_bps;
    q.burst_bytes = default_burst_bytes(rate_bps);
    q.classes[index_of(traffic_class::rdma)].weight = rdma_weight;
    q.classes[index_of(traffic_class::tcp)].weight = tcp_weight;
    return q;
}

TEST(ClassShare, TheRateIsSplitByWeight) {
    const auto q = shaped(1'000'000'000, 3, 1);
    EXPECT_EQ(class_share_bps(q, traffic_class::rdma), 750'000'000u);
    EXPECT_EQ(class_share_bps(q, traffic_class::tcp), 250'000'000u);
}

TEST(ClassShare, AMinRaisesAndAMaxCapsTheWeightedShare) {
    auto q = shaped(1'000'000'000, 9, 1);
    q.classes[index_of(traffic_class::tcp)].min_bps = 300'000'000;
    q.classes[index_of(traffic_class::rdma)].max_bps = 600'000'000;
    EXPECT_EQ(class_share_bps(q, traffic_class::tcp), 300'000'000u);
    EXPECT_EQ(class_share_bps(q, traffic_class::rdma), 600'000'000u);
}

TEST(ClassShare, TheLargestRateAndWeightsDoNotOverflow) {
    const auto q = shaped(max_rate_bps, max_weight, 1);
    EXPECT_EQ(class_share_bps(q, traffic_class::rdma),
              max_rate_bps * max_weight / (max_weight + 1));
}

TEST(RdmaClass, DcqcnLineRateIsTheVnicRateOrTheNominalOneWhenNotShaped) {
    static_assert(rdma_line_rate_bps(1'000'000'000) == 1'000'000'000);
    static_assert(rdma_line_rate_bps(0) == unshaped_rdma_line_rate_bps);
    SUCCEED();
}

}  // namespace
}  // namespace jakiro::qos
