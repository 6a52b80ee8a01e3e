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
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "dataplane/control/daemon_state.hh"
#include "dataplane/control/table_patcher.hh"
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

    // Applies a change of peers only (the configuration's other parts stay): the peers are
    // patched in the configuration in force, and the snapshot is patched from the one in force
    // (table_patcher.hh), or built whole when it cannot be. False with `error` when a peer to
    // remove is not in the configuration or the snapshot cannot be built; nothing changed then.
    bool apply_peers(std::span<const peer_change> changes, std::string& error);
    // After a full apply, so the next apply_peers costs only its change (see table_patcher).
    void prepare_patches();
    // How many snapshots were patched rather than built, since start.
    uint64_t patched_publications() const { return _patched; }

    // Closes every vNIC (RDMA face, then port) and stops the uplink, after the worker has
    // stopped.
    void stop();

  private:
    // The snapshot for `config` (nullptr with `error` set), and its publication (waits until the
    // worker has left the previous one).
    std::unique_ptr<datapath_tables> build(const host_config& config, std::string& error) const;
    void publish(std::unique_ptr<datapath_tables> tables);
    // The vNICs' slots in config.vnics order.
    std::vector<uint16_t> slots_of(const host_config& config) const;
    // Where each peer of the configuration in force is in its `peers` (by VPC index and IPv4
    // address, which the VPC makes unique), built when first needed after a full apply.
    void index_peers();
    static uint64_t peer_key(uint32_t vpc, uint32_t ip) { return uint64_t{vpc} << 32 | ip; }
    // Takes `before` out of the configuration's peers and puts `after` in (either may be absent).
    bool swap_peer(const std::optional<peer_config>& before,
                   const std::optional<peer_config>& after);
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
    table_patcher _patcher;
    std::unordered_map<uint64_t, std::size_t> _peer_index;
    bool _peers_indexed = false;
    uint64_t _patched = 0;
};

}  // namespace jakiro
