#include "tests/unit/verbs_shim/fake_jakirod.hh"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "verbs_abi/fd_passing.hh"
#include "verbs_shim/context.hh"

namespace jakiro::verbs_shim::testing {

namespace proto = verbs_proto;

namespace {

template <typename Msg>
Msg reply_to(proto::opcode op, uint32_t request_id) {
    return proto::make_message<Msg>(proto::reply_opcode(op), request_id);
}

// A memfd of `bytes`, mapped shared; nullptr on failure.
void* shared_memfd(const char* name, std::size_t bytes, int& fd) {
    fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
        return nullptr;
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? nullptr : p;
}

}  // namespace

proto::limits fake_limits() {
    proto::limits l{};
    l.max_mr_size = 1ull << 30;
    l.page_size_cap = 4096;
    l.max_qp = 1024;
    l.max_qp_wr = 4096;
    l.max_sge = 16;
    l.max_sge_rd = 16;
    l.max_cq = 2048;
    l.max_cqe = 65536;
    l.max_mr = 4096;
    l.max_pd = 1024;
    l.max_qp_rd_atom = 16;
    l.max_qp_init_rd_atom = 16;
    l.max_res_rd_atom = 16384;
    l.max_msg_size = 1u << 31;
    l.max_inline_data = 256;  // what jakirod's device model says; the slot's 416 binds
    return l;
}

int open_fd_count() {
    int n = 0;
    if (DIR* d = opendir("/proc/self/fd")) {
        while (dirent* e = readdir(d)) {
            n += e->d_name[0] != '.' ? 1 : 0;
        }
        closedir(d);
        --n;  // the directory's own descriptor
    }
    return n;
}

fake_jakirod::fake_jakirod() {
    char dir[] = "/tmp/jakiro-fake-XXXXXX";
    if (mkdtemp(dir) == nullptr) {
        std::abort();
    }
    _dir = dir;
    _path = _dir + "/verbs.sock";
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, _path.c_str());
    _listen = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (_listen < 0 || bind(_listen, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        listen(_listen, 4) != 0) {
        std::abort();
    }
    _stop = eventfd(0, EFD_CLOEXEC);
    _device.magic = device_magic;
    std::strcpy(_device.socket_path, _path.c_str());
    std::strcpy(_device.dev.name, "jakiro_fake");
    _thread = std::thread([this] { serve(); });
}

fake_jakirod::~fake_jakirod() {
    stop();
    for (auto& [handle, q] : _qps) {
        munmap(q.ring, q.ring_bytes);
        munmap(q.doorbell, proto::doorbell_bytes);
        close(q.doorbell_fd);
    }
    for (auto& [p, n] : _cq_rings) {
        munmap(p, n);
    }
    close(_stop);
    std::filesystem::remove_all(_dir);
}

ibv_context* fake_jakirod::open() {
    return open_device(&_device.dev);
}

void fake_jakirod::stop() {
    if (_thread.joinable()) {
        const uint64_t one = 1;
        (void)!write(_stop, &one, sizeof(one));
        _thread.join();
    }
    for (int* fd : {&_conn, &_listen, &_async_server}) {
        if (*fd >= 0) {
            close(*fd);
            *fd = -1;
        }
    }
}

void fake_jakirod::fail_next(proto::opcode op, int status) {
    const std::lock_guard lock(_mutex);
    _failures[op] = status;
}

void fake_jakirod::tamper_next_qp(qp_tamper t) {
    const std::lock_guard lock(_mutex);
    _tamper = std::move(t);
}

void fake_jakirod::send_async(proto::event_type type, uint64_t handle, uint32_t port) {
    auto m = proto::make_message<proto::async_event_message>(
        static_cast<uint16_t>(proto::opcode::async_event), 0);
    m.type = static_cast<uint32_t>(type);
    m.port_num = port;
    m.handle = handle;
    (void)!send(_async_server, &m, sizeof(m), MSG_NOSIGNAL);
}

int fake_jakirod::idle_fd_count() {
    while (_busy.load()) {
        usleep(1000);
    }
    return open_fd_count();
}

std::size_t fake_jakirod::count(proto::opcode op) {
    const std::lock_guard lock(_mutex);
    return static_cast<std::size_t>(
        std::count(_opcodes.begin(), _opcodes.end(), static_cast<uint16_t>(op)));
}

fake_jakirod::qp_record& fake_jakirod::qp(uint32_t handle) {
    const std::lock_guard lock(_mutex);
    return _qps.at(handle);
}

void fake_jakirod::serve() {
    for (;;) {
        pollfd p[2] = {{_conn >= 0 ? _conn : _listen, POLLIN, 0}, {_stop, POLLIN, 0}};
        if (poll(p, 2, -1) < 0 || (p[1].revents & POLLIN) != 0) {
            return;
        }
        if (_conn < 0) {
            _conn = accept4(_listen, nullptr, nullptr, SOCK_CLOEXEC);
            continue;
        }
        alignas(8) std::array<std::byte, proto::max_message_size + 1> buffer;
        iovec iov{buffer.data(), buffer.size()};
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * proto::max_fds_per_message)];
        msghdr msg{};
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control;
        msg.msg_controllen = sizeof(control);
        _busy = true;
        const ssize_t n = recvmsg(_conn, &msg, MSG_CMSG_CLOEXEC);
        if (n <= 0) {
            _busy = false;
            close(_conn);  // the client closed its context; wait for the next one
            _conn = -1;
            continue;
        }
        std::vector<int> fds;
        for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                for (std::size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++i) {
                    int fd;
                    std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                    fds.push_back(fd);
                }
            }
        }
        answer(buffer.data(), static_cast<std::size_t>(n));
        for (int fd : fds) {
            close(fd);
        }
        _busy = false;
    }
}

void fake_jakirod::reply(const void* data, std::size_t size, const std::vector<int>& fds) {
    (void)!proto::send_with_fds(_conn, data, size, fds, MSG_NOSIGNAL);
}

void fake_jakirod::answer(const std::byte* data, std::size_t size) {
    proto::header h{};
    if (proto::check_request({data, size}, false, h) != proto::parse_error::none) {
        auto r = reply_to<proto::reply_header>(static_cast<proto::opcode>(h.opcode), h.request_id);
        r.status = EBADMSG;
        reply(&r, sizeof(r));
        return;
    }
    const auto op = static_cast<proto::opcode>(h.opcode);
    {
        const std::lock_guard lock(_mutex);
        _opcodes.push_back(h.opcode);
        if (const auto it = _failures.find(op); it != _failures.end()) {
            auto r = reply_to<proto::reply_header>(op, h.request_id);
            r.status = it->second;
            _failures.erase(it);
            reply(&r, sizeof(r));
            return;
        }
    }
    switch (op) {
        case proto::opcode::hello: {
            auto r = reply_to<proto::hello_reply>(op, h.request_id);
            proto::put_name(r.vnic_name, "t1");
            proto::put_name(r.host_name, "h1");
            r.port_state = static_cast<uint8_t>(proto::port_state::active);
            r.tenant_mtu = 1450;
            r.path_mtu = 1024;
            r.lim = fake_limits();
            int pair[2];
            socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair);
            _async_server = pair[0];
            reply(&r, sizeof(r), {pair[1]});
            close(pair[1]);
            return;
        }
        case proto::opcode::alloc_pd: {
            auto r = reply_to<proto::alloc_pd_reply>(op, h.request_id);
            const std::lock_guard lock(_mutex);
            r.pd_handle = ++_next_handle;
            reply(&r, sizeof(r));
            return;
        }
        case proto::opcode::create_cq: {
            proto::create_cq_request req;
            std::memcpy(&req, data, sizeof(req));
            create_cq(req);
            return;
        }
        case proto::opcode::create_qp: {
            proto::create_qp_request req;
            std::memcpy(&req, data, sizeof(req));
            create_qp(req);
            return;
        }
        case proto::opcode::resize_cq: {
            proto::resize_cq_request req;
            std::memcpy(&req, data, sizeof(req));
            resize_cq(req);
            return;
        }
        case proto::opcode::modify_qp: {
            proto::modify_qp_request req;
            std::memcpy(&req, data, sizeof(req));
            auto r = reply_to<proto::reply_header>(op, h.request_id);
            const std::lock_guard lock(_mutex);
            _last_modify = req;
            if (const auto it = _qps.find(req.qp_handle); it != _qps.end()) {
                it->second.attr = req.attr;
            } else {
                r.status = EINVAL;
            }
            reply(&r, sizeof(r));
            return;
        }
        case proto::opcode::query_qp: {
            proto::query_qp_request req;
            std::memcpy(&req, data, sizeof(req));
            const std::lock_guard lock(_mutex);
            const auto it = _qps.find(req.qp_handle);
            if (it == _qps.end()) {
                auto r = reply_to<proto::reply_header>(op, h.request_id);
                r.status = EINVAL;
                reply(&r, sizeof(r));
                return;
            }
            auto r = reply_to<proto::query_qp_reply>(op, h.request_id);
            r.attr = it->second.attr;
            r.attr.max_send_wr = it->second.ring->sq_capacity;
            r.attr.max_recv_wr = it->second.ring->rq_capacity;
            r.attr.max_send_sge = it->second.request.max_send_sge;
            r.attr.max_recv_sge = it->second.request.max_recv_sge;
            r.attr.max_inline_data = it->second.request.max_inline_data;
            r.sq_sig_all = it->second.request.sq_sig_all;
            reply(&r, sizeof(r));
            return;
        }
        case proto::opcode::destroy_qp: {
            proto::destroy_request req;
            std::memcpy(&req, data, sizeof(req));
            auto r = reply_to<proto::reply_header>(op, h.request_id);
            const std::lock_guard lock(_mutex);
            if (const auto it = _qps.find(req.handle); it != _qps.end() && !it->second.destroyed) {
                it->second.destroyed = true;
            } else {
                r.status = EINVAL;
            }
            reply(&r, sizeof(r));
            return;
        }
        case proto::opcode::dealloc_pd:
        case proto::opcode::dereg_mr:
        case proto::opcode::destroy_cq: {
            auto r = reply_to<proto::reply_header>(op, h.request_id);
            reply(&r, sizeof(r));
            return;
        }
        default: {
            auto r = reply_to<proto::reply_header>(op, h.request_id);
            r.status = EOPNOTSUPP;
            reply(&r, sizeof(r));
            return;
        }
    }
}

void fake_jakirod::create_cq(const proto::create_cq_request& req) {
    auto r = reply_to<proto::create_cq_reply>(proto::opcode::create_cq, req.hdr.request_id);
    r.capacity = std::bit_ceil(req.cqe);
    r.ring_bytes = proto::cq_ring_bytes(r.capacity);
    int fd = -1;
    auto* h = static_cast<proto::cq_ring_header*>(shared_memfd("jakiro-cq", r.ring_bytes, fd));
    h->magic = proto::cq_ring_magic;
    h->version = proto::cq_ring_version;
    h->capacity = r.capacity;
    h->slot_size = sizeof(proto::cqe);
    {
        const std::lock_guard lock(_mutex);
        r.cq_handle = ++_next_handle;
        _cq_rings.emplace_back(h, r.ring_bytes);
    }
    reply(&r, sizeof(r), {fd});
    close(fd);
}

void fake_jakirod::on_resize(uint32_t completions, uint32_t producer_skew) {
    const std::lock_guard lock(_mutex);
    _resize_completions = completions;
    _resize_skew = producer_skew;
}

void fake_jakirod::resize_cq(const proto::resize_cq_request& req) {
    auto r = reply_to<proto::resize_cq_reply>(proto::opcode::resize_cq, req.hdr.request_id);
    r.capacity = std::bit_ceil(req.cqe);
    r.outstanding = 0;
    r.ring_bytes = proto::cq_ring_bytes(r.capacity);
    int fd = -1;
    auto* h = static_cast<proto::cq_ring_header*>(shared_memfd("jakiro-cq", r.ring_bytes, fd));
    h->magic = proto::cq_ring_magic;
    h->version = proto::cq_ring_version;
    h->capacity = r.capacity;
    h->slot_size = sizeof(proto::cqe);
    {
        const std::lock_guard lock(_mutex);
        for (uint32_t i = 0; i < _resize_completions && i < r.capacity; ++i) {
            proto::cqe e{};
            e.wr_id = 1000 + i;
            e.opcode = IBV_WC_RECV;
            proto::cq_slots(h)[i] = e;
        }
        proto::publish_producer(*h, _resize_completions + _resize_skew);
        _cq_rings.emplace_back(h, r.ring_bytes);
    }
    reply(&r, sizeof(r), {fd});
    close(fd);
}

void fake_jakirod::create_qp(const proto::create_qp_request& req) {
    auto r = reply_to<proto::create_qp_reply>(proto::opcode::create_qp, req.hdr.request_id);
    r.sq_capacity = std::bit_ceil(std::max(req.max_send_wr, 1u));
    r.rq_capacity = std::bit_ceil(std::max(req.max_recv_wr, 1u));
    r.max_send_sge = req.max_send_sge;
    r.max_recv_sge = req.max_recv_sge;
    r.max_inline_data = req.max_inline_data;
    r.ring_bytes = proto::qp_ring_bytes(r.sq_capacity, r.rq_capacity);
    int ring_fd = -1;
    auto* h = static_cast<proto::qp_ring_header*>(shared_memfd("jakiro-qp", r.ring_bytes, ring_fd));
    fcntl(ring_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    qp_record rec;
    rec.request = req;
    rec.ring = h;
    rec.ring_bytes = r.ring_bytes;
    rec.doorbell = static_cast<proto::doorbell_page*>(
        shared_memfd("jakiro-doorbell", proto::doorbell_bytes, rec.doorbell_fd));
    fcntl(rec.doorbell_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    qp_tamper tamper;
    {
        const std::lock_guard lock(_mutex);
        r.qp_handle = ++_next_handle;
        r.qp_num = r.qp_handle;  // as jakirod: handle == QPN
        _last_qp = r.qp_handle;
        tamper = std::move(_tamper);
        _tamper = nullptr;
    }
    h->magic = proto::qp_ring_magic;
    h->version = proto::qp_ring_version;
    h->sq_capacity = r.sq_capacity;
    h->rq_capacity = r.rq_capacity;
    h->slot_size = proto::wqe_size;
    h->sq_offset = sizeof(proto::qp_ring_header);
    h->rq_offset = static_cast<uint32_t>(sizeof(proto::qp_ring_header) +
                                         std::size_t{r.sq_capacity} * proto::wqe_size);
    h->qp_num = r.qp_num;
    std::vector<int> fds = {ring_fd, dup(rec.doorbell_fd)};
    std::vector<int> to_close = fds;
    if (tamper) {
        tamper(r, *h, fds);
    }
    {
        const std::lock_guard lock(_mutex);
        _qps[r.qp_handle] = rec;
    }
    reply(&r, sizeof(r), fds);
    // Ours are copies now (what was sent is the client's); a tamper's extra fds too.
    to_close.insert(to_close.end(), fds.begin(), fds.end());
    std::sort(to_close.begin(), to_close.end());
    to_close.erase(std::unique(to_close.begin(), to_close.end()), to_close.end());
    for (int fd : to_close) {
        close(fd);
    }
}

}  // namespace jakiro::verbs_shim::testing
