#include "dataplane/restart/handover_server.hh"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "dataplane/control/socket_path.hh"
#include "dataplane/jakiro_version.hh"
#include "dataplane/log.hh"

namespace jakiro {

namespace {

using namespace std::chrono_literals;

constexpr auto offer_deadline = 5s;
// The successor opens its ports, adopts what it was given and starts its workers before it
// answers; on a loaded two-core host that can take a few seconds.
constexpr auto outcome_deadline = 30s;

}  // namespace

std::string writer_version() {
    return std::string("jakirod ") + JAKIRO_VERSION;
}

handover_server::handover_server(std::string path, hooks h)
    : _path(std::move(path)), _hooks(std::move(h)) {}

handover_server::~handover_server() {
    stop();
}

bool handover_server::start(std::string& error) {
    _wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (_wake_fd < 0) {
        error = std::string("hand-over socket: ") + std::strerror(errno);
        return false;
    }
    // Root only, whatever the umask: the credentials are checked again on every connection.
    _listen_fd = bind_unix_listener(_path, SOCK_SEQPACKET, 4, 0077, error);
    if (_listen_fd < 0) {
        error = "hand-over socket: " + error;
        return false;
    }
    _bound = socket_file_at(_path);
    _thread = std::thread([this] { serve(); });
    return true;
}

void handover_server::stop() {
    if (_thread.joinable()) {
        _stopping = true;
        const uint64_t one = 1;
        (void)!write(_wake_fd, &one, sizeof one);
        _thread.join();
    }
    if (_listen_fd >= 0) {
        close(_listen_fd);
        _listen_fd = -1;
        if (socket_file_at(_path) == _bound) {
            unlink(_path.c_str());  // not a path another process has bound since
        }
    }
    if (_wake_fd >= 0) {
        close(_wake_fd);
        _wake_fd = -1;
    }
}

void handover_server::serve() {
    while (!_stopping) {
        pollfd p[2] = {{_listen_fd, POLLIN, 0}, {_wake_fd, POLLIN, 0}};
        if (poll(p, 2, -1) < 0 || (p[1].revents & POLLIN) != 0) {
            continue;
        }
        const int sock = accept4(_listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (sock < 0) {
            continue;
        }
        _busy = true;
        converse(sock);
        close(sock);
        reclaim_path();
        _busy = false;
    }
}

void handover_server::reclaim_path() {
    // Still here after a conversation: no successor runs. One that bound our path before it
    // failed removed it (or, killed, left a file nobody accepts on): the next `jakiroctl
    // restart` would find no one to take over from.
    if (socket_file_at(_path) == _bound) {
        return;
    }
    std::string error;
    const int fd = bind_unix_listener(_path, SOCK_SEQPACKET, 4, 0077, error);
    if (fd < 0) {
        log::error("handover_socket", "cannot take the hand-over socket back: " + error);
        return;
    }
    close(_listen_fd);
    _listen_fd = fd;
    _bound = socket_file_at(_path);
    log::info("handover_socket", "took the hand-over socket back from a failed successor");
}

void handover_server::converse(int sock) {
    std::string error;
    if (!handover::peer_is_trusted(sock, error)) {
        log::warning("handover_refused", "a take-over from an untrusted peer: " + error);
        return;
    }
    const auto offer = handover::receive_offer(sock, offer_deadline, error);
    if (!offer) {
        log::warning("handover_failed", error);
        return;
    }
    // What this binary writes, checked before anything stops.
    handover::image_writer probe(writer_version());
    for (const auto kind : {
#define JAKIRO_SECTION(name, number, version, required) handover::section_kind::name,
#include "handover/sections.def"
#undef JAKIRO_SECTION
         }) {
        probe.begin(kind);
        probe.end();
    }
    const std::string refusal =
        handover::incompatibility(offer->reads, probe.written(), probe.required());
    if (!refusal.empty()) {
        log::warning("handover_refused", offer->version + " may not take over: " + refusal);
        handover::send_verdict(sock, refusal, error);
        return;
    }
    if (!handover::send_verdict(sock, "", error)) {
        log::warning("handover_failed", error);
        return;
    }
    log::info("handing_over", "to " + offer->version);
    if (!_hooks.freeze(*offer)) {
        _hooks.resume("could not stop the workers");
        return;  // the successor sees the socket close before any image: it gives up
    }
    handover::image_writer image(writer_version());
    if (std::string why; !_hooks.write(image, why)) {
        _hooks.resume("writing the state image: " + why);
        return;  // the successor sees the socket close before any image: it gives up
    }
    if (!handover::send_image(sock, image, error)) {
        _hooks.resume(error);
        return;
    }
    const auto outcome = handover::receive_outcome(
        sock, std::chrono::duration_cast<std::chrono::milliseconds>(outcome_deadline), error);
    if (!outcome) {
        _hooks.resume("the successor did not report: " + error);
        return;
    }
    if (!outcome->empty()) {
        _hooks.resume("the successor failed: " + *outcome);
        return;
    }
    log::info("handed_over", "the successor runs; exiting");
    _hooks.exit();
}

}  // namespace jakiro
