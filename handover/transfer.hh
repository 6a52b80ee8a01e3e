#pragma once
// The take-over conversation between a running jakirod (the old one) and its successor (the
// new one), over one connected SOCK_SEQPACKET Unix socket (docs/restart.md):
//
//   new → old  offer     the newest version of each state section the new binary reads, and
//                        its own version string
//   old → new  verdict   accept, or refuse with the reason (the new binary cannot read a
//                        required section); on refusal the old one keeps serving, untouched
//   old → new  image     the state image in chunks, its descriptors beside them (SCM_RIGHTS),
//                        then the totals; the old one has stopped its workers by then
//   new → old  outcome   running (the old one exits) or failed with the reason (the old one
//                        resumes serving)
//
// Every receive is bounded in time and size; a short, oversized or out-of-order message is an
// error, never a hang. Both ends first check the peer's credentials (peer_is_trusted).
//
// Thread-safety: none; one conversation per socket.

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "handover/image.hh"

namespace jakiro::handover {

struct offer {
    section_versions reads;
    std::string version;
};

struct received_image {
    std::vector<std::byte> data;
    std::vector<int> fds;  // owned by the receiver
};

// The peer runs as our user in our network namespace: the same service on the same host. A
// tenant (another network namespace) or an unprivileged user is refused, with `why`.
bool peer_is_trusted(int sock, std::string& why);

bool send_offer(int sock, const offer& o, std::string& error);
std::optional<offer> receive_offer(int sock, std::chrono::milliseconds timeout, std::string& error);

// `refusal` empty: accepted.
bool send_verdict(int sock, const std::string& refusal, std::string& error);
// The refusal ("" when accepted), or nullopt with `error` when the old one did not answer.
std::optional<std::string> receive_verdict(int sock, std::chrono::milliseconds timeout,
                                           std::string& error);

bool send_image(int sock, const image_writer& image, std::string& error);
// At most `max_bytes` of image; `timeout` bounds each message.
std::optional<received_image> receive_image(int sock, std::chrono::milliseconds timeout,
                                            std::size_t max_bytes, std::string& error);

// `failure` empty: running.
bool send_outcome(int sock, const std::string& failure, std::string& error);
std::optional<std::string> receive_outcome(int sock, std::chrono::milliseconds timeout,
                                           std::string& error);

}  // namespace jakiro::handover
