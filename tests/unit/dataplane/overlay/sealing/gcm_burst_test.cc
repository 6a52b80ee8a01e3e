#include "dataplane/overlay/sealing/gcm_burst.hh"

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <cstring>
#include <vector>

namespace jakiro::overlay::sealing {
namespace {

direction_key test_key(uint8_t seed) {
    direction_key k;
    for (unsigned i = 0; i < k.key.size(); ++i) {
        k.key[i] = static_cast<uint8_t>(seed + i);
    }
    k.salt = {seed, 1, 2, 3};
    return k;
}

struct sealed_frame {
    std::vector<uint8_t> bytes;  // ESP header | IV | ciphertext | ICV
    std::vector<uint8_t> plain;
};

struct GcmBurstTest : testing::Test {
    gcm_burst gcm;
    gcm_key key;
    gcm_key other;
    const uint32_t src = 0x010012c6;  // as stored in a header (network order read natively)
    const uint32_t dst = 0x020012c6;

    void SetUp() override {
        ASSERT_TRUE(gcm.ready());
        gcm.expand(test_key(7), key);
        gcm.expand(test_key(9), other);
    }

    sealed_frame seal_one(uint32_t len, uint64_t seq, const gcm_key& with) {
        sealed_frame f;
        f.plain.resize(len);
        for (uint32_t i = 0; i < len; ++i) {
            f.plain[i] = static_cast<uint8_t>(i * 31 + seq);
        }
        f.bytes.resize(esp_prefix_bytes + len + esp_trailer_bytes(len));
        std::memcpy(f.bytes.data() + esp_prefix_bytes, f.plain.data(), len);
        const seal_request r{f.bytes.data(), len, &with, 0x12345678, seq, src, dst};
        gcm.seal(&r, 1);
        return f;
    }

    open_result open_one(sealed_frame& f, const gcm_key& with, uint32_t at_src = 0) {
        const open_request r{f.bytes.data(), static_cast<uint32_t>(f.bytes.size()), &with,
                             at_src != 0 ? at_src : src, dst};
        open_result out{};
        gcm.open(&r, 1, &out);
        return out;
    }
};

TEST_F(GcmBurstTest, SealedFramesOpenToTheirPlaintextAtEverySize) {
    for (const uint32_t len : {8u, 9u, 10u, 11u, 64u, 1500u, 9000u}) {
        sealed_frame f = seal_one(len, 42, key);
        EXPECT_NE(std::memcmp(f.bytes.data() + esp_prefix_bytes, f.plain.data(), len), 0);
        EXPECT_EQ((f.bytes.size() - esp_prefix_bytes - esp_icv_bytes) % 4, 0u) << len;
        const open_result r = open_one(f, key);
        ASSERT_TRUE(r.ok) << len;
        ASSERT_EQ(r.plaintext_len, len);
        EXPECT_EQ(std::memcmp(f.bytes.data() + esp_prefix_bytes, f.plain.data(), len), 0);
    }
}

TEST_F(GcmBurstTest, TheWireCarriesSpiAnd64BitSequenceNumber) {
    sealed_frame f = seal_one(100, 0x0102030405060708ull, key);
    const uint8_t expect[] = {0x12, 0x34, 0x56, 0x78, 0x05, 0x06, 0x07, 0x08,
                              0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08};
    EXPECT_EQ(std::memcmp(f.bytes.data(), expect, sizeof(expect)), 0);
}

// An independent AES-256-GCM (OpenSSL) opens what IPSec-MB sealed: RFC 4106 nonce and the
// documented AAD, nothing private to this implementation.
TEST_F(GcmBurstTest, OpenSslOpensWhatWasSealed) {
    sealed_frame f = seal_one(1500, 77, key);
    const direction_key k = test_key(7);
    uint8_t nonce[12];
    std::memcpy(nonce, k.salt.data(), 4);
    std::memcpy(nonce + 4, f.bytes.data() + 8, 8);
    uint8_t aad[esp_aad_bytes];
    std::memcpy(aad, f.bytes.data(), esp_prefix_bytes);
    std::memcpy(aad + esp_prefix_bytes, &src, 4);
    std::memcpy(aad + esp_prefix_bytes + 4, &dst, 4);
    const int ct_len = static_cast<int>(f.bytes.size() - esp_prefix_bytes - esp_icv_bytes);
    std::vector<uint8_t> out(ct_len);
    EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
    int n = 0;
    ASSERT_EQ(EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, nullptr, nullptr), 1);
    ASSERT_EQ(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, 12, nullptr), 1);
    ASSERT_EQ(EVP_DecryptInit_ex(ctx, nullptr, nullptr, k.key.data(), nonce), 1);
    ASSERT_EQ(EVP_DecryptUpdate(ctx, nullptr, &n, aad, sizeof(aad)), 1);
    ASSERT_EQ(EVP_DecryptUpdate(ctx, out.data(), &n, f.bytes.data() + esp_prefix_bytes, ct_len), 1);
    ASSERT_EQ(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, 16,
                                  f.bytes.data() + esp_prefix_bytes + ct_len),
              1);
    EXPECT_EQ(EVP_DecryptFinal_ex(ctx, out.data() + n, &n), 1);
    EVP_CIPHER_CTX_free(ctx);
    EXPECT_EQ(std::memcmp(out.data(), f.plain.data(), 1500), 0);
    EXPECT_EQ(out[ct_len - 2], 2);  // pad length: 1500 + 2 + 2 ends on 4 bytes
    EXPECT_EQ(out[ct_len - 1], esp_next_header);
}

TEST_F(GcmBurstTest, EveryFlippedBitFailsToOpen) {
    const sealed_frame original = seal_one(64, 5, key);
    for (std::size_t byte = 0; byte < original.bytes.size(); ++byte) {
        sealed_frame f = original;
        f.bytes[byte] ^= 0x10;
        EXPECT_FALSE(open_one(f, key).ok) << "byte " << byte;
    }
}

TEST_F(GcmBurstTest, AnotherKeyOrAnotherOuterSourceFailsToOpen) {
    sealed_frame f = seal_one(200, 5, key);
    EXPECT_FALSE(open_one(f, other).ok);
    sealed_frame g = seal_one(200, 5, key);
    EXPECT_FALSE(open_one(g, key, 0x030012c6).ok);
}

TEST_F(GcmBurstTest, ABurstOpensEachFrameOnItsOwn) {
    std::vector<sealed_frame> frames;
    for (uint64_t s = 1; s <= gcm_burst::max_burst; ++s) {
        frames.push_back(seal_one(60 + static_cast<uint32_t>(s) * 11, s, s % 3 == 0 ? other : key));
    }
    frames[17].bytes[40] ^= 1;
    std::vector<open_request> requests;
    for (auto& f : frames) {
        const bool by_other = (requests.size() + 1) % 3 == 0;
        requests.push_back({f.bytes.data(), static_cast<uint32_t>(f.bytes.size()),
                            by_other ? &other : &key, src, dst});
    }
    std::vector<open_result> results(requests.size());
    gcm.open(requests.data(), static_cast<unsigned>(requests.size()), results.data());
    for (std::size_t i = 0; i < frames.size(); ++i) {
        EXPECT_EQ(results[i].ok, i != 17) << i;
    }
}

}  // namespace
}  // namespace jakiro::overlay::sealing
