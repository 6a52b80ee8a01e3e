#pragma once
// The sealed overlay in `jakiroctl status` (text and --json): this host's public key and
// policy, and per other host its SAs (sending and receiving epochs) and counters.

#include <sstream>
#include <string>

#include "dataplane/control/json_writer.hh"
#include "dataplane/overlay/sealing/uplink_sealing.hh"

namespace jakiro {

std::string_view encryption_policy_name(overlay::sealing::encryption_policy p);

// Nothing when `sealing` is null (the overlay is plain VXLAN).
void write_overlay_json(const overlay::sealing::uplink_sealing* sealing, json_writer& out);
std::string overlay_text(const overlay::sealing::uplink_sealing* sealing);

}  // namespace jakiro
