#include "face_registry.hh"

#include <rte_errno.h>
#include <rte_lcore.h>

#include <sys/epoll.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>

namespace jakiro::vnet {

namespace {

// A whole TCP super-frame (at most 64 KB of IP) in one mbuf: the largest data room an mbuf has.
constexpr uint16_t superframe_data_room = UINT16_MAX;
// 64 MB: every vNIC's burst of 32 in flight plus the tx batches' backlog on a small host. An
// empty pool is not an error: the face leaves frames in its socket until mbufs return.
constexpr unsigned superframe_mbufs = 1023;
constexpr unsigned superframe_cache = 32;

std::array<std::atomic<face*>, max_faces> faces{};
rte_mempool* pool = nullptr;  // control thread only (then read by faces it opened)
// Every open face's socket, registered by the control thread, waited on by the worker.
int epoll_fd = -1;
std::atomic<unsigned> open_faces{0};

}  // namespace

void collect_ready_faces(face_set& ready) {
    ready.reset();
    if (open_faces.load(std::memory_order_acquire) == 0) {
        return;
    }
    thread_local epoll_event events[max_faces];
    const int n = epoll_wait(epoll_fd, events, max_faces, 0);
    for (int i = 0; i < n; ++i) {
        ready.set(events[i].data.u32);
    }
}

face* face_of(uint16_t port) {
    return faces[port - first_face_port].load(std::memory_order_acquire);
}

rte_mempool* superframe_pool(std::string& error) {
    if (pool == nullptr) {
        pool = rte_pktmbuf_pool_create("jakiro_superframes", superframe_mbufs, superframe_cache, 0,
                                       superframe_data_room, rte_socket_id());
        if (pool == nullptr) {
            error = std::string("cannot create the super-frame pool: ") + rte_strerror(rte_errno);
        }
    }
    return pool;
}

std::optional<uint16_t> add_face(const std::string& devargs, std::string& error,
                                 rte_mempool* uplink_pool) {
    const std::string key = std::string(devargs_prefix) + "iface=";
    if (devargs.rfind(key, 0) != 0 || devargs.size() == key.size() ||
        devargs.find(',') != std::string::npos) {
        error = "'" + devargs + "' is not vnet:iface=NAME";
        return std::nullopt;
    }
    rte_mempool* mbufs = uplink_pool != nullptr ? uplink_pool : superframe_pool(error);
    if (mbufs == nullptr) {
        return std::nullopt;
    }
    for (uint16_t i = 0; i < max_faces; ++i) {
        if (faces[i].load(std::memory_order_relaxed) == nullptr) {
            if (epoll_fd < 0 && (epoll_fd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
                error = std::string("epoll_create1: ") + std::strerror(errno);
                return std::nullopt;
            }
            auto opened =
                face::open(devargs.substr(key.size()), mbufs, error, uplink_pool != nullptr);
            if (!opened) {
                return std::nullopt;
            }
            epoll_event ev{};
            ev.events = EPOLLIN;
            ev.data.u32 = i;
            if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, opened->fd(), &ev) != 0) {
                error = std::string("epoll_ctl: ") + std::strerror(errno);
                return std::nullopt;
            }
            faces[i].store(opened.release(), std::memory_order_release);
            open_faces.fetch_add(1, std::memory_order_release);
            return static_cast<uint16_t>(first_face_port + i);
        }
    }
    error = "no vnet face slots left (" + std::to_string(max_faces) + ")";
    return std::nullopt;
}

void remove_face(uint16_t port) {
    face* f = faces[port - first_face_port].exchange(nullptr, std::memory_order_acq_rel);
    if (f != nullptr) {
        epoll_ctl(epoll_fd, EPOLL_CTL_DEL, f->fd(), nullptr);
        open_faces.fetch_sub(1, std::memory_order_release);
        delete f;
    }
}

}  // namespace jakiro::vnet
