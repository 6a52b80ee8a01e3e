// cm_probe: an rdma_cm program (librdmacm, run under jakiro-run in a tenant namespace) for the
// hostile control-side suite (tests/integration/test_hostile_control.py). It is the neighbour
// that floods another vNIC's rdma_cm agent with requests through its own, and the victim's
// applications that the flood must not hurt. No QP is ever made: the requests carry a made-up
// QP number, which is all an agent looks at. Each command prints its verdict as its last line.
//
//   cm_probe sidr-flood IP PORT N          N UD ids each send a SIDR_REQ to IP:PORT and are
//                                          left waiting: "sent K"
//   cm_probe listen-ud PORT SECONDS        a UD listener whose application takes no request:
//                                          after SECONDS "requests R"
//   cm_probe create-ids N                  N ids at once: "created N", or "created K ERRNO"
//   cm_probe migrate-own                   rdma_migrate_id of a listening id to a second channel
//                                          of its own: "migrated own", or "refused ERRNO"
//   cm_probe req-flood IP PORT N SECONDS   keeps N REQs outstanding to ports PORT..PORT+N-1 of
//                                          IP, where nobody listens, for SECONDS: "sent K"
//   cm_probe dial IP PORT                  "dialing", then one connection attempt:
//                                          "established", "rejected STATUS" or "no-answer"
//   cm_probe accept-on-cue PORT            binds PORT, says "ready", listens once a line comes
//                                          on stdin, accepts one request: "accepted" (once
//                                          established), "not-established" or "no-request"
//
// Exit status 0 when the command ran (whatever the verdict), 2 on bad usage, 1 when the
// device could not be used at all.

#include <arpa/inet.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

sockaddr_in address(const char* ip, int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (ip != nullptr) {
        inet_pton(AF_INET, ip, &a.sin_addr);
    }
    return a;
}

// The next event of `ch` within `ms`; nullptr on timeout. The caller acks it.
rdma_cm_event* next_event(rdma_event_channel* ch, int ms) {
    pollfd p{ch->fd, POLLIN, 0};
    if (poll(&p, 1, ms) != 1) {
        return nullptr;
    }
    rdma_cm_event* e = nullptr;
    return rdma_get_cm_event(ch, &e) == 0 ? e : nullptr;
}

// Waits for `wanted` on `id`; events of other ids meanwhile go to `others` (event, id).
bool wait_for(rdma_event_channel* ch, rdma_cm_id* id, rdma_cm_event_type wanted,
              std::vector<std::pair<rdma_cm_event_type, rdma_cm_id*>>* others = nullptr) {
    const auto until = clock_type::now() + std::chrono::seconds(5);
    while (clock_type::now() < until) {
        rdma_cm_event* e = next_event(ch, 100);
        if (e == nullptr) {
            continue;
        }
        const auto type = e->event;
        rdma_cm_id* of = e->id;
        rdma_ack_cm_event(e);
        if (of == id && type == wanted) {
            return true;
        }
        if (of == id) {
            return false;
        }
        if (others != nullptr) {
            others->emplace_back(type, of);
        }
    }
    return false;
}

// A fresh id resolved to ip:port (address and route), or nullptr.
rdma_cm_id* resolved(rdma_event_channel* ch, const char* ip, int port, rdma_port_space ps,
                     std::vector<std::pair<rdma_cm_event_type, rdma_cm_id*>>* others = nullptr) {
    rdma_cm_id* id = nullptr;
    if (rdma_create_id(ch, &id, nullptr, ps) != 0) {
        return nullptr;
    }
    sockaddr_in dst = address(ip, port);
    if (rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&dst), 2000) != 0 ||
        !wait_for(ch, id, RDMA_CM_EVENT_ADDR_RESOLVED, others) ||
        rdma_resolve_route(id, 2000) != 0 ||
        !wait_for(ch, id, RDMA_CM_EVENT_ROUTE_RESOLVED, others)) {
        rdma_destroy_id(id);
        return nullptr;
    }
    return id;
}

rdma_conn_param made_up(uint32_t qp_num) {
    rdma_conn_param p{};
    p.qp_num = qp_num;
    p.responder_resources = 1;
    p.initiator_depth = 1;
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    return p;
}

int sidr_flood(const char* ip, int port, int n) {
    rdma_event_channel* ch = rdma_create_event_channel();
    if (ch == nullptr) {
        std::printf("no-device %s\n", strerrorname_np(errno));
        return 1;
    }
    int sent = 0;
    std::vector<rdma_cm_id*> ids;
    for (int i = 0; i < n; ++i) {
        rdma_cm_id* id = resolved(ch, ip, port, RDMA_PS_UDP);
        if (id == nullptr) {
            break;
        }
        rdma_conn_param p = made_up(static_cast<uint32_t>(0x100 + i));
        if (rdma_connect(id, &p) == 0) {
            ++sent;
        }
        ids.push_back(id);
    }
    // Let the requests leave before the ids go (the process's end destroys them).
    sleep(1);
    std::printf("sent %d\n", sent);
    return 0;
}

int listen_ud(int port, int seconds) {
    rdma_event_channel* ch = rdma_create_event_channel();
    rdma_cm_id* id = nullptr;
    sockaddr_in any = address(nullptr, port);
    if (ch == nullptr || rdma_create_id(ch, &id, nullptr, RDMA_PS_UDP) != 0 ||
        rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&any)) != 0 || rdma_listen(id, 1024) != 0) {
        std::printf("no-listener %s\n", strerrorname_np(errno));
        return 1;
    }
    std::printf("listening\n");
    std::fflush(stdout);
    int requests = 0;
    const auto until = clock_type::now() + std::chrono::seconds(seconds);
    while (clock_type::now() < until) {
        rdma_cm_event* e = next_event(ch, 100);
        if (e != nullptr) {
            requests += e->event == RDMA_CM_EVENT_CONNECT_REQUEST;
            rdma_ack_cm_event(e);  // acknowledged, never answered
        }
    }
    std::printf("requests %d\n", requests);
    return 0;
}

int create_ids(int n) {
    rdma_event_channel* ch = rdma_create_event_channel();
    if (ch == nullptr) {
        std::printf("no-device %s\n", strerrorname_np(errno));
        return 1;
    }
    int created = 0;
    for (; created < n; ++created) {
        rdma_cm_id* id = nullptr;
        if (rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0) {
            std::printf("created %d %s\n", created, strerrorname_np(errno));
            return 0;
        }
    }
    std::printf("created %d\n", created);
    return 0;
}

int migrate_own() {
    rdma_event_channel* from = rdma_create_event_channel();
    rdma_event_channel* to = rdma_create_event_channel();
    rdma_cm_id* id = nullptr;
    sockaddr_in any = address(nullptr, 0);
    if (from == nullptr || to == nullptr || rdma_create_id(from, &id, nullptr, RDMA_PS_TCP) != 0 ||
        rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&any)) != 0 || rdma_listen(id, 4) != 0) {
        std::printf("no-listener %s\n", strerrorname_np(errno));
        return 1;
    }
    if (rdma_migrate_id(id, to) != 0) {
        std::printf("refused %s\n", strerrorname_np(errno));
        return 0;
    }
    std::printf(id->channel == to ? "migrated own\n" : "refused not-moved\n");
    return 0;
}

int req_flood(const char* ip, int port, int n, int seconds) {
    rdma_event_channel* ch = rdma_create_event_channel();
    if (ch == nullptr) {
        std::printf("no-device %s\n", strerrorname_np(errno));
        return 1;
    }
    int sent = 0;
    std::map<rdma_cm_id*, int> outstanding;  // id -> its port
    std::vector<std::pair<rdma_cm_event_type, rdma_cm_id*>> ended;
    auto dial = [&](int p) {
        rdma_cm_id* id = resolved(ch, ip, p, RDMA_PS_TCP, &ended);
        rdma_conn_param param = made_up(static_cast<uint32_t>(0x200 + sent % 0x1000));
        if (id != nullptr && rdma_connect(id, &param) == 0) {
            outstanding[id] = p;
            ++sent;
        } else if (id != nullptr) {
            rdma_destroy_id(id);
        }
    };
    for (int i = 0; i < n; ++i) {
        dial(port + i);
    }
    const auto until = clock_type::now() + std::chrono::seconds(seconds);
    while (clock_type::now() < until) {
        if (rdma_cm_event* e = next_event(ch, 10)) {
            ended.emplace_back(e->event, e->id);
            rdma_ack_cm_event(e);
        }
        // A REQ that was answered (REJ: nobody listens) is replaced by a new one, so that N
        // always wait at the victim.
        auto answered = std::move(ended);
        ended.clear();
        for (const auto& [type, id] : answered) {
            const auto it = outstanding.find(id);
            if (it == outstanding.end()) {
                continue;
            }
            const int p = it->second;
            outstanding.erase(it);
            rdma_destroy_id(id);
            dial(p);
        }
    }
    std::printf("sent %d\n", sent);
    return 0;
}

int dial(const char* ip, int port) {
    rdma_event_channel* ch = rdma_create_event_channel();
    rdma_cm_id* id = ch != nullptr ? resolved(ch, ip, port, RDMA_PS_TCP) : nullptr;
    if (id == nullptr) {
        std::printf("no-route %s\n", strerrorname_np(errno));
        return 1;
    }
    rdma_conn_param p = made_up(0x77);
    std::printf("dialing\n");
    std::fflush(stdout);
    if (rdma_connect(id, &p) != 0) {
        std::printf("refused %s\n", strerrorname_np(errno));
        return 0;
    }
    rdma_cm_event* e = next_event(ch, 5000);
    if (e == nullptr) {
        std::printf("no-answer\n");
        return 0;
    }
    const auto type = e->event;
    const int status = e->status;
    rdma_ack_cm_event(e);
    if (type == RDMA_CM_EVENT_CONNECT_RESPONSE) {
        if (rdma_establish(id) == 0) {
            std::printf("established\n");
        } else {
            std::printf("not-established %s\n", strerrorname_np(errno));
        }
    } else if (type == RDMA_CM_EVENT_ESTABLISHED) {
        std::printf("established\n");
    } else if (type == RDMA_CM_EVENT_REJECTED) {
        std::printf("rejected %d\n", status);
    } else {
        std::printf("event %s %d\n", rdma_event_str(type), status);
    }
    std::fflush(stdout);
    sleep(1);  // the connection stays a moment: the acceptor sees it established first
    return 0;
}

int accept_on_cue(int port) {
    rdma_event_channel* ch = rdma_create_event_channel();
    rdma_cm_id* id = nullptr;
    sockaddr_in any = address(nullptr, port);
    if (ch == nullptr || rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP) != 0 ||
        rdma_bind_addr(id, reinterpret_cast<sockaddr*>(&any)) != 0) {
        std::printf("no-bind %s\n", strerrorname_np(errno));
        return 1;
    }
    std::printf("ready\n");
    std::fflush(stdout);
    char line[16];
    if (std::fgets(line, sizeof(line), stdin) == nullptr || rdma_listen(id, 4) != 0) {
        std::printf("no-listen\n");
        return 1;
    }
    rdma_cm_event* e = next_event(ch, 5000);
    if (e == nullptr || e->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
        if (e != nullptr) {
            rdma_ack_cm_event(e);
        }
        std::printf("no-request\n");
        return 0;
    }
    rdma_cm_id* child = e->id;
    rdma_ack_cm_event(e);
    rdma_conn_param p = made_up(0x88);
    if (rdma_accept(child, &p) != 0) {
        std::printf("refused %s\n", strerrorname_np(errno));
        return 0;
    }
    // Accepted once the dialer's RTU says so; the connection then stays a moment, so that
    // this end's goodbye (a DREQ) never overtakes the dialer's own view of it.
    e = next_event(ch, 5000);
    const bool established = e != nullptr && e->event == RDMA_CM_EVENT_ESTABLISHED;
    if (e != nullptr) {
        rdma_ack_cm_event(e);
    }
    std::printf(established ? "accepted\n" : "not-established\n");
    std::fflush(stdout);
    sleep(1);
    return 0;
}

int usage() {
    std::fprintf(stderr,
                 "usage: cm_probe sidr-flood IP PORT N | listen-ud PORT SECONDS | create-ids N |\n"
                 "       migrate-own | req-flood IP PORT N SECONDS | dial IP PORT |\n"
                 "       accept-on-cue PORT\n");
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    if (argc < 2) {
        return usage();
    }
    const std::string cmd = argv[1];
    if (cmd == "sidr-flood" && argc == 5) {
        return sidr_flood(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
    }
    if (cmd == "listen-ud" && argc == 4) {
        return listen_ud(std::atoi(argv[2]), std::atoi(argv[3]));
    }
    if (cmd == "create-ids" && argc == 3) {
        return create_ids(std::atoi(argv[2]));
    }
    if (cmd == "migrate-own" && argc == 2) {
        return migrate_own();
    }
    if (cmd == "req-flood" && argc == 6) {
        return req_flood(argv[2], std::atoi(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]));
    }
    if (cmd == "dial" && argc == 4) {
        return dial(argv[2], std::atoi(argv[3]));
    }
    if (cmd == "accept-on-cue" && argc == 3) {
        return accept_on_cue(std::atoi(argv[2]));
    }
    return usage();
}
