#include "dataplane/tables_publisher.hh"

#include <rte_malloc.h>

#include <stdexcept>

namespace jakiro {

tables_publisher::tables_publisher(unsigned max_workers) {
    const size_t bytes = rte_rcu_qsbr_get_memsize(max_workers);
    _rcu = static_cast<rte_rcu_qsbr*>(rte_zmalloc("tables_rcu", bytes, RTE_CACHE_LINE_SIZE));
    if (_rcu == nullptr || rte_rcu_qsbr_init(_rcu, max_workers) != 0) {
        throw std::runtime_error("cannot allocate the RCU state for table publication");
    }
}

tables_publisher::~tables_publisher() {
    delete _current.exchange(nullptr);
    rte_free(_rcu);
}

void tables_publisher::register_worker(unsigned id) {
    rte_rcu_qsbr_thread_register(_rcu, id);
    rte_rcu_qsbr_thread_online(_rcu, id);
}

void tables_publisher::publish(std::unique_ptr<datapath_tables> next) {
    std::lock_guard lock(_publish_mutex);
    next->publication = ++_publications;
    const datapath_tables* old = _current.exchange(next.release(), std::memory_order_acq_rel);
    // Wait until every online worker has finished any iteration that may still read `old`.
    rte_rcu_qsbr_synchronize(_rcu, RTE_QSBR_THRID_INVALID);
    delete old;
}

}  // namespace jakiro
