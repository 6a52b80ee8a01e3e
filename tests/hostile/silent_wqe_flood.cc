// silent_wqe_flood: a noisy neighbour that keeps the RNIC busy with work that never reaches
// the wire. It opens its own vNIC's device (under jakiro-run, unmodified libibverbs), makes
// --qps RC QPs connected in pairs to each other (the intra-host path: no packet leaves), gives
// each a type-2 memory window over a small region, and for --seconds keeps every send queue
// full of unsignaled IBV_WR_BIND_MW / IBV_WR_LOCAL_INV pairs. Each retires at once and
// completes nothing, so the only cost is the worker's time. With --idle 1 it posts nothing: it
// holds its QPs, connected and idle, for --seconds (a tenant sitting on its quota of QPs).
//
//   silent_wqe_flood [--qps N] [--depth D] [--seconds S] [--idle 0|1] [--device NAME]
//
// Prints "posted N wqes in S s" at the end, also when SIGINT or SIGTERM cut it short (the
// benchmark checks that it did its work), and exits 0; 1 with the failing verb and errno if the
// set-up fails.

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <sys/mman.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "tests/hostile/rc_loopback.hh"

namespace {

namespace hostile = jakiro::hostile;
using hostile::fail;

constexpr std::size_t region_bytes = 64 * 1024;
// SIGINT or SIGTERM ends the flood early, with its report.
volatile std::sig_atomic_t stopping = 0;

struct options {
    unsigned qps = 1024;
    unsigned depth = 64;
    unsigned seconds = 10;
    bool idle = false;
    std::string device;
};

[[noreturn]] void usage() {
    std::fprintf(stderr,
                 "usage: silent_wqe_flood [--qps N] [--depth D] [--seconds S] [--idle 0|1] "
                 "[--device NAME]\n");
    std::exit(2);
}

options parse(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (i + 1 >= argc) {
            usage();
        }
        const char* value = argv[++i];
        if (arg == "--qps") {
            o.qps = static_cast<unsigned>(std::strtoul(value, nullptr, 10));
        } else if (arg == "--depth") {
            o.depth = static_cast<unsigned>(std::strtoul(value, nullptr, 10));
        } else if (arg == "--seconds") {
            o.seconds = static_cast<unsigned>(std::strtoul(value, nullptr, 10));
        } else if (arg == "--idle") {
            o.idle = std::strtoul(value, nullptr, 10) != 0;
        } else if (arg == "--device") {
            o.device = value;
        } else {
            usage();
        }
    }
    if (o.qps < 2 || o.qps % 2 != 0 || o.depth < 2) {
        usage();
    }
    return o;
}

struct flooding_qp {
    ibv_qp* qp = nullptr;
    ibv_mw* mw = nullptr;
    uint32_t rkey = 0;
    bool bound = false;  // the queue filled between a bind and its invalidation
};

}  // namespace

[[noreturn]] void jakiro::hostile::fail(const char* step, int error) {
    std::fprintf(stderr, "silent_wqe_flood: %s: %s\n", step, std::strerror(error));
    std::exit(1);
}

int main(int argc, char** argv) {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    const options o = parse(argc, argv);
    const hostile::rc_loopback l =
        hostile::open_loopback(o.device, region_bytes,
                               IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                   IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND);
    // One CQ for every QP: nothing is signaled, so nothing ever lands in it.
    ibv_cq* cq = ibv_create_cq(l.ctx, 16, nullptr, nullptr, 0);
    if (cq == nullptr) {
        fail("ibv_create_cq", errno);
    }
    std::vector<flooding_qp> qps(o.qps);
    for (auto& f : qps) {
        f.qp = hostile::create_rc_qp(l, cq, o.depth);
        f.mw = ibv_alloc_mw(l.pd, IBV_MW_TYPE_2);
        if (f.mw == nullptr) {
            fail("ibv_alloc_mw", errno);
        }
        f.rkey = f.mw->rkey;
    }
    for (std::size_t i = 0; i < qps.size(); i += 2) {
        hostile::connect_pair(l, qps[i].qp, qps[i + 1].qp,
                              IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
    }
    std::signal(SIGINT, [](int) { stopping = 1; });
    std::signal(SIGTERM, [](int) { stopping = 1; });
    if (o.idle) {
        std::printf("holding %u idle qps\n", o.qps);
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(o.seconds);
        while (stopping == 0 && std::chrono::steady_clock::now() < until) {
            const timespec tick{0, 50'000'000};
            nanosleep(&tick, nullptr);
        }
        std::printf("posted 0 wqes\n");
        return 0;
    }
    std::printf("flooding %u qps x %u slots\n", o.qps, o.depth);

    uint64_t posted = 0;
    const auto start = std::chrono::steady_clock::now();
    const auto end = start + std::chrono::seconds(o.seconds);
    while (stopping == 0 && std::chrono::steady_clock::now() < end) {
        for (auto& f : qps) {
            // Bind, then invalidate, the window under the next key, until the queue is full.
            for (;;) {
                ibv_send_wr pair[2]{};
                const uint32_t next = ibv_inc_rkey(f.rkey);
                pair[0].opcode = IBV_WR_BIND_MW;
                pair[0].bind_mw.mw = f.mw;
                pair[0].bind_mw.rkey = next;
                pair[0].bind_mw.bind_info.mr = l.mr;
                pair[0].bind_mw.bind_info.addr = reinterpret_cast<uint64_t>(l.memory);
                pair[0].bind_mw.bind_info.length = region_bytes;
                pair[0].bind_mw.bind_info.mw_access_flags =
                    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
                pair[0].next = &pair[1];
                pair[1].opcode = IBV_WR_LOCAL_INV;
                pair[1].invalidate_rkey = f.bound ? f.rkey : next;
                ibv_send_wr* first = f.bound ? &pair[1] : &pair[0];
                ibv_send_wr* bad = nullptr;
                const int e = ibv_post_send(f.qp, first, &bad);
                if (e == 0) {
                    posted += f.bound ? 1 : 2;
                    f.rkey = f.bound ? f.rkey : next;
                    f.bound = false;
                    continue;
                }
                if (e != ENOMEM) {
                    fail("ibv_post_send", e);
                }
                if (bad == &pair[1] && first == &pair[0]) {
                    f.rkey = next;  // only the bind went in: invalidate it first next time
                    f.bound = true;
                    ++posted;
                }
                break;
            }
        }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("posted %llu wqes in %.1f s\n", static_cast<unsigned long long>(posted), seconds);
    return 0;
}
