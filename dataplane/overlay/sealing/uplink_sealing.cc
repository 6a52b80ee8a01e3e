#include "dataplane/overlay/sealing/uplink_sealing.hh"

#include <rte_ip.h>
#include <rte_udp.h>

#include <algorithm>
#include <cstring>

#include "dataplane/overlay/sealing/opened_superframe.hh"
#include "dataplane/overlay/sealing/sealed_datagrams.hh"
#include "dataplane/overlay/sealing/sealed_superframe.hh"
#include "dataplane/overlay/superframe.hh"
#include "dataplane/overlay/udp_gso.hh"
#include "dataplane/overlay/vnic_mark.hh"
#include "dataplane/overlay/vxlan.hh"

namespace jakiro::overlay::sealing {

namespace {

// Outer Ethernet + IPv4 without options + UDP: the part of a frame that stays in the clear.
constexpr uint32_t clear_bytes = sizeof(rte_ether_hdr) + sizeof(rte_ipv4_hdr) + sizeof(rte_udp_hdr);

// Sealing `frames` frames of `bytes` plaintext bytes for the vNIC whose slot the frame was
// marked with (overlay/vnic_mark.hh) is that vNIC's work; a frame of no vNIC's is jakirod's own.
void charge_sealing(lcore_counters& counters, uint16_t owner, uint64_t frames, uint64_t bytes) {
    if (owner < max_vnics) {
        counters.vnics[owner].sealed_frames.add(frames);
        counters.vnics[owner].sealed_bytes.add(bytes);
    }
}

void count_drop(lcore_counters& counters, rte_mbuf* m, drop_reason reason) {
    counters.drops[static_cast<std::size_t>(reason)].add(1);
    rte_pktmbuf_free(m);
}

// The frame's outer IPv4 and UDP headers when it is a UDP frame without IPv4 options or
// fragmentation and its first segment holds them; nullptr otherwise.
struct udp_frame {
    rte_ipv4_hdr* ip = nullptr;
    rte_udp_hdr* udp = nullptr;
};

udp_frame parse_udp(rte_mbuf* m) {
    if (rte_pktmbuf_data_len(m) < clear_bytes) {
        return {};
    }
    auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
    if (eth->ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4)) {
        return {};
    }
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(eth + 1);
    if (ip->version_ihl != 0x45 || ip->next_proto_id != IPPROTO_UDP) {
        return {};
    }
    return {ip, reinterpret_cast<rte_udp_hdr*>(ip + 1)};
}

bool writable_in_place(const rte_mbuf* m) {
    return m->nb_segs == 1 && RTE_MBUF_DIRECT(m) && rte_mbuf_refcnt_read(m) == 1 &&
           rte_pktmbuf_headroom(m) >= esp_prefix_bytes &&
           rte_pktmbuf_tailroom(m) >= esp_max_trailer_bytes;
}

uint32_t spi_of(const uint8_t* esp) {
    return (uint32_t{esp[0]} << 24) | (uint32_t{esp[1]} << 16) | (uint32_t{esp[2]} << 8) | esp[3];
}

uint64_t seq_of(const uint8_t* esp) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) {
        v = (v << 8) | esp[8 + i];
    }
    return v;
}

// `udp` is the outer UDP header of `m`, behind its outer Ethernet and IPv4 (no options).
void set_lengths(rte_mbuf* m, rte_udp_hdr* udp, uint16_t udp_port) {
    udp->dst_port = rte_cpu_to_be_16(udp_port);
    set_outer_lengths(rte_pktmbuf_mtod(m, uint8_t*), rte_pktmbuf_pkt_len(m), false);
}

}  // namespace

std::unique_ptr<uplink_sealing> uplink_sealing::create(const sealing_setup& setup,
                                                       std::string& error) {
    std::unique_ptr<uplink_sealing> s(new uplink_sealing());
    if (!s->_gcm.ready()) {
        error = "overlay encryption: Intel IPSec-MB could not start a job manager";
        return nullptr;
    }
    s->_policy = setup.policy;
    s->_public_key = setup.own.public_key;
    s->_own = setup.own;
    s->_underlay_ip = setup.underlay_ip;
    s->_first_epoch = setup.first_epoch;
    s->_epoch_limit = setup.epoch_limit;
    s->_rekey_bytes = setup.rekey_bytes;
    s->_rekey_ns = setup.rekey_ns;
    const std::size_t count = setup.peers.size();
    s->_peer_capacity = count + max_learned_peers;
    s->_peers = std::make_unique<peer_sa[]>(s->_peer_capacity);
    s->_index = std::make_unique<peer_slot[]>(s->_peer_capacity);
    for (std::size_t i = 0; i < count; ++i) {
        const peer_setting& in = setup.peers[i];
        peer_sa& p = s->_peers[i];
        p.ip_be = rte_cpu_to_be_32(in.underlay_ip);
        p.policy = in.policy;
        p.self = {setup.own.public_key, setup.underlay_ip};
        s->_index[i] = {p.ip_be, static_cast<uint32_t>(i)};
        if (in.public_key && !s->key_peer(p, *in.public_key, in.underlay_ip)) {
            error = "overlay peer " + std::to_string(in.underlay_ip) +
                    ": its public key gives no shared secret (not an X25519 key)";
            return nullptr;
        }
    }
    std::sort(s->_index.get(), s->_index.get() + count,
              [](const peer_slot& a, const peer_slot& b) { return a.ip_be < b.ip_be; });
    s->_peer_count.store(count, std::memory_order_release);
    return s;
}

bool uplink_sealing::key_peer(peer_sa& p, const x25519_key& key, uint32_t underlay_ip) {
    p.peer = {key, underlay_ip};
    const auto shared = shared_secret(_own.private_key, key);
    if (!shared) {
        return false;
    }
    p.shared = *shared;
    const auto tx = derive_direction_key(p.shared, p.self, p.peer, _first_epoch);
    if (!tx) {
        return false;
    }
    _gcm.expand(*tx, p.tx_key);
    p.tx_epoch = _first_epoch;
    __atomic_store_n(&p.shown_tx_epoch, p.tx_epoch, __ATOMIC_RELAXED);
    __atomic_store_n(&p.keyed, true, __ATOMIC_RELAXED);
    _seals_any = _seals_any || p.seals();
    return true;
}

bool uplink_sealing::offer_key(uint32_t underlay_ip, const x25519_key& key) {
    const uint32_t posted = _offers_posted.load(std::memory_order_relaxed);
    if (posted - _offers_taken.load(std::memory_order_acquire) >= offer_slots) {
        return false;
    }
    _offers[posted % offer_slots] = {underlay_ip, key};
    _offers_posted.store(posted + 1, std::memory_order_release);
    return true;
}

void uplink_sealing::apply_offers() {
    const uint32_t posted = _offers_posted.load(std::memory_order_acquire);
    for (; _offers_seen != posted; ++_offers_seen) {
        const key_offer offer = _offers[_offers_seen % offer_slots];
        if (offer.underlay_ip == _underlay_ip) {
            continue;  // this host's own record
        }
        const uint32_t ip_be = rte_cpu_to_be_32(offer.underlay_ip);
        peer_sa* p = find(ip_be);
        if (p != nullptr) {
            if (!p->keyed) {
                key_peer(*p, offer.key, offer.underlay_ip);
            }
            continue;
        }
        const std::size_t count = _peer_count.load(std::memory_order_relaxed);
        if (count == _peer_capacity) {
            continue;  // beyond max_learned_peers: such a host is treated as unlisted
        }
        peer_sa& fresh = _peers[count];
        fresh.ip_be = ip_be;
        fresh.policy = _policy;
        fresh.self = {_own.public_key, _underlay_ip};
        if (!key_peer(fresh, offer.key, offer.underlay_ip)) {
            continue;  // not an X25519 key: the slot stays free
        }
        // Into the worker's index, in order, then published to the control thread.
        peer_slot* end = _index.get() + count;
        peer_slot* at = std::lower_bound(
            _index.get(), end, ip_be, [](const peer_slot& s, uint32_t ip) { return s.ip_be < ip; });
        std::move_backward(at, end, end + 1);
        *at = {ip_be, static_cast<uint32_t>(count)};
        _peer_count.store(count + 1, std::memory_order_release);
    }
    _offers_taken.store(_offers_seen, std::memory_order_release);
}

peer_sa* uplink_sealing::find(uint32_t ip_be) {
    const peer_slot* begin = _index.get();
    const peer_slot* end = begin + _peer_count.load(std::memory_order_relaxed);
    const peer_slot* it = std::lower_bound(
        begin, end, ip_be, [](const peer_slot& s, uint32_t ip) { return s.ip_be < ip; });
    return it != end && it->ip_be == ip_be ? &_peers[it->slot] : nullptr;
}

bool uplink_sealing::rekey_due(peer_sa& peer, uint64_t now_ns) const {
    if (peer.tx_epoch_start_ns == 0) {
        peer.tx_epoch_start_ns = now_ns;  // the epoch's clock starts with its first frame
        return false;
    }
    const uint64_t age = now_ns - peer.tx_epoch_start_ns;
    return (peer.tx_epoch_bytes >= _rekey_bytes || age >= _rekey_ns) && age >= min_epoch_ns &&
           peer.tx_epoch + 1 < _epoch_limit;
}

void uplink_sealing::rekey(peer_sa& peer, uint64_t now_ns) {
    const auto key = derive_direction_key(peer.shared, peer.self, peer.peer, peer.tx_epoch + 1);
    if (!key) {
        peer.tx_epoch_start_ns = now_ns;  // keep the current epoch; try again after a while
        return;
    }
    _gcm.expand(*key, peer.tx_key);
    peer.tx_epoch += 1;
    peer.tx_seq = 0;
    peer.tx_epoch_bytes = 0;
    peer.tx_epoch_start_ns = now_ns;
    __atomic_store_n(&peer.shown_tx_epoch, peer.tx_epoch, __ATOMIC_RELAXED);
    peer.counters.tx_rekeys.add(1);
}

bool uplink_sealing::derive_rx(peer_sa& peer, uint32_t epoch, rx_sa& out) {
    const auto key = derive_direction_key(peer.shared, peer.peer, peer.self, epoch);
    if (!key) {
        return false;
    }
    _gcm.expand(*key, out.key);
    out.epoch = epoch;
    out.valid = true;
    out.window = replay_window{};
    return true;
}

rx_sa* uplink_sealing::adopt(peer_sa& peer, rx_sa& slot) {
    peer.rx[1] = peer.rx[0];
    peer.rx[0] = slot;
    slot.valid = false;
    if (peer.candidate.valid && peer.candidate.epoch <= peer.rx[0].epoch) {
        peer.candidate.valid = false;
    }
    peer.next.valid = false;
    if (peer.rx[0].epoch != UINT32_MAX) {
        derive_rx(peer, peer.rx[0].epoch + 1, peer.next);
    }
    __atomic_store_n(&peer.shown_rx_epoch, peer.rx[0].epoch, __ATOMIC_RELAXED);
    peer.counters.rx_epochs.add(1);
    return &peer.rx[0];
}

rte_mbuf* uplink_sealing::seal_out_of_place(rte_mbuf* m, peer_sa& peer, rte_mempool* pool) {
    if (m->nb_segs > max_chain) {
        return nullptr;
    }
    const uint32_t plaintext_len = rte_pktmbuf_pkt_len(m) - clear_bytes;
    const uint32_t len =
        clear_bytes + esp_prefix_bytes + plaintext_len + esp_trailer_bytes(plaintext_len);
    rte_mbuf* f = rte_pktmbuf_alloc(pool);
    if (f == nullptr) {
        return nullptr;
    }
    if (rte_pktmbuf_tailroom(f) < len) {
        rte_pktmbuf_free(f);
        return nullptr;
    }
    plaintext_piece pieces[max_chain];
    unsigned count = 0;
    uint32_t skip = clear_bytes;  // parse_udp found them in the first segment
    for (const rte_mbuf* seg = m; seg != nullptr; seg = seg->next) {
        if (seg->data_len > skip) {
            pieces[count++] = {rte_pktmbuf_mtod_offset(seg, const uint8_t*, skip),
                               static_cast<uint32_t>(seg->data_len - skip)};
        }
        skip = 0;
    }
    uint8_t* frame = rte_pktmbuf_mtod(f, uint8_t*);
    std::memcpy(frame, rte_pktmbuf_mtod(m, const uint8_t*), clear_bytes);
    f->data_len = static_cast<uint16_t>(len);
    f->pkt_len = len;
    f->port = m->port;
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(frame + sizeof(rte_ether_hdr));
    auto* udp = reinterpret_cast<rte_udp_hdr*>(ip + 1);
    set_lengths(f, udp, esp_udp_port);
    _gcm.seal_gathered(frame + clear_bytes, 0, {pieces, count}, peer.tx_key, peer.tx_epoch,
                       ++peer.tx_seq, ip->src_addr, ip->dst_addr);
    peer.tx_epoch_bytes += plaintext_len;
    peer.counters.sealed.add(1);
    peer.counters.sealed_bytes.add(plaintext_len);
    rte_pktmbuf_free(m);
    return f;
}

uint16_t uplink_sealing::seal_burst(rte_mbuf* const* in, uint16_t n, rte_mbuf** out, uint16_t room,
                                    uint16_t& taken, bool whole_superframes, rte_mempool* pool,
                                    lcore_counters& counters, uint64_t now_ns) {
    take_offers();
    seal_request requests[gcm_burst::max_burst];
    unsigned pending = 0;
    uint16_t made = 0;
    // Frames of this burst already queued hold the current key, which a rekey overwrites:
    // they are sealed first, under the epoch their SPI names.
    auto rekey_if_due = [&](peer_sa& peer) {
        if (rekey_due(peer, now_ns)) {
            if (pending > 0) {
                _gcm.seal(requests, pending);
                pending = 0;
            }
            rekey(peer, now_ns);
        }
    };
    uint16_t i = 0;
    for (; i < n && made < room; ++i) {
        rte_mbuf* m = in[i];
        udp_frame f = parse_udp(m);
        if (f.ip == nullptr || f.udp->dst_port != rte_cpu_to_be_16(vxlan_udp_port)) {
            out[made++] = m;  // ARP, or nothing of the overlay's
            continue;
        }
        peer_sa* peer = find(f.ip->dst_addr);
        const bool superframe = is_vxlan_superframe(m);
        if (peer == nullptr || !peer->seals()) {
            if (policy_of(peer) == encryption_policy::required) {
                count_drop(counters, m, drop_reason::unsealed_no_key);
                continue;
            }
            if (superframe && !whole_superframes) {
                // Plaintext to an uplink that takes frames only: cut as the egress pipeline
                // cuts for such an uplink when nothing is sealed.
                const auto* inner = rte_pktmbuf_mtod_offset(
                    m, const rte_ipv4_hdr*, clear_bytes + 8 + sizeof(rte_ether_hdr));
                if (made + overlay::frames_of(inner, m->tso_segsz) > room) {
                    break;
                }
                const int cut = overlay::segment_superframe(m, true, UINT16_MAX, pool, out + made,
                                                            static_cast<uint16_t>(room - made));
                if (cut < 0) {
                    counters.drops[static_cast<std::size_t>(drop_reason::segmentation_no_mbufs)]
                        .add(1);
                    continue;
                }
                made = static_cast<uint16_t>(made + cut);
                if (peer != nullptr) {
                    peer->counters.plaintext_sent.add(static_cast<uint64_t>(cut));
                }
                continue;
            }
            if (peer != nullptr) {
                peer->counters.plaintext_sent.add(1);
            }
            out[made++] = m;
            continue;
        }
        const uint16_t owner = marked_vnic(m);
        const uint64_t sealed_before = peer->counters.sealed_bytes.read();
        const uint64_t frames_before = peer->counters.sealed.read();
        // What sealing `m` cost, in frames and plaintext bytes, is its vNIC's.
        auto charge_owner = [&] {
            charge_sealing(counters, owner, peer->counters.sealed.read() - frames_before,
                           peer->counters.sealed_bytes.read() - sealed_before);
        };
        if (superframe) {
            const uint16_t count = superframe_cut_count(m, pool);
            if (count == 0) {
                count_drop(counters, m, drop_reason::seal_superframe);
                continue;
            }
            const uint16_t datagrams = _datagram_pool != nullptr && count > 1
                                           ? superframe_datagram_count(m, count, _datagram_pool)
                                           : 0;
            if (made + (datagrams != 0 ? datagrams : count) > room) {
                break;
            }
            rekey_if_due(*peer);
            if (datagrams != 0 && seal_superframe_datagrams(m, count, datagrams, *peer, _gcm,
                                                            _datagram_pool, out + made)) {
                made = static_cast<uint16_t>(made + datagrams);
                charge_owner();
                continue;
            }
            if (made + count > room) {
                break;  // no 64 KB buffer free: frame by frame, when there is room for them
            }
            if (!seal_superframe(m, count, *peer, _gcm, pool, out + made)) {
                count_drop(counters, m, drop_reason::seal_no_mbufs);
                continue;
            }
            made = static_cast<uint16_t>(made + count);
            charge_owner();
            continue;
        }
        if ((m->ol_flags & RTE_MBUF_F_TX_UDP_SEG) != 0 && _datagram_pool != nullptr) {
            // One QP's RoCE packets written into one buffer (overlay/datagram_builder.hh).
            const uint16_t count = sealed_datagram_count(m, _datagram_pool);
            if (count == 0) {
                count_drop(counters, m, drop_reason::seal_superframe);
                continue;
            }
            if (made + count > room) {
                break;
            }
            rekey_if_due(*peer);
            if (!seal_datagram(m, count, *peer, _gcm, _datagram_pool, out + made)) {
                count_drop(counters, m, drop_reason::seal_no_mbufs);
                continue;
            }
            made = static_cast<uint16_t>(made + count);
            charge_owner();
            continue;
        }
        if ((m->ol_flags & (RTE_MBUF_F_TX_TCP_SEG | RTE_MBUF_F_TX_UDP_SEG)) != 0) {
            count_drop(counters, m, drop_reason::seal_superframe);
            continue;
        }
        rekey_if_due(*peer);
        if (!writable_in_place(m)) {
            rte_mbuf* sealed = seal_out_of_place(m, *peer, pool);
            if (sealed == nullptr) {
                count_drop(counters, m, drop_reason::seal_no_mbufs);
                continue;
            }
            out[made++] = sealed;
            charge_owner();
            continue;
        }
        const uint32_t plaintext_len = rte_pktmbuf_pkt_len(m) - clear_bytes;
        auto* front = reinterpret_cast<uint8_t*>(rte_pktmbuf_prepend(m, esp_prefix_bytes));
        std::memmove(front, front + esp_prefix_bytes, clear_bytes);
        rte_pktmbuf_append(m, static_cast<uint16_t>(esp_trailer_bytes(plaintext_len)));
        auto* ip = reinterpret_cast<rte_ipv4_hdr*>(front + sizeof(rte_ether_hdr));
        auto* udp = reinterpret_cast<rte_udp_hdr*>(ip + 1);
        set_lengths(m, udp, esp_udp_port);
        // Nothing downstream may touch a sealed frame's bytes (a checksum offload would
        // write into the ciphertext).
        m->ol_flags &= ~RTE_MBUF_F_TX_OFFLOAD_MASK;
        requests[pending++] = {front + clear_bytes, plaintext_len, &peer->tx_key, peer->tx_epoch,
                               ++peer->tx_seq,      ip->src_addr,  ip->dst_addr};
        peer->tx_epoch_bytes += plaintext_len;
        peer->counters.sealed.add(1);
        peer->counters.sealed_bytes.add(plaintext_len);
        charge_sealing(counters, owner, 1, plaintext_len);
        out[made++] = m;
        if (pending == gcm_burst::max_burst) {
            _gcm.seal(requests, pending);
            pending = 0;
        }
    }
    if (pending > 0) {
        _gcm.seal(requests, pending);
    }
    taken = i;
    return made;
}

uplink_sealing::rx_choice uplink_sealing::choose_rx(peer_sa& peer, uint32_t epoch, uint64_t now_ns,
                                                    rx_sa*& sa) {
    sa = nullptr;
    if (peer.rx[0].valid && epoch == peer.rx[0].epoch) {
        sa = &peer.rx[0];
    } else if (peer.rx[1].valid && epoch == peer.rx[1].epoch) {
        sa = &peer.rx[1];
    } else if (peer.next.valid && epoch == peer.next.epoch) {
        sa = &peer.next;  // the peer rekeyed
    } else if (!peer.rx[0].valid || epoch > peer.rx[0].epoch) {
        if (peer.candidate.valid && peer.candidate.epoch == epoch) {
            sa = &peer.candidate;
        } else if (now_ns - peer.last_derive_ns >= derive_interval_ns || peer.last_derive_ns == 0) {
            return rx_choice::derive;
        } else {
            return rx_choice::auth_failed;
        }
    } else {
        // An epoch older than the two still open: its frames were all due long ago.
        return rx_choice::replayed;
    }
    return rx_choice::use;
}

rx_sa* uplink_sealing::derive_candidate(peer_sa& peer, uint32_t epoch, uint64_t now_ns) {
    peer.last_derive_ns = now_ns;
    return derive_rx(peer, epoch, peer.candidate) ? &peer.candidate : nullptr;
}

bool uplink_sealing::accept_opened(peer_sa& peer, uint32_t epoch, uint64_t seq) {
    // Keys are a function of the epoch, so a frame opened under one slot is judged against
    // the slot that holds its epoch now (an adoption may have moved it).
    rx_sa* sa = nullptr;
    for (rx_sa* s : {&peer.rx[0], &peer.rx[1], &peer.next, &peer.candidate}) {
        if (s->valid && s->epoch == epoch) {
            sa = s;
            break;
        }
    }
    if (sa == &peer.next || sa == &peer.candidate) {
        sa = adopt(peer, *sa);  // a newer epoch of the peer's authenticated
    }
    return sa != nullptr && sa->window.accept(seq);
}

uint16_t uplink_sealing::open_burst(rte_mbuf** pkts, uint16_t n, rte_be32_t local_ip,
                                    const rte_ether_addr& local_mac, lcore_counters& counters,
                                    uint64_t now_ns) {
    take_offers();
    open_request requests[gcm_burst::max_burst];
    open_result results[gcm_burst::max_burst];
    uint32_t epochs[gcm_burst::max_burst];
    peer_sa* senders[gcm_burst::max_burst];
    uint16_t places[gcm_burst::max_burst];
    uint16_t kept = 0;

    // Frames are kept in place order: the sealed ones are judged after the burst is opened,
    // so first mark where each sealed frame sits in the kept list.
    auto finish = [&](unsigned count) {
        _gcm.open(requests, count, results);
        for (unsigned r = 0; r < count; ++r) {
            rte_mbuf* m = pkts[places[r]];
            peer_sa& peer = *senders[r];
            if (!results[r].ok) {
                peer.counters.auth_failed.add(1);
                count_drop(counters, m, drop_reason::auth_failed);
                pkts[places[r]] = nullptr;
                continue;
            }
            if (!accept_opened(peer, epochs[r], seq_of(requests[r].esp))) {
                peer.counters.replayed.add(1);
                count_drop(counters, m, drop_reason::replayed);
                pkts[places[r]] = nullptr;
                continue;
            }
            // The frame becomes the VXLAN frame it carried: the clear headers move up to the
            // plaintext, the trailer goes.
            uint8_t* frame = rte_pktmbuf_mtod(m, uint8_t*);
            std::memmove(frame + esp_prefix_bytes, frame, clear_bytes);
            rte_pktmbuf_adj(m, esp_prefix_bytes);
            rte_pktmbuf_trim(m, static_cast<uint16_t>(rte_pktmbuf_pkt_len(m) - clear_bytes -
                                                      results[r].plaintext_len));
            frame = rte_pktmbuf_mtod(m, uint8_t*);
            auto* ip = reinterpret_cast<rte_ipv4_hdr*>(frame + sizeof(rte_ether_hdr));
            auto* udp = reinterpret_cast<rte_udp_hdr*>(ip + 1);
            ip->src_addr = peer.ip_be;  // the authenticated sender (it was in the AAD)
            set_lengths(m, udp, vxlan_udp_port);
            peer.counters.opened.add(1);
        }
    };

    unsigned pending = 0;
    for (uint16_t i = 0; i < n; ++i) {
        rte_mbuf* m = pkts[i];
        if ((m->ol_flags & opened_mark) != 0) {
            pkts[kept++] = m;  // opened where it lay in its datagram (open_datagram)
            continue;
        }
        udp_frame f = parse_udp(m);
        const auto* eth = rte_pktmbuf_mtod(m, const rte_ether_hdr*);
        if (f.ip == nullptr || f.ip->dst_addr != local_ip ||
            !rte_is_same_ether_addr(&eth->dst_addr, &local_mac)) {
            pkts[kept++] = m;  // the ingress pipeline judges it as it always has
            continue;
        }
        peer_sa* peer = find(f.ip->src_addr);
        if (f.udp->dst_port == rte_cpu_to_be_16(vxlan_udp_port)) {
            if (policy_of(peer) == encryption_policy::required) {
                if (peer != nullptr) {
                    peer->counters.plaintext_refused.add(1);
                }
                count_drop(counters, m, drop_reason::plaintext_refused);
                continue;
            }
            if (peer != nullptr) {
                peer->counters.plaintext_received.add(1);
            }
            pkts[kept++] = m;
            continue;
        }
        if (f.udp->dst_port != rte_cpu_to_be_16(esp_udp_port)) {
            pkts[kept++] = m;
            continue;
        }
        const uint32_t len = rte_pktmbuf_pkt_len(m);
        const uint32_t ip_len = rte_be_to_cpu_16(f.ip->total_length);
        if (m->nb_segs != 1 || ip_len + sizeof(rte_ether_hdr) > len ||
            ip_len < sizeof(rte_ipv4_hdr) + sizeof(rte_udp_hdr) + gcm_burst::min_esp_len ||
            (rte_be_to_cpu_16(f.ip->fragment_offset) &
             (RTE_IPV4_HDR_OFFSET_MASK | RTE_IPV4_HDR_MF_FLAG)) != 0 ||
            rte_be_to_cpu_16(f.udp->dgram_len) != ip_len - sizeof(rte_ipv4_hdr)) {
            count_drop(counters, m, drop_reason::sealed_malformed);
            continue;
        }
        if (peer == nullptr || !peer->keyed) {
            count_drop(counters, m, drop_reason::auth_failed);
            continue;
        }
        uint8_t* esp = rte_pktmbuf_mtod(m, uint8_t*) + clear_bytes;
        const uint32_t epoch = spi_of(esp);
        const uint64_t seq = seq_of(esp);
        rx_sa* sa = nullptr;
        const rx_choice choice = choose_rx(*peer, epoch, now_ns, sa);
        if (choice == rx_choice::derive) {
            // Frames waiting to be opened may hold the candidate's key: open them first.
            if (pending > 0) {
                finish(pending);
                pending = 0;
            }
            sa = derive_candidate(*peer, epoch, now_ns);
        }
        if (choice == rx_choice::replayed || (sa != nullptr && !sa->window.check(seq))) {
            peer->counters.replayed.add(1);
            count_drop(counters, m, drop_reason::replayed);
            continue;
        }
        if (sa == nullptr) {
            peer->counters.auth_failed.add(1);
            count_drop(counters, m, drop_reason::auth_failed);
            continue;
        }
        // The ESP payload ends where the outer IPv4 packet does (Ethernet padding excluded).
        rte_pktmbuf_trim(m, static_cast<uint16_t>(len - sizeof(rte_ether_hdr) - ip_len));
        requests[pending] = {
            esp, ip_len - static_cast<uint32_t>(sizeof(rte_ipv4_hdr) + sizeof(rte_udp_hdr)),
            &sa->key, f.ip->src_addr, f.ip->dst_addr};
        epochs[pending] = epoch;
        senders[pending] = peer;
        places[pending] = kept;
        pkts[kept++] = m;
        if (++pending == gcm_burst::max_burst) {
            finish(pending);
            pending = 0;
        }
    }
    if (pending > 0) {
        finish(pending);
    }
    // Close the gaps the dropped sealed frames left.
    uint16_t out = 0;
    for (uint16_t i = 0; i < kept; ++i) {
        if (pkts[i] != nullptr) {
            pkts[out++] = pkts[i];
        }
    }
    return out;
}

std::optional<uint16_t> uplink_sealing::open_datagram(
    const uint8_t* head, uint32_t head_len, const uint8_t* tail, uint32_t len, uint16_t gso_size,
    rte_mempool* pool, rte_mempool* superframes, rte_mbuf** out, rte_be32_t local_ip,
    const rte_ether_addr& local_mac, lcore_counters& counters, uint64_t now_ns) {
    take_offers();
    if (len <= clear_bytes || head_len < clear_bytes || head_len > len ||
        (head_len < len && tail == nullptr) || gso_size < gcm_burst::min_esp_len) {
        return std::nullopt;
    }
    const auto* eth = reinterpret_cast<const rte_ether_hdr*>(head);
    const auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(eth + 1);
    const auto* udp = reinterpret_cast<const rte_udp_hdr*>(ip + 1);
    const uint32_t payload = len - clear_bytes;
    const uint32_t chunks = (payload + gso_size - 1) / gso_size;
    const uint32_t room = rte_pktmbuf_data_room_size(pool) - RTE_PKTMBUF_HEADROOM;
    if (eth->ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4) || ip->version_ihl != 0x45 ||
        ip->next_proto_id != IPPROTO_UDP || udp->dst_port != rte_cpu_to_be_16(esp_udp_port) ||
        ip->dst_addr != local_ip || !rte_is_same_ether_addr(&eth->dst_addr, &local_mac) ||
        (rte_be_to_cpu_16(ip->fragment_offset) &
         (RTE_IPV4_HDR_OFFSET_MASK | RTE_IPV4_HDR_MF_FLAG)) != 0 ||
        chunks > overlay::max_gso_chunks || clear_bytes + gso_size > room) {
        return std::nullopt;
    }
    // The bytes at `offset` of the datagram, `n` of them, as at most two pieces.
    auto pieces_of = [&](uint32_t offset, uint32_t n, plaintext_piece* p) -> unsigned {
        unsigned count = 0;
        if (offset < head_len) {
            const uint32_t from_head = std::min(n, head_len - offset);
            p[count++] = {head + offset, from_head};
            n -= from_head;
            offset = head_len;
        }
        if (n > 0) {
            p[count++] = {tail + (offset - head_len), n};
        }
        return count;
    };
    auto gather = [&](uint32_t offset, uint32_t n, uint8_t* to) {
        plaintext_piece p[2];
        const unsigned count = pieces_of(offset, n, p);
        for (unsigned i = 0; i < count; ++i) {
            std::memcpy(to, p[i].data, p[i].len);
            to += p[i].len;
        }
    };
    peer_sa* peer = find(ip->src_addr);
    uint16_t opened = 0;
    // The TCP segments of one flow become one super-frame (opened_superframe.hh).
    opened_run run;
    auto end_run = [&] {
        if (run.open()) {
            out[opened++] = run.finish(peer->ip_be, opened_mark);
        }
    };
    for (uint32_t k = 0; k < chunks; ++k) {
        const uint32_t offset = clear_bytes + k * gso_size;
        const uint32_t esp_len = std::min<uint32_t>(gso_size, len - offset);
        if (esp_len < gcm_burst::min_esp_len) {
            counters.drops[static_cast<std::size_t>(drop_reason::sealed_malformed)].add(1);
            continue;
        }
        if (peer == nullptr || !peer->keyed) {
            counters.drops[static_cast<std::size_t>(drop_reason::auth_failed)].add(1);
            continue;
        }
        uint8_t prefix[esp_prefix_bytes];
        gather(offset, esp_prefix_bytes, prefix);
        const uint32_t epoch = spi_of(prefix);
        const uint64_t seq = seq_of(prefix);
        rx_sa* sa = nullptr;
        const rx_choice choice = choose_rx(*peer, epoch, now_ns, sa);
        if (choice == rx_choice::derive) {
            sa = derive_candidate(*peer, epoch, now_ns);
        }
        drop_reason why = drop_reason::auth_failed;
        bool ok = false;
        rte_mbuf* m = nullptr;
        uint32_t plaintext_len = 0;
        if (choice == rx_choice::replayed || (sa != nullptr && !sa->window.check(seq))) {
            why = drop_reason::replayed;
        } else if (sa != nullptr) {
            plaintext_piece ciphertext[2];
            const uint32_t text_len = esp_len - esp_prefix_bytes - esp_icv_bytes;
            pieces_of(offset + esp_prefix_bytes, text_len, ciphertext);
            uint8_t icv[esp_icv_bytes];
            gather(offset + esp_len - esp_icv_bytes, esp_icv_bytes, icv);
            gcm_burst::open_stream stream;
            _gcm.open_begin(stream, prefix, sa->key, ip->src_addr, ip->dst_addr);
            // The ciphertext in order, each part decrypted to where it belongs.
            unsigned piece = 0;
            uint32_t at = 0;
            uint32_t done = 0;
            auto decrypt = [&](uint8_t* to, uint32_t n) {
                done += n;
                while (n > 0) {
                    const uint32_t take = std::min(n, ciphertext[piece].len - at);
                    _gcm.open_update(stream, to, ciphertext[piece].data + at, take);
                    to += take;
                    n -= take;
                    at += take;
                    if (at == ciphertext[piece].len) {
                        ++piece;
                        at = 0;
                    }
                }
            };
            // Its first bytes say whether it is a TCP segment that may join a run.
            alignas(8) uint8_t probe[max_segment_headers];
            decrypt(probe, std::min(text_len, probe_bytes));
            const segment_shape shape =
                superframes != nullptr ? shape_of(probe, text_len) : segment_shape{};
            if (shape.headers > probe_bytes) {
                decrypt(probe + probe_bytes, shape.headers - probe_bytes);
            }
            bool joins = shape.headers != 0 && run.continues(probe, shape);
            if (!joins) {
                end_run();  // what came before leaves first
                // A run starts at a segment another may follow: not at the datagram's last
                // chunk, nor at one that ends a run itself.
                if (shape.headers != 0 && !shape.pushed && k + 1 < chunks) {
                    rte_mbuf* first = rte_pktmbuf_alloc(pool);
                    rte_mbuf* big = first != nullptr ? rte_pktmbuf_alloc(superframes) : nullptr;
                    if (big != nullptr) {
                        run.start(first, big, head, clear_bytes, probe, shape);
                        joins = true;
                    } else {
                        rte_pktmbuf_free(first);  // null-safe: opened on its own instead
                    }
                }
            }
            if (joins) {
                decrypt(run.payload_at(), shape.payload);
                uint8_t trailer[2 + 3];
                const uint32_t trailer_len = text_len - done;
                decrypt(trailer, trailer_len);
                const uint8_t pad = trailer[trailer_len - 2];
                const bool authentic = _gcm.open_end(stream, icv) &&
                                       trailer[trailer_len - 1] == esp_next_header && pad <= 3 &&
                                       pad + 2u <= trailer_len;
                if (authentic && accept_opened(*peer, epoch, seq)) {
                    run.commit(shape);
                    peer->counters.opened.add(1);
                    continue;
                }
                if (run.segments() == 0) {
                    run.abandon();
                }
                why = authentic ? drop_reason::replayed : drop_reason::auth_failed;
            } else {
                m = rte_pktmbuf_alloc(pool);
                if (m == nullptr) {
                    why = drop_reason::uplink_gso_no_mbufs;
                } else {
                    uint8_t* text = rte_pktmbuf_mtod(m, uint8_t*) + clear_bytes;
                    const uint32_t probed = done;
                    std::memcpy(text, probe, probed);
                    decrypt(text + probed, text_len - probed);
                    const bool authentic = _gcm.open_end(stream, icv);
                    const uint8_t pad = text[text_len - 2];
                    const bool trailer_ok = authentic && text[text_len - 1] == esp_next_header &&
                                            pad <= 3 && text_len >= uint32_t{pad} + 2 + 8;
                    if (trailer_ok && accept_opened(*peer, epoch, seq)) {
                        ok = true;
                        plaintext_len = text_len - pad - 2;
                    } else {
                        why = trailer_ok ? drop_reason::replayed : drop_reason::auth_failed;
                    }
                }
            }
        }
        if (!ok) {
            if (why == drop_reason::replayed) {
                peer->counters.replayed.add(1);
            } else if (why == drop_reason::auth_failed) {
                peer->counters.auth_failed.add(1);
            }
            counters.drops[static_cast<std::size_t>(why)].add(1);
            rte_pktmbuf_free(m);  // null-safe
            continue;
        }
        // The VXLAN frame it carried, behind the outer headers, from the authenticated sender.
        uint8_t* frame = rte_pktmbuf_mtod(m, uint8_t*);
        std::memcpy(frame, head, clear_bytes);
        m->data_len = static_cast<uint16_t>(clear_bytes + plaintext_len);
        m->pkt_len = m->data_len;
        auto* fip = reinterpret_cast<rte_ipv4_hdr*>(frame + sizeof(rte_ether_hdr));
        auto* fudp = reinterpret_cast<rte_udp_hdr*>(fip + 1);
        fip->src_addr = peer->ip_be;
        set_lengths(m, fudp, vxlan_udp_port);
        m->ol_flags = opened_mark;
        peer->counters.opened.add(1);
        out[opened++] = m;
    }
    end_run();
    return opened;
}

}  // namespace jakiro::overlay::sealing
