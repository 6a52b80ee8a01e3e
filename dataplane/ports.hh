#pragma once
// Ports of jakirod: DPDK virtual devices created at run time from their devargs
// ("net_af_packet1,iface=t1", "net_memif0,role=server,..."), one rx and one tx queue each, or
// vnet faces ("vnet:iface=t1", vnet_face/), which move super-frames and are not ethdevs.
// Control side; the worker uses port_io.hh.

#include <rte_ethdev.h>
#include <rte_mempool.h>

#include <cstdint>
#include <optional>
#include <string>

namespace jakiro {

// Creates the virtual device and returns its port id. `uplink_pool`: the port is the uplink;
// a vnet face then becomes the uplink face receiving into that pool (vnet_face/vnet_face.hh).
std::optional<uint16_t> probe_port(const std::string& devargs, std::string& error,
                                   rte_mempool* uplink_pool = nullptr);

// Configures and starts a probed port; `max_frame` is the largest Ethernet frame it must carry.
bool start_port(uint16_t port, rte_mempool* pool, uint32_t mtu, std::string& error);

// Stops the port; a vnet face is closed and its id freed.
void stop_port(uint16_t port);

// What the control thread reports, for either kind of port.
bool port_link_up(uint16_t port);
rte_ether_addr port_mac(uint16_t port);
rte_eth_stats port_stats(uint16_t port);
// Super-frames a vnet face received and sent (TCP GSO frames on a tenant face, UDP GSO
// super-datagrams on the uplink); a DPDK port has none.
struct superframe_counts {
    uint64_t rx = 0, tx = 0;
};
superframe_counts port_superframes(uint16_t port);

}  // namespace jakiro
