#include "dataplane/ports.hh"

#include <rte_dev.h>
#include <rte_errno.h>
#include <rte_ethdev.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "dataplane/vnet_face/face_registry.hh"

namespace jakiro {

namespace {
constexpr uint16_t ring_descriptors = 1024;
}

std::optional<uint16_t> probe_port(const std::string& devargs, std::string& error,
                                   rte_mempool* uplink_pool) {
    if (devargs.rfind(vnet_face::devargs_prefix, 0) == 0) {
        return vnet_face::add_face(devargs, error, uplink_pool);
    }
    const std::string name = devargs.substr(0, devargs.find(','));
    // Hot-plug probing, so vNIC ports can also come and go after start-up.
    const int rc = rte_dev_probe(devargs.c_str());
    if (rc != 0) {
        error = "cannot create device '" + devargs + "': " + rte_strerror(-rc);
        return std::nullopt;
    }
    uint16_t port = 0;
    if (rte_eth_dev_get_port_by_name(name.c_str(), &port) != 0) {
        error = "device '" + name + "' was created but is not an Ethernet port";
        return std::nullopt;
    }
    return port;
}

bool start_port(uint16_t port, rte_mempool* pool, uint32_t mtu, std::string& error) {
    if (vnet_face::is_face_port(port)) {
        return true;  // a face is live from open() on: its frames wait in the socket
    }
    rte_eth_dev_info info{};
    int rc = rte_eth_dev_info_get(port, &info);
    if (rc != 0) {
        error = std::string("cannot query port: ") + rte_strerror(-rc);
        return false;
    }
    // The virtual PMDs used here (af_packet, memif) report a 1518-byte max_rx_pktlen and then
    // pass any frame that fits their ring frames (af_packet framesz) or buffer chains (memif),
    // so the underlay MTU is really set on the kernel interfaces. Ask ethdev for a larger MTU
    // only where the device says it can take it.
    rte_eth_conf conf{};
    const uint32_t frame = mtu + RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN;
    if (mtu > RTE_ETHER_MTU && frame <= info.max_rx_pktlen && mtu <= info.max_mtu) {
        conf.rxmode.mtu = mtu;
    }
    rc = rte_eth_dev_configure(port, 1, 1, &conf);
    if (rc != 0) {
        error = std::string("cannot configure port: ") + rte_strerror(-rc);
        return false;
    }
    uint16_t rx_desc = ring_descriptors;
    uint16_t tx_desc = ring_descriptors;
    rte_eth_dev_adjust_nb_rx_tx_desc(port, &rx_desc, &tx_desc);
    const int socket = rte_eth_dev_socket_id(port);
    const unsigned queue_socket = socket < 0 ? 0u : static_cast<unsigned>(socket);
    rc = rte_eth_rx_queue_setup(port, 0, rx_desc, queue_socket, nullptr, pool);
    if (rc == 0) {
        rc = rte_eth_tx_queue_setup(port, 0, tx_desc, queue_socket, nullptr);
    }
    if (rc != 0) {
        error = std::string("cannot set up queues: ") + rte_strerror(-rc);
        return false;
    }
    rc = rte_eth_dev_start(port);
    if (rc != 0) {
        error = std::string("cannot start port: ") + rte_strerror(-rc);
        return false;
    }
    // The uplink sees the fabric's flooded frames and vNIC ports see tenant frames addressed to
    // the gateway MAC; neither is the port's own MAC, so listen to everything.
    rte_eth_promiscuous_enable(port);
    return true;
}

void stop_port(uint16_t port) {
    if (vnet_face::is_face_port(port)) {
        vnet_face::remove_face(port);
        return;
    }
    rte_eth_dev_stop(port);
    rte_eth_dev_close(port);
}

bool port_link_up(uint16_t port) {
    if (vnet_face::is_face_port(port)) {
        return vnet_face::face_of(port)->link_up();
    }
    rte_eth_link link{};
    return rte_eth_link_get_nowait(port, &link) == 0 && link.link_status == RTE_ETH_LINK_UP;
}

rte_ether_addr port_mac(uint16_t port) {
    rte_ether_addr mac{};
    if (vnet_face::is_face_port(port)) {
        mac = vnet_face::face_of(port)->mac();
    } else {
        rte_eth_macaddr_get(port, &mac);
    }
    return mac;
}

rte_eth_stats port_stats(uint16_t port) {
    rte_eth_stats out{};
    if (!vnet_face::is_face_port(port)) {
        rte_eth_stats_get(port, &out);
        return out;
    }
    const auto s = vnet_face::face_of(port)->stats();
    out.ipackets = s.rx_packets;
    out.ibytes = s.rx_bytes;
    out.opackets = s.tx_packets;
    out.obytes = s.tx_bytes;
    out.imissed = s.rx_missed;
    out.ierrors = s.rx_bad_header + s.rx_truncated;
    out.rx_nombuf = s.rx_nombuf;
    out.oerrors = s.tx_errors;
    return out;
}

superframe_counts port_superframes(uint16_t port) {
    if (!vnet_face::is_face_port(port)) {
        return {};
    }
    const vnet_face::face* face = vnet_face::face_of(port);
    return {face->superframes_received(), face->superframes_sent()};
}

}  // namespace jakiro
