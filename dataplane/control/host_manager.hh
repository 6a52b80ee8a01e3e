#pragma once
// Owns the host's configuration at run time: creates the ports, builds and publishes the
// forwarding snapshot, and applies a new configuration live (`jakiroctl apply`): security
// groups, rules, peers and vNICs added or removed, without restarting and without touching
// flows that stay allowed.
//
// Thread-safety: start() runs before the worker; apply() runs on the control thread only.

#include <rte_mempool.h>

#include <map>
#include <string>
#include <vector>

#include "daemon_state.hh"

namespace jakiro {

class host_manager {
  public:
    host_manager(daemon_state& state, rte_mempool* pool) : _state(state), _pool(pool) {}

    // Creates the uplink and vNIC ports and publishes the first snapshot.
    bool start(std::string& error);

    // Applies `next`; on failure nothing changes and the reason is returned in `error`.
    // `summary` says what changed.
    bool apply(host_config next, std::string& summary, std::string& error);

    // Stops and closes every port (after the worker has stopped).
    void stop_ports();

    // The datapath slot of each vNIC of `config` (which must be the running one).
    std::vector<uint16_t> slots_of(const host_config& config) const;

  private:
    struct vnic_binding {
        uint16_t slot;
        uint16_t port;
        std::string devargs;
    };
    bool open_port(const std::string& role, const std::string& devargs, uint16_t& port,
                   std::string& error);
    void close_port(uint16_t port);
    bool publish(const host_config& config, std::string& error);
    void refresh_port_records();

    daemon_state& _state;
    rte_mempool* _pool;
    uint16_t _uplink_port = 0;
    std::map<std::string, vnic_binding> _vnics;  // by vNIC name
    // Slots are never reused while the daemon runs, so per-slot counters always belong to one
    // vNIC (a removed vNIC's numbers do not flow into a new one's).
    uint16_t _next_slot = 0;
    uint32_t _generation = 0;
};

}  // namespace jakiro
