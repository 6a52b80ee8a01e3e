#pragma once
// The RoCE engine's packet_port in jakirod, one per worker as the engine is: engine frames
// become mbufs and take the egress path from the VLT on — RDMA traffic is already admitted per
// connection (RCFT, checked at RTR) or, for UD, per datagram by the engine asking
// permits_datagram, so it skips the NFT. A remote destination is VXLAN-encapsulated to its
// host. A vNIC of this worker gets the frame back through the loopback queue, which the worker
// hands to the engine on its next iteration (never recursively: an ACK to a local peer must not
// re-enter the engine while it is sending). A vNIC of another worker on this host gets it
// through that worker's roce hand-off ring (worker/handoff.hh), since its QPs live in that
// worker's engine; local_vnic() answers only for this worker's vNICs, so the engine's
// memory-to-memory path never looks for a QP it does not run.

#include <rte_mbuf.h>

#include <cstdint>

#include "dataplane/overlay/datagram_builder.hh"
#include "dataplane/tables.hh"
#include "dataplane/worker/worker_context.hh"
#include "rnic/packet_port.hh"

namespace jakiro {

class roce_port final : public rnic::packet_port {
  public:
    static constexpr unsigned loopback_capacity = 1024;

    explicit roce_port(worker_context& ctx) : _ctx(ctx) {}
    ~roce_port();  // frees what was queued and never delivered
    roce_port(const roce_port&) = delete;
    roce_port& operator=(const roce_port&) = delete;

    // The snapshot to route with; set by the worker once per iteration. A new snapshot also
    // tells the engine each vNIC's QoS rate, DCQCN's line rate for its QPs.
    void use(const datapath_tables* tables);

    uint8_t* begin_frame(uint32_t len) override;
    void end_frame(uint16_t vnic, uint32_t dst_ip_be, uint32_t len) override;
    uint16_t local_vnic(uint16_t vnic, uint32_t dst_ip_be) const override;
    bool admit(uint16_t vnic, uint32_t frame_len) override;
    qos::ingress_meter* receiving_meter(uint16_t vnic) override;
    void count_local(uint16_t from_vnic, uint16_t to_vnic, uint64_t bytes) override;
    bool permits_datagram(uint16_t vnic, uint32_t remote_ip_be, bool outbound) override;
    bool admits_connection(uint16_t vnic, uint32_t remote_ip_be) override;
    // RoCE v2 over IPv6: the VLT's IPv6 keys, the same roads. A frame to an IPv6 peer leaves on
    // its own, never in a super-datagram.
    void end_frame_ipv6(uint16_t vnic, const rnic::ipv6_address& dst, uint32_t len) override;
    uint16_t local_vnic_ipv6(uint16_t vnic, const rnic::ipv6_address& dst) const override;
    bool permits_datagram_ipv6(uint16_t vnic, const rnic::ipv6_address& remote,
                               bool outbound) override;
    bool admits_connection_ipv6(uint16_t vnic, const rnic::ipv6_address& remote) override;

    // Hands every looped-back frame queued before this call to the engine. Returns how many.
    unsigned deliver_loopback(rnic::engine& engine, uint64_t now_ns);
    // Frames other workers' engines sent to this worker's vNICs (take_roce): each goes to the
    // engine, metered as from the fabric; one for a vNIC this worker no longer owns is dropped.
    void receive_handed(rte_mbuf** pkts, uint16_t count, uint64_t now_ns);
    // Queues what the RNIC sent since the last call: frames to other hosts for the uplink,
    // frames to other workers' vNICs for those workers. Through an uplink that takes UDP GSO
    // (tap, vnet), consecutive frames of one QP's flow leave as UDP GSO super-datagrams (about
    // one per 64-packet message, as a tenant's TCP sends one per 64 KB); the worker calls this
    // once per iteration, after the engine's poll and before the transmit batch is flushed.
    void flush();

  private:
    worker_context& _ctx;
    const datapath_tables* _tables = nullptr;
    rte_mbuf* _pending = nullptr;  // the frame begun last
    rte_mbuf* _loopback[loopback_capacity];
    uint16_t _loopback_slot[loopback_capacity];
    unsigned _loopback_count = 0;
    // For other workers' engines, handed over in flush() (or when full).
    static constexpr unsigned handed_capacity = 64;
    rte_mbuf* _handed[handed_capacity];
    uint8_t _handed_worker[handed_capacity];
    unsigned _handed_count = 0;
    // Free slots the other workers' roce rings had when last looked at (refreshed when spent).
    unsigned _handoff_room = 0;
    bool handoff_has_room();
    void hand_over();
    // A frame to this host's vNIC of `entry` (a local_vnic VLT entry): to its worker's engine
    // through the hand-off ring, or to this one's through the loopback queue.
    void to_local_vnic(rte_mbuf* m, const overlay::vlt_entry& entry, uint16_t from_slot);
    // One frame of this host's RoCE to the engine, for local vNIC `slot`; frees it.
    void deliver(rnic::engine& engine, uint16_t slot, rte_mbuf* m, uint64_t now_ns);
    // The route of the frame sent last (a QP sends runs of packets to one peer): the VLT entry
    // of (_route_vpc, _route_dst) in _tables, null when none is kept. use() forgets it.
    uint32_t _route_vpc = 0;
    uint32_t _route_dst = 0;
    const overlay::vlt_entry* _route = nullptr;
    // The super-datagram the RNIC's next packet is written into (overlay/datagram_builder.hh):
    // one vNIC's frames to one peer, of one QP's flow, through one uplink.
    overlay::datagram_builder _to_uplink;
    uint16_t _uplink_port = 0;  // of the snapshot _to_uplink's frames were routed with
    uint16_t _run_vnic = 0;
    uint32_t _run_vpc = 0;
    uint32_t _run_dst = 0;
    // Whether the frame just written into _to_uplink is of its flow (the route is looked up).
    bool joins_datagram(uint16_t vnic_slot) const;
    void flush_to_uplink();
};

}  // namespace jakiro
