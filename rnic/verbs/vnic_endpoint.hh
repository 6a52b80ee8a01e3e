#pragma once
// One vNIC's RDMA face, served by a thread of its own: its listeners (abstract sockets bound in
// the tenant's namespace), its clients' verbs and rdma_cm requests, its rdma_cm agent's MADs
// (its own QP1 queues, gsi_port.hh) and timers, its clients' async events.
//
// A thread per vNIC, because a verbs call may wait: on the worker that runs the vNIC's QPs (up
// to 5 s, engine::call), on a large registration, on whatever a hostile tenant can make one of
// its calls cost. Whatever it is, it holds up this vNIC's clients alone: no other vNIC's verbs
// or rdma_cm call, MAD or timer waits behind it (docs/threat-model.md, control-plane time).
//
// Restart without tenants noticing (docs/restart.md; endpoint_image.cc): freeze() stops the
// thread and tells nobody, save() writes the frozen face into a state image, hand_over() lets go
// of this process's side once a successor has taken it (restore()), thaw() serves again when it
// has not.
//
// Owned by channel_server, which builds it (binding the listeners, making the resources) and
// withdraws it. One class in four files, one role each: its life and loop (vnic_endpoint.cc),
// its clients (client_session.cc), its rdma_cm agent (cm_relay.cc), its restart
// (endpoint_image.cc). Thread-safety: start(), stop(), freeze(), thaw(), save() and hand_over()
// from the owner's thread; set_quota(), adopt(), post_event(), report() and client_count() from
// any thread; everything else runs on the endpoint's thread.

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "handover/image.hh"
#include "rnic/gsi_port.hh"
#include "rnic/rdmacm/cm_agent.hh"
#include "rnic/verbs/device_model.hh"
#include "rnic/verbs/requests.hh"
#include "rnic/verbs/resources.hh"
#include "rnic/verbs/tenant_namespace.hh"
#include "verbs_abi/protocol.hh"

namespace jakiro::rnic {
class engine;
}

namespace jakiro::verbs {

// One vNIC's RDMA face as the configuration describes it.
struct endpoint_config {
    vnic_identity identity;
    std::string netns;           // YAML vnics[].netns; "" = the veth peer's namespace of `port`
    std::string port;            // the Ethernet face's devargs (to find the veth peer)
    bool own_namespace = false;  // serve in jakirod's own namespace (tests; never from YAML)
};

// What one vNIC's face counted since it was served.
struct endpoint_counters {
    uint64_t accepted = 0;
    uint64_t refused = 0;          // over the vNIC's max_contexts
    uint64_t refused_foreign = 0;  // peer outside the vNIC's namespace
    uint64_t hello_timeouts = 0;   // dropped before HELLO
    uint64_t disconnected = 0;
    uint64_t requests = 0;
    uint64_t bad_requests = 0;  // answered with an error status or dropped

    endpoint_counters& operator+=(const endpoint_counters& o) {
        accepted += o.accepted;
        refused += o.refused;
        refused_foreign += o.refused_foreign;
        hello_timeouts += o.hello_timeouts;
        disconnected += o.disconnected;
        requests += o.requests;
        bad_requests += o.bad_requests;
        return *this;
    }
};

// One vNIC's face as jakiroctl and /metrics show it.
struct endpoint_report {
    uint16_t slot = 0;
    std::string name;
    std::size_t clients = 0;
    endpoint_counters counters;
    rdmacm::agent_stats cm;  // all zero without an agent (no engine)
    std::size_t cm_ids = 0;  // rdma_cm ids held now
    rnic::gsi_counters qp1;
    vnic_quota quota;  // the bounds in force
};

class vnic_endpoint {
  public:
    using event_type = verbs_proto::event_type;

    // What every endpoint of one channel server shares.
    struct settings {
        std::string host_name;
        uint32_t tenant_mtu = 1450;
        std::chrono::milliseconds hello_timeout{2000};
        // The server's: client ids are unique across its endpoints, and carry the slot in their
        // top 16 bits so that an event for a client finds its endpoint (client_slot()).
        std::atomic<uint64_t>* client_ids = nullptr;
    };
    // What the channel server made for the vNIC before it is served.
    struct parts {
        endpoint_config spec;
        tenant_namespace ns;
        std::vector<int> listeners;  // owned from here on
        std::unique_ptr<vnic_resources> resources;
        // Runs the vNIC's QPs and QP1 (its rdma_cm agent speaks through it); none: no QPs and
        // no rdma_cm.
        rnic::engine* engine = nullptr;
        // The vNIC's security groups for a peer (0: admitted); empty admits everyone. An IPv6
        // peer goes to admit_ipv6 (empty with `admit` set: refused).
        std::function<int(uint32_t remote_ip_be)> admit;
        std::function<int(const rnic::ipv6_address& remote)> admit_ipv6;
    };

    static uint16_t client_slot(uint64_t client) { return static_cast<uint16_t>(client >> 48); }

    vnic_endpoint(parts p, settings s);
    // stop()s.
    ~vnic_endpoint();
    vnic_endpoint(const vnic_endpoint&) = delete;
    vnic_endpoint& operator=(const vnic_endpoint&) = delete;

    // Starts the endpoint's thread; false (with `error`) if it cannot run.
    bool start(std::string& error);
    // Tells every client the device is gone (IBV_EVENT_DEVICE_FATAL), closes every connection
    // and listener, joins the thread and destroys everything the clients created (QPs leave
    // the engine, MRs are unmapped, QP1's queues go). Returns when that is done. Idempotent.
    void stop();

    // Stops the thread WITHOUT a word to any client and without closing or destroying
    // anything (the opposite of stop()): connections, listeners, async and rdma_cm channels,
    // memfds, objects and QP1's queues stay; requests wait in the sockets, events and MADs in
    // their queues. Idempotent.
    void freeze();
    bool frozen() const { return _frozen; }
    // A frozen endpoint serves again (the take-over failed): false with `error` if its thread
    // cannot start.
    bool thaw(std::string& error);
    // The frozen endpoint into the section its caller opened: its listeners and clients (their
    // sockets, pids, sessions), undelivered events, its counters, every object its clients
    // created (vnic_resources::save) and its rdma_cm agent. Descriptors go by index; those
    // opened for the image stay open until hand_over(), thaw() or destruction. Needs the
    // engine's workers stopped (the QPs are read directly). False with `error` otherwise.
    bool save(handover::image_writer& w, std::string& error);
    // After save() was taken over (the successor runs): this process's side goes, silently,
    // leaving everything the tenants hold to the successor: no DEVICE_FATAL, no DREQ, no page
    // given back; QPs and QP1's queues leave this process's engine. Frozen endpoints only.
    void hand_over();
    // In a successor: the endpoint `save()` wrote, from `p` made as for a new vNIC except for
    // its listeners (the image's) and with `s` as the server's; not started (start() it). The
    // server's client ids continue past the restored ones. Null with the reader failed when the
    // image is not this vNIC's or cannot be used; then nothing a tenant holds was touched.
    static std::unique_ptr<vnic_endpoint> restore(parts p, settings s, handover::section_reader& r);

    const endpoint_config& spec() const { return _spec; }
    vnic_resources& resources() { return *_resources; }
    // The quota, live: the resources take it now, the rdma_cm agent and QP1 with the thread's
    // next turn. Lowering refuses new objects and keeps existing ones.
    void set_quota(const vnic_quota& quota);
    // Serves an already connected socket (a test's socketpair) as a client; takes `fd`.
    void adopt(int fd);
    // Queues an async event for `client`, sent by the endpoint's thread.
    void post_event(uint64_t client, event_type type, uint64_t handle);
    std::size_t client_count() const { return _client_count.load(std::memory_order_relaxed); }
    endpoint_report report() const;

  private:
    struct client {
        int fd = -1;
        int async_fd = -1;               // our end of the async event channel, after HELLO
        int cm_event_fd = -1;            // our end of its rdma_cm event socket (cm_protocol.hh)
        uint64_t cm_channel_cookie = 0;  // SO_COOKIE of the tenant's end: the channel's proof
        pid_t pid = 0;                   // SO_PEERCRED at accept
        account_charge descriptors;      // its descriptors, charged to its vNIC until dropped
        std::chrono::steady_clock::time_point hello_deadline;
        session s;
    };
    struct pending_event {
        uint64_t client;
        event_type type;
        uint64_t handle;
    };
    struct local_mad {
        rdmacm::gid from;
        rdmacm::mad_buffer mad;
    };

    // ---- the endpoint's life and its thread's loop (vnic_endpoint.cc)
    void launch();  // the thread, serving
    void serve();
    void take_posted();  // adopted sockets, events, a new quota
    int poll_timeout_ms(bool listen_now) const;
    void publish();  // the report's snapshot of the agent

    // ---- its clients, one verbs context each (client_session.cc)
    bool accept_clients(int listener);  // false: out of descriptors
    void add_client(int fd, pid_t pid);
    bool serve_client(client& c);  // false: drop it
    void drop_client(client& c, bool device_gone);
    void drop_all_clients();  // IBV_EVENT_DEVICE_FATAL to each, then gone

    // ---- its rdma_cm agent: commands, MADs, timers (cm_relay.cc)
    void make_cm_agent(std::function<int(uint32_t)> admit,
                       std::function<int(const rnic::ipv6_address&)> admit_ipv6);
    // An rdma_cm request (cm_protocol.hh) of a client that said HELLO; false: drop it.
    bool serve_cm(client& c, std::span<const std::byte> message, bool truncated,
                  std::span<const int> fds);
    // The client whose rdma_cm channel `fds` proves the caller holds: the one descriptor that
    // came with the command is that channel's event socket (SO_COOKIE). 0 if none.
    uint64_t channel_held_by(std::span<const int> fds) const;
    // MADs from QP1 and to ourselves to the agent, and its timers.
    void serve_gsi();

    // ---- across a restart (endpoint_image.cc)
    void close_image_fds();

    endpoint_config _spec;
    tenant_namespace _ns;
    std::vector<int> _listeners;
    std::unique_ptr<vnic_resources> _resources;
    device_context _device;
    rnic::engine* _engine = nullptr;
    bool _qp1_open = false;  // the vNIC's queues in the engine's gsi_port (they write _wake_fd)
    std::unique_ptr<rdmacm::cm_agent> _cm;
    settings _settings;

    std::vector<client> _clients;        // the thread's
    std::vector<local_mad> _local_mads;  // the thread's: MADs the vNIC sent itself
    int _wake_fd = -1;                   // eventfd: stop(), adopt(), events, a quota, MADs arrived
    std::atomic<bool> _stopping{false};
    bool _freezing = false;       // the thread leaves its clients as they are
    bool _frozen = false;         // owner's thread
    std::vector<int> _image_fds;  // opened for save()'s image
    std::thread _thread;

    mutable std::mutex _mutex;  // guards what follows
    std::vector<int> _adopted;
    std::vector<pending_event> _events;
    std::optional<vnic_quota> _new_quota;
    rdmacm::agent_stats _cm_snapshot;
    std::size_t _cm_ids = 0;
    vnic_quota _quota;  // the bounds in force (the resources hold their own copy)

    std::atomic<std::size_t> _client_count{0};
    struct {
        std::atomic<uint64_t> accepted{0}, refused{0}, refused_foreign{0}, hello_timeouts{0},
            disconnected{0}, requests{0}, bad_requests{0};
    } _counters;
};

}  // namespace jakiro::verbs
