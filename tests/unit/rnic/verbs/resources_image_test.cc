// A vNIC's verbs objects in a state image (resources.hh save/restore/hand_over), driven
// directly: restored under the same handles and keys over the same memfds, and a restore that
// fails on any cut of its fields never gives back a page of the rings the tenant (and the
// process that still serves them) maps.

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "handover/image.hh"
#include "rnic/engine.hh"
#include "rnic/verbs/device_model.hh"
#include "rnic/verbs/resources.hh"
#include "verbs_abi/rings.hh"

namespace jakiro::verbs {
namespace {

namespace proto = verbs_proto;

constexpr uint64_t client = (uint64_t{0} << 48) | 7;
constexpr std::size_t region_bytes = 1 << 16;

// The tenant's mapping of a memfd jakirod sent it.
struct mapping {
    void* base = nullptr;
    std::size_t bytes = 0;
    mapping(int fd, std::size_t n) : bytes(n) {
        base = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        EXPECT_NE(base, MAP_FAILED);
        close(fd);
    }
    ~mapping() { munmap(base, bytes); }
    mapping(const mapping&) = delete;
    mapping& operator=(const mapping&) = delete;
};

std::unique_ptr<vnic_resources> make_resources(rnic::engine& engine) {
    auto res = std::make_unique<vnic_resources>(engine_limits());
    qp_support support;
    support.engine = &engine;
    support.local.vnic = 0;
    support.local.ip_be = htonl(0xC6130101);
    support.limits.max_mtu = IBV_MTU_4096;
    res->enable_qps(support);
    return res;
}

class ResourcesImage : public testing::Test {
  protected:
    void SetUp() override {
        res = make_resources(engine);
        ASSERT_EQ(res->alloc_pd(client, pd), 0);
        region_fd = memfd_create("test-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        ASSERT_EQ(ftruncate(region_fd, region_bytes), 0);
        ASSERT_EQ(fcntl(region_fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
        ASSERT_EQ(pwrite(region_fd, "region", 6, 4096), 6);
        auto mr = proto::make_message<proto::reg_mr_request>(
            static_cast<uint16_t>(proto::opcode::reg_mr), 1);
        mr.pd_handle = pd;
        mr.access = proto::mr_access_all;
        mr.addr = mr.iova = 0x10000;
        mr.length = region_bytes;
        ASSERT_EQ(res->reg_mr(client, mr, region_fd, key), 0);
        auto cq = proto::make_message<proto::create_cq_request>(
            static_cast<uint16_t>(proto::opcode::create_cq), 1);
        cq.cqe = 64;
        int no_channel = -1;
        cq_created made_cq;
        ASSERT_EQ(res->create_cq(client, cq, no_channel, made_cq), 0);
        cq_handle = made_cq.handle;
        cq_ring = std::make_unique<mapping>(made_cq.ring_fd, made_cq.ring_bytes);
        auto srq = proto::make_message<proto::create_srq_request>(
            static_cast<uint16_t>(proto::opcode::create_srq), 1);
        srq.pd_handle = pd;
        srq.max_wr = 16;
        srq_created made_srq;
        ASSERT_EQ(res->create_srq(client, srq, made_srq), 0);
        srq_ring = std::make_unique<mapping>(made_srq.ring_fd, made_srq.ring_bytes);
        auto qp = proto::make_message<proto::create_qp_request>(
            static_cast<uint16_t>(proto::opcode::create_qp), 1);
        qp.pd_handle = pd;
        qp.send_cq = qp.recv_cq = cq_handle;
        qp.max_send_wr = qp.max_recv_wr = 16;
        qp.qp_type = proto::qpt_rc;
        qp_created made_qp;
        ASSERT_EQ(res->create_qp(client, qp, made_qp), 0);
        qp_handle = made_qp.handle;
        close(made_qp.doorbell_fd);
        qp_ring = std::make_unique<mapping>(made_qp.ring_fd, made_qp.ring_bytes);

        // What the tenant has in its rings: a posted send, a posted SRQ receive.
        auto* q = static_cast<proto::qp_ring_header*>(qp_ring->base);
        proto::sq_slots(q)[0].wr_id = 0xfeed;
        auto* s = static_cast<proto::srq_ring_header*>(srq_ring->base);
        proto::srq_slots(s)[0].wr_id = 0xbeef;
    }
    void TearDown() override {
        for (const int fd : opened) {
            close(fd);
        }
        close(region_fd);
    }

    // The image of `res`, in a section of its own; `opened` keeps the descriptors it needs.
    handover::image_writer save() {
        handover::image_writer w("jakirod test");
        w.begin(handover::section_kind::rdma_faces);
        std::string error;
        EXPECT_TRUE(res->save(w, opened, error)) << error;
        w.end();
        return w;
    }
    static std::vector<int> copies(const handover::image_writer& w) {
        std::vector<int> fds;
        for (const int fd : w.fds()) {
            fds.push_back(fcntl(fd, F_DUPFD_CLOEXEC, 0));
        }
        return fds;
    }
    bool tenant_rings_whole() const {
        auto* q = static_cast<proto::qp_ring_header*>(qp_ring->base);
        auto* s = static_cast<proto::srq_ring_header*>(srq_ring->base);
        const auto* c = static_cast<const proto::cq_ring_header*>(cq_ring->base);
        return q->magic == proto::qp_ring_magic && proto::sq_slots(q)[0].wr_id == 0xfeed &&
               s->magic == proto::srq_ring_magic && proto::srq_slots(s)[0].wr_id == 0xbeef &&
               c->magic == proto::cq_ring_magic;
    }

    rnic::engine engine{1, 16};
    std::unique_ptr<vnic_resources> res;
    uint32_t pd = 0, key = 0, cq_handle = 0, qp_handle = 0;
    int region_fd = -1;
    std::unique_ptr<mapping> cq_ring, srq_ring, qp_ring;
    std::vector<int> opened;
};

TEST_F(ResourcesImage, ASuccessorHasEveryObjectUnderItsHandleOverTheSameMemory) {
    const handover::image_writer w = save();
    rnic::engine successor_engine{1, 16};
    auto next = make_resources(successor_engine);
    handover::image_reader image(w.data(), copies(w));
    ASSERT_TRUE(image.open());
    auto r = image.section(handover::section_kind::rdma_faces);
    ASSERT_TRUE(next->restore(r)) << image.error();
    EXPECT_TRUE(r.done());
    res->hand_over();
    res.reset();

    const resource_counts c = next->count();
    EXPECT_EQ(c.pds, 1u);
    EXPECT_EQ(c.mrs, 1u);
    EXPECT_EQ(c.cqs, 1u);
    EXPECT_EQ(c.srqs, 1u);
    EXPECT_EQ(c.qps, 1u);
    const mr_lookup found = next->mrs().find(pd, key, 0x10000 + 4096, 6, 0);
    ASSERT_TRUE(found);
    EXPECT_EQ(std::memcmp(found.bytes.data(), "region", 6), 0) << "the same memfd";
    EXPECT_NE(next->find_cq(cq_handle), nullptr);
    EXPECT_NE(successor_engine.find(0, qp_handle), nullptr) << "the QP runs in the new engine";
    EXPECT_EQ(engine.find(0, qp_handle), nullptr) << "and left the old one";
    EXPECT_TRUE(tenant_rings_whole()) << "the old process let go without punching a page";
    // The next objects get keys the old process would not have handed out twice.
    uint32_t another = 0;
    ASSERT_EQ(next->alloc_pd(client, another), 0);
    EXPECT_NE(another, pd);
}

TEST_F(ResourcesImage, ARestoreRefusedAtAnyCutLeavesTheTenantsRingsWhole) {
    const handover::image_writer w = save();
    const std::vector<std::byte>& whole = w.data();
    const std::size_t section_at = handover::image_writer("jakirod test").data().size();
    const std::size_t fields = whole.size() - section_at - 12;
    int refused = 0;
    for (std::size_t cut = 0; cut < fields; cut += 1 + fields / 151) {
        std::vector<std::byte> data(
            whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(section_at + 12 + cut));
        const uint64_t length = cut;
        std::memcpy(data.data() + section_at + 4, &length, 8);
        rnic::engine successor_engine{1, 16};
        auto next = make_resources(successor_engine);
        handover::image_reader image(std::move(data), copies(w));
        ASSERT_TRUE(image.open());
        auto r = image.section(handover::section_kind::rdma_faces);
        EXPECT_FALSE(next->restore(r)) << cut;
        next.reset();  // with whatever it had restored
        ASSERT_TRUE(tenant_rings_whole()) << "after a cut at " << cut << " of " << fields;
        ++refused;
    }
    EXPECT_GT(refused, 100);
}

}  // namespace
}  // namespace jakiro::verbs
