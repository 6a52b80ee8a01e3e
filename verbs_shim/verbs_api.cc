// The exported libibverbs API of libjakiro_verbs.so: every function libibverbs 44 exports
// outside IBVERBS_PRIVATE (plus ibv_query_gid_type, which ibv_devinfo imports from it), in
// the order of verbs.h. Loaded with LD_PRELOAD, these unversioned definitions satisfy the
// programs' versioned references (ibv_open_device@IBVERBS_1.1).
//
// Each one works or fails the way its man page says a failure looks (NULL or -1 with errno,
// or an errno returned) with EOPNOTSUPP for what the engine does not do yet, and EINVAL for
// an object that is not the shim's (or NULL). None ever calls
// into the real libibverbs: it would take our objects for its own and crash. Everything here
// is a thin wrapper; internal calls never go through these exported names (the library is
// linked -Bsymbolic and its internals are hidden), so interposition cannot reroute them.
//
// No C++ exception may cross this ABI: nothing below throws (allocation uses nothrow).

#include <fcntl.h>
#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "verbs_shim/ah.hh"
#include "verbs_shim/context.hh"
#include "verbs_shim/cq.hh"
#include "verbs_shim/device.hh"
#include "verbs_shim/names.hh"
#include "verbs_shim/pd.hh"
#include "verbs_shim/qp.hh"
#include "verbs_shim/qp_ex.hh"
#include "verbs_shim/srq.hh"

// verbs.h turns these into inline wrappers; we define the real symbols.
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova
#undef ibv_get_device_list

#define JAKIRO_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using namespace jakiro::verbs_shim;

template <typename T>
T* fail_null(int error = EOPNOTSUPP) {
    errno = error;
    return nullptr;
}

// For verbs that return an errno.
int fail_errno(int error = EOPNOTSUPP) {
    errno = error;
    return error;
}

// For verbs that return -1 and set errno.
int fail_minus_one(int error = EOPNOTSUPP) {
    errno = error;
    return -1;
}

// ibv_fork_init() was called: registered pages are MADV_DONTFORK from then on.
std::atomic<bool> fork_initialized{false};

// ibv_gid_type_sysfs of rdma-core's driver.h (not installed): the values ibv_devinfo expects.
enum gid_type_sysfs { gid_type_sysfs_ib_roce_v1 = 0, gid_type_sysfs_roce_v2 = 1 };

}  // namespace

// ---------------------------------------------------------------- devices and contexts

JAKIRO_EXPORT ibv_device** ibv_get_device_list(int* num_devices) {
    return get_device_list(num_devices);
}

JAKIRO_EXPORT void ibv_free_device_list(ibv_device** list) {
    free_device_list(list);
}

JAKIRO_EXPORT const char* ibv_get_device_name(ibv_device* device) {
    return device_name(device);
}

JAKIRO_EXPORT int ibv_get_device_index(ibv_device* device) {
    return device_index(device);
}

JAKIRO_EXPORT __be64 ibv_get_device_guid(ibv_device* device) {
    return device_guid(device);
}

JAKIRO_EXPORT ibv_context* ibv_open_device(ibv_device* device) {
    return open_device(device);
}

JAKIRO_EXPORT int ibv_close_device(ibv_context* context) {
    return close_device(context);
}

// Importing needs a kernel command fd shared between processes; a vNIC has none.
JAKIRO_EXPORT ibv_context* ibv_import_device(int) {
    return fail_null<ibv_context>();
}

JAKIRO_EXPORT ibv_pd* ibv_import_pd(ibv_context*, uint32_t) {
    return fail_null<ibv_pd>();
}

JAKIRO_EXPORT void ibv_unimport_pd(ibv_pd*) {}

JAKIRO_EXPORT ibv_mr* ibv_import_mr(ibv_pd*, uint32_t) {
    return fail_null<ibv_mr>();
}

JAKIRO_EXPORT void ibv_unimport_mr(ibv_mr*) {}

JAKIRO_EXPORT ibv_dm* ibv_import_dm(ibv_context*, uint32_t) {
    return fail_null<ibv_dm>();
}

JAKIRO_EXPORT void ibv_unimport_dm(ibv_dm*) {}

JAKIRO_EXPORT int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
    return get_async_event(context, event);
}

JAKIRO_EXPORT void ibv_ack_async_event(ibv_async_event* event) {
    ack_async_event(event);
}

// ---------------------------------------------------------------- queries

JAKIRO_EXPORT int ibv_query_device(ibv_context* context, ibv_device_attr* device_attr) {
    return query_device(context, device_attr);
}

// The exported (pre-extension) ibv_query_port: programs built against current headers use
// the inline wrapper, which calls our query_port op with the full size instead.
JAKIRO_EXPORT int ibv_query_port(ibv_context* context, uint8_t port_num,
                                 _compat_ibv_port_attr* port_attr) {
    return query_port(context, port_num, reinterpret_cast<ibv_port_attr*>(port_attr),
                      offsetof(ibv_port_attr, port_cap_flags2));
}

JAKIRO_EXPORT int ibv_query_gid(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid) {
    if (gid == nullptr || index < 0) {
        return fail_minus_one(EINVAL);
    }
    ibv_gid_entry entry;
    const int error =
        query_gid_ex(context, port_num, static_cast<uint32_t>(index), &entry, 0, sizeof(entry));
    if (error != 0) {
        return fail_minus_one(error);
    }
    *gid = entry.gid;
    return 0;
}

JAKIRO_EXPORT int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index,
                                    ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
    return query_gid_ex(context, port_num, gid_index, entry, flags, entry_size);
}

JAKIRO_EXPORT ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries,
                                           size_t max_entries, uint32_t flags, size_t entry_size) {
    return query_gid_table(context, entries, max_entries, flags, entry_size);
}

// IBVERBS_PRIVATE in libibverbs, but ibv_devinfo imports it to print "RoCE v2".
JAKIRO_EXPORT int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index,
                                     int* type) {
    if (type == nullptr) {
        return fail_minus_one(EINVAL);
    }
    ibv_gid_entry entry;
    const int error = query_gid_ex(context, port_num, index, &entry, 0, sizeof(entry));
    if (error != 0) {
        return fail_minus_one(error);
    }
    *type =
        entry.gid_type == IBV_GID_TYPE_ROCE_V2 ? gid_type_sysfs_roce_v2 : gid_type_sysfs_ib_roce_v1;
    return 0;
}

JAKIRO_EXPORT int ibv_query_pkey(ibv_context* context, uint8_t port_num, int index, __be16* pkey) {
    return query_pkey(context, port_num, index, pkey);
}

JAKIRO_EXPORT int ibv_get_pkey_index(ibv_context* context, uint8_t port_num, __be16 pkey) {
    return get_pkey_index(context, port_num, pkey);
}

// ---------------------------------------------------------------- protection domains, MRs

JAKIRO_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* context) {
    return alloc_pd(context);
}

JAKIRO_EXPORT int ibv_dealloc_pd(ibv_pd* pd) {
    return dealloc_pd(pd);
}

JAKIRO_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
    return reg_mr(pd, addr, length, reinterpret_cast<uintptr_t>(addr),
                  static_cast<unsigned>(access));
}

JAKIRO_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                      int access) {
    return reg_mr(pd, addr, length, iova, static_cast<unsigned>(access));
}

JAKIRO_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                       unsigned int access) {
    return reg_mr(pd, addr, length, iova, access);
}

// A dma-buf is device memory of another driver; jakirod can only map memfds.
JAKIRO_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd*, uint64_t, size_t, uint64_t, int, int) {
    return fail_null<ibv_mr>();
}

JAKIRO_EXPORT int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length,
                               int access) {
    return rereg_mr(mr, flags, pd, addr, length, access);
}

JAKIRO_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
    return dereg_mr(mr);
}

// ---------------------------------------------------------------- completion queues

JAKIRO_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
    return create_comp_channel(context);
}

JAKIRO_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
    return destroy_comp_channel(channel);
}

JAKIRO_EXPORT ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context,
                                    ibv_comp_channel* channel, int comp_vector) {
    return create_cq(context, cqe, cq_context, channel, comp_vector);
}

JAKIRO_EXPORT int ibv_resize_cq(ibv_cq* cq, int cqe) {
    return resize_cq(cq, cqe);
}

JAKIRO_EXPORT int ibv_destroy_cq(ibv_cq* cq) {
    return destroy_cq(cq);
}

JAKIRO_EXPORT int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
    return get_cq_event(channel, cq, cq_context);
}

JAKIRO_EXPORT void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
    ack_cq_events(cq, nevents);
}

// ---------------------------------------------------------------- shared receive queues

JAKIRO_EXPORT ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* srq_init_attr) {
    return create_srq(pd, srq_init_attr);
}

JAKIRO_EXPORT int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* srq_attr, int srq_attr_mask) {
    return modify_srq(srq, srq_attr, srq_attr_mask);
}

JAKIRO_EXPORT int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* srq_attr) {
    return query_srq(srq, srq_attr);
}

JAKIRO_EXPORT int ibv_destroy_srq(ibv_srq* srq) {
    return destroy_srq(srq);
}

// ---------------------------------------------------------------- queue pairs

JAKIRO_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
    return create_qp(pd, qp_init_attr);
}

// NULL (errno untouched, as libibverbs) for a QP made without send ops.
JAKIRO_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
    return qp_to_qp_ex(qp);
}

JAKIRO_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
    return modify_qp(qp, attr, attr_mask);
}

// 0: no ordering guarantee beyond the IB spec's, the conservative and always-true answer.
JAKIRO_EXPORT int ibv_query_qp_data_in_order(ibv_qp*, ibv_wr_opcode, uint32_t) {
    return 0;
}

JAKIRO_EXPORT int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask,
                               ibv_qp_init_attr* init_attr) {
    return query_qp(qp, attr, attr_mask, init_attr);
}

JAKIRO_EXPORT int ibv_destroy_qp(ibv_qp* qp) {
    return destroy_qp(qp);
}

JAKIRO_EXPORT int ibv_set_ece(ibv_qp*, ibv_ece*) {
    return fail_errno();
}

JAKIRO_EXPORT int ibv_query_ece(ibv_qp*, ibv_ece*) {
    return fail_errno();
}

// ---------------------------------------------------------------- address handles, multicast

JAKIRO_EXPORT ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
    return create_ah(pd, attr);
}

JAKIRO_EXPORT int ibv_init_ah_from_wc(ibv_context* context, uint8_t port_num, ibv_wc* wc,
                                      ibv_grh* grh, ibv_ah_attr* ah_attr) {
    return init_ah_from_wc(context, port_num, wc, grh, ah_attr);
}

JAKIRO_EXPORT ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh,
                                            uint8_t port_num) {
    return create_ah_from_wc(pd, wc, grh, port_num);
}

JAKIRO_EXPORT int ibv_destroy_ah(ibv_ah* ah) {
    return destroy_ah(ah);
}

// Multicast groups: the overlay carries no multicast (docs/architecture.md §2).
JAKIRO_EXPORT int ibv_attach_mcast(ibv_qp*, const ibv_gid*, uint16_t) {
    return fail_errno();
}

JAKIRO_EXPORT int ibv_detach_mcast(ibv_qp*, const ibv_gid*, uint16_t) {
    return fail_errno();
}

JAKIRO_EXPORT int ibv_resolve_eth_l2_from_gid(ibv_context*, ibv_ah_attr*, uint8_t*, uint16_t*) {
    return fail_errno();
}

// ---------------------------------------------------------------- fork support

JAKIRO_EXPORT int ibv_fork_init(void) {
    fork_initialized = true;
    enable_fork_protection();
    return 0;
}

JAKIRO_EXPORT ibv_fork_status ibv_is_fork_initialized(void) {
    return fork_initialized ? IBV_FORK_ENABLED : IBV_FORK_DISABLED;
}

// Registration applies MADV_DONTFORK itself (after ibv_fork_init); a program's own calls
// for other ranges change nothing jakirod relies on.
JAKIRO_EXPORT int ibv_dontfork_range(void*, size_t) {
    return 0;
}

JAKIRO_EXPORT int ibv_dofork_range(void*, size_t) {
    return 0;
}

// ---------------------------------------------------------------- names and rates

JAKIRO_EXPORT const char* ibv_node_type_str(ibv_node_type node_type) {
    return node_type_name(node_type);
}

JAKIRO_EXPORT const char* ibv_port_state_str(ibv_port_state port_state) {
    return port_state_name(port_state);
}

JAKIRO_EXPORT const char* ibv_event_type_str(ibv_event_type event) {
    return event_type_name(event);
}

JAKIRO_EXPORT const char* ibv_wc_status_str(ibv_wc_status status) {
    return wc_status_name(status);
}

JAKIRO_EXPORT int ibv_rate_to_mult(ibv_rate rate) {
    return rate_to_mult(rate);
}

JAKIRO_EXPORT ibv_rate mult_to_ibv_rate(int mult) {
    return mult_to_rate(mult);
}

JAKIRO_EXPORT int ibv_rate_to_mbps(ibv_rate rate) {
    return rate_to_mbps(rate);
}

JAKIRO_EXPORT ibv_rate mbps_to_ibv_rate(int mbps) {
    return mbps_to_rate(mbps);
}

// ---------------------------------------------------------------- sysfs helpers

JAKIRO_EXPORT const char* ibv_get_sysfs_path(void) {
    // As libibverbs: $SYSFS_PATH without trailing slashes, else /sys.
    static char path[256] = "";
    static std::atomic<bool> done{false};
    if (!done.load(std::memory_order_acquire)) {
        const char* env = std::getenv("SYSFS_PATH");
        std::snprintf(path, sizeof(path), "%s", env != nullptr && *env != '\0' ? env : "/sys");
        for (size_t n = std::strlen(path); n > 1 && path[n - 1] == '/'; --n) {
            path[n - 1] = '\0';
        }
        done.store(true, std::memory_order_release);
    }
    return path;
}

// Reads <dir>/<file> into buf, NUL-terminated without its trailing newline; its length or -1.
// Our devices' sysfs paths do not exist, so for them this fails like a missing attribute.
JAKIRO_EXPORT int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) {
    if (dir == nullptr || file == nullptr || buf == nullptr || size == 0) {
        return fail_minus_one(EINVAL);
    }
    char path[512];
    if (std::snprintf(path, sizeof(path), "%s/%s", dir, file) >= static_cast<int>(sizeof(path))) {
        return fail_minus_one(ENAMETOOLONG);
    }
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    const ssize_t n = read(fd, buf, size);
    close(fd);
    if (n <= 0) {
        return -1;
    }
    size_t len = static_cast<size_t>(n);
    if (len == size) {
        --len;
    }
    buf[len] = '\0';
    if (len > 0 && buf[len - 1] == '\n') {
        buf[--len] = '\0';
    }
    return static_cast<int>(len);
}

// Registration of a pre-rdma-core provider into libibverbs' list: there is no list here, and
// a provider's devices could only be used through the real libibverbs.
JAKIRO_EXPORT void ibv_register_driver(const char*, void*) {}

// ---------------------------------------------------------------- kernel ABI marshalling

// Pure conversions between the kernel's uverbs structs and the verbs ones, for programs that
// talk to the kernel themselves (marshall.h): they touch no device, so they simply work.
JAKIRO_EXPORT void ibv_copy_ah_attr_from_kern(ibv_ah_attr* dst, ib_uverbs_ah_attr* src) {
    std::memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof(dst->grh.dgid));
    dst->grh.flow_label = src->grh.flow_label;
    dst->grh.sgid_index = src->grh.sgid_index;
    dst->grh.hop_limit = src->grh.hop_limit;
    dst->grh.traffic_class = src->grh.traffic_class;
    dst->dlid = src->dlid;
    dst->sl = src->sl;
    dst->src_path_bits = src->src_path_bits;
    dst->static_rate = src->static_rate;
    dst->is_global = src->is_global;
    dst->port_num = src->port_num;
}

JAKIRO_EXPORT void ibv_copy_qp_attr_from_kern(ibv_qp_attr* dst, ib_uverbs_qp_attr* src) {
    dst->cur_qp_state = static_cast<ibv_qp_state>(src->cur_qp_state);
    dst->path_mtu = static_cast<ibv_mtu>(src->path_mtu);
    dst->path_mig_state = static_cast<ibv_mig_state>(src->path_mig_state);
    dst->qkey = src->qkey;
    dst->rq_psn = src->rq_psn;
    dst->sq_psn = src->sq_psn;
    dst->dest_qp_num = src->dest_qp_num;
    dst->qp_access_flags = src->qp_access_flags;
    dst->cap.max_send_wr = src->max_send_wr;
    dst->cap.max_recv_wr = src->max_recv_wr;
    dst->cap.max_send_sge = src->max_send_sge;
    dst->cap.max_recv_sge = src->max_recv_sge;
    dst->cap.max_inline_data = src->max_inline_data;
    ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
    ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);
    dst->pkey_index = src->pkey_index;
    dst->alt_pkey_index = src->alt_pkey_index;
    dst->en_sqd_async_notify = src->en_sqd_async_notify;
    dst->sq_draining = src->sq_draining;
    dst->max_rd_atomic = src->max_rd_atomic;
    dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
    dst->min_rnr_timer = src->min_rnr_timer;
    dst->port_num = src->port_num;
    dst->timeout = src->timeout;
    dst->retry_cnt = src->retry_cnt;
    dst->rnr_retry = src->rnr_retry;
    dst->alt_port_num = src->alt_port_num;
    dst->alt_timeout = src->alt_timeout;
}

namespace {
// ibv_sa_path_rec (sa.h) and ib_user_path_rec (kernel) carry the same fields.
template <typename To, typename From>
void copy_path_fields(To* dst, const From* src) {
    dst->dlid = src->dlid;
    dst->slid = src->slid;
    dst->raw_traffic = src->raw_traffic;
    dst->flow_label = src->flow_label;
    dst->hop_limit = src->hop_limit;
    dst->traffic_class = src->traffic_class;
    dst->reversible = src->reversible;
    dst->numb_path = src->numb_path;
    dst->pkey = src->pkey;
    dst->sl = src->sl;
    dst->mtu_selector = src->mtu_selector;
    dst->mtu = src->mtu;
    dst->rate_selector = src->rate_selector;
    dst->rate = src->rate;
    dst->packet_life_time = src->packet_life_time;
    dst->preference = src->preference;
    dst->packet_life_time_selector = src->packet_life_time_selector;
}
}  // namespace

JAKIRO_EXPORT void ibv_copy_path_rec_from_kern(ibv_sa_path_rec* dst, ib_user_path_rec* src) {
    std::memcpy(dst->dgid.raw, src->dgid, sizeof(dst->dgid));
    std::memcpy(dst->sgid.raw, src->sgid, sizeof(dst->sgid));
    copy_path_fields(dst, src);
}

JAKIRO_EXPORT void ibv_copy_path_rec_to_kern(ib_user_path_rec* dst, ibv_sa_path_rec* src) {
    std::memcpy(dst->dgid, src->dgid.raw, sizeof(src->dgid));
    std::memcpy(dst->sgid, src->sgid.raw, sizeof(src->sgid));
    copy_path_fields(dst, src);
}
