#pragma once
// Anti-replay for one receiving SA (RFC 4303 §3.4.3, bitmap as RFC 6479): 64-bit sequence
// numbers, a window of `bits` behind the highest one authenticated. check() is asked before
// the frame is opened (cheap refusal of what is surely old), accept() only after it
// authenticated, so a forged frame can never move the window.

#include <array>
#include <cstdint>

namespace jakiro::overlay::sealing {

class replay_window {
  public:
    // Wide enough for the reordering of several bursts on one path (a burst is 32-128 frames).
    static constexpr uint64_t bits = 4096;

    // Whether `seq` may be new: above the top, or inside the window and not seen yet.
    bool check(uint64_t seq) const {
        if (!_any || seq > _top) {
            return true;
        }
        return _top - seq < window && (_words[word(seq)] & bit(seq)) == 0;
    }

    // Records `seq` as seen (authenticated). False: it was seen meanwhile (a duplicate in the
    // same burst) or is too old, and must be dropped as a replay.
    bool accept(uint64_t seq) {
        if (!_any || seq > _top) {
            slide_to(seq);
            _words[word(seq)] |= bit(seq);
            return true;
        }
        if (_top - seq >= window || (_words[word(seq)] & bit(seq)) != 0) {
            return false;
        }
        _words[word(seq)] |= bit(seq);
        return true;
    }

    uint64_t top() const { return _top; }

    // How far behind the top a sequence number is still told apart: the bitmap less the word
    // the top is in, which holds numbers above the top too.
    static constexpr uint64_t window = bits - 64;

  private:
    static constexpr uint64_t words = bits / 64;

    // The top moves to `seq`: the words that now stand for numbers above the old top are
    // cleared (all of them after a jump past the whole bitmap).
    void slide_to(uint64_t seq) {
        const uint64_t old_block = _any ? _top / 64 : 0;
        const uint64_t new_block = seq / 64;
        if (!_any || new_block - old_block >= words) {
            _words.fill(0);
        } else {
            for (uint64_t b = old_block + 1; b <= new_block; ++b) {
                _words[b % words] = 0;
            }
        }
        _any = true;
        _top = seq;
    }

    static uint64_t word(uint64_t seq) { return (seq / 64) % words; }
    static uint64_t bit(uint64_t seq) { return uint64_t{1} << (seq % 64); }

    std::array<uint64_t, words> _words{};
    uint64_t _top = 0;
    bool _any = false;
};

}  // namespace jakiro::overlay::sealing
