#pragma once
// A verbs context on a shim device: a genuine struct verbs_context (abi_compat set, sz and
// every op filled) so that the inline verbs of verbs.h (ibv_query_port, ibv_query_device_ex,
// ibv_post_send, ibv_poll_cq, ...) land in shim code, embedded in the shim's own state and
// reached back with to_context() (rdma-core providers' to_mctx() pattern).
//
// Thread-safety: the context's channel serialises control verbs; the rest is immutable after
// open_device() until close_device(), which the application must not race with other verbs.

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "verbs_abi/protocol.hh"
#include "verbs_shim/channel.hh"
#include "verbs_shim/device.hh"
#include "verbs_shim/device_death.hh"

namespace jakiro::verbs_shim {

constexpr uint32_t context_magic = 0x4a4b'4358;  // "XCKJ": a context we made

struct shim_cq;
struct shim_qp;
struct shim_srq;

// The context's objects that jakirod's events name by handle (async events, completion
// events), so an event can be turned back into the application's pointer.
struct event_targets {
    std::mutex mutex;
    std::unordered_map<uint32_t, shim_cq*> cqs;
    std::unordered_map<uint32_t, shim_qp*> qps;
    std::unordered_map<uint32_t, shim_srq*> srqs;
};

struct shim_context {
    verbs_context vctx;  // vctx.context, its last member, is the ibv_context handed out
    uint32_t magic;
    shim_device* device;
    channel* chan;  // this context's connection: jakirod frees its state when it closes
    event_targets* targets;
    verbs_proto::hello_reply hello;
    int netdev_ifindex;   // the tenant's eth0, reported with the GID
    device_death* death;  // whether jakirod is gone, and what the verbs do then
};

// The shim context behind `context`, or nullptr if it is not one of ours.
shim_context* to_context(ibv_context* context);

ibv_context* open_device(ibv_device* device);
int close_device(ibv_context* context);

int query_device(ibv_context* context, ibv_device_attr* attr);
int query_device_ex(ibv_context* context, const ibv_query_device_ex_input* input,
                    ibv_device_attr_ex* attr, size_t attr_size);
// ibv_query_rt_values_ex: IBV_VALUES_MASK_RAW_CLOCK, the device clock (CLOCK_MONOTONIC).
int query_rt_values(ibv_context* context, ibv_values_ex* values);
int query_port(ibv_context* context, uint8_t port_num, ibv_port_attr* attr, size_t attr_size);
int query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index, ibv_gid_entry* entry,
                 uint32_t flags, size_t entry_size);
ssize_t query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries,
                        uint32_t flags, size_t entry_size);
int query_pkey(ibv_context* context, uint8_t port_num, int index, __be16* pkey);
int get_pkey_index(ibv_context* context, uint8_t port_num, __be16 pkey);

int get_async_event(ibv_context* context, ibv_async_event* event);
void ack_async_event(ibv_async_event* event);

// Tells jakirod to destroy one of the context's objects (dealloc_pd, dereg_mr, destroy_cq,
// destroy_qp):
// 0 or an errno (EBUSY while in use). With jakirod gone (EIO) there is nothing left to
// destroy, so that reads as success, as libibverbs' destroy verbs after a device is
// disassociated: programs can clean up after IBV_EVENT_DEVICE_FATAL.
int destroy_object(shim_context* c, verbs_proto::opcode op, uint32_t handle);

// Fills every op of `vctx` that is not built yet with one that fails with EOPNOTSUPP
// (unsupported.cc, after rdma-core's dummy_ops.c).
void fill_unsupported_ops(verbs_context& vctx);

}  // namespace jakiro::verbs_shim
