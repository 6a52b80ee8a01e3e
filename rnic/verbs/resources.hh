#pragma once
// The verbs objects of one vNIC in jakirod: protection domains, memory regions (mr_table) and
// completion queues and queue pairs, each owned by the client connection that created it. Every
// request is validated here (ownership, access flags, sizes within the limits ibv_devinfo
// advertises, the descriptors that come with it), held to the vNIC's quota (quota.hh: EDQUOT
// beyond it) and answered with 0 or an errno; destroying an
// object still in use answers EBUSY as libibverbs does; a client that goes away loses everything it
// owned (release_client: unmapped, closed).
//
// Thread-safety: the verbs (alloc_pd ... release_client) run on the vNIC's endpoint thread.
// mrs().find() is for any thread (see mr_table.hh); find_cq(), count(), quota() and
// set_quota() take the mutex that the verbs hold while they change the tables, so tests,
// jakiroctl and `apply` may call them from any thread.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "handover/image.hh"
#include "rnic/engine.hh"
#include "rnic/queues/cq_ring.hh"
#include "rnic/queues/key_allocator.hh"
#include "rnic/queues/mr_table.hh"
#include "rnic/queues/srq_ring.hh"
#include "rnic/verbs/quota.hh"
#include "verbs_abi/protocol.hh"

namespace jakiro::verbs {

class mapped_files;  // rnic/queues/mapped_files.hh

struct cq_created {
    uint32_t handle = 0;
    uint32_t capacity = 0;
    uint64_t ring_bytes = 0;
    int ring_fd = -1;  // the memfd for the shim; the caller sends and closes it
};

struct qp_created {
    uint32_t handle = 0;  // == QPN
    uint32_t sq_capacity = 0;
    uint32_t rq_capacity = 0;
    uint32_t max_send_sge = 0;
    uint32_t max_recv_sge = 0;
    uint32_t max_inline = 0;
    uint64_t ring_bytes = 0;
    int ring_fd = -1;      // the memfd for the shim; the caller sends and closes it
    int doorbell_fd = -1;  // a duplicate of the vNIC's doorbell page; likewise
};

struct srq_created {
    uint32_t handle = 0;
    uint32_t capacity = 0;
    uint32_t max_sge = 0;
    uint64_t ring_bytes = 0;
    int ring_fd = -1;  // the memfd for the shim; the caller sends and closes it
};

struct resource_counts {
    std::size_t pds = 0;
    std::size_t mrs = 0;
    std::size_t cqs = 0;
    std::size_t qps = 0;
    std::size_t srqs = 0;
    uint64_t mr_bytes = 0;  // registered, summed over the MRs
    uint64_t cqes = 0;      // CQ ring slots
    uint64_t wqes = 0;      // SQ, RQ and SRQ ring slots
    std::size_t mws = 0;    // memory windows
};

// What a vNIC holds of the host and what it was refused (`jakiroctl qps --json`, /metrics).
struct memory_report {
    uint64_t mrs = 0;         // registrations alive: published, or pinned after dereg_mr
    uint64_t mr_bytes = 0;    // their bytes (rdma.max_mrs and max_mr_bytes count these)
    uint64_t mrs_pinned = 0;  // deregistered, still pinned by work requests (still charged)
    uint64_t mr_bytes_pinned = 0;
    host_amounts held;                // mappings and descriptors charged to the vNIC now
    host_amounts share;               // what the host reserve guarantees it
    host_amounts refused;             // refusals at the host reserve (over its share, host full)
    uint64_t quota_refusals = 0;      // EDQUOT answers (any rdma: quota)
    uint64_t cq_resizes = 0;          // ibv_resize_cq that took effect
    uint64_t cq_entries_moved = 0;    // completions they moved, copied off the worker
    uint64_t cq_resizes_refused = 0;  // refused for a consumer index that makes no sense
};

// 0 if `fd` may back an MR's [offset, offset + span): a shmem memfd sealed against shrinking
// (resources.cc says why), else EBADF or EINVAL.
int check_region_fd(int fd, uint64_t offset, uint64_t span);

// What a vNIC needs to have QPs: the engine that runs them and who the vNIC is on the wire.
struct qp_support {
    rnic::engine* engine = nullptr;
    rnic::qp_endpoint local;
    rnic::qp_event_sink events;
    rnic::qp_device_limits limits;
    // Security groups for every address vector a modify sets (docs/architecture.md §7): 0, or
    // EACCES when no `rdma` rule lets this vNIC talk to `remote_ip_be` in both directions. Unset:
    // everything is admitted.
    std::function<int(uint32_t remote_ip_be)> admit;
    // The same for an IPv6 peer (a GID that is not IPv4-mapped). Unset while `admit` is set:
    // refused (ENETUNREACH), as a peer no policy can be asked about.
    std::function<int(const rnic::ipv6_address& remote)> admit_ipv6;
};

class vnic_resources {
  public:
    // `lim`: the engine's limits (engine_limits()); every request is held to them and to
    // `quota`, whichever is smaller. `reserve`: the host's mappings and descriptors, shared by
    // every vNIC (null: a reserve of this vNIC's own, unbounded).
    explicit vnic_resources(const verbs_proto::limits& lim, cq_error_sink sink = {},
                            const vnic_quota& quota = {},
                            std::shared_ptr<host_reserve> reserve = nullptr);
    ~vnic_resources();
    vnic_resources(const vnic_resources&) = delete;
    vnic_resources& operator=(const vnic_resources&) = delete;

    int alloc_pd(uint64_t client, uint32_t& pd);
    // EBUSY while MRs or QPs use it.
    int dealloc_pd(uint64_t client, uint32_t pd);

    // `memfd` is borrowed: the region is mapped from it, so the caller closes it afterwards.
    int reg_mr(uint64_t client, const verbs_proto::reg_mr_request& req, int memfd, uint32_t& key);
    int dereg_mr(uint64_t client, uint32_t key);
    // ibv_rereg_mr: MR `req.mr_handle` of `client` becomes the registration `req` describes,
    // under the same key (a peer's rkey stays valid). All or nothing; `memfd` is borrowed.
    int rereg_mr(uint64_t client, const verbs_proto::rereg_mr_request& req, int memfd);

    // Memory windows (memory_window.hh; memory_window_verbs.cc): a window of `type` (1 or 2)
    // in PD `pd` of `client`; EDQUOT beyond rdma.max_mws. Deallocating a bound window unbinds
    // it (as rxe does); dereg_mr of an MR with windows bound answers EBUSY.
    int alloc_mw(uint64_t client, uint32_t pd, uint32_t type, uint32_t& handle);
    int dealloc_mw(uint64_t client, uint32_t handle);

    // On 0 takes `channel_fd` (sets it to -1); -1 means no completion channel.
    int create_cq(uint64_t client, const verbs_proto::create_cq_request& req, int& channel_fd,
                  cq_created& out);
    // EBUSY while QPs complete into it.
    int destroy_cq(uint64_t client, uint32_t cq);
    // ibv_resize_cq (protocol.hh, resize_cq_request): a new ring of ring_capacity_for(cqe)
    // slots takes over the unconsumed completions, on the engine's thread when QPs may be
    // completing. EINVAL when they do not fit (or the request is malformed), EDQUOT when growth
    // passes rdma.max_cqes, ETIMEDOUT when the worker did not come (nothing changed then).
    int resize_cq(uint64_t client, uint32_t cq, uint32_t cqe, cq_created& out, uint32_t& moved);

    // Queue pairs (RC). Without enable_qps() create_qp answers EOPNOTSUPP.
    void enable_qps(qp_support support);
    int create_qp(uint64_t client, const verbs_proto::create_qp_request& req, qp_created& out);
    int modify_qp(uint64_t client, uint32_t qp, const verbs_proto::qp_attr_wire& attr, int mask);
    int query_qp(uint64_t client, uint32_t qp, verbs_proto::query_qp_reply& out);
    int destroy_qp(uint64_t client, uint32_t qp);

    // Shared receive queues (srq_verbs.cc); like QPs, EOPNOTSUPP without enable_qps().
    int create_srq(uint64_t client, const verbs_proto::create_srq_request& req, srq_created& out);
    int modify_srq(uint64_t client, const verbs_proto::modify_srq_request& req);
    int query_srq(uint64_t client, uint32_t srq, verbs_proto::query_srq_reply& out);
    // EBUSY while QPs take from it.
    int destroy_srq(uint64_t client, uint32_t srq);

    // Everything `client` owned, gone: QPs stopped, MRs unmapped, CQ rings unmapped, channels
    // closed.
    void release_client(uint64_t client);

    // The quota, changed live (`jakiroctl apply`): from now on new objects are held to it;
    // objects that exceed a lowered quota stay until their owner destroys them.
    void set_quota(const vnic_quota& quota);
    vnic_quota quota() const;

    // What the vNIC's objects hold of the host (every MR, ring and channel is charged to it
    // until it really goes) and the channel server's connections are charged to.
    const std::shared_ptr<vnic_account>& account() const { return _account; }
    memory_report memory() const;

    // A state image (handover/image.hh, docs/restart.md; resources_image.cc). save() writes
    // every object into the section its caller opened: handles and keys, the key allocators,
    // attributes, ring indices, and each ring's, MR's and channel's descriptor by index. Only
    // while nothing changes them: the endpoint frozen and the engine's workers stopped (the
    // QPs' state is read directly, not through engine::call). `opened`: descriptors save()
    // opened for the image (the memfds of MRs and rings, found again through their mappings),
    // the caller's to close once the image is sent. False with `error` when one cannot be.
    bool save(handover::image_writer& w, std::vector<int>& opened, std::string& error) const;
    // In a successor, into a vnic_resources made as for a new vNIC (enable_qps done, nothing
    // created): every object again under its own handle, mapped from the same memfds, the QPs
    // back in the engine. False with the reader failed when the image is truncated or names
    // objects that cannot be (what was restored so far is destroyed with this object).
    bool restore(handover::section_reader& r);
    // After save() was taken over: the rings, pages and doorbell are the successor's, so
    // destroying this object unmaps them without giving their pages back (and takes its QPs
    // out of this process's engine), and tells no client anything.
    void hand_over();

    const mr_table& mrs() const { return *_mrs; }
    std::shared_ptr<completion_queue> find_cq(uint32_t handle) const;
    std::shared_ptr<shared_receive_queue> find_srq(uint32_t handle) const;  // srq_verbs.cc
    resource_counts count() const;
    resource_counts count(uint64_t client) const;

  private:
    struct pd_object {
        uint64_t owner = 0;
        uint32_t mrs = 0;   // MRs registered in it
        uint32_t mws = 0;   // memory windows allocated in it
        uint32_t qps = 0;   // QPs created in it
        uint32_t srqs = 0;  // SRQs created in it
    };
    struct qp_object {
        uint64_t owner = 0;
        uint32_t pd = 0;
        std::shared_ptr<rnic::queue_pair> qp;
        std::shared_ptr<completion_queue> send_cq;
        std::shared_ptr<completion_queue> recv_cq;
        std::shared_ptr<shared_receive_queue> srq;  // null: the QP's own RQ
        uint32_t wqes = 0;                          // SQ + RQ ring slots (quota)
    };

    pd_object* owned_pd(uint64_t client, uint32_t pd);
    // One QP in a state image: what the verbs layer holds of it (creation attributes, ring,
    // attributes and PSNs as a query reads them) and, in a successor, the QP rebuilt from that
    // and moved through the states to where it was. qp_image.cc.
    bool save_qp(handover::image_writer& w, const qp_object& q, const mapped_files& maps,
                 std::vector<int>& opened, std::string& error) const;
    bool restore_qp(handover::section_reader& r);
    void hand_over_locked();  // with _mutex held
    void disable_doorbell();  // takes the vNIC's doorbell out of the engine (destructor)
    // With _mutex held: checks a registration and maps its region into `out`, unpublished.
    // `new_key`: it needs a free key (ENOMEM when the table is full); rereg reuses one.
    int map_mr(uint64_t client, const verbs_proto::reg_mr_request& req, int memfd, bool new_key,
               std::shared_ptr<mr_entry>& out);
    void drop_qp(uint32_t handle, qp_object& q);  // with _mutex held
    int over_quota() {                            // with _mutex held: EDQUOT, counted
        ++_quota_refusals;
        return EDQUOT;
    }

    verbs_proto::limits _limits;
    cq_error_sink _sink;
    mutable std::mutex _mutex;  // guards the quota and the tables below
    vnic_quota _quota;
    std::shared_ptr<vnic_account> _account;
    uint64_t _mr_bytes = 0;  // published registrations' bytes (pinned ones: _account)
    uint64_t _cqes = 0;
    uint64_t _wqes = 0;
    key_allocator _pd_keys;
    std::unordered_map<uint32_t, pd_object> _pds;
    // Shared with every QP of the vNIC (queue_pair_setup::mrs): a QP the engine has not let go of
    // yet (its removal queued behind a stalled worker) still looks keys up in it after this
    // object is gone.
    std::shared_ptr<mr_table> _mrs;
    key_allocator _cq_keys;
    std::unordered_map<uint32_t, std::shared_ptr<completion_queue>> _cqs;
    qp_support _qp_support;
    // The vNIC's own doorbell (every QP of the vNIC gets this page, no other vNIC's client
    // does), installed in the engine by enable_qps.
    std::unique_ptr<rnic::doorbell_memory> _doorbell;
    key_allocator _qp_keys;
    std::unordered_map<uint32_t, qp_object> _qps;
    key_allocator _srq_keys;
    std::unordered_map<uint32_t, std::shared_ptr<shared_receive_queue>> _srqs;
    uint64_t _quota_refusals = 0;
    uint64_t _cq_resizes = 0;
    uint64_t _cq_entries_moved = 0;
    uint64_t _cq_resizes_refused = 0;
};

}  // namespace jakiro::verbs
