#include "dataplane/restart/fd_store_restart.hh"

#include <cstdlib>

#include "dataplane/log.hh"
#include "dataplane/restart/handover_server.hh"
#include "handover/fd_store.hh"

namespace jakiro {

namespace {

std::string notify_socket() {
    const char* path = std::getenv("NOTIFY_SOCKET");
    return path != nullptr ? path : "";
}

}  // namespace

std::size_t fd_store_capacity(std::size_t option) {
    if (notify_socket().empty()) {
        return 0;
    }
    if (option != 0) {
        return option;
    }
    const char* exported = std::getenv("FDSTORE");
    if (exported == nullptr) {
        return 0;
    }
    char* end = nullptr;
    const unsigned long n = std::strtoul(exported, &end, 10);
    return end != exported && *end == '\0' ? n : 0;
}

stored_inheritance restore_from_store(const handover::listen_fds& passed) {
    stored_inheritance out;
    out.inherited.emplace();
    out.inherited->asked = std::chrono::steady_clock::now();
    handover::restored_state stored = handover::take_stored_state(passed.fds, max_image_bytes);
    out.names = std::move(stored.names);
    out.missing = stored.missing;
    if (!stored.state) {
        out.refused = stored.error;
        out.inherited.reset();
        return out;
    }
    // The check a predecessor makes of a successor's offer in a take-over, made here by the
    // successor: the predecessor is gone.
    const std::string refusal =
        handover::incompatibility(what_we_read(), stored.state->written, stored.state->required);
    if (!refusal.empty()) {
        handover::close_fds(stored.fds);
        out.refused = refusal;
        out.inherited.reset();
        return out;
    }
    out.inherited->received = std::chrono::steady_clock::now();
    out.inherited->image = std::make_unique<handover::image_reader>(std::move(stored.state->image),
                                                                    std::move(stored.fds));
    if (!out.inherited->image->open()) {
        out.refused = "the state image: " + out.inherited->image->error();
        out.inherited.reset();  // closes the descriptors
    }
    return out;
}

void forget_stored_state(const std::vector<std::string>& names) {
    if (names.empty()) {
        return;
    }
    std::string error;
    if (!handover::remove_from_store(notify_socket(), names, error)) {
        log::warning("fd_store", "could not remove the used state from the store: " + error);
    }
}

bool store_state(const handover::image_writer& image, std::size_t capacity, std::string& why) {
    return handover::save_to_store(notify_socket(), image, capacity, why);
}

}  // namespace jakiro
