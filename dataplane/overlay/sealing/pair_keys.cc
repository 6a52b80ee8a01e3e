#include "dataplane/overlay/sealing/pair_keys.hh"

#include <openssl/evp.h>
#include <openssl/kdf.h>

#include <memory>

namespace jakiro::overlay::sealing {

namespace {

constexpr char hkdf_salt[] = "jakiro overlay v1";

void put_be32(uint8_t* out, uint32_t v) {
    out[0] = static_cast<uint8_t>(v >> 24);
    out[1] = static_cast<uint8_t>(v >> 16);
    out[2] = static_cast<uint8_t>(v >> 8);
    out[3] = static_cast<uint8_t>(v);
}

struct ctx_free {
    void operator()(EVP_PKEY_CTX* c) const { EVP_PKEY_CTX_free(c); }
};

}  // namespace

std::optional<direction_key> derive_direction_key(const x25519_key& shared, const pair_end& sender,
                                                  const pair_end& receiver, uint32_t epoch) {
    uint8_t info[32 + 32 + 4 + 4 + 4];
    std::copy(sender.public_key.begin(), sender.public_key.end(), info);
    std::copy(receiver.public_key.begin(), receiver.public_key.end(), info + 32);
    put_be32(info + 64, sender.underlay_ip);
    put_be32(info + 68, receiver.underlay_ip);
    put_be32(info + 72, epoch);

    std::unique_ptr<EVP_PKEY_CTX, ctx_free> ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr));
    uint8_t out[36];
    std::size_t len = sizeof(out);
    if (!ctx || EVP_PKEY_derive_init(ctx.get()) <= 0 ||
        EVP_PKEY_CTX_set_hkdf_md(ctx.get(), EVP_sha256()) <= 0 ||
        EVP_PKEY_CTX_set1_hkdf_salt(ctx.get(), reinterpret_cast<const unsigned char*>(hkdf_salt),
                                    sizeof(hkdf_salt) - 1) <= 0 ||
        EVP_PKEY_CTX_set1_hkdf_key(ctx.get(), shared.data(), static_cast<int>(shared.size())) <=
            0 ||
        EVP_PKEY_CTX_add1_hkdf_info(ctx.get(), info, sizeof(info)) <= 0 ||
        EVP_PKEY_derive(ctx.get(), out, &len) <= 0 || len != sizeof(out)) {
        return std::nullopt;
    }
    direction_key key;
    std::copy(out, out + 32, key.key.begin());
    std::copy(out + 32, out + 36, key.salt.begin());
    return key;
}

}  // namespace jakiro::overlay::sealing
