#pragma once
// The QoS section of the state image (handover/sections.def `qos_buckets`, docs/restart.md):
// every vNIC's DHTB buckets (egress: the vNIC's and its classes' min and max; ingress: the
// meter's), its packet-rate bucket, and each worker's uplink bucket, so that a restarted
// jakirod's buckets continue where its predecessor's were instead of starting full (a shaped
// tenant would otherwise get a burst beyond its rate at every restart).
//
// Tokens are stored with the time they were counted at, on CLOCK_MONOTONIC (the workers'
// clock, worker/clock.hh), which every process of the host shares: the successor credits the
// time since, the blackout included, at its own rates, as for any idle time. vNICs go by name
// (the successor's slots are its own); a vNIC its configuration no longer has, or no longer
// shapes, is not carried. An image without the section leaves every bucket full, as before.
//
// Thread-safety: write on the control thread while the workers are stopped; read in main
// before the workers run (the carried state waits in each worker's shaper and policer until
// the worker's first sync).

#include <cstdint>
#include <string>
#include <vector>

#include "handover/image.hh"

namespace jakiro {

struct worker_context;

// Which worker owns each vNIC slot, and its name ("": no vNIC).
template <class Worker>
struct bucket_owners {
    const std::vector<std::string>& slot_names;
    const std::vector<uint8_t>& slot_workers;
    const std::vector<Worker*>& workers;
};

void write_qos_buckets(handover::image_writer& w,
                       const bucket_owners<const worker_context>& owners);
// Hands each carried bucket to the worker that now owns its vNIC; `carried`: the vNICs whose
// buckets continue. False with the reader's error.
bool read_qos_buckets(handover::image_reader& r, const bucket_owners<worker_context>& owners,
                      uint64_t now_ns, uint64_t& carried);

}  // namespace jakiro
