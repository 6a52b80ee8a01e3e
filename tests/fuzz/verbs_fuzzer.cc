// libFuzzer target over the shim ⇄ jakirod protocol, as a hostile tenant would drive it: raw
// protocol messages into handle_request (random opcodes, sizes and fields, the truncated flag,
// descriptors that are hostile memfds, pipes, /dev/null, sockets, jakirod's own rings), random
// producer indices and WQE bytes in the rings handle_request returned (mapped like the shim
// maps them), engine polls with a virtual clock over a fake wire between two vNICs (lossy,
// reordering, duplicating, or a shortcut when both are "on the same host"), crafted RoCE
// packets from the connected peer, memfds truncated or hole-punched after registration, and
// client disconnects. The real code runs in-process: requests.cc, resources.cc, qp_verbs.cc,
// srq_verbs.cc, the rings, mr_table and the RoCE engine (rnic::engine, queue_pair). No EAL: the
// engine is plain C++.
//
// Each input starts from nothing (a fresh engine, two vNICs' vnic_resources, three attacker
// clients and one bystander "victim" client per vNIC), so every finding replays alone. Besides
// crashes and ASan/UBSan reports, the harness aborts ("verbs_fuzzer: ...") when:
//   - a reply is malformed (check_reply refuses it) or a successful create has no ring fd;
//   - a victim's MR bytes or CQ ring change (it never connected anything: only a cross-tenant
//     path could touch them), or an async event names a client that does not exist;
//   - the engine emits a frame whose source MAC/IP is not the sending vNIC's;
//   - one engine poll emits more frames than its documented cap (max_passes × qp_budget per
//     QP), or one received packet makes it emit more than a handful;
//   - after every client is released: a PD/MR/CQ/QP/SRQ count is not zero, the engine still has
//     QPs, a descriptor leaked (/proc/self/fd), or a mapping jakirod made is still mapped.
// Every file mapping made in this process (jakirod's MRs and rings, and the harness's own) gets
// PROT_NONE guard pages on both sides (the link wraps mmap/munmap), so an access just outside
// what jakirod mapped faults instead of landing in a neighbour.
//
// Optional, off by default: JAKIRO_FUZZ_MAX_CQES_PER_POLL=N aborts when one poll writes more
// than N completions (the engine flushes and completes within a per-visit budget).
//
// Input: a sequence of operations, each an opcode byte then its arguments (little-endian;
// past the end every read is 0). make_verbs_seeds.py writes valid sequences in this layout.
//   0 request   client, opcode selector, mutation flags, [fd kinds], fields (see request())
//   1 post send ring, WQE fields (structured: MR keys and addresses from what was registered)
//   2 post recv ring, WQE fields
//   3 post srq  ring, WQE fields
//   4 scribble  ring, mode: a header field := u32 / random bytes at an offset / producer += k
//   5 cq        ring, mode: drain / consumer := u32 / arm
//   6 poll      rounds, clock step, wire mode (drop mask, reorder, duplicate, same host,
//               the worker's sleep on the doorbell, ...)
//   7 connect   QP a, QP b: INIT/RTR/RTS towards b through modify_qp requests
//   8 release   client: disconnect (release_client), a new connection takes its place
//   9 memfd     a registered memfd (tenant's copy) or a ring jakirod sent: truncate, grow,
//               punch a hole, write, seal
//   10 inject   a crafted RoCE packet (fuzzed BTH and beyond) from a QP's peer, valid ICRC

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "rnic/engine.hh"
#include "rnic/verbs/device_model.hh"
#include "rnic/verbs/requests.hh"
#include "rnic/verbs/resources.hh"
#include "rnic/wire/icrc.hh"
#include "verbs_abi/protocol.hh"
#include "verbs_abi/rings.hh"

// ---------------------------------------------------------------- guarded file mappings

extern "C" void* __real_mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off);
extern "C" int __real_munmap(void* addr, size_t len);

namespace {

// 1 MiB of PROT_NONE on each side of every file mapping: more than any off-by-a-slot.
constexpr std::size_t guard_bytes = std::size_t{1} << 20;

struct guarded_map {
    uintptr_t base;
    std::size_t length;  // page-rounded
};
std::mutex guarded_mutex;
std::vector<guarded_map>* guarded = nullptr;  // live guarded mappings

std::size_t page_round(std::size_t n) {
    return (n + 4095) & ~std::size_t{4095};
}

bool on_hugetlbfs(int fd) {
    struct statfs st {};
    return fstatfs(fd, &st) == 0 && st.f_type == HUGETLBFS_MAGIC;
}

}  // namespace

extern "C" void* __wrap_mmap(void* addr, size_t len, int prot, int flags, int fd, off_t off) {
    // Only kernel-placed file mappings; hugetlbfs needs its own alignment.
    if (addr != nullptr || fd < 0 || (flags & MAP_FIXED) != 0 || len == 0 || on_hugetlbfs(fd)) {
        return __real_mmap(addr, len, prot, flags, fd, off);
    }
    const std::size_t rounded = page_round(len);
    void* reserved = __real_mmap(nullptr, rounded + 2 * guard_bytes, PROT_NONE,
                                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (reserved == MAP_FAILED) {
        return __real_mmap(addr, len, prot, flags, fd, off);
    }
    void* at = static_cast<char*>(reserved) + guard_bytes;
    void* m = __real_mmap(at, len, prot, flags | MAP_FIXED, fd, off);
    if (m == MAP_FAILED) {
        const int error = errno;
        __real_munmap(reserved, rounded + 2 * guard_bytes);
        errno = error;
        return MAP_FAILED;
    }
    const std::lock_guard lock(guarded_mutex);
    if (guarded == nullptr) {
        guarded = new std::vector<guarded_map>;
    }
    guarded->push_back({reinterpret_cast<uintptr_t>(m), rounded});
    return m;
}

extern "C" int __wrap_munmap(void* addr, size_t len) {
    {
        const std::lock_guard lock(guarded_mutex);
        if (guarded != nullptr) {
            const auto it =
                std::find_if(guarded->begin(), guarded->end(), [&](const guarded_map& g) {
                    return g.base == reinterpret_cast<uintptr_t>(addr) &&
                           g.length == page_round(len);
                });
            if (it != guarded->end()) {
                guarded->erase(it);
                return __real_munmap(static_cast<char*>(addr) - guard_bytes,
                                     page_round(len) + 2 * guard_bytes);
            }
        }
    }
    return __real_munmap(addr, len);
}

namespace {

using namespace jakiro;
namespace proto = verbs_proto;

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "verbs_fuzzer: %s\n", what);
    std::abort();
}

// JAKIRO_FUZZ_TRACE=1: print each request's status and each poll's work (seed debugging).
const bool trace = std::getenv("JAKIRO_FUZZ_TRACE") != nullptr;

std::size_t live_guarded() {
    const std::lock_guard lock(guarded_mutex);
    return guarded == nullptr ? 0 : guarded->size();
}

std::size_t open_fds() {
    DIR* d = opendir("/proc/self/fd");
    if (d == nullptr) {
        fail("cannot list /proc/self/fd");
    }
    std::size_t n = 0;
    while (readdir(d) != nullptr) {
        ++n;
    }
    closedir(d);
    return n;
}

// ---------------------------------------------------------------- input

class reader {
  public:
    reader(const uint8_t* data, std::size_t size) : _p(data), _n(size) {}
    bool empty() const { return _n == 0; }
    uint8_t u8() {
        if (_n == 0) {
            return 0;
        }
        --_n;
        return *_p++;
    }
    uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
    uint32_t u32() { return u16() | (uint32_t{u16()} << 16); }
    uint64_t u64() { return u32() | (uint64_t{u32()} << 32); }
    // Up to `len` bytes (fewer at the end of the input).
    std::span<const uint8_t> bytes(std::size_t len) {
        len = std::min(len, _n);
        std::span<const uint8_t> out(_p, len);
        _p += len;
        _n -= len;
        return out;
    }

  private:
    const uint8_t* _p;
    std::size_t _n;
};

// ---------------------------------------------------------------- the wire

constexpr uint32_t vnic_ip[2] = {0xC6130101, 0xC6130102};  // 198.19.1.1, 198.19.1.2 (host order)
constexpr std::array<uint8_t, 6> vnic_mac[2] = {{{0x02, 0x00, 0xc6, 0x13, 0x01, 0x01}},
                                                {{0x02, 0x00, 0xc6, 0x13, 0x01, 0x02}}};
constexpr uint32_t stranger_ip = 0xC6130109;
// The engine's caps (engine.cc): passes per poll × packets per QP per pass; a QP's poll may
// add its pending ACK and READ responses to a pass.
constexpr unsigned engine_max_passes = 8;
constexpr unsigned engine_qp_budget = 32;

int slot_of(uint32_t ip_be) {
    for (int i = 0; i < 2; ++i) {
        if (ip_be == htonl(vnic_ip[i])) {
            return i;
        }
    }
    return -1;
}

class fuzz_wire final : public rnic::packet_port {
  public:
    struct frame {
        uint16_t from;
        uint32_t dst_ip_be;
        std::vector<uint8_t> bytes;
    };

    uint8_t* begin_frame(uint32_t len) override {
        if (refuse_buffers) {
            return nullptr;
        }
        if (len < rnic::frame_l2_l4_bytes + 12 + 4 || len > 16384) {
            fail("engine asked for a frame of impossible length");
        }
        _building.assign(len, 0xEE);
        return _building.data();
    }
    void end_frame(uint16_t vnic, uint32_t dst_ip_be, uint32_t len) override {
        if (len != _building.size() || vnic > 1) {
            fail("end_frame: length or vNIC differs from begin_frame");
        }
        // RoCE for a vNIC comes only from its engine, with its own addresses: a tenant must
        // not make its QP send as another vNIC.
        uint32_t src_ip_be;
        std::memcpy(&src_ip_be, _building.data() + 14 + 12, 4);
        if (src_ip_be != htonl(vnic_ip[vnic]) ||
            std::memcmp(_building.data() + 6, vnic_mac[vnic].data(), 6) != 0) {
            fail("a frame leaves with another vNIC's source address");
        }
        frames.push_back({vnic, dst_ip_be, _building});
        ++emitted;
    }
    uint16_t local_vnic(uint16_t, uint32_t dst_ip_be) const override {
        const int s = slot_of(dst_ip_be);
        return same_host && s >= 0 ? static_cast<uint16_t>(s) : no_local_vnic;
    }
    bool admit(uint16_t, uint32_t) override { return !qos_closed; }
    bool permits_datagram(uint16_t, uint32_t, bool) override { return !deny_datagrams; }

    std::deque<frame> frames;
    uint64_t emitted = 0;
    bool refuse_buffers = false;
    bool same_host = false;
    bool qos_closed = false;
    bool deny_datagrams = false;

  private:
    std::vector<uint8_t> _building;
};

// ---------------------------------------------------------------- the harness

enum class kind : uint8_t { pd, mr, cq, qp, srq, count };

struct object {
    uint32_t handle;
    int vnic;
    int client;  // index into harness::clients
};

struct mr_info {
    uint32_t key;
    int vnic;
    uint64_t iova;
    uint64_t length;
};

struct ring {
    kind what;  // qp, cq or srq
    int vnic;
    int client;
    uint32_t handle;
    void* base;
    std::size_t bytes;
    uint32_t cap = 0;     // cq, srq; qp: sq
    uint32_t rq_cap = 0;  // qp
    uint32_t posted = 0;  // sq / srq producer as the shim keeps it
    uint32_t rq_posted = 0;
    uint32_t qpn = 0;
};

struct client {
    int vnic;
    bool victim;
    verbs::session s;
};

constexpr int attacker_clients = 3;  // 0 and 1 on vNIC 0, 2 on vNIC 1
constexpr std::size_t victim_mr_bytes = 16 * 1024;
constexpr std::size_t max_rings = 64;
constexpr std::size_t max_tenant_fds = 16;

struct harness {
    std::unique_ptr<rnic::engine> engine;
    std::array<verbs::vnic_identity, 2> ids;
    std::array<std::unique_ptr<verbs::vnic_resources>, 2> res;
    std::array<verbs::device_context, 2> dev;
    fuzz_wire wire;
    std::vector<client> clients;
    uint64_t next_client_id = 0;
    std::array<std::vector<object>, static_cast<std::size_t>(kind::count)> objects;
    std::vector<mr_info> mrs;
    std::vector<ring> rings;
    std::vector<std::pair<void*, std::size_t>> doorbells;
    std::vector<int> tenant_fds;   // the tenant's copies of memfds it registered
    std::vector<int> jakirod_fds;  // copies of ring fds jakirod handed out (to pass back)
    std::array<std::byte*, 2> victim_mr{};
    std::array<proto::cq_ring_header*, 2> victim_cq{};
    std::array<uint32_t, 2> victim_cq_handle{};
    std::vector<std::byte> last_request;  // what call() handed to handle_request last
    uint64_t now_ns = 1'000'000'000;
    uint32_t request_id = 0;
    int current = 0;                 // the client whose request is being built
    uint64_t max_cqes_per_poll = 0;  // 0: not enforced
    uint64_t worst_cqes_per_poll = 0;
    uint64_t worst_frames_per_poll = 0;

    // ---- setup and teardown

    int new_client(int vnic, bool victim) {
        clients.push_back({vnic, victim, {}});
        clients.back().s.client_id = ++next_client_id;
        return static_cast<int>(clients.size()) - 1;
    }

    static void on_qp_event(void* self, uint64_t client, uint32_t, uint32_t) {
        auto* h = static_cast<harness*>(self);
        if (client == 0 || client > h->next_client_id) {
            fail("async event for a client that never existed");
        }
    }
    static void on_cq_error(void* self, uint64_t client, uint32_t) {
        on_qp_event(self, client, 0, 0);
    }

    void setup() {
        engine = std::make_unique<rnic::engine>(2, 8);
        for (int v = 0; v < 2; ++v) {
            ids[v].name = v == 0 ? "t1" : "t2";
            ids[v].mac = vnic_mac[v];
            ids[v].ip = vnic_ip[v];
            ids[v].slot = static_cast<uint16_t>(v);
            // A small quota, as YAML rdma.max_qps may be: keeps the memory modest.
            ids[v].quota.max_qps = 8;
            res[v] = std::make_unique<verbs::vnic_resources>(
                verbs::engine_limits(), verbs::cq_error_sink{&harness::on_cq_error, this},
                ids[v].quota);
            verbs::qp_support support;
            support.engine = engine.get();
            support.local.vnic = static_cast<uint16_t>(v);
            support.local.mac = vnic_mac[v];
            support.local.ip_be = htonl(vnic_ip[v]);
            support.limits.max_mtu = IBV_MTU_1024;
            support.events = {&harness::on_qp_event, this};
            res[v]->enable_qps(support);
            dev[v] = {&ids[v], "h1", 1450, res[v].get()};
        }
        for (int c = 0; c < attacker_clients; ++c) {
            new_client(c < 2 ? 0 : 1, false);
        }
        for (int v = 0; v < 2; ++v) {
            make_victim(v);
        }
    }

    // A bystander on vNIC `v`: HELLO, a PD, an MR with every right over a pattern, a CQ and an
    // RC QP it never connects. Nothing the attackers do may change its memory or its CQ.
    void make_victim(int v) {
        const int c = new_client(v, true);
        auto hello = proto::make_message<proto::hello_request>(
            static_cast<uint16_t>(proto::opcode::hello), ++request_id);
        if (call(c, proto::bytes_of(hello), false, {}).what != verbs::outcome::action::reply ||
            !clients[c].s.hello_done) {
            fail("victim HELLO");
        }
        auto pd_req = proto::make_message<proto::alloc_pd_request>(
            static_cast<uint16_t>(proto::opcode::alloc_pd), ++request_id);
        const uint32_t pd = handle_of(call(c, proto::bytes_of(pd_req), false, {}));
        const int fd = memfd_create("victim-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0 || ftruncate(fd, victim_mr_bytes) != 0 ||
            fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
            fail("victim memfd");
        }
        victim_mr[v] = static_cast<std::byte*>(
            mmap(nullptr, victim_mr_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
        if (victim_mr[v] == MAP_FAILED) {
            fail("victim mmap");
        }
        std::memset(victim_mr[v], 0xA5 + v, victim_mr_bytes);
        auto mr = proto::make_message<proto::reg_mr_request>(
            static_cast<uint16_t>(proto::opcode::reg_mr), ++request_id);
        mr.pd_handle = pd;
        mr.access = proto::mr_access_all;
        mr.addr = mr.iova = 0x10000000;
        mr.length = victim_mr_bytes;
        int fds[1] = {fd};
        handle_of(call(c, proto::bytes_of(mr), false, fds));
        if (fds[0] >= 0) {
            close(fds[0]);
        }
        auto cq = proto::make_message<proto::create_cq_request>(
            static_cast<uint16_t>(proto::opcode::create_cq), ++request_id);
        cq.cqe = 16;
        const uint32_t cqh = handle_of(call(c, proto::bytes_of(cq), false, {}));
        victim_cq_handle[v] = cqh;
        victim_cq[v] = nullptr;
        for (const ring& r : rings) {
            if (r.what == kind::cq && r.handle == cqh && r.client == c) {
                victim_cq[v] = static_cast<proto::cq_ring_header*>(r.base);
            }
        }
        auto qp = proto::make_message<proto::create_qp_request>(
            static_cast<uint16_t>(proto::opcode::create_qp), ++request_id);
        qp.pd_handle = pd;
        qp.send_cq = qp.recv_cq = cqh;
        qp.max_send_wr = qp.max_recv_wr = 4;
        qp.max_send_sge = qp.max_recv_sge = 1;
        qp.qp_type = proto::qpt_rc;
        handle_of(call(c, proto::bytes_of(qp), false, {}));
        if (victim_cq[v] == nullptr) {
            fail("victim CQ not mapped");
        }
    }

    // The handle a successful create/alloc reply carries (offset 24 in every one of them).
    static uint32_t handle_of(const verbs::outcome& out) {
        proto::reply_header rh;
        std::memcpy(&rh, out.reply.data(), sizeof(rh));
        if (rh.status != 0 || out.reply_size < 28) {
            fail("a victim's setup request failed");
        }
        uint32_t h;
        std::memcpy(&h, out.reply.data() + 24, 4);
        return h;
    }

    void check_victims() {
        for (int v = 0; v < 2; ++v) {
            for (std::size_t i = 0; i < victim_mr_bytes; ++i) {
                if (victim_mr[v][i] != static_cast<std::byte>(0xA5 + v)) {
                    fail("a victim's MR changed: another tenant reached its memory");
                }
            }
            if (proto::load_producer_acquire(*victim_cq[v]) != 0 ||
                proto::overflowed(*victim_cq[v])) {
                fail("a victim's CQ got a completion it never asked for");
            }
        }
    }

    void teardown() {
        check_victims();
        if (trace) {
            std::fprintf(stderr, "  end: %llu completions written, %llu frames, %llu received\n",
                         static_cast<unsigned long long>(cqes_written()),
                         static_cast<unsigned long long>(wire.emitted),
                         static_cast<unsigned long long>(engine->counters().received.read()));
            for (std::size_t d = 0; d < engine->counters().drops.size(); ++d) {
                if (const auto n = engine->counters().drops[d].read()) {
                    std::fprintf(stderr, "  drop %s: %llu\n",
                                 rnic::engine_drop_name(static_cast<rnic::engine_drop>(d)),
                                 static_cast<unsigned long long>(n));
                }
            }
        }
        for (const client& c : clients) {
            res[c.vnic]->release_client(c.s.client_id);
        }
        for (int v = 0; v < 2; ++v) {
            const auto n = res[v]->count();
            if (n.pds != 0 || n.mrs != 0 || n.cqs != 0 || n.qps != 0 || n.srqs != 0) {
                fail("objects left after every client was released");
            }
        }
        if (engine->has_qps()) {
            fail("the engine still runs QPs after every client was released");
        }
        for (auto& r : res) {
            r.reset();
        }
        engine.reset();
        for (const ring& r : rings) {
            munmap(r.base, r.bytes);
        }
        for (const auto& [base, bytes] : doorbells) {
            munmap(base, bytes);
        }
        for (int v = 0; v < 2; ++v) {
            munmap(victim_mr[v], victim_mr_bytes);
        }
        for (int fd : tenant_fds) {
            close(fd);
        }
        for (int fd : jakirod_fds) {
            close(fd);
        }
    }

    // ---- requests

    // handle_request as the channel server calls it; descriptors left in `fds` are the
    // caller's to close. Maps what a successful create returns, like the shim.
    verbs::outcome call(int c, std::span<const std::byte> bytes, bool truncated,
                        std::span<int> fds) {
        client& cl = clients[c];
        last_request.assign(bytes.begin(), bytes.end());
        verbs::outcome out = verbs::handle_request(bytes, truncated, fds, cl.s, dev[cl.vnic]);
        check_reply(bytes, truncated, out);
        if (trace && out.reply_size >= sizeof(proto::reply_header)) {
            proto::reply_header rh;
            std::memcpy(&rh, out.reply.data(), sizeof(rh));
            std::fprintf(stderr, "  client %llu: opcode %u -> status %d\n",
                         static_cast<unsigned long long>(cl.s.client_id),
                         rh.hdr.opcode & ~proto::reply_flag, rh.status);
        }
        if (out.what != verbs::outcome::action::drop &&
            out.reply_size >= sizeof(proto::reply_header)) {
            adopt(c, out);
        }
        if (out.reply_fd >= 0) {
            close(out.reply_fd);
        }
        if (out.reply_fd2 >= 0) {
            close(out.reply_fd2);
        }
        return out;
    }

    static void check_reply(std::span<const std::byte> msg, bool truncated,
                            const verbs::outcome& out) {
        if (out.what == verbs::outcome::action::drop) {
            if (out.reply_fd >= 0 || out.reply_fd2 >= 0) {
                fail("a dropped request still produced a descriptor");
            }
            return;
        }
        if (out.reply_size < sizeof(proto::reply_header) ||
            out.reply_size > proto::max_message_size) {
            fail("reply of impossible size");
        }
        proto::header req{};
        std::memcpy(&req, msg.data(), sizeof(req));  // a reply implies a whole header arrived
        int status = 0;
        if (!proto::check_reply(std::span<const std::byte>(out.reply.data(), out.reply_size), false,
                                req, status)) {
            fail("jakirod's reply does not pass the shim's check_reply");
        }
        if (status == 0 && out.error != proto::parse_error::none) {
            fail("a malformed request was answered with success");
        }
        (void)truncated;
    }

    void adopt(int c, const verbs::outcome& out) {
        proto::reply_header rh;
        std::memcpy(&rh, out.reply.data(), sizeof(rh));
        if (rh.status != 0) {
            if (out.reply_fd >= 0 || out.reply_fd2 >= 0) {
                fail("a failed request still produced a descriptor");
            }
            return;
        }
        const client& cl = clients[c];
        const auto op = static_cast<proto::opcode>(rh.hdr.opcode & ~proto::reply_flag);
        auto remember = [&](kind k, uint32_t h) {
            objects[static_cast<std::size_t>(k)].push_back({h, cl.vnic, c});
        };
        switch (op) {
            case proto::opcode::alloc_pd: {
                proto::alloc_pd_reply r;
                std::memcpy(&r, out.reply.data(), sizeof(r));
                remember(kind::pd, r.pd_handle);
                break;
            }
            case proto::opcode::reg_mr: {
                proto::reg_mr_reply r;
                std::memcpy(&r, out.reply.data(), sizeof(r));
                remember(kind::mr, r.lkey);
                if (const auto e = res[cl.vnic]->mrs().get(r.lkey)) {
                    mrs.push_back({r.lkey, cl.vnic, e->iova, e->length});
                }
                break;
            }
            case proto::opcode::create_cq: {
                proto::create_cq_reply r;
                std::memcpy(&r, out.reply.data(), sizeof(r));
                remember(kind::cq, r.cq_handle);
                ring g{kind::cq, cl.vnic, c, r.cq_handle, nullptr, r.ring_bytes};
                g.cap = r.capacity;
                map_ring(g, out.reply_fd);
                break;
            }
            case proto::opcode::resize_cq: {
                // The harness polls the new ring from now on, as the shim does; the old
                // mapping goes (jakirod completes only into the new ring).
                proto::resize_cq_request req;
                std::memcpy(&req, last_request.data(), sizeof(req));
                proto::resize_cq_reply r;
                std::memcpy(&r, out.reply.data(), sizeof(r));
                if (r.outstanding > r.capacity) {
                    fail("resize_cq moved more completions than the new ring holds");
                }
                if (!cl.victim && req.cq_handle == victim_cq_handle[cl.vnic]) {
                    fail("an attacker's resize_cq succeeded on a victim's CQ");
                }
                for (std::size_t i = 0; i < rings.size(); ++i) {
                    ring& g = rings[i];
                    if (g.what == kind::cq && g.handle == req.cq_handle && g.client == c) {
                        munmap(g.base, g.bytes);
                        rings.erase(rings.begin() + static_cast<std::ptrdiff_t>(i));
                        break;
                    }
                }
                ring g{kind::cq, cl.vnic, c, req.cq_handle, nullptr, r.ring_bytes};
                g.cap = r.capacity;
                map_ring(g, out.reply_fd);
                break;
            }
            case proto::opcode::create_qp: {
                proto::create_qp_reply r;
                std::memcpy(&r, out.reply.data(), sizeof(r));
                remember(kind::qp, r.qp_handle);
                ring g{kind::qp, cl.vnic, c, r.qp_handle, nullptr, r.ring_bytes};
                g.cap = r.sq_capacity;
                g.rq_cap = r.rq_capacity;
                g.qpn = r.qp_num;
                map_ring(g, out.reply_fd);
                if (out.reply_fd2 < 0) {
                    fail("create_qp succeeded without a doorbell");
                }
                void* db = mmap(nullptr, proto::doorbell_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                                out.reply_fd2, 0);
                if (db == MAP_FAILED) {
                    fail("cannot map the doorbell jakirod sent");
                }
                doorbells.emplace_back(db, proto::doorbell_bytes);
                break;
            }
            case proto::opcode::create_srq: {
                proto::create_srq_reply r;
                std::memcpy(&r, out.reply.data(), sizeof(r));
                remember(kind::srq, r.srq_handle);
                ring g{kind::srq, cl.vnic, c, r.srq_handle, nullptr, r.ring_bytes};
                g.cap = r.capacity;
                map_ring(g, out.reply_fd);
                break;
            }
            default:
                break;
        }
    }

    void map_ring(ring& g, int fd) {
        struct stat st {};
        if (fd < 0 || fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != g.bytes) {
            fail("a ring fd is missing or not ring_bytes long");
        }
        g.base = mmap(nullptr, g.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (g.base == MAP_FAILED) {
            fail("cannot map a ring jakirod sent");
        }
        // Attackers' rings only: a victim's ring fd in an attacker's hands would be the
        // harness leaking it, not jakirod.
        if (jakirod_fds.size() < 4 && !clients[g.client].victim) {
            jakirod_fds.push_back(dup(fd));
        }
        if (rings.size() >= max_rings) {  // keep the list bounded; the mapping still goes
            munmap(g.base, g.bytes);
            return;
        }
        rings.push_back(g);
    }

    // A handle for a request field: selector < 0x80 one of the requesting client's own, else
    // one jakirod handed to anyone (the victims', the other vNIC's: the cross-tenant probe);
    // 0xFD/0xFC the client's newest/second newest, 0xFE zero, 0xFF a raw u32.
    uint32_t pick(reader& in, kind k) {
        const uint8_t sel = in.u8();
        if (sel == 0xFF) {
            return in.u32();
        }
        if (sel == 0xFE) {
            return 0;
        }
        const auto& pool = objects[static_cast<std::size_t>(k)];
        if (sel == 0xFD || sel == 0xFC) {  // the requesting client's newest (second newest)
            unsigned skip = sel == 0xFD ? 0 : 1;
            for (auto it = pool.rbegin(); it != pool.rend(); ++it) {
                if (it->client == current && skip-- == 0) {
                    return it->handle;
                }
            }
            return 0;
        }
        if (sel < 0x80) {  // one of the requesting client's own (what a program mostly names)
            std::size_t own = 0;
            for (const object& o : pool) {
                own += o.client == current ? 1 : 0;
            }
            std::size_t want = own == 0 ? 0 : sel % own;
            for (const object& o : pool) {
                if (o.client == current && want-- == 0) {
                    return o.handle;
                }
            }
        }
        // Anybody's: the victims', the other vNIC's, dead ones (the cross-tenant probes).
        return pool.empty() ? sel : pool[sel % pool.size()].handle;
    }

    // A descriptor of kind `k` (the tenant keeps a copy of memfds, for op_memfd).
    int make_fd(uint8_t k, uint32_t pages) {
        const off_t size = static_cast<off_t>(pages) * 4096;
        int fd = -1;
        auto memfd = [&](unsigned extra_flags, int seals, off_t initial) {
            fd = memfd_create("fuzz-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING | extra_flags);
            if (fd < 0) {
                return;
            }
            if (ftruncate(fd, initial) != 0) {
                // hugetlb without pages: still a descriptor to send
            }
            if (seals != 0) {
                fcntl(fd, F_ADD_SEALS, seals);
            }
            if (tenant_fds.size() < max_tenant_fds) {
                tenant_fds.push_back(dup(fd));
            }
        };
        switch (k % 14) {
            case 0:
            case 1:
            case 2:  // the right thing, most of the time
                memfd(0, F_SEAL_SHRINK, size);
                break;
            case 3:  // unsealed
                memfd(0, 0, size);
                break;
            case 4:  // sealed, then grown
                memfd(0, F_SEAL_SHRINK, size);
                if (fd >= 0 && ftruncate(fd, size * 4) != 0) {
                    fail("growing a memfd sealed only against shrinking");
                }
                break;
            case 5:  // sealed at the wrong (smaller) size
                memfd(0, F_SEAL_SHRINK, size / 2);
                break;
            case 6:  // sealed against future writes: jakirod's writable mapping must fail
                memfd(0, F_SEAL_SHRINK | F_SEAL_FUTURE_WRITE, size);
                break;
            case 7:  // huge pages (if the kernel lets us have the memfd at all)
                memfd(MFD_HUGETLB, F_SEAL_SHRINK, 2 << 20);
                break;
            case 8: {
                int p[2];
                if (pipe2(p, O_CLOEXEC) == 0) {
                    close(p[1]);
                    fd = p[0];
                }
                break;
            }
            case 9:
                fd = open("/dev/null", O_RDWR | O_CLOEXEC);
                break;
            case 10: {  // a channel socket, as create_cq wants
                int p[2];
                if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, p) == 0) {
                    close(p[0]);
                    fd = p[1];
                }
                break;
            }
            case 11: {  // the wrong kind of socket
                int p[2];
                if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p) == 0) {
                    close(p[0]);
                    fd = p[1];
                }
                break;
            }
            case 12:
                fd = eventfd(0, EFD_CLOEXEC);
                break;
            default:  // one of jakirod's own rings (or the doorbell) handed back
                fd = jakirod_fds.empty() ? open("/dev/null", O_RDONLY | O_CLOEXEC)
                                         : dup(jakirod_fds[pages % jakirod_fds.size()]);
                break;
        }
        return fd;
    }

    // op 0. Layout: client, opcode selector, mutation flags, fd count and kinds, fields.
    void request(reader& in) {
        static constexpr proto::opcode ops[] = {
            proto::opcode::hello,      proto::opcode::query,      proto::opcode::alloc_pd,
            proto::opcode::dealloc_pd, proto::opcode::reg_mr,     proto::opcode::dereg_mr,
            proto::opcode::create_cq,  proto::opcode::destroy_cq, proto::opcode::create_qp,
            proto::opcode::modify_qp,  proto::opcode::query_qp,   proto::opcode::destroy_qp,
            proto::opcode::create_srq, proto::opcode::modify_srq, proto::opcode::destroy_srq,
            proto::opcode::query_srq,  proto::opcode::resize_cq,  proto::opcode::create_ah,
            proto::opcode::async_event};
        constexpr std::size_t op_count = sizeof(ops) / sizeof(ops[0]);
        const int c = in.u8() % attacker_clients;
        current = c;
        const uint8_t sel = in.u8();
        const uint8_t mut = in.u8();
        const uint16_t op = sel % (op_count + 1) == op_count
                                ? in.u16()
                                : static_cast<uint16_t>(ops[sel % (op_count + 1)]);
        // Descriptors: the count the opcode wants unless the flags say otherwise.
        const uint8_t fd_spec = in.u8();
        std::size_t nfds = (fd_spec & 0x80) != 0 ? ((fd_spec >> 4) & 7) % 5
                           : op == static_cast<uint16_t>(proto::opcode::reg_mr) ? 1
                                                                                : 0;
        std::array<int, proto::max_fds_per_message> fds{};
        for (std::size_t i = 0; i < nfds; ++i) {
            const uint8_t k = in.u8();
            fds[i] = make_fd(k, in.u8() % 32 + 1);
            if (fds[i] < 0) {
                nfds = i;
                break;
            }
        }

        std::vector<uint8_t> msg(std::max<std::size_t>(proto::request_size(op), 16));
        proto::header h{proto::magic, proto::version, op, static_cast<uint32_t>(msg.size()),
                        ++request_id};
        if ((mut & 0x01) != 0) {  // raw body
            const auto body = in.bytes(msg.size() - sizeof(h));
            std::copy(body.begin(), body.end(), msg.begin() + sizeof(h));
        } else {
            fields(in, static_cast<proto::opcode>(op), msg, fds[0], nfds);
        }
        if ((mut & 0x04) != 0) {  // wrong size, header length following (or not)
            const int delta = static_cast<int8_t>(in.u8());
            msg.resize(static_cast<std::size_t>(
                std::clamp<int>(static_cast<int>(msg.size()) + delta, 0, 4200)));
            if ((mut & 0x40) == 0) {
                h.length = static_cast<uint32_t>(msg.size());
            }
        }
        if ((mut & 0x08) != 0) {  // a corrupted header field
            switch (in.u8() % 4) {
                case 0:
                    h.magic = in.u32();
                    break;
                case 1:
                    h.version = in.u16();
                    break;
                case 2:
                    h.length = in.u32();
                    break;
                default:
                    h.opcode = in.u16();
                    break;
            }
        }
        if ((mut & 0x10) != 0) {
            h.opcode |= proto::reply_flag;
        }
        std::memcpy(msg.data(), &h, std::min(sizeof(h), msg.size()));
        verbs::outcome out = call(c, std::as_bytes(std::span<const uint8_t>(msg)),
                                  (mut & 0x02) != 0, std::span<int>(fds.data(), nfds));
        for (std::size_t i = 0; i < nfds; ++i) {
            if (fds[i] >= 0) {
                close(fds[i]);
            }
        }
        (void)out;
    }

    // Structured fields: plausible values, drawn from what exists, with the odd raw one.
    void fields(reader& in, proto::opcode op, std::vector<uint8_t>& msg, int fd0,
                std::size_t nfds) {
        auto at = [&](std::size_t off, auto v) {
            if (off + sizeof(v) <= msg.size()) {
                std::memcpy(msg.data() + off, &v, sizeof(v));
            }
        };
        auto maybe_raw32 = [&](uint32_t usual) { return in.u8() == 0xFF ? in.u32() : usual; };
        switch (op) {
            case proto::opcode::hello:
                at(16, in.u32());        // pid
                at(20, maybe_raw32(0));  // flags
                break;
            case proto::opcode::query:
                at(16, maybe_raw32(1));
                at(20, maybe_raw32(0));
                break;
            case proto::opcode::alloc_pd:
                at(16, maybe_raw32(0));
                at(20, maybe_raw32(0));
                break;
            case proto::opcode::dealloc_pd:
                at(16, pick(in, kind::pd));
                at(20, maybe_raw32(0));
                break;
            case proto::opcode::dereg_mr:
                at(16, pick(in, kind::mr));
                at(20, maybe_raw32(0));
                break;
            case proto::opcode::destroy_cq:
                at(16, pick(in, kind::cq));
                at(20, maybe_raw32(0));
                break;
            case proto::opcode::destroy_qp:
                at(16, pick(in, kind::qp));
                at(20, maybe_raw32(0));
                break;
            case proto::opcode::destroy_srq:
                at(16, pick(in, kind::srq));
                at(20, maybe_raw32(0));
                break;
            case proto::opcode::reg_mr: {
                at(16, pick(in, kind::pd));
                at(20, static_cast<uint32_t>(in.u8() % 32));  // access (bit 4: invalid)
                const uint8_t shape = in.u8();
                const uint64_t iova =
                    (shape & 1) != 0 ? in.u64() : 0x20000000 + (shape >> 1) * 0x100000ull;
                at(24, iova);                                                  // addr
                at(32, (shape & 2) != 0 ? in.u64() : uint64_t{in.u16()} + 1);  // length
                at(40, iova);
                at(48, (shape & 4) != 0 ? in.u64()
                                        : static_cast<uint64_t>(in.u8() % 4) * 4096);  // fd_offset
                at(56, (shape & 8) != 0 ? in.u32() : uint32_t{in.u16()} % 4096);  // page_offset
                at(60, maybe_raw32(0));
                (void)fd0;
                (void)nfds;
                break;
            }
            case proto::opcode::create_cq: {
                const uint8_t f = in.u8();
                at(16, (f & 0x80) != 0 ? in.u32() : uint32_t{in.u16()});  // cqe
                at(20, maybe_raw32(0));                                   // comp_vector
                at(24, static_cast<uint32_t>(f & 0x03));                  // flags (bit 0: channel)
                at(28, maybe_raw32(0));
                break;
            }
            case proto::opcode::resize_cq: {
                at(16, pick(in, kind::cq));
                const uint8_t f = in.u8();
                at(20, (f & 0x80) != 0 ? in.u32() : uint32_t{in.u8()} + (f & 1));  // cqe
                at(24, maybe_raw32(0));                                            // flags
                at(28, maybe_raw32(0));
                break;
            }
            case proto::opcode::create_qp: {
                at(16, pick(in, kind::pd));
                at(20, pick(in, kind::cq));
                at(24, pick(in, kind::cq));
                at(28, (in.u8() & 1) != 0 ? pick(in, kind::srq) : 0u);
                const uint8_t big = in.u8();
                at(32, (big & 1) != 0 ? in.u32() : uint32_t{in.u8()} * 4);     // max_send_wr
                at(36, (big & 2) != 0 ? in.u32() : uint32_t{in.u8()} * 4);     // max_recv_wr
                at(40, uint32_t{in.u8()} % 20);                                // max_send_sge
                at(44, uint32_t{in.u8()} % 20);                                // max_recv_sge
                at(48, (big & 4) != 0 ? in.u32() : uint32_t{in.u16()} % 600);  // max_inline
                static constexpr uint8_t types[] = {proto::qpt_rc, proto::qpt_uc, proto::qpt_ud};
                const uint8_t t = in.u8();
                at(52, t < 0xF0 ? types[t % 3] : t);
                at(53, static_cast<uint8_t>(in.u8() & 1));
                if ((big & 8) != 0) {
                    at(54, in.u16());
                    at(56, in.u32());
                    at(60, in.u32());
                }
                break;
            }
            case proto::opcode::modify_qp: {
                at(16, pick(in, kind::qp));
                at(20, in.u32());  // attr_mask
                proto::qp_attr_wire a{};
                const uint8_t s = in.u8();
                a.qp_state = s < 0xF0 ? s % 8 : in.u32();
                a.cur_qp_state = in.u8() % 8;
                const uint8_t mtu = in.u8();
                a.path_mtu = mtu < 0xF0 ? mtu % 7 : in.u32();
                a.path_mig_state = in.u8() % 4;
                a.qkey = in.u32();
                a.rq_psn = in.u32();
                a.sq_psn = in.u32();
                a.dest_qp_num = pick(in, kind::qp);
                a.qp_access_flags = in.u8() % 32;
                a.max_send_wr = in.u16();
                a.max_recv_wr = in.u16();
                const uint8_t peer = in.u8();
                a.ah_attr.is_global = (peer & 0x40) == 0 ? 1 : 0;
                a.ah_attr.port_num = (peer & 0x80) == 0 ? 1 : in.u8();
                a.ah_attr.dgid[10] = a.ah_attr.dgid[11] = 0xff;
                const uint32_t ip = (peer & 3) == 3
                                        ? in.u32()
                                        : htonl((peer & 3) == 2 ? stranger_ip : vnic_ip[peer & 1]);
                std::memcpy(a.ah_attr.dgid + 12, &ip, 4);
                if ((peer & 0x20) != 0) {
                    const auto raw = in.bytes(16);
                    std::copy(raw.begin(), raw.end(), a.ah_attr.dgid);
                }
                a.ah_attr.sgid_index = in.u8() % 2;
                a.pkey_index = in.u8() % 2;
                a.en_sqd_async_notify = in.u8() & 1;
                a.max_rd_atomic = in.u8() % 20;
                a.max_dest_rd_atomic = in.u8() % 20;
                a.min_rnr_timer = in.u8() % 32;
                a.port_num = in.u8() % 3;
                a.timeout = in.u8() % 32;
                a.retry_cnt = in.u8() % 8;
                a.rnr_retry = in.u8() % 8;
                a.rate_limit = maybe_raw32(0);
                if (msg.size() >= 24 + sizeof(a)) {
                    std::memcpy(msg.data() + 24, &a, sizeof(a));
                }
                break;
            }
            case proto::opcode::query_qp:
                at(16, pick(in, kind::qp));
                at(20, in.u32());
                break;
            case proto::opcode::create_srq:
                at(16, pick(in, kind::pd));
                at(20, maybe_raw32(uint32_t{in.u8()} * 4));  // max_wr
                at(24, uint32_t{in.u8()} % 20);              // max_sge
                at(28, uint32_t{in.u8()});                   // srq_limit
                at(32, maybe_raw32(0));
                at(36, maybe_raw32(0));
                break;
            case proto::opcode::modify_srq:
                at(16, pick(in, kind::srq));
                at(20, uint32_t{in.u8()} % 8);
                at(24, uint32_t{in.u16()});
                at(28, maybe_raw32(uint32_t{in.u8()}));
                break;
            case proto::opcode::query_srq:
                at(16, pick(in, kind::srq));
                at(20, maybe_raw32(0));
                break;
            default: {
                const auto body = in.bytes(in.u8());
                std::copy_n(body.begin(), std::min(body.size(), msg.size() - 16), msg.begin() + 16);
                break;
            }
        }
    }

    // ---- rings

    ring* pick_ring(reader& in, kind k) {
        const uint8_t sel = in.u8();
        std::size_t n = 0;
        for (const ring& r : rings) {
            n += r.what == k && !clients[r.client].victim ? 1 : 0;
        }
        if (n == 0) {
            return nullptr;
        }
        std::size_t want = sel % n;
        for (ring& r : rings) {
            if (r.what == k && !clients[r.client].victim && want-- == 0) {
                return &r;
            }
        }
        return nullptr;
    }

    // An SGE: mostly inside an MR that exists (its key, an address in it), sometimes not.
    proto::wqe_sge sge(reader& in) {
        const uint8_t f = in.u8();
        proto::wqe_sge s{};
        if (mrs.empty() || (f & 0xC0) == 0xC0) {
            s.addr = in.u64();
            s.length = in.u32();
            s.lkey = in.u32();
            return s;
        }
        const mr_info& m = mrs[f % mrs.size()];
        const uint32_t off = in.u16();
        s.addr = m.iova + ((f & 0x40) != 0 ? off : off % std::max<uint64_t>(m.length, 1));
        s.length = (f & 0x80) != 0 ? in.u32() : in.u16() % 4097;
        s.lkey = m.key;
        return s;
    }

    void post_send(reader& in) {
        ring* r = pick_ring(in, kind::qp);
        const uint8_t f = in.u8();
        proto::send_wqe w{};
        w.wr_id = in.u32();
        w.opcode = (f & 0x0F) < 11 ? (f & 0x0F) : in.u32();  // IBV_WR_* (0-10), or anything
        w.send_flags = in.u8() % 32;
        w.imm_data = in.u32();
        const uint8_t n = in.u8();
        if ((w.send_flags & IBV_SEND_INLINE) != 0) {
            w.inline_len = (n & 0x80) != 0 ? in.u32() : n * 4u;
            const auto data = in.bytes(std::min<uint32_t>(w.inline_len, proto::wqe_max_inline));
            std::copy(data.begin(), data.end(), w.inline_data);
        } else {
            w.num_sge = n < 0xF0 ? n % 5 : n % 32;  // more than wqe_max_sge too
            for (uint32_t i = 0; i < std::min<uint32_t>(w.num_sge, proto::wqe_max_sge); ++i) {
                w.sg[i] = sge(in);
            }
        }
        const proto::wqe_sge remote = sge(in);  // RDMA and atomics: somebody's MR
        w.remote_addr = (f & 0x10) != 0 ? remote.addr & ~uint64_t{7} : remote.addr;
        w.rkey = remote.lkey;
        w.compare_add = in.u64();
        w.swap = in.u64();
        const uint8_t dst = in.u8();
        w.ud_remote_ip =
            (dst & 3) == 3 ? in.u32() : htonl((dst & 3) == 2 ? stranger_ip : vnic_ip[dst & 1]);
        w.ud_remote_qpn = pick(in, kind::qp);
        w.ud_remote_qkey = (dst & 4) != 0 ? in.u32() : 0x11111111;
        const uint8_t how = in.u8();
        if (r == nullptr) {
            return;
        }
        auto* h = static_cast<proto::qp_ring_header*>(r->base);
        proto::sq_slots(h)[r->posted & (r->cap - 1)] = w;
        // Mostly one more, as the shim would; sometimes far beyond what fits (a hostile
        // producer), sometimes exactly to the ring's end past what was retired.
        if ((how & 0xE0) == 0xE0) {
            r->posted += in.u32();
        } else if ((how & 0xE0) == 0xC0) {
            r->posted = proto::load_retired_acquire(h->sq_consumer) + r->cap + (how & 3);
        } else {
            r->posted += 1;
        }
        proto::publish_wqes(h->sq_producer, r->posted);
        if ((how & 0x10) != 0 && !doorbells.empty()) {
            // The QP's own bit, or any other (a tenant sets what it likes in its page).
            proto::ring_doorbell(*static_cast<proto::doorbell_page*>(doorbells[0].first),
                                 (how & 0x08) != 0 ? in.u32() : r->handle);
        }
    }

    proto::recv_wqe recv_wqe(reader& in) {
        proto::recv_wqe w{};
        w.wr_id = in.u32();
        const uint8_t n = in.u8();
        w.num_sge = n < 0xF0 ? n % 5 : n % 32;
        for (uint32_t i = 0; i < std::min<uint32_t>(w.num_sge, proto::wqe_max_sge); ++i) {
            w.sg[i] = sge(in);
        }
        return w;
    }

    void post_recv(reader& in) {
        ring* r = pick_ring(in, kind::qp);
        const proto::recv_wqe w = recv_wqe(in);
        const uint8_t how = in.u8();
        if (r == nullptr) {
            return;
        }
        auto* h = static_cast<proto::qp_ring_header*>(r->base);
        proto::rq_slots(h, r->cap)[r->rq_posted & (r->rq_cap - 1)] = w;
        r->rq_posted += (how & 0xE0) == 0xE0 ? in.u32() : 1;
        proto::publish_wqes(h->rq_producer, r->rq_posted);
    }

    void post_srq(reader& in) {
        ring* r = pick_ring(in, kind::srq);
        const proto::recv_wqe w = recv_wqe(in);
        const uint8_t how = in.u8();
        if (r == nullptr) {
            return;
        }
        auto* h = static_cast<proto::srq_ring_header*>(r->base);
        proto::srq_slots(h)[r->posted & (r->cap - 1)] = w;
        r->posted += (how & 0xE0) == 0xE0 ? in.u32() : 1;
        proto::publish_wqes(h->producer, r->posted);
    }

    // op 4: anything the shim can write, written badly.
    void scribble(reader& in) {
        const uint8_t k = in.u8();
        ring* r = pick_ring(in, k % 3 == 0 ? kind::qp : k % 3 == 1 ? kind::cq : kind::srq);
        const uint8_t mode = in.u8();
        const uint32_t off = in.u32();
        const uint32_t value = in.u32();
        const auto bytes = in.bytes(in.u8());
        if (r == nullptr) {
            return;
        }
        auto* base = static_cast<uint8_t*>(r->base);
        switch (mode % 3) {
            case 0: {  // a 32-bit word of the header (indices, arm, capacities...)
                const std::size_t word = (off % 128) * 4;
                std::memcpy(base + word, &value, 4);
                if (r->what == kind::qp && word == 0) {
                    r->posted = value;
                } else if (r->what == kind::qp && word == 128) {
                    r->rq_posted = value;
                } else if (r->what == kind::srq && word == 0) {
                    r->posted = value;
                }
                break;
            }
            case 1: {  // bytes anywhere in the ring
                const std::size_t at = off % r->bytes;
                std::memcpy(base + at, bytes.data(), std::min(bytes.size(), r->bytes - at));
                break;
            }
            default:
                if (!doorbells.empty()) {
                    auto* db = static_cast<uint8_t*>(doorbells[off % doorbells.size()].first);
                    std::memcpy(db + (off % 4000), &value, 4);
                }
                break;
        }
    }

    // op 5: the shim's side of a CQ.
    void cq(reader& in) {
        ring* r = pick_ring(in, kind::cq);
        const uint8_t mode = in.u8();
        const uint32_t value = in.u32();
        if (r == nullptr) {
            return;
        }
        auto* h = static_cast<proto::cq_ring_header*>(r->base);
        switch (mode % 4) {
            case 0:
            case 1:  // drain, as ibv_poll_cq would
                proto::release_slots(*h, proto::load_producer_acquire(*h));
                break;
            case 2:
                proto::release_slots(*h, value);
                break;
            default:
                proto::arm_and_fence(*h, value & 3);
                break;
        }
    }

    // ---- the engine and the wire

    uint64_t cqes_written() const {
        uint64_t n = 0;
        for (const ring& r : rings) {
            if (r.what == kind::cq) {
                if (const auto cq = res[r.vnic]->find_cq(r.handle)) {
                    n += cq->ring().produced();
                }
            }
        }
        return n;
    }

    // The rings' own promise (qp_ring.hh): what the engine took and has not retired fits in
    // the ring, so its copies (indexed by index & (capacity - 1)) never overwrite a WR in flight.
    void check_rings() {
        for (const ring& r : rings) {
            if (r.what != kind::qp) {
                continue;
            }
            rnic::queue_pair* qp = engine->find(static_cast<uint16_t>(r.vnic), r.qpn);
            if (qp == nullptr) {
                continue;
            }
            const verbs::qp_ring& q = qp->ring();
            if (q.send_taken() - q.send_retired() > q.sq_capacity()) {
                fail("the engine took more send WQEs than the SQ holds: in-flight WRs overwritten");
            }
            // On an SRQ the QP retires receives on its own (unused) RQ that it never took
            // (queue_pair::take_recv): retired runs ahead of taken there, by design.
            const auto recv_in_flight = static_cast<int32_t>(q.recv_taken() - q.recv_retired());
            if (recv_in_flight > static_cast<int32_t>(q.rq_capacity())) {
                fail("the engine took more receive WQEs than the RQ holds");
            }
        }
    }

    void deliver(const fuzz_wire::frame& f) {
        const int to = slot_of(f.dst_ip_be);
        if (to < 0 || f.bytes.size() < 14 + 20) {
            return;  // towards a stranger: the fabric has it
        }
        const uint64_t before = wire.emitted;
        engine->receive(static_cast<uint16_t>(to), f.bytes.data() + 14,
                        static_cast<uint32_t>(f.bytes.size() - 14), wire, now_ns);
        check_rings();
        if (wire.emitted - before > 2 * engine_qp_budget) {
            fail("one received packet made the engine emit dozens of frames");
        }
    }

    // op 6: `rounds` × (advance the clock, poll, deliver what the wire carries).
    void poll(reader& in) {
        const unsigned rounds = in.u8() % 8 + 1;
        const uint8_t step = in.u8();
        const uint8_t mode = in.u8();
        const uint32_t drop_mask = in.u32();
        wire.same_host = (mode & 0x08) != 0;
        wire.refuse_buffers = (mode & 0x10) != 0 && (mode & 0x07) == 7;
        wire.qos_closed = (mode & 0x20) != 0 && (mode & 0x07) == 6;
        wire.deny_datagrams = (mode & 0x40) != 0;
        // 10 µs steps, or a jump that fires every timer (ACK timeout, RNR wait).
        const uint64_t step_ns = (step & 0x80) != 0
                                     ? static_cast<uint64_t>(step & 0x7F) * 100'000'000
                                     : uint64_t{step} * 10'000;
        for (unsigned i = 0; i < rounds; ++i) {
            now_ns += step_ns;
            const uint64_t emitted = wire.emitted;
            const uint64_t cqes = cqes_written();
            std::size_t qps = 0;
            for (int v = 0; v < 2; ++v) {
                qps += res[v]->count().qps;
            }
            engine->poll(wire, now_ns);
            check_rings();
            if ((mode & 0x80) != 0 && engine->prepare_sleep()) {
                // The worker's sleep, with whatever the tenants wrote into the doorbell page
                // and the rings' `sleeping` words (1 µs: a futex wait that times out).
                engine->sleep(1);
                engine->after_sleep();
            }
            const uint64_t frames = wire.emitted - emitted;
            if (trace) {
                std::fprintf(stderr, "  poll: %llu frames, %llu completions\n",
                             static_cast<unsigned long long>(frames),
                             static_cast<unsigned long long>(cqes_written() - cqes));
            }
            worst_frames_per_poll = std::max(worst_frames_per_poll, frames);
            if (frames >
                engine_max_passes * (engine_qp_budget + 2) * std::max<std::size_t>(qps, 1)) {
                fail("one engine poll emitted more frames than its passes × budget allow");
            }
            const uint64_t written = cqes_written() - cqes;
            worst_cqes_per_poll = std::max(worst_cqes_per_poll, written);
            if (max_cqes_per_poll != 0 && written > max_cqes_per_poll) {
                fail("one engine poll wrote more completions than JAKIRO_FUZZ_MAX_CQES_PER_POLL");
            }
            std::deque<fuzz_wire::frame> batch;
            batch.swap(wire.frames);
            if ((mode & 0x07) == 2) {
                std::reverse(batch.begin(), batch.end());  // the fabric reorders
            }
            uint32_t bit = 0;
            for (auto& f : batch) {
                const bool lost = (mode & 0x07) == 1 && ((drop_mask >> (bit++ % 32)) & 1) != 0;
                if (lost) {
                    continue;
                }
                if ((mode & 0x07) == 4 && f.bytes.size() > 50) {
                    // A bit flipped in flight after the ICRC: the engine must drop it.
                    f.bytes[14 + 20 + 8 + drop_mask % (f.bytes.size() - 50)] ^= 0x10;
                }
                deliver(f);
                if ((mode & 0x07) == 3) {
                    deliver(f);  // duplicated
                }
            }
        }
        wire.refuse_buffers = wire.qos_closed = false;
    }

    // op 7: a connection, made with the requests a program would send.
    void connect(reader& in) {
        ring* a = pick_ring(in, kind::qp);
        ring* b = pick_ring(in, kind::qp);
        const uint8_t f = in.u8();
        const uint32_t psn = in.u32() & 0xFFFFFF;
        if (a == nullptr || b == nullptr) {
            return;
        }
        auto modify = [&](const ibv_qp_attr& attr, int mask) {
            auto m = proto::make_message<proto::modify_qp_request>(
                static_cast<uint16_t>(proto::opcode::modify_qp), ++request_id);
            m.qp_handle = a->handle;
            current = a->client;
            m.attr_mask = mask;
            m.attr = proto::qp_attr_wire{};
            // to_wire lives in qp_attr_wire.cc; the fields needed here are copied by hand.
            m.attr.qp_state = attr.qp_state;
            m.attr.path_mtu = attr.path_mtu;
            m.attr.qkey = attr.qkey;
            m.attr.rq_psn = attr.rq_psn;
            m.attr.sq_psn = attr.sq_psn;
            m.attr.dest_qp_num = attr.dest_qp_num;
            m.attr.qp_access_flags = attr.qp_access_flags;
            std::memcpy(m.attr.ah_attr.dgid, attr.ah_attr.grh.dgid.raw, 16);
            m.attr.ah_attr.is_global = attr.ah_attr.is_global;
            m.attr.ah_attr.port_num = attr.ah_attr.port_num;
            m.attr.max_rd_atomic = attr.max_rd_atomic;
            m.attr.max_dest_rd_atomic = attr.max_dest_rd_atomic;
            m.attr.min_rnr_timer = attr.min_rnr_timer;
            m.attr.port_num = attr.port_num;
            m.attr.timeout = attr.timeout;
            m.attr.retry_cnt = attr.retry_cnt;
            m.attr.rnr_retry = attr.rnr_retry;
            call(a->client, proto::bytes_of(m), false, {});
        };
        // The QP's type decides the masks; query it from jakirod like a program would not,
        // by trying RC's masks first and UC/UD's if those are refused.
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_RESET;
        modify(attr, IBV_QP_STATE);
        attr = {};
        attr.qp_state = IBV_QPS_INIT;
        attr.port_num = 1;
        attr.qkey = 0x11111111;
        attr.qp_access_flags = (f & 1) != 0 ? 0
                                            : IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                                  IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE;
        modify(attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        modify(attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);  // UD
        attr = {};
        attr.qp_state = IBV_QPS_RTR;
        attr.path_mtu = static_cast<ibv_mtu>(1 + (f >> 1) % 3);  // 256 .. 1024
        attr.dest_qp_num = b->qpn;
        attr.rq_psn = psn;
        attr.max_dest_rd_atomic = 16;
        attr.min_rnr_timer = 1;
        attr.ah_attr.is_global = 1;
        attr.ah_attr.port_num = 1;
        attr.ah_attr.grh.dgid.raw[10] = attr.ah_attr.grh.dgid.raw[11] = 0xff;
        const uint32_t peer = htonl((f & 0x10) != 0 ? stranger_ip : vnic_ip[b->vnic]);
        std::memcpy(attr.ah_attr.grh.dgid.raw + 12, &peer, 4);
        const int rtr =
            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
        modify(attr, rtr | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);  // RC
        modify(attr, rtr);                                                     // UC
        modify(attr, IBV_QP_STATE);                                            // UD
        attr = {};
        attr.qp_state = IBV_QPS_RTS;
        attr.timeout = (f & 0x20) != 0 ? 1 : 14;
        attr.retry_cnt = (f >> 6) % 8;
        attr.rnr_retry = 7;
        attr.sq_psn = psn;
        attr.max_rd_atomic = 16;
        modify(attr, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                         IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);  // RC
        modify(attr, IBV_QP_STATE | IBV_QP_SQ_PSN);                    // UC, UD
    }

    // op 8: the connection goes away; a new one (a new client id) takes the seat.
    void release(reader& in) {
        const int c = in.u8() % attacker_clients;
        res[clients[c].vnic]->release_client(clients[c].s.client_id);
        const auto left = res[clients[c].vnic]->count(clients[c].s.client_id);
        if (left.pds + left.mrs + left.cqs + left.qps + left.srqs != 0) {
            fail("release_client left objects of the client behind");
        }
        clients[c].s = {};
        clients[c].s.client_id = ++next_client_id;
        // What jakirod released is gone from the pools' point of view too (stale handles stay
        // reachable through raw values).
        for (auto& pool : objects) {
            std::erase_if(pool, [&](const object& o) { return o.client == c; });
        }
        std::erase_if(mrs, [&](const mr_info& m) { return !res[m.vnic]->mrs().get(m.key); });
    }

    // op 9: the tenant's own copy of a memfd it registered, abused after the fact.
    void memfd(reader& in) {
        const uint8_t sel = in.u8();
        const uint8_t what = in.u8();
        const uint32_t a = in.u32();
        const uint32_t b = in.u32();
        // The memfds the tenant registered, and the rings jakirod handed it (sealed against
        // resizing, but a hole can still be punched in them).
        const std::size_t n = tenant_fds.size() + jakirod_fds.size();
        if (n == 0) {
            return;
        }
        const int fd = sel % n < tenant_fds.size() ? tenant_fds[sel % n]
                                                   : jakirod_fds[sel % n - tenant_fds.size()];
        switch (what % 5) {
            case 0:  // shrink: refused by F_SEAL_SHRINK; where it is not sealed, jakirod refused it
                (void)!ftruncate(fd, a % (1 << 20));
                break;
            case 1:
                (void)!ftruncate(fd, (a % 64 + 1) << 16);
                break;
            case 2:  // a hole: the pages come back as zeros (shmem), never SIGBUS
                (void)!fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (a % 256) * 4096,
                                 (b % 64 + 1) * 4096);
                break;
            case 3: {
                const uint64_t v = b;
                (void)!pwrite(fd, &v, sizeof(v), a % (1 << 20));
                break;
            }
            default:
                (void)!fcntl(fd, F_ADD_SEALS,
                             static_cast<int>(b & (F_SEAL_SEAL | F_SEAL_GROW | F_SEAL_WRITE |
                                                   F_SEAL_FUTURE_WRITE)));
                break;
        }
    }

    // op 10: a RoCE packet from a QP's peer (the source the engine's RCFT check expects, or a
    // stranger), fuzzed after the BTH's opcode, with a valid ICRC so it gets past the check.
    void inject(reader& in) {
        ring* r = pick_ring(in, kind::qp);
        const uint8_t f = in.u8();
        const auto body = in.bytes(in.u16() % 1200);
        if (r == nullptr) {
            return;
        }
        const rnic::queue_pair* qp = engine->find(static_cast<uint16_t>(r->vnic), r->qpn);
        const uint32_t src = (f & 1) != 0 ? htonl(stranger_ip)
                             : qp != nullptr && qp->remote_ip_be() != 0
                                 ? qp->remote_ip_be()
                                 : htonl(vnic_ip[1 - r->vnic]);
        const std::size_t roce_len = std::max<std::size_t>(body.size(), 12) + rnic::icrc_bytes;
        std::vector<uint8_t> pkt(20 + 8 + roce_len, 0);
        uint8_t* ip = pkt.data();
        ip[0] = 0x45;
        ip[2] = static_cast<uint8_t>(pkt.size() >> 8);
        ip[3] = static_cast<uint8_t>(pkt.size());
        ip[8] = 64;
        ip[9] = 17;
        std::memcpy(ip + 12, &src, 4);
        const uint32_t dst = htonl(vnic_ip[r->vnic]);
        std::memcpy(ip + 16, &dst, 4);
        uint8_t* udp = ip + 20;
        udp[0] = 0xC0;
        udp[2] = static_cast<uint8_t>(rnic::roce_udp_port >> 8);
        udp[3] = static_cast<uint8_t>(rnic::roce_udp_port & 0xFF);
        udp[4] = static_cast<uint8_t>((8 + roce_len) >> 8);
        udp[5] = static_cast<uint8_t>(8 + roce_len);
        uint8_t* bth = udp + 8;
        std::copy(body.begin(), body.end(), bth);
        if ((f & 2) == 0) {  // a well-formed BTH for this QP; the rest stays fuzzed
            bth[1] &= 0xF0;  // TVer 0 (pad count fuzzed)
            bth[1] |= static_cast<uint8_t>((f & 0x30));
            bth[2] = bth[3] = 0xFF;
            bth[5] = static_cast<uint8_t>(r->qpn >> 16);
            bth[6] = static_cast<uint8_t>(r->qpn >> 8);
            bth[7] = static_cast<uint8_t>(r->qpn);
        }
        if (const auto crc = rnic::compute_icrc(ip, pkt.size() - rnic::icrc_bytes)) {
            rnic::store_icrc(ip + pkt.size() - rnic::icrc_bytes, *crc);
        }
        const uint64_t before = wire.emitted;
        engine->receive(static_cast<uint16_t>(r->vnic), ip, static_cast<uint32_t>(pkt.size()), wire,
                        now_ns);
        if (wire.emitted - before > 2 * engine_qp_budget) {
            fail("one injected packet made the engine emit dozens of frames");
        }
    }

    void run(const uint8_t* data, std::size_t size) {
        reader in(data, size);
        setup();
        for (unsigned ops = 0; ops < 512 && !in.empty(); ++ops) {
            switch (in.u8() % 11) {
                case 0:
                    request(in);
                    break;
                case 1:
                    post_send(in);
                    break;
                case 2:
                    post_recv(in);
                    break;
                case 3:
                    post_srq(in);
                    break;
                case 4:
                    scribble(in);
                    break;
                case 5:
                    cq(in);
                    break;
                case 6:
                    poll(in);
                    break;
                case 7:
                    connect(in);
                    break;
                case 8:
                    release(in);
                    break;
                case 9:
                    memfd(in);
                    break;
                default:
                    inject(in);
                    break;
            }
        }
        teardown();
    }
};

uint64_t inputs = 0;
uint64_t worst_frames = 0;
uint64_t worst_cqes = 0;
uint64_t cqe_bound = 0;

void report() {
    std::fprintf(stderr, "verbs_fuzzer: %llu inputs; worst poll: %llu frames, %llu completions\n",
                 static_cast<unsigned long long>(inputs),
                 static_cast<unsigned long long>(worst_frames),
                 static_cast<unsigned long long>(worst_cqes));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
    if (const char* bound = std::getenv("JAKIRO_FUZZ_MAX_CQES_PER_POLL")) {
        cqe_bound = std::strtoull(bound, nullptr, 10);
    }
    std::atexit(report);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::size_t fds_before = open_fds();
    const std::size_t maps_before = live_guarded();
    {
        auto h = std::make_unique<harness>();
        h->max_cqes_per_poll = cqe_bound;
        h->run(data, size);
        worst_frames = std::max(worst_frames, h->worst_frames_per_poll);
        worst_cqes = std::max(worst_cqes, h->worst_cqes_per_poll);
    }
    ++inputs;
    if (open_fds() != fds_before) {
        fail("a descriptor leaked: jakirod kept (or lost) a file after every client left");
    }
    if (live_guarded() != maps_before) {
        fail("a mapping leaked: jakirod kept memory mapped after every client left");
    }
    return 0;
}
