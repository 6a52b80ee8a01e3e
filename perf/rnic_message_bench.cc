// What the software RNIC itself adds to one small RC message, apart from any scheduling: two
// vNICs' QPs in one engine (made through vnic_resources, as the channel server makes them), a
// port that only keeps the frame the engine hands it, and the test's own mappings of the QP
// ring and the CQ rings (the shim's view of them). Each message is timed in two steps:
//
//   post -> frame   the SEND WQE written into the SQ ring and published (what ibv_post_send does
//                   in the shim), then one engine poll until the frame, headers and ICRC
//                   included, is handed to the port (what jakirod's datapath would encapsulate)
//   frame -> CQE    the frame given to the receiving engine (ICRC checked, the RCFT lookup, the
//                   payload placed, the ACK built and handed to the port) until the receive
//                   completion is visible in the CQ ring the program polls
//
// next to a plain memcpy of the payload: the software "virtualization tax" per message. What
// is left out is untimed: the ACK going back, draining the CQs and posting the next receive.
// The two clock reads of each step (~20-40 ns, vDSO) are in its figure. Plain C++: no EAL,
// Google Benchmark's own main.
//
// The time column is the mean of the steps, which on a shared machine also holds the times
// the benchmark lost its core inside a step (a few ms each); `median_ns` is the median step,
// which such rare preemptions do not move: the engine's own cost when other work is running.

#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "rnic/engine.hh"
#include "rnic/verbs/device_model.hh"
#include "rnic/verbs/resources.hh"
#include "tests/unit/rnic/qp_setup.hh"
#include "verbs_abi/qp_attr_wire.hh"

namespace jakiro::rnic {
namespace {

namespace proto = verbs_proto;
using bench_clock = std::chrono::steady_clock;

constexpr std::size_t region_bytes = 1 << 16;
constexpr uint64_t region_iova = 0x10000000;
constexpr uint32_t ip_a = 0xC6130101;  // 198.19.1.1
constexpr uint32_t ip_b = 0xC6130102;  // 198.19.1.2

// Keeps the last frame the engine handed over (one message's frame, or the ACK).
class capture_port final : public packet_port {
  public:
    struct frame {
        uint32_t dst_ip_be = 0;
        uint32_t len = 0;
        std::vector<uint8_t> bytes = std::vector<uint8_t>(9216);
    };
    uint8_t* begin_frame(uint32_t len) override {
        if (count == frames.size() || len > frames[count].bytes.size()) {
            return nullptr;
        }
        return frames[count].bytes.data();
    }
    void end_frame(uint16_t, uint32_t dst_ip_be, uint32_t len) override {
        frames[count].dst_ip_be = dst_ip_be;
        frames[count].len = len;
        ++count;
    }
    std::array<frame, 4> frames;
    std::size_t count = 0;
};

// One end: a vNIC's resources, a registered region, a send and a receive CQ and an RC QP, with
// the program's mappings of the rings.
struct side {
    uint64_t client = 0;
    uint16_t vnic = 0;
    std::unique_ptr<verbs::vnic_resources> res;
    uint32_t pd = 0, mr = 0, scq = 0, rcq = 0, qp = 0;
    int region_fd = -1;
    std::byte* region = nullptr;
    proto::qp_ring_header* ring = nullptr;
    std::size_t ring_bytes = 0;
    proto::cq_ring_header* send_cq = nullptr;
    proto::cq_ring_header* recv_cq = nullptr;
    std::size_t send_cq_bytes = 0, recv_cq_bytes = 0;
    uint32_t sq_posted = 0, rq_posted = 0;

    ~side() {
        if (res) {
            res->release_client(client);
        }
        munmap(region, region_bytes);
        munmap(ring, ring_bytes);
        munmap(send_cq, send_cq_bytes);
        munmap(recv_cq, recv_cq_bytes);
        close(region_fd);
    }

    void post_send(uint32_t length) {
        proto::sq_slots(ring)[sq_posted & (ring->sq_capacity - 1)] =
            test::wqe(sq_posted, IBV_WR_SEND, region_iova, length, mr);
        proto::publish_wqes(ring->sq_producer, ++sq_posted);
    }
    void post_recv(uint32_t length) {
        proto::recv_wqe w{};
        w.wr_id = rq_posted;
        w.num_sge = 1;
        w.sg[0] = {region_iova + region_bytes / 2, length, mr};
        proto::rq_slots(ring, ring->sq_capacity)[rq_posted & (ring->rq_capacity - 1)] = w;
        proto::publish_wqes(ring->rq_producer, ++rq_posted);
    }
    // Completions ready in `cq` (the shim's ibv_poll_cq), all consumed.
    static uint32_t drain(proto::cq_ring_header* cq) {
        const uint32_t consumer = proto::load_own_consumer(*cq);
        const uint32_t ready = proto::load_producer_acquire(*cq) - consumer;
        proto::release_slots(*cq, consumer + ready);
        return ready;
    }
    bool recv_ready() const {
        return proto::load_producer_acquire(*recv_cq) != proto::load_own_consumer(*recv_cq);
    }
};

class connected_pair {
  public:
    // Empty when everything was made; otherwise what failed.
    std::string error;
    engine eng{2, 16};
    capture_port port;
    side a, b;

    connected_pair() {
        if (!make_side(a, 0, ip_a, 101) || !make_side(b, 1, ip_b, 202) || !connect(a, b, ip_b) ||
            !connect(b, a, ip_a)) {
            return;
        }
    }

  private:
    bool fail(const char* what) {
        error = what;
        return false;
    }

    bool make_side(side& s, uint16_t slot, uint32_t ip, uint64_t client) {
        s.client = client;
        s.vnic = slot;
        verbs::vnic_quota limits;
        limits.max_qps = 4;
        s.res = std::make_unique<verbs::vnic_resources>(verbs::engine_limits(),
                                                        verbs::cq_error_sink{}, limits);
        verbs::qp_support support;
        support.engine = &eng;
        support.local.vnic = slot;
        support.local.mac = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(slot + 1)};
        support.local.ip_be = htonl(ip);
        support.limits.max_mtu = IBV_MTU_4096;
        support.events = {[](void*, uint64_t, uint32_t, uint32_t) {}, nullptr};
        support.admit = [](uint32_t) { return 0; };
        s.res->enable_qps(support);
        if (s.res->alloc_pd(client, s.pd) != 0) {
            return fail("alloc_pd");
        }
        s.region_fd = memfd_create("bench-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (s.region_fd < 0 || ftruncate(s.region_fd, region_bytes) != 0 ||
            fcntl(s.region_fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0) {
            return fail("memfd");
        }
        s.region = static_cast<std::byte*>(
            mmap(nullptr, region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s.region_fd, 0));
        if (s.res->reg_mr(client, test::region_mr_request(s.pd, region_iova, region_bytes),
                          s.region_fd, s.mr) != 0) {
            return fail("reg_mr");
        }
        verbs::cq_created scq, rcq;
        const auto cq = test::cq_request(256);
        int no_channel = -1;
        if (s.res->create_cq(client, cq, no_channel, scq) != 0 ||
            s.res->create_cq(client, cq, no_channel, rcq) != 0) {
            return fail("create_cq");
        }
        s.scq = scq.handle;
        s.rcq = rcq.handle;
        s.send_cq_bytes = scq.ring_bytes;
        s.recv_cq_bytes = rcq.ring_bytes;
        s.send_cq = test::map_shared<proto::cq_ring_header>(scq.ring_fd, scq.ring_bytes);
        s.recv_cq = test::map_shared<proto::cq_ring_header>(rcq.ring_fd, rcq.ring_bytes);
        close(scq.ring_fd);
        close(rcq.ring_fd);
        verbs::qp_created q;
        if (s.res->create_qp(client,
                             test::qp_create_request(s.pd, s.scq, s.rcq, 64, 1, proto::qpt_rc),
                             q) != 0) {
            return fail("create_qp");
        }
        s.qp = q.handle;
        s.ring_bytes = q.ring_bytes;
        s.ring = test::map_shared<proto::qp_ring_header>(q.ring_fd, q.ring_bytes);
        close(q.ring_fd);
        close(q.doorbell_fd);
        return true;
    }

    int modify(side& s, const ibv_qp_attr& attr, int mask) {
        return s.res->modify_qp(s.client, s.qp, proto::to_wire(attr), mask);
    }

    // RESET -> INIT -> RTR -> RTS towards `peer`, path MTU 1024.
    bool connect(side& s, const side& peer, uint32_t peer_ip) {
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_INIT;
        attr.port_num = 1;
        attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
        if (modify(s, attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) !=
            0) {
            return fail("INIT");
        }
        attr = test::rtr_attr(peer.qp, peer_ip, 0x1000 ^ peer.qp);
        if (modify(s, attr,
                   IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
            return fail("RTR");
        }
        attr = test::rts_attr(0x1000 ^ s.qp, 14, 7, 7);
        if (modify(s, attr,
                   IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                       IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
            return fail("RTS");
        }
        return true;
    }
};

void deliver(engine& eng, uint16_t to, const capture_port::frame& f, packet_port& port,
             uint64_t now) {
    eng.receive(to, f.bytes.data() + 14, f.len - 14, port, now);
}

// The frames from `first` on that are a's (b's answers), given to the engine as a's.
void deliver_to_a(engine& eng, capture_port& port, std::size_t first, uint64_t now) {
    const std::size_t answers = port.count;
    for (std::size_t i = first; i < answers; ++i) {
        if (port.frames[i].dst_ip_be == htonl(ip_a)) {
            deliver(eng, 0, port.frames[i], port, now);
        }
    }
}

double seconds(bench_clock::duration d) {
    return std::chrono::duration<double>(d).count();
}

// Which step of a message the benchmark times.
enum class step { post_to_frame, frame_to_cqe };

// Step times in whole nanoseconds, counted per value (no allocation while timing); the median
// of those counted. Steps longer than the table (lost the core) count in its last slot.
class step_times {
  public:
    void add(bench_clock::duration d) {
        const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
        ++_count[static_cast<std::size_t>(std::clamp<int64_t>(ns, 0, slots - 1))];
        ++_total;
    }
    double median_ns() const {
        uint64_t seen = 0;
        for (std::size_t ns = 0; ns < slots; ++ns) {
            seen += _count[ns];
            if (2 * seen >= _total) {
                return static_cast<double>(ns);
            }
        }
        return static_cast<double>(slots - 1);
    }

  private:
    static constexpr std::size_t slots = 1 << 16;
    std::vector<uint64_t> _count = std::vector<uint64_t>(slots);
    uint64_t _total = 0;
};

// One RC SEND of `range(0)` bytes from a to b per iteration; only `timed` is counted.
void rc_send(benchmark::State& state, step timed) {
    const auto size = static_cast<uint32_t>(state.range(0));
    connected_pair pair;
    if (!pair.error.empty()) {
        state.SkipWithError(pair.error.c_str());
        return;
    }
    engine& eng = pair.eng;
    capture_port& port = pair.port;
    side& a = pair.a;
    side& b = pair.b;
    uint64_t now = 1'000'000'000;
    step_times times;
    b.post_recv(size);
    for (auto _ : state) {
        now += 1000;
        port.count = 0;
        const auto posted = bench_clock::now();
        a.post_send(size);
        eng.poll(port, now);
        const auto framed = bench_clock::now();
        if (port.count != 1) {
            state.SkipWithError("the SEND left no frame");
            return;
        }
        // The message stays in frames[0]; what the receiver answers lands after it.
        const auto arrived = bench_clock::now();
        deliver(eng, 1, port.frames[0], port, now);
        const bool visible = b.recv_ready();
        const auto completed = bench_clock::now();
        if (!visible) {
            state.SkipWithError("no receive completion");
            return;
        }
        const bench_clock::duration took =
            timed == step::post_to_frame ? framed - posted : completed - arrived;
        state.SetIterationTime(seconds(took));
        times.add(took);
        // Untimed: what b answered (at once, or at its next poll) back to a, the completions
        // read, the next receive posted.
        deliver_to_a(eng, port, 1, now);
        port.count = 0;
        side::drain(b.recv_cq);
        b.post_recv(size);
        eng.poll(port, now);
        deliver_to_a(eng, port, 0, now);
        side::drain(a.send_cq);
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * size);
    state.counters["median_ns"] = times.median_ns();
}

void BM_RcSend_PostToFrame(benchmark::State& state) {
    rc_send(state, step::post_to_frame);
}
void BM_RcSend_FrameToCqe(benchmark::State& state) {
    rc_send(state, step::frame_to_cqe);
}
BENCHMARK(BM_RcSend_PostToFrame)->Arg(64)->Arg(1024)->UseManualTime();
BENCHMARK(BM_RcSend_FrameToCqe)->Arg(64)->Arg(1024)->UseManualTime();

// The baseline: the payload copied once, as a kernel socket would copy it.
void BM_Memcpy(benchmark::State& state) {
    const auto size = static_cast<std::size_t>(state.range(0));
    std::vector<uint8_t> from(size, 0x5a), to(size);
    for (auto _ : state) {
        std::memcpy(to.data(), from.data(), size);
        benchmark::DoNotOptimize(to.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * size);
}
BENCHMARK(BM_Memcpy)->Arg(64)->Arg(1024);

}  // namespace
}  // namespace jakiro::rnic

BENCHMARK_MAIN();
