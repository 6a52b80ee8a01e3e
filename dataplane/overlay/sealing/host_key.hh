#pragma once
// A host's long-term overlay identity: an X25519 key pair (RFC 7748). The private key lives in
// a file only root may read (YAML `overlay.private_key`); the public key is what other hosts
// hold in their `overlay.peers` (and the etcd host record). Keys are written as WireGuard
// writes them: 32 bytes in standard base64, one line.
//
// Control side only (OpenSSL); the datapath sees derived traffic keys (pair_keys.hh).

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "dataplane/overlay_key_text.hh"

namespace jakiro::overlay::sealing {

using x25519_key = overlay_key;

struct host_key_pair {
    x25519_key private_key{};
    x25519_key public_key{};
};

// The key's text form (dataplane/overlay_key_text.hh).
inline std::optional<x25519_key> parse_key(const std::string& base64) {
    return parse_overlay_key(base64);
}
inline std::string format_key(const x25519_key& key) {
    return format_overlay_key(key);
}

// A fresh key pair from the system's random source.
host_key_pair generate_key_pair();
// The public key of `private_key` (clamped as RFC 7748 §5 says).
x25519_key public_key_of(const x25519_key& private_key);

// Reads the private key file at `path`. Refused (nullopt, `error` says why) when it cannot be
// read, is not one base64 key, or is readable or writable by anyone but its owner: a key the
// tenants' processes could read would let them forge this host's frames.
std::optional<host_key_pair> load_private_key(const std::string& path, std::string& error);

// X25519(own private, peer public): the pair's shared secret, the same on both hosts. nullopt
// for a peer key that yields the all-zero secret (a low-order point, RFC 7748 §6.1).
std::optional<x25519_key> shared_secret(const x25519_key& own_private,
                                        const x25519_key& peer_public);

}  // namespace jakiro::overlay::sealing
