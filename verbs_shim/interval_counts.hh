#pragma once
// A count per byte of a 64-bit space, stored as disjoint runs [start, end) with one non-zero
// count each: how many MRs cover each page, and which pages of the MR memfd may hold data.
// Plain C++, no locking (memory_backing holds its mutex around every use).

#include <cstdint>
#include <iterator>
#include <map>
#include <utility>

namespace jakiro::verbs_shim {

class interval_counts {
  public:
    // Adds `delta` to every byte of [start, end); runs whose count reaches 0 disappear. A
    // negative delta on bytes with no count is ignored (there is nothing to take away).
    void add(uint64_t start, uint64_t end, int delta) {
        if (start >= end || delta == 0) {
            return;
        }
        split(start);
        split(end);
        uint64_t cursor = start;
        auto it = _runs.lower_bound(start);
        while (cursor < end) {
            if (it != _runs.end() && it->first == cursor) {
                const uint64_t run_end = it->second.first;
                const int64_t count = static_cast<int64_t>(it->second.second) + delta;
                if (count <= 0) {
                    it = _runs.erase(it);
                } else {
                    it->second.second = static_cast<uint32_t>(count);
                    ++it;
                }
                cursor = run_end;
            } else {
                const uint64_t gap_end = it == _runs.end() || it->first > end ? end : it->first;
                if (delta > 0) {
                    _runs.emplace_hint(it, cursor, std::make_pair(gap_end, uint32_t(delta)));
                }
                cursor = gap_end;
            }
        }
        merge_at(start);
        merge_at(end);
    }

    // Sets every byte of [start, end) to `count` (0 erases).
    void set(uint64_t start, uint64_t end, uint32_t count) {
        if (start >= end) {
            return;
        }
        split(start);
        split(end);
        auto it = _runs.lower_bound(start);
        while (it != _runs.end() && it->first < end) {
            it = _runs.erase(it);
        }
        if (count != 0) {
            _runs.emplace(start, std::make_pair(end, count));
        }
        merge_at(start);
        merge_at(end);
    }

    // The count of the byte at `at` (0 if none).
    uint32_t at(uint64_t point) const {
        auto it = _runs.upper_bound(point);
        if (it == _runs.begin()) {
            return 0;
        }
        --it;
        return point < it->second.first ? it->second.second : 0;
    }

    // Visits every run, clipped to [lo, hi), in order: f(start, end, count).
    template <typename F>
    void for_each(uint64_t lo, uint64_t hi, F f) const {
        auto it = _runs.upper_bound(lo);
        if (it != _runs.begin()) {
            --it;
        }
        for (; it != _runs.end() && it->first < hi; ++it) {
            const uint64_t s = it->first < lo ? lo : it->first;
            const uint64_t e = it->second.first > hi ? hi : it->second.first;
            if (s < e) {
                f(s, e, it->second.second);
            }
        }
    }
    template <typename F>
    void for_each(F f) const {
        for (const auto& [s, run] : _runs) {
            f(s, run.first, run.second);
        }
    }

    bool empty() const { return _runs.empty(); }
    std::size_t runs() const { return _runs.size(); }

  private:
    // Makes `point` a run boundary if it falls inside a run.
    void split(uint64_t point) {
        auto it = _runs.upper_bound(point);
        if (it == _runs.begin()) {
            return;
        }
        --it;
        if (it->first < point && point < it->second.first) {
            _runs.emplace(point, std::make_pair(it->second.first, it->second.second));
            it->second.first = point;
        }
    }

    // Joins the run ending at `point` with the one starting there if their counts are equal.
    void merge_at(uint64_t point) {
        auto next = _runs.find(point);
        if (next == _runs.end() || next == _runs.begin()) {
            return;
        }
        auto prev = std::prev(next);
        if (prev->second.first == point && prev->second.second == next->second.second) {
            prev->second.first = next->second.first;
            _runs.erase(next);
        }
    }

    std::map<uint64_t, std::pair<uint64_t, uint32_t>> _runs;  // start -> (end, count)
};

}  // namespace jakiro::verbs_shim
