#include "rnic/doorbell_set.hh"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "rnic/queues/sealed_memfd.hh"

namespace jakiro::rnic {

namespace proto = verbs_proto;

namespace {

// Waiter flags: a 32-bit futex word in a shared mapping (no FUTEX_PRIVATE_FLAG: the shim
// wakes it from another process).
constexpr uint32_t shared_u32 = FUTEX_32;

uint32_t count_of(const proto::doorbell_page* page) {
    return proto::doorbell_count(*page);
}

}  // namespace

std::unique_ptr<doorbell_memory> doorbell_memory::create() {
    verbs::sealed_memfd shared;
    if (verbs::create_sealed_memfd("jakiro-doorbell", proto::doorbell_bytes, shared) != 0) {
        return nullptr;
    }
    return std::unique_ptr<doorbell_memory>(
        new doorbell_memory(shared.fd, static_cast<proto::doorbell_page*>(shared.base)));
}

std::unique_ptr<doorbell_memory> doorbell_memory::resume(int fd) {
    void* base = nullptr;
    if (fd < 0 || verbs::map_sealed_memfd(fd, proto::doorbell_bytes, base) != 0) {
        if (fd >= 0) {
            close(fd);
        }
        return nullptr;
    }
    return std::unique_ptr<doorbell_memory>(
        new doorbell_memory(fd, static_cast<proto::doorbell_page*>(base)));
}

doorbell_memory::~doorbell_memory() {
    if (_leave_pages) {
        munmap(_page, proto::doorbell_bytes);
    } else {
        verbs::release_sealed_mapping(_page, proto::doorbell_bytes);
    }
    close(_fd);
}

void doorbell_set::set(uint16_t slot, proto::doorbell_page* page) {
    if (slot < max_vnics) {
        _vnic[slot].store(page, std::memory_order_release);
        _generation.fetch_add(1, std::memory_order_acq_rel);
    }
}

void doorbell_set::arm(proto::doorbell_page* own) {
    _armed = 0;
    _crowded = false;
    auto add = [this](proto::doorbell_page* page) {
        futex_waitv& w = _waiters[_armed++];
        w.val = count_of(page);
        w.uaddr = reinterpret_cast<uintptr_t>(&page->rings);
        w.flags = shared_u32;
        w.__reserved = 0;
    };
    if (own != nullptr) {
        add(own);
    }
    for (const auto& slot : _vnic) {
        proto::doorbell_page* page = slot.load(std::memory_order_relaxed);
        if (page == nullptr) {
            continue;
        }
        if (_armed == _waiters.size()) {
            _crowded = true;
            break;
        }
        add(page);
    }
}

void doorbell_set::wait(uint64_t us) {
    us = sleep_cap(us);
    if (_armed == 0) {
        const timespec t{static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000};
        nanosleep(&t, nullptr);
        return;
    }
    if (!_waitv_missing) {
        // futex_waitv's timeout is absolute, on the clock it is given.
        timespec deadline{};
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        const uint64_t ns = static_cast<uint64_t>(deadline.tv_nsec) + us * 1000;
        deadline.tv_sec += static_cast<time_t>(ns / 1000000000);
        deadline.tv_nsec = static_cast<long>(ns % 1000000000);
        if (syscall(SYS_futex_waitv, _waiters.data(), _armed, 0, &deadline, CLOCK_MONOTONIC) == 0 ||
            errno != ENOSYS) {
            return;  // woken, timed out, a count already moved (EAGAIN), or a signal
        }
        _waitv_missing = true;
    }
    // No futex_waitv: the own page (the first waiter) with the timeout, the others polled.
    const timespec t{static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000};
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(_waiters[0].uaddr), FUTEX_WAIT,
            static_cast<uint32_t>(_waiters[0].val), &t, nullptr, 0);
}

unsigned doorbell_set::rung_since_armed(const proto::doorbell_page* own, bool& own_rang) const {
    unsigned rung = 0;
    own_rang = false;
    for (unsigned i = 0; i < _armed; ++i) {
        const auto* page = reinterpret_cast<const proto::doorbell_page*>(
            static_cast<uintptr_t>(_waiters[i].uaddr) - offsetof(proto::doorbell_page, rings));
        if (count_of(page) == static_cast<uint32_t>(_waiters[i].val)) {
            continue;
        }
        if (page == own) {
            own_rang = true;
        } else {
            ++rung;
        }
    }
    return rung;
}

uint32_t doorbell_set::total(const proto::doorbell_page* own) const {
    uint32_t sum = own != nullptr ? count_of(own) : 0;
    for (const auto& slot : _vnic) {
        if (const proto::doorbell_page* page = slot.load(std::memory_order_acquire)) {
            sum += count_of(page);
        }
    }
    return sum;
}

}  // namespace jakiro::rnic
