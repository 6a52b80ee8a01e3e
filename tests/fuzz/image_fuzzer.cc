// libFuzzer target over the reader of a state image (docs/restart.md): a vNIC's verbs objects
// (vnic_resources::restore, resources_image.cc and qp_image.cc, with the QPs' protocol state
// from rnic/qp_handover.cc) read back from a section that is corrupt in any way. The image
// comes from a jakirod of the same host, but a successor must still refuse a damaged one whole
// rather than crash, hang, leak, or touch what the tenants map.
//
// Each input is a list of edits to one real image, saved once at start-up from a vNIC with a
// PD, an MR, a CQ, an SRQ, an RC QP moved to RTS with a send posted in its ring, and a second
// QP left in RESET: so every input reaches deep into the fields, not only the header checks.
// Edits, each 4 bytes (past the end: none):
//   offset (u16, modulo the section's length), operation (u8), value (u8)
//   operation % 4: 0 xor the byte with value; 1 set it to value; 2 cut the section to offset
//   (the section's length field follows); 3 set the 4 bytes at offset to value's little
//   bit-pattern spread (0xff: all ones, else value), to reach counts and limits.
// The descriptors are the saved image's own (copies of the same memfds), as in a take-over.
//
// Besides crashes and ASan/UBSan reports, the harness aborts ("image_fuzzer: ...") when:
//   - the image as saved (an input with no edit) is refused;
//   - restore() succeeds although the reader failed, or fails with the reader still ok;
//   - the tenant's rings (mapped here as the shim maps them) or its MR bytes changed after any
//     restore, failed or not, and the successor's objects were let go (hand_over on success,
//     destruction on failure): a successor never punches or writes a page a tenant still uses;
//   - the successor's engine still has QPs after the objects are gone, or a descriptor leaked.

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "handover/image.hh"
#include "rnic/engine.hh"
#include "rnic/verbs/device_model.hh"
#include "rnic/verbs/resources.hh"
#include "verbs_abi/qp_attr_wire.hh"
#include "verbs_abi/rings.hh"

namespace {

using namespace jakiro;
namespace proto = verbs_proto;

constexpr uint64_t client = 7;
constexpr std::size_t region_bytes = 1 << 16;
constexpr char region_text[] = "the tenant's bytes";

[[noreturn]] void fail(const char* why) {
    std::fprintf(stderr, "image_fuzzer: %s\n", why);
    std::abort();
}

void require(bool ok, const char* what) {
    if (!ok) {
        fail(what);
    }
}

std::unique_ptr<verbs::vnic_resources> make_resources(rnic::engine& engine) {
    auto res = std::make_unique<verbs::vnic_resources>(verbs::engine_limits());
    verbs::qp_support support;
    support.engine = &engine;
    support.local.vnic = 0;
    support.local.ip_be = htonl(0xC6130101);
    support.limits.max_mtu = IBV_MTU_4096;
    res->enable_qps(support);
    return res;
}

int open_descriptors() {
    int n = 0;
    if (DIR* d = opendir("/proc/self/fd")) {
        while (readdir(d) != nullptr) {
            ++n;
        }
        closedir(d);
    }
    return n;
}

// The vNIC whose image every input edits, and the tenant's view of its memory.
struct origin {
    rnic::engine engine{1, 16};
    std::unique_ptr<verbs::vnic_resources> res;
    int region_fd = -1;
    void* region = nullptr;
    std::vector<std::pair<void*, std::size_t>> rings;  // the tenant's mappings
    std::vector<std::vector<std::byte>> ring_bytes;    // what they held after the save
    std::vector<std::byte> section;                    // the section's fields
    std::vector<int> fds;                              // the image's descriptors
    std::vector<int> opened;

    void map_ring(int fd, std::size_t bytes) {
        void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        require(p != MAP_FAILED, "cannot map a ring");
        close(fd);
        rings.emplace_back(p, bytes);
    }

    void modify(uint32_t qp, const ibv_qp_attr& a, int mask) {
        require(res->modify_qp(client, qp, proto::to_wire(a), mask) == 0, "cannot move the QP");
    }

    void connect(uint32_t qp) {
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_INIT;
        a.port_num = 1;
        a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                            IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE;
        modify(qp, a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        a = {};
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = IBV_MTU_1024;
        a.dest_qp_num = 0x1234;
        a.rq_psn = 0x100;
        a.max_dest_rd_atomic = 16;
        a.min_rnr_timer = 1;
        a.ah_attr.is_global = 1;
        a.ah_attr.port_num = 1;
        a.ah_attr.grh.dgid.raw[10] = a.ah_attr.grh.dgid.raw[11] = 0xff;
        const uint32_t peer = htonl(0xC6130102);
        std::memcpy(a.ah_attr.grh.dgid.raw + 12, &peer, 4);
        modify(qp, a,
               IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
        a = {};
        a.qp_state = IBV_QPS_RTS;
        a.sq_psn = 0x200;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.max_rd_atomic = 16;
        modify(qp, a,
               IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                   IBV_QP_MAX_QP_RD_ATOMIC);
    }

    uint32_t create_qp(uint32_t pd, uint32_t cq, uint32_t srq) {
        auto q = proto::make_message<proto::create_qp_request>(
            static_cast<uint16_t>(proto::opcode::create_qp), 1);
        q.pd_handle = pd;
        q.send_cq = q.recv_cq = cq;
        q.srq = srq;
        q.max_send_wr = q.max_recv_wr = 16;
        q.max_send_sge = q.max_recv_sge = 1;
        q.qp_type = proto::qpt_rc;
        verbs::qp_created made;
        require(res->create_qp(client, q, made) == 0, "cannot create a QP");
        close(made.doorbell_fd);
        map_ring(made.ring_fd, made.ring_bytes);
        return made.handle;
    }

    void build() {
        res = make_resources(engine);
        uint32_t pd = 0;
        require(res->alloc_pd(client, pd) == 0, "cannot allocate a PD");
        region_fd = memfd_create("fuzz-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        require(region_fd >= 0 && ftruncate(region_fd, region_bytes) == 0 &&
                    fcntl(region_fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0,
                "cannot make the MR's memfd");
        region = mmap(nullptr, region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, region_fd, 0);
        require(region != MAP_FAILED, "cannot map the MR");
        std::memcpy(static_cast<char*>(region) + 4096, region_text, sizeof region_text);
        auto mr = proto::make_message<proto::reg_mr_request>(
            static_cast<uint16_t>(proto::opcode::reg_mr), 1);
        mr.pd_handle = pd;
        mr.access = proto::mr_access_all;
        mr.addr = mr.iova = 0x10000;
        mr.length = region_bytes;
        uint32_t key = 0;
        require(res->reg_mr(client, mr, region_fd, key) == 0, "cannot register the MR");

        auto cq = proto::make_message<proto::create_cq_request>(
            static_cast<uint16_t>(proto::opcode::create_cq), 1);
        cq.cqe = 64;
        int no_channel = -1;
        verbs::cq_created made_cq;
        require(res->create_cq(client, cq, no_channel, made_cq) == 0, "cannot create the CQ");
        map_ring(made_cq.ring_fd, made_cq.ring_bytes);

        auto srq = proto::make_message<proto::create_srq_request>(
            static_cast<uint16_t>(proto::opcode::create_srq), 1);
        srq.pd_handle = pd;
        srq.max_wr = 16;
        verbs::srq_created made_srq;
        require(res->create_srq(client, srq, made_srq) == 0, "cannot create the SRQ");
        map_ring(made_srq.ring_fd, made_srq.ring_bytes);
        auto* s = static_cast<proto::srq_ring_header*>(rings.back().first);
        proto::srq_slots(s)[0].wr_id = 0xbeef;

        const uint32_t connected = create_qp(pd, made_cq.handle, made_srq.handle);
        auto* q = static_cast<proto::qp_ring_header*>(rings.back().first);
        connect(connected);
        proto::send_wqe& wqe = proto::sq_slots(q)[0];
        wqe.wr_id = 0xfeed;
        wqe.opcode = IBV_WR_SEND;
        wqe.send_flags = IBV_SEND_SIGNALED;
        wqe.num_sge = 1;
        wqe.sg[0] = {0x10000 + 4096, sizeof region_text, key};
        create_qp(pd, made_cq.handle, 0);  // left in RESET

        handover::image_writer w("jakirod fuzz");
        w.begin(handover::section_kind::rdma_faces);
        std::string error;
        require(res->save(w, opened, error), "cannot save the image");
        w.end();
        // The section's fields: after the image header and the section's own (kind, version,
        // length: 12 bytes).
        const std::size_t at = handover::image_writer("jakirod fuzz").data().size() + 12;
        section.assign(w.data().begin() + static_cast<std::ptrdiff_t>(at), w.data().end());
        for (const int fd : w.fds()) {
            fds.push_back(fd);
        }
        for (const auto& [base, bytes] : rings) {
            const auto* b = static_cast<const std::byte*>(base);
            ring_bytes.emplace_back(b, b + bytes);
        }
    }

    bool tenant_memory_whole() const {
        for (std::size_t i = 0; i < rings.size(); ++i) {
            if (std::memcmp(rings[i].first, ring_bytes[i].data(), rings[i].second) != 0) {
                return false;
            }
        }
        return std::memcmp(static_cast<const char*>(region) + 4096, region_text,
                           sizeof region_text) == 0;
    }
};

origin* the_origin = nullptr;

std::vector<std::byte> edited(const uint8_t* data, std::size_t size) {
    std::vector<std::byte> s = the_origin->section;
    for (std::size_t i = 0; i + 4 <= size && !s.empty(); i += 4) {
        const std::size_t at = (data[i] | (std::size_t{data[i + 1]} << 8)) % s.size();
        const uint8_t op = data[i + 2] % 4;
        const uint8_t v = data[i + 3];
        switch (op) {
            case 0:
                s[at] ^= std::byte{v};
                break;
            case 1:
                s[at] = std::byte{v};
                break;
            case 2:
                s.resize(at);
                break;
            default:
                for (std::size_t k = at; k < at + 4 && k < s.size(); ++k) {
                    s[k] = std::byte{v};
                }
        }
    }
    return s;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
    the_origin = new origin;
    the_origin->build();
    // The origin lets go as a predecessor does once a successor runs: its rings and MRs stay
    // as the tenant has them, and every input's successor restores over the same memfds.
    the_origin->res->hand_over();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const int descriptors_before = open_descriptors();
    {
        const std::vector<std::byte> section = edited(data, size);
        handover::image_writer w("jakirod fuzz");
        w.begin(handover::section_kind::rdma_faces);
        for (const std::byte b : section) {
            w.u8(static_cast<uint8_t>(b));
        }
        w.end();
        std::vector<int> fds;
        for (const int fd : the_origin->fds) {
            fds.push_back(fcntl(fd, F_DUPFD_CLOEXEC, 0));
        }
        rnic::engine successor_engine{1, 16};
        auto next = make_resources(successor_engine);
        handover::image_reader image(w.data(), std::move(fds));
        require(image.open(), "the image header (not edited) was refused");
        auto r = image.section(handover::section_kind::rdma_faces);
        const bool restored = next->restore(r);
        if (restored && !image.ok()) {
            fail("restore() succeeded with the reader failed");
        }
        if (size < 4 && !restored) {  // no edit: the image as saved must be taken
            std::fprintf(stderr, "image_fuzzer: %s\n", image.error().c_str());
            fail("the image as saved was refused");
        }
        if (!restored && image.ok()) {
            fail("restore() failed with the reader still ok (no reason given)");
        }
        if (restored) {
            next->hand_over();  // as a predecessor would: the tenant keeps everything
        }
        next.reset();
        if (successor_engine.has_qps()) {
            fail("the successor's engine kept QPs of objects that are gone");
        }
    }
    if (!the_origin->tenant_memory_whole()) {
        fail("a restore changed memory the tenant maps");
    }
    if (open_descriptors() != descriptors_before) {
        fail("a descriptor leaked");
    }
    return 0;
}
