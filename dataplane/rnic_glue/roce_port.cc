#include "dataplane/rnic_glue/roce_port.hh"

#include <rte_ip.h>

#include <cstring>

#include "dataplane/overlay/sealing/esp_format.hh"
#include "dataplane/overlay/vxlan.hh"
#include "dataplane/pipeline/to_remote_host.hh"
#include "dataplane/port_io.hh"
#include "dataplane/rnic_glue/rdma_admission.hh"
#include "dataplane/shaping/egress_shaper.hh"
#include "dataplane/shaping/ingress_metering.hh"
#include "dataplane/worker/clock.hh"
#include "rnic/engine.hh"

namespace jakiro {

roce_port::~roce_port() {
    rte_pktmbuf_free(_pending);
    rte_pktmbuf_free_bulk(_loopback, _loopback_count);
    rte_pktmbuf_free_bulk(_handed, _handed_count);
}

void roce_port::use(const datapath_tables* tables) {
    if (tables == _tables) {
        return;
    }
    flush();  // routed with the old snapshot: they leave by its uplink
    _tables = tables;
    _route = nullptr;  // an entry of the old snapshot's VLT
    if (tables == nullptr || _ctx.engine == nullptr) {
        return;
    }
    const uint64_t now = now_ns();
    for (std::size_t slot = 0; slot < tables->qos.size(); ++slot) {
        const auto& q = tables->qos[slot];
        _ctx.engine->set_vnic_rate(static_cast<uint16_t>(slot), q ? q->rate_bps : 0,
                                   now);  // unchanged: no work
    }
    for (const uint16_t slot : tables->active_slots) {
        _ctx.engine->set_vnic_local_work_rate(slot, tables->vnics[slot].rdma_local_work_rate);
    }
}

// Back-pressure instead of loss: a QP may have 2048 packets in flight, half a hand-off ring,
// and a few QPs of this engine towards a worker that lost its core for a moment would overflow
// its ring. The engine is refused a frame instead (its QPs wait and send later, uncharged),
// whatever the frame's destination: it is not known yet.
bool roce_port::handoff_has_room() {
    if (_ctx.handoff == nullptr || _ctx.handoff->workers() < 2) {
        return true;
    }
    if (_handoff_room <= _handed_count) {
        hand_over();  // what is pending goes first; then look again
        _handoff_room = _ctx.handoff->roce_room(_ctx.id);
    }
    return _handoff_room > _handed_count;
}

uint8_t* roce_port::begin_frame(uint32_t len) {
    if (_pending != nullptr) {
        rte_pktmbuf_free(_pending);  // begun and never ended: not sent
        _pending = nullptr;
    }
    // Straight into the open super-datagram's next chunk, where it will leave from; end_frame
    // moves it out if it turns out to go elsewhere. No hand-off room is needed for it: a
    // frame for another worker is copied out, and that asks for room then.
    if (uint8_t* in_place = _to_uplink.reserve(len)) {
        return in_place;
    }
    if (!handoff_has_room()) {
        return nullptr;
    }
    _pending = rte_pktmbuf_alloc(_ctx.pool);
    if (_pending == nullptr) {
        return nullptr;
    }
    // Leave room in front for the tunnel headers: encapsulation prepends in place.
    auto* frame = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(_pending, len));
    if (frame == nullptr) {
        rte_pktmbuf_free(_pending);
        _pending = nullptr;
    }
    return frame;
}

bool roce_port::joins_datagram(uint16_t vnic_slot) const {
    return _to_uplink.reserved() != nullptr && _run_vnic == vnic_slot &&
           _uplink_port == _tables->uplink_port && _run_dst == _route_dst &&
           _run_vpc == _route_vpc && _to_uplink.reserved_joins();
}

void roce_port::end_frame(uint16_t vnic_slot, uint32_t dst_ip_be, uint32_t len) {
    rte_mbuf* m = _pending;
    _pending = nullptr;
    const bool in_place = m == nullptr && _to_uplink.reserved() != nullptr;
    if ((m == nullptr && !in_place) || _tables == nullptr || vnic_slot >= _tables->vnics.size()) {
        rte_pktmbuf_free(m);
        return;
    }
    (void)len;
    const vnic_view& vnic = _tables->vnics[vnic_slot];
    if (vnic.vpc == no_vpc) {
        _ctx.drop(m, drop_reason::vnic_removed, vnic_slot);  // in place: nothing to free
        return;
    }
    // A snapshot's VLT is read-only while it is in use: the last route holds for the next
    // packet to the same peer, one hash lookup per run of packets instead of per packet.
    if (_route == nullptr || _route_vpc != vnic.vpc || _route_dst != dst_ip_be) {
        _route = _tables->vlt->lookup(vnic.vpc, dst_ip_be);
        _route_vpc = vnic.vpc;
        _route_dst = dst_ip_be;
    }
    if (in_place) {
        if (joins_datagram(vnic_slot)) {
            auto& counters = _ctx.counters.vnics[vnic_slot];
            counters.rdma_tx_packets.add(1);
            counters.rdma_tx_bytes.add(_to_uplink.reserved_len());
            _ctx.counters.encapsulated.add(1);
            const uint32_t padding = _to_uplink.commit();
            if (padding > 0 && _ctx.shaper != nullptr) {
                _ctx.shaper->charge_rdma(vnic_slot, padding);  // on the wire: the vNIC pays
            }
            if (!_to_uplink.takes_more()) {
                flush_to_uplink();
            }
            return;
        }
        // Another peer, flow or vNIC: it leaves on its own, after the datagram (order kept).
        const uint32_t bytes = _to_uplink.reserved_len();
        m = rte_pktmbuf_alloc(_ctx.pool);
        void* copy = m != nullptr ? rte_pktmbuf_append(m, static_cast<uint16_t>(bytes)) : nullptr;
        if (copy == nullptr) {
            _ctx.drop(m, drop_reason::rdma_no_mbufs, vnic_slot);  // the RC timer resends it
            return;
        }
        std::memcpy(copy, _to_uplink.reserved(), bytes);
    }
    flush_to_uplink();  // whatever comes next, the datagram before this frame leaves first
    const overlay::vlt_entry* entry = _route;
    if (entry == nullptr) {
        _ctx.drop(m, drop_reason::vlt_miss, vnic_slot);
        return;
    }
    auto& counters = _ctx.counters.vnics[vnic_slot];
    counters.rdma_tx_packets.add(1);
    counters.rdma_tx_bytes.add(rte_pktmbuf_pkt_len(m));
    if (entry->kind == overlay::vlt_kind::local_vnic) {
        to_local_vnic(m, *entry, vnic_slot);
        return;
    }
    const auto* ip = rte_pktmbuf_mtod_offset(m, const rte_ipv4_hdr*, sizeof(rte_ether_hdr));
    if (!encapsulate_to_remote_host(_ctx, *_tables, vnic_slot, *entry, m, ip,
                                    rte_be_to_cpu_16(ip->total_length))) {
        return;
    }
    // Through an uplink that takes UDP GSO, this frame opens a super-datagram the QP's next
    // packets are written into (when there is a 64 KB buffer for it). On a sealed overlay the
    // uplink's sealing seals its chunks one by one into a datagram of ESP frames, each then
    // longer by its ESP header, trailer and ICV.
    rte_mbuf* big = uplink_takes_udp_gso(_tables->uplink_port) && _ctx.superframes != nullptr
                        ? rte_pktmbuf_alloc(_ctx.superframes)
                        : nullptr;
    _to_uplink.grow_each_chunk_by(_tables->uplink_sealed
                                      ? overlay::sealing::esp_prefix_bytes +
                                            overlay::sealing::esp_max_trailer_bytes
                                      : 0);
    if (big != nullptr && _to_uplink.start(big, m)) {
        rte_pktmbuf_free(m);
        _uplink_port = _tables->uplink_port;
        _run_vnic = vnic_slot;
        _run_vpc = vnic.vpc;
        _run_dst = dst_ip_be;
        return;
    }
    rte_pktmbuf_free(big);
    _ctx.tx.enqueue(_tables->uplink_port, m, _ctx.counters);
}

void roce_port::to_local_vnic(rte_mbuf* m, const overlay::vlt_entry& entry, uint16_t from_slot) {
    const vnic_view& receiver = _tables->vnics[entry.vnic];
    if (receiver.worker != _ctx.id) {   // its QPs are in another worker's engine
        if (_ctx.handoff == nullptr) {  // never: a vNIC of another worker needs workers
            _ctx.drop(m, drop_reason::vnic_removed, from_slot);
            return;
        }
        if (_handed_count == handed_capacity) {
            hand_over();
        }
        m->port = receiver.port_id;
        _handed[_handed_count] = m;
        _handed_worker[_handed_count++] = receiver.worker;
        _ctx.counters.switched_locally.add(1);
        return;
    }
    if (_loopback_count == loopback_capacity) {
        _ctx.drop(m, drop_reason::tx_queue_full, from_slot);
        return;
    }
    _loopback[_loopback_count] = m;
    _loopback_slot[_loopback_count++] = entry.vnic;
    _ctx.counters.switched_locally.add(1);
}

void roce_port::end_frame_ipv6(uint16_t vnic_slot, const rnic::ipv6_address& dst, uint32_t len) {
    (void)len;
    rte_mbuf* m = _pending;
    _pending = nullptr;
    const bool in_place = m == nullptr && _to_uplink.reserved() != nullptr;
    if ((m == nullptr && !in_place) || _tables == nullptr || vnic_slot >= _tables->vnics.size()) {
        rte_pktmbuf_free(m);
        return;
    }
    if (in_place) {
        // Begun in the open super-datagram's next chunk: moved out, it leaves on its own.
        const uint32_t bytes = _to_uplink.reserved_len();
        m = rte_pktmbuf_alloc(_ctx.pool);
        void* copy = m != nullptr ? rte_pktmbuf_append(m, static_cast<uint16_t>(bytes)) : nullptr;
        if (copy == nullptr) {
            _ctx.drop(m, drop_reason::rdma_no_mbufs, vnic_slot);  // the RC timer resends it
            return;
        }
        std::memcpy(copy, _to_uplink.reserved(), bytes);
    }
    flush_to_uplink();  // the datagram before this frame leaves first
    const vnic_view& vnic = _tables->vnics[vnic_slot];
    if (vnic.vpc == no_vpc) {
        _ctx.drop(m, drop_reason::vnic_removed, vnic_slot);
        return;
    }
    const overlay::vlt_entry* entry = _tables->vlt->lookup6(vnic.vpc, dst.data());
    if (entry == nullptr) {
        _ctx.drop(m, drop_reason::vlt_miss, vnic_slot);
        return;
    }
    auto& counters = _ctx.counters.vnics[vnic_slot];
    counters.rdma_tx_packets.add(1);
    counters.rdma_tx_bytes.add(rte_pktmbuf_pkt_len(m));
    if (entry->kind == overlay::vlt_kind::local_vnic) {
        to_local_vnic(m, *entry, vnic_slot);
        return;
    }
    const auto* ip6 = rte_pktmbuf_mtod_offset(m, const uint8_t*, sizeof(rte_ether_hdr));
    const uint32_t ip_len = 40 + ((uint32_t{ip6[4]} << 8) | ip6[5]);
    if (!encapsulate_to_remote_host6(_ctx, *_tables, vnic_slot, *entry, m, ip6, ip_len)) {
        return;
    }
    _ctx.tx.enqueue(_tables->uplink_port, m, _ctx.counters);
}

uint16_t roce_port::local_vnic_ipv6(uint16_t vnic_slot, const rnic::ipv6_address& dst) const {
    if (_tables == nullptr || vnic_slot >= _tables->vnics.size() ||
        _tables->vnics[vnic_slot].vpc == no_vpc) {
        return no_local_vnic;
    }
    const overlay::vlt_entry* entry =
        _tables->vlt->lookup6(_tables->vnics[vnic_slot].vpc, dst.data());
    return entry != nullptr && entry->kind == overlay::vlt_kind::local_vnic &&
                   _tables->vnics[entry->vnic].worker == _ctx.id
               ? entry->vnic
               : no_local_vnic;
}

bool roce_port::permits_datagram_ipv6(uint16_t vnic_slot, const rnic::ipv6_address& remote,
                                      bool outbound) {
    if (_tables == nullptr) {
        return false;
    }
    const auto dir = outbound ? secgroup::direction::egress : secgroup::direction::ingress;
    if (admit_rdma_datagram_ipv6(*_tables, vnic_slot, remote, dir)) {
        return true;
    }
    const auto reason = outbound ? drop_reason::sg_denied_egress : drop_reason::sg_denied_ingress;
    _ctx.counters.drops[static_cast<std::size_t>(reason)].add(1);
    _ctx.counters.vnics[vnic_slot].drops.add(1);
    return false;
}

bool roce_port::admits_connection_ipv6(uint16_t vnic_slot, const rnic::ipv6_address& remote) {
    return _tables != nullptr && admit_rdma_peer_ipv6(*_tables, vnic_slot, remote) == 0;
}

void roce_port::flush() {
    flush_to_uplink();
    hand_over();
}

void roce_port::flush_to_uplink() {
    if (rte_mbuf* datagram = _to_uplink.finish()) {
        _ctx.tx.enqueue(_uplink_port, datagram, _ctx.counters);
    }
}

void roce_port::hand_over() {
    // Consecutive frames for one worker go in one enqueue (usually all of them: with two
    // workers there is only one other).
    for (unsigned start = 0; start < _handed_count;) {
        const uint8_t to = _handed_worker[start];
        unsigned end = start + 1;
        while (end < _handed_count && _handed_worker[end] == to) {
            ++end;
        }
        const auto n = static_cast<uint16_t>(end - start);
        const uint16_t taken = _ctx.handoff->give_roce(to, _handed + start, n);
        for (uint16_t i = taken; i < n; ++i) {
            _ctx.drop(_handed[start + i], drop_reason::handoff_ring_full);
        }
        _ctx.counters.handed_roce.add(taken);
        _handoff_room -= std::min<unsigned>(_handoff_room, taken);
        start = end;
    }
    _handed_count = 0;
}

void roce_port::receive_handed(rte_mbuf** pkts, uint16_t count, uint64_t now_ns) {
    for (uint16_t i = 0; i < count; ++i) {
        rte_mbuf* m = pkts[i];
        const uint16_t slot = _tables != nullptr ? _tables->vnic_of_port[m->port] : no_vnic;
        // The receiver went away while the frame was handed: its QPs went with it.
        if (slot == no_vnic || _tables->vnics[slot].worker != _ctx.id || _ctx.engine == nullptr) {
            _ctx.drop(m, drop_reason::port_removed);
            continue;
        }
        deliver(*_ctx.engine, slot, m, now_ns);
    }
}

void roce_port::deliver(rnic::engine& engine, uint16_t slot, rte_mbuf* m, uint64_t now_ns) {
    const auto* ip = rte_pktmbuf_mtod_offset(m, const uint8_t*, sizeof(rte_ether_hdr));
    const uint32_t ip_len = rte_pktmbuf_pkt_len(m) - sizeof(rte_ether_hdr);
    // Metered as if it had come over the fabric (shaping/ingress_metering.hh).
    receive_rdma(_ctx, engine, *this, slot, ip, ip_len, now_ns);
    rte_pktmbuf_free(m);
}

uint16_t roce_port::local_vnic(uint16_t vnic_slot, uint32_t dst_ip_be) const {
    if (_tables == nullptr || vnic_slot >= _tables->vnics.size() ||
        _tables->vnics[vnic_slot].vpc == no_vpc) {
        return no_local_vnic;
    }
    const overlay::vlt_entry* entry =
        _tables->vlt->lookup(_tables->vnics[vnic_slot].vpc, dst_ip_be);
    // Only a vNIC whose QPs this worker's engine runs: another worker's are reached by packets.
    return entry != nullptr && entry->kind == overlay::vlt_kind::local_vnic &&
                   _tables->vnics[entry->vnic].worker == _ctx.id
               ? entry->vnic
               : no_local_vnic;
}

bool roce_port::admit(uint16_t vnic_slot, uint32_t frame_len) {
    // admit_rdma answers true for a vNIC that is not shaped.
    return _ctx.shaper == nullptr ||
           _ctx.shaper->admit_rdma(vnic_slot, qos::charged_bytes(frame_len));
}

qos::ingress_meter* roce_port::receiving_meter(uint16_t vnic_slot) {
    return jakiro::receiving_meter(_ctx, vnic_slot);
}

void roce_port::count_local(uint16_t from_vnic, uint16_t to_vnic, uint64_t bytes) {
    _ctx.counters.vnics[from_vnic].rdma_tx_bytes.add(bytes);
    _ctx.counters.vnics[to_vnic].rdma_rx_bytes.add(bytes);
    _ctx.counters.rdma_local_messages.add(1);
}

bool roce_port::permits_datagram(uint16_t vnic_slot, uint32_t remote_ip_be, bool outbound) {
    if (_tables == nullptr) {
        return false;
    }
    const auto dir = outbound ? secgroup::direction::egress : secgroup::direction::ingress;
    if (admit_rdma_datagram(*_tables, vnic_slot, remote_ip_be, dir)) {
        return true;
    }
    const auto reason = outbound ? drop_reason::sg_denied_egress : drop_reason::sg_denied_ingress;
    _ctx.counters.drops[static_cast<std::size_t>(reason)].add(1);
    _ctx.counters.vnics[vnic_slot].drops.add(1);
    return false;
}

bool roce_port::admits_connection(uint16_t vnic_slot, uint32_t remote_ip_be) {
    return _tables != nullptr && admit_rdma_peer(*_tables, vnic_slot, remote_ip_be) == 0;
}

unsigned roce_port::deliver_loopback(rnic::engine& engine, uint64_t now_ns) {
    const unsigned count = _loopback_count;
    if (count == 0) {
        return 0;
    }
    // Frames the engine emits while receiving these are appended behind them and wait for
    // the next call.
    rte_mbuf* batch[loopback_capacity];
    uint16_t slots[loopback_capacity];
    for (unsigned i = 0; i < count; ++i) {
        batch[i] = _loopback[i];
        slots[i] = _loopback_slot[i];
    }
    _loopback_count = 0;
    for (unsigned i = 0; i < count; ++i) {
        deliver(engine, slots[i], batch[i], now_ns);
    }
    return count;
}

}  // namespace jakiro
