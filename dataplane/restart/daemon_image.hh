#pragma once
// The dataplane's sections of the state image (handover/sections.def, docs/restart.md): the
// daemon's identity and restart history, its listeners (metrics, the tap uplink), the resolved
// underlay neighbours, every worker's conntrack entries and the counters /metrics exports.
//
// Thread-safety: write_image on the control thread while the workers are stopped; read_image
// in main before the workers and the control thread start.

#include <chrono>
#include <string>
#include <vector>

#include "dataplane/control/daemon_state.hh"
#include "handover/image.hh"

namespace jakiro {

class control_server;

// What the old process passes besides daemon_state.
struct image_sources {
    std::chrono::steady_clock::time_point frozen;  // when its workers stopped
    int metrics_listener = -1;
    std::string tap_iface;  // the tap uplink ("" if the uplink is something else)
    int tap_fd = -1;
    std::map<std::string, double> counters;  // what /metrics says now
};

void write_image(handover::image_writer& w, const daemon_state& state, const image_sources& s);

// Before the ports open: the history, the listeners to inherit (the tap is registered with
// vnet_face::inherit_tap; the metrics listener returned), the counter bases. False with the
// reader's error.
struct early_inheritance {
    int metrics_listener = -1;
    std::chrono::steady_clock::time_point frozen;
    std::string from_version;
};
bool read_image_early(handover::image_reader& r, daemon_state& state, early_inheritance& out);
// After the ports opened and the first snapshot is published, before the workers run: the
// neighbours and the flows, into the workers' tables by vNIC name.
bool read_image_late(handover::image_reader& r, daemon_state& state,
                     const std::vector<worker_context*>& workers);

}  // namespace jakiro
