#include "mr_table.hh"

#include <sys/mman.h>

namespace jakiro::verbs {

mr_entry::~mr_entry() {
    if (map_base != nullptr) {
        munmap(map_base, map_length);
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
      _slots(std::make_unique<std::atomic<std::shared_ptr<const mr_entry>>[]>(_keys.capacity())) {}

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

bool mr_table::replace(uint32_t key, std::shared_ptr<mr_entry> entry) {
    if (!_keys.live(key)) {
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
    if (!_keys.live(key)) {
        return;
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

}  // namespace jakiro::verbs
