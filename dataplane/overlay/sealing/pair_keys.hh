#pragma once
// The traffic keys of one host pair for one epoch, one key each way:
//
//   key(sender -> receiver, epoch) = HKDF-SHA256(
//       salt = "jakiro overlay v1",
//       IKM  = X25519(sender, receiver)              (the same on both hosts),
//       info = sender public key | receiver public key | sender underlay IPv4 |
//              receiver underlay IPv4 | epoch (32-bit, big endian),
//       L    = 36)  ->  AES-256-GCM key (32 bytes) | nonce salt (4 bytes, RFC 4106 §4)
//
// The identities and the direction are in the derivation, so the two directions never share
// a key (nor a nonce space), and a third host, which has not the pair's secret, derives
// nothing that opens the pair's frames. A new epoch is a new key: rekeying needs no message.
//
// Control side and rare worker use (once per new epoch of a peer, rate-bounded): OpenSSL.

#include <array>
#include <cstdint>
#include <optional>

#include "dataplane/overlay/sealing/host_key.hh"

namespace jakiro::overlay::sealing {

struct direction_key {
    std::array<uint8_t, 32> key{};
    std::array<uint8_t, 4> salt{};
    bool operator==(const direction_key&) const = default;
};

// One end of a pair, as both hosts name it: public key and underlay address (host order).
struct pair_end {
    x25519_key public_key{};
    uint32_t underlay_ip = 0;
};

// The key frames from `sender` to `receiver` are sealed with in `epoch`, given the pair's
// shared secret (host_key.hh shared_secret). nullopt only if OpenSSL fails.
std::optional<direction_key> derive_direction_key(const x25519_key& shared, const pair_end& sender,
                                                  const pair_end& receiver, uint32_t epoch);

}  // namespace jakiro::overlay::sealing
