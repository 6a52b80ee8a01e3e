// rdma_mw: RDMA WRITE and READ through a memory window, content-checked on both sides, plus a
// QP that may not use the window and a window that was invalidated.
//
//   rdma_mw --server [--port P]
//   rdma_mw --connect IP [--port P]
//
// The server registers 1 MiB with IBV_ACCESS_MW_BIND, fills it with its own pattern, and binds
// a type-2 window (remote read + write) onto 512 KiB in the middle with an IBV_WR_BIND_MW on
// its first QP. The client, over its first QP (the one the window belongs to), WRITEs its
// pattern through the window in 64 KiB pieces and READs it all back (checked), and the server
// checks its memory: the window holds the client's pattern, everything around it its own.
// Attacker: over its second QP, connected to a QP of another context (another PD) of the
// server's vNIC, so neither the window's PD nor the QP it was bound to (rxe's rule for type
// 2), the client READs with the same rkey and address: it must complete
// IBV_WC_REM_ACCESS_ERR, its buffer must stay untouched and so must the server's memory (the
// control: the same READ succeeded over the first QP). Then the server invalidates the window with
// IBV_WR_LOCAL_INV and the client's WRITE through it must be a remote access error that changes
// nothing. Exit 0 only if all of it is so.

#include <sys/mman.h>

#include <cerrno>
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

constexpr const char* program = "rdma_mw";
constexpr uint16_t default_port = 7493;
constexpr std::size_t server_size = 1 << 20;
constexpr std::size_t window_offset = 256 * 1024;
constexpr std::size_t window_size = 512 * 1024;
constexpr std::size_t piece = 64 * 1024;
constexpr uint64_t server_seed = 0x5e5e;
constexpr uint64_t client_seed = 0xc1c1;
constexpr auto completion_wait = std::chrono::seconds(20);

struct params : side_params {
    params() : side_params(default_port) {}
};

[[noreturn]] void usage(int status) {
    std::fprintf(status == 0 ? stdout : stderr,
                 "usage: %s --server [--port P] | --connect IP [--port P]\n"
                 "          [--device NAME] [--ib-port N] [--gid-index N] [--timeout SECONDS]\n",
                 program);
    std::exit(status);
}

params parse(int argc, char** argv) {
    params p;
    parse_side_options(argc, argv, program, p, {}, usage);
    p.link.access = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    return p;
}

ibv_wc one_completion(rc_link& link, const char* what) {
    const auto wcs = link.poll(link.send_cq, 1, std::chrono::steady_clock::now() + completion_wait);
    if (wcs.empty()) {
        throw test_error(std::string("no completion for ") + what);
    }
    return wcs[0];
}

// Private anonymous pages, as malloc'd memory is.
uint8_t* pages(std::size_t size) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        throw test_error(errno_text("mmap"));
    }
    return static_cast<uint8_t*>(p);
}

// "" when the server's memory is its own pattern around the window and `inside` in it.
std::string memory_report(const uint8_t* data, uint64_t inside_seed) {
    const std::span<const uint8_t> all(data, server_size);
    if (const auto at = pattern_mismatch(all.first(window_offset), server_seed, 0);
        at != window_offset) {
        return "byte " + std::to_string(at) + " before the window changed";
    }
    const std::size_t after = window_offset + window_size;
    if (const auto at = pattern_mismatch(all.subspan(after), server_seed, after);
        at != server_size - after) {
        return "byte " + std::to_string(after + at) + " after the window changed";
    }
    if (const auto at = pattern_mismatch(all.subspan(window_offset, window_size), inside_seed, 0);
        at != window_size) {
        return "window byte " + std::to_string(at) + " is not the client's";
    }
    return "";
}

int run_server(params& p) {
    device dev(p.link);
    uint8_t* data = pages(server_size);
    fill_pattern(std::span(data, server_size), server_seed, 0);
    ibv_mr* mr = ibv_reg_mr(dev.pd, data, server_size,
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND);
    if (mr == nullptr) {
        throw test_error(errno_text("ibv_reg_mr"));
    }
    tcp_line tcp = tcp_line::accept_one(p.port);
    rc_link owner(dev, p.link, static_cast<uint32_t>(std::random_device{}()));
    // The attacker's way in: a QP of another context of this vNIC (another PD, as another
    // process of the tenant would have).
    device intruder(p.link);
    rc_link other(intruder, p.link, static_cast<uint32_t>(std::random_device{}()));
    tcp.send(owner.local_info().to_line());
    owner.connect(qp_info::from_words(tcp.expect("QP")));
    tcp.send(other.local_info().to_line());
    other.connect(qp_info::from_words(tcp.expect("QP")));

    set_phase("binding the window");
    ibv_mw* mw = ibv_alloc_mw(dev.pd, IBV_MW_TYPE_2);
    if (mw == nullptr) {
        throw test_error(errno_text("ibv_alloc_mw"));
    }
    ibv_send_wr wr{};
    ibv_send_wr* bad = nullptr;
    wr.wr_id = 1;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    wr.bind_mw.bind_info.mr = mr;
    wr.bind_mw.bind_info.addr = reinterpret_cast<uint64_t>(data + window_offset);
    wr.bind_mw.bind_info.length = window_size;
    wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
    if (const int err = ibv_post_send(owner.qp, &wr, &bad); err != 0) {
        errno = err;
        throw test_error(errno_text("ibv_post_send(BIND_MW)"));
    }
    ibv_wc wc = one_completion(owner, "the bind");
    if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_BIND_MW) {
        throw test_error("the bind completed " + describe(wc));
    }
    const uint32_t rkey = wr.bind_mw.rkey;
    std::printf("%s: server: type-2 window bound: rkey %#x over [%zu, %zu) of the MR\n", program,
                rkey, window_offset, window_offset + window_size);
    tcp.send("WINDOW " + std::to_string(wr.bind_mw.bind_info.addr) + " " +
             std::to_string(window_size) + " " + std::to_string(rkey));

    bool ok = true;
    auto check = [&](const char* when) {
        const std::string bad_memory = memory_report(data, client_seed);
        std::printf("%s: server: %s: memory %s\n", program, when,
                    bad_memory.empty() ? "as it must be" : bad_memory.c_str());
        ok = ok && bad_memory.empty();
        tcp.send(std::string("CHECKED ") + (bad_memory.empty() ? "ok" : "bad"));
    };
    set_phase("waiting for the client's writes");
    tcp.expect("WRITTEN");
    check("after the WRITEs through the window");
    set_phase("waiting for the attacker");
    tcp.expect("ATTACKED");
    check("after the foreign QP's READ");

    wr = {};
    wr.wr_id = 2;
    wr.opcode = IBV_WR_LOCAL_INV;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.invalidate_rkey = rkey;
    if (const int err = ibv_post_send(owner.qp, &wr, &bad); err != 0) {
        errno = err;
        throw test_error(errno_text("ibv_post_send(LOCAL_INV)"));
    }
    wc = one_completion(owner, "the invalidation");
    if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_LOCAL_INV) {
        throw test_error("the invalidation completed " + describe(wc));
    }
    std::printf("%s: server: window invalidated (IBV_WC_LOCAL_INV)\n", program);
    tcp.send("INVALIDATED");
    set_phase("waiting for the write after the invalidation");
    tcp.expect("DONE");
    check("after the WRITE through the invalidated window");
    ibv_dealloc_mw(mw);
    ibv_dereg_mr(mr);
    std::printf("%s: server: %s\n", program, ok ? "all verified" : "FAILED");
    return ok ? 0 : 1;
}

int run_client(params& p) {
    device dev(p.link);
    region local(2 * window_size, IBV_ACCESS_LOCAL_WRITE);
    fill_pattern(std::span(local.data(), window_size), client_seed, 0);
    std::memset(local.data() + window_size, 0, window_size);
    local.register_with(dev);
    tcp_line tcp = tcp_line::connect_to(p.connect_ip, p.port);
    rc_link owner(dev, p.link, static_cast<uint32_t>(std::random_device{}()));
    rc_link other(dev, p.link, static_cast<uint32_t>(std::random_device{}()));
    owner.connect(qp_info::from_words(tcp.expect("QP")));
    tcp.send(owner.local_info().to_line());
    other.connect(qp_info::from_words(tcp.expect("QP")));
    tcp.send(other.local_info().to_line());
    const auto w = tcp.expect("WINDOW");
    if (w.size() != 4) {
        throw test_error("bad WINDOW line");
    }
    const uint64_t addr = parse_u64(w[1]);
    const auto rkey = static_cast<uint32_t>(parse_u64(w[3]));
    bool ok = true;

    auto rdma = [&](rc_link& link, ibv_wr_opcode op, std::size_t local_at, uint64_t remote,
                    uint32_t length, uint64_t id) {
        ibv_sge sge{reinterpret_cast<uint64_t>(local.data() + local_at), length, local.lkey()};
        ibv_send_wr wr{};
        ibv_send_wr* bad = nullptr;
        wr.wr_id = id;
        wr.opcode = op;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.wr.rdma.remote_addr = remote;
        wr.wr.rdma.rkey = rkey;
        if (const int err = ibv_post_send(link.qp, &wr, &bad); err != 0) {
            errno = err;
            throw test_error(errno_text("ibv_post_send"));
        }
    };
    auto all_complete = [&](rc_link& link, std::size_t n, ibv_wc_status want, const char* what) {
        const auto wcs =
            link.poll(link.send_cq, n, std::chrono::steady_clock::now() + completion_wait);
        bool good = wcs.size() == n;
        for (const ibv_wc& wc : wcs) {
            good = good && wc.status == want;
            if (wc.status != want) {
                std::printf("%s: client: %s: %s\n", program, what, describe(wc).c_str());
            }
        }
        return good;
    };

    set_phase("writing through the window");
    const std::size_t pieces = window_size / piece;
    for (std::size_t i = 0; i < pieces; ++i) {
        rdma(owner, IBV_WR_RDMA_WRITE, i * piece, addr + i * piece, piece, i);
    }
    bool good = all_complete(owner, pieces, IBV_WC_SUCCESS, "WRITE");
    set_phase("reading back through the window");
    for (std::size_t i = 0; i < pieces; ++i) {
        rdma(owner, IBV_WR_RDMA_READ, window_size + i * piece, addr + i * piece, piece, 100 + i);
    }
    good = good && all_complete(owner, pieces, IBV_WC_SUCCESS, "READ");
    const auto at =
        pattern_mismatch(std::span(local.data() + window_size, window_size), client_seed, 0);
    good = good && at == window_size;
    std::printf("%s: client: %zu WRITEs and %zu READs of %zu KiB through the window: %s\n", program,
                pieces, pieces, piece / 1024, good ? "completed, content verified" : "FAILED");
    ok = ok && good;
    tcp.send("WRITTEN");
    ok = ok && tcp.expect("CHECKED").at(1) == "ok";

    set_phase("the foreign QP");
    std::memset(local.data() + window_size, 0xee, 4096);
    rdma(other, IBV_WR_RDMA_READ, window_size, addr, 4096, 200);
    good = all_complete(other, 1, IBV_WC_REM_ACCESS_ERR, "foreign READ");
    good = good && local.data()[window_size] == 0xee &&
           std::memcmp(local.data() + window_size, local.data() + window_size + 1, 4095) == 0;
    std::printf("%s: client: attacker: a READ through the window from another PD's QP: %s\n",
                program, good ? "remote access error, no data" : "NOT refused");
    ok = ok && good;
    tcp.send("ATTACKED");
    ok = ok && tcp.expect("CHECKED").at(1) == "ok";

    tcp.expect("INVALIDATED");
    std::memset(local.data(), 0xaa, 4096);
    rdma(owner, IBV_WR_RDMA_WRITE, 0, addr, 4096, 300);
    good = all_complete(owner, 1, IBV_WC_REM_ACCESS_ERR, "WRITE after invalidation");
    std::printf("%s: client: a WRITE through the invalidated window: %s\n", program,
                good ? "remote access error" : "NOT refused");
    ok = ok && good;
    tcp.send("DONE");
    ok = ok && tcp.expect("CHECKED").at(1) == "ok";
    std::printf("%s: client: %s\n", program, ok ? "all verified" : "FAILED");
    return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    return run_test_program(argc, argv, program, parse, run_server, run_client);
}
