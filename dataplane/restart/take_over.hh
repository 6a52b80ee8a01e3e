#pragma once
// The new side of a take-over (docs/restart.md): `jakirod --take-over` asks the running jakirod
// of its host for its state before it opens any port, and tells it the outcome once its own
// workers run.
//
// Thread-safety: main, before the other threads start.

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "handover/image.hh"

namespace jakiro {

// The most state a successor reads (a take-over's image, or systemd's stored one).
inline constexpr std::size_t max_image_bytes = std::size_t{1} << 30;

// The newest version of each state section this binary reads. JAKIRO_HANDOVER_READS=
// kind:version,... pretends to read only up to these versions (tests of the version check,
// which otherwise need two builds).
handover::section_versions what_we_read();

struct inheritance {
    int sock = -1;  // to the predecessor, for the outcome
    std::unique_ptr<handover::image_reader> image;
    std::chrono::steady_clock::time_point asked;     // when we connected
    std::chrono::steady_clock::time_point received;  // when the image was in
};

// Connects to the predecessor at `path`, offers what this binary reads and receives the image.
// nullopt with `error`: refused (the predecessor serves on) or failed.
std::optional<inheritance> take_over(const std::string& path, std::string& error);

// Tells the predecessor: running (`failure` empty; it exits) or failed (it resumes).
void report_outcome(inheritance& from, const std::string& failure);

// The hand-over socket of the jakirod whose control socket is `control_socket`.
inline std::string handover_path(const std::string& control_socket) {
    return control_socket + ".handover";
}

}  // namespace jakiro
