#include "dataplane/overlay/sealing/host_key.hh"

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>

#include <fstream>
#include <memory>
#include <sstream>

namespace jakiro::overlay::sealing {

namespace {

struct pkey_free {
    void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct pkey_ctx_free {
    void operator()(EVP_PKEY_CTX* c) const { EVP_PKEY_CTX_free(c); }
};
using pkey_ptr = std::unique_ptr<EVP_PKEY, pkey_free>;
using pkey_ctx_ptr = std::unique_ptr<EVP_PKEY_CTX, pkey_ctx_free>;

}  // namespace

host_key_pair generate_key_pair() {
    host_key_pair pair;
    RAND_bytes(pair.private_key.data(), 32);
    pair.public_key = public_key_of(pair.private_key);
    return pair;
}

x25519_key public_key_of(const x25519_key& private_key) {
    x25519_key pub{};
    pkey_ptr key(EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, private_key.data(), 32));
    std::size_t len = pub.size();
    if (key) {
        EVP_PKEY_get_raw_public_key(key.get(), pub.data(), &len);
    }
    return pub;
}

std::optional<host_key_pair> load_private_key(const std::string& path, std::string& error) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        error = "overlay private key " + path + ": cannot stat it";
        return std::nullopt;
    }
    if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
        error = "overlay private key " + path +
                " is open to group or others (chmod 600 it): tenants could forge this host";
        return std::nullopt;
    }
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) {
        error = "overlay private key " + path + ": cannot read it";
        return std::nullopt;
    }
    const auto key = parse_key(text.str());
    if (!key) {
        error = "overlay private key " + path + " is not one base64 X25519 key (44 characters)";
        return std::nullopt;
    }
    return host_key_pair{*key, public_key_of(*key)};
}

std::optional<x25519_key> shared_secret(const x25519_key& own_private,
                                        const x25519_key& peer_public) {
    pkey_ptr own(EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, own_private.data(), 32));
    pkey_ptr peer(EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, peer_public.data(), 32));
    if (!own || !peer) {
        return std::nullopt;
    }
    pkey_ctx_ptr ctx(EVP_PKEY_CTX_new(own.get(), nullptr));
    x25519_key secret{};
    std::size_t len = secret.size();
    // OpenSSL refuses an all-zero result (a low-order peer point) in EVP_PKEY_derive.
    if (!ctx || EVP_PKEY_derive_init(ctx.get()) <= 0 ||
        EVP_PKEY_derive_set_peer(ctx.get(), peer.get()) <= 0 ||
        EVP_PKEY_derive(ctx.get(), secret.data(), &len) <= 0 || len != secret.size()) {
        return std::nullopt;
    }
    return secret;
}

}  // namespace jakiro::overlay::sealing
