#include "verbs_shim/ucma_device.hh"

#include <fcntl.h>
#include <rdma/rdma_user_cm.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "verbs_abi/cm_protocol.hh"
#include "verbs_abi/fd_passing.hh"
#include "verbs_shim/channel.hh"
#include "verbs_shim/discovery.hh"

namespace jakiro::verbs_shim::ucma {

namespace {

namespace cmp = cm_proto;

struct device_file {
    channel conn;      // to jakirod: commands and their replies
    std::mutex mutex;  // one command at a time on this descriptor
    uint32_t next_id = 1;
};

std::mutex files_mutex;
std::unordered_map<int, std::shared_ptr<device_file>> files;  // guarded by files_mutex
std::atomic<int> open_files{0};

// Events delivered per id, process-wide (an id's count follows it through MIGRATE_ID): what
// DESTROY_ID and MIGRATE_ID report, so librdmacm waits for exactly the events it was given.
std::mutex events_mutex;
std::unordered_map<uint32_t, uint32_t> delivered;  // guarded by events_mutex
std::unordered_map<uint32_t, bool> live;           // ids this process holds

std::shared_ptr<device_file> lookup(int fd) {
    if (open_files.load(std::memory_order_acquire) == 0) {
        return nullptr;
    }
    const std::lock_guard lock(files_mutex);
    const auto it = files.find(fd);
    return it != files.end() ? it->second : nullptr;
}

// Copies into the caller's memory as the kernel's copy_to_user would: EFAULT for a bad
// pointer instead of a crash inside the shim.
int copy_out(uint64_t address, const void* data, std::size_t size) {
    if (size == 0) {
        return 0;
    }
    if (address == 0) {
        return EFAULT;
    }
    iovec local{const_cast<void*>(data), size};
    iovec remote{reinterpret_cast<void*>(address), size};
    const ssize_t n = process_vm_writev(getpid(), &local, 1, &remote, 1, 0);
    if (n == static_cast<ssize_t>(size)) {
        return 0;
    }
    if (n < 0 && (errno == ENOSYS || errno == EPERM)) {
        std::memcpy(reinterpret_cast<void*>(address), data, size);  // no way to check: trust
        return 0;
    }
    return EFAULT;
}

int copy_in(uint64_t address, void* data, std::size_t size) {
    if (size == 0) {
        return 0;
    }
    iovec local{data, size};
    iovec remote{reinterpret_cast<void*>(address), size};
    const ssize_t n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (n == static_cast<ssize_t>(size)) {
        return 0;
    }
    if (n < 0 && (errno == ENOSYS || errno == EPERM) && address != 0) {
        std::memcpy(data, reinterpret_cast<const void*>(address), size);
        return 0;
    }
    return EFAULT;
}

// One request (with `fd_in`, when >= 0) and one reply on the command connection. 0 or an
// errno; `reply` gets the bytes.
int roundtrip(device_file& f, const void* request, std::size_t size, std::vector<uint8_t>& reply,
              int* fd_out = nullptr, int fd_in = -1) {
    if (verbs_proto::send_with_fd(f.conn.fd(), request, size, fd_in, MSG_NOSIGNAL) !=
        static_cast<ssize_t>(size)) {
        return errno == EPIPE || errno == ECONNRESET ? EIO : errno;
    }
    reply.resize(cmp::max_message_size);
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    iovec iov{reply.data(), reply.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n;
    do {
        n = recvmsg(f.conn.fd(), &msg, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) {
        return n == 0 ? EIO : errno;
    }
    int passed = -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            std::memcpy(&passed, CMSG_DATA(c), sizeof(int));
        }
    }
    reply.resize(static_cast<std::size_t>(n));
    cmp::reply_header rh;
    if (reply.size() < sizeof(rh)) {
        if (passed >= 0) {
            close(passed);
        }
        return EPROTO;
    }
    std::memcpy(&rh, reply.data(), sizeof(rh));
    if (rh.hdr.magic != cmp::magic || rh.status != 0) {
        if (passed >= 0) {
            close(passed);
        }
        return rh.hdr.magic != cmp::magic ? EPROTO : rh.status;
    }
    if (fd_out != nullptr) {
        *fd_out = passed;
    } else if (passed >= 0) {
        close(passed);
    }
    return 0;
}

cmp::header make_header(device_file& f, cmp::opcode op, std::size_t length) {
    cmp::header h{};
    h.magic = cmp::magic;
    h.version = cmp::version;
    h.opcode = static_cast<uint16_t>(op);
    h.length = static_cast<uint32_t>(length);
    h.request_id = f.next_id++;
    return h;
}

ssize_t fail(int error) {
    errno = error;
    return -1;
}

// GET_EVENT: the next event of this channel, from its socket (blocking unless the program
// set O_NONBLOCK on the descriptor, exactly as on the kernel's device).
ssize_t get_event(int fd, const rdma_ucm_cmd_hdr& hdr, const uint8_t* in, std::size_t len) {
    rdma_ucm_get_event cmd;
    if (hdr.in < sizeof(cmd)) {
        return fail(EINVAL);
    }
    std::memcpy(&cmd, in, sizeof(cmd));
    if (hdr.out < sizeof(rdma_ucm_event_resp)) {
        return fail(ENOSPC);
    }
    for (;;) {
        alignas(8) uint8_t buf[cmp::max_message_size];
        const ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n < 0) {
            return -1;  // EAGAIN on O_NONBLOCK, EINTR, ...
        }
        if (n == 0) {
            return fail(EIO);  // jakirod is gone
        }
        cmp::event_header eh;
        rdma_ucm_event_resp resp;
        if (static_cast<std::size_t>(n) != sizeof(eh) + sizeof(resp)) {
            continue;
        }
        std::memcpy(&eh, buf, sizeof(eh));
        std::memcpy(&resp, buf + sizeof(eh), sizeof(resp));
        if (eh.hdr.magic != cmp::magic) {
            continue;
        }
        {
            const std::lock_guard lock(events_mutex);
            if (resp.event == 4 /* CONNECT_REQUEST */) {
                live[resp.id] = true;
            }
            if (!live.count(eh.charged_handle) || !live.count(resp.id)) {
                continue;  // for an id destroyed meanwhile: the kernel drops those too
            }
            ++delivered[eh.charged_handle];
        }
        if (const int e =
                copy_out(cmd.response, &resp, std::min<std::size_t>(hdr.out, sizeof(resp)));
            e != 0) {
            return fail(e);
        }
        return static_cast<ssize_t>(len);
    }
}

}  // namespace

int open_device(int flags) {
    vnic_socket where;
    if (!find_vnic_socket(where)) {
        errno = ENODEV;
        return -1;
    }
    auto f = std::make_shared<device_file>();
    if (const int e = f->conn.open(where.path.c_str()); e != 0) {
        errno = e == ENOENT || e == ECONNREFUSED ? ENODEV : e;
        return -1;
    }
    verbs_proto::hello_reply hello{};
    int async_fd = -1;
    if (const int e = f->conn.hello(hello, async_fd); e != 0) {
        errno = e;
        return -1;
    }
    if (async_fd >= 0) {
        close(async_fd);  // verbs events: not this connection's business
    }
    const cmp::header req = make_header(*f, cmp::opcode::open_channel, sizeof(cmp::header));
    std::vector<uint8_t> reply;
    int event_fd = -1;
    if (const int e = roundtrip(*f, &req, sizeof(req), reply, &event_fd); e != 0) {
        errno = e == EOPNOTSUPP ? ENODEV : e;
        return -1;
    }
    if (reply.size() != sizeof(cmp::open_channel_reply) || event_fd < 0) {
        if (event_fd >= 0) {
            close(event_fd);
        }
        errno = EPROTO;
        return -1;
    }
    if ((flags & O_CLOEXEC) == 0) {
        fcntl(event_fd, F_SETFD, 0);
    }
    if ((flags & O_NONBLOCK) != 0) {
        fcntl(event_fd, F_SETFL, fcntl(event_fd, F_GETFL) | O_NONBLOCK);
    }
    {
        const std::lock_guard lock(files_mutex);
        files[event_fd] = std::move(f);
        open_files.fetch_add(1, std::memory_order_release);
    }
    return event_fd;
}

bool owns(int fd) {
    return lookup(fd) != nullptr;
}

void forget(int fd) {
    if (open_files.load(std::memory_order_acquire) == 0) {
        return;
    }
    std::shared_ptr<device_file> gone;  // destroyed after the lock: it closes descriptors
    const std::lock_guard lock(files_mutex);
    if (const auto it = files.find(fd); it != files.end()) {
        gone = std::move(it->second);
        files.erase(it);
        open_files.fetch_sub(1, std::memory_order_release);
    }
}

ssize_t write_command(int fd, const void* buf, std::size_t len) {
    const auto f = lookup(fd);
    if (f == nullptr) {
        return fail(EBADF);
    }
    rdma_ucm_cmd_hdr hdr;
    if (buf == nullptr || len < sizeof(hdr)) {
        return fail(EINVAL);
    }
    std::memcpy(&hdr, buf, sizeof(hdr));
    if (sizeof(hdr) + hdr.in > len) {
        return fail(EINVAL);
    }
    const auto* bytes = static_cast<const uint8_t*>(buf);
    if (hdr.cmd == RDMA_USER_CM_CMD_GET_EVENT) {
        return get_event(fd, hdr, bytes + sizeof(hdr), len);
    }
    const std::size_t command_bytes = sizeof(hdr) + hdr.in;
    if (command_bytes > cmp::max_command_bytes) {
        return fail(EINVAL);
    }
    std::vector<uint8_t> command(bytes, bytes + command_bytes);
    std::vector<uint8_t> option;
    if (hdr.cmd == RDMA_USER_CM_CMD_SET_OPTION && hdr.in >= sizeof(rdma_ucm_set_option)) {
        rdma_ucm_set_option so;
        std::memcpy(&so, bytes + sizeof(hdr), sizeof(so));
        if (so.optlen > cmp::max_option_bytes) {
            return fail(EINVAL);
        }
        option.resize(so.optlen);
        if (const int e = copy_in(so.optval, option.data(), option.size()); e != 0) {
            return fail(e);
        }
    }
    uint32_t migrating_from = 0;
    int source_channel = -1;
    if (hdr.cmd == RDMA_USER_CM_CMD_MIGRATE_ID && hdr.in >= sizeof(rdma_ucm_migrate_id)) {
        // The old channel goes along as what it is, its descriptor (cm_protocol.hh): jakirod
        // moves the id only for a caller that holds it, as the kernel does.
        rdma_ucm_migrate_id m;
        std::memcpy(&m, command.data() + sizeof(hdr), sizeof(m));
        if (lookup(static_cast<int>(m.fd)) == nullptr) {
            return fail(EBADF);
        }
        migrating_from = m.id;
        source_channel = static_cast<int>(m.fd);
    }
    const std::lock_guard lock(f->mutex);
    cmp::ucma_request q{};
    q.hdr = make_header(*f, cmp::opcode::ucma, sizeof(q) + command.size() + option.size());
    q.command_bytes = static_cast<uint32_t>(command.size());
    q.option_bytes = static_cast<uint32_t>(option.size());
    std::vector<uint8_t> request(sizeof(q));
    std::memcpy(request.data(), &q, sizeof(q));
    request.insert(request.end(), command.begin(), command.end());
    request.insert(request.end(), option.begin(), option.end());
    std::vector<uint8_t> reply;
    if (const int e = roundtrip(*f, request.data(), request.size(), reply, nullptr, source_channel);
        e != 0) {
        return fail(e);
    }
    cmp::ucma_reply r;
    if (reply.size() < sizeof(r)) {
        return fail(EPROTO);
    }
    std::memcpy(&r, reply.data(), sizeof(r));
    if (sizeof(r) + r.response_bytes != reply.size()) {
        return fail(EPROTO);
    }
    std::vector<uint8_t> response(reply.begin() + sizeof(r), reply.end());
    const uint8_t* in = bytes + sizeof(hdr);
    switch (hdr.cmd) {
        case RDMA_USER_CM_CMD_CREATE_ID:
            if (response.size() >= sizeof(rdma_ucm_create_id_resp)) {
                rdma_ucm_create_id_resp cr;
                std::memcpy(&cr, response.data(), sizeof(cr));
                const std::lock_guard el(events_mutex);
                live[cr.id] = true;
            }
            break;
        case RDMA_USER_CM_CMD_DESTROY_ID:
            if (response.size() >= sizeof(rdma_ucm_destroy_id_resp)) {
                rdma_ucm_destroy_id c;
                std::memcpy(&c, in, sizeof(c));
                rdma_ucm_destroy_id_resp dr;
                std::memcpy(&dr, response.data(), sizeof(dr));
                const std::lock_guard el(events_mutex);
                dr.events_reported = delivered[c.id];
                delivered.erase(c.id);
                live.erase(c.id);
                std::memcpy(response.data(), &dr, sizeof(dr));
            }
            break;
        case RDMA_USER_CM_CMD_MIGRATE_ID:
            if (response.size() >= sizeof(rdma_ucm_migrate_resp)) {
                rdma_ucm_migrate_resp mr;
                std::memcpy(&mr, response.data(), sizeof(mr));
                const std::lock_guard el(events_mutex);
                mr.events_reported = delivered[migrating_from];
                std::memcpy(response.data(), &mr, sizeof(mr));
            }
            break;
        default:
            break;
    }
    if (!response.empty()) {
        // The response pointer is the first field of every command that has one, but
        // CREATE_ID's (uid first).
        uint64_t address = 0;
        const std::size_t at = hdr.cmd == RDMA_USER_CM_CMD_CREATE_ID ? 8 : 0;
        if (hdr.in >= at + sizeof(address)) {
            std::memcpy(&address, in + at, sizeof(address));
        }
        const std::size_t n = std::min<std::size_t>(response.size(), hdr.out);
        if (const int e = copy_out(address, response.data(), n); e != 0) {
            return fail(e);
        }
    }
    return static_cast<ssize_t>(len);
}

}  // namespace jakiro::verbs_shim::ucma
