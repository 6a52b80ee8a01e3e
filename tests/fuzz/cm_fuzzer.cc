// libFuzzer target over the rdma_cm agent, from both of its hostile sides: ucma
// commands a tenant writes to its emulated rdma_cm device (raw bytes: any command number,
// `in`/`out` sizes that lie, ids that are not the caller's, AF_IB and IPv6 addresses, option
// values of any length) and MADs off the wire (raw 256-byte buffers, and valid CM messages
// of every attribute with fuzzed fields, from the right or the wrong peer address). Two agents
// (two vNICs, 198.19.1.1 and .2) exchange what they send over a fake wire that the input may
// make lose MADs; timers run on a virtual clock. Each input starts from nothing.
//
// Besides crashes and ASan/UBSan reports, the harness aborts ("cm_fuzzer: ...") when an agent
// holds more ids than its limit, sends a MAD that does not decode, or still holds ids, MADs to
// resend or timers after all its channels were closed and its orphans' retries ran out.
//
// Input: a sequence of operations, each an opcode byte then its arguments (past the end every
// read is 0):
//   0 command  agent, client, length (u16), raw bytes
//   1 typed    agent, client, command number, fields (a plausible command, fuzzed)
//   2 mad      agent, from (0 peer, 1 a stranger), 256 raw bytes
//   3 message  agent, attribute, fields: a valid CM message of that kind, fuzzed
//   4 pump     drop mask: deliver what the wire holds
//   5 timers   seconds to advance the virtual clock
//   6 close    agent, client: the client's channel goes (its ids are released)

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_user_cm.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "rnic/rdmacm/cm_agent.hh"
#include "rnic/rdmacm/cma_header.hh"

using namespace jakiro::rdmacm;

namespace {

[[noreturn]] void fail(const char* why) {
    std::fprintf(stderr, "cm_fuzzer: %s\n", why);
    std::abort();
}

class input {
  public:
    input(const uint8_t* d, size_t n) : _d(d), _n(n) {}
    bool done() const { return _at >= _n; }
    uint8_t u8() { return _at < _n ? _d[_at++] : 0; }
    uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
    uint32_t u32() { return u16() | (uint32_t{u16()} << 16); }
    void bytes(void* out, size_t n) {
        auto* o = static_cast<uint8_t*>(out);
        for (size_t i = 0; i < n; ++i) {
            o[i] = u8();
        }
    }

  private:
    const uint8_t* _d;
    size_t _n;
    size_t _at = 0;
};

constexpr uint32_t max_ids = 32;
constexpr int clients_per_agent = 3;

struct wire_mad {
    int to;
    uint32_t from_ip;
    mad_buffer bytes;
};

struct harness {
    uint32_t ips[2] = {inet_addr("198.19.1.1"), inet_addr("198.19.1.2")};
    std::unique_ptr<cm_agent> agents[2];
    int fds[2][clients_per_agent][2];
    bool open[2][clients_per_agent] = {};
    std::deque<wire_mad> wire;
    cm_agent::clock::time_point now = cm_agent::clock::now();

    harness() {
        for (int a = 0; a < 2; ++a) {
            agent_limits lim;
            lim.max_ids = max_ids;
            lim.max_channels = clients_per_agent;
            lim.max_queued_events = 16;
            const uint32_t self = ips[a];
            agents[a] = std::make_unique<cm_agent>(
                agent_identity{static_cast<uint16_t>(a), self,
                               htobe64(0x0200'00ff'fe00'0000ull + a), 3},
                [this, a, self](const gid& to, const mad_buffer& m) {
                    if (!decode(m)) {
                        fail("an agent sent a MAD that does not decode");
                    }
                    uint32_t dst = 0;  // IPv6 peers are none of the harness's agents
                    if (is_ipv4_gid(to)) {
                        std::memcpy(&dst, to.data() + 12, 4);
                    }
                    if (wire.size() < 256 && (dst == ips[0] || dst == ips[1])) {
                        wire.push_back({dst == ips[0] ? 0 : 1, self, m});
                    }
                    (void)a;
                },
                [](const gid& remote) { return remote[15] == 0x99 ? EACCES : 0; }, lim);
            for (int c = 0; c < clients_per_agent; ++c) {
                if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK, 0, fds[a][c]) != 0) {
                    fail("socketpair");
                }
                open[a][c] = agents[a]->open_channel(c + 1, fds[a][c][0]);
            }
        }
    }
    ~harness() {
        for (auto& agent : fds) {
            for (auto& pair : agent) {
                close(pair[0]);
                close(pair[1]);
            }
        }
    }
    void drain_events() {
        uint8_t buf[1024];
        for (auto& agent : fds) {
            for (auto& pair : agent) {
                while (recv(pair[1], buf, sizeof(buf), MSG_DONTWAIT) > 0) {
                }
            }
        }
    }
    void check() {
        for (auto& a : agents) {
            if (a->id_count() > max_ids) {
                fail("more ids than the limit");
            }
        }
    }
};

std::vector<uint8_t> typed_command(input& in, uint32_t cmd) {
    // A command struct of the right size for `cmd`, its bytes fuzzed but its id small (so it
    // often names a real one) and its addresses often AF_INET with a VPC address.
    uint8_t body[400] = {};
    in.bytes(body, 64);
    const uint32_t id = in.u8() % 8;
    std::size_t size = 0;
    auto put_sin = [&](std::size_t at) {
        sockaddr_in sin{};
        sin.sin_family = (in.u8() & 3) == 0 ? AF_INET6 : AF_INET;
        sin.sin_port = htons(7000 + (in.u8() & 3));
        sin.sin_addr.s_addr = inet_addr("198.19.1.1") + (static_cast<uint32_t>(in.u8() & 1) << 24);
        std::memcpy(body + at, &sin, sizeof(sin));
    };
    switch (cmd % 24) {
        case RDMA_USER_CM_CMD_CREATE_ID:
            size = sizeof(rdma_ucm_create_id);
            body[16] = (in.u8() & 1) ? 0x11 : 0x06;  // ps low byte
            body[17] = 0x01;
            body[18] = (in.u8() & 1) ? IBV_QPT_UD : IBV_QPT_RC;
            break;
        case RDMA_USER_CM_CMD_BIND_IP:
            size = sizeof(rdma_ucm_bind_ip);
            put_sin(8);
            std::memcpy(body + 8 + 28, &id, 4);
            break;
        case RDMA_USER_CM_CMD_RESOLVE_IP:
            size = sizeof(rdma_ucm_resolve_ip);
            put_sin(28);
            std::memcpy(body + 56, &id, 4);
            break;
        case RDMA_USER_CM_CMD_CONNECT:
        case RDMA_USER_CM_CMD_ACCEPT: {
            size = cmd % 24 == RDMA_USER_CM_CMD_CONNECT ? sizeof(rdma_ucm_connect)
                                                        : sizeof(rdma_ucm_accept);
            const std::size_t id_at = cmd % 24 == RDMA_USER_CM_CMD_CONNECT
                                          ? offsetof(rdma_ucm_connect, id)
                                          : offsetof(rdma_ucm_accept, id);
            std::memcpy(body + id_at, &id, 4);
            const std::size_t p = cmd % 24 == RDMA_USER_CM_CMD_CONNECT
                                      ? offsetof(rdma_ucm_connect, conn_param)
                                      : offsetof(rdma_ucm_accept, conn_param);
            body[p + offsetof(rdma_ucm_conn_param, valid)] = in.u8() & 1;
            break;
        }
        default:
            size = 8 + (in.u8() % 64);
            std::memcpy(body, &id, 4);  // most commands start with or near the id
            std::memcpy(body + 8, &id, 4);
            break;
    }
    size = std::min<std::size_t>(size, sizeof(body));
    rdma_ucm_cmd_hdr h{cmd % 24, static_cast<uint16_t>(size), in.u16()};
    std::vector<uint8_t> out(sizeof(h) + size);
    std::memcpy(out.data(), &h, sizeof(h));
    std::memcpy(out.data() + sizeof(h), body, size);
    return out;
}

mad_buffer typed_message(input& in, uint32_t to_ip, uint32_t from_ip) {
    cm_message m;
    m.transaction_id = in.u32();
    const uint32_t comm = in.u32();
    const uint32_t remote = in.u32();
    switch (in.u8() % 9) {
        case 0: {
            cm_req r;
            r.local_comm_id = comm;
            r.service_id =
                service_id((in.u8() & 1) ? port_space_udp : port_space_tcp, 7000 + (in.u8() & 3));
            r.local_qpn = in.u32() & 0xFFFFFF;
            r.starting_psn = in.u32() & 0xFFFFFF;
            r.path_mtu = in.u8() & 0xF;
            r.transport = static_cast<cm_transport>(in.u8() & 3);
            write_cma_header(r.private_data, {in.u16(), (in.u8() & 1) ? from_ip : in.u32(),
                                              (in.u8() & 1) ? to_ip : in.u32()});
            m.body = r;
            break;
        }
        case 1:
            m.body = cm_mra{comm, remote, static_cast<message_kind>(in.u8() & 3), in.u8()};
            break;
        case 2: {
            cm_rej r;
            r.local_comm_id = comm;
            r.remote_comm_id = remote;
            r.reason = in.u16();
            m.body = r;
            break;
        }
        case 3: {
            cm_rep r;
            r.local_comm_id = comm;
            r.remote_comm_id = remote;
            r.local_qpn = in.u32() & 0xFFFFFF;
            m.body = r;
            break;
        }
        case 4:
            m.body = cm_rtu{comm, remote};
            break;
        case 5:
            m.body = cm_dreq{comm, remote, in.u32() & 0xFFFFFF};
            break;
        case 6:
            m.body = cm_drep{comm, remote};
            break;
        case 7: {
            cm_sidr_req r;
            r.request_id = comm;
            r.service_id = service_id(port_space_udp, 7000 + (in.u8() & 3));
            write_cma_header(r.private_data, {in.u16(), from_ip, to_ip});
            m.body = r;
            break;
        }
        default: {
            cm_sidr_rep r;
            r.request_id = comm;
            r.status = static_cast<sidr_status>(in.u8() & 3);
            r.qpn = in.u32() & 0xFFFFFF;
            m.body = r;
            break;
        }
    }
    return encode(m);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    input in(data, size);
    harness h;
    for (int ops = 0; ops < 256 && !in.done(); ++ops) {
        const uint8_t op = in.u8() % 7;
        const int a = in.u8() & 1;
        switch (op) {
            case 0:
            case 1: {
                const int c = in.u8() % clients_per_agent;
                std::vector<uint8_t> cmd;
                if (op == 0) {
                    cmd.resize(in.u16() % 600);
                    in.bytes(cmd.data(), cmd.size());
                } else {
                    cmd = typed_command(in, in.u8());
                }
                std::vector<uint8_t> option(in.u8() % 8);
                in.bytes(option.data(), option.size());
                std::vector<uint8_t> response;
                // The channel the caller proved it holds (MIGRATE_ID's source): none, or any
                // of the agent's clients, open or not.
                const uint64_t held = in.u8() % (clients_per_agent + 1);
                (void)h.agents[a]->command(c + 1, cmd, option, response, held);
                if (response.size() > 1024) {
                    fail("a response larger than any ucma struct");
                }
                break;
            }
            case 2: {
                mad_buffer m;
                in.bytes(m.data(), m.size());
                h.agents[a]->on_mad((in.u8() & 1) ? h.ips[1 - a] : inet_addr("10.1.2.3"), m);
                break;
            }
            case 3: {
                const uint32_t from = (in.u8() & 3) ? h.ips[1 - a] : inet_addr("198.19.1.99");
                h.agents[a]->on_mad(from, typed_message(in, h.ips[a], from));
                break;
            }
            case 4: {
                const uint32_t drop = in.u32();
                for (int i = 0; i < 64 && !h.wire.empty(); ++i) {
                    wire_mad w = h.wire.front();
                    h.wire.pop_front();
                    if ((drop >> (i % 32)) & 1) {
                        continue;
                    }
                    h.agents[w.to]->on_mad(w.from_ip, w.bytes);
                }
                break;
            }
            case 5:
                h.now += std::chrono::milliseconds(100 * (1 + in.u8() % 20));
                h.agents[a]->run_timers(h.now);
                break;
            case 6: {
                const int c = in.u8() % clients_per_agent;
                h.agents[a]->close_channel(c + 1);
                h.open[a][c] = false;
                break;
            }
        }
        h.check();
        h.drain_events();
    }
    // Everything closed and every retry run out: nothing may remain.
    for (int a = 0; a < 2; ++a) {
        for (int c = 0; c < clients_per_agent; ++c) {
            h.agents[a]->close_channel(c + 1);
        }
    }
    for (int round = 0; round < 40; ++round) {
        h.now += std::chrono::seconds(1);
        h.wire.clear();
        h.agents[0]->run_timers(h.now);
        h.agents[1]->run_timers(h.now);
    }
    for (auto& a : h.agents) {
        if (a->id_count() != 0) {
            fail("ids left after every channel closed");
        }
        if (a->next_deadline() != cm_agent::clock::time_point::max()) {
            fail("timers left after every channel closed");
        }
    }
    return 0;
}
