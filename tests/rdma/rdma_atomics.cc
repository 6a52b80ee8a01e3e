// rdma_atomics: RDMA atomics from several clients on one counter, each executed exactly once.
//
//   rdma_atomics --server [--port P] [--clients N] [--initial V]
//   rdma_atomics --connect IP [--port P] [--atomics N] [--seed S] [--window W]
//
// The server registers an 8-byte counter (with remote atomic access) and connects one RC QP
// per client; when all are connected it tells them to start, so their atomics race. Each
// client keeps up to W atomics in flight: FETCH_AND_ADD of random amounts (9 in 10) and
// CMP_AND_SWAP from the value it last saw to that value plus an amount (1 in 10; it swaps
// only when no other atomic came between). Each client checks its completions and that every
// value it fetched is distinct, then sends them all to the server. The server checks that
// the successful atomics of all clients form one chain from the initial value to the final
// one, each fetching exactly what the one before left (an atomic executed twice, or not at
// all, or torn, breaks the chain), that every failed CMP_AND_SWAP fetched a value the counter
// held, and that the bytes around the counter stayed untouched; it prints the final value
// and tells each client, which checks final = initial + the sum of all additions.
// Exit 0 only if everything verified.

#include <arpa/inet.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/rdma/deadline.hh"
#include "tests/rdma/options.hh"
#include "tests/rdma/pattern.hh"
#include "tests/rdma/program.hh"
#include "tests/rdma/rc_link.hh"
#include "tests/rdma/tcp_line.hh"

using namespace jakiro::rdma_test;

namespace {

constexpr const char* program = "rdma_atomics";
constexpr uint16_t default_port = 7475;
constexpr uint64_t default_atomics = 2000;
constexpr uint32_t default_window = 16;
constexpr uint32_t default_clients = 2;
constexpr uint64_t default_initial = 0x100000000ULL;  // above 32 bits: a torn add shows
constexpr uint64_t max_add = 1 << 16;
constexpr std::size_t counter_page = 4096;  // the counter, then bytes that must not change
constexpr std::size_t values_per_line = 100;
constexpr int max_reported = 20;
constexpr uint64_t poison = 0xdeadbeefdeadbeefULL;  // result slots before the atomic lands

enum : int { fetch_add = 0, swapped = 1, not_swapped = 2 };

struct params : side_params {
    params() : side_params(default_port) {}

    uint64_t atomics = default_atomics;
    uint64_t seed = 1;
    uint32_t window = default_window;
    uint32_t clients = default_clients;
    uint64_t initial = default_initial;
};

[[noreturn]] void usage(int status) {
    std::fprintf(status == 0 ? stdout : stderr,
                 "usage: %s --server [--port P] [--clients N] [--initial V]\n"
                 "       %s --connect IP [--port P] [--atomics N] [--seed S] [--window W]\n"
                 "common: [--device NAME] [--ib-port N] [--gid-index N] [--timeout SECONDS]\n"
                 "defaults: port %u, %u clients, %llu atomics per client, window %u, "
                 "timeout %d s\n",
                 program, program, default_port, default_clients,
                 static_cast<unsigned long long>(default_atomics), default_window,
                 side_params::default_timeout_s);
    std::exit(status);
}

params parse(int argc, char** argv) {
    params p;
    parse_side_options(
        argc, argv, program, p,
        {
            {"atomics", true, [&p](const std::string& v) { p.atomics = parse_u64(v); }},
            {"seed", true, [&p](const std::string& v) { p.seed = parse_u64(v); }},
            {"window", true,
             [&p](const std::string& v) { p.window = static_cast<uint32_t>(parse_u64(v)); }},
            {"clients", true,
             [&p](const std::string& v) { p.clients = static_cast<uint32_t>(parse_u64(v)); }},
            {"initial", true, [&p](const std::string& v) { p.initial = parse_u64(v); }},
        },
        usage);
    if (p.atomics == 0 || p.atomics > 1000000 || p.window == 0 || p.window > 256 ||
        p.clients == 0 || p.clients > 16) {
        usage(2);
    }
    return p;
}

struct tally {
    uint64_t failures = 0;
    int reported = 0;
    void fail(const std::string& what) {
        ++failures;
        if (reported++ < max_reported) {
            std::fprintf(stderr, "%s: FAIL %s\n", program, what.c_str());
        } else if (reported == max_reported + 1) {
            std::fprintf(stderr, "%s: (more failures not shown)\n", program);
        }
    }
};

// One atomic as it completed: what it fetched, what it added (when it changed the counter).
struct outcome {
    uint64_t fetched = 0;
    uint64_t add = 0;
    int kind = fetch_add;
};

constexpr int access_all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;

// ---------------------------------------------------------------- server

struct client_conn {
    tcp_line tcp;
    std::unique_ptr<rc_link> link;
    std::string ip;
};

int run_server(params& p) {
    device dev(p.link);
    if (dev.attr.atomic_cap == IBV_ATOMIC_NONE) {
        throw test_error(dev.name + " reports atomic_cap IBV_ATOMIC_NONE");
    }
    region counter(counter_page, access_all);
    fill_pattern(std::span(counter.data(), counter_page), mix64(p.initial), 0);
    std::memcpy(counter.data(), &p.initial, 8);
    std::vector<uint8_t> shadow(counter.data(), counter.data() + counter_page);
    counter.register_with(dev);
    link_options lo = p.link;
    lo.access = access_all;
    lo.send_depth = 4;
    lo.recv_depth = 1;
    lo.send_sge = 1;
    std::vector<client_conn> clients;
    // One listening socket for all: a client queued behind another is never refused.
    std::vector<tcp_line> accepted = tcp_line::accept_many(p.port, p.clients);
    for (uint32_t c = 0; c < p.clients; ++c) {
        tcp_line tcp = std::move(accepted[c]);
        set_phase("connecting a client's QP");
        auto link = std::make_unique<rc_link>(dev, lo, static_cast<uint32_t>(mix64(c + 1)));
        tcp.send(link->local_info().to_line());
        char line[96];
        std::snprintf(line, sizeof(line), "COUNTER %llu %u %llu",
                      static_cast<unsigned long long>(counter.addr()), counter.rkey(),
                      static_cast<unsigned long long>(p.initial));
        tcp.send(line);
        link->connect(qp_info::from_words(tcp.expect("QP")));
        const std::string ip = tcp.peer_ip();
        std::fprintf(stderr, "%s: server: client %u from %s on QP %#x\n", program, c + 1,
                     ip.c_str(), link->qp->qp_num);
        clients.push_back({std::move(tcp), std::move(link), ip});
    }
    for (auto& c : clients) {
        c.tcp.send("GO");
    }
    const auto t0 = std::chrono::steady_clock::now();
    tally t;
    std::vector<outcome> all;
    for (auto& c : clients) {
        set_phase("waiting for a client's atomics");
        const auto done = c.tcp.expect("DONE");
        if (done.size() != 3) {
            throw test_error("malformed DONE line");
        }
        const uint64_t n = parse_u64(done[1]);
        if (parse_u64(done[2]) != 0) {
            t.fail("client " + c.ip + " reports " + done[2] + " failures");
        }
        uint64_t got = 0;
        while (got < n) {
            const auto w = c.tcp.expect("V");
            if (w.size() < 4 || (w.size() - 1) % 3 != 0) {
                throw test_error("malformed V line");
            }
            for (std::size_t i = 1; i + 2 < w.size(); i += 3) {
                all.push_back(
                    {parse_u64(w[i]), parse_u64(w[i + 1]), static_cast<int>(parse_u64(w[i + 2]))});
                ++got;
            }
        }
        if (got != n) {
            t.fail("client " + c.ip + " sent " + std::to_string(got) + " values, announced " +
                   std::to_string(n));
        }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    set_phase("checking the chain of atomics");
    // Every atomic that reported completion has been executed; the counter is final now.
    const uint64_t final_value =
        std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(counter.data())).load();
    std::vector<outcome> chain;
    std::vector<uint64_t> failed_cas;
    uint64_t total_added = 0;
    for (const outcome& o : all) {
        if (o.kind == not_swapped) {
            failed_cas.push_back(o.fetched);
        } else {
            chain.push_back(o);
            total_added += o.add;
        }
    }
    std::sort(chain.begin(), chain.end(),
              [](const outcome& a, const outcome& b) { return a.fetched < b.fetched; });
    uint64_t expect = p.initial;
    std::set<uint64_t> held{p.initial};
    for (const outcome& o : chain) {
        if (o.fetched != expect) {
            t.fail("the chain of atomics breaks: after the counter held " + std::to_string(expect) +
                   " the next atomic fetched " + std::to_string(o.fetched) +
                   (o.fetched > expect ? " (an atomic executed that no client saw complete, "
                                         "e.g. one executed twice)"
                                       : " (two atomics fetched the same value)"));
            break;
        }
        expect = o.fetched + o.add;
        held.insert(expect);
    }
    if (final_value != p.initial + total_added) {
        t.fail("final counter " + std::to_string(final_value) + " != initial " +
               std::to_string(p.initial) + " + sum of completed additions " +
               std::to_string(total_added));
    }
    for (uint64_t v : failed_cas) {
        if (held.count(v) == 0) {
            t.fail("a failed CMP_AND_SWAP fetched " + std::to_string(v) +
                   ", a value the counter never held");
            break;
        }
    }
    std::memcpy(shadow.data(), &final_value, 8);
    if (std::memcmp(shadow.data(), counter.data(), counter_page) != 0) {
        t.fail("bytes around the counter changed");
    }
    char line[160];
    std::snprintf(
        line, sizeof(line), "FINAL %llu %llu %llu %llu",
        static_cast<unsigned long long>(final_value), static_cast<unsigned long long>(p.initial),
        static_cast<unsigned long long>(total_added), static_cast<unsigned long long>(t.failures));
    for (auto& c : clients) {
        c.tcp.send(line);
    }
    std::printf(
        "%s: server: final counter %llu = initial %llu + %llu added by %zu atomics "
        "from %zu clients (%zu CMP_AND_SWAP that did not swap), chain %s, %llu "
        "failures, %.2f s, %.3f Mops/s\n",
        program, static_cast<unsigned long long>(final_value),
        static_cast<unsigned long long>(p.initial),
        static_cast<unsigned long long>(final_value - p.initial), chain.size(), clients.size(),
        failed_cas.size(), t.failures == 0 ? "whole" : "BROKEN",
        static_cast<unsigned long long>(t.failures), s,
        s > 0 ? static_cast<double>(all.size()) / s / 1e6 : 0.0);
    return t.failures == 0 ? 0 : 1;
}

// ---------------------------------------------------------------- client

int run_client(params& p) {
    device dev(p.link);
    if (dev.attr.atomic_cap == IBV_ATOMIC_NONE) {
        throw test_error(dev.name + " reports atomic_cap IBV_ATOMIC_NONE");
    }
    region results(std::max<std::size_t>(4096, p.atomics * 8), IBV_ACCESS_LOCAL_WRITE);
    auto* slot = reinterpret_cast<uint64_t*>(results.data());
    std::fill(slot, slot + p.atomics, poison);
    results.register_with(dev);
    link_options lo = p.link;
    lo.access = access_all;
    lo.send_depth = p.window;
    lo.recv_depth = 1;
    lo.send_sge = 1;
    rc_link link(dev, lo, static_cast<uint32_t>(mix64(p.seed)));
    tcp_line tcp = tcp_line::connect_to(p.connect_ip, p.port);
    set_phase("exchanging QP details");
    const qp_info server = qp_info::from_words(tcp.expect("QP"));
    const auto cw = tcp.expect("COUNTER");
    if (cw.size() != 4) {
        throw test_error("malformed COUNTER line");
    }
    const uint64_t counter_addr = parse_u64(cw[1]);
    const auto rkey = static_cast<uint32_t>(parse_u64(cw[2]));
    const uint64_t initial = parse_u64(cw[3]);
    tcp.send(link.local_info().to_line());
    link.connect(server);
    set_phase("waiting for the other clients (GO)");
    tcp.expect("GO");
    std::fprintf(stderr, "%s: client: %s QP %#x -> counter at %s, %llu atomics, window %u\n",
                 program, dev.name.c_str(), link.qp->qp_num,
                 device::mapped_ipv4(server.gid).c_str(),
                 static_cast<unsigned long long>(p.atomics), p.window);

    std::mt19937_64 rng(p.seed);
    std::vector<outcome> done(p.atomics);
    std::vector<bool> is_cas(p.atomics, false);
    std::vector<uint64_t> compare(p.atomics, 0);
    tally t;
    uint64_t posted = 0, completed = 0, seen = initial;
    const auto t0 = std::chrono::steady_clock::now();
    set_phase("running atomics");
    while (completed < p.atomics) {
        while (posted < p.atomics && posted - completed < p.window) {
            const uint64_t i = posted++;
            const uint64_t add = std::uniform_int_distribution<uint64_t>(1, max_add)(rng);
            is_cas[i] = std::uniform_int_distribution<int>(0, 9)(rng) == 0;
            compare[i] = seen;
            done[i].add = add;
            ibv_sge sge{results.addr() + i * 8, 8, results.lkey()};
            ibv_send_wr wr{};
            wr.wr_id = i;
            wr.sg_list = &sge;
            wr.num_sge = 1;
            wr.send_flags = IBV_SEND_SIGNALED;
            wr.opcode = is_cas[i] ? IBV_WR_ATOMIC_CMP_AND_SWP : IBV_WR_ATOMIC_FETCH_AND_ADD;
            wr.wr.atomic.remote_addr = counter_addr;
            wr.wr.atomic.rkey = rkey;
            wr.wr.atomic.compare_add = is_cas[i] ? seen : add;
            wr.wr.atomic.swap = is_cas[i] ? seen + add : 0;
            ibv_send_wr* bad = nullptr;
            const int rc = ibv_post_send(link.qp, &wr, &bad);
            if (rc != 0) {
                errno = rc;
                throw test_error(errno_text("ibv_post_send (atomic " + std::to_string(i) + ")"));
            }
        }
        const auto wcs = link.poll(link.send_cq, 1, deadline() - std::chrono::milliseconds(500));
        if (wcs.empty()) {
            throw test_error("no atomic completed in time (" + std::to_string(completed) + " of " +
                             std::to_string(p.atomics) + " did)");
        }
        for (const ibv_wc& wc : wcs) {
            const uint64_t i = wc.wr_id;
            if (i != completed) {
                t.fail("completion out of order: " + describe(wc) + ", want wr_id " +
                       std::to_string(completed));
            }
            const int want_opcode = is_cas[i] ? IBV_WC_COMP_SWAP : IBV_WC_FETCH_ADD;
            if (wc.status != IBV_WC_SUCCESS || wc.opcode != want_opcode || i >= p.atomics) {
                t.fail("atomic " + std::to_string(i) + ": " + describe(wc));
                throw test_error("an atomic failed; stopping");
            }
            ++completed;
            outcome& o = done[i];
            o.fetched = slot[i];
            if (o.fetched == poison) {
                t.fail("atomic " + std::to_string(i) + " completed without its result");
            }
            if (is_cas[i]) {
                o.kind = o.fetched == compare[i] ? swapped : not_swapped;
                if (o.kind == not_swapped) {
                    o.add = 0;
                }
            }
            seen = o.kind == not_swapped ? o.fetched : o.fetched + o.add;
        }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    set_phase("checking the fetched values");
    std::set<uint64_t> distinct;
    uint64_t cas = 0, cas_swapped = 0, own_sum = 0, repeated = 0;
    for (uint64_t i = 0; i < p.atomics; ++i) {
        cas += is_cas[i] ? 1 : 0;
        cas_swapped += done[i].kind == swapped ? 1 : 0;
        own_sum += done[i].add;
        if (done[i].kind != not_swapped && !distinct.insert(done[i].fetched).second) {
            ++repeated;
        }
        if (done[i].fetched < initial) {
            t.fail("atomic " + std::to_string(i) + " fetched " + std::to_string(done[i].fetched) +
                   ", below the initial value");
        }
    }
    if (repeated != 0) {
        t.fail(std::to_string(repeated) +
               " atomics that changed the counter fetched a value "
               "another one had fetched already");
    }
    set_phase("sending the fetched values to the server");
    tcp.send("DONE " + std::to_string(p.atomics) + " " + std::to_string(t.failures));
    for (uint64_t i = 0; i < p.atomics; i += values_per_line) {
        std::ostringstream line;
        line << "V";
        for (uint64_t k = i; k < std::min(p.atomics, i + values_per_line); ++k) {
            line << " " << done[k].fetched << " " << done[k].add << " " << done[k].kind;
        }
        tcp.send(line.str());
    }
    set_phase("waiting for the final counter");
    const auto f = tcp.expect("FINAL");
    if (f.size() != 5) {
        throw test_error("malformed FINAL line");
    }
    const uint64_t final_value = parse_u64(f[1]), total = parse_u64(f[3]);
    const uint64_t server_failures = parse_u64(f[4]);
    if (parse_u64(f[2]) != initial || final_value != initial + total || own_sum > total) {
        t.fail("final counter " + f[1] + " is not initial " + f[2] + " + all additions " + f[3] +
               " (this client's " + std::to_string(own_sum) + ")");
    }
    std::printf(
        "%s: client: %llu atomics (%llu FETCH_AND_ADD, %llu CMP_AND_SWAP, %llu swapped), "
        "%zu distinct fetched values, added %llu; final counter %llu = initial %llu + "
        "%llu; %llu failures (client %llu, server %llu), %.2f s, %.3f Mops/s\n",
        program, static_cast<unsigned long long>(p.atomics),
        static_cast<unsigned long long>(p.atomics - cas), static_cast<unsigned long long>(cas),
        static_cast<unsigned long long>(cas_swapped), distinct.size(),
        static_cast<unsigned long long>(own_sum), static_cast<unsigned long long>(final_value),
        static_cast<unsigned long long>(initial), static_cast<unsigned long long>(total),
        static_cast<unsigned long long>(t.failures + server_failures),
        static_cast<unsigned long long>(t.failures),
        static_cast<unsigned long long>(server_failures), s,
        s > 0 ? static_cast<double>(p.atomics) / s / 1e6 : 0.0);
    return t.failures + server_failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    return run_test_program(argc, argv, program, parse, run_server, run_client);
}
