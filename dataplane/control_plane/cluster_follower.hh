#pragma once
// The control-thread end of the control plane: takes the views the etcd agent builds, makes
// this host's configuration of each (host_view) and applies it through host_manager::apply,
// the same path as `jakiroctl apply` (ports opened/closed, snapshot rebuilt and published by
// the RCU swap, flows that stay allowed untouched). It also keeps control_plane_status.
//
// A delta view (only other hosts' vNICs changed; cluster_records.hh) is applied as peer
// changes through host_manager::apply_peers: the configuration in force and the snapshot are
// patched, and the cost is the change's, not the interest's. A follower that could not apply a
// view asks the agent for a whole one instead of applying deltas on a state they do not fit.
//
// When etcd is away nothing is applied: the state in force stays, and so does forwarding.
// A local vNIC whose port cannot be opened yet (its veth not there) waits and is retried each
// second, without holding back the rest of the change.
//
// Thread-safety: offer() and offer_connection() from any thread (they post to the control
// thread and coalesce: a whole view supersedes every view before it, deltas after it are
// merged into one change); everything else on the control thread.

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "dataplane/control/control_plane_report.hh"
#include "dataplane/control/daemon_state.hh"
#include "dataplane/control/host_manager.hh"
#include "dataplane/control_plane/cluster_records.hh"
#include "dataplane/control_plane/etcd_agent.hh"
#include "dataplane/control_plane/status.hh"

namespace jakiro::control_plane {

class cluster_follower final : public control_plane_report {
  public:
    using poster = std::function<void(std::function<void()>)>;

    // `local`: the host YAML (host section and control:), the part that never comes from etcd.
    cluster_follower(daemon_state& state, host_manager& host, host_config local);

    // Before the ports open (main): the first configuration, from a view read at start-up or,
    // without one, the host alone.
    host_config initial_config(const std::shared_ptr<const cluster_view>& view);
    // Called once the control thread runs: how offers reach it.
    void set_poster(poster post) { _post = std::move(post); }
    // How to ask the agent for a whole view (etcd_agent::request_whole_view).
    void set_whole_view_request(std::function<void()> request) {
        _request_whole = std::move(request);
    }

    void offer(std::shared_ptr<const cluster_view> view,
               std::chrono::steady_clock::time_point received);
    void offer_connection(const connection_event& event);

    // Control thread: applies the newest view offered (main calls it once, for the view of
    // initial_config, before READY=1).
    void apply_pending();
    // Control thread, about once a second: retries vNICs waiting for their port.
    void tick();
    // What `jakiroctl status` prints of it (control/ reads it through control_plane_report).
    std::string text() const override { return render_control_plane_text(_status); }
    void write_json(json_writer& out) const override { write_control_plane_json(out, _status); }

  private:
    // A whole view; true when the state in force is the view's (deltas may follow).
    bool apply_view(const cluster_view& view);
    // Delta views, oldest first, merged into one change.
    void apply_deltas(std::span<const std::shared_ptr<const cluster_view>> views);
    bool apply_config(host_config next, std::string& error);
    void note_latency(std::chrono::steady_clock::time_point received);
    void lost_track(const std::string& why);
    // Hands the uplink's sealing the overlay keys of the hosts' records it has not had yet
    // (overlay_sealing_setup.hh); what its mailbox cannot take now goes at the next tick.
    void offer_overlay_keys(const host_directory& hosts);

    daemon_state& _state;
    host_manager& _host;
    host_config _local;
    poster _post;
    control_plane_status _status;

    std::function<void()> _request_whole;

    std::mutex _mutex;  // guards the three below
    // A whole view (or none) and the deltas after it.
    std::vector<std::shared_ptr<const cluster_view>> _pending;
    std::chrono::steady_clock::time_point _pending_received{};
    bool _scheduled = false;

    // The state in force is the last view's: a delta may be applied on it (control thread).
    bool _in_step = false;
    std::map<std::string, vnic_config> _waiting;   // local vNICs whose port failed to open
    std::shared_ptr<const host_directory> _hosts;  // of the last whole view (control thread)
    std::set<std::pair<uint32_t, std::string>> _keys_offered;  // (underlay address, key)
    bool _keys_waiting = false;  // some key found the sealing's mailbox full
};

}  // namespace jakiro::control_plane
