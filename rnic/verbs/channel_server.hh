#pragma once
// jakirod's end of the verbs channel: each vNIC's RDMA face (DESIGN.md §1, §8a). A vNIC's
// endpoint is a SOCK_SEQPACKET listener bound as an abstract name *inside its tenant's network
// namespace* (verbs_abi/endpoint_address.hh: @jakiro/verbs/mac/<mac> and
// @jakiro/verbs/name/<vnic>), so only that tenant's processes can reach it; at accept and again
// at HELLO the peer's namespace (SO_PEERCRED pid -> /proc/<pid>/ns/net) must be the vNIC's.
// Each connection is one verbs context (or one device scan); its state dies with it. A vNIC
// serves at most its quota's `max_contexts` connections at once, and one that has not said HELLO
// within `hello_timeout` is dropped, so no tenant can hold the server's descriptors or another
// tenant's slots.
//
// The set of endpoints follows the configuration: sync() (from startup and `jakiroctl apply`)
// adds the endpoints of new vNICs, and for removed ones tells every client the device is gone
// (IBV_EVENT_DEVICE_FATAL), destroys its QPs and objects, and closes the listeners; a vNIC's
// RDMA face thus lives and dies with its Ethernet face (host_manager).
//
// Control side only: its own thread, blocking in poll(); it never touches the datapath.
// Thread-safety: start(), stop(), sync() and adopt() are called from one thread at a time (main,
// the control thread, a test); the server thread owns the clients; resources() and stats() may
// be called from any thread; raise_event() and raise_cq_error() from any thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "device_model.hh"
#include "requests.hh"
#include "resources.hh"
#include "rnic/rdmacm/cm_agent.hh"
#include "tenant_namespace.hh"

namespace jakiro::verbs {

// One vNIC's RDMA face as the configuration describes it.
struct endpoint_config {
    vnic_identity identity;
    std::string netns;           // YAML vnics[].netns; "" = the veth peer's namespace of `port`
    std::string port;            // the Ethernet face's devargs (to find the veth peer)
    bool own_namespace = false;  // serve in jakirod's own namespace (tests; never from YAML)
};

struct channel_config {
    std::string host_name;
    uint32_t tenant_mtu = 1450;
    // Abstract-name prefix of every endpoint; tests use their own so they never collide.
    std::string endpoint_prefix = "@jakiro/verbs/";
    std::chrono::milliseconds hello_timeout{2000};
    std::vector<endpoint_config> vnics;  // served from start()
    // The host's mappings and descriptors, shared by every vNIC's objects and connections
    // (rnic/queues/host_reserve.hh); null: an unbounded one of the server's own.
    std::shared_ptr<host_reserve> reserve;
};

struct channel_stats {
    uint64_t accepted = 0;
    uint64_t refused = 0;          // over the vNIC's max_clients
    uint64_t refused_foreign = 0;  // peer outside the vNIC's namespace
    uint64_t hello_timeouts = 0;   // dropped before HELLO
    uint64_t disconnected = 0;
    uint64_t requests = 0;
    uint64_t bad_requests = 0;  // answered with an error status or dropped
    uint64_t vnics_removed = 0;
    // The rdma_cm agents of the vNICs served now (rnic/rdmacm/cm_agent.hh), summed.
    uint64_t cm_commands = 0;
    uint64_t cm_bad_commands = 0;
    uint64_t cm_mads_sent = 0;
    uint64_t cm_mads_received = 0;
    uint64_t cm_mads_dropped = 0;
    uint64_t cm_retransmissions = 0;
    uint64_t cm_timeouts = 0;
    uint64_t cm_rejected_by_policy = 0;
    uint64_t cm_rejected_no_listener = 0;
    uint64_t cm_mads_forged = 0;
};

class channel_server {
    using proto_event_type = verbs_proto::event_type;

  public:
    explicit channel_server(channel_config config);
    ~channel_server();
    channel_server(const channel_server&) = delete;
    channel_server& operator=(const channel_server&) = delete;

    // Starts the thread and serves `config.vnics`; false with `error` set if the server cannot
    // run. A vNIC that cannot be served (its namespace is unknown, or another process holds its
    // name) has no RDMA face: `warnings` says why, and its Ethernet face works regardless.
    bool start(std::string& error, std::string& warnings);
    bool start(std::string& error) {
        std::string warnings;
        return start(error, warnings) && warnings.empty();
    }
    // Tells every client the device is gone (IBV_EVENT_DEVICE_FATAL), closes every
    // connection and listener and joins the thread. Idempotent.
    void stop();

    // Serves exactly `vnics` from now on: endpoints of vNICs no longer listed (or whose
    // identity or namespace changed) are torn down before it returns; new ones are bound;
    // limits of the others change in place. False with `error` naming every vNIC that could
    // not be served (the rest are applied).
    bool sync(const std::vector<endpoint_config>& vnics, std::string& error);
    // One vNIC's face at a time (the vnic control object, control/vnic.hh): serve() binds its
    // endpoint, or changes its limits in place when the same identity is served already (a
    // changed identity or namespace is torn down and bound again); withdraw() tears the face
    // in `slot` down as sync() does for a vNIC no longer listed, before it returns.
    bool serve(const endpoint_config& vnic, std::string& error);
    void withdraw(uint16_t slot);

    // Serves an already connected socket (e.g. one end of a socketpair) as a client of the
    // vNIC in `slot`; takes ownership of `fd`. False (and `fd` closed) if not served.
    bool adopt(int fd, uint16_t slot);

    // The vNIC's by-MAC endpoint address ("@..."), for JAKIRO_VERBS_SOCKET.
    std::string socket_path(uint16_t slot) const;
    std::string name_address(const std::string& vnic) const;
    bool serves(uint16_t slot) const;
    // The PDs, MRs and CQs of a served vNIC (throws std::out_of_range otherwise).
    vnic_resources& resources(uint16_t slot);
    // Queues IBV_EVENT_CQ_ERR for the client that owns `cq_handle`; any thread.
    void raise_cq_error(uint64_t client, uint32_t cq_handle);
    // Queues any async event (QP events from the engine thread) for `client`; any thread.
    void raise_event(uint64_t client, proto_event_type type, uint64_t handle);
    // Gives every vNIC's clients QPs (before start()), run by `engines[identity.engine]`: one
    // engine per worker, each running the QPs of the vNICs its worker owns. `admit` is the
    // security-group check of a peer (may be empty: everything admitted).
    void enable_qps(std::vector<roce::engine*> engines,
                    std::function<int(uint16_t slot, uint32_t remote_ip_be)> admit);
    std::size_t client_count() const { return _client_count.load(std::memory_order_relaxed); }
    // What every vNIC's objects and connections hold of the host; its capacity follows the
    // configuration and the kernel's limits (dataplane/control/rdma_endpoints.hh).
    host_reserve& reserve() const { return *_config.reserve; }
    channel_stats stats() const;

  private:
    struct endpoint;
    struct client {
        int fd = -1;
        int async_fd = -1;               // our end of the async event channel, after HELLO
        int cm_event_fd = -1;            // our end of its rdma_cm event socket (cm_protocol.hh)
        uint64_t cm_channel_cookie = 0;  // SO_COOKIE of the tenant's end: the channel's proof
        pid_t pid = 0;                   // SO_PEERCRED at accept
        account_charge descriptors;      // its descriptors, charged to its vNIC until dropped
        std::chrono::steady_clock::time_point hello_deadline;
        std::shared_ptr<endpoint> ep;
        session s;
    };
    // What sync() hands the server thread.
    struct change {
        std::shared_ptr<endpoint> add;  // or
        uint16_t remove_slot = 0;
        bool remove = false;
    };

    std::shared_ptr<endpoint> make_endpoint(const endpoint_config& spec, std::string& error);
    std::string socket_path_for(const endpoint_config& spec) const;
    qp_support qp_support_for(const vnic_identity& v);
    roce::engine* engine_for(const vnic_identity& v) const;  // null: no such engine
    void post(std::vector<change> changes);  // and wait until the server thread applied them
    void apply_changes();
    void serve();
    bool accept_clients(endpoint& ep, int listener);  // false: out of descriptors
    void add_client(int fd, pid_t pid, const std::shared_ptr<endpoint>& ep);
    bool serve_client(client& c);  // false: drop it
    // An rdma_cm request (cm_protocol.hh) of a client that said HELLO; false: drop it.
    bool serve_cm(client& c, std::span<const std::byte> message, bool truncated,
                  std::span<const int> fds);
    // The client whose rdma_cm channel `fds` proves the caller holds: the one descriptor that
    // came with the command is that channel's event socket (SO_COOKIE). 0 if none.
    uint64_t channel_held_by(const client& c, std::span<const int> fds) const;
    // MADs from QP1 (and to ourselves) to the vNICs' agents, and their timers.
    void serve_gsi();
    std::unique_ptr<rdmacm::cm_agent> make_cm_agent(const vnic_identity& v);
    void drop_client(client& c, bool device_gone);
    void take_adopted();
    void send_pending_events();
    int poll_timeout_ms(bool listen_now) const;

    channel_config _config;
    cq_error_sink _sink;
    std::vector<roce::engine*> _engines;  // [worker]; empty: no QPs
    std::function<int(uint16_t, uint32_t)> _admit;

    mutable std::mutex _endpoints_mutex;  // guards _endpoints (the server thread and sync()
                                          // change it; resources() reads it)
    std::map<uint16_t, std::shared_ptr<endpoint>> _endpoints;
    std::vector<client> _clients;  // server thread only
    struct local_mad {
        uint16_t slot;
        uint32_t from_ip_be;
        rdmacm::mad_buffer mad;
    };
    std::vector<local_mad> _local_mads;  // server thread only: MADs a vNIC sent itself
    uint64_t _next_client_id = 0;        // server thread only
    int _wake_fd = -1;  // eventfd: stop(), adopt(), sync() and events wake the poll

    std::mutex _adopt_mutex;
    std::vector<std::pair<int, uint16_t>> _adopted;  // guarded by _adopt_mutex
    std::vector<change> _changes;                    // guarded by _adopt_mutex
    uint64_t _changes_posted = 0;                    // guarded by _adopt_mutex
    uint64_t _changes_done = 0;                      // guarded by _adopt_mutex
    std::condition_variable _changes_applied;
    struct pending_event {
        uint64_t client;
        proto_event_type type;
        uint64_t handle;
    };
    std::vector<pending_event> _pending_events;  // guarded by _adopt_mutex

    // The agents' counters, summed by the server thread after each round (stats() reads them).
    struct cm_totals {
        std::atomic<uint64_t> commands{0}, bad_commands{0}, mads_sent{0}, mads_received{0},
            mads_dropped{0}, retransmissions{0}, timeouts{0}, rejected_by_policy{0},
            rejected_no_listener{0}, mads_forged{0};
    };
    cm_totals _cm;
    void publish_cm_stats();

    std::atomic<bool> _stopping{false};
    std::atomic<std::size_t> _client_count{0};
    std::atomic<uint64_t> _accepted{0}, _refused{0}, _refused_foreign{0}, _hello_timeouts{0},
        _disconnected{0}, _requests{0}, _bad_requests{0}, _vnics_removed{0};
    std::thread _thread;
};

}  // namespace jakiro::verbs
