#pragma once
// One tenant vNIC as jakirod runs it, owning both of its faces: the Ethernet face (the port the
// worker polls under the vNIC's datapath slot) and the RDMA face (its verbs endpoint in the
// tenant's namespace, served by verbs::channel_server, whose QPs the RoCE engine runs).
//
// host_manager creates one per configured vNIC and destroys it when `apply` removes the vNIC.
// The faces open and close in one order, so that no tenant can act through a vNIC that is half
// there (docs/threat-model.md): the Ethernet face opens first and the RDMA face after the datapath
// snapshot knows the slot; on the way out the RDMA face goes first (its clients learn the device
// is gone and its QPs leave the engine), then the snapshot forgets the slot, then the port closes
// (the destructor).
//
// Thread-safety: main before the control thread starts, then the control thread only.

#include <rte_mempool.h>

#include <cstdint>
#include <memory>
#include <string>

#include "dataplane/config/host_config.hh"

namespace jakiro {

namespace verbs {
class channel_server;
}

class vnic {
  public:
    // Opens the Ethernet face (probes and starts `config.port`); nullptr with `error` set.
    static std::unique_ptr<vnic> open(const vnic_config& config, uint16_t slot, rte_mempool* pool,
                                      uint32_t mtu, std::string& error);
    // Closes the RDMA face if still served, then stops and detaches the port. The snapshot the
    // worker reads must no longer name the slot (host_manager publishes first).
    ~vnic();
    vnic(const vnic&) = delete;
    vnic& operator=(const vnic&) = delete;

    const std::string& name() const { return _name; }
    uint16_t slot() const { return _slot; }
    uint16_t port() const { return _port; }
    const std::string& devargs() const { return _devargs; }
    bool serves_rdma() const { return _rdma != nullptr; }

    // Serves the RDMA face of `config` (this vNIC's current configuration) on `server`, its
    // QPs run by the engine of `worker` (the vNIC's owner), or changes its limits in place when
    // it is already served; false with `error` set (the Ethernet face works regardless).
    bool open_rdma_face(verbs::channel_server& server, const vnic_config& config, uint8_t worker,
                        std::string& error);
    // Tells the face's clients the device is gone and destroys everything they created;
    // returns when that is done. Idempotent.
    void close_rdma_face();

  private:
    vnic(std::string name, uint16_t slot, uint16_t port, std::string devargs)
        : _name(std::move(name)), _slot(slot), _port(port), _devargs(std::move(devargs)) {}

    std::string _name;
    uint16_t _slot;
    uint16_t _port;
    std::string _devargs;
    verbs::channel_server* _rdma = nullptr;  // serving the RDMA face, or none
};

}  // namespace jakiro
