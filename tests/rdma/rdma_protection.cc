// rdma_protection: the responder refuses RDMA WRITEs it must refuse, and nothing lands.
//
//   rdma_protection --server [--port P]
//   rdma_protection --connect IP [--port P]
//
// The server registers region A (remote read + write), region B (remote read only) and a
// scratch region C (remote write), fills A and B with known bytes and C with zeros, and sends
// their addresses and rkeys. For each case the two sides build a fresh RC QP pair; the client
// first WRITEs 16 bytes into its own slice of C (a control: the connection works), then posts
// the bad WRITE and two more WRITEs into C, and after the error one more:
//   bad_rkey   16 bytes into A with an rkey that names no region
//   past_end   4096 bytes (several packets) starting 2048 bytes before the end of A
//   read_only  16 bytes into B
// The bad WRITE must complete IBV_WC_REM_ACCESS_ERR, every later one IBV_WC_WR_FLUSH_ERR, and
// the server's A, B and C must hold exactly what they held (plus the control writes).
// Exit 0 only if all of it is so.

#include <arpa/inet.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
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

constexpr const char* program = "rdma_protection";
constexpr uint16_t default_port = 7472;
constexpr std::size_t region_size = 64 * 1024;
constexpr std::size_t scratch_size = 4096;
constexpr uint8_t fill_a = 0xa5;
constexpr uint8_t fill_b = 0x5a;
constexpr uint64_t slice = 64;        // bytes of C per case
constexpr uint64_t control_len = 16;  // the control write, at the start of the slice
constexpr uint64_t follow_at = 32;    // later WRs aim at slice + 32 .. + 64: must stay zero
constexpr uint64_t follow_len = 16;
// A completion that has not arrived after this long will not: the QP's retry timer
// (≈67 ms × 8 tries) is far shorter.
constexpr auto completion_wait = std::chrono::seconds(10);

struct remote_region {
    uint64_t addr = 0;
    uint32_t rkey = 0;
    uint64_t size = 0;
};

struct bad_case {
    const char* name;
    const char* what;
};

constexpr bad_case cases[] = {
    {"bad_rkey", "WRITE 16 B into region A with an rkey that names no region"},
    {"past_end", "WRITE 4096 B starting 2048 B before the end of region A"},
    {"read_only", "WRITE 16 B into region B, registered with remote read only"},
};
constexpr std::size_t case_count = sizeof(cases) / sizeof(cases[0]);

struct params : side_params {
    params() : side_params(default_port) {}
};

[[noreturn]] void usage(int status) {
    std::fprintf(status == 0 ? stdout : stderr,
                 "usage: %s --server [--port P] | --connect IP [--port P]\n"
                 "          [--device NAME] [--ib-port N] [--gid-index N] [--timeout SECONDS]\n"
                 "defaults: port %u, GID index 0, timeout %d s\n",
                 program, default_port, side_params::default_timeout_s);
    std::exit(status);
}

params parse(int argc, char** argv) {
    params p;
    parse_side_options(argc, argv, program, p, {}, usage);
    return p;
}

link_options small_link(const link_options& base) {
    link_options lo = base;
    lo.send_depth = 8;
    lo.recv_depth = 1;
    lo.send_sge = 1;
    lo.recv_sge = 1;
    return lo;
}

// "" if [0, size) of `data` is all `byte`, else where it is not.
std::string all_bytes(const uint8_t* data, std::size_t size, uint8_t byte, const char* name) {
    for (std::size_t i = 0; i < size; ++i) {
        if (data[i] != byte) {
            std::size_t last = i;
            std::size_t count = 0;
            for (std::size_t j = i; j < size; ++j) {
                if (data[j] != byte) {
                    last = j;
                    ++count;
                }
            }
            char text[160];
            std::snprintf(text, sizeof(text),
                          "region %s: %zu bytes changed between offsets %zu and %zu "
                          "(offset %zu is 0x%02x, want 0x%02x)",
                          name, count, i, last, i, data[i], byte);
            return text;
        }
    }
    return "";
}

// ---------------------------------------------------------------- server

int run_server(params& p) {
    device dev(p.link);
    region a(region_size,
             IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
    region b(region_size, IBV_ACCESS_REMOTE_READ);
    region c(scratch_size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    std::memset(a.data(), fill_a, a.size());
    std::memset(b.data(), fill_b, b.size());
    std::memset(c.data(), 0, c.size());
    a.register_with(dev);
    b.register_with(dev);
    c.register_with(dev);

    tcp_line tcp = tcp_line::accept_one(p.port);
    std::fprintf(stderr, "%s: server: %s, GID 0 maps %s, client %s\n", program, dev.name.c_str(),
                 device::mapped_ipv4(dev.gid).c_str(), tcp.peer_ip().c_str());
    for (const region* r : {&a, &b, &c}) {
        tcp.send("REGION " + std::to_string(r->addr()) + " " + std::to_string(r->rkey()) + " " +
                 std::to_string(r->size()));
    }

    // What C must hold: the control writes of the cases run so far.
    std::vector<uint8_t> c_expected(scratch_size, 0);
    auto memory_report = [&]() {
        std::string bad = all_bytes(a.data(), a.size(), fill_a, "A");
        const std::string bad_b = all_bytes(b.data(), b.size(), fill_b, "B");
        bad += (bad.empty() || bad_b.empty() ? "" : "; ") + bad_b;
        for (std::size_t i = 0; i < scratch_size; ++i) {
            if (c.data()[i] != c_expected[i]) {
                bad += std::string(bad.empty() ? "" : "; ") + "region C: byte " +
                       std::to_string(i) + " (case " + std::to_string(i / slice) +
                       (i % slice < control_len ? ", control write" : ", a flushed WR's target") +
                       ") is wrong";
                break;
            }
        }
        return bad;
    };

    for (;;) {
        set_phase("waiting for the client's next case");
        const std::string line = tcp.receive();
        const auto w = split_words(line);
        if (!w.empty() && w[0] == "END") {
            break;
        }
        if (w.size() != 4 || w[0] != "CASE") {
            throw test_error("expected CASE or END, got \"" + line + "\"");
        }
        const uint64_t i = parse_u64(w[1]);
        const uint64_t seed = parse_u64(w[3]);
        if (i >= scratch_size / slice) {
            throw test_error("case number out of range");
        }
        fill_pattern(std::span(c_expected.data() + i * slice, control_len), seed, 0);

        rc_link link(dev, small_link(p.link), static_cast<uint32_t>(std::random_device{}()));
        tcp.send(link.local_info().to_line());
        link.connect(qp_info::from_words(tcp.expect("QP")));
        tcp.send("READY " + w[1]);
        set_phase("waiting for the client to run a case");
        tcp.expect("DONE");
        std::string state = link.state_text();
        std::replace(state.begin(), state.end(), ' ', '_');  // one word on the CLOSED line
        const std::string memory = memory_report();
        std::printf("%s: server: case %s: QP %#x ends in %s; memory %s\n", program, w[2].c_str(),
                    link.qp->qp_num, state.c_str(), memory.empty() ? "untouched" : memory.c_str());
        tcp.send("CLOSED " + w[1] + " " + state + " " + (memory.empty() ? "untouched" : "CHANGED"));
    }
    const std::string memory = memory_report();
    tcp.send(memory.empty() ? "MEMORY untouched" : "MEMORY CHANGED " + memory);
    std::printf("%s: server: memory %s\n", program, memory.empty() ? "untouched" : memory.c_str());
    return memory.empty() ? 0 : 1;
}

// ---------------------------------------------------------------- client

// Posts one signaled WRITE of `length` bytes from `src` to (addr, rkey).
int post_write(rc_link& link, const region& src, uint64_t length, uint64_t addr, uint32_t rkey,
               uint64_t wr_id) {
    ibv_sge sge{src.addr(), static_cast<uint32_t>(length), src.lkey()};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = addr;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(link.qp, &wr, &bad);
}

std::string status_text(const ibv_wc& wc) {
    return std::string(ibv_wc_status_str(wc.status)) + " (" + std::to_string(wc.status) + ")";
}

int run_client(params& p) {
    device dev(p.link);
    region src(region_size, IBV_ACCESS_LOCAL_WRITE);
    std::memset(src.data(), 0x77, src.size());
    src.register_with(dev);

    tcp_line tcp = tcp_line::connect_to(p.connect_ip, p.port);
    set_phase("receiving the server's regions");
    remote_region regions[3];
    for (auto& r : regions) {
        const auto w = tcp.expect("REGION");
        if (w.size() != 4) {
            throw test_error("malformed REGION line");
        }
        r = {parse_u64(w[1]), static_cast<uint32_t>(parse_u64(w[2])), parse_u64(w[3])};
    }
    const remote_region& a = regions[0];
    const remote_region& b = regions[1];
    const remote_region& c = regions[2];
    // A key no region has: A's with another tag (the low byte on Jakiro, and on most
    // providers some bits of the key are a tag), stepped until it collides with none.
    uint32_t bad_rkey = a.rkey ^ 0x80;
    while (bad_rkey == a.rkey || bad_rkey == b.rkey || bad_rkey == c.rkey) {
        bad_rkey += 0x101;
    }

    std::mt19937_64 rng(std::random_device{}());
    int as_expected = 0;
    for (std::size_t i = 0; i < case_count; ++i) {
        const bad_case& k = cases[i];
        const uint64_t seed = rng();
        set_phase("setting up a fresh QP for a case");
        tcp.send("CASE " + std::to_string(i) + " " + k.name + " " + std::to_string(seed));
        rc_link link(dev, small_link(p.link), static_cast<uint32_t>(rng()));
        tcp.send(link.local_info().to_line());
        link.connect(qp_info::from_words(tcp.expect("QP")));
        tcp.expect("READY");
        std::vector<std::string> problems;

        set_phase("running a case");
        // The control write: 16 pattern bytes into this case's slice of C.
        fill_pattern(std::span(src.data(), control_len), seed, 0);
        const uint64_t slice_addr = c.addr + i * slice;
        if (post_write(link, src, control_len, slice_addr, c.rkey, 1) != 0) {
            throw test_error(errno_text("ibv_post_send (control write)"));
        }
        auto until = std::chrono::steady_clock::now() + completion_wait;
        auto wcs = link.poll(link.send_cq, 1, until);
        if (wcs.size() != 1 || wcs[0].status != IBV_WC_SUCCESS) {
            problems.push_back("the control write into region C did not succeed (" +
                               (wcs.empty() ? std::string("no completion") : describe(wcs[0])) +
                               "): the connection itself is broken");
        } else {
            std::fill(src.data(), src.data() + src.size(), 0x77);
            uint64_t addr = a.addr, length = 16;
            uint32_t rkey = a.rkey;
            if (std::strcmp(k.name, "bad_rkey") == 0) {
                rkey = bad_rkey;
            } else if (std::strcmp(k.name, "past_end") == 0) {
                addr = a.addr + a.size - 2048;
                length = 4096;
            } else {
                addr = b.addr;
                rkey = b.rkey;
            }
            // The bad WRITE, then two WRITEs into C that must never land.
            int rc = post_write(link, src, length, addr, rkey, 2);
            rc =
                rc != 0 ? rc : post_write(link, src, follow_len, slice_addr + follow_at, c.rkey, 3);
            rc = rc != 0 ? rc
                         : post_write(link, src, follow_len, slice_addr + follow_at + follow_len,
                                      c.rkey, 4);
            if (rc != 0) {
                errno = rc;
                throw test_error(errno_text("ibv_post_send"));
            }
            until = std::chrono::steady_clock::now() + completion_wait;
            wcs = link.poll(link.send_cq, 3, until);
            // Posted once the error is known: the QP is in ERR, so it is flushed.
            if (wcs.size() == 3) {
                rc = post_write(link, src, follow_len, slice_addr + follow_at, c.rkey, 5);
                if (rc != 0) {
                    errno = rc;
                    problems.push_back(errno_text(
                        "ibv_post_send on the QP in the error state (must be accepted and "
                        "flushed)"));
                } else {
                    const auto more = link.poll(link.send_cq, 1,
                                                std::chrono::steady_clock::now() + completion_wait);
                    wcs.insert(wcs.end(), more.begin(), more.end());
                }
            }
            std::string seen;
            for (const ibv_wc& wc : wcs) {
                seen += (seen.empty() ? "" : ", ") + std::string("wr ") + std::to_string(wc.wr_id) +
                        " " + status_text(wc);
            }
            std::printf("%s: case %s: %s -> %s\n", program, k.name, k.what,
                        seen.empty() ? "no completions" : seen.c_str());
            const std::size_t want = rc == 0 ? 4 : 3;
            if (wcs.size() < 3) {
                problems.push_back("only " + std::to_string(wcs.size()) +
                                   " of 3 completions within 10 s");
            }
            for (std::size_t j = 0; j < wcs.size(); ++j) {
                const ibv_wc& wc = wcs[j];
                const uint64_t want_id = j + 2;
                const auto want_status = j == 0 ? IBV_WC_REM_ACCESS_ERR : IBV_WC_WR_FLUSH_ERR;
                if (wc.wr_id != want_id || wc.status != want_status) {
                    problems.push_back("completion " + std::to_string(j + 1) + ": " + describe(wc) +
                                       "; want wr_id " + std::to_string(want_id) + " status " +
                                       ibv_wc_status_str(want_status));
                }
            }
            if (wcs.size() > want) {
                problems.push_back("more completions than WRs posted");
            }
        }
        const std::string state = link.state_text();
        if (state != "ERR") {
            problems.push_back("the client's QP is in " + state + ", not ERR");
        }
        tcp.send("DONE " + std::to_string(i));
        const auto closed = tcp.expect("CLOSED");
        if (closed.size() != 4) {
            throw test_error("malformed CLOSED line");
        }
        if (closed[3] != "untouched") {
            problems.push_back("the server's memory changed (see the server's output)");
        }
        std::printf("%s: case %s: client QP %s, server QP %s, server memory %s: %s\n", program,
                    k.name, state.c_str(), closed[2].c_str(), closed[3].c_str(),
                    problems.empty() ? "as expected" : "NOT as expected");
        for (const auto& why : problems) {
            std::printf("%s:   %s\n", program, why.c_str());
        }
        as_expected += problems.empty() ? 1 : 0;
    }
    set_phase("finishing");
    tcp.send("END");
    const std::string memory = tcp.receive();
    const bool untouched = memory == "MEMORY untouched";
    std::printf("%s: %d of %zu cases as expected; server %s\n", program, as_expected, case_count,
                memory.c_str());
    return as_expected == static_cast<int>(case_count) && untouched ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    return run_test_program(argc, argv, program, parse, run_server, run_client);
}
