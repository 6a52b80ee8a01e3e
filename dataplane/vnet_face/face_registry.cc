#include "dataplane/vnet_face/face_registry.hh"

#include <rte_errno.h>
#include <rte_lcore.h>

#include <sys/epoll.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>

namespace jakiro::vnet_face {

namespace {

// A whole TCP super-frame (at most 64 KB of IP) in one mbuf: the largest data room an mbuf has.
constexpr uint16_t superframe_data_room = UINT16_MAX;

std::array<std::atomic<face*>, max_faces> faces{};
rte_mempool* pool = nullptr;  // control thread only (then read by faces it opened)
buffer_charges charges;
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

void mute_face(uint16_t port, bool muted) {
    const face* f = face_of(port);
    if (f == nullptr) {
        return;  // removed by a live change meanwhile
    }
    epoll_event ev{};
    ev.events = muted ? 0u : static_cast<uint32_t>(EPOLLIN);
    ev.data.u32 = port - first_face_port;
    epoll_ctl(epoll_fd, EPOLL_CTL_MOD, f->fd(), &ev);
}

int faces_epoll_fd() {
    // Created before the first face is counted, and never closed or replaced after.
    return open_faces.load(std::memory_order_acquire) > 0 ? epoll_fd : -1;
}

face* face_of(uint16_t port) {
    return faces[port - first_face_port].load(std::memory_order_acquire);
}

rte_mempool* superframe_pool(std::string& error) {
    if (pool == nullptr) {
        pool = buffer_charges::create_pool("jakiro_superframes", superframe_pool_buffers,
                                           superframe_data_room, charges, error);
    }
    return pool;
}

buffer_charges& superframe_charges() {
    return charges;
}

namespace {

// "vnet:iface=NAME" or "vnet:tap=NAME[,mac=XX:XX:XX:XX:XX:XX]".
struct face_args {
    std::string iface;
    bool tap = false;
    std::optional<rte_ether_addr> mac;
};

std::optional<face_args> parse_face_args(const std::string& devargs, std::string& error) {
    const auto refuse = [&](const std::string& why) {
        error = "'" + devargs + "': " + why +
                " (vnet:iface=NAME, or vnet:tap=NAME[,mac=XX:XX:XX:XX:XX:XX] for the uplink)";
        return std::nullopt;
    };
    if (devargs.rfind(devargs_prefix, 0) != 0) {
        return refuse("not a vnet face");
    }
    face_args args;
    std::string rest = devargs.substr(std::strlen(devargs_prefix));
    bool named = false;
    while (!rest.empty()) {
        const std::size_t comma = rest.find(',');
        const std::string item = rest.substr(0, comma);
        rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
        const std::size_t eq = item.find('=');
        const std::string key = item.substr(0, eq);
        const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
        if (value.empty()) {
            return refuse("'" + key + "' needs a value");
        }
        if (key == "iface" || key == "tap") {
            if (named) {
                return refuse("one of iface= or tap=, once");
            }
            named = true;
            args.iface = value;
            args.tap = key == "tap";
        } else if (key == "mac") {
            rte_ether_addr mac;
            if (rte_ether_unformat_addr(value.c_str(), &mac) != 0 ||
                !rte_is_unicast_ether_addr(&mac) || rte_is_zero_ether_addr(&mac)) {
                return refuse("mac '" + value + "' is not a unicast MAC address");
            }
            args.mac = mac;
        } else {
            return refuse("unknown key '" + key + "'");
        }
    }
    if (!named) {
        return refuse("no interface named");
    }
    if (args.mac && !args.tap) {
        return refuse("mac= is for a tap (an AF_PACKET face answers to its interface's MAC)");
    }
    return args;
}

}  // namespace

std::optional<uint16_t> add_face(const std::string& devargs, std::string& error,
                                 rte_mempool* uplink_pool) {
    const auto args = parse_face_args(devargs, error);
    if (!args) {
        return std::nullopt;
    }
    if (args->tap && uplink_pool == nullptr) {
        error = "'" + devargs + "': a tap face is for the uplink only";
        return std::nullopt;
    }
    rte_mempool* superframes = superframe_pool(error);
    rte_mempool* mbufs = uplink_pool != nullptr ? uplink_pool : superframes;
    if (mbufs == nullptr || superframes == nullptr) {
        return std::nullopt;
    }
    for (uint16_t i = 0; i < max_faces; ++i) {
        if (faces[i].load(std::memory_order_relaxed) == nullptr) {
            if (epoll_fd < 0 && (epoll_fd = epoll_create1(EPOLL_CLOEXEC)) < 0) {
                error = std::string("epoll_create1: ") + std::strerror(errno);
                return std::nullopt;
            }
            auto opened =
                args->tap ? face::open_tap(args->iface, mbufs, superframes, args->mac, error)
                : uplink_pool != nullptr ? face::open(args->iface, mbufs, error, true)
                                         : face::open(args->iface, mbufs, error, false, &charges);
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

}  // namespace jakiro::vnet_face
