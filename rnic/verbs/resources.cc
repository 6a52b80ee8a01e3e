#include "rnic/verbs/resources.hh"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <limits>

namespace jakiro::verbs {

namespace proto = verbs_proto;

namespace {

// A completion channel is the far end of a connected AF_UNIX SOCK_SEQPACKET pair: jakirod
// sends on it with MSG_DONTWAIT, which no other kind of descriptor lets it do safely (an
// eventfd a client filled up would block the daemon's write).
bool is_channel_socket(int fd) {
    int type = 0, domain = 0;
    socklen_t len = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_SEQPACKET) {
        return false;
    }
    len = sizeof(domain);
    return getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_UNIX;
}

}  // namespace

// The memory of an MR must be a shmem memfd (tmpfs, a regular file) sealed against shrinking:
// jakirod maps it and the engine touches it whenever a packet says so, so nothing the client
// does afterwards may turn that access into a signal. Truncating the file under the mapping
// would (SIGBUS): F_SEAL_SHRINK forbids it. Punching a hole is harmless on shmem (the next
// access finds a fresh zero page), but not on hugetlbfs, where the client can take the freed
// huge pages and leave jakirod's next fault nothing to allocate (SIGBUS); other filesystems
// have their own ways to fail a fault (I/O errors, quotas, a full disk). So: TMPFS_MAGIC only.
// Everything else is EINVAL, what ibv_reg_mr answers for memory it cannot register. Growing
// is harmless, and the shim needs it.
int check_region_fd(int fd, uint64_t offset, uint64_t span) {
    struct stat st {};
    if (fstat(fd, &st) != 0) {
        return EBADF;
    }
    if (!S_ISREG(st.st_mode)) {
        return EINVAL;
    }
    struct statfs fs {};
    if (fstatfs(fd, &fs) != 0 || static_cast<unsigned long>(fs.f_type) != TMPFS_MAGIC) {
        return EINVAL;
    }
    const int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
        return EINVAL;
    }
    const auto size = static_cast<uint64_t>(st.st_size);
    if (offset > size || span > size - offset) {
        return EINVAL;
    }
    return 0;
}

vnic_resources::vnic_resources(const proto::limits& lim, cq_error_sink sink,
                               const vnic_quota& quota, std::shared_ptr<host_reserve> reserve)
    : _limits(lim),
      _sink(sink),
      _quota(quota),
      _account(vnic_account::open(std::move(reserve), host_demand(quota))),
      _pd_keys(lim.max_pd),
      _mrs(std::make_shared<mr_table>(lim.max_mr)),
      _cq_keys(lim.max_cq),
      _qp_keys(lim.max_qp),
      _srq_keys(lim.max_srq) {}

vnic_resources::~vnic_resources() {
    // The engine must not keep running a QP whose MR table and CQs go with this object.
    {
        const std::lock_guard lock(_mutex);
        for (auto& [handle, q] : _qps) {
            drop_qp(handle, q);
        }
        _qps.clear();
        // A QP whose removal still waits for a stalled worker shares the table: it finds no
        // key in it from now on, so it touches no tenant memory after the vNIC is gone.
        _mrs->clear();
    }
    disable_doorbell();
}

void vnic_resources::set_quota(const vnic_quota& quota) {
    const std::lock_guard lock(_mutex);
    _quota = quota;
    _account->set_demand(host_demand(quota));
}

vnic_quota vnic_resources::quota() const {
    const std::lock_guard lock(_mutex);
    return _quota;
}

vnic_resources::pd_object* vnic_resources::owned_pd(uint64_t client, uint32_t pd) {
    const auto it = _pds.find(pd);
    return it != _pds.end() && it->second.owner == client ? &it->second : nullptr;
}

int vnic_resources::alloc_pd(uint64_t client, uint32_t& pd) {
    const std::lock_guard lock(_mutex);
    if (_pds.size() >= _quota.max_pds) {
        return over_quota();  // the vNIC's quota (rdma.max_pds)
    }
    const uint32_t key = _pd_keys.allocate();
    if (key == 0) {
        return ENOMEM;  // max_pd reached, as a kernel driver out of PDs says
    }
    _pds.emplace(key, pd_object{client, 0});
    pd = key;
    return 0;
}

int vnic_resources::dealloc_pd(uint64_t client, uint32_t pd) {
    const std::lock_guard lock(_mutex);
    const pd_object* p = owned_pd(client, pd);
    if (p == nullptr) {
        return EINVAL;
    }
    if (p->mrs != 0 || p->mws != 0 || p->qps != 0 || p->srqs != 0) {
        return EBUSY;
    }
    _pds.erase(pd);
    _pd_keys.release(pd);
    return 0;
}

int vnic_resources::reg_mr(uint64_t client, const proto::reg_mr_request& req, int memfd,
                           uint32_t& key) {
    const std::lock_guard lock(_mutex);
    // Every registration alive counts, deregistered ones that work requests still pin too:
    // their mappings are still jakirod's, so a tenant cannot free its quota by dereg_mr while
    // posted WQEs keep the memory (the account gives it back when the last pin goes).
    const uint64_t held_bytes = _account->mr_bytes();
    if (_account->mrs() >= _quota.max_mrs ||
        req.length > _quota.max_mr_bytes - std::min(held_bytes, _quota.max_mr_bytes)) {
        return over_quota();  // the vNIC's quota (rdma.max_mrs, rdma.max_mr_bytes)
    }
    std::shared_ptr<mr_entry> entry;
    if (const int error = map_mr(client, req, memfd, true, entry); error != 0) {
        return error;
    }
    if (!_mrs->insert(entry)) {
        return ENOMEM;
    }
    ++owned_pd(client, req.pd_handle)->mrs;
    _mr_bytes += req.length;
    key = entry->key;
    return 0;
}

int vnic_resources::rereg_mr(uint64_t client, const proto::rereg_mr_request& req, int memfd) {
    const std::lock_guard lock(_mutex);
    const auto old = _mrs->get(req.mr_handle);
    if (old == nullptr || old->owner != client || req.reserved != 0) {
        return EINVAL;
    }
    if (_mrs->windows_bound_to(req.mr_handle) != 0) {
        return EBUSY;  // as dereg_mr: the windows' binding names this registration
    }
    // The new registration is checked and mapped exactly as a fresh one; only then does it
    // take the old one's key (in flight, an access keeps the old mapping pinned until done).
    auto as_new = proto::make_message<proto::reg_mr_request>(
        static_cast<uint16_t>(proto::opcode::reg_mr), req.hdr.request_id);
    as_new.pd_handle = req.pd_handle;
    as_new.access = req.access;
    as_new.addr = req.addr;
    as_new.length = req.length;
    as_new.iova = req.iova;
    as_new.fd_offset = req.fd_offset;
    as_new.page_offset = req.page_offset;
    as_new.flags = req.flags;
    // The quota counts the new length in place of the old one (which, while work requests
    // still pin it, stays charged until they are done: the next registration sees it).
    const uint64_t others = _account->mr_bytes() - std::min(old->length, _account->mr_bytes());
    if (req.length > _quota.max_mr_bytes - std::min(others, _quota.max_mr_bytes)) {
        return over_quota();
    }
    std::shared_ptr<mr_entry> entry;
    if (const int error = map_mr(client, as_new, memfd, false, entry); error != 0) {
        return error;
    }
    if (!_mrs->replace(req.mr_handle, entry)) {
        return EINVAL;
    }
    // The vNIC's live registrations: this one at its new length. (Not `others`: that counts
    // pinned registrations too, which are no longer published.)
    _mr_bytes = _mr_bytes - old->length + req.length;
    if (pd_object* pd = owned_pd(client, old->pd)) {
        --pd->mrs;
    }
    ++owned_pd(client, req.pd_handle)->mrs;
    return 0;
}

int vnic_resources::map_mr(uint64_t client, const proto::reg_mr_request& req, int memfd,
                           bool new_key, std::shared_ptr<mr_entry>& out) {
    pd_object* pd = owned_pd(client, req.pd_handle);
    if (pd == nullptr || req.flags != 0 ||
        (req.access & ~(proto::mr_access_all | proto::access_mw_bind)) != 0) {
        return EINVAL;
    }
    // IB spec (and the kernel's ib_check_mr_access): remote write and atomics need local write.
    if ((req.access & (proto::access_remote_write | proto::access_remote_atomic)) != 0 &&
        (req.access & proto::access_local_write) == 0) {
        return EINVAL;
    }
    if (req.length == 0 || req.length > _limits.max_mr_size) {
        return EINVAL;
    }
    // The last byte must have an address: iova + length may reach 2^64 but not pass it.
    if (req.length - 1 > std::numeric_limits<uint64_t>::max() - req.iova) {
        return EINVAL;
    }
    if (req.page_offset >= proto::mr_page_size || req.fd_offset % proto::mr_page_size != 0 ||
        req.fd_offset > static_cast<uint64_t>(std::numeric_limits<off_t>::max())) {
        return EINVAL;
    }
    if (memfd < 0) {
        return EBADF;
    }
    if (new_key && _mrs->size() >= _mrs->capacity()) {
        return ENOMEM;
    }
    // length <= max_mr_size, so this cannot overflow.
    const uint64_t span = (req.page_offset + req.length + proto::mr_page_size - 1) /
                          proto::mr_page_size * proto::mr_page_size;
    if (const int error = check_region_fd(memfd, req.fd_offset, span); error != 0) {
        return error;
    }
    // One of the host's mappings: refused (ENOMEM, as a kernel driver out of memory answers)
    // only when this vNIC is over its share of a full host (host_reserve.hh).
    if (!_account->take_mr(req.length)) {
        return ENOMEM;
    }
    const int prot = PROT_READ | ((req.access & proto::mr_access_writes) != 0 ? PROT_WRITE : 0);
    void* base = mmap(nullptr, span, prot, MAP_SHARED, memfd, static_cast<off_t>(req.fd_offset));
    if (base == MAP_FAILED) {
        const int error = errno;
        _account->give_mr(req.length);
        return error;
    }
    auto entry = std::make_shared<mr_entry>();
    entry->account = _account;  // charged until the entry goes, after its last pin
    entry->map_base = base;     // unmapped by the entry from here on
    entry->map_length = span;
    entry->data = static_cast<std::byte*>(base) + req.page_offset;
    entry->pd = req.pd_handle;
    entry->owner = client;
    entry->access = req.access;
    entry->iova = req.iova;
    entry->length = req.length;
    entry->addr = req.addr;
    out = std::move(entry);
    return 0;
}

int vnic_resources::dereg_mr(uint64_t client, uint32_t key) {
    const std::lock_guard lock(_mutex);
    const auto mr = _mrs->get(key);
    if (mr == nullptr || mr->owner != client) {
        return EINVAL;
    }
    if (_mrs->windows_bound_to(key) != 0) {
        // IBA 10.6.7.2.6: not while windows are bound to it. rxe answers EINVAL; EBUSY is what
        // this daemon answers for every object still in use, and libibverbs passes it on.
        return EBUSY;
    }
    if (pd_object* pd = owned_pd(client, mr->pd)) {
        --pd->mrs;
    }
    _mr_bytes -= mr->length;
    _mrs->erase(key);  // the charge stays with the entry while work requests pin it
    return 0;
}

int vnic_resources::create_cq(uint64_t client, const proto::create_cq_request& req, int& channel_fd,
                              cq_created& out) {
    const std::lock_guard lock(_mutex);
    if ((req.flags & ~(proto::cq_with_channel | proto::cq_with_timestamps)) != 0 ||
        req.reserved != 0) {
        return EINVAL;
    }
    // One completion vector (ibv_context.num_comp_vectors), and the advertised max_cqe.
    if (req.cqe == 0 || req.cqe > _limits.max_cqe || req.comp_vector != 0) {
        return EINVAL;
    }
    const bool with_channel = (req.flags & proto::cq_with_channel) != 0;
    if (with_channel != (channel_fd >= 0)) {
        return EBADF;
    }
    if (with_channel && !is_channel_socket(channel_fd)) {
        return EINVAL;
    }
    const uint32_t capacity = ring_capacity_for(req.cqe);
    if (_cqs.size() >= _quota.max_cqs ||
        capacity > _quota.max_cqes - std::min(_cqes, _quota.max_cqes)) {
        return over_quota();  // the vNIC's quota (rdma.max_cqs, rdma.max_cqes)
    }
    // The ring's mapping and the channel's descriptor, from the host reserve.
    account_charge mapping, descriptor;
    if (!charge(_account, host_resource::mappings, 1, mapping) ||
        (with_channel && !charge(_account, host_resource::descriptors, 1, descriptor))) {
        return ENOMEM;
    }
    const uint32_t handle = _cq_keys.allocate();
    if (handle == 0) {
        return ENOMEM;  // max_cq reached
    }
    std::unique_ptr<cq_ring> ring;
    int ring_fd = -1;
    if (const int error = cq_ring::create(capacity, ring, ring_fd); error != 0) {
        _cq_keys.release(handle);
        return error;
    }
    ring->hold(std::move(mapping));
    out.handle = handle;
    out.capacity = ring->capacity();
    out.ring_bytes = ring->bytes();
    out.ring_fd = ring_fd;
    _cqes += ring->capacity();
    auto queue =
        std::make_shared<completion_queue>(std::move(ring), handle, client, channel_fd, _sink,
                                           (req.flags & proto::cq_with_timestamps) != 0);
    queue->hold_channel(std::move(descriptor));
    _cqs.emplace(handle, std::move(queue));
    channel_fd = -1;
    return 0;
}

int vnic_resources::destroy_cq(uint64_t client, uint32_t cq) {
    const std::lock_guard lock(_mutex);
    const auto it = _cqs.find(cq);
    if (it == _cqs.end() || it->second->owner() != client) {
        return EINVAL;
    }
    if (it->second->users != 0) {
        return EBUSY;
    }
    _cqes -= it->second->ring().capacity();
    _cqs.erase(it);  // the ring goes with the last reference (an engine thread may hold one)
    _cq_keys.release(cq);
    return 0;
}

int vnic_resources::resize_cq(uint64_t client, uint32_t cq, uint32_t cqe, cq_created& out,
                              uint32_t& moved) {
    const std::lock_guard lock(_mutex);
    const auto it = _cqs.find(cq);
    if (it == _cqs.end() || it->second->owner() != client) {
        return EINVAL;
    }
    if (cqe == 0 || cqe > _limits.max_cqe) {
        return EINVAL;
    }
    const std::shared_ptr<completion_queue> queue = it->second;
    const uint32_t old_capacity = queue->ring().capacity();
    const uint32_t capacity = ring_capacity_for(cqe);
    // The quota counts slots: a shrink always fits; growth needs the difference to be free.
    if (capacity > old_capacity &&
        capacity - old_capacity > _quota.max_cqes - std::min(_cqes, _quota.max_cqes)) {
        return over_quota();  // the vNIC's quota (rdma.max_cqes)
    }
    account_charge mapping;
    if (!charge(_account, host_resource::mappings, 1, mapping)) {
        return ENOMEM;
    }
    auto ring = std::make_shared<std::unique_ptr<cq_ring>>();
    int ring_fd = -1;
    if (const int error = cq_ring::create(capacity, *ring, ring_fd); error != 0) {
        return error;
    }
    (*ring)->hold(std::move(mapping));
    cq_ring* const fresh = ring->get();
    auto plan = std::make_shared<cq_take_over>();
    const auto swap = [queue, ring, plan] { return queue->replace_ring(*ring, *plan); };
    // The engine pushes into the CQ's ring from its own thread, so the swap happens there,
    // between two of its visits; with no engine nothing else pushes. The worker only checks and
    // switches rings (O(1)); the completions that move, as many as the client left unread (up
    // to a ring of max_cqe), are copied here, off the worker, so a tenant resizing in a loop
    // costs the other tenants of its worker nothing.
    rnic::engine* engine = _qp_support.engine;
    const int error = engine != nullptr ? engine->call(swap) : swap();
    if (error != 0) {
        close(ring_fd);
        _cq_resizes_refused += error == EINVAL ? 1 : 0;
        return error;
    }
    fresh->finish_take_over(**ring, *plan);
    // The old ring's slots go back to the host now; its header page when the next resize or
    // the CQ's end comes (the shim reads its arm once more).
    queue->retire(std::move(*ring));
    _cqes = _cqes - old_capacity + capacity;
    ++_cq_resizes;
    _cq_entries_moved += plan->count;
    out.handle = cq;
    out.capacity = capacity;
    out.ring_bytes = queue->ring().bytes();
    out.ring_fd = ring_fd;
    moved = plan->count;
    return 0;
}

void vnic_resources::release_client(uint64_t client) {
    const std::lock_guard lock(_mutex);
    // Children before parents (QPs before the SRQs, MRs and CQs they use, those before PDs),
    // whatever order the client left them in.
    for (auto it = _qps.begin(); it != _qps.end();) {
        if (it->second.owner == client) {
            drop_qp(it->first, it->second);
            it = _qps.erase(it);
        } else {
            ++it;
        }
    }
    for (auto it = _srqs.begin(); it != _srqs.end();) {
        if (it->second->owner() == client) {
            if (pd_object* pd = owned_pd(client, it->second->pd())) {
                --pd->srqs;
            }
            _wqes -= it->second->capacity();
            _srq_keys.release(it->first);
            it = _srqs.erase(it);  // the ring goes with the last reference
        } else {
            ++it;
        }
    }
    _mrs->erase_windows_owned_by(client);
    _mr_bytes -= _mrs->bytes_owned_by(client);
    _mrs->erase_owned_by(client);
    for (auto it = _cqs.begin(); it != _cqs.end();) {
        if (it->second->owner() == client) {
            _cqes -= it->second->ring().capacity();
            _cq_keys.release(it->first);
            it = _cqs.erase(it);
        } else {
            ++it;
        }
    }
    for (auto it = _pds.begin(); it != _pds.end();) {
        if (it->second.owner == client) {
            _pd_keys.release(it->first);
            it = _pds.erase(it);
        } else {
            ++it;
        }
    }
}

std::shared_ptr<completion_queue> vnic_resources::find_cq(uint32_t handle) const {
    const std::lock_guard lock(_mutex);
    const auto it = _cqs.find(handle);
    return it == _cqs.end() ? nullptr : it->second;
}

resource_counts vnic_resources::count() const {
    const std::lock_guard lock(_mutex);
    resource_counts c{_pds.size(),  _mrs->size(), _cqs.size(), _qps.size(),
                      _srqs.size(), _mr_bytes,    _cqes,       _wqes};
    c.mws = _mrs->window_count();
    return c;
}

memory_report vnic_resources::memory() const {
    const std::lock_guard lock(_mutex);
    memory_report m;
    m.mrs = _account->mrs();
    m.mr_bytes = _account->mr_bytes();
    // Alive but no longer published: deregistered while work requests still pin them. (An
    // entry a rereg replaced counts here too, for the same reason.)
    m.mrs_pinned = m.mrs - std::min<uint64_t>(m.mrs, _mrs->size());
    m.mr_bytes_pinned = m.mr_bytes - std::min(m.mr_bytes, _mr_bytes);
    m.held = _account->held();
    m.share = _account->share();
    m.refused = {_account->refused(host_resource::mappings),
                 _account->refused(host_resource::descriptors)};
    m.quota_refusals = _quota_refusals;
    m.cq_resizes = _cq_resizes;
    m.cq_entries_moved = _cq_entries_moved;
    m.cq_resizes_refused = _cq_resizes_refused;
    return m;
}

resource_counts vnic_resources::count(uint64_t client) const {
    const std::lock_guard lock(_mutex);
    resource_counts c;
    for (const auto& [key, pd] : _pds) {
        c.pds += pd.owner == client ? 1 : 0;
    }
    c.mrs = _mrs->count_owned_by(client);
    c.mws = _mrs->count_windows_owned_by(client);
    c.mr_bytes = _mrs->bytes_owned_by(client);
    for (const auto& [key, cq] : _cqs) {
        if (cq->owner() == client) {
            ++c.cqs;
            c.cqes += cq->ring().capacity();
        }
    }
    for (const auto& [key, qp] : _qps) {
        if (qp.owner == client) {
            ++c.qps;
            c.wqes += qp.wqes;
        }
    }
    for (const auto& [key, srq] : _srqs) {
        if (srq->owner() == client) {
            ++c.srqs;
            c.wqes += srq->capacity();
        }
    }
    return c;
}

}  // namespace jakiro::verbs
