#pragma once
// jakirod's end of the verbs channel: each vNIC's RDMA face (docs/architecture.md §1,
// docs/threat-model.md). A vNIC's endpoint is a SOCK_SEQPACKET listener bound as an abstract name
// *inside its tenant's network namespace* (verbs_abi/endpoint_address.hh:
// @jakiro/verbs/mac/<mac> and @jakiro/verbs/name/<vnic>), so only that tenant's processes can reach
// it; at accept and again at HELLO the peer's namespace (SO_PEERCRED pid -> /proc/<pid>/ns/net)
// must be the vNIC's. Each connection is one verbs context (or one device scan); its state dies
// with it. A vNIC serves at most its quota's `max_contexts` connections at once, and one that has
// not said HELLO within `hello_timeout` is dropped, so no tenant can hold the server's descriptors
// or another tenant's slots.
//
// The set of endpoints follows the configuration: sync() (from startup and `jakiroctl apply`)
// adds the endpoints of new vNICs, and for removed ones tells every client the device is gone
// (IBV_EVENT_DEVICE_FATAL), destroys its QPs and objects, and closes the listeners; a vNIC's
// RDMA face thus lives and dies with its Ethernet face (host_manager).
//
// Every vNIC's face is served by a thread of its own (vnic_endpoint.hh), so that one vNIC's
// slow or stuck call never delays another vNIC's verbs or rdma_cm calls.
//
// Restart without tenants noticing (docs/restart.md; channel_server_image.cc): the old process
// freeze()s every face, save()s them into the state image, and hand_over()s once the successor
// runs (or thaw()s when it does not); the successor restore()s them before start(), which then
// serves the configuration as sync() does (restored faces still configured are kept as they
// are, the others withdrawn as removed vNICs are).
//
// Control side only: it never touches the datapath. Thread-safety: start(), stop(), sync(),
// serve() and withdraw() from any thread, one at a time (they serialize); adopt(),
// resources(), stats(), reports(), raise_event() and raise_cq_error() from any thread.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rnic/verbs/device_model.hh"
#include "rnic/verbs/resources.hh"
#include "rnic/verbs/vnic_endpoint.hh"

namespace jakiro::verbs {

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

// Every vNIC's face summed, removed vNICs' counts included (they never go down).
struct channel_stats {
    endpoint_counters faces;  // connections and requests of every vNIC's face
    uint64_t vnics_removed = 0;
    // The rdma_cm agents of the vNICs (rnic/rdmacm/cm_agent.hh), summed.
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

    // Serves `config.vnics` from now on; false with `error` set if the server cannot run. A
    // vNIC that cannot be served (its namespace is unknown, or another process holds its
    // name) has no RDMA face: `warnings` says why, and its Ethernet face works regardless.
    bool start(std::string& error, std::string& warnings);
    bool start(std::string& error) {
        std::string warnings;
        return start(error, warnings) && warnings.empty();
    }
    // Tells every client the device is gone (IBV_EVENT_DEVICE_FATAL), closes every
    // connection and listener and joins every vNIC's thread. Idempotent.
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
    // security-group check of a peer (may be empty: everything admitted); `admit_ipv6` that of
    // an IPv6 peer (empty with `admit` set: IPv6 peers are refused).
    void enable_qps(
        std::vector<rnic::engine*> engines,
        std::function<int(uint16_t slot, uint32_t remote_ip_be)> admit,
        std::function<int(uint16_t slot, const rnic::ipv6_address& remote)> admit_ipv6 = {});
    std::size_t client_count() const;

    // Restart (see the top): every face frozen, saved into the section rdma_faces, let go or
    // served again. save() needs the engines' workers stopped. False with `error` when a face
    // cannot be saved or served again.
    void freeze();
    bool thaw(std::string& error);
    bool save(handover::image_writer& w, std::string& error);
    void hand_over();
    // In a successor, before start(): every face of the image's rdma_faces section, served
    // again. All or nothing: false with `error` (and the image failed), and no face restored,
    // when one cannot be; nothing a tenant holds was touched then.
    bool restore(handover::image_reader& image, std::string& error);
    // What every vNIC's objects and connections hold of the host; its capacity follows the
    // configuration and the kernel's limits (dataplane/control/rdma_endpoints.hh).
    host_reserve& reserve() const { return *_config.reserve; }
    channel_stats stats() const;
    // One row per vNIC served now, by slot.
    std::vector<endpoint_report> reports() const;

  private:
    // `image`: the face restored from a state image (no listeners bound: they are in it).
    std::unique_ptr<vnic_endpoint> make_endpoint(const endpoint_config& spec, std::string& error,
                                                 handover::section_reader* image = nullptr);
    std::string socket_path_for(const endpoint_config& spec) const;
    qp_support qp_support_for(const vnic_identity& v);
    rnic::engine* engine_for(const vnic_identity& v) const;  // null: no such engine
    void withdraw(uint16_t slot, bool removed);
    std::vector<vnic_endpoint*> served_endpoints() const;  // a snapshot of _endpoints
    // Stops the endpoint (before it returns) and keeps what it counted in _retired; `removed`:
    // the configuration no longer has it (vnics_removed), rather than jakirod stopping.
    void retire(std::unique_ptr<vnic_endpoint> ep, bool removed);

    channel_config _config;
    cq_error_sink _sink;
    std::vector<rnic::engine*> _engines;  // [worker]; empty: no QPs
    std::function<int(uint16_t, uint32_t)> _admit;
    std::function<int(uint16_t, const rnic::ipv6_address&)> _admit_ipv6;
    std::atomic<uint64_t> _client_ids{0};

    std::mutex _changes_mutex;  // one sync/serve/withdraw/stop at a time
    bool _running = false;      // guarded by _changes_mutex
    // Guards _endpoints and _retired: changes take it briefly (never while an endpoint
    // stops), readers (resources(), raise_event(), stats()) too.
    mutable std::mutex _endpoints_mutex;
    std::map<uint16_t, std::unique_ptr<vnic_endpoint>> _endpoints;
    channel_stats _retired;  // what withdrawn vNICs counted
};

}  // namespace jakiro::verbs
