#pragma once
// Handles and keys of a vNIC's verbs objects (PDs, CQs, MR keys): (slot << 8) | tag, where
// slot counts from 1 (so no key is ever 0) and the 8-bit tag is random and changes every time
// a slot is reused (the IB "key" byte of an L_Key/R_Key). A stale or guessed key then rarely
// names a live object, and freed slots wait in a FIFO so they are not reused at once.
//
// Control side only: one owner thread (the verbs channel server), no locking.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <random>
#include <vector>

namespace jakiro::verbs {

class key_allocator {
  public:
    // Slots are 24 bits wide; a vNIC never needs more than this many objects of one kind.
    static constexpr uint32_t max_capacity = (1u << 24) - 1;

    explicit key_allocator(uint32_t capacity, uint32_t seed = std::random_device{}())
        : _capacity(capacity < max_capacity ? capacity : max_capacity), _rng(seed) {}

    // A fresh key, or 0 when all `capacity` slots are in use.
    uint32_t allocate() {
        uint32_t slot;
        if (!_free.empty()) {
            slot = _free.front();
            _free.pop_front();
            // Any tag but the previous one: the old key must not name the new object.
            _tags[slot] = static_cast<uint8_t>(_tags[slot] + 1 + _rng() % 255);
        } else if (_tags.size() < _capacity) {
            slot = static_cast<uint32_t>(_tags.size());
            _tags.push_back(static_cast<uint8_t>(_rng()));
            _used.push_back(false);
        } else {
            return 0;
        }
        _used[slot] = true;
        ++_live;
        return (slot + 1) << 8 | _tags[slot];
    }

    // True if `key` is currently allocated (slot in use and tag current).
    bool live(uint32_t key) const {
        const uint32_t slot = slot_of(key);
        return slot < _tags.size() && _used[slot] && _tags[slot] == (key & 0xff);
    }

    // Frees a live key; anything else is ignored.
    void release(uint32_t key) {
        if (!live(key)) {
            return;
        }
        const uint32_t slot = slot_of(key);
        _used[slot] = false;
        _free.push_back(slot);
        --_live;
    }

    // The slot a key names (may be out of range for a foreign key: callers check).
    static uint32_t slot_of(uint32_t key) { return (key >> 8) - 1; }

    uint32_t capacity() const { return _capacity; }
    std::size_t size() const { return _live; }

    // Everything that decides the keys handed out next, for a state image (handover/): a
    // successor that resumes it hands out exactly what this one would have.
    struct state {
        std::vector<uint8_t> tags;
        std::vector<uint8_t> used;
        std::vector<uint32_t> free;  // in FIFO order
    };
    state save() const {
        return {_tags, std::vector<uint8_t>(_used.begin(), _used.end()),
                std::vector<uint32_t>(_free.begin(), _free.end())};
    }
    // False (nothing changed) when `s` cannot be this allocator's: more slots than its
    // capacity, or a free list that names a slot in use or out of range.
    bool resume(const state& s) {
        if (s.tags.size() > _capacity || s.used.size() != s.tags.size()) {
            return false;
        }
        std::vector<uint8_t> listed(s.tags.size(), 0);
        for (const uint32_t slot : s.free) {
            if (slot >= s.tags.size() || s.used[slot] != 0 || listed[slot] != 0) {
                return false;
            }
            listed[slot] = 1;
        }
        _tags = s.tags;
        _used.assign(s.used.begin(), s.used.end());
        _free.assign(s.free.begin(), s.free.end());
        _live = static_cast<std::size_t>(std::count(s.used.begin(), s.used.end(), uint8_t{1}));
        return true;
    }

  private:
    uint32_t _capacity;
    std::mt19937 _rng;
    std::vector<uint8_t> _tags;  // per slot: the current tag
    std::vector<bool> _used;
    std::deque<uint32_t> _free;
    std::size_t _live = 0;
};

}  // namespace jakiro::verbs
