#include "dataplane/overlay/sealing/pair_keys.hh"

#include <gtest/gtest.h>

#include "dataplane/overlay/sealing/host_key.hh"

namespace jakiro::overlay::sealing {
namespace {

struct PairKeysTest : testing::Test {
    host_key_pair a = generate_key_pair();
    host_key_pair b = generate_key_pair();
    host_key_pair c = generate_key_pair();
    pair_end end_a{a.public_key, 0xc6120001};
    pair_end end_b{b.public_key, 0xc6120002};
    pair_end end_c{c.public_key, 0xc6120003};
};

TEST_F(PairKeysTest, BothHostsDeriveTheSameKeyForEachDirection) {
    const auto secret_at_a = *shared_secret(a.private_key, b.public_key);
    const auto secret_at_b = *shared_secret(b.private_key, a.public_key);
    EXPECT_EQ(secret_at_a, secret_at_b);
    EXPECT_EQ(*derive_direction_key(secret_at_a, end_a, end_b, 300),
              *derive_direction_key(secret_at_b, end_a, end_b, 300));
    EXPECT_EQ(*derive_direction_key(secret_at_a, end_b, end_a, 300),
              *derive_direction_key(secret_at_b, end_b, end_a, 300));
}

TEST_F(PairKeysTest, DirectionsAndEpochsNeverShareAKey) {
    const auto secret = *shared_secret(a.private_key, b.public_key);
    const auto a_to_b = *derive_direction_key(secret, end_a, end_b, 300);
    EXPECT_NE(a_to_b, *derive_direction_key(secret, end_b, end_a, 300));
    EXPECT_NE(a_to_b, *derive_direction_key(secret, end_a, end_b, 301));
    EXPECT_NE(a_to_b.salt, derive_direction_key(secret, end_a, end_b, 301)->salt);
}

TEST_F(PairKeysTest, AThirdHostDerivesNothingThatOpensThePair) {
    const auto pair_secret = *shared_secret(a.private_key, b.public_key);
    const auto a_to_b = *derive_direction_key(pair_secret, end_a, end_b, 300);
    // C knows both public keys and addresses but only its own private key.
    const auto c_with_b = *shared_secret(c.private_key, b.public_key);
    const auto c_with_a = *shared_secret(c.private_key, a.public_key);
    EXPECT_NE(a_to_b, *derive_direction_key(c_with_b, end_a, end_b, 300));
    EXPECT_NE(a_to_b, *derive_direction_key(c_with_a, end_a, end_b, 300));
    EXPECT_NE(a_to_b, *derive_direction_key(c_with_b, end_c, end_b, 300));
}

TEST(HostKeyTest, KeysRoundTripThroughBase64AndRejectAnythingElse) {
    const host_key_pair k = generate_key_pair();
    EXPECT_EQ(*parse_key(format_key(k.public_key)), k.public_key);
    EXPECT_EQ(*parse_key(format_key(k.public_key) + "\n"), k.public_key);
    EXPECT_FALSE(parse_key(""));
    EXPECT_FALSE(parse_key(format_key(k.public_key).substr(1)));
    EXPECT_FALSE(parse_key("!" + format_key(k.public_key).substr(1)));
    EXPECT_EQ(public_key_of(k.private_key), k.public_key);
}

TEST(HostKeyTest, APrivateKeyFileOthersCanReadIsRefused) {
    const host_key_pair k = generate_key_pair();
    char path[] = "/tmp/jakiro-key-XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    const std::string text = format_key(k.private_key) + "\n";
    ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    close(fd);
    std::string error;
    ASSERT_TRUE(load_private_key(path, error)) << error;
    EXPECT_EQ(load_private_key(path, error)->public_key, k.public_key);
    chmod(path, 0644);
    EXPECT_FALSE(load_private_key(path, error));
    EXPECT_NE(error.find("chmod 600"), std::string::npos) << error;
    unlink(path);
}

TEST(HostKeyTest, ALowOrderPeerKeyGivesNoSecret) {
    const host_key_pair k = generate_key_pair();
    EXPECT_FALSE(shared_secret(k.private_key, x25519_key{}));  // the all-zero point
}

}  // namespace
}  // namespace jakiro::overlay::sealing
