// rdma_integrity: end-to-end data integrity over one RC (or UC) QP.
//
//   rdma_integrity --server [--port P] [--ops N --seed S --max-size BYTES]
//   rdma_integrity --connect IP [--port P] [--ops N] [--seed S] [--max-size BYTES] ...
//                  [--transport rc|uc] [--lossy MIN_PERCENT]
//
// The client plans a seeded random mix of RDMA WRITE, RDMA READ, SEND, SEND with immediate and
// WRITE with immediate, of random sizes at random offsets, gathered from or scattered into
// 1-3 SGEs at random places of its own buffer, some inline. It runs them in batches; before a
// batch it tells the server over TCP what each op is ("OP 17 write 4096 at 123456 seed X"),
// the server lays out READ sources and posts receives, the client posts the batch and checks
// every completion (status, order, opcode), then both sides check every byte: the client what
// READ brought, the server what WRITE and SEND delivered, the receive completions (opcode,
// byte_len, immediate), and the bytes around each range. Both sides keep a shadow copy of
// what their whole buffer must hold and compare it in full at the end, which catches stray
// writes anywhere. One summary line; exit 0 only if everything verified.
//
// --transport uc runs the same over an Unreliable Connected QP (no READ there). On a clean
// fabric nothing may be lost, so the checks are the same. --lossy P is for a fabric that loses
// packets: UC then drops whole messages, so the server matches each receive completion, in
// order, to the next message it can be (opcode, immediate, byte_len, every byte); one that
// matches none is a partial, corrupt, duplicated or reordered message and fails. WRITE
// targets may hold old or new bytes where a message was lost (the spec leaves them undefined
// then), never anything else, and nothing around them may change. At least P % of the
// messages must arrive whole, so a fabric that lost everything cannot pass.
//
// --resize-cq (client): right after posting each batch, while its completions are arriving,
// the client resizes its send CQ, alternately to 8 batches and to exactly one batch (the
// fewest entries that hold what is outstanding, ibv_resize_cq's floor): every completion must
// still arrive once, in order (the summary line counts the resizes).

#include <arpa/inet.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/rdma/deadline.hh"
#include "tests/rdma/options.hh"
#include "tests/rdma/pattern.hh"
#include "tests/rdma/program.hh"
#include "tests/rdma/rc_link.hh"
#include "tests/rdma/tcp_line.hh"

using namespace jakiro::rdma_test;

namespace {

constexpr const char* program = "rdma_integrity";
constexpr uint16_t default_port = 7471;
constexpr uint64_t default_ops = 1000;
constexpr uint64_t default_max_size = 256 * 1024;
constexpr uint64_t default_buffer = 16 * 1024 * 1024;  // room for a batch of max-size ops
constexpr uint32_t default_batch = 16;
// Bytes on each side of a written range that are checked to be unchanged: a write that runs
// over its end by a packet's padding or a few bytes is caught.
constexpr uint64_t guard_bytes = 64;
// What an unfilled receive slot and a READ destination hold before the data arrives.
constexpr uint8_t slot_guard = 0xdb;
constexpr uint8_t read_poison = 0xee;
constexpr uint32_t max_pieces = 3;  // SGEs per message on the client side
// Inline data requested per WR; small messages use it half of the time.
constexpr uint32_t inline_request = 64;
constexpr int max_reported = 20;  // failure lines printed per side

enum class kind { write, write_imm, read, send, send_imm };

const char* kind_name(kind k) {
    switch (k) {
        case kind::write:
            return "write";
        case kind::write_imm:
            return "write_imm";
        case kind::read:
            return "read";
        case kind::send:
            return "send";
        case kind::send_imm:
            return "send_imm";
    }
    return "?";
}

kind kind_from(const std::string& name) {
    for (kind k : {kind::write, kind::write_imm, kind::read, kind::send, kind::send_imm}) {
        if (name == kind_name(k)) {
            return k;
        }
    }
    throw test_error("unknown op kind \"" + name + "\"");
}

bool has_remote_range(kind k) {
    return k == kind::write || k == kind::write_imm || k == kind::read;
}
bool uses_receive(kind k) {
    return k == kind::send || k == kind::send_imm || k == kind::write_imm;
}
bool has_imm(kind k) {
    return k == kind::send_imm || k == kind::write_imm;
}

struct piece {
    uint64_t offset;  // in the client's buffer
    uint64_t length;
};

struct op {
    uint64_t index = 0;  // over the whole run; also the wr_id on both sides
    kind type = kind::write;
    uint64_t size = 0;
    uint64_t remote_offset = 0;  // write, write_imm, read
    uint64_t seed = 0;           // of the byte pattern
    uint32_t imm = 0;
    bool inline_data = false;
    std::vector<piece> pieces;  // client only
    uint32_t slot = 0;          // server only: receive slot of send, send_imm, write_imm

    std::string to_line() const {
        std::ostringstream out;
        out << "OP " << index << " " << kind_name(type) << " " << size << " " << remote_offset
            << " " << seed << " " << imm;
        return out.str();
    }
    static op from_words(const std::vector<std::string>& w) {
        if (w.size() != 7) {
            throw test_error("malformed OP line");
        }
        op o;
        o.index = parse_u64(w[1]);
        o.type = kind_from(w[2]);
        o.size = parse_u64(w[3]);
        o.remote_offset = parse_u64(w[4]);
        o.seed = parse_u64(w[5]);
        o.imm = static_cast<uint32_t>(parse_u64(w[6]));
        return o;
    }
    std::string text() const {
        std::ostringstream out;
        out << "op " << index << " (" << kind_name(type) << " " << size << " B";
        if (has_remote_range(type)) {
            out << ", remote offset " << remote_offset;
        }
        if (!pieces.empty()) {
            out << ", local";
            for (const auto& p : pieces) {
                out << " " << p.offset << "+" << p.length;
            }
        }
        if (inline_data) {
            out << ", inline";
        }
        out << ", seed " << seed << ")";
        return out.str();
    }
};

struct params : side_params {
    params() : side_params(default_port) {}

    uint64_t ops = default_ops;
    uint64_t seed = 1;
    uint64_t max_size = default_max_size;
    uint64_t buffer_size = default_buffer;
    uint32_t batch = default_batch;
    bool use_inline = true;
    bool verbose = false;
    bool inject_fault = false;       // corrupt what arrives, once per kind: checks the checker
    bool uc = false;                 // --transport uc
    uint64_t lossy_min_percent = 0;  // --lossy: 0 = nothing may be lost
    bool resize_cq = false;          // --resize-cq: the client resizes its CQ under every batch
    // Server: which of ops, seed, max-size were given, to check them against the client's.
    bool ops_given = false, seed_given = false, max_size_given = false, buffer_given = false;
};

[[noreturn]] void usage(int status) {
    std::fprintf(status == 0 ? stdout : stderr,
                 "usage: %s --server [--port P] [--ops N] [--seed S] [--max-size BYTES]\n"
                 "       %s --connect IP [--port P] [--ops N] [--seed S] [--max-size BYTES]\n"
                 "          [--buffer-size BYTES] [--batch N] [--no-inline]\n"
                 "          [--transport rc|uc] [--lossy MIN_PERCENT (uc only)]\n"
                 "common: [--device NAME] [--ib-port N] [--gid-index N] [--events]\n"
                 "        [--timeout SECONDS] [--verbose] [--inject-fault] [--resize-cq]\n"
                 "defaults: port %u, %llu ops, seed 1, max-size %llu, buffer %llu (at least\n"
                 "          4 x max-size), batch %u, GID index 0, timeout %d s.\n"
                 "          The client decides ops, seed, sizes and batch;\n"
                 "          a server given --ops/--seed/--max-size checks they agree.\n",
                 program, program, default_port, static_cast<unsigned long long>(default_ops),
                 static_cast<unsigned long long>(default_max_size),
                 static_cast<unsigned long long>(default_buffer), default_batch,
                 side_params::default_timeout_s);
    std::exit(status);
}

params parse(int argc, char** argv) {
    params p;
    parse_side_options(
        argc, argv, program, p,
        {
            {"ops", true,
             [&p](const std::string& v) {
                 p.ops = parse_u64(v);
                 p.ops_given = true;
             }},
            {"seed", true,
             [&p](const std::string& v) {
                 p.seed = parse_u64(v);
                 p.seed_given = true;
             }},
            {"max-size", true,
             [&p](const std::string& v) {
                 p.max_size = parse_u64(v);
                 p.max_size_given = true;
             }},
            {"buffer-size", true,
             [&p](const std::string& v) {
                 p.buffer_size = parse_u64(v);
                 p.buffer_given = true;
             }},
            {"batch", true,
             [&p](const std::string& v) { p.batch = static_cast<uint32_t>(parse_u64(v)); }},
            {"events", false, [&p](const std::string&) { p.link.events = true; }},
            {"no-inline", false, [&p](const std::string&) { p.use_inline = false; }},
            {"verbose", false, [&p](const std::string&) { p.verbose = true; }},
            {"inject-fault", false, [&p](const std::string&) { p.inject_fault = true; }},
            {"transport", true,
             [&p](const std::string& v) {
                 if (v != "rc" && v != "uc") {
                     throw test_error("--transport is rc or uc (UD: rdma_datagram)");
                 }
                 p.uc = v == "uc";
             }},
            {"lossy", true,
             [&p](const std::string& v) {
                 p.lossy_min_percent = parse_u64(v);
                 if (p.lossy_min_percent == 0 || p.lossy_min_percent > 100) {
                     throw test_error("--lossy takes a minimum delivered percentage, 1-100");
                 }
             }},
            {"resize-cq", false, [&p](const std::string&) { p.resize_cq = true; }},
        },
        usage);
    if (p.lossy_min_percent != 0 && (!p.uc || p.inject_fault)) {
        std::fprintf(stderr, "%s: --lossy is for --transport uc, without --inject-fault\n",
                     program);
        std::exit(2);
    }
    if (!p.buffer_given) {
        p.buffer_size = std::max(default_buffer, 4 * p.max_size);
    }
    if (p.max_size == 0 || p.max_size > (1u << 30) || p.batch == 0 || p.batch > 1024 ||
        p.buffer_size < 4 * p.max_size || p.buffer_size > (1ull << 30)) {
        std::fprintf(stderr,
                     "%s: need 1 <= max-size <= 1 GiB, 1 <= batch <= 1024 and 4 x max-size <= "
                     "buffer-size <= 1 GiB\n",
                     program);
        std::exit(2);
    }
    return p;
}

// Ranges already taken in a batch, so the ops of one batch never touch the same bytes and
// the order in which the responder executes them cannot change what either side expects.
class range_set {
  public:
    explicit range_set(uint64_t space) : _space(space) {}
    void clear() { _taken.clear(); }
    // A random free range of `length` bytes, or false after enough misses.
    bool take(std::mt19937_64& rng, uint64_t length, uint64_t& offset) {
        for (int attempt = 0; attempt < 32; ++attempt) {
            const uint64_t at = std::uniform_int_distribution<uint64_t>(0, _space - length)(rng);
            const bool clash = std::any_of(_taken.begin(), _taken.end(), [&](const piece& t) {
                return at < t.offset + t.length && t.offset < at + length;
            });
            if (!clash) {
                _taken.push_back({at, length});
                offset = at;
                return true;
            }
        }
        return false;
    }

  private:
    uint64_t _space;
    std::vector<piece> _taken;
};

// Compares [offset, offset + length) of `got` with `want` and, when they differ, says where.
bool same_bytes(const uint8_t* got, const uint8_t* want, uint64_t offset, uint64_t length,
                std::string& detail) {
    if (std::memcmp(got + offset, want + offset, length) == 0) {
        return true;
    }
    uint64_t first = 0;
    uint64_t bad = 0;
    for (uint64_t i = 0; i < length; ++i) {
        if (got[offset + i] != want[offset + i]) {
            first = bad == 0 ? i : first;
            ++bad;
        }
    }
    char text[160];
    std::snprintf(text, sizeof(text),
                  "%llu of %llu bytes differ, first at buffer offset %llu: got 0x%02x, want 0x%02x",
                  static_cast<unsigned long long>(bad), static_cast<unsigned long long>(length),
                  static_cast<unsigned long long>(offset + first), got[offset + first],
                  want[offset + first]);
    detail = text;
    return false;
}

// Checks [offset, offset + length) and `guard_bytes` on each side against the shadow copy.
bool range_and_guards_ok(const uint8_t* got, const uint8_t* shadow, uint64_t size, uint64_t offset,
                         uint64_t length, std::string& detail) {
    if (!same_bytes(got, shadow, offset, length, detail)) {
        return false;
    }
    const uint64_t before = std::min(offset, guard_bytes);
    if (!same_bytes(got, shadow, offset - before, before, detail)) {
        detail = "bytes before the range changed: " + detail;
        return false;
    }
    const uint64_t after = std::min(size - (offset + length), guard_bytes);
    if (!same_bytes(got, shadow, offset + length, after, detail)) {
        detail = "bytes after the range changed: " + detail;
        return false;
    }
    return true;
}

struct tally {
    uint64_t ops = 0;
    uint64_t bytes = 0;
    uint64_t failures = 0;
    uint64_t by_kind[5] = {};
    int reported = 0;

    void fail(const std::string& what) {
        ++failures;
        if (reported++ < max_reported) {
            std::fprintf(stderr, "%s: FAIL %s\n", program, what.c_str());
        } else if (reported == max_reported + 1) {
            std::fprintf(stderr, "%s: (more failures not shown)\n", program);
        }
    }
    std::string kinds() const {
        std::ostringstream out;
        for (kind k : {kind::write, kind::write_imm, kind::read, kind::send, kind::send_imm}) {
            out << (k == kind::write ? "" : ", ") << kind_name(k) << " "
                << by_kind[static_cast<int>(k)];
        }
        return out.str();
    }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A shorter limit for one wait, so a missing completion is reported before the alarm fires.
std::chrono::steady_clock::time_point wait_limit() {
    return deadline() - std::chrono::milliseconds(500);
}

// ---------------------------------------------------------------- --inject-fault

// Flips one byte of what the first WRITE and the first SEND of the run delivered, as a
// responder that lost or misplaced data would: the checks below must catch both.
void inject_server_faults(const std::vector<op>& plan, uint8_t* target, uint8_t* slots,
                          uint64_t slot_size) {
    static bool write_done = false;
    static bool send_done = false;
    for (const op& o : plan) {
        if (!write_done && o.type == kind::write) {
            target[o.remote_offset + o.size / 2] ^= 0x01;
            write_done = true;
            std::fprintf(stderr, "%s: injected a fault into %s\n", program, o.text().c_str());
        }
        if (!send_done && o.type == kind::send) {
            slots[o.slot * slot_size + o.size / 2] ^= 0x80;
            send_done = true;
            std::fprintf(stderr, "%s: injected a fault into %s\n", program, o.text().c_str());
        }
    }
}

// Flips one byte of what the first READ of the run brought.
void inject_client_fault(const std::vector<op>& plan, uint8_t* local) {
    static bool done = false;
    for (const op& o : plan) {
        if (!done && o.type == kind::read) {
            local[o.pieces.back().offset + o.pieces.back().length - 1] ^= 0x10;
            done = true;
            std::fprintf(stderr, "%s: injected a fault into %s\n", program, o.text().c_str());
        }
    }
}

// ---------------------------------------------------------------- --lossy (UC)

// How long the server waits for more receive completions once the client's send queue is
// done and nothing arrives. The impairing fabric holds packets for ~1 ms, but it is a Python
// process on a loaded 2-core box: at 300 ms a held last packet of a batch once landed (in
// order, so executed) after the batch was checked, and the final whole-buffer check saw it.
constexpr auto lossy_quiet = std::chrono::milliseconds(1000);

// The server's receive side under --lossy. A lost UC SEND leaves its receive WQE to the next
// message, so receives are not tied to ops: the receive queue is kept full of slots (wr_id =
// slot), consumed in order, and each completion is matched to the next message it can be.
class lossy_receiver {
  public:
    lossy_receiver(rc_link& link, region& slots, uint64_t slot_size, uint32_t depth)
        : _link(link), _slots(slots), _slot_size(slot_size), _depth(depth) {
        for (uint32_t i = 0; i < depth; ++i) {
            _free.push_back(depth - 1 - i);
        }
    }

    void run_batch(tcp_line& tcp, uint64_t batch_id, const std::vector<op>& plan, uint8_t* target,
                   uint8_t* shadow, uint64_t buffer_size, tally& t) {
        set_phase("posting receives (lossy)");
        top_up();
        tcp.send("READY " + std::to_string(batch_id));
        set_phase("waiting for the client to finish a batch");
        tcp.expect("DONE");
        set_phase("polling receive completions (lossy)");
        std::vector<std::size_t> expected;  // plan indices of messages that take a receive
        for (std::size_t i = 0; i < plan.size(); ++i) {
            if (uses_receive(plan[i].type)) {
                expected.push_back(i);
            }
        }
        std::vector<ibv_wc> wcs;
        while (wcs.size() < expected.size()) {
            const auto got = _link.poll(_link.recv_cq, expected.size() - wcs.size(),
                                        std::chrono::steady_clock::now() + lossy_quiet);
            if (got.empty()) {
                break;
            }
            wcs.insert(wcs.end(), got.begin(), got.end());
        }
        const uint64_t failures_before = t.failures;
        std::vector<bool> delivered(plan.size(), false);
        std::size_t cursor = 0;  // in `expected`
        bool broken = false;
        for (const ibv_wc& wc : wcs) {
            const auto at = std::find(_posted.begin(), _posted.end(), wc.wr_id);
            if (at == _posted.end()) {
                t.fail("a receive completed with a wr_id that is not posted: " + describe(wc));
                broken = true;
                break;
            }
            if (at != _posted.begin()) {
                // Receive WQEs complete in the order they were posted; UC reuses the WQE of a
                // lost message for the next one, it never drops it.
                t.fail("batch " + std::to_string(batch_id) + ": " +
                       std::to_string(at - _posted.begin()) +
                       " receive WQE(s) posted before this one were consumed without a "
                       "completion: " +
                       describe(wc));
                for (auto k = _posted.begin(); k != at; ++k) {
                    _free.push_back(*k);
                }
                _posted.erase(_posted.begin(), at);
            }
            const auto slot = static_cast<uint32_t>(wc.wr_id);
            _posted.pop_front();
            _free.push_back(slot);
            if (wc.status != IBV_WC_SUCCESS) {
                t.fail("receive completion failed: " + describe(wc));
                broken = true;
                break;
            }
            std::size_t j = cursor;
            while (j < expected.size() && !matches(plan[expected[j]], wc, slot, target)) {
                ++j;
            }
            if (j == expected.size()) {
                t.fail("batch " + std::to_string(batch_id) +
                       ": a receive completed that is none of the messages still due, in "
                       "order (a partial, corrupt, duplicated or reordered message): " +
                       describe(wc));
                continue;
            }
            _lost += j - cursor;
            delivered[expected[j]] = true;
            cursor = j + 1;
        }
        _lost += expected.size() - std::min(cursor, expected.size());
        // WRITE targets: whole where the message completed, else old or new bytes per byte.
        for (std::size_t i = 0; i < plan.size(); ++i) {
            const op& o = plan[i];
            if (!has_remote_range(o.type)) {
                continue;
            }
            const uint64_t at = o.remote_offset;
            uint64_t fresh = 0, foreign = 0;
            for (uint64_t k = 0; k < o.size; ++k) {
                const uint8_t want = pattern_byte(o.seed, k);
                fresh += target[at + k] == want ? 1 : 0;
                foreign += target[at + k] != want && target[at + k] != shadow[at + k] ? 1 : 0;
            }
            if (foreign != 0) {
                t.fail(o.text() + ": " + std::to_string(foreign) +
                       " target bytes are neither the old nor the new ones");
            } else if (o.type == kind::write_imm && delivered[i] && fresh != o.size) {
                t.fail(o.text() + ": its immediate arrived but only " + std::to_string(fresh) +
                       " of its bytes");
            }
            if (o.type == kind::write) {
                delivered[i] = fresh == o.size;
                _partial += fresh != 0 && fresh != o.size ? 1 : 0;
                _lost += fresh != o.size ? 1 : 0;
            }
            std::memcpy(shadow + at, target + at, o.size);  // what is there is allowed now
            _writes.push_back({at, o.size, o.seed});
        }
        // Then the bytes around each range (after every range of the batch is in the shadow).
        for (const op& o : plan) {
            if (!has_remote_range(o.type)) {
                continue;
            }
            const uint64_t before = std::min(o.remote_offset, guard_bytes);
            const uint64_t end = o.remote_offset + o.size;
            const uint64_t after = std::min(buffer_size - end, guard_bytes);
            std::string detail;
            if (!same_bytes(target, shadow, o.remote_offset - before, before, detail)) {
                t.fail(o.text() + ": bytes before the range changed: " + detail);
            } else if (!same_bytes(target, shadow, end, after, detail)) {
                t.fail(o.text() + ": bytes after the range changed: " + detail);
            }
        }
        for (std::size_t i = 0; i < plan.size(); ++i) {
            ++t.ops;
            ++t.by_kind[static_cast<int>(plan[i].type)];
            if (delivered[i]) {
                ++_delivered;
                t.bytes += plan[i].size;
            }
        }
        _messages += plan.size();
        tcp.send("CHECKED " + std::to_string(batch_id) + " " +
                 std::to_string(t.failures - failures_before) + (broken ? " broken" : ""));
        if (broken) {
            throw test_error("the QP failed; see the receive completions above");
        }
    }

    // Before the final whole-buffer check: a packet of a lost WRITE may still land after its
    // batch was checked (held in the fabric, then executed in order, as UC allows). Such a
    // byte is accepted only if it is that WRITE's own new byte; anything else still fails.
    void accept_late_landings(const uint8_t* target, uint8_t* shadow) const {
        for (const write_range& w : _writes) {
            for (uint64_t k = 0; k < w.size; ++k) {
                const uint64_t at = w.offset + k;
                if (target[at] != shadow[at] && target[at] == pattern_byte(w.seed, k)) {
                    shadow[at] = target[at];
                }
            }
        }
    }

    // After the last batch: nothing more may complete; enough must have arrived whole.
    void finish(tally& t, uint64_t min_percent) {
        set_phase("checking for late receive completions (lossy)");
        const auto late =
            _link.poll(_link.recv_cq, 1, std::chrono::steady_clock::now() + lossy_quiet);
        if (!late.empty()) {
            t.fail("a receive completed after the last message: " + describe(late[0]));
        }
        const double percent =
            _messages == 0 ? 0.0 : 100.0 * static_cast<double>(_delivered) / _messages;
        std::printf(
            "%s: server: lossy: %llu of %llu messages arrived whole (%.1f %%), %llu "
            "lost, %llu WRITEs landed in part\n",
            program, static_cast<unsigned long long>(_delivered),
            static_cast<unsigned long long>(_messages), percent,
            static_cast<unsigned long long>(_lost), static_cast<unsigned long long>(_partial));
        if (percent < static_cast<double>(min_percent)) {
            t.fail("only " + std::to_string(_delivered) + " of " + std::to_string(_messages) +
                   " messages arrived whole, below --lossy " + std::to_string(min_percent) + " %");
        }
    }

  private:
    struct write_range {
        uint64_t offset;
        uint64_t size;
        uint64_t seed;
    };
    std::vector<write_range> _writes;  // every WRITE of the run: where late bytes may land

    void top_up() {
        while (_posted.size() < _depth) {
            const uint32_t slot = _free.back();
            _free.pop_back();
            std::memset(_slots.data() + slot * _slot_size, slot_guard, _slot_size);
            ibv_sge sge{_slots.addr() + slot * _slot_size, static_cast<uint32_t>(_slot_size),
                        _slots.lkey()};
            ibv_recv_wr wr{};
            wr.wr_id = slot;
            wr.sg_list = &sge;
            wr.num_sge = 1;
            ibv_recv_wr* bad = nullptr;
            const int rc = ibv_post_recv(_link.qp, &wr, &bad);
            if (rc != 0) {
                errno = rc;
                throw test_error(errno_text("ibv_post_recv"));
            }
            _posted.push_back(slot);
        }
    }

    // Whether `wc` is message `o` delivered whole.
    bool matches(const op& o, const ibv_wc& wc, uint32_t slot, const uint8_t* target) const {
        const int want_opcode = o.type == kind::write_imm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
        if (wc.opcode != want_opcode || wc.byte_len != o.size || wc.qp_num != _link.qp->qp_num ||
            ((wc.wc_flags & IBV_WC_WITH_IMM) != 0) != has_imm(o.type) ||
            (has_imm(o.type) && ntohl(wc.imm_data) != o.imm)) {
            return false;
        }
        if (o.type == kind::write_imm) {
            return pattern_mismatch(std::span(target + o.remote_offset, o.size), o.seed, 0) ==
                   o.size;
        }
        const uint8_t* data = _slots.data() + slot * _slot_size;
        return pattern_mismatch(std::span(data, o.size), o.seed, 0) == o.size;
    }

    rc_link& _link;
    region& _slots;
    uint64_t _slot_size;
    uint32_t _depth;
    std::deque<uint32_t> _posted;  // slots with a receive WQE, in posting order
    std::vector<uint32_t> _free;
    uint64_t _messages = 0, _delivered = 0, _lost = 0, _partial = 0;
};

// ---------------------------------------------------------------- server

int run_server(params& p) {
    device dev(p.link);
    tcp_line tcp = tcp_line::accept_one(p.port);
    std::fprintf(stderr, "%s: server: %s, GID 0 maps %s, client %s\n", program, dev.name.c_str(),
                 device::mapped_ipv4(dev.gid).c_str(), tcp.peer_ip().c_str());

    set_phase("exchanging parameters");
    const auto w = tcp.expect("PARAMS");
    if (w.size() != 8 || (w[6] != "rc" && w[6] != "uc")) {
        throw test_error("malformed PARAMS line");
    }
    const bool uc = w[6] == "uc";
    const uint64_t lossy_min_percent = parse_u64(w[7]);
    const uint64_t ops = parse_u64(w[1]), seed = parse_u64(w[2]), max_size = parse_u64(w[3]);
    const uint64_t buffer_size = parse_u64(w[4]);
    const auto batch = static_cast<uint32_t>(parse_u64(w[5]));
    if ((p.ops_given && p.ops != ops) || (p.seed_given && p.seed != seed) ||
        (p.max_size_given && p.max_size != max_size) || uc != p.uc ||
        lossy_min_percent != p.lossy_min_percent) {
        const std::string why =
            "client and server disagree on --ops/--seed/--max-size/--transport/--lossy";
        tcp.send("ABORT " + why);
        throw test_error(why);
    }
    if (max_size == 0 || max_size > (1u << 30) || batch == 0 || batch > 1024 ||
        buffer_size < 4 * max_size || buffer_size > (1ull << 30)) {
        tcp.send("ABORT parameters out of range");
        throw test_error("client's parameters out of range");
    }

    // The WRITE target and READ source, filled with a background pattern before it is
    // registered; the shadow says what it must hold.
    region target(buffer_size,
                  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
    fill_pattern(std::span(target.data(), buffer_size), mix64(seed ^ 0x5e5e), 0);
    std::vector<uint8_t> shadow(target.data(), target.data() + buffer_size);
    target.register_with(dev);
    const uint64_t slot_size = max_size;
    region slots(batch * slot_size, IBV_ACCESS_LOCAL_WRITE);
    std::memset(slots.data(), slot_guard, slots.size());
    slots.register_with(dev);

    link_options lo = p.link;
    lo.send_depth = 4;
    lo.recv_depth = batch;
    lo.send_sge = 1;
    lo.recv_sge = 1;
    lo.qp_type = uc ? IBV_QPT_UC : IBV_QPT_RC;
    rc_link link(dev, lo, static_cast<uint32_t>(std::random_device{}()));
    tcp.send(link.local_info().to_line());
    char region_line[96];
    std::snprintf(region_line, sizeof(region_line), "REGION %llu %u %llu",
                  static_cast<unsigned long long>(target.addr()), target.rkey(),
                  static_cast<unsigned long long>(buffer_size));
    tcp.send(region_line);
    const qp_info remote = qp_info::from_words(tcp.expect("QP"));
    link.connect(remote);
    tcp.send("RTS");

    tally t;
    lossy_receiver lossy(link, slots, slot_size, batch);
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
        set_phase("waiting for the client's next batch");
        const std::string line = tcp.receive();
        const auto words = split_words(line);
        if (!words.empty() && words[0] == "END") {
            break;
        }
        if (!words.empty() && words[0] == "ABORT") {
            throw test_error("the client gave up: " +
                             line.substr(std::min<size_t>(6, line.size())));
        }
        if (words.size() != 3 || words[0] != "BATCH") {
            throw test_error("expected BATCH or END, got \"" + line + "\"");
        }
        const uint64_t batch_id = parse_u64(words[1]);
        const uint64_t n = parse_u64(words[2]);
        if (n == 0 || n > batch) {
            throw test_error("batch of " + std::to_string(n) + " ops exceeds " +
                             std::to_string(batch));
        }
        std::vector<op> plan;
        uint32_t receives = 0;
        for (uint64_t i = 0; i < n; ++i) {
            op o = op::from_words(tcp.expect("OP"));
            if (o.size == 0 || o.size > max_size ||
                (has_remote_range(o.type) && o.remote_offset > buffer_size - o.size)) {
                throw test_error("op out of range: " + o.to_line());
            }
            auto here = std::span(target.data() + o.remote_offset, o.size);
            auto there = std::span(shadow.data() + o.remote_offset, o.size);
            if (o.type == kind::read) {
                fill_pattern(here, o.seed, 0);
                fill_pattern(there, o.seed, 0);
            } else if (has_remote_range(o.type) && lossy_min_percent == 0) {
                fill_pattern(there, o.seed, 0);  // (lossy: the shadow keeps the old bytes)
            }
            if (uc && o.type == kind::read) {
                throw test_error("a READ over UC: " + o.to_line());
            }
            if (lossy_min_percent != 0) {
                plan.push_back(o);
                continue;  // receives: lossy_receiver
            }
            if (uses_receive(o.type)) {
                o.slot = receives++;
                std::memset(slots.data() + o.slot * slot_size, slot_guard, slot_size);
            }
            plan.push_back(o);
        }
        if (lossy_min_percent != 0) {
            lossy.run_batch(tcp, batch_id, plan, target.data(), shadow.data(), buffer_size, t);
            continue;
        }
        for (const op& o : plan) {
            if (!uses_receive(o.type)) {
                continue;
            }
            ibv_sge sge{slots.addr() + o.slot * slot_size, static_cast<uint32_t>(slot_size),
                        slots.lkey()};
            ibv_recv_wr wr{};
            wr.wr_id = o.index;
            wr.sg_list = &sge;
            wr.num_sge = 1;
            ibv_recv_wr* bad = nullptr;
            const int rc = ibv_post_recv(link.qp, &wr, &bad);
            if (rc != 0) {
                errno = rc;
                throw test_error(errno_text("ibv_post_recv"));
            }
        }
        tcp.send("READY " + std::to_string(batch_id));

        set_phase("waiting for the client to finish a batch");
        const auto done = tcp.expect("DONE");
        set_phase("polling receive completions");
        const auto wcs = link.poll(link.recv_cq, receives, wait_limit());
        if (p.inject_fault) {
            inject_server_faults(plan, target.data(), slots.data(), slot_size);
        }
        uint64_t failures_before = t.failures;
        std::vector<bool> op_failed(plan.size(), false);
        auto fail = [&](std::size_t i, const std::string& why) {
            if (!op_failed[i]) {
                op_failed[i] = true;
                t.fail(plan[i].text() + ": " + why);
            } else if (t.reported < max_reported) {
                std::fprintf(stderr, "%s:   also: %s\n", program, why.c_str());
            }
        };
        std::size_t next_wc = 0;
        bool qp_broken = false;
        for (std::size_t i = 0; i < plan.size(); ++i) {
            const op& o = plan[i];
            if (uses_receive(o.type)) {
                if (next_wc >= wcs.size()) {
                    fail(i, "no receive completion (got " + std::to_string(wcs.size()) + " of " +
                                std::to_string(receives) + ")");
                } else {
                    const ibv_wc& wc = wcs[next_wc++];
                    const int want_opcode =
                        o.type == kind::write_imm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
                    if (wc.status != IBV_WC_SUCCESS) {
                        qp_broken = true;
                        fail(i, "receive completion failed: " + describe(wc));
                    } else if (wc.wr_id != o.index || wc.opcode != want_opcode ||
                               wc.byte_len != o.size || wc.qp_num != link.qp->qp_num ||
                               ((wc.wc_flags & IBV_WC_WITH_IMM) != 0) != has_imm(o.type) ||
                               (has_imm(o.type) && ntohl(wc.imm_data) != o.imm)) {
                        char want[160];
                        std::snprintf(want, sizeof(want),
                                      "wr_id %llu opcode %s byte_len %llu qp_num %#x imm %s %#x",
                                      static_cast<unsigned long long>(o.index),
                                      wc_opcode_name(want_opcode),
                                      static_cast<unsigned long long>(o.size), link.qp->qp_num,
                                      has_imm(o.type) ? "flag" : "none", o.imm);
                        fail(i, "receive completion " + describe(wc) + "; want " + want);
                    }
                }
                std::string detail;
                const uint8_t* slot = slots.data() + o.slot * slot_size;
                const uint64_t data = o.type == kind::write_imm ? 0 : o.size;
                const std::size_t bad = pattern_mismatch(std::span(slot, data), o.seed, 0);
                if (bad != data) {
                    char text[128];
                    std::snprintf(text, sizeof(text), "received byte %zu is 0x%02x, want 0x%02x",
                                  bad, slot[bad], pattern_byte(o.seed, bad));
                    fail(i, text);
                }
                for (uint64_t j = data; j < slot_size; ++j) {
                    if (slot[j] != slot_guard) {
                        fail(i, "receive slot byte " + std::to_string(j) +
                                    " beyond the message changed");
                        break;
                    }
                }
            }
            if (has_remote_range(o.type)) {
                std::string detail;
                if (!range_and_guards_ok(target.data(), shadow.data(), buffer_size, o.remote_offset,
                                         o.size, detail)) {
                    fail(i, detail);
                }
            }
        }
        if (wcs.size() > receives) {
            t.fail("more receive completions than receives posted");
        }
        for (const op& o : plan) {
            ++t.ops;
            t.bytes += o.size;
            ++t.by_kind[static_cast<int>(o.type)];
        }
        if (p.verbose) {
            std::fprintf(stderr, "%s: server: batch %s: %zu ops, client reports %s failures\n",
                         program, words[1].c_str(), plan.size(),
                         done.size() > 2 ? done[2].c_str() : "?");
        }
        tcp.send("CHECKED " + std::to_string(batch_id) + " " +
                 std::to_string(t.failures - failures_before) + (qp_broken ? " broken" : ""));
        if (qp_broken) {
            throw test_error("the QP failed; see the receive completions above");
        }
    }
    if (lossy_min_percent != 0) {
        lossy.finish(t, lossy_min_percent);
        lossy.accept_late_landings(target.data(), shadow.data());
    }
    set_phase("final check of the whole buffer");
    std::string detail;
    if (!same_bytes(target.data(), shadow.data(), 0, buffer_size, detail)) {
        t.fail("whole-buffer check: " + detail);
    }
    tcp.send("BYE " + std::to_string(t.failures));
    const double s = seconds_since(t0);
    std::printf("%s: server: %llu ops (%s), %llu bytes, %llu failures, %.2f s\n", program,
                static_cast<unsigned long long>(t.ops), t.kinds().c_str(),
                static_cast<unsigned long long>(t.bytes),
                static_cast<unsigned long long>(t.failures), s);
    if (t.ops != ops) {
        std::fprintf(stderr, "%s: server: the client announced %llu ops, ran %llu\n", program,
                     static_cast<unsigned long long>(ops), static_cast<unsigned long long>(t.ops));
        return 1;
    }
    return t.failures == 0 ? 0 : 1;
}

// ---------------------------------------------------------------- client

// Sizes spread over every order of magnitude up to max (uniform would make nearly all of
// them large), plus the path-MTU edges where segmentation changes.
uint64_t random_size(std::mt19937_64& rng, uint64_t max, uint64_t mtu) {
    if (std::uniform_int_distribution<int>(0, 9)(rng) == 0) {
        const uint64_t edges[] = {mtu - 1, mtu, mtu + 1, 2 * mtu, 2 * mtu + 1, 4 * mtu - 1};
        const uint64_t e = edges[std::uniform_int_distribution<int>(0, 5)(rng)];
        if (e >= 1 && e <= max) {
            return e;
        }
    }
    int bits = 0;
    while ((uint64_t{1} << bits) < max) {
        ++bits;
    }
    const int b = std::uniform_int_distribution<int>(0, bits)(rng);
    const uint64_t hi = std::min(max, uint64_t{1} << b);
    const uint64_t lo = b == 0 ? 1 : std::min(hi, (uint64_t{1} << (b - 1)) + 1);
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
}

kind random_kind(std::mt19937_64& rng) {
    // write 30 %, read 25 %, send 25 %, write_imm 10 %, send_imm 10 %.
    const int r = std::uniform_int_distribution<int>(0, 99)(rng);
    return r < 30   ? kind::write
           : r < 55 ? kind::read
           : r < 80 ? kind::send
           : r < 90 ? kind::write_imm
                    : kind::send_imm;
}

int run_client(params& p) {
    device dev(p.link);
    // The client's buffer: WRITE/SEND sources and READ destinations, with its shadow.
    region local(p.buffer_size, IBV_ACCESS_LOCAL_WRITE);
    fill_pattern(std::span(local.data(), p.buffer_size), mix64(p.seed ^ 0xc1c1), 0);
    std::vector<uint8_t> shadow(local.data(), local.data() + p.buffer_size);
    local.register_with(dev);

    link_options lo = p.link;
    lo.send_depth = p.batch;
    lo.recv_depth = 1;
    lo.send_sge = max_pieces;
    lo.recv_sge = 1;
    lo.inline_bytes = p.use_inline ? inline_request : 0;
    lo.qp_type = p.uc ? IBV_QPT_UC : IBV_QPT_RC;
    rc_link link(dev, lo, static_cast<uint32_t>(mix64(p.seed)));

    tcp_line tcp = tcp_line::connect_to(p.connect_ip, p.port);
    set_phase("exchanging QP details");
    std::ostringstream params_line;
    params_line << "PARAMS " << p.ops << " " << p.seed << " " << p.max_size << " " << p.buffer_size
                << " " << p.batch << " " << (p.uc ? "uc" : "rc") << " " << p.lossy_min_percent;
    tcp.send(params_line.str());
    tcp.send(link.local_info().to_line());
    const qp_info remote = qp_info::from_words(tcp.expect("QP"));
    const auto rw = tcp.expect("REGION");
    if (rw.size() != 4) {
        throw test_error("malformed REGION line");
    }
    const uint64_t remote_addr = parse_u64(rw[1]);
    const auto rkey = static_cast<uint32_t>(parse_u64(rw[2]));
    const uint64_t remote_size = parse_u64(rw[3]);
    const std::string server_ip = device::mapped_ipv4(remote.gid);
    std::fprintf(stderr, "%s: client: %s (GID 0 maps %s) -> server QP %#x, GID maps %s\n", program,
                 dev.name.c_str(), device::mapped_ipv4(dev.gid).c_str(), remote.qpn,
                 server_ip.c_str());
    if (server_ip != p.connect_ip) {
        std::fprintf(stderr, "%s: warning: the server's GID maps %s, not %s\n", program,
                     server_ip.c_str(), p.connect_ip.c_str());
    }
    link.connect(remote);
    tcp.expect("RTS");
    const uint64_t mtu = uint64_t{128} << std::min(remote.mtu, link.local_info().mtu);

    std::mt19937_64 rng(p.seed);
    range_set remote_ranges(remote_size);
    range_set local_ranges(p.buffer_size);
    tally t;
    uint64_t server_failures = 0;
    uint64_t resizes = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t batch_id = 0; t.ops < p.ops; ++batch_id) {
        set_phase("planning a batch");
        remote_ranges.clear();
        local_ranges.clear();
        const uint64_t want = std::min<uint64_t>(
            p.ops - t.ops, std::uniform_int_distribution<uint32_t>(1, p.batch)(rng));
        std::vector<op> plan;
        while (plan.size() < want) {
            op o;
            o.index = t.ops + plan.size();
            o.type = random_kind(rng);
            while (p.uc && o.type == kind::read) {
                o.type = random_kind(rng);  // UC has no READ
            }
            o.size = random_size(rng, p.max_size, mtu);
            o.seed = rng();
            o.imm = has_imm(o.type) ? static_cast<uint32_t>(rng()) : 0;
            if (has_remote_range(o.type) && !remote_ranges.take(rng, o.size, o.remote_offset)) {
                break;  // the server's buffer is crowded: run what is planned
            }
            o.inline_data = o.type != kind::read && o.size <= link.max_inline() &&
                            std::uniform_int_distribution<int>(0, 1)(rng) == 1;
            // Gathered from / scattered into 1-3 places of the client's buffer.
            const uint32_t n = std::min<uint64_t>(
                o.size, std::uniform_int_distribution<uint32_t>(1, max_pieces)(rng));
            uint64_t left = o.size;
            bool placed = true;
            for (uint32_t k = 0; k < n && placed; ++k) {
                const uint64_t len = k + 1 == n ? left
                                                : std::uniform_int_distribution<uint64_t>(
                                                      1, left - (n - 1 - k))(rng);
                piece pc{0, len};
                placed = local_ranges.take(rng, len, pc.offset);
                o.pieces.push_back(pc);
                left -= len;
            }
            if (!placed) {
                break;
            }
            plan.push_back(o);
        }
        if (plan.empty()) {
            throw test_error("could not place a single op in the buffers (buffer too small?)");
        }

        // Sources get their pattern; READ destinations get poison while the shadow expects the
        // pattern.
        for (const op& o : plan) {
            uint64_t at = 0;
            for (const piece& pc : o.pieces) {
                auto mine = std::span(local.data() + pc.offset, pc.length);
                fill_pattern(std::span(shadow.data() + pc.offset, pc.length), o.seed, at);
                if (o.type == kind::read) {
                    std::memset(mine.data(), read_poison, mine.size());
                } else {
                    fill_pattern(mine, o.seed, at);
                }
                at += pc.length;
            }
        }

        set_phase("announcing a batch to the server");
        tcp.send("BATCH " + std::to_string(batch_id) + " " + std::to_string(plan.size()));
        for (const op& o : plan) {
            tcp.send(o.to_line());
        }
        tcp.expect("READY");

        set_phase("posting a batch");
        std::vector<ibv_send_wr> wrs(plan.size());
        std::vector<std::vector<ibv_sge>> sges(plan.size());
        for (std::size_t i = 0; i < plan.size(); ++i) {
            const op& o = plan[i];
            for (const piece& pc : o.pieces) {
                sges[i].push_back(
                    {local.addr() + pc.offset, static_cast<uint32_t>(pc.length), local.lkey()});
            }
            ibv_send_wr& wr = wrs[i];
            wr.wr_id = o.index;
            wr.sg_list = sges[i].data();
            wr.num_sge = static_cast<int>(sges[i].size());
            wr.send_flags = IBV_SEND_SIGNALED | (o.inline_data ? IBV_SEND_INLINE : 0);
            switch (o.type) {
                case kind::write:
                    wr.opcode = IBV_WR_RDMA_WRITE;
                    break;
                case kind::write_imm:
                    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
                    break;
                case kind::read:
                    wr.opcode = IBV_WR_RDMA_READ;
                    break;
                case kind::send:
                    wr.opcode = IBV_WR_SEND;
                    break;
                case kind::send_imm:
                    wr.opcode = IBV_WR_SEND_WITH_IMM;
                    break;
            }
            if (has_imm(o.type)) {
                wr.imm_data = htonl(o.imm);
            }
            if (has_remote_range(o.type)) {
                wr.wr.rdma.remote_addr = remote_addr + o.remote_offset;
                wr.wr.rdma.rkey = rkey;
            }
        }
        // Half of the batches go in one ibv_post_send as a chain, the others one by one.
        const bool chain = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
        for (std::size_t i = 0; i < wrs.size(); ++i) {
            wrs[i].next = chain && i + 1 < wrs.size() ? &wrs[i + 1] : nullptr;
        }
        for (std::size_t i = 0; i < wrs.size(); i += chain ? wrs.size() : 1) {
            ibv_send_wr* bad = nullptr;
            const int rc = ibv_post_send(link.qp, &wrs[i], &bad);
            if (rc != 0) {
                errno = rc;
                const std::string why = errno_text(
                    "ibv_post_send of " + plan[bad != nullptr ? bad - wrs.data() : i].text());
                tcp.send("ABORT " + why);
                throw test_error(why);
            }
        }

        if (p.resize_cq) {
            set_phase("resizing the send CQ");
            const int entries = static_cast<int>(batch_id % 2 == 0 ? 8 * p.batch : p.batch);
            if (const int rc = ibv_resize_cq(link.send_cq, entries); rc != 0) {
                errno = rc;
                const std::string why = errno_text("ibv_resize_cq to " + std::to_string(entries));
                tcp.send("ABORT " + why);
                throw test_error(why);
            }
            ++resizes;
        }
        set_phase("polling send completions");
        const auto wcs = link.poll(link.send_cq, plan.size(), wait_limit());
        uint64_t failures_before = t.failures;
        bool broken = false;
        for (std::size_t i = 0; i < plan.size(); ++i) {
            const op& o = plan[i];
            if (i >= wcs.size()) {
                t.fail(o.text() + ": no completion (" + std::to_string(wcs.size()) + " of " +
                       std::to_string(plan.size()) + " arrived in time)");
                broken = true;
                continue;
            }
            const ibv_wc& wc = wcs[i];
            const int want_opcode = o.type == kind::read ? IBV_WC_RDMA_READ
                                    : o.type == kind::write || o.type == kind::write_imm
                                        ? IBV_WC_RDMA_WRITE
                                        : IBV_WC_SEND;
            if (wc.status != IBV_WC_SUCCESS) {
                t.fail(o.text() + ": " + describe(wc));
                broken = true;
            } else if (wc.wr_id != o.index || wc.opcode != want_opcode ||
                       wc.qp_num != link.qp->qp_num) {
                t.fail(o.text() + ": completion " + describe(wc) + "; want wr_id " +
                       std::to_string(o.index) + " opcode " + wc_opcode_name(want_opcode));
            }
        }
        if (broken) {
            tcp.send("ABORT send completions failed or missing");
            break;
        }
        set_phase("checking what READ brought");
        if (p.inject_fault) {
            inject_client_fault(plan, local.data());
        }
        for (const op& o : plan) {
            if (o.type != kind::read) {
                continue;
            }
            for (const piece& pc : o.pieces) {
                std::string detail;
                if (!range_and_guards_ok(local.data(), shadow.data(), p.buffer_size, pc.offset,
                                         pc.length, detail)) {
                    t.fail(o.text() + ": " + detail);
                    break;
                }
            }
        }
        for (const op& o : plan) {
            ++t.ops;
            t.bytes += o.size;
            ++t.by_kind[static_cast<int>(o.type)];
        }
        tcp.send("DONE " + std::to_string(batch_id) + " " +
                 std::to_string(t.failures - failures_before));
        set_phase("waiting for the server's check of a batch");
        const auto checked = tcp.expect("CHECKED");
        if (checked.size() < 3) {
            throw test_error("malformed CHECKED line");
        }
        server_failures += parse_u64(checked[2]);
        if (checked.size() > 3) {
            std::fprintf(stderr, "%s: the server's QP failed; stopping\n", program);
            break;
        }
        if (p.verbose) {
            std::fprintf(stderr, "%s: client: batch %llu: %zu ops, %s chained, ok\n", program,
                         static_cast<unsigned long long>(batch_id), plan.size(),
                         chain ? "" : "not");
        }
    }
    uint64_t server_final = 0;
    if (t.ops == p.ops) {
        set_phase("finishing");
        tcp.send("END");
        server_final = parse_u64(tcp.expect("BYE").at(1));
        std::string detail;
        if (!same_bytes(local.data(), shadow.data(), 0, p.buffer_size, detail)) {
            t.fail("whole-buffer check: " + detail);
        }
    }
    const double s = seconds_since(t0);
    const uint64_t failures = t.failures + std::max(server_failures, server_final);
    std::printf(
        "%s: %llu of %llu ops (%s), %llu bytes, %llu failures (client %llu, server %llu), "
        "%.2f s, %.1f MB/s\n",
        program, static_cast<unsigned long long>(t.ops), static_cast<unsigned long long>(p.ops),
        t.kinds().c_str(), static_cast<unsigned long long>(t.bytes),
        static_cast<unsigned long long>(failures), static_cast<unsigned long long>(t.failures),
        static_cast<unsigned long long>(std::max(server_failures, server_final)), s,
        s > 0 ? static_cast<double>(t.bytes) / s / 1e6 : 0.0);
    if (p.resize_cq) {
        std::printf("%s: send CQ resized %llu times under outstanding completions\n", program,
                    static_cast<unsigned long long>(resizes));
    }
    return failures == 0 && t.ops == p.ops ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    return run_test_program(argc, argv, program, parse, run_server, run_client);
}
