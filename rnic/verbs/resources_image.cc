// vnic_resources in a state image (resources.hh, docs/restart.md): every object a vNIC's
// clients created, written by the process that hands over and rebuilt by its successor under
// the same handles and keys, mapped from the same memfds, so that what the tenant holds (its
// handles, keys and its own mappings of rings, regions and doorbell) stays valid as it is.

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "rnic/queues/mapped_files.hh"
#include "rnic/queues/memory_window.hh"
#include "rnic/verbs/resources.hh"

namespace jakiro::verbs {

namespace proto = verbs_proto;

namespace {

// Upper bounds on what one vNIC's image may list, so that a corrupt count fails at once
// instead of looping: no key allocator hands out more than this many objects of one kind.
constexpr uint32_t max_listed = key_allocator::max_capacity;

void write_keys(handover::image_writer& w, const key_allocator::state& k) {
    w.bytes(std::as_bytes(std::span(k.tags)));
    w.bytes(std::as_bytes(std::span(k.used)));
    w.u32(static_cast<uint32_t>(k.free.size()));
    for (const uint32_t slot : k.free) {
        w.u32(slot);
    }
}

key_allocator::state read_keys(handover::section_reader& r) {
    key_allocator::state k;
    const auto tags = r.bytes();
    const auto used = r.bytes();
    for (const std::byte b : tags) {
        k.tags.push_back(static_cast<uint8_t>(b));
    }
    for (const std::byte b : used) {
        k.used.push_back(static_cast<uint8_t>(b));
    }
    const uint32_t n = r.count(max_listed);
    for (uint32_t i = 0; i < n && r.ok(); ++i) {
        k.free.push_back(r.u32());
    }
    return k;
}

bool resume_keys(handover::section_reader& r, key_allocator& keys, const char* what) {
    const key_allocator::state k = read_keys(r);
    if (r.ok() && !keys.resume(k)) {
        r.fail(std::string("state section 'rdma_faces': the ") + what +
               " keys do not fit this vNIC's limits");
    }
    return r.ok();
}

// A descriptor of the image that the reader hands us: closed when it goes out of scope unless
// released.
struct taken_fd {
    int fd = -1;
    explicit taken_fd(int f) : fd(f) {}
    ~taken_fd() {
        if (fd >= 0) {
            close(fd);
        }
    }
    taken_fd(const taken_fd&) = delete;
    taken_fd& operator=(const taken_fd&) = delete;
    int release() {
        const int f = fd;
        fd = -1;
        return f;
    }
};

}  // namespace

bool vnic_resources::save(handover::image_writer& w, std::vector<int>& opened,
                          std::string& error) const {
    const std::lock_guard lock(_mutex);
    const mapped_files maps;
    // The file behind one of our mappings, sent along; false with `error` if it is not found.
    auto send_mapping = [&](const void* address, uint64_t& offset) {
        const int fd = maps.open(address, offset, error);
        if (fd < 0) {
            return false;
        }
        opened.push_back(fd);
        w.fd(fd);
        return true;
    };

    write_keys(w, _pd_keys.save());
    write_keys(w, _cq_keys.save());
    write_keys(w, _qp_keys.save());
    write_keys(w, _srq_keys.save());
    write_keys(w, _mrs->save_keys());
    w.u64(_mr_bytes);
    w.u64(_cqes);
    w.u64(_wqes);
    w.u64(_quota_refusals);
    w.u64(_cq_resizes);
    w.u64(_cq_entries_moved);
    w.u64(_cq_resizes_refused);

    w.u32(static_cast<uint32_t>(_pds.size()));
    for (const auto& [key, pd] : _pds) {
        w.u32(key);
        w.u64(pd.owner);
        w.u32(pd.mrs);
        w.u32(pd.mws);
        w.u32(pd.qps);
        w.u32(pd.srqs);
    }

    std::vector<const mr_entry*> mrs;
    std::vector<const mw_entry*> windows;
    _mrs->for_each([&](const mr_entry& mr) { mrs.push_back(&mr); },
                   [&](const mw_entry& mw) { windows.push_back(&mw); });
    w.u32(static_cast<uint32_t>(mrs.size()));
    for (const mr_entry* mr : mrs) {
        w.u32(mr->key);
        w.u32(mr->pd);
        w.u64(mr->owner);
        w.u32(mr->access);
        w.u64(mr->iova);
        w.u64(mr->length);
        w.u64(mr->addr);
        w.u64(static_cast<uint64_t>(mr->data - static_cast<std::byte*>(mr->map_base)));
        w.u64(mr->map_length);
        // The offset is known once the file is: it follows the descriptor's index.
        uint64_t offset = 0;
        if (!send_mapping(mr->map_base, offset)) {
            error = "MR " + std::to_string(mr->key) + ": " + error;
            return false;
        }
        w.u64(offset);
    }
    w.u32(static_cast<uint32_t>(windows.size()));
    for (const mw_entry* mw : windows) {
        w.u32(mw->handle);
        w.u32(mw->pd);
        w.u64(mw->owner);
        w.u8(mw->type);
        w.u32(mw->rkey.load(std::memory_order_relaxed));
        const auto binding = mw->binding.load(std::memory_order_acquire);
        w.boolean(binding != nullptr);
        if (binding != nullptr) {
            w.u32(binding->rkey);
            w.u32(binding->qpn);
            w.u32(binding->access);
            w.u64(binding->va);
            w.u64(binding->length);
            w.u64(binding->mr_iova);
            w.u32(binding->mr->key);
        }
    }

    w.boolean(_doorbell != nullptr);
    if (_doorbell != nullptr) {
        w.fd(_doorbell->fd());
    }

    w.u32(static_cast<uint32_t>(_cqs.size()));
    for (const auto& [handle, cq] : _cqs) {
        w.u32(handle);
        w.u64(cq->owner());
        w.boolean(cq->timestamps());
        w.u32(cq->users);
        w.pod(cq->ring().carry());
        uint64_t offset = 0;
        if (!send_mapping(cq->ring().header(), offset)) {
            error = "CQ " + std::to_string(handle) + ": " + error;
            return false;
        }
        w.boolean(cq->has_channel());
        if (cq->has_channel()) {
            w.fd(cq->channel_fd());
        }
        w.boolean(cq->error_raised());
        w.u64(cq->notifications());
        w.u64(cq->lost_notifications());
    }

    w.u32(static_cast<uint32_t>(_srqs.size()));
    for (const auto& [handle, srq] : _srqs) {
        w.pod(srq->carry());
        w.u32(srq->users);
        uint64_t offset = 0;
        if (!send_mapping(srq->header(), offset)) {
            error = "SRQ " + std::to_string(handle) + ": " + error;
            return false;
        }
    }

    w.u32(static_cast<uint32_t>(_qps.size()));
    for (const auto& [handle, q] : _qps) {
        if (!save_qp(w, q, maps, opened, error)) {
            error = "QP " + std::to_string(handle) + ": " + error;
            return false;
        }
    }
    return true;
}

bool vnic_resources::restore(handover::section_reader& r) {
    const std::lock_guard lock(_mutex);
    if (!_pds.empty() || !_cqs.empty() || !_qps.empty() || !_srqs.empty() || _mrs->size() != 0) {
        r.fail("state section 'rdma_faces': restored into a vNIC that has objects already");
        return false;
    }
    if (!resume_keys(r, _pd_keys, "PD") || !resume_keys(r, _cq_keys, "CQ") ||
        !resume_keys(r, _qp_keys, "QP") || !resume_keys(r, _srq_keys, "SRQ")) {
        return false;
    }
    {
        const key_allocator::state k = read_keys(r);
        if (r.ok() && !_mrs->resume_keys(k)) {
            r.fail("state section 'rdma_faces': the MR keys do not fit this vNIC's limits");
            return false;
        }
    }
    _mr_bytes = r.u64();
    _cqes = r.u64();
    _wqes = r.u64();
    _quota_refusals = r.u64();
    _cq_resizes = r.u64();
    _cq_entries_moved = r.u64();
    _cq_resizes_refused = r.u64();

    const uint32_t pds = r.count(max_listed);
    for (uint32_t i = 0; i < pds && r.ok(); ++i) {
        const uint32_t key = r.u32();
        pd_object pd;
        pd.owner = r.u64();
        pd.mrs = r.u32();
        pd.mws = r.u32();
        pd.qps = r.u32();
        pd.srqs = r.u32();
        if (r.ok() && (!_pd_keys.live(key) || !_pds.emplace(key, pd).second)) {
            r.fail("state section 'rdma_faces': PD " + std::to_string(key) + " is not live");
        }
    }

    const uint32_t mrs = r.count(max_listed);
    for (uint32_t i = 0; i < mrs && r.ok(); ++i) {
        auto entry = std::make_shared<mr_entry>();
        entry->key = r.u32();
        entry->pd = r.u32();
        entry->owner = r.u64();
        entry->access = r.u32();
        entry->iova = r.u64();
        entry->length = r.u64();
        entry->addr = r.u64();
        const uint64_t data_offset = r.u64();
        const uint64_t map_length = r.u64();
        taken_fd memfd(r.fd());
        const uint64_t file_offset = r.u64();
        if (!r.ok()) {
            break;
        }
        if (map_length == 0 || map_length % proto::mr_page_size != 0 ||
            data_offset >= proto::mr_page_size || entry->length > map_length - data_offset ||
            file_offset % proto::mr_page_size != 0 ||
            check_region_fd(memfd.fd, file_offset, map_length) != 0) {
            r.fail("state section 'rdma_faces': MR " + std::to_string(entry->key) +
                   " does not fit its memfd");
            break;
        }
        if (!_account->take_mr(entry->length)) {
            r.fail("state section 'rdma_faces': MR " + std::to_string(entry->key) +
                   ": the host reserve refuses its mapping");
            break;
        }
        const int prot =
            PROT_READ | ((entry->access & proto::mr_access_writes) != 0 ? PROT_WRITE : 0);
        void* base =
            mmap(nullptr, map_length, prot, MAP_SHARED, memfd.fd, static_cast<off_t>(file_offset));
        if (base == MAP_FAILED) {
            _account->give_mr(entry->length);
            r.fail("state section 'rdma_faces': MR " + std::to_string(entry->key) +
                   ": mmap: " + std::strerror(errno));
            break;
        }
        entry->account = _account;
        entry->map_base = base;
        entry->map_length = map_length;
        entry->data = static_cast<std::byte*>(base) + data_offset;
        const uint32_t key = entry->key;
        if (!_mrs->place(std::move(entry))) {
            r.fail("state section 'rdma_faces': MR " + std::to_string(key) + " is not live");
        }
    }

    const uint32_t windows = r.count(max_listed);
    for (uint32_t i = 0; i < windows && r.ok(); ++i) {
        auto window = std::make_shared<mw_entry>();
        window->handle = r.u32();
        window->pd = r.u32();
        window->owner = r.u64();
        window->type = r.u8();
        window->rkey.store(r.u32(), std::memory_order_relaxed);
        if (r.boolean()) {
            auto binding = std::make_shared<mw_binding>();
            binding->rkey = r.u32();
            binding->qpn = r.u32();
            binding->access = r.u32();
            binding->va = r.u64();
            binding->length = r.u64();
            binding->mr_iova = r.u64();
            const uint32_t mr_key = r.u32();
            // A window is bound to a registered MR (dereg_mr and rereg_mr refuse otherwise).
            binding->mr = _mrs->get(mr_key);
            if (r.ok() && binding->mr == nullptr) {
                r.fail("state section 'rdma_faces': window " + std::to_string(window->handle) +
                       " is bound to no MR");
                break;
            }
            window->binding.store(std::move(binding), std::memory_order_release);
        }
        const uint32_t handle = window->handle;
        if (r.ok() && !_mrs->place_window(std::move(window))) {
            r.fail("state section 'rdma_faces': window " + std::to_string(handle) + " is not live");
        }
    }

    if (r.boolean()) {
        const int fd = r.fd();
        if (r.ok()) {
            auto page = rnic::doorbell_memory::resume(fd);
            if (page == nullptr) {
                r.fail("state section 'rdma_faces': the doorbell is not a doorbell page");
            } else if (_qp_support.engine == nullptr) {
                r.fail("state section 'rdma_faces': a doorbell, and no engine to ring");
            } else {
                // The tenant's QPs ring this page: it replaces the one enable_qps made, in
                // place. The vNIC stays (it is carried over the restart, not removed), so the
                // engine keeps what it counted for it; the old page stays mapped until the
                // engine has let go of it.
                std::unique_ptr<rnic::doorbell_memory> replaced = std::move(_doorbell);
                _doorbell = std::move(page);
                rnic::engine* engine = _qp_support.engine;
                const uint16_t slot = _qp_support.local.vnic;
                verbs_proto::doorbell_page* p = &_doorbell->page();
                if (engine->call([engine, slot, p] {
                        engine->set_vnic_doorbell(slot, p);
                        return 0;
                    }) != 0) {
                    _doorbell = std::move(replaced);  // the engine still rings the old one
                    r.fail("state section 'rdma_faces': the engine did not take the doorbell");
                }
            }
        }
    }

    const uint32_t cqs = r.count(max_listed);
    for (uint32_t i = 0; i < cqs && r.ok(); ++i) {
        const uint32_t handle = r.u32();
        const uint64_t owner = r.u64();
        const bool timestamps = r.boolean();
        const uint32_t users = r.u32();
        const auto carried = r.pod<cq_ring::carried>();
        taken_fd ring_fd(r.fd());
        taken_fd channel(r.boolean() ? r.fd() : -1);
        const bool error_raised = r.boolean();
        const uint64_t notified = r.u64();
        const uint64_t lost = r.u64();
        if (!r.ok()) {
            break;
        }
        std::unique_ptr<cq_ring> ring;
        account_charge mapping, descriptor;
        if (!_cq_keys.live(handle) || _cqs.contains(handle) ||
            cq_ring::resume(ring_fd.fd, carried, ring) != 0) {
            r.fail("state section 'rdma_faces': CQ " + std::to_string(handle) +
                   " does not fit its ring");
            break;
        }
        if (!charge(_account, host_resource::mappings, 1, mapping) ||
            (channel.fd >= 0 && !charge(_account, host_resource::descriptors, 1, descriptor))) {
            ring->leave_pages_to_successor();  // the tenant's ring: never punched
            r.fail("state section 'rdma_faces': CQ " + std::to_string(handle) +
                   ": the host reserve refuses it");
            break;
        }
        ring->hold(std::move(mapping));
        auto queue = std::make_shared<completion_queue>(std::move(ring), handle, owner,
                                                        channel.release(), _sink, timestamps);
        queue->hold_channel(std::move(descriptor));
        queue->resume_counts(error_raised, notified, lost);
        queue->users = users;
        _cqs.emplace(handle, std::move(queue));
    }

    const uint32_t srqs = r.count(max_listed);
    srq_event_sink events{_qp_support.events.raise, _qp_support.events.context};
    for (uint32_t i = 0; i < srqs && r.ok(); ++i) {
        const auto carried = r.pod<shared_receive_queue::carried>();
        const uint32_t users = r.u32();
        taken_fd ring_fd(r.fd());
        if (!r.ok()) {
            break;
        }
        std::shared_ptr<shared_receive_queue> srq;
        account_charge mapping;
        if (!_srq_keys.live(carried.handle) || _srqs.contains(carried.handle) ||
            shared_receive_queue::resume(ring_fd.fd, carried, events, srq) != 0) {
            r.fail("state section 'rdma_faces': SRQ " + std::to_string(carried.handle) +
                   " does not fit its ring");
            break;
        }
        if (!charge(_account, host_resource::mappings, 1, mapping)) {
            srq->leave_pages_to_successor();
            r.fail("state section 'rdma_faces': SRQ " + std::to_string(carried.handle) +
                   ": the host reserve refuses it");
            break;
        }
        srq->hold(std::move(mapping));
        srq->users = users;
        _srqs.emplace(carried.handle, std::move(srq));
    }

    const uint32_t qps = r.count(max_listed);
    for (uint32_t i = 0; i < qps && r.ok(); ++i) {
        restore_qp(r);
    }
    if (!r.ok()) {
        // The predecessor keeps serving these rings and pages: what was restored goes with
        // this object without giving a page back.
        hand_over_locked();
    }
    return r.ok();
}

void vnic_resources::hand_over() {
    const std::lock_guard lock(_mutex);
    hand_over_locked();
}

void vnic_resources::hand_over_locked() {
    for (auto& [handle, cq] : _cqs) {
        cq->leave_pages_to_successor();
    }
    for (auto& [handle, srq] : _srqs) {
        srq->leave_pages_to_successor();
    }
    for (auto& [handle, q] : _qps) {
        q.qp->ring().leave_pages_to_successor();
    }
    if (_doorbell != nullptr) {
        _doorbell->leave_pages_to_successor();
    }
}

}  // namespace jakiro::verbs
