#pragma once
// jakirod's etcd client side: follows what this host's vNICs need under /jakiro/v1/ (its
// VPCs, found through its homes/ index; cluster_records.hh) and hands each new state to the
// control thread; registers this host under a lease.
//
//  - start: a full read of the interest (one revision), then a watch of the whole prefix from
//    the next revision, whose events outside the interest are dropped by key; a VPC that
//    enters the interest (its first local vNIC) is read at the revision that brought it in;
//  - etcd gone (the watch ends, a call fails): reported as disconnected, the last state stays
//    in force, and the watch resumes from the last revision seen once etcd answers again;
//  - the revision compacted away meanwhile (the watch is refused with compact_revision): a
//    full read again, and the new state replaces the old one whole;
//  - liveness: hosts/<name> (durable: the underlay address) and alive/<name> (under a lease
//    of control.lease_ttl seconds, kept alive every third of it, granted again if it expired).
//
// Threads (none of them DPDK lcores; the workers never see any of this):
//  - the watch thread reads responses and queues their events;
//  - the build thread applies queued events to its copy of the records and builds the view
//    (parsing and validation: the expensive part), so a burst of events becomes one view;
//  - the lease thread keeps the registration alive.
// The callbacks run on the build and watch threads: they must only hand the data over
// (cluster_follower::offer does, to the control thread). A view is whole or, when only other
// hosts' vNICs changed, a delta on the view before it (cluster_view).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "dataplane/config/host_config.hh"
#include "dataplane/control_plane/cluster_records.hh"
#include "dataplane/control_plane/etcd_client.hh"

namespace jakiro::control_plane {

struct connection_event {
    bool connected = false;
    int64_t revision = 0;  // the last revision seen
    std::string error;     // why it is disconnected
};

class etcd_agent {
  public:
    using view_handler = std::function<void(std::shared_ptr<const cluster_view>,
                                            std::chrono::steady_clock::time_point received)>;
    using connection_handler = std::function<void(const connection_event&)>;

    etcd_agent(control_config control, std::string host_name, uint32_t underlay_ip);
    ~etcd_agent();
    etcd_agent(const etcd_agent&) = delete;
    etcd_agent& operator=(const etcd_agent&) = delete;

    // Before start(): one full read, bounded by `timeout`; null with `error` set if etcd did
    // not answer (jakirod then starts with no cluster state and converges when it does).
    std::shared_ptr<const cluster_view> read_once(std::chrono::milliseconds timeout,
                                                  std::string& error);

    // Before start(): this host's overlay public key (base64), registered in its host record
    // so that the other hosts seal to it (empty: the overlay is not sealed here).
    void set_overlay_key(std::string key) { _overlay_key = std::move(key); }

    void start(view_handler on_view, connection_handler on_connection);
    void stop();
    // Any thread: the next view is a whole one (a reader of delta views that lost track of
    // them asks for it; cluster_records::build_view).
    void request_whole_view();

  private:
    struct queued_event {
        bool reset = false;   // a full read: the records below replace everything
        bool legacy = false;  // ... read with the legacy vNIC keys (no schema marker)
        bool whole = false;   // no records: the next view is to be whole
        std::vector<key_value> puts;
        std::vector<std::string> deletes;
        int64_t revision = 0;
        std::chrono::steady_clock::time_point received;
    };
    // What this host follows, all at one revision (cluster_records.hh: interest); `legacy`:
    // the cluster has no schema marker, so the legacy vNIC keys were read too.
    bool read_interest(std::vector<key_value>& out, int64_t& revision, bool& legacy,
                       std::string& error, std::chrono::milliseconds timeout);
    static std::vector<std::string> vpc_prefixes(const std::string& vpc);
    // Build thread: reads the VPCs the last event pulled into the interest, at its revision.
    bool pull_vpcs(int64_t revision);
    bool full_read(std::string& error);
    void watch_loop();
    void build_loop();
    void lease_loop();
    void enqueue(queued_event event);
    void report(bool connected, const std::string& error);
    bool register_host(int64_t lease, std::string& error);
    void sleep_for(std::chrono::milliseconds duration);

    control_config _control;
    std::string _host_name;
    uint32_t _underlay_ip;
    std::string _overlay_key;
    etcd_client _client;
    view_handler _on_view;
    connection_handler _on_connection;

    std::atomic<bool> _stopping{false};
    std::mutex _mutex;  // guards everything below
    std::condition_variable _wake;
    std::deque<queued_event> _queue;
    etcd_client::watch_stream* _watch = nullptr;  // to cancel it from stop()
    int64_t _revision = 0;                        // the last revision seen (watch thread)
    bool _connected = false;
    bool _reported = false;
    bool _resync = false;  // set by the build thread: the watch starts over with a full read
    std::string _last_error;

    cluster_records _records;  // build thread only (and read_once before start)
    std::thread _watch_thread;
    std::thread _build_thread;
    std::thread _lease_thread;
};

}  // namespace jakiro::control_plane
