#include "verbs_shim/context.hh"

#include <endian.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>
#include <type_traits>

#include "verbs_shim/cq.hh"
#include "verbs_shim/cq_ex.hh"
#include "verbs_shim/discovery.hh"
#include "verbs_shim/memory_backing.hh"
#include "verbs_shim/memory_window.hh"
#include "verbs_shim/parent_domain.hh"
#include "verbs_shim/post.hh"
#include "verbs_shim/qp.hh"
#include "verbs_shim/srq.hh"

namespace jakiro::verbs_shim {

namespace proto = verbs_proto;

static_assert(std::is_standard_layout_v<shim_context>);
static_assert(offsetof(shim_context, vctx) == 0);
// The wire enums carry libibverbs' values, so mapping them is a cast.
static_assert(static_cast<int>(proto::port_state::active) == IBV_PORT_ACTIVE);
static_assert(static_cast<int>(proto::port_state::down) == IBV_PORT_DOWN);
static_assert(static_cast<int>(proto::event_type::device_fatal) == IBV_EVENT_DEVICE_FATAL);
static_assert(static_cast<int>(proto::event_type::port_active) == IBV_EVENT_PORT_ACTIVE);
static_assert(static_cast<int>(proto::event_type::port_error) == IBV_EVENT_PORT_ERR);
static_assert(static_cast<int>(proto::event_type::qp_fatal) == IBV_EVENT_QP_FATAL);
static_assert(static_cast<int>(proto::event_type::qp_req_err) == IBV_EVENT_QP_REQ_ERR);
static_assert(static_cast<int>(proto::event_type::qp_access_err) == IBV_EVENT_QP_ACCESS_ERR);
static_assert(static_cast<int>(proto::event_type::comm_est) == IBV_EVENT_COMM_EST);
static_assert(static_cast<int>(proto::event_type::sq_drained) == IBV_EVENT_SQ_DRAINED);
static_assert(static_cast<int>(proto::event_type::cq_err) == IBV_EVENT_CQ_ERR);

namespace {

ibv_mtu mtu_enum(uint32_t bytes) {
    switch (bytes) {
        case 4096:
            return IBV_MTU_4096;
        case 2048:
            return IBV_MTU_2048;
        case 1024:
            return IBV_MTU_1024;
        case 512:
            return IBV_MTU_512;
        default:
            return IBV_MTU_256;
    }
}

// One QUERY round trip; 0 or an errno.
int ask(ibv_context* context, proto::query_reply& reply) {
    shim_context* c = to_context(context);
    if (c == nullptr) {
        return EINVAL;
    }
    return c->chan->query(reply);
}

void fill_device_attr(const proto::device_attrs& d, ibv_device_attr& a) {
    std::memset(&a, 0, sizeof(a));
    std::memcpy(a.fw_ver, d.fw_ver, std::min(sizeof(a.fw_ver), sizeof(d.fw_ver)));
    a.fw_ver[sizeof(a.fw_ver) - 1] = '\0';
    a.node_guid = htobe64(d.node_guid);
    a.sys_image_guid = htobe64(d.sys_image_guid);
    a.max_mr_size = d.lim.max_mr_size;
    a.page_size_cap = d.lim.page_size_cap;
    a.vendor_id = d.vendor_id;
    a.vendor_part_id = d.vendor_part_id;
    a.hw_ver = d.hw_ver;
    a.max_qp = static_cast<int>(d.lim.max_qp);
    a.max_qp_wr = static_cast<int>(d.lim.max_qp_wr);
    unsigned flags = 0;
    if (d.caps & proto::cap_rc_rnr_nak_gen) {
        flags |= IBV_DEVICE_RC_RNR_NAK_GEN;
    }
    if (d.caps & proto::cap_sys_image_guid) {
        flags |= IBV_DEVICE_SYS_IMAGE_GUID;
    }
    if (d.caps & proto::cap_memory_windows) {
        // Type 1 and type 2B, as rxe (type 2B: a window bound to one QP).
        flags |= IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B;
        a.max_mw = static_cast<int>(d.max_mw);
    }
    a.device_cap_flags = flags;
    a.max_sge = static_cast<int>(d.lim.max_sge);
    a.max_sge_rd = static_cast<int>(d.lim.max_sge_rd);
    a.max_cq = static_cast<int>(d.lim.max_cq);
    a.max_cqe = static_cast<int>(d.lim.max_cqe);
    a.max_mr = static_cast<int>(d.lim.max_mr);
    a.max_pd = static_cast<int>(d.lim.max_pd);
    a.max_qp_rd_atom = static_cast<int>(d.lim.max_qp_rd_atom);
    a.max_qp_init_rd_atom = static_cast<int>(d.lim.max_qp_init_rd_atom);
    a.max_res_rd_atom = static_cast<int>(d.lim.max_res_rd_atom);
    a.atomic_cap = d.lim.atomics == 0 ? IBV_ATOMIC_NONE : IBV_ATOMIC_HCA;
    a.max_ah = static_cast<int>(d.lim.max_ah);
    a.max_srq = static_cast<int>(d.lim.max_srq);
    a.max_srq_wr = static_cast<int>(d.lim.max_srq_wr);
    a.max_srq_sge = static_cast<int>(d.lim.max_srq_sge);
    a.max_pkeys = d.max_pkeys;
    a.local_ca_ack_delay = d.local_ca_ack_delay;
    a.phys_port_cnt = d.phys_port_cnt;
    // No EE contexts, RDDs, raw QPs, multicast or FMRs: all stay 0.
}

void fill_port_attr(const proto::port_attrs& p, ibv_port_attr& a) {
    std::memset(&a, 0, sizeof(a));
    a.state = static_cast<ibv_port_state>(p.state);
    a.max_mtu = mtu_enum(p.max_mtu);
    a.active_mtu = mtu_enum(p.active_mtu);
    a.gid_tbl_len = p.gid_tbl_len;
    a.port_cap_flags = (p.caps & proto::cap_ip_based_gids) ? IBV_PORT_IP_BASED_GIDS : 0;
    a.max_msg_sz = p.max_msg_sz;
    a.pkey_tbl_len = p.pkey_tbl_len;
    a.max_vl_num = p.max_vl_num;
    a.active_width = p.active_width;
    a.active_speed = p.active_speed;
    a.phys_state = p.phys_state;
    a.link_layer = p.link_layer;
    // RoCE has no LIDs, subnet manager or VL arbitration: lid, sm_lid, lmc, sm_sl stay 0.
}

// Copies `size` bytes of a fully built struct out to a caller whose struct may be older
// (shorter) or newer (longer, the tail zeroed): the extensible-struct rule of libibverbs.
template <typename T>
void copy_out(const T& full, void* out, size_t size) {
    std::memcpy(out, &full, std::min(size, sizeof(T)));
    if (size > sizeof(T)) {
        std::memset(static_cast<char*>(out) + sizeof(T), 0, size - sizeof(T));
    }
}

int compat_query_port(ibv_context* context, uint8_t port_num, _compat_ibv_port_attr* attr) {
    // The pre-extension ibv_port_attr ends where port_cap_flags2 begins.
    return query_port(context, port_num, reinterpret_cast<ibv_port_attr*>(attr),
                      offsetof(ibv_port_attr, port_cap_flags2));
}

}  // namespace

shim_context* to_context(ibv_context* context) {
    if (context == nullptr || context->abi_compat != __VERBS_ABI_IS_EXTENDED) {
        return nullptr;
    }
    auto* c = reinterpret_cast<shim_context*>(reinterpret_cast<char*>(context) -
                                              offsetof(verbs_context, context));
    return c->magic == context_magic ? c : nullptr;
}

ibv_context* open_device(ibv_device* device) {
    shim_device* d = to_device(device);
    if (d == nullptr) {
        errno = ENODEV;
        return nullptr;
    }
    // calloc, not new: the struct is C, and a zeroed verbs_context is the documented start
    // for a provider (every op NULL, every field 0) before it fills what it supports.
    auto* c = static_cast<shim_context*>(std::calloc(1, sizeof(shim_context)));
    auto* chan = new (std::nothrow) channel;
    auto* targets = new (std::nothrow) event_targets;
    if (c == nullptr || chan == nullptr || targets == nullptr) {
        std::free(c);
        delete chan;
        delete targets;
        errno = ENOMEM;
        return nullptr;
    }
    int async_fd = -1;
    int error = chan->open(d->socket_path);
    if (error == 0) {
        error = chan->hello(c->hello, async_fd);
    }
    if (error != 0) {
        delete chan;
        delete targets;
        std::free(c);
        errno = error;
        return nullptr;
    }
    auto* death = new (std::nothrow) device_death(chan->fd(), async_fd);
    if (death == nullptr) {
        close(async_fd);
        delete chan;
        delete targets;
        std::free(c);
        errno = ENOMEM;
        return nullptr;
    }
    c->magic = context_magic;
    c->device = d;
    c->chan = chan;
    c->targets = targets;
    c->death = death;
    c->netdev_ifindex = netdev_with_mac(c->hello.mac);

    verbs_context& v = c->vctx;
    fill_unsupported_ops(v);
    v.sz = sizeof(verbs_context);
    v.query_port = query_port;
    v.query_device_ex = query_device_ex;
    v.query_rt_values = query_rt_values;
    v.alloc_parent_domain = alloc_parent_domain;
    v.alloc_td = alloc_td;
    v.dealloc_td = dealloc_td;
    v.context.ops._compat_query_device = query_device;
    v.context.ops._compat_query_port = compat_query_port;
    v.context.ops.poll_cq = poll_cq;
    v.context.ops.req_notify_cq = req_notify_cq;
    v.context.ops.post_send = post_send;
    v.context.ops.alloc_mw = alloc_mw;
    v.context.ops.bind_mw = bind_mw;
    v.context.ops.dealloc_mw = dealloc_mw;
    v.context.ops.post_recv = post_recv;
    v.create_qp_ex = create_qp_ex;
    v.context.ops.post_srq_recv = post_srq_recv;
    v.create_srq_ex = create_srq_ex;
    v.create_cq_ex = create_cq_ex;
    v.context.device = device;
    v.context.cmd_fd = chan->fd();
    v.context.async_fd = async_fd;
    v.context.num_comp_vectors = 1;
    pthread_mutex_init(&v.context.mutex, nullptr);
    v.context.abi_compat = __VERBS_ABI_IS_EXTENDED;
    return &v.context;
}

int close_device(ibv_context* context) {
    shim_context* c = to_context(context);
    if (c == nullptr) {
        errno = EINVAL;
        return EINVAL;
    }
    // Closing the channel is the release: jakirod drops everything this context created.
    if (c->vctx.context.async_fd >= 0) {
        close(c->vctx.context.async_fd);
    }
    delete c->chan;
    // Objects the program did not destroy are gone in jakirod now; their shim halves leak,
    // as with libibverbs, but must not be found by a stale event.
    delete c->targets;
    delete c->death;
    pthread_mutex_destroy(&c->vctx.context.mutex);
    c->magic = 0;  // a second close or a stale pointer now reads as "not ours"
    std::free(c);
    // Registered pages the program has unmapped since can leave the MR memfd.
    memory_backing::process().collect();
    return 0;
}

int destroy_object(shim_context* c, proto::opcode op, uint32_t handle) {
    auto req = proto::make_message<proto::destroy_request>(static_cast<uint16_t>(op), 0);
    req.handle = handle;
    proto::reply_header reply;
    const int error = c->chan->call(&req, sizeof(req), &reply, sizeof(reply));
    return error == EIO ? 0 : error;
}

int query_device(ibv_context* context, ibv_device_attr* attr) {
    if (attr == nullptr) {
        return EINVAL;
    }
    proto::query_reply reply;
    if (const int error = ask(context, reply); error != 0) {
        return error;
    }
    fill_device_attr(reply.device, *attr);
    return 0;
}

// The kernel's IB_UVERBS_DEVICE_ATOMIC_WRITE (Linux 6.2), newer than rdma-core 44's headers:
// the bit rxe sets for IBV_WR_ATOMIC_WRITE.
constexpr uint64_t device_atomic_write = uint64_t{1} << 40;

int query_device_ex(ibv_context* context, const ibv_query_device_ex_input* input,
                    ibv_device_attr_ex* attr, size_t attr_size) {
    // No input extension is defined; an older struct must at least hold the legacy part.
    if (attr == nullptr || (input != nullptr && input->comp_mask != 0) ||
        attr_size < sizeof(ibv_device_attr)) {
        return EINVAL;
    }
    proto::query_reply reply;
    if (const int error = ask(context, reply); error != 0) {
        return error;
    }
    ibv_device_attr_ex full;
    std::memset(&full, 0, sizeof(full));
    fill_device_attr(reply.device, full.orig_attr);
    // The low 32 bits of the extended flags repeat the legacy ones; above them only ATOMIC
    // WRITE (no ODP, TSO, RSS, tag matching, packet pacing, device memory, FLUSH).
    full.device_cap_flags_ex = full.orig_attr.device_cap_flags | device_atomic_write;
    full.phys_port_cnt_ex = reply.device.phys_port_cnt;
    if ((reply.device.caps & proto::cap_completion_timestamps) != 0) {
        // The device clock is CLOCK_MONOTONIC in ns: 64 bits wide, 1 GHz.
        full.completion_timestamp_mask = ~uint64_t{0};
        full.hca_core_clock = proto::device_clock_khz;
    }
    copy_out(full, attr, attr_size);
    return 0;
}

int query_rt_values(ibv_context* context, ibv_values_ex* values) {
    if (to_context(context) == nullptr || values == nullptr) {
        return EINVAL;
    }
    // Only the raw clock is defined; as providers do, the answer's comp_mask says what was
    // filled (unknown bits are not).
    uint32_t filled = 0;
    if ((values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) != 0) {
        // The device clock of completion_ts (protocol.hh, cap_completion_timestamps).
        clock_gettime(CLOCK_MONOTONIC, &values->raw_clock);
        filled |= IBV_VALUES_MASK_RAW_CLOCK;
    }
    values->comp_mask = filled;
    return 0;
}

int query_port(ibv_context* context, uint8_t port_num, ibv_port_attr* attr, size_t attr_size) {
    if (attr == nullptr || port_num != 1) {
        return EINVAL;
    }
    proto::query_reply reply;
    if (const int error = ask(context, reply); error != 0) {
        return error;
    }
    ibv_port_attr full;
    fill_port_attr(reply.port, full);
    copy_out(full, attr, attr_size);
    return 0;
}

int query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index, ibv_gid_entry* entry,
                 uint32_t flags, size_t entry_size) {
    if (entry == nullptr || flags != 0 || port_num != 1 || entry_size < sizeof(ibv_gid_entry)) {
        return EINVAL;
    }
    proto::query_reply reply;
    if (const int error = ask(context, reply); error != 0) {
        return error;
    }
    if (gid_index >= reply.port.gid_tbl_len) {
        return EINVAL;
    }
    ibv_gid_entry full{};
    // Index 0: the IPv4-mapped GID; index 1: the IPv6 one (verbs_proto::gid_index_ipv6).
    std::memcpy(full.gid.raw,
                gid_index == proto::gid_index_ipv6 ? reply.port.gid1 : reply.port.gid0,
                sizeof(full.gid.raw));
    full.gid_index = gid_index;
    full.port_num = port_num;
    full.gid_type = IBV_GID_TYPE_ROCE_V2;
    full.ndev_ifindex = static_cast<uint32_t>(to_context(context)->netdev_ifindex);
    copy_out(full, entry, entry_size);
    return 0;
}

ssize_t query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries,
                        uint32_t flags, size_t entry_size) {
    if (entries == nullptr || flags != 0 || entry_size < sizeof(ibv_gid_entry)) {
        return -EINVAL;
    }
    proto::query_reply reply;
    if (const int error = ask(context, reply); error != 0) {
        return -error;
    }
    const size_t valid = reply.port.gid_tbl_len;
    if (max_entries < valid) {
        return -EINVAL;  // as libibverbs: the table must fit
    }
    for (size_t i = 0; i < valid; ++i) {
        auto* slot =
            reinterpret_cast<ibv_gid_entry*>(reinterpret_cast<char*>(entries) + i * entry_size);
        if (const int error =
                query_gid_ex(context, 1, static_cast<uint32_t>(i), slot, 0, entry_size);
            error != 0) {
            return -error;
        }
    }
    return static_cast<ssize_t>(valid);
}

int query_pkey(ibv_context* context, uint8_t port_num, int index, __be16* pkey) {
    if (to_context(context) == nullptr || pkey == nullptr || port_num != 1 || index != 0) {
        errno = EINVAL;
        return -1;
    }
    *pkey = htobe16(0xffff);  // the default full-membership partition, the only one
    return 0;
}

int get_pkey_index(ibv_context* context, uint8_t port_num, __be16 pkey) {
    if (to_context(context) == nullptr || port_num != 1 || be16toh(pkey) != 0xffff) {
        errno = EINVAL;
        return -1;
    }
    return 0;
}

int get_async_event(ibv_context* context, ibv_async_event* event) {
    shim_context* c = to_context(context);
    if (c == nullptr || event == nullptr) {
        errno = EINVAL;
        return -1;
    }
    for (;;) {
        proto::async_event_message m;
        // Blocks unless the application made async_fd non-blocking; EINTR reaches the caller
        // as with libibverbs' read(), so a signal can interrupt a waiting thread. Never past
        // jakirod's end (device_death.hh).
        const ssize_t n = receive_event(*c->death, context->async_fd, &m, sizeof(m));
        if (n < 0) {
            return -1;
        }
        if (n == 0) {
            // jakirod dropped us or exited: the device is gone. IBV_EVENT_DEVICE_FATAL once
            // (unless jakirod sent its own), then EIO, as a disassociated kernel device.
            c->death->mark_dead();
            if (c->death->take_fatal_report()) {
                std::memset(event, 0, sizeof(*event));
                event->event_type = IBV_EVENT_DEVICE_FATAL;
                return 0;
            }
            errno = EIO;
            return -1;
        }
        if (static_cast<size_t>(n) != sizeof(m) || m.hdr.magic != proto::magic ||
            m.hdr.version != proto::version ||
            m.hdr.opcode != static_cast<uint16_t>(proto::opcode::async_event)) {
            errno = EPROTO;
            return -1;
        }
        std::memset(event, 0, sizeof(*event));
        switch (static_cast<proto::event_type>(m.type)) {
            case proto::event_type::device_fatal:
                c->death->mark_dead();  // jakirod is stopping
                if (!c->death->take_fatal_report()) {
                    continue;  // already reported: once is the rule
                }
                event->event_type = IBV_EVENT_DEVICE_FATAL;
                return 0;
            case proto::event_type::port_active:
            case proto::event_type::port_error:
                event->event_type = static_cast<ibv_event_type>(m.type);
                event->element.port_num = static_cast<int>(m.port_num);
                return 0;
            case proto::event_type::cq_err: {
                const std::lock_guard lock(c->targets->mutex);
                const auto it = c->targets->cqs.find(static_cast<uint32_t>(m.handle));
                if (it == c->targets->cqs.end()) {
                    continue;  // destroyed meanwhile: nobody is left to tell
                }
                shim_cq* cq = it->second;
                pthread_mutex_lock(&cq->cq.mutex);
                ++cq->async_events_reported;  // ibv_destroy_cq waits for its ack
                pthread_mutex_unlock(&cq->cq.mutex);
                event->event_type = IBV_EVENT_CQ_ERR;
                event->element.cq = &cq->cq;
                return 0;
            }
            case proto::event_type::qp_fatal:
            case proto::event_type::qp_req_err:
            case proto::event_type::qp_access_err:
            case proto::event_type::comm_est:
            case proto::event_type::sq_drained:
            case proto::event_type::qp_last_wqe_reached: {
                const std::lock_guard lock(c->targets->mutex);
                const auto it = c->targets->qps.find(static_cast<uint32_t>(m.handle));
                if (it == c->targets->qps.end()) {
                    continue;  // destroyed meanwhile: nobody is left to tell
                }
                shim_qp* qp = it->second;
                pthread_mutex_lock(&qp->qp.mutex);
                ++qp->async_events_reported;  // ibv_destroy_qp waits for its ack
                pthread_mutex_unlock(&qp->qp.mutex);
                event->event_type = static_cast<ibv_event_type>(m.type);
                event->element.qp = &qp->qp;
                return 0;
            }
            case proto::event_type::srq_err:
            case proto::event_type::srq_limit_reached: {
                const std::lock_guard lock(c->targets->mutex);
                const auto it = c->targets->srqs.find(static_cast<uint32_t>(m.handle));
                if (it == c->targets->srqs.end()) {
                    continue;  // destroyed meanwhile: nobody is left to tell
                }
                shim_srq* srq = it->second;
                pthread_mutex_lock(&srq->srq.mutex);
                ++srq->async_events_reported;  // ibv_destroy_srq waits for its ack
                pthread_mutex_unlock(&srq->srq.mutex);
                event->event_type = static_cast<ibv_event_type>(m.type);
                event->element.srq = &srq->srq;
                return 0;
            }
            default:
                errno = EPROTO;
                return -1;
        }
    }
}

void ack_async_event(ibv_async_event* event) {
    if (event == nullptr) {
        return;
    }
    switch (event->event_type) {
        case IBV_EVENT_CQ_ERR:
            if (shim_cq* cq = to_cq(event->element.cq)) {
                pthread_mutex_lock(&cq->cq.mutex);
                ++cq->cq.async_events_completed;
                pthread_cond_signal(&cq->cq.cond);
                pthread_mutex_unlock(&cq->cq.mutex);
            }
            return;
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
        case IBV_EVENT_COMM_EST:
        case IBV_EVENT_SQ_DRAINED:
        case IBV_EVENT_PATH_MIG:
        case IBV_EVENT_PATH_MIG_ERR:
        case IBV_EVENT_QP_LAST_WQE_REACHED:
            if (shim_qp* qp = to_qp(event->element.qp)) {
                pthread_mutex_lock(&qp->qp.mutex);
                ++qp->qp.events_completed;
                pthread_cond_signal(&qp->qp.cond);
                pthread_mutex_unlock(&qp->qp.mutex);
            }
            return;
        case IBV_EVENT_SRQ_ERR:
        case IBV_EVENT_SRQ_LIMIT_REACHED:
            if (shim_srq* srq = to_srq(event->element.srq)) {
                pthread_mutex_lock(&srq->srq.mutex);
                ++srq->srq.events_completed;
                pthread_cond_signal(&srq->srq.cond);
                pthread_mutex_unlock(&srq->srq.mutex);
            }
            return;
        default:
            return;  // device and port events are not counted by anyone
    }
}

}  // namespace jakiro::verbs_shim
