#pragma once
// Port ids for vnet faces. jakirod names every port by a uint16_t (tables, tx batches, stats);
// ethdevs own 0 .. RTE_MAX_ETHPORTS-1 and vnet faces get the ids above, up to one per vNIC slot,
// so a host is bounded by max_vnics, not by Debian DPDK's RTE_MAX_ETHPORTS of 32.
//
// Thread-safety: add/remove on the control thread; face_of() from the worker. A face is
// removed (and destroyed) only after the snapshot that named it has been retired, as ethdev
// ports are (host_manager closes ports after publish()).

#include <rte_ethdev.h>
#include <rte_mempool.h>

#include <bitset>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "dataplane/counters.hh"
#include "dataplane/vnet_face/buffer_charges.hh"
#include "dataplane/vnet_face/vnet_face.hh"

namespace jakiro::vnet_face {

constexpr uint16_t first_face_port = RTE_MAX_ETHPORTS;
constexpr uint16_t max_faces = max_vnics + 1;                    // every vNIC's, and the uplink's
constexpr uint16_t port_id_space = first_face_port + max_faces;  // every port id is below

// The devargs-like string that selects a vnet face in the YAML: "vnet:iface=t1" (an AF_PACKET
// socket on that interface), or for the uplink "vnet:tap=ultap[,mac=...]" (a tap device).
constexpr const char* devargs_prefix = "vnet:";

inline bool is_face_port(uint16_t port) {
    return port >= first_face_port;
}

// The face with this port id; the caller knows it is a face port in the current snapshot.
face* face_of(uint16_t port);

// Which faces have frames waiting, by face index (port - first_face_port): one level-triggered
// epoll_wait over every face instead of one recvmmsg per face per poll, so a host with 256 quiet
// vNICs pays one system call per poll, not 256. Worker only.
using face_set = std::bitset<max_faces>;
void collect_ready_faces(face_set& ready);
// Takes face `port` out of that set (its frames wait in its socket, and neither the worker's
// poll nor its sleep hears of them) or puts it back. Worker only: the owner of the face's vNIC.
void mute_face(uint16_t port, bool muted);
// That epoll set, readable while a face has frames (an epoll fd nests in another's set), or -1
// before the first face opens. Worker only.
int faces_epoll_fd();

// Opens the face described by `devargs` and returns its port id. With
// `uplink_pool` it is the uplink face, receiving into that pool (vnet_face.hh).
std::optional<uint16_t> add_face(const std::string& devargs, std::string& error,
                                 rte_mempool* uplink_pool = nullptr);
void remove_face(uint16_t port);

// The pool super-frames are received into (created on first use): one mbuf holds 64 KB.
// 1023 of them (64 MB of the daemon's DPDK memory): every vNIC's share of it is bounded
// (buffer_charges.hh, control/vnic_limits.hh).
constexpr unsigned superframe_pool_buffers = 1023;
rte_mempool* superframe_pool(std::string& error);
// Who holds the pool's buffers: a vnet face charges its vNIC for each one it takes.
buffer_charges& superframe_charges();

}  // namespace jakiro::vnet_face
