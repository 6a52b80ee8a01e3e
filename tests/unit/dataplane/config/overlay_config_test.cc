#include <gtest/gtest.h>

#include "dataplane/config/config_loader.hh"
#include "dataplane/overlay/sealing/host_key.hh"

using namespace jakiro;

namespace {
const char* host = "host: {name: h1, underlay: {port: net_null0, ip: 198.18.0.1}}\n";

std::string key() {
    static const std::string k =
        overlay::sealing::format_key(overlay::sealing::generate_key_pair().public_key);
    return k;
}
}  // namespace

TEST(OverlayConfig, NoOverlayKeyIsPlainVxlanWithTheWholeMtu) {
    const auto loaded = load_host_config_text(host, "h.yaml");
    ASSERT_TRUE(loaded.ok());
    EXPECT_EQ(loaded.config.overlay.encryption, overlay_encryption::off);
    EXPECT_FALSE(loaded.config.overlay.may_seal());
    EXPECT_EQ(loaded.config.tenant_mtu(), 1450u);
}

TEST(OverlayConfig, PolicyKeysAndPerHostOverridesAreRead) {
    const auto loaded = load_host_config_text(
        std::string(host) + "overlay:\n  encryption: required\n  private_key: /etc/k\n" +
            "  rekey_bytes: 1GiB\n  rekey_interval: 60\n  hosts:\n" +
            "    - {ip: 198.18.0.2, public_key: \"" + key() +
            "\"}\n    - {ip: 198.18.0.9, encryption: off}\n",
        "h.yaml");
    ASSERT_TRUE(loaded.ok()) << loaded.errors[0].to_string();
    const auto& o = loaded.config.overlay;
    EXPECT_EQ(o.encryption, overlay_encryption::required);
    EXPECT_EQ(o.private_key, "/etc/k");
    EXPECT_EQ(o.rekey_bytes, uint64_t{1} << 30);
    EXPECT_EQ(o.rekey_seconds, 60u);
    ASSERT_EQ(o.hosts.size(), 2u);
    EXPECT_EQ(o.hosts[0].public_key, key());
    EXPECT_FALSE(o.hosts[0].encryption.has_value());
    EXPECT_EQ(o.hosts[1].encryption, overlay_encryption::off);
    EXPECT_EQ(loaded.config.tenant_mtu(), 1410u);  // room for ESP
}

TEST(OverlayConfig, BadKeysPoliciesAndAMissingPrivateKeyAreRefusedAtTheirLines) {
    const auto loaded =
        load_host_config_text(std::string(host) + "overlay:\n  encryption: maybe\n  hosts:\n" +
                                  "    - {ip: 198.18.0.2, public_key: notakey}\n" +
                                  "    - {ip: 198.18.0.1, encryption: optional}\n",
                              "h.yaml");
    ASSERT_FALSE(loaded.ok());
    std::string all;
    for (const auto& e : loaded.errors) {
        all += e.to_string() + "\n";
    }
    EXPECT_NE(all.find("h.yaml:3: overlay.encryption: 'maybe' is not off, optional or required"),
              std::string::npos)
        << all;
    EXPECT_NE(all.find("overlay.hosts[0].public_key: is not a base64 X25519 key"),
              std::string::npos)
        << all;
    EXPECT_NE(all.find("overlay.hosts[1].ip: is this host's own underlay address"),
              std::string::npos)
        << all;
    EXPECT_NE(all.find("overlay.private_key: missing"), std::string::npos) << all;
}
