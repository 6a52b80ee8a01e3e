#pragma once
// Frames one worker passes to another when there is more than one (host.workers). Every vNIC
// belongs to one worker (control/worker_assignment.hh) and the uplink to worker 0; a frame
// that meets the wrong worker goes to the right one through that worker's rings, a burst at
// a time, with no lock (rte_ring, many producers, one consumer):
//
//   fabric  frames from the uplink addressed to a vNIC this worker owns: the uplink's worker
//           looks only at their headers (worker/fabric_dispatch.hh) and this worker runs the
//           whole ingress pipeline on them, against its own flow table and meters.
//   port    frames to transmit on a port this worker owns (`m->port` says which): the uplink,
//           or the port of a vNIC it owns, in which case a vNIC of another worker on this host
//           sent them and this worker judges them first as their receiver
//           (pipeline/local_arrival.hh).
//   roce    RoCE frames a QP of another worker's engine sent to a QP of a vNIC this worker
//           owns, on this host (rnic_glue/roce_port.hh): this worker's engine receives them as if
//           they had come from the fabric, metered as such. `m->port` is the vNIC's port.
//
// A sleeping worker is woken when something is handed to it (its engine's doorbell, or a futex
// of its own), so a hand-off adds no sleep to a frame's path.
//
// Thread-safety: give_*() and ring() from any worker thread; take_*(), sleep() and
// pending() only from the owning worker.

#include <rte_mbuf.h>
#include <rte_ring.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace jakiro {

class worker_handoff {
  public:
    static constexpr unsigned ring_size = 4096;  // per worker and kind: ~1 ms at 4 Mpps
    static constexpr unsigned max_lanes = 16;    // workers (host.workers' bound is no higher)

    static std::unique_ptr<worker_handoff> create(unsigned workers, const std::string& name,
                                                  std::string& error);
    ~worker_handoff();
    worker_handoff(const worker_handoff&) = delete;
    worker_handoff& operator=(const worker_handoff&) = delete;

    unsigned workers() const { return _workers; }

    // Each returns how many of `pkts` (from the front) the ring took; the caller still owns,
    // and must count and free, the rest.
    uint16_t give_fabric(unsigned to, rte_mbuf** pkts, uint16_t n);
    uint16_t give_port(unsigned to, uint16_t port, rte_mbuf** pkts, uint16_t n);
    uint16_t give_roce(unsigned to, rte_mbuf** pkts, uint16_t n);  // `port` set by the giver
    // The fewest free slots in the roce rings of the workers other than `self`: how many
    // frames `self`'s engine may still hand over before one of them refuses.
    unsigned roce_room(unsigned self) const;

    uint16_t take_fabric(unsigned self, rte_mbuf** out, uint16_t max);
    uint16_t take_port(unsigned self, rte_mbuf** out, uint16_t max);
    uint16_t take_roce(unsigned self, rte_mbuf** out, uint16_t max);
    bool pending(unsigned self) const;

    // How `worker` is woken when it sleeps in its engine (engine::wake); without one the
    // handoff's own futex is used (sleep()).
    void set_waker(unsigned worker, std::function<void()> wake);
    // The sleep protocol around a nap: before_sleep() false means work is waiting, so the
    // worker must not sleep; after_sleep() when it woke.
    bool before_sleep(unsigned self);
    void after_sleep(unsigned self);
    // A nap on the handoff's futex (workers without an engine), up to `us` microseconds.
    void sleep(unsigned self, uint64_t us);
    // Wakes `worker` if it sleeps (any thread; rx_waker uses it for a frame on a port).
    void ring(unsigned worker);

  private:
    enum kind : unsigned { fabric_ring, port_ring, roce_ring, kinds };
    static constexpr const char* kind_names[kinds] = {"fabric", "port", "roce"};

    explicit worker_handoff(unsigned workers) : _workers(workers) {}
    void wake_if_sleeping(unsigned worker);
    uint16_t give(kind k, unsigned to, rte_mbuf** pkts, uint16_t n);
    uint16_t take(kind k, unsigned self, rte_mbuf** out, uint16_t max);

    struct alignas(RTE_CACHE_LINE_SIZE) lane {
        std::array<rte_ring*, kinds> rings{};
        std::atomic<uint32_t> bell{0};  // futex word
        std::atomic<bool> sleeping{false};
        uint32_t bell_seen = 0;  // owner only: the bell's value when it decided to sleep
        std::function<void()> wake;
    };
    unsigned _workers;
    std::array<lane, max_lanes> _lanes;
};

}  // namespace jakiro
