// rdma_srq: end-to-end integrity of receives taken from a shared receive queue.
//
//   rdma_srq --server [--port P]
//   rdma_srq --connect IP [--port P] [--qps N] [--ops N] [--seed S] [--max-size BYTES]
//            [--batch N]
//
// The client connects N RC QPs (default 4) to N QPs of the server, which all take their
// receives from one SRQ the server keeps full (wr_id = receive slot). The client sends a
// seeded random mix of SEND and SEND with immediate, of random sizes, each on a random one of
// its QPs, in batches announced over TCP. The server matches each receive completion to the
// next message due on the QP it names (qp_num; RC keeps each QP's order, the SRQ interleaves
// the QPs) and checks opcode, byte_len, the immediate, every byte and that nothing past the
// message changed in its slot. Once, before the first batch, the server arms the SRQ's limit
// one below the number of WQEs posted: the first batch (two messages at least) takes it below,
// and exactly one IBV_EVENT_SRQ_LIMIT_REACHED for this SRQ must follow, after which
// ibv_query_srq reports the limit disarmed (0) and no further event comes while later batches
// drain the SRQ as far again. One summary line per side; exit 0 only if everything verified.

#include <arpa/inet.h>
#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/rdma/deadline.hh"
#include "tests/rdma/options.hh"
#include "tests/rdma/pattern.hh"
#include "tests/rdma/program.hh"
#include "tests/rdma/rc_link.hh"
#include "tests/rdma/tcp_line.hh"

using namespace jakiro::rdma_test;

namespace {

constexpr const char* program = "rdma_srq";
constexpr uint16_t default_port = 7477;
constexpr uint32_t default_qps = 4;
constexpr uint64_t default_ops = 1000;
constexpr uint64_t default_max_size = 64 * 1024;
constexpr uint32_t default_batch = 16;
constexpr uint8_t slot_guard = 0xdb;
constexpr int max_reported = 20;
// How long an SRQ_LIMIT_REACHED event may take after the SRQ went below its limit, and how
// long the server listens for a second one that must not come.
constexpr int event_wait_ms = 2000;

struct params : side_params {
    params() : side_params(default_port) {}

    uint32_t qps = default_qps;
    uint64_t ops = default_ops;
    uint64_t seed = 1;
    uint64_t max_size = default_max_size;
    uint32_t batch = default_batch;
};

[[noreturn]] void usage(int status) {
    std::fprintf(status == 0 ? stdout : stderr,
                 "usage: %s --server [--port P]\n"
                 "       %s --connect IP [--port P] [--qps N] [--ops N] [--seed S]\n"
                 "          [--max-size BYTES] [--batch N]\n"
                 "common: [--device NAME] [--ib-port N] [--gid-index N] [--timeout SECONDS]\n"
                 "defaults: port %u, %u QPs, %llu ops, max-size %llu, batch %u, timeout %d s\n",
                 program, program, default_port, default_qps,
                 static_cast<unsigned long long>(default_ops),
                 static_cast<unsigned long long>(default_max_size), default_batch,
                 side_params::default_timeout_s);
    std::exit(status);
}

params parse(int argc, char** argv) {
    params p;
    parse_side_options(
        argc, argv, program, p,
        {
            {"qps", true,
             [&p](const std::string& v) { p.qps = static_cast<uint32_t>(parse_u64(v)); }},
            {"ops", true, [&p](const std::string& v) { p.ops = parse_u64(v); }},
            {"seed", true, [&p](const std::string& v) { p.seed = parse_u64(v); }},
            {"max-size", true, [&p](const std::string& v) { p.max_size = parse_u64(v); }},
            {"batch", true,
             [&p](const std::string& v) { p.batch = static_cast<uint32_t>(parse_u64(v)); }},
        },
        usage);
    if (p.qps == 0 || p.qps > 64 || p.ops == 0 || p.max_size == 0 || p.max_size > (1u << 24) ||
        p.batch < 2 || p.batch > 512) {
        usage(2);
    }
    return p;
}

struct message {
    uint64_t index = 0;
    uint32_t qp = 0;  // which of the QPs carries it
    uint64_t size = 0;
    uint64_t seed = 0;
    bool with_imm = false;
    uint32_t imm = 0;
    std::string to_line() const {
        std::ostringstream out;
        out << "M " << index << " " << qp << " " << size << " " << seed << " " << (with_imm ? 1 : 0)
            << " " << imm;
        return out.str();
    }
    static message from_words(const std::vector<std::string>& w) {
        if (w.size() != 7) {
            throw test_error("malformed M line");
        }
        message m;
        m.index = parse_u64(w[1]);
        m.qp = static_cast<uint32_t>(parse_u64(w[2]));
        m.size = parse_u64(w[3]);
        m.seed = parse_u64(w[4]);
        m.with_imm = w[5] == "1";
        m.imm = static_cast<uint32_t>(parse_u64(w[6]));
        return m;
    }
    std::string text() const {
        return "message " + std::to_string(index) + " (QP " + std::to_string(qp) + ", " +
               std::to_string(size) + " B" + (with_imm ? ", imm" : "") + ")";
    }
};

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

void check_rc(int rc, const std::string& verb) {
    if (rc != 0) {
        errno = rc > 0 ? rc : errno;
        throw test_error(errno_text(verb));
    }
}

std::chrono::steady_clock::time_point wait_limit() {
    return deadline() - std::chrono::milliseconds(500);
}

// The next asynchronous event within `ms`, acknowledged; false if none came.
bool next_async_event(ibv_context* context, int ms, ibv_async_event& out) {
    pollfd pfd{context->async_fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, ms);
    if (ready <= 0) {
        return false;
    }
    if (ibv_get_async_event(context, &out) != 0) {
        throw test_error(errno_text("ibv_get_async_event"));
    }
    ibv_ack_async_event(&out);
    return true;
}

std::string event_text(const ibv_async_event& e) {
    return std::string(ibv_event_type_str(e.event_type)) + " (" + std::to_string(e.event_type) +
           ")";
}

class srq_holder {
  public:
    srq_holder(device& dev, uint32_t depth) {
        ibv_srq_init_attr init{};
        init.attr.max_wr = depth;
        init.attr.max_sge = 1;
        srq = ibv_create_srq(dev.pd, &init);
        if (srq == nullptr) {
            throw test_error(errno_text("ibv_create_srq"));
        }
    }
    ~srq_holder() {
        report_unwinding_error();
        set_phase("destroying the SRQ");
        ibv_destroy_srq(srq);
    }
    srq_holder(const srq_holder&) = delete;
    srq_holder& operator=(const srq_holder&) = delete;
    ibv_srq* srq = nullptr;
};

// ---------------------------------------------------------------- server

int run_server(params& p) {
    device dev(p.link);
    tcp_line tcp = tcp_line::accept_one(p.port);
    set_phase("exchanging parameters");
    const auto w = tcp.expect("PARAMS");
    if (w.size() != 5) {
        throw test_error("malformed PARAMS line");
    }
    const auto qps = static_cast<uint32_t>(parse_u64(w[1]));
    const uint64_t ops = parse_u64(w[2]), max_size = parse_u64(w[3]);
    const auto batch = static_cast<uint32_t>(parse_u64(w[4]));
    if (qps == 0 || qps > 64 || max_size == 0 || max_size > (1u << 24) || batch < 2 ||
        batch > 512) {
        tcp.send("ABORT parameters out of range");
        throw test_error("client's parameters out of range");
    }
    const uint32_t depth = 2 * batch;
    const uint64_t slot_size = max_size + 64;  // 64 bytes past the largest message: overruns
    region slots(depth * slot_size, IBV_ACCESS_LOCAL_WRITE);
    slots.register_with(dev);
    // Declared before the QPs, so it is destroyed after them (EBUSY while QPs use it).
    srq_holder shared(dev, depth);
    auto post = [&](uint32_t slot) {
        std::memset(slots.data() + slot * slot_size, slot_guard, slot_size);
        ibv_sge sge{slots.addr() + slot * slot_size, static_cast<uint32_t>(slot_size),
                    slots.lkey()};
        ibv_recv_wr wr{};
        wr.wr_id = slot;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        check_rc(ibv_post_srq_recv(shared.srq, &wr, &bad), "ibv_post_srq_recv");
    };
    for (uint32_t i = 0; i < depth; ++i) {
        post(i);
    }
    link_options lo = p.link;
    lo.srq = shared.srq;
    lo.send_depth = 4;
    // Sizes each QP's receive CQ (max_recv_wr is ignored on an SRQ): every WQE of the SRQ may
    // complete on one QP before the server polls, and a CQ that overflows ends the QP.
    lo.recv_depth = depth;
    lo.send_sge = 1;
    std::vector<std::unique_ptr<rc_link>> links;
    for (uint32_t q = 0; q < qps; ++q) {
        links.push_back(std::make_unique<rc_link>(dev, lo, static_cast<uint32_t>(mix64(q + 7))));
        tcp.send(links.back()->local_info().to_line());
    }
    for (uint32_t q = 0; q < qps; ++q) {
        links[q]->connect(qp_info::from_words(tcp.expect("QP")));
    }
    std::fprintf(stderr, "%s: server: %s, %u RC QPs on one SRQ of %u WQEs, client %s\n", program,
                 dev.name.c_str(), qps, depth, tcp.peer_ip().c_str());

    tally t;
    set_phase("arming the SRQ limit");
    ibv_async_event ev{};
    if (next_async_event(dev.context, 0, ev)) {
        t.fail("an asynchronous event before anything ran: " + event_text(ev));
    }
    ibv_srq_attr limit{};
    limit.srq_limit = depth - 1;
    check_rc(ibv_modify_srq(shared.srq, &limit, IBV_SRQ_LIMIT), "ibv_modify_srq (IBV_SRQ_LIMIT)");
    ibv_srq_attr queried{};
    check_rc(ibv_query_srq(shared.srq, &queried), "ibv_query_srq");
    if (queried.srq_limit != depth - 1) {
        t.fail("ibv_query_srq reports limit " + std::to_string(queried.srq_limit) +
               " after arming " + std::to_string(depth - 1));
    }
    tcp.send("RTS");

    uint64_t received = 0, bytes = 0, limit_events = 0, batches = 0;
    std::vector<uint64_t> per_qp(qps, 0);
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
        set_phase("waiting for the client's next batch");
        const auto words = split_words(tcp.receive());
        if (!words.empty() && words[0] == "END") {
            break;
        }
        if (words.size() != 3 || words[0] != "BATCH") {
            throw test_error("expected BATCH or END");
        }
        const uint64_t n = parse_u64(words[2]);
        if (n == 0 || n > batch || (batches == 0 && n < 2)) {
            throw test_error("bad batch size " + words[2]);
        }
        std::vector<std::deque<message>> due(qps);
        for (uint64_t i = 0; i < n; ++i) {
            message m = message::from_words(tcp.expect("M"));
            if (m.qp >= qps || m.size == 0 || m.size > max_size) {
                throw test_error("message out of range: " + m.to_line());
            }
            due[m.qp].push_back(m);
        }
        tcp.send("READY " + words[1]);
        set_phase("waiting for the client to finish a batch");
        tcp.expect("DONE");
        set_phase("polling the QPs' receive completions");
        const uint64_t failures_before = t.failures;
        uint64_t got = 0;
        std::vector<uint32_t> consumed;
        while (got < n && std::chrono::steady_clock::now() < wait_limit()) {
            bool any = false;
            for (uint32_t q = 0; q < qps; ++q) {
                for (const ibv_wc& wc :
                     links[q]->poll(links[q]->recv_cq, n, std::chrono::steady_clock::now())) {
                    any = true;
                    ++got;
                    const auto slot = static_cast<uint32_t>(wc.wr_id);
                    if (wc.status != IBV_WC_SUCCESS || slot >= depth) {
                        t.fail("receive completion " + describe(wc));
                        throw test_error("a receive failed; stopping");
                    }
                    consumed.push_back(slot);
                    if (wc.qp_num != links[q]->qp->qp_num) {
                        t.fail("a completion on QP " + std::to_string(q) + "'s CQ names qp_num " +
                               std::to_string(wc.qp_num));
                        continue;
                    }
                    if (due[q].empty()) {
                        t.fail("QP " + std::to_string(q) +
                               " received more than was sent on it: " + describe(wc));
                        continue;
                    }
                    const message m = due[q].front();
                    due[q].pop_front();
                    const uint8_t* data = slots.data() + slot * slot_size;
                    if (wc.opcode != IBV_WC_RECV || wc.byte_len != m.size ||
                        ((wc.wc_flags & IBV_WC_WITH_IMM) != 0) != m.with_imm ||
                        (m.with_imm && ntohl(wc.imm_data) != m.imm)) {
                        t.fail(m.text() + ": completion " + describe(wc));
                        continue;
                    }
                    const std::size_t bad = pattern_mismatch(std::span(data, m.size), m.seed, 0);
                    if (bad != m.size) {
                        char text[128];
                        std::snprintf(text, sizeof(text), ": byte %zu is 0x%02x, want 0x%02x", bad,
                                      data[bad], pattern_byte(m.seed, bad));
                        t.fail(m.text() + text);
                    }
                    for (uint64_t j = m.size; j < slot_size; ++j) {
                        if (data[j] != slot_guard) {
                            t.fail(m.text() + ": slot byte " + std::to_string(j) +
                                   " past the message changed");
                            break;
                        }
                    }
                    ++per_qp[q];
                    ++received;
                    bytes += m.size;
                }
            }
            if (!any) {
                std::this_thread::sleep_for(std::chrono::microseconds(100));
            }
        }
        if (got < n) {
            t.fail("batch " + words[1] + ": " + std::to_string(got) + " of " + std::to_string(n) +
                   " receives completed in time");
        }
        if (batches == 0) {
            set_phase("waiting for IBV_EVENT_SRQ_LIMIT_REACHED");
            if (!next_async_event(dev.context, event_wait_ms, ev)) {
                t.fail("the SRQ went from " + std::to_string(depth) + " to " +
                       std::to_string(depth - got) + " WQEs, below its limit " +
                       std::to_string(depth - 1) + ", and no event came within " +
                       std::to_string(event_wait_ms) + " ms");
            } else if (ev.event_type != IBV_EVENT_SRQ_LIMIT_REACHED ||
                       ev.element.srq != shared.srq) {
                t.fail("expected IBV_EVENT_SRQ_LIMIT_REACHED for the SRQ, got " + event_text(ev));
            } else {
                ++limit_events;
            }
            check_rc(ibv_query_srq(shared.srq, &queried), "ibv_query_srq");
            if (queried.srq_limit != 0) {
                t.fail("ibv_query_srq reports limit " + std::to_string(queried.srq_limit) +
                       " after the limit event (want 0: disarmed)");
            }
        } else if (next_async_event(dev.context, 0, ev)) {
            t.fail("an asynchronous event after the limit had fired: " + event_text(ev));
        }
        for (uint32_t slot : consumed) {
            post(slot);
        }
        ++batches;
        tcp.send("CHECKED " + words[1] + " " + std::to_string(t.failures - failures_before));
    }
    set_phase("listening for a second SRQ limit event");
    if (next_async_event(dev.context, 200, ev)) {
        t.fail("an asynchronous event after the run: " + event_text(ev));
    }
    if (received != ops) {
        t.fail(std::to_string(received) + " of " + std::to_string(ops) + " messages received");
    }
    tcp.send("BYE " + std::to_string(t.failures));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::ostringstream spread;
    for (uint32_t q = 0; q < qps; ++q) {
        spread << (q == 0 ? "" : "/") << per_qp[q];
    }
    std::printf(
        "%s: server: %llu of %llu messages on %u QPs (%s) from one SRQ, %llu bytes, "
        "%llu SRQ limit event, %llu failures, %.2f s\n",
        program, static_cast<unsigned long long>(received), static_cast<unsigned long long>(ops),
        qps, spread.str().c_str(), static_cast<unsigned long long>(bytes),
        static_cast<unsigned long long>(limit_events), static_cast<unsigned long long>(t.failures),
        s);
    return t.failures == 0 && limit_events == 1 ? 0 : 1;
}

// ---------------------------------------------------------------- client

uint64_t random_size(std::mt19937_64& rng, uint64_t max) {
    int bits = 0;
    while ((uint64_t{1} << bits) < max) {
        ++bits;
    }
    const int b = std::uniform_int_distribution<int>(0, bits)(rng);
    const uint64_t hi = std::min(max, uint64_t{1} << b);
    const uint64_t lo = b == 0 ? 1 : std::min(hi, (uint64_t{1} << (b - 1)) + 1);
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
}

int run_client(params& p) {
    device dev(p.link);
    region buffer(p.batch * p.max_size, IBV_ACCESS_LOCAL_WRITE);
    buffer.register_with(dev);
    link_options lo = p.link;
    lo.send_depth = p.batch;
    lo.recv_depth = 1;
    lo.send_sge = 1;
    std::vector<std::unique_ptr<rc_link>> links;
    for (uint32_t q = 0; q < p.qps; ++q) {
        links.push_back(
            std::make_unique<rc_link>(dev, lo, static_cast<uint32_t>(mix64(p.seed + q))));
    }
    tcp_line tcp = tcp_line::connect_to(p.connect_ip, p.port);
    set_phase("exchanging QP details");
    tcp.send("PARAMS " + std::to_string(p.qps) + " " + std::to_string(p.ops) + " " +
             std::to_string(p.max_size) + " " + std::to_string(p.batch));
    std::vector<qp_info> remote;
    for (uint32_t q = 0; q < p.qps; ++q) {
        remote.push_back(qp_info::from_words(tcp.expect("QP")));
    }
    for (uint32_t q = 0; q < p.qps; ++q) {
        links[q]->connect(remote[q]);
        tcp.send(links[q]->local_info().to_line());
    }
    tcp.expect("RTS");

    std::mt19937_64 rng(p.seed);
    tally t;
    uint64_t sent = 0, bytes = 0, server_failures = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t batch_id = 0; sent < p.ops; ++batch_id) {
        const uint64_t lowest = batch_id == 0 ? 2 : 1;  // the first one crosses the limit
        const uint64_t n = std::min<uint64_t>(
            p.ops - sent, std::uniform_int_distribution<uint64_t>(lowest, p.batch)(rng));
        std::vector<message> plan(n);
        std::vector<ibv_sge> sges(n);
        std::vector<ibv_send_wr> wrs(n);
        std::vector<uint64_t> per_qp(p.qps, 0);
        set_phase("announcing a batch");
        tcp.send("BATCH " + std::to_string(batch_id) + " " + std::to_string(n));
        for (uint64_t i = 0; i < n; ++i) {
            message& m = plan[i];
            m.index = sent + i;
            m.qp = std::uniform_int_distribution<uint32_t>(0, p.qps - 1)(rng);
            m.size = random_size(rng, p.max_size);
            m.seed = rng();
            m.with_imm = std::uniform_int_distribution<int>(0, 2)(rng) == 0;
            m.imm = m.with_imm ? static_cast<uint32_t>(rng()) : 0;
            uint8_t* src = buffer.data() + i * p.max_size;
            fill_pattern(std::span(src, m.size), m.seed, 0);
            sges[i] = {reinterpret_cast<uint64_t>(src), static_cast<uint32_t>(m.size),
                       buffer.lkey()};
            ibv_send_wr& wr = wrs[i];
            wr.wr_id = m.index;
            wr.sg_list = &sges[i];
            wr.num_sge = 1;
            wr.opcode = m.with_imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
            wr.imm_data = htonl(m.imm);
            wr.send_flags = IBV_SEND_SIGNALED;
            ++per_qp[m.qp];
            tcp.send(m.to_line());
        }
        tcp.expect("READY");
        set_phase("posting a batch on the QPs");
        for (uint64_t i = 0; i < n; ++i) {
            ibv_send_wr* bad = nullptr;
            check_rc(ibv_post_send(links[plan[i].qp]->qp, &wrs[i], &bad), "ibv_post_send");
        }
        set_phase("polling send completions");
        for (uint32_t q = 0; q < p.qps; ++q) {
            const auto wcs = links[q]->poll(links[q]->send_cq, per_qp[q], wait_limit());
            if (wcs.size() != per_qp[q]) {
                t.fail("QP " + std::to_string(q) + ": " + std::to_string(wcs.size()) + " of " +
                       std::to_string(per_qp[q]) + " send completions");
            }
            for (const ibv_wc& wc : wcs) {
                if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_SEND) {
                    t.fail("QP " + std::to_string(q) + ": send completion " + describe(wc));
                }
            }
        }
        for (const message& m : plan) {
            bytes += m.size;
        }
        sent += n;
        tcp.send("DONE " + std::to_string(batch_id));
        set_phase("waiting for the server's check of a batch");
        server_failures += parse_u64(tcp.expect("CHECKED").at(2));
        if (t.failures != 0) {
            break;
        }
    }
    set_phase("finishing");
    tcp.send("END");
    server_failures = std::max(server_failures, parse_u64(tcp.expect("BYE").at(1)));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf(
        "%s: %llu of %llu messages on %u QPs, %llu bytes, %llu failures (client %llu, "
        "server %llu), %.2f s\n",
        program, static_cast<unsigned long long>(sent), static_cast<unsigned long long>(p.ops),
        p.qps, static_cast<unsigned long long>(bytes),
        static_cast<unsigned long long>(t.failures + server_failures),
        static_cast<unsigned long long>(t.failures),
        static_cast<unsigned long long>(server_failures), s);
    return t.failures + server_failures == 0 && sent == p.ops ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    return run_test_program(argc, argv, program, parse, run_server, run_client);
}
