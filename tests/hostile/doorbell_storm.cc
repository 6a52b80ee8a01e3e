// doorbell_storm: a noisy neighbour that abuses the pages jakirod shares with its tenant. It opens
// its own vNIC's device (under jakiro-run, unmodified libibverbs), makes --qps RC QPs connected
// in pairs to each other (the intra-host path: no packet leaves), and then writes the pages the
// shim mapped for it directly, as any program may write its own memory. It finds them in
// /proc/self/maps by their memfd names ("jakiro-doorbell", "jakiro-cq"); their layout is
// verbs_abi/rings.hh.
//
//   doorbell_storm --mode bits [--qps N] [--seconds S]
//       sets every QP bit of its vNIC's doorbell page and its `posted` word in a tight loop,
//       futex-waking the worker whenever the page says it sleeps: every QP it holds asks for a
//       visit all the time, and none ever has anything to do.
//   doorbell_storm --mode napping [--qps N] [--seconds S]
//       gives every QP a CQ of its own, keeps a signaled 64-byte RDMA WRITE going on each and
//       sets the CQ's `poller_napping` before each poll, so that every completion costs jakirod
//       a futex wake, although it never naps.
//
// Prints "storming N qps (MODE)" once set up, and at the end "rang R times, completed C wrs in
// S s", also when SIGINT or SIGTERM cut it short, and exits 0; 1 with the failing step and
// errno if the set-up fails.

#include <infiniband/verbs.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/hostile/rc_loopback.hh"
#include "verbs_abi/rings.hh"

namespace {

namespace hostile = jakiro::hostile;
namespace proto = jakiro::verbs_proto;
using hostile::fail;

constexpr std::size_t region_bytes = 64 * 1024;
constexpr uint32_t write_bytes = 64;
volatile std::sig_atomic_t stopping = 0;

struct options {
    std::string mode;
    unsigned qps = 256;
    unsigned seconds = 10;
};

[[noreturn]] void usage() {
    std::fprintf(stderr, "usage: doorbell_storm --mode bits|napping [--qps N] [--seconds S]\n");
    std::exit(2);
}

options parse(int argc, char** argv) {
    options o;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string arg = argv[i];
        const char* value = argv[i + 1];
        if (arg == "--mode") {
            o.mode = value;
        } else if (arg == "--qps") {
            o.qps = static_cast<unsigned>(std::strtoul(value, nullptr, 10));
        } else if (arg == "--seconds") {
            o.seconds = static_cast<unsigned>(std::strtoul(value, nullptr, 10));
        } else {
            usage();
        }
    }
    if ((o.mode != "bits" && o.mode != "napping") || o.qps < 2 || o.qps % 2 != 0 || argc % 2 == 0) {
        usage();
    }
    return o;
}

// The start of every mapping of a memfd named `name`, one per file (the shim maps the
// doorbell page once per QP).
std::vector<void*> mappings_of(const std::string& name) {
    std::ifstream maps("/proc/self/maps");
    std::vector<void*> out;
    std::set<std::string> files;
    for (std::string line; std::getline(maps, line);) {
        const std::string tag = "/memfd:" + name;
        const std::size_t at = line.find(tag);
        const std::size_t after = at + tag.size();
        if (at == std::string::npos || (after < line.size() && line[after] != ' ')) {
            continue;  // another file, or a name that only starts with this one
        }
        std::istringstream fields(line);
        std::string range, perms, offset, dev, inode;
        fields >> range >> perms >> offset >> dev >> inode;
        if (offset != "00000000" || !files.insert(dev + ":" + inode).second) {
            continue;
        }
        out.push_back(reinterpret_cast<void*>(std::stoull(range, nullptr, 16)));
    }
    return out;
}

// Every QP bit of every page, `posted`, and a futex wake when the worker sleeps: what the shim
// does for one QP (proto::ring_doorbell), for all of them at once.
uint64_t ring_everything(const std::vector<proto::doorbell_page*>& pages) {
    uint64_t wakes = 0;
    for (proto::doorbell_page* page : pages) {
        for (uint64_t& word : page->posted_qps) {
            proto::shared_word(word).store(~uint64_t{0}, std::memory_order_relaxed);
        }
        proto::shared_index(page->posted).store(1, std::memory_order_seq_cst);
        if (proto::shared_index(page->worker_sleeping).load(std::memory_order_relaxed) != 0) {
            proto::wake_doorbell(*page);
            ++wakes;
        }
    }
    return wakes;
}

}  // namespace

[[noreturn]] void jakiro::hostile::fail(const char* step, int error) {
    std::fprintf(stderr, "doorbell_storm: %s: %s\n", step, std::strerror(error));
    std::exit(1);
}

int main(int argc, char** argv) {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    const options o = parse(argc, argv);
    const hostile::rc_loopback l =
        hostile::open_loopback("", region_bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    // Each QP's CQ, and the ring header it maps: the jakiro-cq memfd that appeared with it.
    std::vector<ibv_qp*> qps(o.qps);
    std::vector<ibv_cq*> cqs(o.qps);
    std::vector<proto::cq_ring_header*> headers(o.qps);
    std::set<void*> seen;
    for (unsigned i = 0; i < o.qps; ++i) {
        cqs[i] = ibv_create_cq(l.ctx, 4, nullptr, nullptr, 0);
        if (cqs[i] == nullptr) {
            fail("ibv_create_cq", errno);
        }
        for (void* p : mappings_of("jakiro-cq")) {
            auto* h = static_cast<proto::cq_ring_header*>(p);
            if (seen.insert(p).second && h->magic == proto::cq_ring_magic) {
                headers[i] = h;
            }
        }
        if (headers[i] == nullptr) {
            fail("finding a CQ's ring in /proc/self/maps", ENOENT);
        }
        qps[i] = hostile::create_rc_qp(l, cqs[i], 2);
    }
    for (std::size_t i = 0; i < qps.size(); i += 2) {
        hostile::connect_pair(l, qps[i], qps[i + 1], IBV_ACCESS_REMOTE_WRITE);
    }
    std::vector<proto::doorbell_page*> pages;
    for (void* p : mappings_of("jakiro-doorbell")) {
        pages.push_back(static_cast<proto::doorbell_page*>(p));
    }
    if (pages.empty()) {
        fail("finding the doorbell page in /proc/self/maps", ENOENT);
    }
    std::signal(SIGINT, [](int) { stopping = 1; });
    std::signal(SIGTERM, [](int) { stopping = 1; });
    std::printf("storming %u qps (%s): %zu doorbell pages\n", o.qps, o.mode.c_str(), pages.size());

    uint64_t rang = 0;
    uint64_t completed = 0;
    std::vector<bool> busy(qps.size(), false);
    const auto start = std::chrono::steady_clock::now();
    const auto end = start + std::chrono::seconds(o.seconds);
    while (stopping == 0 && std::chrono::steady_clock::now() < end) {
        if (o.mode == "bits") {
            for (int i = 0; i < 1024; ++i) {
                rang += ring_everything(pages) + 1;
            }
            continue;
        }
        for (std::size_t i = 0; i < qps.size(); ++i) {
            if (!busy[i]) {
                ibv_sge sge{reinterpret_cast<uint64_t>(l.memory), write_bytes, l.mr->lkey};
                ibv_send_wr wr{};
                wr.sg_list = &sge;
                wr.num_sge = 1;
                wr.opcode = IBV_WR_RDMA_WRITE;
                wr.send_flags = IBV_SEND_SIGNALED;
                wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(l.memory) + region_bytes / 2;
                wr.wr.rdma.rkey = l.mr->rkey;
                ibv_send_wr* bad = nullptr;
                if (int e = ibv_post_send(qps[i], &wr, &bad); e != 0) {
                    fail("ibv_post_send", e);
                }
                busy[i] = true;
            }
            // "Wake me at the next completion", said before every poll, and never slept on.
            proto::shared_index(headers[i]->poller_napping).store(1, std::memory_order_seq_cst);
            ibv_wc wc{};
            const int n = ibv_poll_cq(cqs[i], 1, &wc);
            if (n < 0) {
                fail("ibv_poll_cq", EIO);
            }
            if (n == 1) {
                if (wc.status != IBV_WC_SUCCESS) {
                    std::fprintf(stderr, "doorbell_storm: completion status %d\n", wc.status);
                    return 1;
                }
                busy[i] = false;
                ++completed;
            }
        }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("rang %llu times, completed %llu wrs in %.1f s\n",
                static_cast<unsigned long long>(rang), static_cast<unsigned long long>(completed),
                seconds);
    return 0;
}
