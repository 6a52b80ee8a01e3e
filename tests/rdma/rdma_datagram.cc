// rdma_datagram: end-to-end integrity of UD datagrams.
//
//   rdma_datagram --server [--port P] [--lossy MIN_PERCENT]
//   rdma_datagram --connect IP [--port P] [--datagrams N] [--seed S] [--batch N]
//                 [--lossy MIN_PERCENT]
//
// One UD QP on each side; the client reaches the server's QP through an address handle made
// from the server's GID. It sends a seeded random mix of datagrams, SEND and SEND with
// immediate, of random sizes from 1 byte up to the path MTU (the ports' active_mtu; its
// edges included), each with its own byte pattern, in batches announced over TCP. The
// server keeps its receive queue full and checks each datagram: status, opcode, IBV_WC_GRH,
// src_qp (the client's QP), byte_len = 40 (the GRH area) + payload, the IPv4 header in the
// last 20 bytes of the GRH area (version, source = the client, destination = the server),
// every payload byte and that nothing past it changed. Datagrams are matched by immediate or
// by size and content, so their order does not matter. Without --lossy every datagram must
// arrive exactly once; with --lossy P some may be lost (or, on a duplicating fabric, arrive
// twice, which UD allows), every one that arrives must be exact, and at least P % must
// arrive. One summary line per side; exit 0 only if everything verified.

#include <arpa/inet.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
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

constexpr const char* program = "rdma_datagram";
constexpr uint16_t default_port = 7473;
constexpr uint64_t default_datagrams = 2000;
constexpr uint32_t default_batch = 32;
constexpr uint32_t grh_bytes = 40;  // the GRH area ahead of every UD payload
// Any Q_Key both sides agree on; not 0x11111111 (ibv_ud_pingpong's), to tell the two apart.
constexpr uint32_t qkey = 0x4a4b0d01;
constexpr uint8_t slot_guard = 0xdb;
constexpr int max_reported = 20;
// A datagram still missing this long after the client's send queue drained is lost.
constexpr auto lossy_quiet = std::chrono::milliseconds(300);

struct params : side_params {
    params() : side_params(default_port) {}

    uint64_t datagrams = default_datagrams;
    uint64_t seed = 1;
    uint32_t batch = default_batch;
    uint64_t lossy_min_percent = 0;
};

[[noreturn]] void usage(int status) {
    std::fprintf(status == 0 ? stdout : stderr,
                 "usage: %s --server [--port P] [--lossy MIN_PERCENT]\n"
                 "       %s --connect IP [--port P] [--datagrams N] [--seed S] [--batch N]\n"
                 "          [--lossy MIN_PERCENT]\n"
                 "common: [--device NAME] [--ib-port N] [--gid-index N] [--timeout SECONDS]\n"
                 "defaults: port %u, %llu datagrams, seed 1, batch %u, timeout %d s\n",
                 program, program, default_port, static_cast<unsigned long long>(default_datagrams),
                 default_batch, side_params::default_timeout_s);
    std::exit(status);
}

params parse(int argc, char** argv) {
    params p;
    parse_side_options(
        argc, argv, program, p,
        {
            {"datagrams", true, [&p](const std::string& v) { p.datagrams = parse_u64(v); }},
            {"seed", true, [&p](const std::string& v) { p.seed = parse_u64(v); }},
            {"batch", true,
             [&p](const std::string& v) { p.batch = static_cast<uint32_t>(parse_u64(v)); }},
            {"lossy", true, [&p](const std::string& v) { p.lossy_min_percent = parse_u64(v); }},
        },
        usage);
    if (p.batch == 0 || p.batch > 1024 || p.datagrams == 0 || p.lossy_min_percent > 100) {
        usage(2);
    }
    return p;
}

struct datagram {
    uint64_t index = 0;
    uint32_t size = 0;
    uint64_t seed = 0;
    bool with_imm = false;
    uint32_t imm = 0;
    std::string to_line() const {
        std::ostringstream out;
        out << "DG " << index << " " << size << " " << seed << " " << (with_imm ? 1 : 0) << " "
            << imm;
        return out.str();
    }
    static datagram from_words(const std::vector<std::string>& w) {
        if (w.size() != 6) {
            throw test_error("malformed DG line");
        }
        datagram d;
        d.index = parse_u64(w[1]);
        d.size = static_cast<uint32_t>(parse_u64(w[2]));
        d.seed = parse_u64(w[3]);
        d.with_imm = w[4] == "1";
        d.imm = static_cast<uint32_t>(parse_u64(w[5]));
        return d;
    }
    std::string text() const {
        return "datagram " + std::to_string(index) + " (" + std::to_string(size) + " B" +
               (with_imm ? ", imm" : "") + ", seed " + std::to_string(seed) + ")";
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

// One UD QP with its two CQs, brought to RTS (UD needs no peer for that).
class ud_qp {
  public:
    ud_qp(device& dev, const link_options& o, uint32_t send_depth, uint32_t recv_depth)
        : _dev(dev) {
        set_phase("creating the UD QP");
        send_cq = ibv_create_cq(dev.context, static_cast<int>(send_depth), nullptr, nullptr, 0);
        recv_cq = ibv_create_cq(dev.context, static_cast<int>(recv_depth), nullptr, nullptr, 0);
        if (send_cq == nullptr || recv_cq == nullptr) {
            throw test_error(errno_text("ibv_create_cq"));
        }
        ibv_qp_init_attr init{};
        init.send_cq = send_cq;
        init.recv_cq = recv_cq;
        init.qp_type = IBV_QPT_UD;
        init.cap.max_send_wr = send_depth;
        init.cap.max_recv_wr = recv_depth;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        qp = ibv_create_qp(dev.pd, &init);
        if (qp == nullptr) {
            throw test_error(errno_text("ibv_create_qp (UD)"));
        }
        ibv_qp_attr attr{};
        attr.qp_state = IBV_QPS_INIT;
        attr.pkey_index = 0;
        attr.port_num = o.ib_port;
        attr.qkey = qkey;
        check_rc(
            ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
            "ibv_modify_qp to INIT");
        attr = {};
        attr.qp_state = IBV_QPS_RTR;
        check_rc(ibv_modify_qp(qp, &attr, IBV_QP_STATE), "ibv_modify_qp to RTR");
        attr = {};
        attr.qp_state = IBV_QPS_RTS;
        attr.sq_psn = 0;
        check_rc(ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN), "ibv_modify_qp to RTS");
    }
    ~ud_qp() {
        report_unwinding_error();
        set_phase("destroying the UD QP and its CQs");
        if (qp != nullptr) {
            ibv_destroy_qp(qp);
        }
        for (ibv_cq* cq : {send_cq, recv_cq}) {
            if (cq != nullptr) {
                ibv_destroy_cq(cq);
            }
        }
    }
    ud_qp(const ud_qp&) = delete;
    ud_qp& operator=(const ud_qp&) = delete;

    qp_info info() const {
        qp_info i;
        i.qpn = qp->qp_num;
        i.lid = _dev.port.lid;
        i.mtu = _dev.port.active_mtu;
        i.gid = _dev.gid;
        return i;
    }

    ibv_qp* qp = nullptr;
    ibv_cq* send_cq = nullptr;
    ibv_cq* recv_cq = nullptr;

  private:
    device& _dev;
};

// Polls until `n` completions or `until`; sleeps a little when idle (the software RNIC needs
// the core).
std::vector<ibv_wc> poll_cq(ibv_cq* cq, std::size_t n,
                            std::chrono::steady_clock::time_point until) {
    std::vector<ibv_wc> got;
    int idle = 0;
    while (got.size() < n) {
        ibv_wc wc[16];
        const int k =
            ibv_poll_cq(cq, static_cast<int>(std::min<std::size_t>(16, n - got.size())), wc);
        if (k < 0) {
            throw test_error("ibv_poll_cq failed");
        }
        if (k > 0) {
            got.insert(got.end(), wc, wc + k);
            idle = 0;
            continue;
        }
        if (std::chrono::steady_clock::now() >= until) {
            break;
        }
        if (++idle > 256) {
            std::this_thread::sleep_for(std::chrono::microseconds(50));
        } else {
            std::this_thread::yield();
        }
    }
    return got;
}

std::chrono::steady_clock::time_point wait_limit() {
    return deadline() - std::chrono::milliseconds(500);
}

uint32_t mtu_bytes(int mtu) {
    return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128u << mtu : 0;
}

// ---------------------------------------------------------------- server

int run_server(params& p) {
    device dev(p.link);
    tcp_line tcp = tcp_line::accept_one(p.port);
    set_phase("exchanging parameters");
    const auto w = tcp.expect("PARAMS");
    if (w.size() != 4) {
        throw test_error("malformed PARAMS line");
    }
    const uint64_t total = parse_u64(w[1]);
    const auto batch = static_cast<uint32_t>(parse_u64(w[2]));
    const uint64_t lossy = parse_u64(w[3]);
    if (batch == 0 || batch > 1024 || lossy != p.lossy_min_percent) {
        tcp.send("ABORT parameters out of range or --lossy differs");
        throw test_error("client's parameters out of range or --lossy differs");
    }
    const uint32_t depth = 2 * batch;  // room for a whole batch and its duplicates
    const uint32_t mtu = mtu_bytes(dev.port.active_mtu);
    const uint64_t slot_size = grh_bytes + mtu + 64;  // 64 bytes to catch an overrun
    region slots(depth * slot_size, IBV_ACCESS_LOCAL_WRITE);
    slots.register_with(dev);
    ud_qp ud(dev, p.link, 4, depth);
    auto post = [&](uint32_t slot) {
        std::memset(slots.data() + slot * slot_size, slot_guard, slot_size);
        ibv_sge sge{slots.addr() + slot * slot_size, static_cast<uint32_t>(slot_size),
                    slots.lkey()};
        ibv_recv_wr wr{};
        wr.wr_id = slot;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        check_rc(ibv_post_recv(ud.qp, &wr, &bad), "ibv_post_recv");
    };
    for (uint32_t i = 0; i < depth; ++i) {
        post(i);
    }
    tcp.send(ud.info().to_line());
    const qp_info client = qp_info::from_words(tcp.expect("QP"));
    const std::string client_ip = device::mapped_ipv4(client.gid);
    const std::string own_ip = device::mapped_ipv4(dev.gid);
    std::fprintf(stderr, "%s: server: %s QP %#x (%s), client QP %#x (%s), active MTU %u\n", program,
                 dev.name.c_str(), ud.qp->qp_num, own_ip.c_str(), client.qpn, client_ip.c_str(),
                 mtu);
    in_addr client_addr{}, own_addr{};
    if (inet_pton(AF_INET, client_ip.c_str(), &client_addr) != 1 ||
        inet_pton(AF_INET, own_ip.c_str(), &own_addr) != 1) {
        throw test_error("the GIDs do not map IPv4 addresses: no IPv4 header to check");
    }

    tally t;
    uint64_t sent = 0, arrived = 0, duplicates = 0, bytes = 0;
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
        if (n == 0 || n > batch) {
            throw test_error("batch too large");
        }
        std::vector<datagram> plan;
        for (uint64_t i = 0; i < n; ++i) {
            plan.push_back(datagram::from_words(tcp.expect("DG")));
            if (plan.back().size == 0 || plan.back().size > mtu) {
                throw test_error(plan.back().text() + " is larger than the path MTU");
            }
        }
        tcp.send("READY " + words[1]);
        set_phase("waiting for the client to finish a batch");
        tcp.expect("DONE");
        set_phase("polling receive completions");
        const uint64_t failures_before = t.failures;
        std::vector<int> seen(plan.size(), 0);
        uint64_t got_here = 0;
        for (;;) {
            const auto until = p.lossy_min_percent != 0
                                   ? std::chrono::steady_clock::now() + lossy_quiet
                                   : wait_limit();
            const std::size_t want = p.lossy_min_percent != 0 ? depth : plan.size() - got_here;
            const auto wcs = poll_cq(ud.recv_cq, want, until);
            for (const ibv_wc& wc : wcs) {
                ++got_here;
                const auto slot = static_cast<uint32_t>(wc.wr_id);
                const uint8_t* data = slots.data() + slot * slot_size;
                if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV || slot >= depth) {
                    t.fail("receive completion " + describe(wc));
                    continue;
                }
                // Which datagram: by immediate, else by size and content (two tiny ones can
                // have the same bytes: then the first that has not arrived yet).
                std::size_t which = plan.size();
                for (std::size_t i = 0; i < plan.size(); ++i) {
                    if (which != plan.size() && seen[which] == 0) {
                        break;
                    }
                    const datagram& d = plan[i];
                    const bool imm = (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
                    if (imm != d.with_imm || (imm && ntohl(wc.imm_data) != d.imm)) {
                        continue;
                    }
                    if ((imm || (wc.byte_len == grh_bytes + d.size &&
                                 pattern_mismatch(std::span(data + grh_bytes, d.size), d.seed, 0) ==
                                     d.size)) &&
                        (which == plan.size() || seen[i] == 0)) {
                        which = i;
                    }
                }
                if (which == plan.size()) {
                    t.fail("a datagram arrived that was not sent in this batch: " + describe(wc));
                    post(slot);
                    continue;
                }
                const datagram& d = plan[which];
                char want[200];
                std::snprintf(want, sizeof(want),
                              "; want byte_len %u, src_qp %#x, IBV_WC_GRH, qp_num %#x",
                              grh_bytes + d.size, client.qpn, ud.qp->qp_num);
                if (wc.byte_len != grh_bytes + d.size || wc.src_qp != client.qpn ||
                    (wc.wc_flags & IBV_WC_GRH) == 0 || wc.qp_num != ud.qp->qp_num) {
                    t.fail(d.text() + ": completion " + describe(wc) + " src_qp " +
                           std::to_string(wc.src_qp) + want);
                }
                // RoCE v2 over IPv4: the IPv4 header is the last 20 bytes of the GRH area.
                const uint8_t* ip = data + grh_bytes - 20;
                if (ip[0] != 0x45 || std::memcmp(ip + 12, &client_addr, 4) != 0 ||
                    std::memcmp(ip + 16, &own_addr, 4) != 0) {
                    char text[160];
                    std::snprintf(text, sizeof(text),
                                  ": GRH area's IPv4 header: first byte 0x%02x, source "
                                  "%u.%u.%u.%u, destination %u.%u.%u.%u; want 0x45, %s, %s",
                                  ip[0], ip[12], ip[13], ip[14], ip[15], ip[16], ip[17], ip[18],
                                  ip[19], client_ip.c_str(), own_ip.c_str());
                    t.fail(d.text() + text);
                }
                const std::size_t bad =
                    pattern_mismatch(std::span(data + grh_bytes, d.size), d.seed, 0);
                if (bad != d.size) {
                    char text[128];
                    std::snprintf(text, sizeof(text), ": payload byte %zu is 0x%02x, want 0x%02x",
                                  bad, data[grh_bytes + bad], pattern_byte(d.seed, bad));
                    t.fail(d.text() + text);
                }
                for (uint64_t j = grh_bytes + d.size; j < slot_size; ++j) {
                    if (data[j] != slot_guard) {
                        t.fail(d.text() + ": slot byte " + std::to_string(j) +
                               " past the datagram changed");
                        break;
                    }
                }
                if (seen[which]++ == 0) {
                    ++arrived;
                    bytes += d.size;
                } else {
                    ++duplicates;
                    if (p.lossy_min_percent == 0) {
                        t.fail(d.text() + " arrived twice on a clean fabric");
                    }
                }
                post(slot);
            }
            if (p.lossy_min_percent != 0 ? wcs.empty() : true) {
                break;
            }
        }
        for (std::size_t i = 0; i < plan.size(); ++i) {
            if (seen[i] == 0 && p.lossy_min_percent == 0) {
                t.fail(plan[i].text() + " never arrived");
            }
        }
        sent += plan.size();
        tcp.send("CHECKED " + words[1] + " " + std::to_string(t.failures - failures_before));
    }
    if (sent != total) {
        t.fail("the client announced " + std::to_string(total) + " datagrams, sent " +
               std::to_string(sent));
    }
    const double percent = sent == 0 ? 0.0 : 100.0 * static_cast<double>(arrived) / sent;
    if (percent < static_cast<double>(p.lossy_min_percent) ||
        (p.lossy_min_percent == 0 && arrived != sent)) {
        t.fail("only " + std::to_string(arrived) + " of " + std::to_string(sent) +
               " datagrams arrived");
    }
    tcp.send("BYE " + std::to_string(t.failures));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf(
        "%s: server: %llu of %llu datagrams arrived (%.1f %%), %llu duplicates, %llu "
        "payload bytes, path MTU %u, %llu failures, %.2f s\n",
        program, static_cast<unsigned long long>(arrived), static_cast<unsigned long long>(sent),
        percent, static_cast<unsigned long long>(duplicates),
        static_cast<unsigned long long>(bytes), mtu, static_cast<unsigned long long>(t.failures),
        s);
    return t.failures == 0 ? 0 : 1;
}

// ---------------------------------------------------------------- client

// Log-uniform sizes up to the MTU, with 1, MTU - 1 and MTU themselves now and then.
uint32_t random_size(std::mt19937_64& rng, uint32_t mtu) {
    const int r = std::uniform_int_distribution<int>(0, 19)(rng);
    if (r == 0) {
        return mtu;
    }
    if (r == 1) {
        return mtu - 1;
    }
    if (r == 2) {
        return 1;
    }
    int bits = 0;
    while ((1u << bits) < mtu) {
        ++bits;
    }
    const int b = std::uniform_int_distribution<int>(0, bits)(rng);
    const uint32_t hi = std::min(mtu, 1u << b);
    const uint32_t lo = b == 0 ? 1 : std::min(hi, (1u << (b - 1)) + 1);
    return std::uniform_int_distribution<uint32_t>(lo, hi)(rng);
}

int run_client(params& p) {
    device dev(p.link);
    const uint32_t local_mtu = mtu_bytes(dev.port.active_mtu);
    region buffer(p.batch * uint64_t{local_mtu}, IBV_ACCESS_LOCAL_WRITE);
    buffer.register_with(dev);
    ud_qp ud(dev, p.link, p.batch, 1);
    tcp_line tcp = tcp_line::connect_to(p.connect_ip, p.port);
    set_phase("exchanging QP details");
    tcp.send("PARAMS " + std::to_string(p.datagrams) + " " + std::to_string(p.batch) + " " +
             std::to_string(p.lossy_min_percent));
    const qp_info server = qp_info::from_words(tcp.expect("QP"));
    tcp.send(ud.info().to_line());
    const uint32_t mtu = std::min(local_mtu, mtu_bytes(server.mtu));
    if (mtu == 0) {
        throw test_error("the server reports no valid active MTU");
    }
    ibv_ah_attr ah_attr{};
    ah_attr.is_global = 1;
    ah_attr.dlid = server.lid;
    ah_attr.port_num = p.link.ib_port;
    ah_attr.grh.dgid = server.gid;
    ah_attr.grh.sgid_index = static_cast<uint8_t>(p.link.gid_index);
    ah_attr.grh.hop_limit = 64;
    ibv_ah* ah = ibv_create_ah(dev.pd, &ah_attr);
    if (ah == nullptr) {
        throw test_error(errno_text("ibv_create_ah towards " + device::mapped_ipv4(server.gid)));
    }
    std::fprintf(stderr, "%s: client: %s QP %#x -> server QP %#x (%s), path MTU %u\n", program,
                 dev.name.c_str(), ud.qp->qp_num, server.qpn,
                 device::mapped_ipv4(server.gid).c_str(), mtu);

    std::mt19937_64 rng(p.seed);
    tally t;
    uint64_t sent = 0, bytes = 0, server_failures = 0, with_imm = 0, at_mtu = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t batch_id = 0; sent < p.datagrams; ++batch_id) {
        const uint64_t n = std::min<uint64_t>(
            p.datagrams - sent, std::uniform_int_distribution<uint32_t>(1, p.batch)(rng));
        std::vector<datagram> plan(n);
        std::vector<ibv_sge> sges(n);
        std::vector<ibv_send_wr> wrs(n);
        set_phase("announcing a batch");
        tcp.send("BATCH " + std::to_string(batch_id) + " " + std::to_string(n));
        for (uint64_t i = 0; i < n; ++i) {
            datagram& d = plan[i];
            d.index = sent + i;
            d.size = random_size(rng, mtu);
            d.seed = rng();
            d.with_imm = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
            d.imm = d.with_imm ? static_cast<uint32_t>(mix64(d.seed) ^ d.index) : 0;
            with_imm += d.with_imm ? 1 : 0;
            at_mtu += d.size == mtu ? 1 : 0;
            uint8_t* src = buffer.data() + i * local_mtu;
            fill_pattern(std::span(src, d.size), d.seed, 0);
            sges[i] = {reinterpret_cast<uint64_t>(src), d.size, buffer.lkey()};
            ibv_send_wr& wr = wrs[i];
            wr.wr_id = d.index;
            wr.sg_list = &sges[i];
            wr.num_sge = 1;
            wr.opcode = d.with_imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
            wr.imm_data = htonl(d.imm);
            wr.send_flags = IBV_SEND_SIGNALED;
            wr.wr.ud.ah = ah;
            wr.wr.ud.remote_qpn = server.qpn;
            wr.wr.ud.remote_qkey = qkey;
            wr.next = i + 1 < n ? &wrs[i + 1] : nullptr;
            tcp.send(d.to_line());
        }
        tcp.expect("READY");
        set_phase("posting and completing a batch of datagrams");
        ibv_send_wr* bad = nullptr;
        check_rc(ibv_post_send(ud.qp, wrs.data(), &bad), "ibv_post_send (UD)");
        const auto wcs = poll_cq(ud.send_cq, n, wait_limit());
        for (std::size_t i = 0; i < n; ++i) {
            if (i >= wcs.size()) {
                t.fail(plan[i].text() + ": no send completion");
            } else if (wcs[i].status != IBV_WC_SUCCESS || wcs[i].wr_id != plan[i].index ||
                       wcs[i].opcode != IBV_WC_SEND) {
                t.fail(plan[i].text() + ": send completion " + describe(wcs[i]));
            }
            bytes += plan[i].size;
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
    ibv_destroy_ah(ah);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf(
        "%s: %llu of %llu datagrams sent (%llu with immediate, %llu of path MTU %u "
        "bytes), %llu bytes, %llu failures (client %llu, server %llu), %.2f s\n",
        program, static_cast<unsigned long long>(sent),
        static_cast<unsigned long long>(p.datagrams), static_cast<unsigned long long>(with_imm),
        static_cast<unsigned long long>(at_mtu), mtu, static_cast<unsigned long long>(bytes),
        static_cast<unsigned long long>(t.failures + server_failures),
        static_cast<unsigned long long>(t.failures),
        static_cast<unsigned long long>(server_failures), s);
    return t.failures + server_failures == 0 && sent == p.datagrams ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    return run_test_program(argc, argv, program, parse, run_server, run_client);
}
