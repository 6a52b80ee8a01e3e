// The bounds each vNIC gets in the snapshot: its YAML limits, or an equal share that keeps the
// sum of every vNIC's bounds within what they share.

#include "dataplane/control/vnic_limits.hh"

#include <gtest/gtest.h>

namespace jakiro {
namespace {

TEST(VnicLimits, ByDefaultTheVnicsOfAWorkerShareItsFlowTableEqually) {
    const vnic_limits unset;
    EXPECT_EQ(flow_allowance(unset, 65536, 1), 65536u);
    EXPECT_EQ(flow_allowance(unset, 65536, 3), 21845u);
    // However many, the shares never add up to more than the table.
    for (uint32_t n : {1u, 2u, 7u, 100u, 256u}) {
        EXPECT_LE(flow_allowance(unset, 65536, n) * n, 65536u) << n;
    }
    EXPECT_EQ(flow_allowance(unset, 65536, 0), 65536u) << "no vNIC yet: no division by 0";
}

TEST(VnicLimits, ByDefaultTheHostKeepsOneShareOfThePacketBuffers) {
    const vnic_limits unset;
    EXPECT_EQ(packet_buffer_allowance(unset, 1023, 1), 511u);
    EXPECT_EQ(packet_buffer_allowance(unset, 1023, 3), 255u);
    for (uint32_t n : {1u, 3u, 50u, 120u}) {
        EXPECT_LE(packet_buffer_allowance(unset, 1023, n) * (n + 1), 1023u) << n;
    }
    // So many vNICs that a share would be too small to receive a few frames: a floor.
    EXPECT_EQ(packet_buffer_allowance(unset, 1023, 256), min_default_packet_buffers);
}

TEST(VnicLimits, ByDefaultAVnicMayReadAFixedPacketRate) {
    EXPECT_EQ(packet_rate_allowance(vnic_limits{}), vnic_limits::default_max_packet_rate);
}

TEST(VnicLimits, AYamlLimitIsTakenAsItIs) {
    vnic_limits set;
    set.max_flows = 100;
    set.max_packet_buffers = 600;
    EXPECT_EQ(flow_allowance(set, 65536, 3), 100u);
    EXPECT_EQ(packet_buffer_allowance(set, 1023, 3), 600u);
    set.max_packet_rate = 5000;
    EXPECT_EQ(packet_rate_allowance(set), 5000u);
    set.max_flows = 0;
    EXPECT_EQ(flow_allowance(set, 65536, 3), 0u);
}

}  // namespace
}  // namespace jakiro
