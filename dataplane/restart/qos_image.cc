#include "dataplane/restart/qos_image.hh"

#include <map>

#include "dataplane/shaping/egress_shaper.hh"
#include "dataplane/shaping/ingress_policer.hh"
#include "dataplane/worker/worker_context.hh"

namespace jakiro {

namespace {

using handover::section_kind;

constexpr uint32_t max_workers = 256;
constexpr uint32_t max_carried_vnics = max_vnics;

// Which of a vNIC's buckets follow its name.
constexpr uint8_t has_egress = 1;
constexpr uint8_t has_ingress = 2;
constexpr uint8_t has_packet_rate = 4;
constexpr uint8_t known_parts = has_egress | has_ingress | has_packet_rate;

void put(handover::image_writer& w, const qos::token_bucket_state& b) {
    w.i64(b.units);
    w.u64(b.at_ns);
}

qos::token_bucket_state get(handover::section_reader& r) {
    qos::token_bucket_state b;
    b.units = r.i64();
    b.at_ns = r.u64();
    return b;
}

template <std::size_t N>
void put(handover::image_writer& w, const std::array<qos::token_bucket_state, N>& bs) {
    for (const auto& b : bs) {
        put(w, b);
    }
}

template <std::size_t N>
void get(handover::section_reader& r, std::array<qos::token_bucket_state, N>& bs) {
    for (auto& b : bs) {
        b = get(r);
    }
}

template <class Worker>
Worker* owner(const bucket_owners<Worker>& o, std::size_t slot) {
    const unsigned w = slot < o.slot_workers.size() ? o.slot_workers[slot] : 0;
    return w < o.workers.size() ? o.workers[w] : nullptr;
}

}  // namespace

void write_qos_buckets(handover::image_writer& w,
                       const bucket_owners<const worker_context>& owners) {
    w.begin(section_kind::qos_buckets);
    w.u32(static_cast<uint32_t>(owners.workers.size()));
    for (const worker_context* ctx : owners.workers) {
        w.boolean(ctx->shaper != nullptr);
        if (ctx->shaper != nullptr) {
            put(w, ctx->shaper->scheduler().uplink_bucket());
        }
    }
    struct vnic {
        std::string name;
        uint8_t parts = 0;
        qos::vnic_bucket_states egress;
        qos::meter_bucket_states ingress;
        packet_rate_buckets::carried packet_rate;
    };
    std::vector<vnic> vnics;
    for (std::size_t slot = 0; slot < owners.slot_names.size() && slot < max_vnics; ++slot) {
        const worker_context* ctx = owner(owners, slot);
        if (owners.slot_names[slot].empty() || ctx == nullptr) {
            continue;
        }
        const auto s = static_cast<uint16_t>(slot);
        vnic v;
        v.name = owners.slot_names[slot];
        if (ctx->shaper != nullptr && ctx->shaper->shaped(s)) {
            v.parts |= has_egress;
            v.egress = ctx->shaper->scheduler().buckets(s);
        }
        if (ctx->policer != nullptr && ctx->policer->meter(s) != nullptr) {
            v.parts |= has_ingress;
            v.ingress = ctx->policer->meter(s)->buckets();
        }
        v.packet_rate = ctx->packet_rates.state(s);
        if (v.packet_rate.per_s != 0) {
            v.parts |= has_packet_rate;
        }
        if (v.parts != 0) {
            vnics.push_back(std::move(v));
        }
    }
    w.u32(static_cast<uint32_t>(vnics.size()));
    for (const vnic& v : vnics) {
        w.string(v.name);
        w.u8(v.parts);
        if ((v.parts & has_egress) != 0) {
            put(w, v.egress.vnic);
            put(w, v.egress.min);
            put(w, v.egress.max);
        }
        if ((v.parts & has_ingress) != 0) {
            put(w, v.ingress.vnic);
            put(w, v.ingress.share);
            put(w, v.ingress.max);
        }
        if ((v.parts & has_packet_rate) != 0) {
            w.u32(v.packet_rate.per_s);
            w.i64(v.packet_rate.units);
            w.u64(v.packet_rate.at_ns);
        }
    }
    w.end();
}

bool read_qos_buckets(handover::image_reader& r, const bucket_owners<worker_context>& owners,
                      uint64_t now_ns, uint64_t& carried) {
    carried = 0;
    auto q = r.section(section_kind::qos_buckets);
    const uint32_t workers = q.count(max_workers);
    for (uint32_t i = 0; i < workers && q.ok(); ++i) {
        if (!q.boolean()) {
            continue;
        }
        const qos::token_bucket_state uplink = get(q);
        // Each worker shapes the uplink on its own: the same worker continues its bucket.
        if (i < owners.workers.size() && owners.workers[i]->shaper != nullptr && q.ok()) {
            owners.workers[i]->shaper->carry_uplink(uplink);
        }
    }
    std::map<std::string, uint16_t> slot_of;
    for (std::size_t slot = 0; slot < owners.slot_names.size() && slot < max_vnics; ++slot) {
        if (!owners.slot_names[slot].empty()) {
            slot_of[owners.slot_names[slot]] = static_cast<uint16_t>(slot);
        }
    }
    const uint32_t count = q.count(max_carried_vnics);
    for (uint32_t i = 0; i < count && q.ok(); ++i) {
        const std::string name = q.string();
        const uint8_t parts = q.u8();
        if ((parts & ~known_parts) != 0) {
            q.fail("vNIC '" + name + "' has QoS buckets of unknown kinds " + std::to_string(parts));
            break;
        }
        qos::vnic_bucket_states egress;
        qos::meter_bucket_states ingress;
        packet_rate_buckets::carried packet_rate;
        if ((parts & has_egress) != 0) {
            egress.vnic = get(q);
            get(q, egress.min);
            get(q, egress.max);
        }
        if ((parts & has_ingress) != 0) {
            ingress.vnic = get(q);
            get(q, ingress.share);
            get(q, ingress.max);
        }
        if ((parts & has_packet_rate) != 0) {
            packet_rate.per_s = q.u32();
            packet_rate.units = q.i64();
            packet_rate.at_ns = q.u64();
        }
        const auto it = slot_of.find(name);
        worker_context* ctx = it != slot_of.end() ? owner(owners, it->second) : nullptr;
        if (!q.ok() || ctx == nullptr) {
            continue;  // a vNIC the new configuration no longer has
        }
        const uint16_t slot = it->second;
        if ((parts & has_egress) != 0 && ctx->shaper != nullptr) {
            ctx->shaper->carry(slot, egress);
        }
        if ((parts & has_ingress) != 0 && ctx->policer != nullptr) {
            ctx->policer->carry(slot, ingress);
        }
        if ((parts & has_packet_rate) != 0) {
            ctx->packet_rates.resume(slot, packet_rate, now_ns);
        }
        ++carried;
    }
    return q.ok() && r.ok();
}

}  // namespace jakiro
