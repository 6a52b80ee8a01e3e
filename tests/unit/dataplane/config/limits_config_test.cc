// vnics[].limits in the host YAML: what a vNIC may hold of what it shares with the other vNICs
// of its host (flow-table entries, packet buffers, frames per second); unset by default, errors
// that name the file, line and field.

#include <gtest/gtest.h>

#include <string>

#include "dataplane/config/config_loader.hh"
#include "tests/unit/dataplane/config/one_vnic_yaml.hh"

namespace jakiro {
namespace {

config_result load(const std::string& extra) {
    return test::load_with_vnic_keys(extra);
}

TEST(LimitsConfig, WithoutLimitsAVnicGetsTheDefaultShares) {
    const auto r = load("");
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r.config.vnics[0].limits.max_flows);
    EXPECT_FALSE(r.config.vnics[0].limits.max_packet_buffers);
    EXPECT_FALSE(r.config.vnics[0].limits.max_packet_rate);
}

TEST(LimitsConfig, LimitsAreReadFromTheLimitsMap) {
    const auto r =
        load("    limits: {max_flows: 2000, max_packet_buffers: 64, max_packet_rate: 20000}\n");
    ASSERT_TRUE(r.ok()) << r.errors[0].to_string();
    EXPECT_EQ(r.config.vnics[0].limits.max_flows, 2000u);
    EXPECT_EQ(r.config.vnics[0].limits.max_packet_buffers, 64u);
    EXPECT_EQ(r.config.vnics[0].limits.max_packet_rate, 20000u);
    // Either alone; no flows at all is a limit too (the vNIC opens nothing new).
    const auto flows_only = load("    limits: {max_flows: 0}\n");
    ASSERT_TRUE(flows_only.ok());
    EXPECT_EQ(flows_only.config.vnics[0].limits.max_flows, 0u);
    EXPECT_FALSE(flows_only.config.vnics[0].limits.max_packet_buffers);
}

TEST(LimitsConfig, ErrorsNameTheLineAndTheField) {
    struct bad {
        const char* yaml;
        const char* field;
        const char* words;
    };
    const bad cases[] = {
        {"    limits: {max_flows: 99999999}\n", "vnics[0].limits.max_flows", "[0, 16777216]"},
        {"    limits: {max_flows: many}\n", "vnics[0].limits.max_flows", "[0, 16777216]"},
        {"    limits: {max_packet_buffers: 0}\n", "vnics[0].limits.max_packet_buffers",
         "[1, 65536]"},
        {"    limits: {max_packet_rate: 0}\n", "vnics[0].limits.max_packet_rate", "[1, 100000000]"},
        {"    limits: {max_packet_rate: -5}\n", "vnics[0].limits.max_packet_rate",
         "[1, 100000000]"},
        {"    limits: {max_fds: 5}\n", "vnics[0].limits.max_fds", "unknown key"},
    };
    for (const auto& c : cases) {
        const auto r = load(c.yaml);
        ASSERT_EQ(r.errors.size(), 1u) << c.yaml;
        const auto& e = r.errors[0];
        EXPECT_EQ(e.file, "h1.yaml");
        EXPECT_EQ(e.line, 12) << e.to_string();
        EXPECT_EQ(e.field, c.field) << e.to_string();
        EXPECT_NE(e.to_string().find(c.words), std::string::npos) << e.to_string();
    }
}

}  // namespace
}  // namespace jakiro
