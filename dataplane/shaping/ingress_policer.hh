#pragma once
// DHTB on the receiving side (docs/architecture.md §6), one per worker: a qos::ingress_meter per
// shaped vNIC, kept in step with each snapshot's QoS settings. The ingress pipeline asks it about
// every IP packet for a shaped vNIC (tcp class: mark CE or drop above the share), the RoCE
// engine about every RoCEv2 packet (rdma class: a CNP to the sending QP above the share).
//
// Thread-safety: the owning worker; counters via the meters (relaxed reads).

#include <array>
#include <cstdint>
#include <memory>
#include <optional>

#include "dataplane/counters.hh"
#include "dataplane/tables.hh"
#include "qos/ingress_meter.hh"

namespace jakiro {

class ingress_policer {
  public:
    // Meters the shaped vNICs `worker` owns (the others' traffic never reaches it).
    void sync(const datapath_tables& tables, uint8_t worker, uint64_t now_ns);
    // The meter of `slot`, or nullptr when the vNIC is not shaped.
    qos::ingress_meter* meter(uint16_t slot) {
        return slot < max_vnics ? _meters[slot].get() : nullptr;
    }
    const qos::ingress_meter* meter(uint16_t slot) const {
        return slot < max_vnics ? _meters[slot].get() : nullptr;
    }

    // A restarted jakirod's meters continue its predecessor's buckets: `carry` before the
    // worker runs; the next sync that meters the vNIC in `slot` resumes them (egress_shaper).
    void carry(uint16_t slot, const qos::meter_bucket_states& b) { _carried[slot] = b; }

  private:
    const datapath_tables* _seen = nullptr;
    std::array<std::optional<qos::meter_bucket_states>, max_vnics> _carried{};
    std::array<std::unique_ptr<qos::ingress_meter>, max_vnics> _meters{};
};

}  // namespace jakiro
