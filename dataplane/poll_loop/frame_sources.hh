#pragma once
// The sockets a sleeping worker must hear a frame on: every AF_PACKET socket of the process (an
// af_packet PMD port's, a vnet face's) and every tap (a tap uplink's /dev/net/tun), found in
// /proc/self/fd. DPDK's af_packet PMD has no rx interrupts and keeps its sockets to itself, but
// they are ordinary sockets that poll() and epoll report readable while their ring holds a
// frame. Found by looking, not by asking each port, so that a port added or removed live is
// followed without the PMD's help: again after each change of the tables and every second.
//
// A socket its owner has stopped reading for a while (a vNIC over its packet rate,
// worker/packet_rate_buckets.hh) is left out of every worker's watch: ignore(fd, true) until
// ignore(fd, false). The set is the process's: every worker watches every socket, and another
// worker would otherwise wake for that socket on every nap.
//
// Thread-safety: ignore() and is_ignored() from any thread; a frame_source_set from one thread.

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace jakiro {

namespace frame_sources {
// An AF_PACKET socket or a tap.
bool is_frame_source(int fd);
void ignore(int fd, bool ignored);
bool is_ignored(int fd);
// The ignored sockets now, into `fds` (its capacity kept: no allocation once it has grown).
void copy_ignored(std::vector<int>& fds);
// Moves on every change of the ignored set.
uint64_t ignored_generation();
}  // namespace frame_sources

// One epoll set of the frame sources (readable while any unignored one has a frame), for a
// worker that waits on it together with its doorbells (uring_sleeper.hh).
class frame_source_set {
  public:
    frame_source_set();
    ~frame_source_set();
    frame_source_set(const frame_source_set&) = delete;
    frame_source_set& operator=(const frame_source_set&) = delete;

    // The epoll set, or -1 if it could not be made.
    int fd() const { return _epoll_fd; }
    // Looks for the sources again if `publication` (of the tables) is not the last one seen or
    // a second has passed; applies a change of the ignored set. Before each wait. `others` are
    // the sockets other workers read (their vNICs' faces): left out, or this worker would wake
    // at once from every nap while another has not yet read its frame.
    void refresh(uint64_t publication, const std::vector<int>& others);
    // Whether refresh() would look again at this publication (the caller then lists `others`).
    bool stale(uint64_t publication) const { return publication != _publication; }
    // How many sources are watched (tests, logs).
    std::size_t size() const { return _watched.size(); }
    // Sources taken out of the set or put back (one epoll_ctl each), ever (tests).
    uint64_t ignore_changes() const { return _ignore_changes; }

  private:
    struct source {
        std::string link;  // what /proc/self/fd says it is ("socket:[inode]")
        bool ignored = false;
    };

    void scan(const std::vector<int>& others);
    // Only the sources whose state changed: one vNIC held and released hundreds of times a
    // second must not cost each sleeping worker a system call per socket of the host each time.
    void apply_ignored();

    int _epoll_fd = -1;
    // By fd: an fd closed and reused for another socket reads differently and is added again.
    std::unordered_map<int, source> _watched;
    std::vector<int> _ignored;  // apply_ignored's copy of the ignored set
    uint64_t _ignore_changes = 0;
    uint64_t _publication = UINT64_MAX;
    uint64_t _ignored_generation = 0;
    std::chrono::steady_clock::time_point _scanned{};
};

}  // namespace jakiro
