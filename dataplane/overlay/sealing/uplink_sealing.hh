#pragma once
// The sealed overlay on the uplink (docs/architecture.md §2a): every frame to another Jakiro
// host leaves as ESP in UDP (esp_format.hh) under the pair's current key, and every sealed
// frame that arrives is authenticated and opened before anything reads what it carries. An
// opened frame becomes the plaintext VXLAN frame it carried, its outer source the host whose
// key opened it, so the ingress pipeline's inner-source check binds to the authenticated
// sender, not to an address on the wire.
//
// One per host, run by the uplink's worker alone (it receives every fabric frame and sends
// every frame to the fabric). Worker side: bursts, no allocation, no lock; a system call or an
// OpenSSL call only once per new epoch (bounded per peer in time) and once per host whose key
// is learned while running (offer_key).

#include <rte_ether.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "dataplane/counters.hh"
#include "dataplane/overlay/sealing/gcm_burst.hh"
#include "dataplane/overlay/sealing/host_key.hh"
#include "dataplane/overlay/sealing/peer_sa.hh"

namespace jakiro::overlay::sealing {

struct peer_setting {
    uint32_t underlay_ip = 0;  // host order
    std::optional<x25519_key> public_key;
    encryption_policy policy = encryption_policy::off;
};

struct sealing_setup {
    encryption_policy policy = encryption_policy::off;  // for hosts not in `peers`
    host_key_pair own;
    uint32_t underlay_ip = 0;  // host order
    std::vector<peer_setting> peers;
    // The first epoch this run may seal with, and one past the last it may reach by rekeying
    // (epoch_store.hh reserves the range so no run of this host reuses a key).
    uint32_t first_epoch = 256;
    uint32_t epoch_limit = UINT32_MAX;
    uint64_t rekey_bytes = uint64_t{1} << 36;            // 64 GiB per epoch
    uint64_t rekey_ns = uint64_t{3600} * 1'000'000'000;  // an hour per epoch
};

class uplink_sealing {
  public:
    // nullptr and `error` when IPSec-MB cannot start or a peer's key is unusable.
    static std::unique_ptr<uplink_sealing> create(const sealing_setup& setup, std::string& error);

    // Frames about to leave on the uplink, the first `n` of `in`, into `out` (room for `room`
    // frames; not `in`), in order: those to a host that seals become ESP frames, the rest pass
    // unchanged. A VXLAN TCP super-frame (overlay::mark_vxlan_superframe) to a host that seals
    // becomes its sealed frames, cut and sealed in one pass (sealed_superframe.hh); one to a
    // host that does not stays whole where the uplink takes super-frames (`whole_superframes`)
    // and is cut otherwise. A frame that is not one writable buffer is sealed out of place into
    // an mbuf of `pool`. What cannot leave (no key for a required host, no mbuf) is dropped and
    // counted in `counters`. Stops before a frame whose frames do not fit what is left of
    // `room`: `taken` says how many of `in` were consumed (sent on or dropped). Returns how many
    // frames are in `out`.
    uint16_t seal_burst(rte_mbuf* const* in, uint16_t n, rte_mbuf** out, uint16_t room,
                        uint16_t& taken, bool whole_superframes, rte_mempool* pool,
                        lcore_counters& counters, uint64_t now_ns);
    // For an uplink that takes UDP GSO: seal_burst writes a super-frame's sealed frames
    // straight into super-datagrams in mbufs of `pool` (64 KB data rooms), one contiguous
    // buffer each (sealed_superframe.hh), instead of one mbuf per frame joined afterwards.
    void seal_into_datagrams(rte_mempool* pool) { _datagram_pool = pool; }
    // That pool, for the super-frames open_datagram opens (nullptr when not set).
    rte_mempool* datagram_pool() const { return _datagram_pool; }

    // Frames from the fabric, in place: sealed ones are authenticated, checked against the
    // replay window and opened into the VXLAN frames they carried; plaintext VXLAN from a host
    // that must seal is dropped. Anything else passes for the ingress pipeline to judge.
    // Returns how many of `pkts` are left.
    uint16_t open_burst(rte_mbuf** pkts, uint16_t n, rte_be32_t local_ip,
                        const rte_ether_addr& local_mac, lcore_counters& counters, uint64_t now_ns);

    // A UDP GSO super-datagram of sealed frames (sealed_datagrams.hh) as the uplink face read
    // it, `len` bytes: the first `head_len` at `head` (the outer headers at least), the rest at
    // `tail`, one ESP payload every `gso_size` bytes behind the outer headers. Each is opened
    // where it lies, checked as open_burst checks a frame, and decrypted straight to where it
    // goes, behind a copy of the outer headers: consecutive TCP segments of one flow into one
    // super-frame (opened_superframe.hh; its payload in an mbuf of `superframes`, none when
    // that is nullptr), any other frame into its own mbuf of `pool` (no copy of the
    // ciphertext first). The VXLAN frames that authenticate go to `out` (room for
    // overlay::max_gso_chunks) marked `opened_mark`, which open_burst passes on. Returns how
    // many; what fails is counted and dropped. nullopt, and nothing touched, when the datagram
    // is not one this opens (not ESP to this host, lengths that do not fit the pool's mbufs):
    // the face cuts it as any other, and open_burst judges its frames.
    std::optional<uint16_t> open_datagram(const uint8_t* head, uint32_t head_len,
                                          const uint8_t* tail, uint32_t len, uint16_t gso_size,
                                          rte_mempool* pool, rte_mempool* superframes,
                                          rte_mbuf** out, rte_be32_t local_ip,
                                          const rte_ether_addr& local_mac, lcore_counters& counters,
                                          uint64_t now_ns);
    // What marks a frame open_datagram opened: DPDK's "processed by a security offload" (no
    // port of ours sets it; every receive path clears an mbuf's flags).
    static constexpr uint64_t opened_mark = RTE_MBUF_F_RX_SEC_OFFLOAD;

    // Control thread: `key` is the public key of the host at `underlay_ip` (host order),
    // learned while jakirod runs (its etcd host record). The uplink's worker takes it at its
    // next burst: a host without an SA gets one under `overlay.encryption`, one with an SA
    // but no key is keyed; a host keyed already keeps its key (a new key takes a restart).
    // False when the offers before it are not all taken yet: offer it again later.
    bool offer_key(uint32_t underlay_ip, const x25519_key& key);
    // Hosts learned while running that get an SA, beyond those of the YAML (each SA holds
    // its keys and replay windows, about 8 KB).
    static constexpr std::size_t max_learned_peers = 256;

    // Any thread: the SAs, in no particular order (one learned while running is appended).
    std::span<const peer_sa> peers() const {
        return {_peers.get(), _peer_count.load(std::memory_order_acquire)};
    }
    const x25519_key& public_key() const { return _public_key; }
    encryption_policy policy() const { return _policy; }
    const char* arch() const { return _gcm.arch(); }
    // Whether any frame may be sealed: the uplink must then be sent frames, not super-frames.
    bool seals_any() const { return _seals_any; }

    // Sending epochs move on no more often than this, whatever the byte budget says.
    static constexpr uint64_t min_epoch_ns = 100'000'000;
    // A receiving SA for a new epoch of a peer is derived at most this often per peer: an
    // attacker who forges SPIs in a host's name costs the worker one derivation per interval.
    static constexpr uint64_t derive_interval_ns = 10'000'000;

  private:
    uplink_sealing() = default;
    peer_sa* find(uint32_t ip_be);
    // The keys of `peer` with the host whose public key is `key`: the shared secret and the
    // sending key of the run's first epoch. False when the key gives no shared secret.
    bool key_peer(peer_sa& peer, const x25519_key& key, uint32_t underlay_ip);
    // Worker: applies the keys offer_key posted (cheap when there are none).
    void take_offers() {
        if (_offers_posted.load(std::memory_order_acquire) != _offers_seen) {
            apply_offers();
        }
    }
    void apply_offers();
    encryption_policy policy_of(const peer_sa* peer) const {
        return peer != nullptr ? peer->policy : _policy;
    }
    // Whether `peer`'s sending epoch has used up its byte or time budget (and may move on).
    bool rekey_due(peer_sa& peer, uint64_t now_ns) const;
    void rekey(peer_sa& peer, uint64_t now_ns);
    bool derive_rx(peer_sa& peer, uint32_t epoch, rx_sa& out);
    // A frame of `slot`'s epoch (`next` or `candidate`) authenticated: it becomes the current
    // receiving epoch, the current one stays open for frames sealed before the peer's rekey,
    // the one before that is over, and the epoch after it is derived. Returns the new rx[0].
    rx_sa* adopt(peer_sa& peer, rx_sa& slot);
    // Which receiving SA a sealed frame of `peer` under `epoch` is tried with (`sa`): one that
    // holds the epoch (use), none yet but a newer epoch may be derived now (derive: the caller
    // opens what it holds under the candidate first, then derive_candidate), none
    // (auth_failed: derived too recently), or an epoch closed long ago (replayed).
    enum class rx_choice : uint8_t { use, derive, auth_failed, replayed };
    rx_choice choose_rx(peer_sa& peer, uint32_t epoch, uint64_t now_ns, rx_sa*& sa);
    rx_sa* derive_candidate(peer_sa& peer, uint32_t epoch, uint64_t now_ns);
    // A frame of `epoch` with number `seq` authenticated: moves its window (and adopts a newer
    // epoch). False: it is a replay.
    bool accept_opened(peer_sa& peer, uint32_t epoch, uint64_t seq);
    // `m` (to `peer`, which seals) sealed into a fresh mbuf of `pool`, its bytes encrypted from
    // where they lie; `m` is freed. nullptr (and `m` left) when no mbuf holds the sealed frame.
    rte_mbuf* seal_out_of_place(rte_mbuf* m, peer_sa& peer, rte_mempool* pool);

    gcm_burst _gcm;
    rte_mempool* _datagram_pool = nullptr;
    x25519_key _public_key{};
    encryption_policy _policy = encryption_policy::off;
    bool _seals_any = false;
    // Slots [0, _peer_count) hold SAs, never moved (the counters are atomics the control
    // thread reads): the YAML's first, the learned ones appended by the worker, which
    // publishes the count after the SA is whole. _index is the worker's: (ip_be, slot) sorted.
    struct peer_slot {
        uint32_t ip_be;
        uint32_t slot;
    };
    std::unique_ptr<peer_sa[]> _peers;
    std::unique_ptr<peer_slot[]> _index;
    std::size_t _peer_capacity = 0;
    std::atomic<std::size_t> _peer_count{0};
    host_key_pair _own{};
    uint32_t _underlay_ip = 0;  // host order
    uint32_t _first_epoch = 0;
    uint32_t _epoch_limit = UINT32_MAX;
    uint64_t _rekey_bytes = 0;
    uint64_t _rekey_ns = 0;
    // Keys posted by offer_key (control thread) for the worker; a ring of offer_slots.
    struct key_offer {
        uint32_t underlay_ip;
        x25519_key key;
    };
    static constexpr uint32_t offer_slots = 64;
    std::array<key_offer, offer_slots> _offers{};
    std::atomic<uint32_t> _offers_posted{0};  // written by the control thread
    std::atomic<uint32_t> _offers_taken{0};   // written by the worker
    uint32_t _offers_seen = 0;                // the worker's copy of _offers_taken
};

}  // namespace jakiro::overlay::sealing
