#pragma once
// The security associations this host keeps with one other host: one sending SA (this host's
// current epoch towards it) and the receiving SAs of the peer's epochs still in use (current
// and previous, so frames sealed before a rekey and arriving after it still open).
//
// Written by the uplink's worker alone; counters and epochs are single-writer relaxed atomics
// the control thread reads for `jakiroctl status` and /metrics.

#include <cstdint>

#include "dataplane/counters.hh"
#include "dataplane/overlay/sealing/gcm_burst.hh"
#include "dataplane/overlay/sealing/pair_keys.hh"
#include "dataplane/overlay/sealing/replay_window.hh"

namespace jakiro::overlay::sealing {

enum class encryption_policy : uint8_t {
    off,       // plaintext VXLAN both ways (a Linux VTEP, or a host not yet keyed)
    optional,  // sealed when both hosts have keys, plaintext accepted
    required,  // sealed always; plaintext from that host is dropped, no key: nothing sent
};

struct peer_counters {
    counter sealed;          // frames sent sealed
    counter sealed_bytes;    // their plaintext bytes (VXLAN header + inner frame)
    counter opened;          // frames received that authenticated
    counter plaintext_sent;  // frames sent as plain VXLAN (policy off or optional unkeyed)
    counter plaintext_received;
    counter auth_failed;
    counter replayed;
    counter plaintext_refused;
    counter tx_rekeys;  // epochs this host moved on to towards the peer
    counter rx_epochs;  // new epochs of the peer's seen and accepted
};

struct rx_sa {
    gcm_key key;
    uint32_t epoch = 0;
    bool valid = false;
    replay_window window;
};

struct peer_sa {
    uint32_t ip_be = 0;  // the peer's underlay address, network order
    encryption_policy policy = encryption_policy::off;
    // Its public key is known (and this host has one). Set by the worker (a key learned while
    // running), read by the control thread too: relaxed atomic accesses.
    bool keyed = false;
    x25519_key shared{};
    pair_end self;
    pair_end peer;

    // Sending.
    gcm_key tx_key;
    uint32_t tx_epoch = 0;
    uint64_t tx_seq = 0;          // last sequence number used; the first frame is 1
    uint64_t tx_epoch_bytes = 0;  // sealed under tx_epoch
    uint64_t tx_epoch_start_ns = 0;

    // Receiving: [0] the newest epoch that authenticated, [1] the one before it.
    rx_sa rx[2];
    // The epoch after rx[0], derived when rx[0] was adopted: the peer's next rekey opens at
    // once, whatever an attacker's forged SPIs keep in the candidate slot.
    rx_sa next;
    // Any other newer epoch (the peer restarted and reserved a new range) derived on sight
    // of its SPI, at most once per derive interval; adopted, like `next`, when a frame of it
    // authenticates.
    rx_sa candidate;
    uint64_t last_derive_ns = 0;

    // Mirrors for readers on the control thread.
    uint32_t shown_tx_epoch = 0;
    uint32_t shown_rx_epoch = 0;
    peer_counters counters;

    bool seals() const {
        return __atomic_load_n(&keyed, __ATOMIC_RELAXED) && policy != encryption_policy::off;
    }
};

}  // namespace jakiro::overlay::sealing
