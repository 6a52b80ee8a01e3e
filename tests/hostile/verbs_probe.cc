// verbs_probe: a hostile tenant's client of jakirod's RDMA face, written against the socket
// protocol (verbs_abi/protocol.hh) directly, without the shim, as an attacker would. The
// hostile-tenant integration suite (tests/integration/test_hostile_tenant.py) runs it inside
// tenant namespaces; each command prints one line that the test reads.
//
//   verbs_probe hello ADDRESS            connect, HELLO: "vnic NAME" or "refused ERRNO-NAME"
//   verbs_probe hold ADDRESS N SECONDS   open N connections, never say HELLO; after SECONDS
//                                        print "open K" (how many jakirod still keeps open)
//   verbs_probe doorbell ADDRESS         create a QP, print "doorbell DEV:INODE" of its page
//   verbs_probe create-qp-timed ADDRESS  create a QP, waiting for every answer: "qp status S
//                                        after MS ms"
//   verbs_probe leave-then-hello ADDRESS connect, move to a new network namespace, then HELLO
//   verbs_probe reg-mr ADDRESS KIND      register 2 MiB of memory of KIND (shmem: a sealed memfd,
//                                        as the shim sends; hugetlb: a sealed MFD_HUGETLB memfd;
//                                        unsealed: a memfd without F_SEAL_SHRINK; file: a file
//                                        on disk; pipe), punch a hole under it if registered,
//                                        HELLO again: "registered alive", "refused ERRNO-NAME"
//   verbs_probe reg-many ADDRESS COUNT SECONDS
//                                        register up to COUNT one-page MRs: "registered K" and
//                                        " refused ERRNO-NAME" if one was; then "holding", and
//                                        keep them SECONDS
//   verbs_probe pin-mrs ADDRESS PEER_IP ROUNDS SECONDS
//                                        an RC QP to a QP that does not exist at PEER_IP
//                                        (local ACK timeout 0: its first WR never completes),
//                                        then ROUNDS times: register MRs until refused, post
//                                        WQEs naming every one behind that WR, deregister them.
//                                        "rounds R registered N" and " refused ERRNO-NAME" if a
//                                        registration was; then "holding", SECONDS
//   verbs_probe resize-cq ADDRESS behind|honest SECONDS
//                                        a CQ of 65536 entries resized again and again for
//                                        SECONDS, keeping a page of every old ring mapped (and
//                                        its memfd); `behind`: its consumer index set a whole
//                                        ring behind before each resize. "resized K refused R
//                                        slowest_ms T old_rings_bytes B" (B: what the old
//                                        rings' memfds still hold)
//   verbs_probe cm-steal ADDRESS MAX SECONDS
//                                        open an rdma_cm channel and send MIGRATE_ID for every
//                                        channel number and id up to MAX, without the source
//                                        channel's descriptor (which only its holder has):
//                                        "migrated K"; then count the events that reach this
//                                        channel for SECONDS: "events E"
//   verbs_probe cm-migrate-own ADDRESS   two channels of its own, a listening id on the first,
//                                        MIGRATE_ID to the second with the first's event socket
//                                        (what the shim sends): "migrated own", or "refused ..."
//
// ADDRESS is "@abstract-name" or a path (verbs_abi/endpoint_address.hh). Exit status 0 when
// the command ran (whatever jakirod answered), 2 on bad usage.

#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_user_cm.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "verbs_abi/cm_protocol.hh"
#include "verbs_abi/endpoint_address.hh"
#include "verbs_abi/fd_passing.hh"
#include "verbs_abi/protocol.hh"
#include "verbs_abi/qp_attr_wire.hh"
#include "verbs_abi/rings.hh"

namespace {

namespace proto = jakiro::verbs_proto;

int connect_to(const char* where) {
    sockaddr_un addr{};
    socklen_t len = 0;
    if (!jakiro::verbs_endpoint::to_sockaddr(where, addr, len)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
        const int e = errno;
        if (fd >= 0) {
            close(fd);
        }
        errno = e;
        return -1;
    }
    return fd;
}

// One reply (and up to two descriptors), waiting up to two seconds; size -1 on timeout,
// 0 when jakirod closed the connection.
struct reply {
    ssize_t size = -1;
    std::array<std::byte, proto::max_message_size> bytes{};
    std::array<int, 2> fds{-1, -1};
    int error = 0;  // errno when size is -1
    int status() const {
        proto::reply_header r{};
        std::memcpy(&r, bytes.data(), sizeof(r));
        return r.status;
    }
};

reply call(int fd, const void* request, std::size_t size, int passed_fd = -1, int wait_ms = 2000) {
    reply r;
    if (jakiro::verbs_proto::send_with_fd(fd, request, size, passed_fd, MSG_NOSIGNAL) !=
        static_cast<ssize_t>(size)) {
        r.error = errno;
        return r;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, wait_ms) != 1) {
        r.error = ETIMEDOUT;
        return r;
    }
    iovec iov{r.bytes.data(), r.bytes.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 2)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    r.size = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    r.error = r.size < 0 ? errno : 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_type == SCM_RIGHTS) {
            const std::size_t n =
                std::min<std::size_t>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int), 2);
            std::memcpy(r.fds.data(), CMSG_DATA(c), n * sizeof(int));
        }
    }
    return r;
}

// "vnic NAME" after a HELLO, or "refused ..." with why.
bool say_hello(int fd) {
    auto h =
        proto::make_message<proto::hello_request>(static_cast<uint16_t>(proto::opcode::hello), 1);
    h.pid = static_cast<uint32_t>(getpid());
    const reply r = call(fd, &h, sizeof(h));
    if (r.size <= 0) {
        // Closed by jakirod: EOF, or ECONNRESET when our request was still unread.
        const bool closed = r.size == 0 || r.error == ECONNRESET || r.error == EPIPE;
        std::printf("refused %s\n", closed ? "closed" : "no-answer");
        return false;
    }
    if (r.status() != 0) {
        std::printf("refused status %d\n", r.status());
        return false;
    }
    proto::hello_reply reply{};
    std::memcpy(&reply, r.bytes.data(), sizeof(reply));
    std::printf("vnic %.*s\n", static_cast<int>(sizeof(reply.vnic_name)), reply.vnic_name);
    return true;
}

int hello(const char* where) {
    const int fd = connect_to(where);
    if (fd < 0) {
        std::printf("refused %s\n", strerrorname_np(errno));
        return 0;
    }
    say_hello(fd);
    close(fd);
    return 0;
}

int hold(const char* where, int count, int seconds) {
    std::vector<int> fds;
    int refused = 0;
    for (int i = 0; i < count; ++i) {
        const int fd = connect_to(where);
        if (fd < 0) {
            ++refused;
            continue;
        }
        fds.push_back(fd);
    }
    std::this_thread::sleep_for(std::chrono::seconds(seconds));
    // A connection jakirod closed (over the vNIC's limit, or HELLO never came) reads EOF.
    int open = 0;
    for (const int fd : fds) {
        pollfd p{fd, POLLIN, 0};
        char byte;
        const bool closed = poll(&p, 1, 0) == 1 && recv(fd, &byte, 1, MSG_DONTWAIT) == 0;
        open += closed ? 0 : 1;
    }
    std::printf("open %d connect-refused %d\n", open, refused);
    std::fflush(stdout);
    for (const int fd : fds) {
        close(fd);
    }
    return 0;
}

int doorbell(const char* where, bool patient = false) {
    const int fd = connect_to(where);
    if (fd < 0 || !say_hello(fd)) {
        std::printf("doorbell none\n");
        return 0;
    }
    // Patient: every reply is waited for (up to 20 s), and the QP's is timed.
    const int wait_ms = patient ? 20000 : 2000;
    auto pd = proto::make_message<proto::alloc_pd_request>(
        static_cast<uint16_t>(proto::opcode::alloc_pd), 2);
    const reply p = call(fd, &pd, sizeof(pd), -1, wait_ms);
    proto::alloc_pd_reply pr{};
    std::memcpy(&pr, p.bytes.data(), sizeof(pr));
    auto cq = proto::make_message<proto::create_cq_request>(
        static_cast<uint16_t>(proto::opcode::create_cq), 3);
    cq.cqe = 16;
    const reply c = call(fd, &cq, sizeof(cq), -1, wait_ms);
    proto::create_cq_reply cr{};
    std::memcpy(&cr, c.bytes.data(), sizeof(cr));
    auto qp = proto::make_message<proto::create_qp_request>(
        static_cast<uint16_t>(proto::opcode::create_qp), 4);
    qp.pd_handle = pr.pd_handle;
    qp.send_cq = cr.cq_handle;
    qp.recv_cq = cr.cq_handle;
    qp.max_send_wr = 4;
    qp.max_recv_wr = 4;
    qp.max_send_sge = 1;
    qp.max_recv_sge = 1;
    qp.qp_type = proto::qpt_rc;
    const auto asked = std::chrono::steady_clock::now();
    const reply q = call(fd, &qp, sizeof(qp), -1, wait_ms);
    if (patient) {
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - asked)
                            .count();
        std::printf("qp status %d after %lld ms\n", q.size > 0 ? q.status() : -1,
                    static_cast<long long>(ms));
        close(fd);
        return 0;
    }
    struct stat st {};
    if (q.size <= 0 || q.status() != 0 || q.fds[1] < 0 || fstat(q.fds[1], &st) != 0) {
        std::printf("doorbell none status %d\n", q.size > 0 ? q.status() : -1);
    } else {
        std::printf("doorbell %lu:%lu\n", static_cast<unsigned long>(st.st_dev),
                    static_cast<unsigned long>(st.st_ino));
    }
    close(fd);
    return 0;
}

int leave_then_hello(const char* where) {
    const int fd = connect_to(where);
    if (fd < 0) {
        std::printf("refused %s\n", strerrorname_np(errno));
        return 0;
    }
    if (unshare(CLONE_NEWNET) != 0) {
        std::printf("unshare failed %s\n", strerrorname_np(errno));
        return 0;
    }
    say_hello(fd);
    close(fd);
    return 0;
}

// The memory a hostile tenant hands jakirod for an MR, `bytes` long; -1 if it cannot be made.
int memory_of_kind(const std::string& kind, std::size_t bytes) {
    if (kind == "pipe") {
        int p[2];
        return pipe2(p, O_CLOEXEC) == 0 ? p[0] : -1;
    }
    int fd = -1;
    if (kind == "file") {
        char path[] = "/var/tmp/verbs-probe-XXXXXX";
        fd = mkstemp(path);
        if (fd >= 0) {
            unlink(path);
        }
    } else {
        const unsigned flags =
            MFD_CLOEXEC | MFD_ALLOW_SEALING | (kind == "hugetlb" ? MFD_HUGETLB : 0);
        fd = memfd_create("verbs-probe", flags);
    }
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
        return -1;
    }
    if ((kind == "shmem" || kind == "hugetlb") && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0) {
        return -1;
    }
    return fd;
}

int reg_mr(const char* where, const std::string& kind) {
    constexpr std::size_t bytes = 2 << 20;  // one huge page
    const int fd = connect_to(where);
    if (fd < 0 || !say_hello(fd)) {
        std::printf("refused no-session\n");
        return 0;
    }
    const int memory = memory_of_kind(kind, bytes);
    if (memory < 0) {
        std::printf("cannot-make %s %s\n", kind.c_str(), strerrorname_np(errno));
        return 0;
    }
    auto pd = proto::make_message<proto::alloc_pd_request>(
        static_cast<uint16_t>(proto::opcode::alloc_pd), 2);
    const reply p = call(fd, &pd, sizeof(pd));
    proto::alloc_pd_reply pr{};
    std::memcpy(&pr, p.bytes.data(), sizeof(pr));
    auto mr =
        proto::make_message<proto::reg_mr_request>(static_cast<uint16_t>(proto::opcode::reg_mr), 3);
    mr.pd_handle = pr.pd_handle;
    mr.access = proto::mr_access_all;
    mr.addr = mr.iova = 0x10000000;
    mr.length = bytes;
    const reply m = call(fd, &mr, sizeof(mr), memory);
    if (m.size <= 0) {
        std::printf("refused closed\n");
    } else if (m.status() != 0) {
        std::printf("refused %s\n", strerrorname_np(m.status()));
    } else {
        // Registered: take the memory back from under jakirod's mapping, then check that
        // jakirod still answers.
        fallocate(memory, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, bytes);
        const int again = connect_to(where);
        const bool alive = again >= 0 && [&] {
            auto h = proto::make_message<proto::hello_request>(
                static_cast<uint16_t>(proto::opcode::hello), 1);
            h.pid = static_cast<uint32_t>(getpid());
            const reply r = call(again, &h, sizeof(h));
            return r.size > 0 && r.status() == 0;
        }();
        std::printf("registered %s\n", alive ? "alive" : "dead");
        if (again >= 0) {
            close(again);
        }
    }
    close(memory);
    close(fd);
    return 0;
}

// ---- the memory a tenant makes jakirod hold

// A connection that said HELLO, or -1 (the reason printed).
int session(const char* where) {
    const int fd = connect_to(where);
    if (fd < 0 || !say_hello(fd)) {
        std::printf("refused no-session\n");
        return -1;
    }
    return fd;
}

uint16_t next_request_id = 100;

template <typename Request>
Request request(proto::opcode op) {
    return proto::make_message<Request>(static_cast<uint16_t>(op), next_request_id++);
}

template <typename Reply>
Reply reply_of(const reply& r) {
    Reply out{};
    std::memcpy(&out, r.bytes.data(), std::min<std::size_t>(sizeof(out), r.bytes.size()));
    return out;
}

// -1 when jakirod did not answer, else the reply's status (0 or an errno).
int status_of(const reply& r) {
    return r.size <= 0 ? -1 : r.status();
}

const char* errno_name(int status) {
    return status < 0 ? "no-answer" : strerrorname_np(status);
}

uint32_t alloc_pd(int fd) {
    auto pd = request<proto::alloc_pd_request>(proto::opcode::alloc_pd);
    return reply_of<proto::alloc_pd_reply>(call(fd, &pd, sizeof(pd))).pd_handle;
}

// One page of a sealed shmem memfd, as the shim hands it over.
int one_page_memfd() {
    const int fd = memfd_create("verbs-probe", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, 4096) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0) {
        return -1;
    }
    return fd;
}

// Registers one page of `memory` (every MR at offset 0: each is a mapping of its own in
// jakirod). 0 and the key, or the status.
int reg_page(int fd, uint32_t pd, int memory, uint32_t& key) {
    auto mr = request<proto::reg_mr_request>(proto::opcode::reg_mr);
    mr.pd_handle = pd;
    mr.access = proto::access_local_write;
    mr.addr = mr.iova = 0x10000000;
    mr.length = 4096;
    const reply r = call(fd, &mr, sizeof(mr), memory);
    key = reply_of<proto::reg_mr_reply>(r).lkey;
    return status_of(r);
}

int dereg(int fd, uint32_t key) {
    auto d = request<proto::destroy_request>(proto::opcode::dereg_mr);
    d.handle = key;
    return status_of(call(fd, &d, sizeof(d)));
}

int reg_many(const char* where, int count, int seconds) {
    const int fd = session(where);
    const int memory = one_page_memfd();
    if (fd < 0 || memory < 0) {
        return 0;
    }
    const uint32_t pd = alloc_pd(fd);
    int registered = 0, status = 0;
    uint32_t key = 0;
    while (registered < count && (status = reg_page(fd, pd, memory, key)) == 0) {
        ++registered;
    }
    std::printf("registered %d", registered);
    if (status != 0) {
        std::printf(" refused %s", errno_name(status));
    }
    std::printf("\nholding\n");
    std::this_thread::sleep_for(std::chrono::seconds(seconds));
    close(fd);
    return 0;
}

int modify(int fd, uint32_t qp, const ibv_qp_attr& attr, int mask) {
    auto m = request<proto::modify_qp_request>(proto::opcode::modify_qp);
    m.qp_handle = qp;
    m.attr_mask = mask;
    m.attr = proto::to_wire(attr);
    return status_of(call(fd, &m, sizeof(m)));
}

// An RC QP connected to a QP number nobody has at `peer`, with no local ACK timeout: the first
// WR posted is never acknowledged, so it and every WR behind it stay outstanding.
struct stuck_qp {
    proto::qp_ring_header* ring = nullptr;
    proto::doorbell_page* doorbell = nullptr;
    uint32_t capacity = 0;
    uint32_t posted = 0;
    uint32_t qp_num = 0;

    bool post(const proto::send_wqe& w) {
        if (posted == capacity) {
            return false;
        }
        proto::sq_slots(ring)[posted & (capacity - 1)] = w;
        proto::publish_wqes(ring->sq_producer, ++posted);
        return true;
    }
    void wake() const {
        proto::ring_doorbell(*doorbell, qp_num);  // whether or not it is parked
        proto::wake_doorbell(*doorbell);          // and whether or not the worker sleeps
        std::this_thread::sleep_for(std::chrono::milliseconds(30));  // it takes them
    }
};

// 0 and `out`, or why not (printed).
int open_stuck_qp(int fd, uint32_t pd, uint32_t cq, in_addr peer, stuck_qp& out) {
    auto qp = request<proto::create_qp_request>(proto::opcode::create_qp);
    qp.pd_handle = pd;
    qp.send_cq = qp.recv_cq = cq;
    qp.max_send_wr = 4096;  // max_qp_wr
    qp.max_recv_wr = 1;
    qp.max_send_sge = proto::wqe_max_sge;
    qp.max_recv_sge = 1;
    qp.qp_type = proto::qpt_rc;
    const reply q = call(fd, &qp, sizeof(qp));
    const auto qp_reply = reply_of<proto::create_qp_reply>(q);
    if (status_of(q) != 0 || q.fds[0] < 0 || q.fds[1] < 0) {
        std::printf("no-qp %s\n", errno_name(status_of(q)));
        return -1;
    }
    out.ring = static_cast<proto::qp_ring_header*>(
        mmap(nullptr, qp_reply.ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, q.fds[0], 0));
    out.doorbell = static_cast<proto::doorbell_page*>(
        mmap(nullptr, proto::doorbell_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, q.fds[1], 0));
    close(q.fds[0]);
    close(q.fds[1]);
    if (out.ring == MAP_FAILED || out.doorbell == MAP_FAILED) {
        std::printf("no-ring\n");
        return -1;
    }
    out.capacity = qp_reply.sq_capacity;
    out.qp_num = qp_reply.qp_handle;
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = 1;
    int status = modify(fd, qp_reply.qp_handle, attr,
                        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    attr = {};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = IBV_MTU_1024;
    attr.dest_qp_num = 0xABCD00;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer = 1;
    attr.ah_attr.is_global = 1;
    attr.ah_attr.port_num = 1;
    attr.ah_attr.grh.dgid.raw[10] = 0xff;
    attr.ah_attr.grh.dgid.raw[11] = 0xff;
    std::memcpy(attr.ah_attr.grh.dgid.raw + 12, &peer, 4);
    status = status != 0
                 ? status
                 : modify(fd, qp_reply.qp_handle, attr,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    attr = {};
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = 0;
    attr.retry_cnt = 7;
    attr.rnr_retry = 7;
    attr.max_rd_atomic = 1;
    status = status != 0 ? status
                         : modify(fd, qp_reply.qp_handle, attr,
                                  IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                      IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
    if (status != 0) {
        std::printf("no-connection %s\n", errno_name(status));
        return -1;
    }
    proto::send_wqe first{};
    first.opcode = IBV_WR_SEND;
    first.send_flags = IBV_SEND_SIGNALED;
    out.post(first);
    out.wake();
    return 0;
}

int pin_mrs(const char* where, const char* peer, int rounds, int seconds) {
    const int fd = session(where);
    const int memory = one_page_memfd();
    in_addr peer_ip{};
    if (fd < 0 || memory < 0 || inet_pton(AF_INET, peer, &peer_ip) != 1) {
        return 0;
    }
    const uint32_t pd = alloc_pd(fd);
    auto cq = request<proto::create_cq_request>(proto::opcode::create_cq);
    cq.cqe = 16;
    const uint32_t cq_handle =
        reply_of<proto::create_cq_reply>(call(fd, &cq, sizeof(cq))).cq_handle;
    std::vector<stuck_qp> qps(1);
    if (open_stuck_qp(fd, pd, cq_handle, peer_ip, qps.back()) != 0) {
        return 0;
    }
    // Each round registers until refused (the quota, normally), so a round that registers
    // nothing means the vNIC is held to what it already has.
    int round = 0, registered = 0, refused = 0;
    for (bool more = true; round < rounds && more; ++round) {
        std::vector<uint32_t> keys;
        uint32_t key = 0;
        while (keys.size() < 4096 && (refused = reg_page(fd, pd, memory, key)) == 0) {
            keys.push_back(key);
        }
        more = !keys.empty();
        registered += static_cast<int>(keys.size());
        // WQEs naming every MR of the round, 16 to a WQE, one byte of each; a full send queue
        // goes on in another stuck QP.
        for (std::size_t i = 0; i < keys.size(); i += proto::wqe_max_sge) {
            proto::send_wqe w{};
            w.opcode = IBV_WR_SEND;
            w.num_sge =
                static_cast<uint32_t>(std::min<std::size_t>(proto::wqe_max_sge, keys.size() - i));
            for (uint32_t k = 0; k < w.num_sge; ++k) {
                w.sg[k] = {0x10000000, 1, keys[i + k]};
            }
            if (!qps.back().post(w)) {
                qps.back().wake();
                qps.emplace_back();
                if (open_stuck_qp(fd, pd, cq_handle, peer_ip, qps.back()) != 0 ||
                    !qps.back().post(w)) {
                    break;
                }
            }
        }
        qps.back().wake();
        for (const uint32_t k : keys) {
            dereg(fd, k);
        }
    }
    std::printf("rounds %d registered %d", round, registered);
    if (refused != 0) {
        std::printf(" refused %s", errno_name(refused));
    }
    std::printf("\nholding\n");
    std::this_thread::sleep_for(std::chrono::seconds(seconds));
    close(fd);
    return 0;
}

int resize_cq(const char* where, const std::string& mode, int seconds) {
    const int fd = session(where);
    if (fd < 0) {
        return 0;
    }
    constexpr uint32_t entries = 65536;
    auto cq = request<proto::create_cq_request>(proto::opcode::create_cq);
    cq.cqe = entries;
    const reply created = call(fd, &cq, sizeof(cq));
    if (status_of(created) != 0 || created.fds[0] < 0) {
        std::printf("no-cq %s\n", errno_name(status_of(created)));
        return 0;
    }
    const auto cq_reply = reply_of<proto::create_cq_reply>(created);
    int ring_fd = created.fds[0];
    std::size_t ring_bytes = cq_reply.ring_bytes;
    constexpr std::size_t kept_at_most = 64;  // old rings kept mapped (a page each) and open
    std::vector<int> old_rings;
    int resized = 0, refused = 0;
    double slowest_ms = 0;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (std::chrono::steady_clock::now() < end) {
        auto* header = static_cast<proto::cq_ring_header*>(
            mmap(nullptr, ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, ring_fd, 0));
        if (header == MAP_FAILED) {
            break;
        }
        if (mode == "behind") {
            // "Unread": a whole ring of completions that were read long ago, or never written.
            proto::release_slots(*header, proto::load_producer_acquire(*header) - entries);
        }
        auto r = request<proto::resize_cq_request>(proto::opcode::resize_cq);
        r.cq_handle = cq_reply.cq_handle;
        r.cqe = entries;
        const auto start = std::chrono::steady_clock::now();
        const reply got = call(fd, &r, sizeof(r));
        slowest_ms = std::max(slowest_ms, std::chrono::duration<double, std::milli>(
                                              std::chrono::steady_clock::now() - start)
                                              .count());
        munmap(header, ring_bytes);
        if (status_of(got) != 0 || got.fds[0] < 0) {
            ++refused;
            if (status_of(got) < 0) {
                break;
            }
            continue;
        }
        ++resized;
        // The old ring: one page of it stays mapped here, and its memfd open.
        if (old_rings.size() < kept_at_most &&
            mmap(nullptr, 4096, PROT_READ, MAP_SHARED, ring_fd, 0) != MAP_FAILED) {
            old_rings.push_back(ring_fd);
        } else {
            close(ring_fd);
        }
        ring_fd = got.fds[0];
        ring_bytes = reply_of<proto::resize_cq_reply>(got).ring_bytes;
    }
    uint64_t held = 0;
    for (const int old : old_rings) {
        struct stat st {};
        if (fstat(old, &st) == 0) {
            held += static_cast<uint64_t>(st.st_blocks) * 512;
        }
    }
    std::printf("resized %d refused %d slowest_ms %.1f old_rings_bytes %llu\n", resized, refused,
                slowest_ms, static_cast<unsigned long long>(held));
    close(fd);
    return 0;
}

// ---- rdma_cm over the verbs connection (verbs_abi/cm_protocol.hh), as the shim speaks it

namespace cmp = jakiro::cm_proto;

// One connection with an rdma_cm channel: `fd` carries the commands, `events` is the channel
// (the descriptor a program holds as its rdma_cm fd).
struct cm_channel {
    int fd = -1;
    int events = -1;
    uint32_t next_request = 10;
    ~cm_channel() {
        for (const int f : {fd, events}) {
            if (f >= 0) {
                close(f);
            }
        }
    }
};

cmp::header cm_header(cm_channel& ch, cmp::opcode op, std::size_t length) {
    cmp::header h{};
    h.magic = cmp::magic;
    h.version = cmp::version;
    h.opcode = static_cast<uint16_t>(op);
    h.length = static_cast<uint32_t>(length);
    h.request_id = ch.next_request++;
    return h;
}

// Connect, HELLO, open_channel; false (and a verdict line) when jakirod refused.
bool open_cm_channel(const char* where, cm_channel& ch) {
    ch.fd = connect_to(where);
    if (ch.fd < 0 || !say_hello(ch.fd)) {
        std::printf("refused no-session\n");
        return false;
    }
    const cmp::header h = cm_header(ch, cmp::opcode::open_channel, sizeof(cmp::header));
    reply r = call(ch.fd, &h, sizeof(h));
    ch.events = r.fds[0];
    if (r.size < static_cast<ssize_t>(sizeof(cmp::reply_header)) || r.status() != 0 ||
        ch.events < 0) {
        std::printf("refused open-channel status %d\n", r.size > 0 ? r.status() : -1);
        return false;
    }
    return true;
}

// One ucma command; its status (0, an errno, or -1 with no answer) and its response.
template <typename Command>
int ucma(cm_channel& ch, uint32_t cmd, const Command& body,
         std::vector<std::byte>* response = nullptr, int passed = -1) {
    rdma_ucm_cmd_hdr ucmd{cmd, sizeof(Command), 512};
    const std::size_t size = sizeof(cmp::ucma_request) + sizeof(ucmd) + sizeof(body);
    cmp::ucma_request q{};
    q.hdr = cm_header(ch, cmp::opcode::ucma, size);
    q.command_bytes = sizeof(ucmd) + sizeof(body);
    std::vector<std::byte> bytes(size);
    std::memcpy(bytes.data(), &q, sizeof(q));
    std::memcpy(bytes.data() + sizeof(q), &ucmd, sizeof(ucmd));
    std::memcpy(bytes.data() + sizeof(q) + sizeof(ucmd), &body, sizeof(body));
    const reply r = call(ch.fd, bytes.data(), bytes.size(), passed);
    if (r.size < static_cast<ssize_t>(sizeof(cmp::reply_header))) {
        return -1;
    }
    if (response != nullptr && r.size > static_cast<ssize_t>(sizeof(cmp::ucma_reply))) {
        response->assign(r.bytes.begin() + sizeof(cmp::ucma_reply), r.bytes.begin() + r.size);
    }
    return r.status();
}

int cm_steal(const char* where, uint32_t max, int seconds) {
    cm_channel ch;
    if (!open_cm_channel(where, ch)) {
        return 0;
    }
    int migrated = 0;
    for (uint32_t channel = 0; channel <= max; ++channel) {
        for (uint32_t id = 0; id <= max; ++id) {
            rdma_ucm_migrate_id m{};
            m.id = id;
            m.fd = channel;
            migrated += ucma(ch, RDMA_USER_CM_CMD_MIGRATE_ID, m) == 0;
        }
    }
    std::printf("migrated %d\n", migrated);
    std::fflush(stdout);
    // Whatever reaches this channel now would have been another process's.
    int events = 0;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    for (;;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                              until - std::chrono::steady_clock::now())
                              .count();
        pollfd p{ch.events, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, static_cast<int>(left)) != 1) {
            break;
        }
        std::array<std::byte, 1024> buf;
        if (recv(ch.events, buf.data(), buf.size(), 0) <= 0) {
            break;
        }
        ++events;
    }
    std::printf("events %d\n", events);
    return 0;
}

int cm_migrate_own(const char* where) {
    cm_channel from, to;
    if (!open_cm_channel(where, from) || !open_cm_channel(where, to)) {
        return 0;
    }
    rdma_ucm_create_id c{};
    c.ps = RDMA_PS_TCP;
    c.qp_type = IBV_QPT_RC;
    std::vector<std::byte> out;
    if (const int e = ucma(from, RDMA_USER_CM_CMD_CREATE_ID, c, &out);
        e != 0 || out.size() < sizeof(rdma_ucm_create_id_resp)) {
        std::printf("refused create-id %d\n", e);
        return 0;
    }
    rdma_ucm_create_id_resp created{};
    std::memcpy(&created, out.data(), sizeof(created));
    rdma_ucm_listen l{created.id, 4};
    if (const int e = ucma(from, RDMA_USER_CM_CMD_LISTEN, l); e != 0) {
        std::printf("refused listen %d\n", e);
        return 0;
    }
    rdma_ucm_migrate_id m{};
    m.id = created.id;
    m.fd = static_cast<uint32_t>(from.events);
    const int e = ucma(to, RDMA_USER_CM_CMD_MIGRATE_ID, m, nullptr, from.events);
    rdma_ucm_query q{};
    q.id = created.id;
    q.option = RDMA_USER_CM_QUERY_ADDR;
    const bool moved = e == 0 && ucma(to, RDMA_USER_CM_CMD_QUERY, q) == 0 &&
                       ucma(from, RDMA_USER_CM_CMD_QUERY, q) != 0;
    if (moved) {
        std::printf("migrated own\n");
    } else {
        std::printf("refused %s\n", e > 0 ? strerrorname_np(e) : "not-moved");
    }
    return 0;
}

int usage() {
    std::fprintf(stderr,
                 "usage: verbs_probe hello|doorbell|create-qp-timed|leave-then-hello ADDRESS\n"
                 "       verbs_probe reg-mr ADDRESS shmem|hugetlb|unsealed|file|pipe\n"
                 "       verbs_probe hold ADDRESS COUNT SECONDS\n"
                 "       verbs_probe reg-many ADDRESS COUNT SECONDS\n"
                 "       verbs_probe pin-mrs ADDRESS PEER_IP ROUNDS SECONDS\n"
                 "       verbs_probe resize-cq ADDRESS behind|honest SECONDS\n"
                 "       verbs_probe cm-steal ADDRESS MAX SECONDS\n"
                 "       verbs_probe cm-migrate-own ADDRESS\n");
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    if (argc < 3) {
        return usage();
    }
    const std::string cmd = argv[1];
    if (cmd == "hello") {
        return hello(argv[2]);
    }
    if (cmd == "doorbell") {
        return doorbell(argv[2]);
    }
    if (cmd == "create-qp-timed") {
        return doorbell(argv[2], true);
    }
    if (cmd == "leave-then-hello") {
        return leave_then_hello(argv[2]);
    }
    if (cmd == "reg-mr" && argc == 4) {
        return reg_mr(argv[2], argv[3]);
    }
    if (cmd == "reg-many" && argc == 5) {
        return reg_many(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
    }
    if (cmd == "pin-mrs" && argc == 6) {
        return pin_mrs(argv[2], argv[3], std::atoi(argv[4]), std::atoi(argv[5]));
    }
    if (cmd == "resize-cq" && argc == 5) {
        return resize_cq(argv[2], argv[3], std::atoi(argv[4]));
    }
    if (cmd == "cm-steal" && argc == 5) {
        return cm_steal(argv[2], static_cast<uint32_t>(std::atoi(argv[3])), std::atoi(argv[4]));
    }
    if (cmd == "cm-migrate-own") {
        return cm_migrate_own(argv[2]);
    }
    if (cmd == "hold" && argc == 5) {
        return hold(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
    }
    return usage();
}
