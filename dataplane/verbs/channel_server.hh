#pragma once
// jakirod's end of the verbs channel (DESIGN.md §1, "RDMA face"): one SOCK_SEQPACKET listening
// socket per vNIC at <dir>/<vNIC MAC>.sock, plus <dir>/by-name/<vNIC>.sock pointing to it for
// `jakiro-run --vnic`. Path sockets are visible from every network namespace, so a tenant's
// shim finds its vNIC's socket by the MAC of its eth0. Each connection is one verbs context
// (or one device scan); its state dies with it.
//
// Control side only: its own thread, blocking in poll(); it never touches the datapath.
// Thread-safety: start(), stop() and adopt() are called from one thread (main or a test);
// everything else runs on the server thread; stats() and client_count() read atomics;
// resources() hands out the vNIC's objects for the engine (see resources.hh for what may be
// called from where), and raise_cq_error() may be called from any thread.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "config/host_config.hh"
#include "device_model.hh"
#include "requests.hh"
#include "resources.hh"

namespace jakiro::verbs {

constexpr const char* default_socket_dir = "/run/jakiro/verbs";

struct channel_config {
    std::string host_name;
    uint32_t tenant_mtu = 1450;
    std::string socket_dir = default_socket_dir;
    std::vector<vnic_identity> vnics;
};

// The vNICs and MTU of a host configuration, copied: the server thread must not read the
// host_config that `jakiroctl apply` replaces on the control thread.
channel_config make_channel_config(const host_config& config);
// A vNIC's YAML `rdma:` quota as vnic_resources takes it (at startup, and on `apply` through
// resources(i).set_quota()).
vnic_quota quota_of(const rdma_config& rdma);

struct channel_stats {
    uint64_t accepted = 0;
    uint64_t refused = 0;  // over max_clients
    uint64_t disconnected = 0;
    uint64_t requests = 0;
    uint64_t bad_requests = 0;  // answered with an error status or dropped
};

class channel_server {
    using proto_event_type = verbs_proto::event_type;

  public:
    // More clients than this are refused (each holds two descriptors in jakirod).
    static constexpr std::size_t max_clients = 4096;

    explicit channel_server(channel_config config);
    ~channel_server();
    channel_server(const channel_server&) = delete;
    channel_server& operator=(const channel_server&) = delete;

    // Binds every vNIC's socket and starts the thread; false with `error` set if a socket
    // cannot be created or another live jakirod already serves it.
    bool start(std::string& error);
    // Tells every client the device is gone (IBV_EVENT_DEVICE_FATAL), closes every
    // connection, removes the sockets and joins the thread. Idempotent.
    void stop();

    // Serves an already connected socket (e.g. one end of a socketpair) as a client of
    // vNIC `vnic_index`; takes ownership of `fd`. False (and `fd` closed) if not running.
    bool adopt(int fd, std::size_t vnic_index);

    std::string socket_path(std::size_t vnic_index) const;
    // The PDs, MRs and CQs of a vNIC (its mr_table is what the engine looks keys up in).
    vnic_resources& resources(std::size_t vnic_index) { return *_resources.at(vnic_index); }
    // Queues IBV_EVENT_CQ_ERR for the client that owns `cq_handle`; any thread. CQs call it
    // when they overflow.
    void raise_cq_error(uint64_t client, uint32_t cq_handle);
    // Queues any async event (QP events from the engine thread) for `client`; any thread.
    void raise_event(uint64_t client, proto_event_type type, uint64_t handle);
    // Gives every vNIC's clients QPs run by `engine` (before start()); `admit` is the RTR
    // security-group check (may be empty: everything admitted).
    void enable_qps(roce::engine* engine,
                    std::function<int(uint16_t slot, uint32_t remote_ip_be)> admit);
    std::size_t client_count() const { return _client_count.load(std::memory_order_relaxed); }
    channel_stats stats() const;

  private:
    struct listener {
        int fd = -1;
        std::string path;  // <dir>/<mac>.sock
        std::string link;  // <dir>/by-name/<vnic>.sock, "" if not ours
    };
    struct client {
        int fd = -1;
        int async_fd = -1;  // our end of the async event channel, after HELLO
        std::size_t vnic = 0;
        session s;
    };

    bool open_listener(std::size_t vnic_index, std::string& error);
    void link_by_name(listener& l, const std::string& vnic_name);
    void close_listeners();
    void serve();
    bool accept_clients(std::size_t vnic_index);  // false: out of descriptors
    void add_client(int fd, std::size_t vnic_index);
    bool serve_client(client& c);  // false: drop it
    void drop_client(client& c, bool device_gone);
    void take_adopted();
    void send_pending_events();

    channel_config _config;
    std::vector<std::unique_ptr<vnic_resources>> _resources;  // one per vNIC
    std::vector<device_context> _devices;  // one per vNIC, points into _config and _resources
    std::vector<listener> _listeners;
    std::vector<client> _clients;  // server thread only
    uint64_t _next_client_id = 0;  // server thread only
    int _wake_fd = -1;             // eventfd: stop() and adopt() wake the poll

    std::mutex _adopt_mutex;
    std::vector<std::pair<int, std::size_t>> _adopted;  // guarded by _adopt_mutex
    struct pending_event {
        uint64_t client;
        proto_event_type type;
        uint64_t handle;
    };
    std::vector<pending_event> _pending_events;  // guarded by _adopt_mutex

    std::atomic<bool> _stopping{false};
    std::atomic<std::size_t> _client_count{0};
    std::atomic<uint64_t> _accepted{0}, _refused{0}, _disconnected{0}, _requests{0},
        _bad_requests{0};
    std::thread _thread;
};

}  // namespace jakiro::verbs
