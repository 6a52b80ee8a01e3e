#include "dataplane/control/vnic.hh"

#include <rte_dev.h>
#include <rte_ethdev.h>

#include "dataplane/control/rdma_endpoints.hh"
#include "dataplane/ports.hh"
#include "dataplane/vnet_face/face_registry.hh"
#include "rnic/verbs/channel_server.hh"

namespace jakiro {

std::unique_ptr<vnic> vnic::open(const vnic_config& config, uint16_t slot, rte_mempool* pool,
                                 uint32_t mtu, std::string& error) {
    const auto probed = probe_port(config.port, error);
    if (!probed || !start_port(*probed, pool, mtu, error)) {
        error = config.name + ": " + error;
        return nullptr;
    }
    return std::unique_ptr<vnic>(new vnic(config.name, slot, *probed, config.port));
}

vnic::~vnic() {
    close_rdma_face();
    if (vnet_face::is_face_port(_port)) {
        stop_port(_port);  // closes the face
        return;
    }
    rte_eth_dev_info info{};
    rte_eth_dev_info_get(_port, &info);
    stop_port(_port);
    // Detach the virtual device too, so the same devargs can be probed again later.
    if (info.device != nullptr) {
        rte_dev_remove(info.device);
    }
}

bool vnic::open_rdma_face(verbs::channel_server& server, const vnic_config& config, uint8_t worker,
                          std::string& error) {
    if (_rdma != nullptr && _rdma != &server) {
        close_rdma_face();
    }
    if (!server.serve(endpoint_of(config, _slot, worker), error)) {
        _rdma = nullptr;
        return false;
    }
    _rdma = &server;
    return true;
}

void vnic::close_rdma_face() {
    if (_rdma != nullptr) {
        _rdma->withdraw(_slot);
        _rdma = nullptr;
    }
}

}  // namespace jakiro
