#include "qos/ingress_meter.hh"

#include <algorithm>

namespace jakiro::qos {

namespace {

void set_or_create(token_bucket& b, bool exists, uint64_t rate_bps, uint64_t burst_bytes,
                   uint64_t debt_bytes, uint64_t now_ns) {
    if (exists) {
        b.set(rate_bps, burst_bytes, now_ns);
    } else {
        b = token_bucket(rate_bps, burst_bytes, now_ns);
    }
    b.set_max_debt(debt_bytes);
}

}  // namespace

ingress_meter::ingress_meter(const vnic_qos& q, uint64_t now_ns, const ingress_params& p) : _p(p) {
    configure(q, now_ns);
}

void ingress_meter::configure(const vnic_qos& q, uint64_t now_ns) {
    const bool fresh = _burst_bytes == 0;
    const auto jitter_bytes = static_cast<uint64_t>(static_cast<unsigned __int128>(q.rate_bps) *
                                                    _p.processing_jitter_ns / 8'000'000'000);
    _burst_bytes = std::max<uint64_t>({q.burst_bytes, jitter_bytes, 1});
    const uint64_t debt = _burst_bytes * std::max<uint32_t>(_p.hard_limit_bursts, 1);
    set_or_create(_vnic, !fresh, q.rate_bps, _burst_bytes, debt, now_ns);

    for (std::size_t i = 0; i < class_count; ++i) {
        class_state& k = _cls[i];
        const class_qos& c = q.classes[i];
        const uint64_t share = class_share_bps(q, all_classes[i]);
        set_or_create(k.share, !fresh, share, _burst_bytes, debt, now_ns);
        if (c.max_bps != 0) {
            set_or_create(k.max_bucket, !fresh && k.has_max, c.max_bps, _burst_bytes, debt, now_ns);
        }
        k.has_max = c.max_bps != 0;
    }
}

void ingress_meter::charge(class_state& k, uint32_t bytes) {
    _vnic.consume(bytes);
    k.share.consume(bytes);
    if (k.has_max) {
        k.max_bucket.consume(bytes);
    }
}

ingress_verdict ingress_meter::on_packet(uint64_t now_ns, traffic_class c, uint32_t bytes,
                                         ecn codepoint, cnp_pacer* qp) {
    class_state& k = _cls[index_of(c)];
    _vnic.refill(now_ns);
    k.share.refill(now_ns);
    if (k.has_max) {
        k.max_bucket.refill(now_ns);
    }
    const bool over_vnic = !_vnic.has_tokens() && !k.share.has_tokens();
    const bool over_max = k.has_max && !k.max_bucket.has_tokens();

    ingress_verdict v;
    bool want_cnp = c == traffic_class::rdma && codepoint == ecn::ce;
    if (!over_vnic && !over_max) {
        charge(k, bytes);
    } else {
        // Would charging this packet keep the excess within `debt` bytes?
        auto fits = [&](uint64_t debt) {
            return (!over_vnic || _vnic.fits(bytes, debt)) &&
                   (!over_max || k.max_bucket.fits(bytes, debt));
        };
        // A not-ECT frame passes while the excess before it is within one burst: a TCP
        // super-frame is judged whole, and at a low rate it can outweigh the whole burst.
        const bool ect = codepoint != ecn::not_ect;
        const uint64_t allowance =
            ect ? _burst_bytes * std::max<uint32_t>(_p.hard_limit_bursts, 1) : _burst_bytes + bytes;
        if (fits(allowance)) {
            charge(k, bytes);
            if (ect) {
                v.action = ingress_action::mark_ce;
                if (codepoint != ecn::ce) {
                    k.ce_marked.add(1);
                }
            }
        } else {
            v.action = ingress_action::drop;
        }
        want_cnp |= c == traffic_class::rdma;
    }
    if (want_cnp && qp != nullptr && qp->try_send(now_ns, _p.cnp_interval_ns)) {
        v.send_cnp = true;
        k.cnps.add(1);
    }
    if (v.action == ingress_action::drop) {
        k.dropped.add(1);
    } else {
        k.packets.add(1);
        k.bytes.add(bytes);
    }
    return v;
}

meter_bucket_states ingress_meter::buckets() const {
    meter_bucket_states b;
    b.vnic = _vnic.state();
    for (std::size_t i = 0; i < class_count; ++i) {
        b.share[i] = _cls[i].share.state();
        b.max[i] = _cls[i].max_bucket.state();
    }
    return b;
}

void ingress_meter::resume(const meter_bucket_states& b, uint64_t now_ns) {
    _vnic.resume(b.vnic, now_ns);
    for (std::size_t i = 0; i < class_count; ++i) {
        _cls[i].share.resume(b.share[i], now_ns);
        if (_cls[i].has_max) {
            _cls[i].max_bucket.resume(b.max[i], now_ns);
        }
    }
}

ingress_class_counters ingress_meter::counters(traffic_class c) const {
    const class_state& k = _cls[index_of(c)];
    return {k.packets.read(), k.bytes.read(), k.ce_marked.read(), k.dropped.read(), k.cnps.read()};
}

}  // namespace jakiro::qos
