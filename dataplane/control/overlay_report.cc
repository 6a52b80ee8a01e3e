#include "dataplane/control/overlay_report.hh"

#include <rte_byteorder.h>

#include "dataplane/config/host_config.hh"

namespace jakiro {

namespace {

using overlay::sealing::peer_sa;

uint32_t shown(const uint32_t& epoch) {
    return __atomic_load_n(&epoch, __ATOMIC_RELAXED);
}

}  // namespace

std::string_view encryption_policy_name(overlay::sealing::encryption_policy p) {
    using overlay::sealing::encryption_policy;
    switch (p) {
        case encryption_policy::optional:
            return "optional";
        case encryption_policy::required:
            return "required";
        case encryption_policy::off:
            break;
    }
    return "off";
}

void write_overlay_json(const overlay::sealing::uplink_sealing* sealing, json_writer& out) {
    if (sealing == nullptr) {
        return;
    }
    out.begin_object("overlay")
        .value("encryption", encryption_policy_name(sealing->policy()))
        .value("public_key", overlay::sealing::format_key(sealing->public_key()))
        .value("aes_gcm", sealing->arch())
        .begin_array("peers");
    for (const peer_sa& p : sealing->peers()) {
        const auto& c = p.counters;
        out.begin_object()
            .value("host", format_ipv4(rte_be_to_cpu_32(p.ip_be)))
            .value("encryption", encryption_policy_name(p.policy))
            .value("sealed", p.seals())
            .value("tx_spi", uint64_t{shown(p.shown_tx_epoch)})
            .value("rx_spi", uint64_t{shown(p.shown_rx_epoch)})
            .value("frames_sealed", c.sealed.read())
            .value("bytes_sealed", c.sealed_bytes.read())
            .value("frames_opened", c.opened.read())
            .value("plaintext_sent", c.plaintext_sent.read())
            .value("plaintext_received", c.plaintext_received.read())
            .value("auth_failed", c.auth_failed.read())
            .value("replayed", c.replayed.read())
            .value("plaintext_refused", c.plaintext_refused.read())
            .value("tx_rekeys", c.tx_rekeys.read())
            .value("rx_epochs", c.rx_epochs.read())
            .end_object();
    }
    out.end_array().end_object();
}

std::string overlay_text(const overlay::sealing::uplink_sealing* sealing) {
    if (sealing == nullptr) {
        return "  overlay: plain VXLAN\n";
    }
    std::ostringstream text;
    text << "  overlay: encryption " << encryption_policy_name(sealing->policy())
         << ", ESP-in-UDP AES-256-GCM (" << sealing->arch() << "), public key "
         << overlay::sealing::format_key(sealing->public_key()) << "\n";
    for (const peer_sa& p : sealing->peers()) {
        const auto& c = p.counters;
        text << "    host " << format_ipv4(rte_be_to_cpu_32(p.ip_be)) << " "
             << encryption_policy_name(p.policy) << (p.seals() ? " sealed" : " plain") << " spi tx "
             << shown(p.shown_tx_epoch) << " rx " << shown(p.shown_rx_epoch) << ": sealed "
             << c.sealed.read() << " opened " << c.opened.read() << " plain out "
             << c.plaintext_sent.read() << " in " << c.plaintext_received.read() << ", auth_failed "
             << c.auth_failed.read() << " replayed " << c.replayed.read() << " plaintext_refused "
             << c.plaintext_refused.read() << ", rekeys " << c.tx_rekeys.read() << "\n";
    }
    return text.str();
}

}  // namespace jakiro
