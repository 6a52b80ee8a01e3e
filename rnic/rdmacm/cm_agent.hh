#pragma once
// One vNIC's rdma_cm agent: what the kernel's ucma + rdma_cm + IB CM do for a port,
// for the rdma_cm ids of that vNIC's processes. It executes the ucma ABI v4 commands the shim
// forwards (cm_protocol.hh) and speaks IB CM MADs (cm_mad.hh) with the peers' agents — or a
// kernel rdma_cm behind a real RNIC — through QP1 of the vNIC (the engine's GSI port).
//
//   address resolution   any unicast IPv4 of the VPC: the overlay (VLT of *this* vNIC's VPC)
//                        routes the MADs, so a red tenant dialling blue's address reaches red's
//                        vNIC of that address, never blue's
//   connect              REQ (RDMA-CM IP header in its private data) → REP → RTU, MRA, REJ,
//                        retransmission on a timer, UNREACHABLE after the retries
//   disconnect           DREQ → DREP
//   UD                   SIDR_REQ → SIDR_REP
//   security groups      a REQ or SIDR_REQ from a peer the vNIC's rdma rules refuse gets a REJ
//                        (status consumer-defined) and is counted
//   limits               at most `max_ids` ids per vNIC and `max_channels` channels; a command
//                        that would exceed them fails with EDQUOT/EMFILE, so no tenant exhausts
//                        another's CM (each vNIC has its own agent)
//
// Every command's fields are checked (sizes, ids owned by the caller, states, address
// families); bad ones get the errno the kernel would give. Pointers in commands are never
// read: the shim copies what they point to. MADs off the wire are decoded by cm_mad.hh and
// matched to connections by communication ID *and* peer address.
//
// Thread-safety: none; one thread (the channel server's) runs everything here.

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "handover/image.hh"
#include "rnic/rdmacm/cm_mad.hh"
#include "rnic/rdmacm/cma_header.hh"
#include "rnic/rdmacm/path_timing.hh"

namespace jakiro::rdmacm {

struct agent_identity {
    uint16_t slot = 0;
    uint32_t ip_be = 0;
    uint64_t node_guid_be = 0;  // as ibv_get_device_guid() returns it (network order)
    uint8_t path_mtu = 3;       // IB MTU enum (3 = 1024)
    gid ip6{};                  // the vNIC's IPv6 address, if it has one (else zero)
};

// The vNIC's rdma_cm quota (YAML `vnics[].rdma`: max_cm_ids, max_cm_backlog,
// max_cm_held_reqs; max_contexts for the channels), changed live with set_limits().
struct agent_limits {
    // Ids at once: the applications' own, those peers' requests created for them, orphans.
    uint32_t max_ids = 1024;
    uint32_t max_channels = 256;
    uint32_t max_queued_events = 1024;  // per channel, while its socket is full
    // Requests from peers (REQ, SIDR_REQ) that the vNIC's applications have not taken yet
    // (accepted or rejected), summed over its listeners; each listener also keeps its own
    // backlog. Beyond it a request is dropped and its sender retries, as from a full TCP
    // backlog: peers can never hold more than this many of the vNIC's ids.
    uint32_t max_backlog = 128;
    // REQs that wait for a listener to appear (hold_for_listener); beyond it the REJ goes at
    // once. A peer holding more of them than a newcomer gives its oldest up to it.
    uint32_t max_held_reqs = 16;
};

struct agent_stats {
    uint64_t commands = 0;
    uint64_t bad_commands = 0;  // answered with an errno
    uint64_t mads_sent = 0;
    uint64_t mads_received = 0;
    uint64_t mads_dropped = 0;  // undecodable, unexpected or for no connection
    // REQ/SIDR_REQ whose RDMA-CM IP header names another source than the packet's (also in
    // mads_dropped): a forgery, or a NAT between peers, which the overlay never has.
    uint64_t mads_forged = 0;
    uint64_t retransmissions = 0;
    uint64_t rejected_by_policy = 0;  // REQ/SIDR_REQ refused by the security groups
    uint64_t rejected_no_listener = 0;
    uint64_t timeouts = 0;
    uint64_t events = 0;
    uint64_t events_dropped = 0;  // a channel that does not read
    // At the vNIC's bounds (agent_limits): ids refused (CREATE_ID's EDQUOT, or a peer's
    // request rejected for want of an id), requests dropped over a backlog, REQs that could
    // not wait for a listener (rejected at once, or given up to another peer's).
    uint64_t ids_refused = 0;
    uint64_t requests_over_backlog = 0;
    uint64_t held_reqs_refused = 0;
};

class cm_agent {
  public:
    using clock = std::chrono::steady_clock;
    // Addresses are GIDs (cma_header.hh): IPv4-mapped, or IPv6.
    // Sends one MAD to QP1 of `dst` (the vNIC's own addresses included).
    using mad_sender = std::function<void(const gid& dst, const mad_buffer& mad)>;
    // 0 if the vNIC's security groups let it talk RDMA with `remote`, else an errno.
    using admission = std::function<int(const gid& remote)>;

    cm_agent(agent_identity self, mad_sender send, admission admit, agent_limits limits = {});
    ~cm_agent();
    cm_agent(const cm_agent&) = delete;
    cm_agent& operator=(const cm_agent&) = delete;

    // A channel (one open of the rdma_cm device) of client `client`; events go to `event_fd`
    // (borrowed: the caller closes it after close_channel). False when the vNIC has
    // max_channels already (or the client has one).
    bool open_channel(uint64_t client, int event_fd);
    // The client went away: its ids are destroyed (connected peers get a DREQ, requests a REJ).
    void close_channel(uint64_t client);
    bool has_channel(uint64_t client) const { return _channels.count(client) != 0; }

    // One ucma command (header + struct, as written to the device) of `client`. `option`:
    // SET_OPTION's value. `held_channel`: the client whose channel the caller proved it holds
    // (the caller checked the descriptor that came with the command; 0: none), which is what
    // MIGRATE_ID takes its id from, as the kernel takes the source channel by descriptor: a
    // number in the command names nothing. On 0, `response` holds the response struct (at most
    // the command's `out` bytes; the kernel's size otherwise). Else a positive errno.
    int command(uint64_t client, std::span<const uint8_t> cmd, std::span<const uint8_t> option,
                std::vector<uint8_t>& response, uint64_t held_channel = 0);

    // A MAD that arrived on QP1 from `src` (already past the ICRC and Q_Key checks).
    void on_mad(const gid& src, std::span<const uint8_t> mad);
    void on_mad(uint32_t src_ip_be, std::span<const uint8_t> mad) {
        on_mad(ipv4_gid(src_ip_be), mad);
    }
    // Retransmissions and timeouts due by `now`; flushes queued events.
    void run_timers(clock::time_point now);
    // When run_timers has something to do next (max() if nothing).
    clock::time_point next_deadline() const;

    const agent_stats& stats() const { return _stats; }
    std::size_t id_count() const { return _ids.size(); }

    // A state image (handover/image.hh, cm_agent_image.cc), written into the section its caller
    // opened: every id with its state machine and what its timer resends, the REQs waiting for
    // a listener, each channel's undelivered events, the counters and what numbers ids,
    // transactions and communication IDs next. restore() into an agent just made (no channel,
    // no id): `event_fd_of(client)` is each channel's event socket as its endpoint restored it
    // (-1: none, which fails). False with the reader failed when the image is not one it can use.
    void save(handover::image_writer& w) const;
    bool restore(handover::section_reader& r, const std::function<int(uint64_t)>& event_fd_of);
    // The quota, live: lowering a bound refuses what comes next and keeps what is there.
    void set_limits(const agent_limits& limits) { _limits = limits; }
    const agent_limits& limits() const { return _limits; }

  private:
    enum class state : uint8_t {
        idle,
        addr_resolved,
        route_resolved,
        listening,
        req_sent,
        req_rcvd,
        rep_sent,
        rep_rcvd,
        established,
        dreq_sent,
        dreq_rcvd,
        disconnected,
        sidr_req_sent,
        sidr_req_rcvd,
        sidr_done,
    };
    struct cm_id {
        uint32_t handle = 0;
        uint64_t client = 0;
        uint64_t uid = 0;
        uint16_t ps = 0;
        uint8_t qp_type = 0;  // ibv_qp_type
        state st = state::idle;
        bool bound = false;
        bool inet6 = false;  // bound or resolved with AF_INET6: reported so
        gid src_ip{};        // zero: any
        uint16_t src_port = 0;
        gid dst_ip{};
        uint16_t dst_port = 0;
        int backlog = 0;
        uint32_t listener = 0;  // the listener a request came in on
        bool have_route = false;
        // Connection (IB CM).
        uint32_t local_comm_id = 0;
        uint32_t remote_comm_id = 0;
        uint64_t transaction_id = 0;
        uint32_t local_qpn = 0;
        uint32_t remote_qpn = 0;
        uint32_t sq_psn = 0;
        uint32_t rq_psn = 0;
        uint32_t remote_qkey = 0;
        uint8_t responder_resources = 0;
        uint8_t initiator_depth = 0;
        uint8_t retry_count = 7;
        uint8_t rnr_retry_count = 7;
        uint8_t path_mtu = 3;
        bool srq = false;
        uint8_t tos = 0;
        uint8_t ack_timeout = default_ack_timeout;  // RDMA_OPTION_ID_ACK_TIMEOUT changes it
        // What the timer resends, until answered.
        std::optional<mad_buffer> outstanding;
        clock::time_point deadline = clock::time_point::max();
        int retries_left = 0;
        // SIDR_REP: sent once, untracked (SIDR has no acknowledgement); a retransmitted
        // SIDR_REQ, meaning it was lost, gets it again.
        std::optional<mad_buffer> sidr_reply;
    };
    struct channel {
        uint64_t client = 0;
        int event_fd = -1;
        std::deque<std::vector<uint8_t>> queued;  // events the socket had no room for
    };

    // ucma commands (cmd.cc style: one function each).
    int create_id(uint64_t client, std::span<const uint8_t> in, std::vector<uint8_t>& out);
    int destroy_id(uint64_t client, std::span<const uint8_t> in, std::vector<uint8_t>& out);
    int bind_ip(uint64_t client, std::span<const uint8_t> in, bool sockaddr_storage);
    int resolve_ip(uint64_t client, std::span<const uint8_t> in, bool sockaddr_storage);
    int resolve_route(uint64_t client, std::span<const uint8_t> in);
    int query_route(uint64_t client, std::span<const uint8_t> in, std::vector<uint8_t>& out);
    int query(uint64_t client, std::span<const uint8_t> in, std::vector<uint8_t>& out);
    int connect(uint64_t client, std::span<const uint8_t> in);
    int listen(uint64_t client, std::span<const uint8_t> in);
    int accept(uint64_t client, std::span<const uint8_t> in);
    int reject(uint64_t client, std::span<const uint8_t> in);
    int disconnect(uint64_t client, std::span<const uint8_t> in);
    int init_qp_attr(uint64_t client, std::span<const uint8_t> in, std::vector<uint8_t>& out);
    int set_option(uint64_t client, std::span<const uint8_t> in, std::span<const uint8_t> option);
    int notify(uint64_t client, std::span<const uint8_t> in);
    int migrate_id(uint64_t client, uint64_t held_channel, std::span<const uint8_t> in,
                   std::vector<uint8_t>& out);

    // MADs. `may_hold`: a REQ that finds no listener may wait for one (held_req).
    void on_req(const gid& src, uint64_t tid, const cm_req& m, bool may_hold = true);
    void on_rep(const gid& src, const cm_rep& m);
    void on_rtu(const gid& src, const cm_rtu& m);
    void on_rej(const gid& src, const cm_rej& m);
    void on_mra(const gid& src, const cm_mra& m);
    void on_dreq(const gid& src, uint64_t tid, const cm_dreq& m);
    void on_drep(const gid& src, const cm_drep& m);
    void on_sidr_req(const gid& src, uint64_t tid, const cm_sidr_req& m);
    void on_sidr_rep(const gid& src, const cm_sidr_rep& m);

    // A REQ/SIDR_REQ is for us when it names an IP service, carries an RDMA-CM IP header
    // addressed to this vNIC, and that header's source is the packet's real one (the inner IPv4
    // source the overlay delivered it with); otherwise it is dropped, counted (mads_dropped,
    // and mads_forged for a foreign source).
    bool addressed_to_us(uint64_t service_id, const std::optional<cma_ip_header>& ip,
                         const gid& src) {
        if (!is_ip_service(service_id) || !ip || !is_own(ip->dst_ip)) {
            ++_stats.mads_dropped;
            return false;
        }
        if (ip->src_ip != src) {
            forged();
            return false;
        }
        return true;
    }
    // One of the vNIC's addresses: its IPv4 one, or its IPv6 one.
    bool is_own(const gid& ip) const {
        return ip == ipv4_gid(_self.ip_be) || (ip == _self.ip6 && _self.ip6 != gid{});
    }
    // The vNIC's address of `peer`'s family, the source towards it.
    gid own_towards(const gid& peer) const {
        return is_ipv4_gid(peer) ? ipv4_gid(_self.ip_be) : _self.ip6;
    }
    void forged() {
        ++_stats.mads_dropped;
        ++_stats.mads_forged;
    }
    cm_id* find(uint64_t client, uint32_t handle);
    // Most commands name an id: reads the command (EINVAL if short) and finds that id among
    // the client's own (ENOENT otherwise, whoever else's it is).
    template <typename Command>
    int read_for_id(uint64_t client, std::span<const uint8_t> in, Command& c, cm_id*& id);
    // The connection a peer's message names by our communication ID, from that peer only.
    cm_id* by_comm_id(uint32_t local_comm_id, const gid& src);
    cm_id* new_id(uint64_t client, uint16_t ps, uint8_t qp_type);
    void erase_id(uint32_t handle);
    cm_id* find_listener(uint16_t ps, uint16_t port, const gid& dst);
    bool port_in_use(uint16_t ps, uint16_t port, const cm_id* except) const;
    uint16_t ephemeral_port(uint16_t ps);
    uint32_t new_comm_id();
    void send(const gid& dst, const cm_message& m);
    // Sends and keeps it for retransmission until answered.
    void send_tracked(cm_id& id, const cm_message& m);
    void settle(cm_id& id);  // the outstanding MAD was answered
    void send_rej(const gid& dst, uint64_t tid, uint32_t local_comm_id, uint32_t remote_comm_id,
                  message_kind what, rej_reason reason);
    // What destroying `id` does on the wire; true if it lives on as an orphan (no owner, no
    // events) retransmitting its DREQ until answered.
    bool release(cm_id& id);

    // Events (struct rdma_ucm_event_resp) to the id's channel.
    struct event_params;
    void raise(const cm_id& id, uint32_t event, int32_t status, const event_params* p,
               uint32_t charged_to, uint64_t uid, uint32_t reported_id);
    void raise(const cm_id& id, uint32_t event, int32_t status, const event_params* p = nullptr);
    void flush(channel& ch);

    agent_identity _self;
    mad_sender _send;
    admission _admit;
    agent_limits _limits;
    agent_stats _stats;
    std::unordered_map<uint32_t, cm_id> _ids;
    std::unordered_map<uint32_t, uint32_t> _by_comm_id;  // local comm id -> handle

    // A REQ that found no listener waits `hold_for_listener` before its REJ (invalid service
    // ID): a program that listens again right after a connection, as perftest -R does between
    // its control and its data connection, may be dialled before it listens (by a few hundred
    // µs, or by a 67 ms ACK timeout when its last control message's ACK was lost), and the
    // active side waits 268 ms for an answer anyway. A listen() on its port takes it at once.
    // At most `max_held_reqs` wait, and only from peers the security groups admit (QP1 is not
    // filtered, so a refused peer would otherwise take them); when they are taken, a peer that
    // holds more of them than the newcomer gives its oldest up (its REJ goes at once), so one
    // member of the VPC cannot keep every other's REQ from waiting; otherwise the newcomer's
    // REJ goes at once.
    struct held_req {
        gid src{};
        uint64_t tid = 0;
        cm_req req;
        clock::time_point until;
    };
    static constexpr auto hold_for_listener = std::chrono::milliseconds(100);
    std::vector<held_req> _held;
    bool hold(const gid& src, uint64_t tid, const cm_req& m);
    void take_held(uint16_t ps, uint16_t port);  // a listener on `port` appeared
    // Requests from peers the applications have not taken yet: of `listener`, or of every
    // listener (0).
    std::size_t waiting_requests(uint32_t listener = 0) const;
    // Whether one more request may wait for `listener` (its backlog and the vNIC's); counted
    // when not.
    bool backlog_has_room(const cm_id& listener);
    std::map<uint64_t, channel> _channels;  // by client
    uint32_t _next_handle = 1;
    uint64_t _next_tid;
    uint32_t _comm_id_seed;
};

}  // namespace jakiro::rdmacm
