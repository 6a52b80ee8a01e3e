#pragma once
// One connection of a tenant process to a vNIC's endpoint with its rdma_cm channel, speaking
// the channel server's rdma_cm face (verbs_abi/cm_protocol.hh) raw, as librdmacm's commands
// reach it through the shim: for tests that drive ucma commands and read the events.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_user_cm.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <vector>

#include "verbs_abi/cm_protocol.hh"
#include "verbs_abi/fd_passing.hh"
#include "verbs_abi/protocol.hh"

namespace jakiro::verbs::test {

namespace proto = verbs_proto;

// One connection of a tenant process to the vNIC's endpoint, with its rdma_cm channel.
struct cm_connection {
    int fd = -1;      // the verbs connection (commands)
    int events = -1;  // the channel's event socket, as the shim hands it to the program
    uint32_t next_request = 1;

    ~cm_connection() {
        for (const int f : {fd, events}) {
            if (f >= 0) {
                close(f);
            }
        }
    }

    struct answer {
        int status = -1;
        std::vector<uint8_t> response;  // the ucma response struct
        int fd = -1;
    };

    // Sends `bytes` (with `passed` when >= 0) and reads the reply, up to two seconds.
    answer ask(const std::vector<uint8_t>& bytes, int passed = -1) {
        answer a;
        if (proto::send_with_fd(fd, bytes.data(), bytes.size(), passed, MSG_NOSIGNAL) !=
            static_cast<ssize_t>(bytes.size())) {
            return a;
        }
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 2000) != 1) {
            return a;
        }
        std::array<uint8_t, 2048> buf{};
        iovec iov{buf.data(), buf.size()};
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
        msghdr msg{};
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control;
        msg.msg_controllen = sizeof(control);
        const ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
        for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
            if (c->cmsg_type == SCM_RIGHTS) {
                std::memcpy(&a.fd, CMSG_DATA(c), sizeof(int));
            }
        }
        if (n < static_cast<ssize_t>(sizeof(cm_proto::reply_header))) {
            return a;
        }
        cm_proto::reply_header rh{};
        std::memcpy(&rh, buf.data(), sizeof(rh));
        a.status = rh.status;
        if (n > static_cast<ssize_t>(sizeof(cm_proto::ucma_reply))) {
            a.response.assign(buf.begin() + sizeof(cm_proto::ucma_reply), buf.begin() + n);
        }
        return a;
    }

    cm_proto::header header(cm_proto::opcode op, std::size_t length) {
        cm_proto::header h{};
        h.magic = cm_proto::magic;
        h.version = cm_proto::version;
        h.opcode = static_cast<uint16_t>(op);
        h.length = static_cast<uint32_t>(length);
        h.request_id = next_request++;
        return h;
    }

    // HELLO, then open_channel: true when both were answered and the event socket came.
    bool open() {
        auto hello = proto::make_message<proto::hello_request>(
            static_cast<uint16_t>(proto::opcode::hello), next_request++);
        std::vector<uint8_t> h(sizeof(hello));
        std::memcpy(h.data(), &hello, sizeof(hello));
        const answer ha = ask(h);
        if (ha.fd >= 0) {
            close(ha.fd);  // the verbs async channel: not this test's business
        }
        if (ha.status != 0) {
            return false;
        }
        const cm_proto::header oc = header(cm_proto::opcode::open_channel, sizeof(oc));
        std::vector<uint8_t> o(sizeof(oc));
        std::memcpy(o.data(), &oc, sizeof(oc));
        const answer oa = ask(o);
        events = oa.fd;
        return oa.status == 0 && events >= 0;
    }

    // One ucma command as librdmacm writes it to the device; `passed` goes with it.
    template <typename Command>
    answer ucma(uint32_t cmd, const Command& body, int passed = -1) {
        rdma_ucm_cmd_hdr ch{cmd, sizeof(Command), 512};
        const std::size_t size = sizeof(cm_proto::ucma_request) + sizeof(ch) + sizeof(body);
        cm_proto::ucma_request q{};
        q.hdr = header(cm_proto::opcode::ucma, size);
        q.command_bytes = sizeof(ch) + sizeof(body);
        std::vector<uint8_t> bytes(size);
        std::memcpy(bytes.data(), &q, sizeof(q));
        std::memcpy(bytes.data() + sizeof(q), &ch, sizeof(ch));
        std::memcpy(bytes.data() + sizeof(q) + sizeof(ch), &body, sizeof(body));
        return ask(bytes, passed);
    }

    // A listening id on `port`; 0 on failure.
    uint32_t listener(uint16_t port) {
        rdma_ucm_create_id c{};
        c.ps = RDMA_PS_TCP;
        c.qp_type = IBV_QPT_RC;
        const answer created = ucma(RDMA_USER_CM_CMD_CREATE_ID, c);
        rdma_ucm_create_id_resp r{};
        if (created.status != 0 || created.response.size() < sizeof(r)) {
            return 0;
        }
        std::memcpy(&r, created.response.data(), sizeof(r));
        rdma_ucm_bind_ip b{};
        b.id = r.id;
        sockaddr_in sin{};
        sin.sin_family = AF_INET;
        sin.sin_port = htons(port);
        std::memcpy(&b.addr, &sin, sizeof(sin));
        rdma_ucm_listen l{r.id, 8};
        return ucma(RDMA_USER_CM_CMD_BIND_IP, b).status == 0 &&
                       ucma(RDMA_USER_CM_CMD_LISTEN, l).status == 0
                   ? r.id
                   : 0;
    }

    int query(uint32_t id) {
        rdma_ucm_query q{};
        q.id = id;
        q.option = RDMA_USER_CM_QUERY_ADDR;
        return ucma(RDMA_USER_CM_CMD_QUERY, q).status;
    }

    int migrate(uint32_t id, uint32_t fd_field, int passed = -1) {
        rdma_ucm_migrate_id m{};
        m.id = id;
        m.fd = fd_field;
        return ucma(RDMA_USER_CM_CMD_MIGRATE_ID, m, passed).status;
    }
};

}  // namespace jakiro::verbs::test
