#include "face_registry.hh"

#include <rte_errno.h>
#include <rte_lcore.h>

#include <array>
#include <atomic>

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

}  // namespace

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

std::optional<uint16_t> add_face(const std::string& devargs, std::string& error) {
    const std::string key = std::string(devargs_prefix) + "iface=";
    if (devargs.rfind(key, 0) != 0 || devargs.size() == key.size() ||
        devargs.find(',') != std::string::npos) {
        error = "'" + devargs + "' is not vnet:iface=NAME";
        return std::nullopt;
    }
    rte_mempool* mbufs = superframe_pool(error);
    if (mbufs == nullptr) {
        return std::nullopt;
    }
    for (uint16_t i = 0; i < max_faces; ++i) {
        if (faces[i].load(std::memory_order_relaxed) == nullptr) {
            auto opened = face::open(devargs.substr(key.size()), mbufs, error);
            if (!opened) {
                return std::nullopt;
            }
            faces[i].store(opened.release(), std::memory_order_release);
            return static_cast<uint16_t>(first_face_port + i);
        }
    }
    error = "no vnet face slots left (" + std::to_string(max_faces) + ")";
    return std::nullopt;
}

void remove_face(uint16_t port) {
    face* f = faces[port - first_face_port].exchange(nullptr, std::memory_order_acq_rel);
    delete f;
}

}  // namespace jakiro::vnet
