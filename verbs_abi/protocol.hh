#pragma once
// The shim ⇄ jakirod protocol: versioned POD messages over a SOCK_SEQPACKET Unix socket, one
// socket per vNIC at /run/jakiro/verbs/<vNIC MAC>.sock. File descriptors (the async event
// channel, MR memfds, CQ ring memfds, completion channel sockets) travel as SCM_RIGHTS with
// the message.
//
// Both ends are on the same host, so integers are in host byte order; addresses (MAC, IPv4,
// GID) are byte arrays in wire order. Every message starts with `header`; a reply carries the
// request's opcode with `reply_flag` set, echoes its request id and adds a status (0 or a
// positive errno). A reply with a non-zero status is just a `reply_header`.
//
// This header is shared by libjakiro_verbs.so and jakirod: plain C++, no verbs.h, no DPDK.
// Layouts are frozen per `version`: any change to a struct below bumps it.

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

namespace jakiro::verbs_proto {

constexpr uint32_t magic = 0x4256'4b4a;  // "JKVB" in memory on little-endian hosts
// 1: HELLO and QUERY. 2: PDs, MRs, CQs and completion channels. 3: QPs (RC).
// 4: UC and UD QPs, shared receive queues. 5: the port's IPv6 GID (port_attrs::gid1).
constexpr uint16_t version = 5;

// SOCK_SEQPACKET keeps message boundaries, so a receiver reads into a buffer one byte larger
// than this and rejects anything that fills it. 4 KiB holds every message with room to grow
// and is far below the socket buffer, so a reply never blocks the daemon's thread.
constexpr std::size_t max_message_size = 4096;
// Most descriptors one message may carry (a QP will need its ring memfd and a doorbell).
// A request carries at most one today (reg_mr: the memory; create_cq: the completion channel).
constexpr std::size_t max_fds_per_message = 4;
constexpr std::size_t name_size = 32;  // vNIC and host names, NUL-terminated

enum class opcode : uint16_t {
    hello = 1,  // identify the vNIC; reply carries the async event channel fd
    query = 2,  // device and port attributes (live: port state and GID follow the vNIC)

    // Resource verbs (version 2).
    alloc_pd = 16,
    dealloc_pd = 17,
    reg_mr = 18,  // with one fd: the memfd holding the region's pages
    dereg_mr = 19,
    create_cq = 20,  // with zero or one fd: the completion channel; reply: the ring memfd
    destroy_cq = 22,

    // Queue pairs (version 3).
    create_qp = 23,  // reply: two fds, the QP ring memfd and the engine's doorbell page
    modify_qp = 24,
    query_qp = 25,
    destroy_qp = 26,

    // Shared receive queues (version 4).
    create_srq = 27,  // reply: one fd, the SRQ ring memfd
    modify_srq = 28,
    destroy_srq = 29,
    query_srq = 34,

    // ibv_rereg_mr (version 4, added without a layout change): with one fd, as reg_mr.
    rereg_mr = 35,
    // ibv_resize_cq (version 4, added without a layout change): reply: the new ring memfd.
    resize_cq = 21,
    // Memory windows (version 4, added without a layout change): ibv_alloc_mw answers with the
    // window's handle (its first rkey); ibv_dealloc_mw sends a destroy_request.
    alloc_mw = 36,
    dealloc_mw = 37,

    // Reserved; jakirod answers EOPNOTSUPP until they exist, so a newer shim against an
    // older daemon fails cleanly. Completion channels need no opcode: they are shim-side
    // sockets whose far end travels with create_cq.
    create_ah = 30,
    destroy_ah = 31,
    create_comp_channel = 32,
    destroy_comp_channel = 33,

    // Daemon → shim, on the async event channel (never a reply).
    async_event = 64,
    // Daemon → shim, on a completion channel (never a reply): an armed CQ got a completion.
    comp_event = 65,
};
constexpr uint16_t reply_flag = 0x8000;

constexpr uint16_t reply_opcode(opcode op) {
    return static_cast<uint16_t>(static_cast<uint16_t>(op) | reply_flag);
}

struct header {
    uint32_t magic;
    uint16_t version;
    uint16_t opcode;      // `opcode`, | reply_flag in replies
    uint32_t length;      // whole message in bytes, this header included
    uint32_t request_id;  // chosen by the client, echoed in the reply; 0 in async events
};
static_assert(sizeof(header) == 16);
static_assert(offsetof(header, version) == 4);
static_assert(offsetof(header, opcode) == 6);
static_assert(offsetof(header, length) == 8);
static_assert(offsetof(header, request_id) == 12);

struct reply_header {
    header hdr;
    int32_t status;  // 0, or a positive errno that the shim hands to the application
    uint32_t reserved;
};
static_assert(sizeof(reply_header) == 24);
static_assert(offsetof(reply_header, status) == 16);

// Values are those of the IB spec (and of libibverbs' enums); the shim static_asserts that.
enum class port_state : uint8_t { down = 1, init = 2, armed = 3, active = 4 };
enum class event_type : uint32_t {
    cq_err = 0,         // a CQ overflowed: jakirod refused a completion rather than overwrite one
    qp_fatal = 1,       // the engine moved a QP to ERR on its own (e.g. a CQ overflowed)
    qp_req_err = 2,     // the responder saw an invalid request (NAK invalid request)
    qp_access_err = 3,  // the responder saw a protection violation (NAK remote access)
    comm_est = 4,       // first packet received in RTR
    sq_drained = 5,
    srq_err = 14,              // an SRQ ring whose producer makes no sense: it reads as empty
    srq_limit_reached = 15,    // an armed SRQ fell below its limit (handle: the SRQ's), disarmed
    qp_last_wqe_reached = 16,  // a QP on an SRQ entered ERR: it takes no more SRQ WQEs
    port_active = 9,
    port_error = 10,
    device_fatal = 8,
};

// Device capability bits, mapped by the shim to ibv_device_cap_flags. Only what the engine
// implements is ever set.
enum device_caps : uint32_t {
    cap_rc_rnr_nak_gen = 1u << 0,  // responder sends RNR NAKs (engine: RNR with rnr_retry)
    cap_sys_image_guid = 1u << 1,  // sys_image_guid is meaningful
    // CQs created with cq_with_timestamps carry completion_ts (the device clock: the host's
    // CLOCK_MONOTONIC in ns, so hca_core_clock is 1 GHz) and wallclock_ns (CLOCK_REALTIME).
    cap_completion_timestamps = 1u << 2,
    // Memory windows of type 1 and type 2B (IBV_DEVICE_MEM_WINDOW, _TYPE_2B), as rxe has them;
    // device_attrs.max_mw says how many.
    cap_memory_windows = 1u << 3,
};
// The device clock of cap_completion_timestamps, in kHz as ibv_device_attr_ex.hca_core_clock.
constexpr uint64_t device_clock_khz = 1'000'000;
// A port's GID table (RoCE v2 only, no RoCE v1 entries): index 0 is the vNIC's IPv4 address,
// IPv4-mapped; index 1, when the vNIC has one, its IPv6 address. port_attrs::gid_tbl_len is 1
// or 2 accordingly.
constexpr uint8_t gid_index_ipv4 = 0;
constexpr uint8_t gid_index_ipv6 = 1;
// Port capability bits, mapped to ibv_port_cap_flags.
enum port_caps : uint32_t {
    cap_ip_based_gids = 1u << 0,  // GIDs are derived from IP addresses (RoCE v2)
};

// What the engine supports; the shim reports these in ibv_device_attr unchanged.
struct limits {
    uint64_t max_mr_size;
    uint64_t page_size_cap;
    uint32_t max_qp;
    uint32_t max_qp_wr;
    uint32_t max_sge;
    uint32_t max_sge_rd;
    uint32_t max_cq;
    uint32_t max_cqe;
    uint32_t max_mr;
    uint32_t max_pd;
    uint32_t max_qp_rd_atom;
    uint32_t max_qp_init_rd_atom;
    uint32_t max_res_rd_atom;
    uint32_t max_srq;
    uint32_t max_srq_wr;
    uint32_t max_srq_sge;
    uint32_t max_ah;
    uint32_t max_msg_size;
    uint32_t max_inline_data;
    uint32_t atomics;  // 0: none (IBV_ATOMIC_NONE); 1: within this device (IBV_ATOMIC_HCA)
};
static_assert(sizeof(limits) == 88);
static_assert(offsetof(limits, max_qp) == 16);
static_assert(offsetof(limits, atomics) == 84);

struct device_attrs {
    char fw_ver[64];  // jakirod's version
    uint64_t node_guid;
    uint64_t sys_image_guid;
    uint32_t vendor_id;
    uint32_t vendor_part_id;
    uint32_t hw_ver;
    uint32_t caps;  // device_caps
    uint8_t phys_port_cnt;
    uint8_t local_ca_ack_delay;
    uint16_t max_pkeys;
    uint32_t max_mw;  // memory windows (0 from a daemon without them: was reserved, zero)
    limits lim;
};
static_assert(sizeof(device_attrs) == 192);
static_assert(offsetof(device_attrs, node_guid) == 64);
static_assert(offsetof(device_attrs, lim) == 104);

struct port_attrs {
    uint8_t state;        // port_state
    uint8_t phys_state;   // 5: LinkUp
    uint8_t link_layer;   // 2: Ethernet (IBV_LINK_LAYER_ETHERNET)
    uint8_t max_vl_num;   // 1: one VL
    uint32_t max_mtu;     // bytes: largest path MTU the engine segments to
    uint32_t active_mtu;  // bytes: path MTU that fits the tenant MTU
    uint32_t max_msg_sz;
    uint32_t caps;  // port_caps
    uint16_t gid_tbl_len;
    uint16_t pkey_tbl_len;
    uint8_t active_width;  // IB encoding (1: 1X)
    uint8_t active_speed;  // IB encoding (32: 25 Gb/s): nominal, the vNIC has no line rate
    uint8_t gid0_type;     // 2: RoCE v2 (IBV_GID_TYPE_ROCE_V2)
    uint8_t reserved0;
    uint32_t reserved1;
    uint8_t gid0[16];  // the vNIC's IPv4 address, IPv4-mapped (::ffff:a.b.c.d)
    uint8_t gid1[16];  // gid_tbl_len 2: the vNIC's IPv6 address, also RoCE v2; else zero
};
static_assert(sizeof(port_attrs) == 64);
static_assert(offsetof(port_attrs, max_mtu) == 4);
static_assert(offsetof(port_attrs, gid_tbl_len) == 20);
static_assert(offsetof(port_attrs, gid0) == 32);
static_assert(offsetof(port_attrs, gid1) == 48);

struct hello_request {
    header hdr;
    uint32_t pid;    // for logs only; jakirod trusts SO_PEERCRED
    uint32_t flags;  // none defined: must be 0
    char program[name_size];
};
static_assert(sizeof(hello_request) == 56);
static_assert(offsetof(hello_request, program) == 24);

// Sent with one fd (SCM_RIGHTS): the client's end of its async event channel, a
// SOCK_SEQPACKET socket that carries `async_event_message`s and reaches EOF when jakirod
// drops the client or exits.
struct hello_reply {
    reply_header rh;
    char vnic_name[name_size];
    char host_name[name_size];
    uint8_t mac[6];
    uint8_t ipv4[4];
    uint8_t port_state;  // port_state
    uint8_t reserved0;
    uint32_t tenant_mtu;  // bytes: the vNIC's Ethernet MTU (underlay MTU less 50)
    uint32_t path_mtu;    // bytes: 1024 for a 1500 underlay, 4096 for 9000
    uint64_t node_guid;   // EUI-64 of the MAC, as a number (the shim stores it big-endian)
    uint64_t client_id;   // jakirod's name for this connection (logs, jakiroctl)
    limits lim;
    uint8_t ipv6[16];  // the vNIC's IPv6 address (its GID at index 1); all zero: none
};
static_assert(sizeof(hello_reply) == 232);
static_assert(offsetof(hello_reply, ipv6) == 216);
static_assert(offsetof(hello_reply, vnic_name) == 24);
static_assert(offsetof(hello_reply, mac) == 88);
static_assert(offsetof(hello_reply, tenant_mtu) == 100);
static_assert(offsetof(hello_reply, node_guid) == 112);
static_assert(offsetof(hello_reply, lim) == 128);

struct query_request {
    header hdr;
    uint32_t port_num;  // must be 1: one port per vNIC
    uint32_t flags;     // none defined: must be 0
};
static_assert(sizeof(query_request) == 24);

struct query_reply {
    reply_header rh;
    device_attrs device;
    port_attrs port;
};
static_assert(sizeof(query_reply) == 280);
static_assert(offsetof(query_reply, device) == 24);
static_assert(offsetof(query_reply, port) == 216);

struct async_event_message {
    header hdr;         // opcode::async_event
    uint32_t type;      // event_type
    uint32_t port_num;  // port events
    uint64_t handle;    // QP/CQ/SRQ events (reserved): the object's handle
};
static_assert(sizeof(async_event_message) == 32);

// ---------------------------------------------------------------- resources (version 2)
//
// Handles and keys are jakirod's, unique per vNIC (not per connection), and checked against
// the connection that uses them: a client can only name its own objects. A handle is
// (slot index << 8) | an 8-bit tag that changes whenever the slot is reused, so a stale or
// guessed handle rarely names a live object. An MR's handle is its key (lkey == rkey).

// Access rights of a memory region, with the values of ibv_access_flags (the shim asserts
// it). Remote write and remote atomic need local write, as in the IB spec.
enum mr_access : uint32_t {
    access_local_write = 1u << 0,
    access_remote_write = 1u << 1,
    access_remote_read = 1u << 2,
    access_remote_atomic = 1u << 3,
    // The MR may carry memory windows (IBV_ACCESS_MW_BIND): a bind onto it is refused without.
    access_mw_bind = 1u << 4,
    // A window bind only (IBV_ACCESS_ZERO_BASED): the window's addresses start at 0.
    access_zero_based = 1u << 5,
};
constexpr uint32_t mr_access_all =
    access_local_write | access_remote_write | access_remote_read | access_remote_atomic;
// Rights that let jakirod write into the region (its mapping is read-only without them).
constexpr uint32_t mr_access_writes =
    access_local_write | access_remote_write | access_remote_atomic;

// What a window bind may ask for (ibv_mw_bind_info.mw_access_flags, libibverbs' values). A
// window is reached by its rkey only, so it grants remote rights only: local write and MW_BIND
// (an MR's rights, which programs pass on with the MR's flags, and mlx5 and rxe take) are
// taken and grant nothing.
constexpr uint32_t mw_access_all = access_local_write | access_remote_write | access_remote_read |
                                   access_remote_atomic | access_mw_bind | access_zero_based;

// Registrations are in pages of this size (x86-64; the shim refuses to run on anything else).
constexpr uint64_t mr_page_size = 4096;

struct alloc_pd_request {
    header hdr;
    uint32_t flags;  // none defined: must be 0
    uint32_t reserved;
};
static_assert(sizeof(alloc_pd_request) == 24);

// ibv_alloc_mw: a window of `type` (1 or 2, ibv_mw_type) in PD `pd_handle`.
struct alloc_mw_request {
    header hdr;
    uint32_t pd_handle;
    uint32_t type;
};
static_assert(sizeof(alloc_mw_request) == 24);
static_assert(offsetof(alloc_mw_request, type) == 20);

// The window's handle, also its rkey until a bind changes the low 8 bits (the consumer key).
struct alloc_mw_reply {
    reply_header rh;
    uint32_t mw_handle;
    uint32_t reserved;
};
static_assert(sizeof(alloc_mw_reply) == 32);
static_assert(offsetof(alloc_mw_reply, mw_handle) == 24);

struct alloc_pd_reply {
    reply_header rh;
    uint32_t pd_handle;
    uint32_t reserved;
};
static_assert(sizeof(alloc_pd_reply) == 32);
static_assert(offsetof(alloc_pd_reply, pd_handle) == 24);

// dealloc_pd, dereg_mr, destroy_cq: one handle; the reply is a reply_header (EBUSY while
// other objects still use it, EINVAL for a handle that is not the client's).
struct destroy_request {
    header hdr;
    uint32_t handle;
    uint32_t flags;  // none defined: must be 0
};
static_assert(sizeof(destroy_request) == 24);
static_assert(offsetof(destroy_request, handle) == 16);

// Sent with one fd: a memfd sealed against shrinking (F_SEAL_SHRINK) whose pages at
// [fd_offset, fd_offset + span) are the application's pages at [addr - page_offset, ...):
// the shim remapped them onto it (README "Memory registration"). jakirod maps the same span.
struct reg_mr_request {
    header hdr;
    uint32_t pd_handle;
    uint32_t access;       // mr_access
    uint64_t addr;         // the application's address of the first byte (logs, jakiroctl)
    uint64_t length;       // bytes, at least 1
    uint64_t iova;         // what peers and work requests call the first byte (addr, usually)
    uint64_t fd_offset;    // page-aligned offset in the memfd of the page holding `addr`
    uint32_t page_offset;  // addr's offset in its page (< 4096)
    uint32_t flags;        // none defined: must be 0
};
static_assert(sizeof(reg_mr_request) == 64);
static_assert(offsetof(reg_mr_request, pd_handle) == 16);
static_assert(offsetof(reg_mr_request, addr) == 24);
static_assert(offsetof(reg_mr_request, fd_offset) == 48);
static_assert(offsetof(reg_mr_request, page_offset) == 56);

// ibv_rereg_mr: MR `mr_handle` becomes the registration described as in reg_mr_request (its
// PD, access and range; whatever ibv_rereg_mr did not change is the old value), keeping its
// keys, so a peer that holds the rkey goes on using it. All or nothing: on an error the old
// registration is untouched. The reply is a reg_mr_reply carrying the same keys.
struct rereg_mr_request {
    header hdr;
    uint32_t mr_handle;  // the key to keep
    uint32_t pd_handle;
    uint32_t access;  // mr_access
    uint32_t flags;   // none defined: must be 0
    uint64_t addr;
    uint64_t length;
    uint64_t iova;
    uint64_t fd_offset;
    uint32_t page_offset;
    uint32_t reserved;  // must be 0
};
static_assert(sizeof(rereg_mr_request) == 72);
static_assert(offsetof(rereg_mr_request, mr_handle) == 16);
static_assert(offsetof(rereg_mr_request, addr) == 32);
static_assert(offsetof(rereg_mr_request, fd_offset) == 56);
static_assert(offsetof(rereg_mr_request, page_offset) == 64);

struct reg_mr_reply {
    reply_header rh;
    uint32_t mr_handle;  // == lkey
    uint32_t lkey;
    uint32_t rkey;  // == lkey: one key per MR
    uint32_t reserved;
};
static_assert(sizeof(reg_mr_reply) == 40);
static_assert(offsetof(reg_mr_reply, lkey) == 28);

enum create_cq_flags : uint32_t {
    cq_with_channel = 1u << 0,     // one fd comes with the request: the completion channel
    cq_with_timestamps = 1u << 1,  // every completion carries completion_ts and wallclock_ns
};

// Sent with the far end of the CQ's completion channel when `flags` has cq_with_channel: a
// connected AF_UNIX SOCK_SEQPACKET socket on which jakirod sends a comp_event_message when an
// armed CQ gets a completion (never blocking: MSG_DONTWAIT).
struct create_cq_request {
    header hdr;
    uint32_t cqe;          // requested entries, 1..max_cqe
    uint32_t comp_vector;  // < num_comp_vectors (1)
    uint32_t flags;        // create_cq_flags
    uint32_t reserved;
};
static_assert(sizeof(create_cq_request) == 32);
static_assert(offsetof(create_cq_request, cqe) == 16);

// Sent with one fd: the memfd of the CQ ring (rings.hh), created and sealed by jakirod,
// exactly cq_ring_bytes(capacity) long. The shim maps it shared, read-write.
struct create_cq_reply {
    reply_header rh;
    uint32_t cq_handle;
    uint32_t capacity;    // slots, a power of two >= cqe: what ibv_cq.cqe reports
    uint64_t ring_bytes;  // size of the memfd
};
static_assert(sizeof(create_cq_reply) == 40);
static_assert(offsetof(create_cq_reply, cq_handle) == 24);
static_assert(offsetof(create_cq_reply, ring_bytes) == 32);

// ibv_resize_cq: CQ `cq_handle` gets a new ring of at least `cqe` slots (1..max_cqe). jakirod
// moves the completions the shim has not consumed yet (those between the old ring's consumer
// and producer indices) to the start of the new ring, carries the arm and overflow state over
// and from then on completes into the new ring only; the shim must not poll the old ring while
// the request is in flight (it holds the CQ's poll lock). More unconsumed completions than the
// new capacity holds is EINVAL and the old ring stays; growth beyond the vNIC's
// rdma.max_cqes is EDQUOT. Reply: sent with one fd, the new ring's memfd (as create_cq's).
struct resize_cq_request {
    header hdr;
    uint32_t cq_handle;
    uint32_t cqe;    // requested entries, 1..max_cqe
    uint32_t flags;  // none defined: must be 0
    uint32_t reserved;
};
static_assert(sizeof(resize_cq_request) == 32);
static_assert(offsetof(resize_cq_request, cq_handle) == 16);
static_assert(offsetof(resize_cq_request, cqe) == 20);

struct resize_cq_reply {
    reply_header rh;
    uint32_t capacity;     // slots, a power of two >= cqe: what ibv_cq.cqe reports from now on
    uint32_t outstanding;  // completions moved to the start of the new ring
    uint64_t ring_bytes;   // size of the memfd
};
static_assert(sizeof(resize_cq_reply) == 40);
static_assert(offsetof(resize_cq_reply, capacity) == 24);
static_assert(offsetof(resize_cq_reply, ring_bytes) == 32);

struct comp_event_message {
    header hdr;  // opcode::comp_event, request_id 0
    uint32_t cq_handle;
    uint32_t reserved;
};
static_assert(sizeof(comp_event_message) == 24);

// ---------------------------------------------------------------- queue pairs (version 3)
//
// A QP's send and receive queues live in one memfd jakirod creates (rings.hh: qp_ring_header,
// send_wqe, recv_wqe) and sends with the create_qp reply, followed by the engine's doorbell
// page (a sealed memfd of doorbell_bytes; the shim rings it after posting when the ring says
// jakirod is asleep: rings.hh). QP attributes travel as `qp_attr_wire`, a POD mirror of ibv_qp_attr
// with the same meanings and ibv_qp_attr_mask bits; the shim static_asserts the enum values it
// relies on.

enum qp_type_wire : uint8_t {
    qpt_rc = 2,  // IBV_QPT_RC
    qpt_uc = 3,  // IBV_QPT_UC (reserved: EOPNOTSUPP until built)
    qpt_ud = 4,  // IBV_QPT_UD (reserved: EOPNOTSUPP until built)
};

struct create_qp_request {
    header hdr;
    uint32_t pd_handle;
    uint32_t send_cq;
    uint32_t recv_cq;
    uint32_t srq;  // 0: none, else an SRQ of the client's: receives come from it (rq: 1 slot)
    uint32_t max_send_wr;
    uint32_t max_recv_wr;
    uint32_t max_send_sge;
    uint32_t max_recv_sge;
    uint32_t max_inline_data;
    uint8_t qp_type;     // qp_type_wire
    uint8_t sq_sig_all;  // 1: every send WR completes signaled
    uint16_t reserved0;
    uint32_t flags;  // none defined: must be 0
    uint32_t reserved1;
};
static_assert(sizeof(create_qp_request) == 64);
static_assert(offsetof(create_qp_request, max_send_wr) == 32);
static_assert(offsetof(create_qp_request, qp_type) == 52);

// Sent with two fds: the ring memfd (exactly ring_bytes long, sealed) and the doorbell page.
struct create_qp_reply {
    reply_header rh;
    uint32_t qp_handle;    // jakirod's handle for the other QP verbs
    uint32_t qp_num;       // the 24-bit QPN peers address (BTH DestQP)
    uint32_t sq_capacity;  // slots, a power of two >= max_send_wr
    uint32_t rq_capacity;  // slots, a power of two >= max_recv_wr
    uint32_t max_send_sge;
    uint32_t max_recv_sge;
    uint32_t max_inline_data;
    uint32_t reserved;
    uint64_t ring_bytes;
};
static_assert(sizeof(create_qp_reply) == 64);
static_assert(offsetof(create_qp_reply, qp_handle) == 24);
static_assert(offsetof(create_qp_reply, ring_bytes) == 56);

// ibv_ah_attr with its GRH, for RoCE: the remote GID carries the peer's IPv4 address.
struct ah_attr_wire {
    uint8_t dgid[16];
    uint32_t flow_label;
    uint8_t sgid_index;
    uint8_t hop_limit;
    uint8_t traffic_class;
    uint8_t is_global;
    uint16_t dlid;
    uint8_t sl;
    uint8_t src_path_bits;
    uint8_t static_rate;
    uint8_t port_num;
    uint16_t reserved;
};
static_assert(sizeof(ah_attr_wire) == 32);

// ibv_qp_attr, field by field (enums as their integer values).
struct qp_attr_wire {
    uint32_t qp_state;
    uint32_t cur_qp_state;
    uint32_t path_mtu;  // enum ibv_mtu (1 = 256 ... 5 = 4096)
    uint32_t path_mig_state;
    uint32_t qkey;
    uint32_t rq_psn;
    uint32_t sq_psn;
    uint32_t dest_qp_num;
    uint32_t qp_access_flags;
    uint32_t max_send_wr;  // cap
    uint32_t max_recv_wr;
    uint32_t max_send_sge;
    uint32_t max_recv_sge;
    uint32_t max_inline_data;
    ah_attr_wire ah_attr;
    ah_attr_wire alt_ah_attr;
    uint16_t pkey_index;
    uint16_t alt_pkey_index;
    uint8_t en_sqd_async_notify;
    uint8_t sq_draining;
    uint8_t max_rd_atomic;
    uint8_t max_dest_rd_atomic;
    uint8_t min_rnr_timer;
    uint8_t port_num;
    uint8_t timeout;
    uint8_t retry_cnt;
    uint8_t rnr_retry;
    uint8_t alt_port_num;
    uint8_t alt_timeout;
    uint8_t reserved0;
    uint32_t rate_limit;
    uint32_t reserved1;
};
static_assert(sizeof(qp_attr_wire) == 144);
static_assert(offsetof(qp_attr_wire, ah_attr) == 56);
static_assert(offsetof(qp_attr_wire, pkey_index) == 120);
static_assert(offsetof(qp_attr_wire, rate_limit) == 136);

struct modify_qp_request {
    header hdr;
    uint32_t qp_handle;
    int32_t attr_mask;  // ibv_qp_attr_mask
    qp_attr_wire attr;
};
static_assert(sizeof(modify_qp_request) == 168);

struct query_qp_request {
    header hdr;
    uint32_t qp_handle;
    int32_t attr_mask;  // what the caller asks for (jakirod fills everything anyway)
};
static_assert(sizeof(query_qp_request) == 24);

struct query_qp_reply {
    reply_header rh;
    qp_attr_wire attr;  // cap: what the QP really has
    uint32_t sq_sig_all;
    uint32_t reserved;
};
static_assert(sizeof(query_qp_reply) == 176);

// destroy_qp uses destroy_request. A QP with work requests outstanding is destroyed at once:
// its in-flight operations are abandoned, as on a real RNIC.

// ---------------------------------------------------------------- shared receive queues (v4)
//
// An SRQ is a ring of receive WQEs (rings.hh: srq_ring_header, recv_wqe) in a memfd jakirod
// creates and seals and sends with the create_srq reply; QPs created with its handle take
// their receive WQEs from it instead of their own RQ. The limit (ibv_modify_srq with
// IBV_SRQ_LIMIT) is kept by jakirod: once armed, the first WQE taken that leaves fewer than
// `srq_limit` posted raises srq_limit_reached and disarms. destroy_srq uses destroy_request
// (EBUSY while QPs use it).

struct create_srq_request {
    header hdr;
    uint32_t pd_handle;
    uint32_t max_wr;     // 1..max_srq_wr
    uint32_t max_sge;    // 0..max_srq_sge
    uint32_t srq_limit;  // ignored at creation (as ibv_create_srq says), must be <= max_wr
    uint32_t flags;      // none defined: must be 0
    uint32_t reserved;
};
static_assert(sizeof(create_srq_request) == 40);
static_assert(offsetof(create_srq_request, pd_handle) == 16);
static_assert(offsetof(create_srq_request, flags) == 32);

// Sent with one fd: the SRQ ring memfd, exactly ring_bytes long, sealed.
struct create_srq_reply {
    reply_header rh;
    uint32_t srq_handle;
    uint32_t capacity;  // slots, a power of two >= max_wr: what max_wr reports
    uint32_t max_sge;   // SGEs a WQE may carry (>= asked)
    uint32_t reserved;
    uint64_t ring_bytes;
};
static_assert(sizeof(create_srq_reply) == 48);
static_assert(offsetof(create_srq_reply, srq_handle) == 24);
static_assert(offsetof(create_srq_reply, ring_bytes) == 40);

enum srq_attr_mask_wire : uint32_t {
    srq_attr_max_wr = 1u << 0,  // IBV_SRQ_MAX_WR: resizing, EOPNOTSUPP
    srq_attr_limit = 1u << 1,   // IBV_SRQ_LIMIT: arm (0 disarms)
};

struct modify_srq_request {
    header hdr;
    uint32_t srq_handle;
    uint32_t attr_mask;  // srq_attr_mask_wire
    uint32_t max_wr;
    uint32_t srq_limit;  // <= the SRQ's capacity
};
static_assert(sizeof(modify_srq_request) == 32);
static_assert(offsetof(modify_srq_request, srq_limit) == 28);

struct query_srq_request {
    header hdr;
    uint32_t srq_handle;
    uint32_t flags;  // none defined: must be 0
};
static_assert(sizeof(query_srq_request) == 24);

struct query_srq_reply {
    reply_header rh;
    uint32_t max_wr;  // the capacity
    uint32_t max_sge;
    uint32_t srq_limit;  // armed limit, 0 when not armed (or fired since)
    uint32_t reserved;
};
static_assert(sizeof(query_srq_reply) == 40);
static_assert(offsetof(query_srq_reply, srq_limit) == 32);

static_assert(sizeof(query_reply) <= max_message_size);
static_assert(std::is_trivially_copyable_v<hello_reply> &&
              std::is_trivially_copyable_v<query_reply>);

// ---------------------------------------------------------------- validation

enum class parse_error {
    none,
    truncated,        // shorter than a header: not our protocol, the receiver drops the peer
    bad_magic,        // likewise
    bad_version,      // a shim and jakirod from different builds: reply EPROTONOSUPPORT
    length_mismatch,  // header.length differs from what arrived: EBADMSG
    oversized,        // more than max_message_size: EMSGSIZE
    unknown_opcode,   // EOPNOTSUPP (also every reserved opcode until it is built)
    bad_size,         // known opcode, wrong struct size: EBADMSG
    not_a_request,    // a reply or an event sent to the daemon: EBADMSG
};

// The errno a reply carries for each error; 0 for the two where no reply is possible.
constexpr int errno_for(parse_error e) {
    switch (e) {
        case parse_error::none:
        case parse_error::truncated:
        case parse_error::bad_magic:
            return 0;
        case parse_error::bad_version:
            return EPROTONOSUPPORT;
        case parse_error::length_mismatch:
        case parse_error::bad_size:
        case parse_error::not_a_request:
            return EBADMSG;
        case parse_error::oversized:
            return EMSGSIZE;
        case parse_error::unknown_opcode:
            return EOPNOTSUPP;
    }
    return EBADMSG;
}

// Exact size of each request of this version, 0 for opcodes that are not (yet) served.
constexpr std::size_t request_size(uint16_t op) {
    switch (static_cast<opcode>(op)) {
        case opcode::hello:
            return sizeof(hello_request);
        case opcode::query:
            return sizeof(query_request);
        case opcode::alloc_pd:
            return sizeof(alloc_pd_request);
        case opcode::dealloc_pd:
        case opcode::dereg_mr:
        case opcode::destroy_cq:
        case opcode::dealloc_mw:
            return sizeof(destroy_request);
        case opcode::alloc_mw:
            return sizeof(alloc_mw_request);
        case opcode::reg_mr:
            return sizeof(reg_mr_request);
        case opcode::rereg_mr:
            return sizeof(rereg_mr_request);
        case opcode::create_cq:
            return sizeof(create_cq_request);
        case opcode::resize_cq:
            return sizeof(resize_cq_request);
        case opcode::create_qp:
            return sizeof(create_qp_request);
        case opcode::modify_qp:
            return sizeof(modify_qp_request);
        case opcode::query_qp:
            return sizeof(query_qp_request);
        case opcode::destroy_qp:
            return sizeof(destroy_request);
        case opcode::create_srq:
            return sizeof(create_srq_request);
        case opcode::modify_srq:
            return sizeof(modify_srq_request);
        case opcode::query_srq:
            return sizeof(query_srq_request);
        case opcode::destroy_srq:
            return sizeof(destroy_request);
        default:
            return 0;
    }
}

// Exact size of a successful reply to each request.
constexpr std::size_t reply_size(opcode op) {
    switch (op) {
        case opcode::hello:
            return sizeof(hello_reply);
        case opcode::query:
            return sizeof(query_reply);
        case opcode::alloc_pd:
            return sizeof(alloc_pd_reply);
        case opcode::alloc_mw:
            return sizeof(alloc_mw_reply);
        case opcode::reg_mr:
        case opcode::rereg_mr:
            return sizeof(reg_mr_reply);
        case opcode::create_cq:
            return sizeof(create_cq_reply);
        case opcode::resize_cq:
            return sizeof(resize_cq_reply);
        case opcode::create_qp:
            return sizeof(create_qp_reply);
        case opcode::query_qp:
            return sizeof(query_qp_reply);
        case opcode::create_srq:
            return sizeof(create_srq_reply);
        case opcode::query_srq:
            return sizeof(query_srq_reply);
        default:
            return sizeof(reply_header);
    }
}

// Reads and checks the header of a received message (`received` = bytes that arrived,
// `truncated` = the kernel had to cut it). The header is copied out: buffers need no
// alignment.
inline parse_error check_header(std::span<const std::byte> message, bool truncated, header& out) {
    if (message.size() < sizeof(header)) {
        return parse_error::truncated;
    }
    std::memcpy(&out, message.data(), sizeof(header));
    if (out.magic != magic) {
        return parse_error::bad_magic;
    }
    if (out.version != version) {
        return parse_error::bad_version;
    }
    if (truncated || message.size() > max_message_size || out.length > max_message_size) {
        return parse_error::oversized;
    }
    if (out.length != message.size()) {
        return parse_error::length_mismatch;
    }
    return parse_error::none;
}

// Checks a request as jakirod receives it: header, direction, opcode, exact size.
inline parse_error check_request(std::span<const std::byte> message, bool truncated, header& out) {
    if (const auto e = check_header(message, truncated, out); e != parse_error::none) {
        return e;
    }
    if ((out.opcode & reply_flag) != 0 ||
        out.opcode == static_cast<uint16_t>(opcode::async_event) ||
        out.opcode == static_cast<uint16_t>(opcode::comp_event)) {
        return parse_error::not_a_request;
    }
    const std::size_t expected = request_size(out.opcode);
    if (expected == 0) {
        return parse_error::unknown_opcode;
    }
    if (message.size() != expected) {
        return parse_error::bad_size;
    }
    return parse_error::none;
}

// Checks a reply as the shim receives it: the answer to `request` (same id, reply opcode),
// full size on success, at least a reply_header on failure. `status` gets the reply's
// status; a malformed reply reads as EPROTO.
inline bool check_reply(std::span<const std::byte> message, bool truncated, const header& request,
                        int& status) {
    header hdr{};
    const auto e = check_header(message, truncated, hdr);
    if (e == parse_error::bad_version && message.size() >= sizeof(reply_header)) {
        // jakirod speaks another version: it says so in a short reply with its own version.
        status = errno_for(e);
        return true;
    }
    if (e != parse_error::none || message.size() < sizeof(reply_header) ||
        hdr.opcode != (request.opcode | reply_flag) || hdr.request_id != request.request_id) {
        status = EPROTO;
        return false;
    }
    reply_header rh{};
    std::memcpy(&rh, message.data(), sizeof(rh));
    if (rh.status < 0) {
        status = EPROTO;
        return false;
    }
    if (rh.status == 0 && message.size() != reply_size(static_cast<opcode>(request.opcode))) {
        status = EPROTO;
        return false;
    }
    status = rh.status;
    return true;
}

// A zeroed message of type Msg with its header filled in.
template <typename Msg>
Msg make_message(uint16_t op, uint32_t request_id) {
    static_assert(std::is_trivially_copyable_v<Msg> && std::is_standard_layout_v<Msg>);
    Msg m;
    std::memset(&m, 0, sizeof(m));
    header h{magic, version, op, static_cast<uint32_t>(sizeof(Msg)), request_id};
    std::memcpy(&m, &h, sizeof(h));
    return m;
}

// Copies a checked message out of a receive buffer into its struct.
template <typename Msg>
bool decode(std::span<const std::byte> message, Msg& out) {
    static_assert(std::is_trivially_copyable_v<Msg>);
    if (message.size() != sizeof(Msg)) {
        return false;
    }
    std::memcpy(&out, message.data(), sizeof(Msg));
    return true;
}

template <typename Msg>
std::span<const std::byte> bytes_of(const Msg& m) {
    return std::as_bytes(std::span<const Msg, 1>(&m, 1));
}

// Copies a NUL-terminated name into a fixed field, truncating; the field always ends in NUL.
template <std::size_t N>
void put_name(char (&field)[N], const char* text) {
    std::strncpy(field, text, N - 1);
    field[N - 1] = '\0';
}

}  // namespace jakiro::verbs_proto
