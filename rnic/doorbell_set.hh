#pragma once
// The doorbells a sleeping worker waits on (docs/architecture.md §1, docs/threat-model.md): one
// page of jakirod's own (control calls, the rx waker) that no tenant ever maps, and one page per
// vNIC that only that vNIC's clients map. No page is shared by two vNICs, so a tenant can neither
// see another's rings (a covert channel) nor ring on its behalf; all it can do with its own page is
// set its QPs' bits (a visit each, charged to its vNIC: engine.cc take_doorbells) or wake the
// worker early, which costs it one bounded visit. The worker waits on every page at once
// with futex_waitv (Linux 5.16+), up to its 128 waiters; past 127 vNIC pages it caps each sleep at
// `crowded_sleep_us` instead, so a page it does not watch is still seen soon.
//
// Thread-safety: the engine thread owns the set. `page_of` reads are for any thread (atomic
// pointers); pages are installed and removed on the engine thread (through engine::call), so a
// page is never unmapped while the worker waits on it.

#include <linux/futex.h>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>

#include "verbs_abi/rings.hh"

namespace jakiro::rnic {

// A sealed one-page memfd holding a doorbell_page, mapped here; the fd is what clients get.
class doorbell_memory {
  public:
    static std::unique_ptr<doorbell_memory> create();
    // A predecessor's page (a state image, handover/): takes `fd`; null (and `fd` closed) when
    // it is not a sealed doorbell memfd.
    static std::unique_ptr<doorbell_memory> resume(int fd);
    // A successor rings this page now: the destructor unmaps it without punching it out.
    void leave_pages_to_successor() { _leave_pages = true; }
    ~doorbell_memory();
    doorbell_memory(const doorbell_memory&) = delete;
    doorbell_memory& operator=(const doorbell_memory&) = delete;

    int fd() const { return _fd; }
    verbs_proto::doorbell_page& page() const { return *_page; }

  private:
    doorbell_memory(int fd, verbs_proto::doorbell_page* page) : _fd(fd), _page(page) {}
    int _fd;
    verbs_proto::doorbell_page* _page;
    bool _leave_pages = false;
};

class doorbell_set {
  public:
    static constexpr std::size_t max_vnics = 256;  // dataplane/counters.hh max_vnics
    static constexpr uint64_t crowded_sleep_us = 100;

    // Installs (or with nullptr removes) vNIC `slot`'s page; engine thread.
    void set(uint16_t slot, verbs_proto::doorbell_page* page);
    verbs_proto::doorbell_page* page_of(uint16_t slot) const {
        return slot < max_vnics ? _vnic[slot].load(std::memory_order_acquire) : nullptr;
    }

    // Before the last look at the rings: notes every page's count. A ring after this ends the
    // wait that follows.
    void arm(verbs_proto::doorbell_page* own);
    // Sleeps up to `us`, less if any armed page rings.
    void wait(uint64_t us);
    // What arm() set up, for a wait of the worker's own (dataplane/poll_loop/uring_sleeper.hh):
    // the waiters, for futex_waitv or io_uring's FUTEX_WAITV, and the longest sleep that sees
    // every page soon enough (`us`, or less when some pages are not among the waiters).
    std::span<const futex_waitv> armed() const { return {_waiters.data(), _armed}; }
    uint64_t sleep_cap(uint64_t us) const {
        return _crowded && us > crowded_sleep_us ? crowded_sleep_us : us;
    }
    // Moves whenever a page is installed or removed: a wait set up at another generation
    // watches another set of pages.
    uint64_t generation() const { return _generation.load(std::memory_order_acquire); }

    // After waking: how many vNIC pages (and whether the own page) moved since arm().
    unsigned rung_since_armed(const verbs_proto::doorbell_page* own, bool& own_rang) const;

    // All rings so far of the own page and every vNIC page (tests, counters).
    uint32_t total(const verbs_proto::doorbell_page* own) const;

  private:
    std::array<std::atomic<verbs_proto::doorbell_page*>, max_vnics> _vnic{};
    std::atomic<uint64_t> _generation{0};
    std::array<futex_waitv, FUTEX_WAITV_MAX> _waiters{};
    unsigned _armed = 0;
    bool _crowded = false;
    bool _waitv_missing = false;  // the kernel has no futex_waitv: wait on the own page only
};

}  // namespace jakiro::rnic
