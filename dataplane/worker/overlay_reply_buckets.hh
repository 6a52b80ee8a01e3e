#pragma once
// How many answers a worker sends back into the tunnel to each remote host: a token bucket per
// host, one set for neighbour advertisements and one for ARP replies. jakirod answers a foreign
// VTEP's neighbour solicitations and ARP requests itself (pipeline/ingress.cc), one reply per
// question; without a bound, a host on the fabric (or anyone forging its outer source on an
// unauthenticated underlay) would make the worker build and send a reply for every frame it
// sends, time no vNIC of this host is charged for, and turn this host into a reflector towards
// the host it names. A real VTEP resolves each address once per neighbour-cache lifetime
// (seconds), so the allowance is far above what it asks; beyond it the question is a counted
// drop (`inner_nd_rate_limited`, `inner_arp_rate_limited`) and the VTEP asks again, as after a
// lost one.
//
// Buckets are indexed by the host's underlay-neighbour slot (the VLT entry of the address that
// solicits), modulo `buckets`: up to that many hosts each have their own, beyond it hosts whose
// slots collide share one.
//
// Thread-safety: none; one per worker (per-lcore state). Times are passed in.

#include <algorithm>
#include <array>
#include <cstdint>

namespace jakiro {

class overlay_reply_buckets {
  public:
    // Replies per second and host: a VTEP with a thousand tenants, each resolving a new
    // neighbour every second, is served; a flood costs the worker and the named host no more.
    static constexpr uint32_t per_s = 1000;
    // What a host may ask at once after a quiet spell (a VTEP's tenants starting together).
    static constexpr uint32_t burst = 128;
    static constexpr uint32_t buckets = 256;

    // True, and a reply taken from its bucket, if the host in neighbour slot `host` may have a
    // reply at `now_ns` (monotonic).
    bool take(uint32_t host, uint64_t now_ns) {
        bucket& b = _buckets[host % buckets];
        if (b.tokens < burst) {
            // Whole tokens earned since the last refill; the rest of the time stays earned.
            const uint64_t elapsed = std::min<uint64_t>(now_ns - b.refilled_ns, ns_per_s);
            const uint64_t earned = elapsed * per_s / ns_per_s;
            if (earned > 0) {
                b.tokens = static_cast<uint32_t>(std::min<uint64_t>(burst, b.tokens + earned));
                b.refilled_ns = b.tokens == burst ? now_ns : b.refilled_ns + earned * ns_per_token;
            }
        }
        if (b.tokens == 0) {
            return false;
        }
        if (b.tokens-- == burst) {
            b.refilled_ns = now_ns;  // a full bucket starts earning from its first reply
        }
        return true;
    }

  private:
    static constexpr uint64_t ns_per_s = 1'000'000'000;
    static constexpr uint64_t ns_per_token = ns_per_s / per_s;
    struct bucket {
        uint32_t tokens = burst;
        uint64_t refilled_ns = 0;
    };
    std::array<bucket, buckets> _buckets{};
};

}  // namespace jakiro
