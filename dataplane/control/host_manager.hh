#pragma once
// Owns the host's configuration at run time: opens the uplink, creates and destroys the vNICs
// (control/vnic.hh: each owns its Ethernet and RDMA faces), builds and publishes the forwarding
// snapshot, and applies a new configuration live (`jakiroctl apply`): security groups, rules,
// peers and vNICs added or removed, without restarting and without touching flows that stay
// allowed.
//
// Thread-safety: start() and serve_rdma() run before the worker; apply() runs on the control
// thread only; stop() after the worker and the control thread have stopped.

#include <rte_mempool.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dataplane/control/daemon_state.hh"
#include "dataplane/control/vnic.hh"

namespace jakiro {

class host_manager {
  public:
    host_manager(daemon_state& state, rte_mempool* pool) : _state(state), _pool(pool) {}

    // Opens the uplink and the vNICs' Ethernet faces and publishes the first snapshot.
    bool start(std::string& error);
    // The uplink's port id, once start() opened it.
    uint16_t uplink_port() const { return _uplink_port; }

    // Opens every vNIC's RDMA face on `server` (once it runs) and keeps them in step with
    // apply() from then on (`_state.verbs`). False with `warnings` naming each vNIC that has no
    // RDMA face; its Ethernet face works regardless.
    bool serve_rdma(verbs::channel_server& server, std::string& warnings);

    // Applies `next`; on failure nothing changes and the reason is returned in `error`.
    // `summary` says what changed.
    bool apply(host_config next, std::string& summary, std::string& error);

    // Closes every vNIC (RDMA face, then port) and stops the uplink, after the worker has
    // stopped.
    void stop();

  private:
    // The snapshot for `config` (nullptr with `error` set), and its publication (waits until the
    // worker has left the previous one).
    std::unique_ptr<datapath_tables> build(const host_config& config, std::string& error) const;
    void publish(std::unique_ptr<datapath_tables> tables);
    void refresh_port_records();
    // Gives slot `_next_slot` to the least loaded worker (control/worker_assignment.hh).
    void place_next_slot();

    daemon_state& _state;
    rte_mempool* _pool;
    uint16_t _uplink_port = 0;
    std::map<std::string, std::unique_ptr<vnic>> _vnics;  // by vNIC name
    // Slots are never reused while the daemon runs, so per-slot counters always belong to one
    // vNIC (a removed vNIC's numbers do not flow into a new one's).
    uint16_t _next_slot = 0;
    // The worker that owns each slot's vNIC, chosen when the slot is taken and kept for life.
    std::vector<uint8_t> _worker_of_slot;
    uint32_t _generation = 0;
};

}  // namespace jakiro
