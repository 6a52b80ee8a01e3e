#pragma once
// Publishes datapath_tables snapshots to workers by pointer swap and frees the old snapshot
// once every worker has passed a quiescent state (rte_rcu_qsbr), so workers never lock.
//
// Thread-safety: publish() is for the control thread only (one at a time); current(),
// quiescent(), offline() and online() are for the registered worker with that id.

#include <rte_rcu_qsbr.h>

#include <atomic>
#include <memory>
#include <mutex>

#include "dataplane/tables.hh"

namespace jakiro {

class tables_publisher {
  public:
    explicit tables_publisher(unsigned max_workers);
    ~tables_publisher();
    tables_publisher(const tables_publisher&) = delete;
    tables_publisher& operator=(const tables_publisher&) = delete;

    void publish(std::unique_ptr<datapath_tables> next);
    const datapath_tables* current() const { return _current.load(std::memory_order_acquire); }
    // For a control-side reader (not a registered worker): runs `read` on the current
    // snapshot while no publish() can free it.
    template <typename F>
    auto read_current(F&& read) {
        std::lock_guard lock(_publish_mutex);
        return read(*current());
    }

    void register_worker(unsigned id);
    void quiescent(unsigned id) { rte_rcu_qsbr_quiescent(_rcu, id); }
    // A worker about to sleep goes offline so publish() never waits on its nap.
    void offline(unsigned id) { rte_rcu_qsbr_thread_offline(_rcu, id); }
    void online(unsigned id) { rte_rcu_qsbr_thread_online(_rcu, id); }

  private:
    rte_rcu_qsbr* _rcu;
    std::atomic<const datapath_tables*> _current{nullptr};
    std::mutex _publish_mutex;
    uint64_t _publications = 0;
};

}  // namespace jakiro
