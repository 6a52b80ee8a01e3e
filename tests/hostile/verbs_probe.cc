// verbs_probe: a hostile tenant's client of jakirod's RDMA face, written against the socket
// protocol (verbs_abi/protocol.hh) directly, without the shim, as an attacker would. The
// hostile-tenant integration suite (tests/integration/test_hostile_tenant.py) runs it inside
// tenant namespaces; each command prints one line that the test reads.
//
//   verbs_probe hello ADDRESS            connect, HELLO: "vnic NAME" or "refused ERRNO-NAME"
//   verbs_probe hold ADDRESS N SECONDS   open N connections, never say HELLO; after SECONDS
//                                        print "open K" (how many jakirod still keeps open)
//   verbs_probe doorbell ADDRESS         create a QP, print "doorbell DEV:INODE" of its page
//   verbs_probe leave-then-hello ADDRESS connect, move to a new network namespace, then HELLO
//   verbs_probe reg-mr ADDRESS KIND      register 2 MiB of memory of KIND (shmem: a sealed memfd,
//                                        as the shim sends; hugetlb: a sealed MFD_HUGETLB memfd;
//                                        unsealed: a memfd without F_SEAL_SHRINK; file: a file
//                                        on disk; pipe), punch a hole under it if registered,
//                                        HELLO again: "registered alive", "refused ERRNO-NAME"
//
// ADDRESS is "@abstract-name" or a path (verbs_abi/endpoint_address.hh). Exit status 0 when
// the command ran (whatever jakirod answered), 2 on bad usage.

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "verbs_abi/endpoint_address.hh"
#include "verbs_abi/fd_passing.hh"
#include "verbs_abi/protocol.hh"

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

reply call(int fd, const void* request, std::size_t size, int passed_fd = -1) {
    reply r;
    if (jakiro::verbs_proto::send_with_fd(fd, request, size, passed_fd, MSG_NOSIGNAL) !=
        static_cast<ssize_t>(size)) {
        r.error = errno;
        return r;
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 2000) != 1) {
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

int doorbell(const char* where) {
    const int fd = connect_to(where);
    if (fd < 0 || !say_hello(fd)) {
        std::printf("doorbell none\n");
        return 0;
    }
    auto pd = proto::make_message<proto::alloc_pd_request>(
        static_cast<uint16_t>(proto::opcode::alloc_pd), 2);
    const reply p = call(fd, &pd, sizeof(pd));
    proto::alloc_pd_reply pr{};
    std::memcpy(&pr, p.bytes.data(), sizeof(pr));
    auto cq = proto::make_message<proto::create_cq_request>(
        static_cast<uint16_t>(proto::opcode::create_cq), 3);
    cq.cqe = 16;
    const reply c = call(fd, &cq, sizeof(cq));
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
    const reply q = call(fd, &qp, sizeof(qp));
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

int usage() {
    std::fprintf(stderr,
                 "usage: verbs_probe hello|doorbell|leave-then-hello ADDRESS\n"
                 "       verbs_probe reg-mr ADDRESS shmem|hugetlb|unsealed|file|pipe\n"
                 "       verbs_probe hold ADDRESS COUNT SECONDS\n");
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
    if (cmd == "leave-then-hello") {
        return leave_then_hello(argv[2]);
    }
    if (cmd == "reg-mr" && argc == 4) {
        return reg_mr(argv[2], argv[3]);
    }
    if (cmd == "hold" && argc == 5) {
        return hold(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
    }
    return usage();
}
