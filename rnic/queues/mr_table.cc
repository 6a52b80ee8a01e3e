#include "rnic/queues/mr_table.hh"

#include <sys/mman.h>

#include "rnic/queues/memory_window.hh"

namespace jakiro::verbs {

mr_entry::~mr_entry() {
    if (map_base != nullptr) {
        munmap(map_base, map_length);
    }
    if (account != nullptr) {
        account->give_mr(length);  // after the unmap: the count never says less than is held
    }
}

ibv_wc_status wc_status_for(mr_status status, mr_side side) {
    if (status == mr_status::ok) {
        return IBV_WC_SUCCESS;
    }
    return side == mr_side::local ? IBV_WC_LOC_PROT_ERR : IBV_WC_REM_ACCESS_ERR;
}

mr_table::mr_table(uint32_t capacity)
    : _keys(capacity),
      _slots(std::make_unique<std::atomic<std::shared_ptr<const mr_entry>>[]>(_keys.capacity())),
      _windows(std::make_unique<std::atomic<std::shared_ptr<mw_entry>>[]>(_keys.capacity())) {}

bool mr_table::insert(std::shared_ptr<mr_entry> entry) {
    const uint32_t key = _keys.allocate();
    if (key == 0) {
        return false;
    }
    entry->key = key;
    _slots[key_allocator::slot_of(key)].store(std::move(entry), std::memory_order_release);
    _size.fetch_add(1, std::memory_order_relaxed);
    return true;
}

bool mr_table::place(std::shared_ptr<mr_entry> entry) {
    const uint32_t key = entry->key;
    if (!_keys.live(key) || _slots[key_allocator::slot_of(key)].load() != nullptr ||
        _windows[key_allocator::slot_of(key)].load() != nullptr) {
        return false;
    }
    _slots[key_allocator::slot_of(key)].store(std::move(entry), std::memory_order_release);
    _size.fetch_add(1, std::memory_order_relaxed);
    return true;
}

bool mr_table::place_window(std::shared_ptr<mw_entry> window) {
    const uint32_t key = window->handle;
    if (!_keys.live(key) || _slots[key_allocator::slot_of(key)].load() != nullptr ||
        _windows[key_allocator::slot_of(key)].load() != nullptr) {
        return false;
    }
    _windows[key_allocator::slot_of(key)].store(std::move(window), std::memory_order_release);
    _window_count.fetch_add(1, std::memory_order_relaxed);
    return true;
}

bool mr_table::replace(uint32_t key, std::shared_ptr<mr_entry> entry) {
    if (!_keys.live(key) || _slots[key_allocator::slot_of(key)].load() == nullptr) {
        return false;
    }
    entry->key = key;
    _slots[key_allocator::slot_of(key)].store(std::move(entry), std::memory_order_release);
    return true;
}

std::shared_ptr<const mr_entry> mr_table::get(uint32_t key) const {
    if (!_keys.live(key)) {
        return nullptr;
    }
    return _slots[key_allocator::slot_of(key)].load(std::memory_order_acquire);
}

void mr_table::erase(uint32_t key) {
    if (!_keys.live(key) || _slots[key_allocator::slot_of(key)].load() == nullptr) {
        return;  // not an MR (a window's key goes through erase_window)
    }
    _slots[key_allocator::slot_of(key)].store(nullptr, std::memory_order_release);
    _keys.release(key);
    _size.fetch_sub(1, std::memory_order_relaxed);
}

void mr_table::erase_owned_by(uint64_t owner) {
    for (uint32_t slot = 0; slot < _keys.capacity(); ++slot) {
        const auto entry = _slots[slot].load(std::memory_order_acquire);
        if (entry != nullptr && entry->owner == owner) {
            erase(entry->key);
        }
    }
}

void mr_table::clear() {
    for (uint32_t slot = 0; slot < _keys.capacity(); ++slot) {
        if (const auto window = _windows[slot].load(std::memory_order_acquire)) {
            erase_window(window->handle);
        }
        if (const auto entry = _slots[slot].load(std::memory_order_acquire)) {
            erase(entry->key);
        }
    }
}

std::size_t mr_table::count_owned_by(uint64_t owner) const {
    std::size_t n = 0;
    for (uint32_t slot = 0; slot < _keys.capacity(); ++slot) {
        const auto entry = _slots[slot].load(std::memory_order_acquire);
        n += entry != nullptr && entry->owner == owner ? 1 : 0;
    }
    return n;
}

uint64_t mr_table::bytes_owned_by(uint64_t owner) const {
    uint64_t n = 0;
    for (uint32_t slot = 0; slot < _keys.capacity(); ++slot) {
        const auto entry = _slots[slot].load(std::memory_order_acquire);
        n += entry != nullptr && entry->owner == owner ? entry->length : 0;
    }
    return n;
}

mr_lookup mr_table::find(uint32_t pd, uint32_t key, uint64_t iova, uint64_t length,
                         uint32_t access) const {
    mr_lookup out;
    const uint32_t slot = key_allocator::slot_of(key);
    if (slot >= _keys.capacity()) {
        return out;  // bad_key
    }
    // The entry's own key decides, not the allocator (which only the control thread reads):
    // a slot reused under a new tag holds an entry whose key differs from a stale one.
    auto entry = _slots[slot].load(std::memory_order_acquire);
    if (entry == nullptr || entry->key != key) {
        return out;
    }
    if (entry->pd != pd) {
        out.status = mr_status::pd_mismatch;
        return out;
    }
    if ((access & ~entry->access) != 0) {
        out.status = mr_status::no_access;
        return out;
    }
    if (!range_inside(entry->iova, entry->length, iova, length)) {
        out.status = mr_status::out_of_bounds;
        return out;
    }
    out.status = mr_status::ok;
    out.bytes = std::span<std::byte>(entry->data + (iova - entry->iova), length);
    out.mr = std::move(entry);
    return out;
}

bool mr_table::insert_window(std::shared_ptr<mw_entry> window) {
    const uint32_t key = _keys.allocate();
    if (key == 0) {
        return false;
    }
    window->handle = key;
    window->rkey.store(key, std::memory_order_relaxed);
    _windows[key_allocator::slot_of(key)].store(std::move(window), std::memory_order_release);
    _window_count.fetch_add(1, std::memory_order_relaxed);
    return true;
}

void mr_table::erase_window(uint32_t handle) {
    if (!_keys.live(handle)) {
        return;
    }
    auto& slot = _windows[key_allocator::slot_of(handle)];
    const auto window = slot.load(std::memory_order_acquire);
    if (window == nullptr || window->handle != handle) {
        return;
    }
    // Unbound first: a reader that still holds the entry finds no binding, and the MR pin the
    // binding held goes with it.
    window->binding.store(nullptr, std::memory_order_release);
    slot.store(nullptr, std::memory_order_release);
    _keys.release(handle);
    _window_count.fetch_sub(1, std::memory_order_relaxed);
}

void mr_table::erase_windows_owned_by(uint64_t owner) {
    for (uint32_t slot = 0; slot < _keys.capacity(); ++slot) {
        const auto window = _windows[slot].load(std::memory_order_acquire);
        if (window != nullptr && window->owner == owner) {
            erase_window(window->handle);
        }
    }
}

std::size_t mr_table::count_windows_owned_by(uint64_t owner) const {
    std::size_t n = 0;
    for (uint32_t slot = 0; slot < _keys.capacity(); ++slot) {
        const auto window = _windows[slot].load(std::memory_order_acquire);
        n += window != nullptr && window->owner == owner ? 1 : 0;
    }
    return n;
}

std::size_t mr_table::windows_bound_to(uint32_t key) const {
    std::size_t n = 0;
    for (uint32_t slot = 0; slot < _keys.capacity(); ++slot) {
        const auto window = _windows[slot].load(std::memory_order_acquire);
        if (window == nullptr) {
            continue;
        }
        const auto binding = window->binding.load(std::memory_order_acquire);
        n += binding != nullptr && binding->mr->key == key ? 1 : 0;
    }
    return n;
}

std::shared_ptr<mw_entry> mr_table::window_at(uint32_t key) const {
    const uint32_t slot = key_allocator::slot_of(key);
    if (slot >= _keys.capacity()) {
        return nullptr;
    }
    return _windows[slot].load(std::memory_order_acquire);
}

std::shared_ptr<const mr_entry> mr_table::get_published(uint32_t key) const {
    const uint32_t slot = key_allocator::slot_of(key);
    if (slot >= _keys.capacity()) {
        return nullptr;
    }
    auto entry = _slots[slot].load(std::memory_order_acquire);
    return entry != nullptr && entry->key == key ? entry : nullptr;
}

bool mr_table::published(const mr_entry& mr) const {
    const uint32_t slot = key_allocator::slot_of(mr.key);
    return slot < _keys.capacity() && _slots[slot].load(std::memory_order_acquire).get() == &mr;
}

mr_lookup mr_table::find_remote(uint32_t pd, uint32_t qpn, uint32_t rkey, uint64_t iova,
                                uint64_t length, uint32_t access) const {
    // An MR's rkey costs what it did before windows: one slot load. Only a key that names no
    // MR is looked for among the windows.
    mr_lookup out = find(pd, rkey, iova, length, access);
    if (out.status != mr_status::bad_key) {
        return out;
    }
    if (const auto window = window_at(rkey)) {
        return find_through_window(*this, *window, pd, qpn, rkey, iova, length, access);
    }
    return out;
}

}  // namespace jakiro::verbs
