#include "dataplane/restart/take_over.hh"

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "dataplane/restart/handover_server.hh"
#include "handover/transfer.hh"

namespace jakiro {

namespace {

using namespace std::chrono_literals;

// The predecessor stops its workers and writes its image after the verdict; conntrack tables of
// a few hundred thousand entries take a moment.
constexpr auto image_deadline = 10s;

}  // namespace

handover::section_versions what_we_read() {
    auto reads = handover::readable_sections();
    const char* env = std::getenv("JAKIRO_HANDOVER_READS");
    if (env == nullptr) {
        return reads;
    }
    std::string spec = env;
    std::size_t at = 0;
    while (at < spec.size()) {
        const std::size_t comma = spec.find(',', at);
        const std::string item = spec.substr(at, comma == std::string::npos ? comma : comma - at);
        const std::size_t colon = item.find(':');
        if (colon != std::string::npos) {
            const std::string name = item.substr(0, colon);
            const auto version =
                static_cast<uint16_t>(std::strtoul(item.c_str() + colon + 1, nullptr, 10));
#define JAKIRO_SECTION(n, number, v, required) \
    if (name == #n) {                          \
        reads[number] = version;               \
    }
#include "handover/sections.def"
#undef JAKIRO_SECTION
        }
        if (comma == std::string::npos) {
            break;
        }
        at = comma + 1;
    }
    return reads;
}

std::optional<inheritance> take_over(const std::string& path, std::string& error) {
    // The image names a descriptor per listener, tenant connection, memory region and ring of
    // every vNIC: as many as the predecessor held.
    if (rlimit files{}; getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
        files.rlim_cur = files.rlim_max;
        setrlimit(RLIMIT_NOFILE, &files);
    }
    inheritance in;
    in.asked = std::chrono::steady_clock::now();
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof(addr.sun_path)) {
        error = "hand-over socket path too long: " + path;
        return std::nullopt;
    }
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    in.sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (in.sock < 0 || connect(in.sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        error = "no running jakirod to take over from at " + path + ": " + std::strerror(errno);
        if (in.sock >= 0) {
            close(in.sock);
        }
        return std::nullopt;
    }
    auto fail = [&](const std::string& why) -> std::optional<inheritance> {
        error = why;
        close(in.sock);
        return std::nullopt;
    };
    if (std::string why; !handover::peer_is_trusted(in.sock, why)) {
        return fail("the hand-over socket is not our service's: " + why);
    }
    handover::offer o{what_we_read(), writer_version()};
    if (!handover::send_offer(in.sock, o, error)) {
        return fail(error);
    }
    const auto verdict = handover::receive_verdict(in.sock, 5s, error);
    if (!verdict) {
        return fail(error);
    }
    if (!verdict->empty()) {
        return fail("the running jakirod refused the take-over (it keeps serving): " + *verdict);
    }
    auto image = handover::receive_image(in.sock, image_deadline, max_image_bytes, error);
    if (!image) {
        return fail("receiving the state image: " + error);
    }
    in.received = std::chrono::steady_clock::now();
    in.image =
        std::make_unique<handover::image_reader>(std::move(image->data), std::move(image->fds));
    if (!in.image->open()) {
        const std::string why = "the state image: " + in.image->error();
        report_outcome(in, why);
        return fail(why);
    }
    return in;
}

void report_outcome(inheritance& from, const std::string& failure) {
    if (from.sock < 0) {
        return;
    }
    std::string error;
    handover::send_outcome(from.sock, failure, error);
    close(from.sock);
    from.sock = -1;
}

}  // namespace jakiro
