#include "dataplane/control/overlay_sealing_setup.hh"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>

#include "dataplane/worker/worker_context.hh"

namespace jakiro {

namespace {

overlay::sealing::encryption_policy policy_of(overlay_encryption e) {
    switch (e) {
        case overlay_encryption::optional:
            return overlay::sealing::encryption_policy::optional;
        case overlay_encryption::required:
            return overlay::sealing::encryption_policy::required;
        case overlay_encryption::off:
            break;
    }
    return overlay::sealing::encryption_policy::off;
}

}  // namespace

bool reserve_epochs(const std::string& path, uint64_t now_s, uint32_t& first, uint32_t& limit,
                    std::string& error) {
    uint64_t reserved = 0;
    {
        std::ifstream in(path);
        if (in) {
            if (!(in >> reserved)) {
                error = "overlay epoch file " + path + " does not hold a number";
                return false;
            }
        }
    }
    // SPIs below 256 are reserved (RFC 4303 §2.1): epochs start above them.
    const uint64_t start = std::max<uint64_t>({reserved, now_s, 256});
    if (start + epochs_per_run > UINT32_MAX) {
        error = "overlay epoch file " + path + ": epochs exhausted (rotate the host key)";
        return false;
    }
    first = static_cast<uint32_t>(start);
    limit = static_cast<uint32_t>(start + epochs_per_run);
    const std::string tmp = path + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const std::string text = std::to_string(limit) + "\n";
    const bool written =
        fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
        ::fsync(fd) == 0;
    if (fd >= 0) {
        ::close(fd);
    }
    if (!written || ::rename(tmp.c_str(), path.c_str()) != 0) {
        error = "overlay epoch file " + path + ": cannot write it (" + std::strerror(errno) +
                "); without it a restart could reuse a key";
        return false;
    }
    return true;
}

std::unique_ptr<overlay::sealing::uplink_sealing> sealing_from_config(const host_config& config,
                                                                      std::string& error) {
    const overlay_config& overlay = config.overlay;
    if (!overlay.may_seal()) {
        return nullptr;
    }
    overlay::sealing::sealing_setup setup;
    const auto own = overlay::sealing::load_private_key(overlay.private_key, error);
    if (!own) {
        return nullptr;
    }
    setup.own = *own;
    setup.policy = policy_of(overlay.encryption);
    setup.underlay_ip = config.underlay.ip;
    setup.rekey_bytes = overlay.rekey_bytes;
    setup.rekey_ns = uint64_t{overlay.rekey_seconds} * 1'000'000'000;
    const std::string epochs =
        overlay.epoch_file.empty() ? overlay.private_key + ".epochs" : overlay.epoch_file;
    if (!reserve_epochs(epochs, static_cast<uint64_t>(std::time(nullptr)), setup.first_epoch,
                        setup.epoch_limit, error)) {
        return nullptr;
    }
    for (const auto& h : overlay.hosts) {
        overlay::sealing::peer_setting p;
        p.underlay_ip = h.ip;
        p.policy = policy_of(h.encryption.value_or(overlay.encryption));
        if (!h.public_key.empty()) {
            p.public_key = overlay::sealing::parse_key(h.public_key);
        }
        setup.peers.push_back(p);
    }
    return overlay::sealing::uplink_sealing::create(setup, error);
}

bool offer_overlay_key(const daemon_state& state, uint32_t underlay_ip, const std::string& key) {
    const worker_context* uplink_worker = state.workers.empty() ? nullptr : state.workers[0];
    if (uplink_worker == nullptr || uplink_worker->sealing == nullptr) {
        return true;
    }
    const auto parsed = overlay::sealing::parse_key(key);
    return !parsed || uplink_worker->sealing->offer_key(underlay_ip, *parsed);
}

}  // namespace jakiro
