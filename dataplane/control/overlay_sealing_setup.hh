#pragma once
// The sealed overlay as a host's YAML asks for it: the private key read from its root-only
// file, each `overlay.hosts[]` entry's key and policy, and this run's range of sending epochs
// reserved in the epoch file (a key, and so a GCM nonce, is never used by two runs).
// Control side, at start.

#include <cstdint>
#include <memory>
#include <string>

#include "dataplane/config/host_config.hh"
#include "dataplane/control/daemon_state.hh"
#include "dataplane/overlay/sealing/uplink_sealing.hh"

namespace jakiro {

// Epochs one run reserves at once; a run that rekeys more often than this stops rekeying (its
// last epoch's 64-bit sequence numbers cannot run out).
constexpr uint32_t epochs_per_run = 1u << 16;

// Reads the epoch file at `path` (absent: none used yet), reserves [first, limit) for this run
// past every epoch reserved before and past `now_s` (so a lost file still moves forward with
// the clock), and writes `limit` back (fsync, rename). False and `error` when it cannot.
bool reserve_epochs(const std::string& path, uint64_t now_s, uint32_t& first, uint32_t& limit,
                    std::string& error);

// nullptr with `error` empty: the YAML seals nothing (no object, no cost). nullptr with
// `error`: jakirod must not start (an unreadable key, an epoch file it cannot write).
std::unique_ptr<overlay::sealing::uplink_sealing> sealing_from_config(const host_config& config,
                                                                      std::string& error);

// A key learned while running (the etcd host record of the host at `underlay_ip`, host order):
// handed to the uplink's sealing (uplink_sealing::offer_key). True when handed over or when
// nothing here seals; false when the sealing's mailbox is full (offer it again later). A key
// that is not one (the loader checked it) is dropped as handed over.
bool offer_overlay_key(const daemon_state& state, uint32_t underlay_ip, const std::string& key);

}  // namespace jakiro
