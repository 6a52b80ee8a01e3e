// rdma_mw_lifecycle: one memory window's whole life as a program written for mlx5 or rxe lives
// it, across two hosts: bound, written through by the peer, invalidated, refused, deallocated.
//
//   rdma_mw_lifecycle --server --bind type1|type2-post-send|type2-wr-bind [--port P]
//   rdma_mw_lifecycle --connect IP --bind ... [--port P]
//
// The server registers two pages with IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND only (the
// window, not the MR, grants the remote right), on a QP whose qp_access_flags are LOCAL_WRITE |
// REMOTE_WRITE, and binds a window onto its first page with mw_access_flags REMOTE_WRITE |
// LOCAL_WRITE, the way --bind says:
//   type1             a type-1 window, ibv_bind_mw;
//   type2-post-send   a type-2 window, an IBV_WR_BIND_MW work request to ibv_post_send;
//   type2-wr-bind     a type-2 window, ibv_wr_bind_mw between ibv_wr_start and ibv_wr_complete.
// The bind must complete IBV_WC_BIND_MW successfully. The client WRITEs its pattern through the
// window's rkey, and the server checks the window's page holds it and the page after it is
// untouched. The server then invalidates the window (a type-1 window by binding it with length
// 0, as it cannot be invalidated; a type-2 one with IBV_WR_LOCAL_INV, or ibv_wr_local_inv for
// type2-wr-bind), the client's WRITE through the old rkey must be a remote access error that
// changes nothing, and ibv_dealloc_mw must succeed. Exit 0 only if all of it is so.

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "tests/rdma/deadline.hh"
#include "tests/rdma/options.hh"
#include "tests/rdma/pattern.hh"
#include "tests/rdma/program.hh"
#include "tests/rdma/rc_link.hh"
#include "tests/rdma/tcp_line.hh"

using namespace jakiro::rdma_test;

namespace {

constexpr const char* program = "rdma_mw_lifecycle";
constexpr uint16_t default_port = 7497;
constexpr std::size_t page = 4096;
constexpr uint64_t server_seed = 0x3a3a;
constexpr uint64_t client_seed = 0xc3c3;
constexpr auto completion_wait = std::chrono::seconds(20);
// What programs written for mlx5 and rxe ask of a window and its MR.
constexpr int window_access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
constexpr int mr_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;
constexpr int qp_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

enum class bind_way { type1, type2_post_send, type2_wr_bind };

struct params : side_params {
    params() : side_params(default_port) {}
    bind_way way = bind_way::type1;
    bool way_given = false;
};

[[noreturn]] void usage(int status) {
    std::fprintf(status == 0 ? stdout : stderr,
                 "usage: %s --server | --connect IP  --bind type1|type2-post-send|type2-wr-bind\n"
                 "          [--port P] [--device NAME] [--ib-port N] [--gid-index N]"
                 " [--timeout SECONDS]\n",
                 program);
    std::exit(status);
}

params parse(int argc, char** argv) {
    params p;
    parse_side_options(argc, argv, program, p,
                       {{"bind", true,
                         [&p](const std::string& v) {
                             if (v == "type1") {
                                 p.way = bind_way::type1;
                             } else if (v == "type2-post-send") {
                                 p.way = bind_way::type2_post_send;
                             } else if (v == "type2-wr-bind") {
                                 p.way = bind_way::type2_wr_bind;
                             } else {
                                 throw test_error("unknown --bind " + v);
                             }
                             p.way_given = true;
                         }}},
                       usage);
    if (!p.way_given) {
        usage(2);
    }
    p.link.access = qp_access;
    return p;
}

const char* way_name(bind_way way) {
    switch (way) {
        case bind_way::type1:
            return "type-1 window, ibv_bind_mw";
        case bind_way::type2_post_send:
            return "type-2 window, IBV_WR_BIND_MW to ibv_post_send";
        case bind_way::type2_wr_bind:
            return "type-2 window, ibv_wr_bind_mw";
    }
    return "?";
}

ibv_wc one_completion(rc_link& link, const char* what) {
    const auto wcs = link.poll(link.send_cq, 1, std::chrono::steady_clock::now() + completion_wait);
    if (wcs.empty()) {
        throw test_error(std::string("no completion for ") + what);
    }
    return wcs[0];
}

void expect_completion(rc_link& link, ibv_wc_opcode opcode, const char* what) {
    const ibv_wc wc = one_completion(link, what);
    if (wc.status != IBV_WC_SUCCESS || wc.opcode != opcode) {
        throw test_error(std::string(what) + " completed " + describe(wc));
    }
}

void post(ibv_qp* qp, ibv_send_wr& wr, const char* what) {
    ibv_send_wr* bad = nullptr;
    if (const int err = ibv_post_send(qp, &wr, &bad); err != 0) {
        errno = err;
        throw test_error(errno_text(what));
    }
}

// ibv_wr_start .. ibv_wr_complete around `build`; ibv_wr_complete reports what went wrong.
template <typename Build>
void post_ex(ibv_qp* qp, const char* what, Build build) {
    ibv_qp_ex* qpx = ibv_qp_to_qp_ex(qp);
    if (qpx == nullptr) {
        throw test_error("ibv_qp_to_qp_ex gave no extended QP");
    }
    ibv_wr_start(qpx);
    qpx->wr_id = 1;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    build(qpx);
    if (const int err = ibv_wr_complete(qpx); err != 0) {
        errno = err;
        throw test_error(errno_text(what));
    }
}

// Binds `mw` onto `length` bytes at `addr` of `mr` the way the test asks; returns its rkey.
uint32_t bind(rc_link& link, bind_way way, ibv_mw* mw, ibv_mr* mr, uint64_t addr, uint64_t length) {
    ibv_mw_bind_info info{};
    info.mr = length != 0 ? mr : nullptr;
    info.addr = length != 0 ? addr : 0;
    info.length = length;
    info.mw_access_flags = length != 0 ? window_access : 0;
    const uint32_t rkey = ibv_inc_rkey(mw->rkey);
    switch (way) {
        case bind_way::type1: {
            ibv_mw_bind b{};
            b.wr_id = 1;
            b.send_flags = IBV_SEND_SIGNALED;
            b.bind_info = info;
            if (const int err = ibv_bind_mw(link.qp, mw, &b); err != 0) {
                errno = err;
                throw test_error(errno_text("ibv_bind_mw"));
            }
            expect_completion(link, IBV_WC_BIND_MW, "ibv_bind_mw");
            return mw->rkey;  // ibv_bind_mw gave the window its next key
        }
        case bind_way::type2_post_send: {
            ibv_send_wr wr{};
            wr.wr_id = 1;
            wr.opcode = IBV_WR_BIND_MW;
            wr.send_flags = IBV_SEND_SIGNALED;
            wr.bind_mw.mw = mw;
            wr.bind_mw.rkey = rkey;
            wr.bind_mw.bind_info = info;
            post(link.qp, wr, "ibv_post_send(IBV_WR_BIND_MW)");
            expect_completion(link, IBV_WC_BIND_MW, "IBV_WR_BIND_MW");
            return rkey;
        }
        case bind_way::type2_wr_bind:
            post_ex(link.qp, "ibv_wr_complete(ibv_wr_bind_mw)",
                    [&](ibv_qp_ex* qpx) { ibv_wr_bind_mw(qpx, mw, rkey, &info); });
            expect_completion(link, IBV_WC_BIND_MW, "ibv_wr_bind_mw");
            return rkey;
    }
    throw test_error("unknown bind");
}

// Takes the window's grant away: a type-1 window is unbound by a bind of length 0 (it cannot
// be invalidated), a type-2 one is invalidated.
void invalidate(rc_link& link, bind_way way, ibv_mw* mw, uint32_t rkey) {
    switch (way) {
        case bind_way::type1:
            bind(link, way, mw, nullptr, 0, 0);
            return;
        case bind_way::type2_post_send: {
            ibv_send_wr wr{};
            wr.wr_id = 2;
            wr.opcode = IBV_WR_LOCAL_INV;
            wr.send_flags = IBV_SEND_SIGNALED;
            wr.invalidate_rkey = rkey;
            post(link.qp, wr, "ibv_post_send(IBV_WR_LOCAL_INV)");
            expect_completion(link, IBV_WC_LOCAL_INV, "IBV_WR_LOCAL_INV");
            return;
        }
        case bind_way::type2_wr_bind:
            post_ex(link.qp, "ibv_wr_complete(ibv_wr_local_inv)",
                    [&](ibv_qp_ex* qpx) { ibv_wr_local_inv(qpx, rkey); });
            expect_completion(link, IBV_WC_LOCAL_INV, "ibv_wr_local_inv");
            return;
    }
}

// "" when the window's page holds `inside`'s pattern and the page after it the server's own.
std::string memory_report(const uint8_t* data, uint64_t inside) {
    if (const auto at = pattern_mismatch(std::span(data, page), inside, 0); at != page) {
        return "window byte " + std::to_string(at) + " is not as it must be";
    }
    if (const auto at = pattern_mismatch(std::span(data + page, page), server_seed, page);
        at != page) {
        return "byte " + std::to_string(at) + " after the window changed";
    }
    return "";
}

int run_server(params& p) {
    if (p.way == bind_way::type2_wr_bind) {
        p.link.send_ops_flags =
            IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV;
    }
    device dev(p.link);
    region memory(2 * page, mr_access);
    fill_pattern(std::span(memory.data(), 2 * page), server_seed, 0);
    memory.register_with(dev);
    tcp_line tcp = tcp_line::accept_one(p.port);
    rc_link link(dev, p.link, static_cast<uint32_t>(std::random_device{}()));
    tcp.send(link.local_info().to_line());
    link.connect(qp_info::from_words(tcp.expect("QP")));

    set_phase("binding the window");
    const ibv_mw_type type = p.way == bind_way::type1 ? IBV_MW_TYPE_1 : IBV_MW_TYPE_2;
    ibv_mw* mw = ibv_alloc_mw(dev.pd, type);
    if (mw == nullptr) {
        throw test_error(errno_text("ibv_alloc_mw"));
    }
    const uint32_t rkey = bind(link, p.way, mw, memory.mr(), memory.addr(), page);
    std::printf("%s: server: %s bound with REMOTE_WRITE | LOCAL_WRITE: rkey %#x\n", program,
                way_name(p.way), rkey);
    tcp.send("WINDOW " + std::to_string(memory.addr()) + " " + std::to_string(rkey));

    bool ok = true;
    auto check = [&](const char* when, uint64_t inside) {
        const std::string bad = memory_report(memory.data(), inside);
        std::printf("%s: server: %s: memory %s\n", program, when,
                    bad.empty() ? "as it must be" : bad.c_str());
        ok = ok && bad.empty();
        tcp.send(std::string("CHECKED ") + (bad.empty() ? "ok" : "bad"));
    };
    set_phase("waiting for the client's WRITE");
    tcp.expect("WRITTEN");
    check("after the WRITE through the window", client_seed);

    set_phase("invalidating the window");
    invalidate(link, p.way, mw, rkey);
    std::printf("%s: server: window %s\n", program,
                p.way == bind_way::type1 ? "unbound (a bind of length 0)" : "invalidated");
    tcp.send("INVALIDATED");
    set_phase("waiting for the WRITE after the invalidation");
    tcp.expect("DONE");
    check("after the WRITE through the invalidated window", client_seed);

    set_phase("deallocating the window");
    if (const int err = ibv_dealloc_mw(mw); err != 0) {
        errno = err;
        throw test_error(errno_text("ibv_dealloc_mw"));
    }
    std::printf("%s: server: ibv_dealloc_mw succeeded\n", program);
    std::printf("%s: server: %s\n", program, ok ? "all verified" : "FAILED");
    return ok ? 0 : 1;
}

int run_client(params& p) {
    device dev(p.link);
    region local(2 * page, IBV_ACCESS_LOCAL_WRITE);
    fill_pattern(std::span(local.data(), page), client_seed, 0);
    std::memset(local.data() + page, 0xaa, page);
    local.register_with(dev);
    tcp_line tcp = tcp_line::connect_to(p.connect_ip, p.port);
    rc_link link(dev, p.link, static_cast<uint32_t>(std::random_device{}()));
    link.connect(qp_info::from_words(tcp.expect("QP")));
    tcp.send(link.local_info().to_line());
    const auto w = tcp.expect("WINDOW");
    if (w.size() != 3) {
        throw test_error("bad WINDOW line");
    }
    const uint64_t addr = parse_u64(w[1]);
    const auto rkey = static_cast<uint32_t>(parse_u64(w[2]));

    auto write = [&](std::size_t local_at, uint64_t id) {
        ibv_sge sge{reinterpret_cast<uint64_t>(local.data() + local_at), page, local.lkey()};
        ibv_send_wr wr{};
        wr.wr_id = id;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.wr.rdma.remote_addr = addr;
        wr.wr.rdma.rkey = rkey;
        post(link.qp, wr, "ibv_post_send(RDMA_WRITE)");
        return one_completion(link, "the WRITE");
    };

    set_phase("writing through the window");
    ibv_wc wc = write(0, 1);
    bool good = wc.status == IBV_WC_SUCCESS;
    std::printf("%s: client: a WRITE of %zu bytes through the window (rkey %#x): %s\n", program,
                page, rkey, good ? "completed" : describe(wc).c_str());
    bool ok = good;
    tcp.send("WRITTEN");
    ok = tcp.expect("CHECKED").at(1) == "ok" && ok;

    tcp.expect("INVALIDATED");
    set_phase("writing through the invalidated window");
    wc = write(page, 2);  // 0xaa bytes: they must land nowhere
    good = wc.status == IBV_WC_REM_ACCESS_ERR;
    std::printf("%s: client: a WRITE through the invalidated window: %s\n", program,
                good ? "remote access error" : ("NOT refused: " + describe(wc)).c_str());
    ok = ok && good;
    tcp.send("DONE");
    ok = tcp.expect("CHECKED").at(1) == "ok" && ok;
    std::printf("%s: client: %s\n", program, ok ? "all verified" : "FAILED");
    return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    return run_test_program(argc, argv, program, parse, run_server, run_client);
}
