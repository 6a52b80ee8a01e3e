#pragma once
// `systemctl restart` without tenants noticing (docs/restart.md): the state image of a take-over
// (image.hh), parked in systemd's file-descriptor store between the old process's exit and the
// new one's start, instead of handed over a socket.
//
// Saving (the old process, on SIGTERM): every distinct descriptor the image names goes to the
// manager in a message of its own, `FDSTORE=1` with `FDNAME=jakiro-fd-<slot>` (one name per
// message: systemd gives every descriptor of a message the message's name, and may hand them
// back in any order); then the state itself, a sealed memfd named "jakiro-state"; then a
// `BARRIER=1`, so that the manager has taken everything before the process exits. The memfd
// holds an envelope: the image's section table (kind, version, required: what the take-over's
// offer/verdict checks), the store slot of each of the image's descriptor indexes (systemd keeps
// one copy of descriptors that share an open file, which a tenant can arrange, so the image's
// indexes map onto slots), and the image bytes.
//
// Restoring (the new process, at start): the descriptors come back as $LISTEN_FDS
// (listen_fds.hh); with a "jakiro-state" among them the envelope is read (bounded, and only from
// a sealed memfd), the image's descriptors are put back in index order, and the new process
// restores exactly as after a take-over. A descriptor the manager no longer holds (systemd drops
// one that hangs up while stored: a tenant that went away) is replaced by a socket whose peer is
// gone, so its restored owner sees a disconnection; nothing else is missing. The names taken are
// removed from the store afterwards (`FDSTOREREMOVE=1`), so a later crash finds no stale image.
//
// Thread-safety: none; one save or restore at a time.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "handover/image.hh"
#include "handover/listen_fds.hh"

namespace jakiro::handover {

inline constexpr std::string_view state_fd_name = "jakiro-state";
inline constexpr std::string_view stored_fd_prefix = "jakiro-fd-";
std::string stored_fd_name(std::size_t slot);

// A name systemd accepts in FDNAME= (printable ASCII but ':', at most 255 characters).
bool valid_fd_name(std::string_view name);
// The notification that stores the descriptors sent with it under `name`, and the one that
// drops every stored descriptor of that name.
std::string store_message(std::string_view name);
std::string remove_message(std::string_view name);

// One datagram `text` with `fds` (SCM_RIGHTS) to the manager's socket `notify_socket` (a path,
// or '@' for the abstract namespace); false with `error`.
bool notify_with_fds(const std::string& notify_socket, std::string_view text,
                     std::span<const int> fds, std::string& error);
// BARRIER=1 (sd_notify_barrier(3)): true once the manager has read every message sent before.
bool notify_barrier(const std::string& notify_socket, std::chrono::milliseconds timeout,
                    std::string& error);

// The image's descriptors as the store keeps them: one slot per open file.
struct store_plan {
    std::vector<int> slots;         // the descriptor sent for each slot
    std::vector<uint32_t> slot_of;  // for each of the image's indexes, its slot
};
store_plan plan_store(std::span<const int> fds);

// The envelope (see above) as bytes, and read back: false with `error` when it is not one, is
// cut short or names slots it does not have.
std::vector<std::byte> envelope(const image_writer& image, const store_plan& plan);
struct stored_state {
    section_versions written;
    std::map<uint16_t, bool> required;
    std::vector<uint32_t> slot_of;
    uint32_t slots = 0;
    std::vector<std::byte> image;
};
std::optional<stored_state> parse_envelope(std::span<const std::byte> bytes, std::string& error);

// The old side: stores `image` and its descriptors and waits for the manager's barrier. Refused
// (nothing sent) when they would not fit in `store_max` (FileDescriptorStoreMax=).
bool save_to_store(const std::string& notify_socket, const image_writer& image,
                   std::size_t store_max, std::string& error);

// The new side. What the manager passed that is ours: the state, if there is one, with its
// descriptors in the image's index order (owned by the caller), and every name of ours that
// came back, for remove_from_store. Descriptors of ours that are not used are closed.
struct restored_state {
    std::optional<stored_state> state;  // nullopt: none passed, or not readable (see error)
    std::vector<int> fds;
    std::size_t missing = 0;  // descriptors the manager no longer held
    std::vector<std::string> names;
    std::string error;  // why a state that was passed cannot be used
};
// At most `max_bytes` of state are read.
restored_state take_stored_state(const std::vector<passed_fd>& passed, std::size_t max_bytes);

void close_fds(std::vector<int>& fds);
// FDSTOREREMOVE=1 for each name, then BARRIER=1; false with `error` at the first message that
// could not be sent or when the manager does not answer.
bool remove_from_store(const std::string& notify_socket, const std::vector<std::string>& names,
                       std::string& error);

}  // namespace jakiro::handover
