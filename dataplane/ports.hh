#pragma once
// DPDK ports of jakirod: virtual devices created at run time from their devargs
// ("net_af_packet1,iface=t1", "net_memif0,role=server,..."), one rx and one tx queue each.

#include <rte_mempool.h>

#include <cstdint>
#include <optional>
#include <string>

namespace jakiro {

// Creates the virtual device and returns its port id.
std::optional<uint16_t> probe_port(const std::string& devargs, std::string& error);

// Configures and starts a probed port; `max_frame` is the largest Ethernet frame it must carry.
bool start_port(uint16_t port, rte_mempool* pool, uint32_t mtu, std::string& error);

void stop_port(uint16_t port);

}  // namespace jakiro
