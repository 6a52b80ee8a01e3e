#pragma once
// The same metrics as /metrics through DPDK telemetry (rte_telemetry; e.g. dpdk-telemetry.py
// with --file-prefix jakiro-<host>):
//   /jakiro/metrics        the metric names (a list)
//   /jakiro/metric,NAME    one metric: {"<label values joined by />": value} ("value" when it
//                          has no labels); at most 256 entries, as telemetry dicts hold
// Ports' own counters are DPDK's /ethdev/stats,ID already. Telemetry runs callbacks on its
// own thread; each one has the control thread collect the metrics (waiting up to 2 s), so
// the daemon's state is still read by the control thread alone.

namespace jakiro {

class control_server;

// Registers the commands (once, after rte_eal_init); `server` may be null to stop answering.
void register_telemetry(control_server* server);

}  // namespace jakiro
