#pragma once
// jakirod's log: one structured line per event on stderr, `key=value` pairs (logfmt), rate
// limited. Under systemd (stderr is the journal: $JOURNAL_STREAM names it) each line starts
// with its syslog priority ("<6>") and carries no timestamp, so journald keeps the level and
// the time; elsewhere it starts with ts=... (UTC). DPDK's own log goes through here too
// (redirect_dpdk), one line per message, as event=dpdk.
//
// Nothing logs per packet: the datapath counts (jakiroctl stats, /metrics); lines are for
// events (start, apply, a port that failed). The rate limit keeps a storm of one event from
// flooding the journal all the same: each event may write `burst` lines per `window`, the rest
// are counted and the next line of that event that is let through says `suppressed=N`.
//
// Thread-safety: any thread (a mutex serialises the lines).

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace jakiro::log {

enum class level : int { error = 3, warning = 4, notice = 5, info = 6, debug = 7 };

struct field {
    std::string_view key;
    std::string value;
    field(std::string_view k, std::string_view v) : key(k), value(v) {}
    field(std::string_view k, const char* v) : key(k), value(v) {}
    field(std::string_view k, const std::string& v) : key(k), value(v) {}
    template <typename N, typename = decltype(std::to_string(N{}))>
    field(std::string_view k, N n) : key(k), value(std::to_string(n)) {}
};

// Writes `level=... event=... host=... msg="..." key=value...`.
void write(level lvl, std::string_view event, std::string_view message,
           std::initializer_list<field> fields = {});
inline void error(std::string_view event, std::string_view message,
                  std::initializer_list<field> fields = {}) {
    write(level::error, event, message, fields);
}
inline void warning(std::string_view event, std::string_view message,
                    std::initializer_list<field> fields = {}) {
    write(level::warning, event, message, fields);
}
inline void info(std::string_view event, std::string_view message,
                 std::initializer_list<field> fields = {}) {
    write(level::info, event, message, fields);
}

// Every line after this carries host=NAME.
void set_host(std::string name);
// Per event: at most `burst` lines in any `window_ms` (defaults 20 in 10 s).
void set_rate_limit(unsigned burst, unsigned window_ms);
// Lines held back by the rate limit so far.
uint64_t suppressed();
// DPDK's log (rte_log) goes through write() from now on; call before rte_eal_init.
void redirect_dpdk();

// For tests: one value as logfmt writes it (quoted when it has spaces, quotes, '=' ...).
std::string quote(std::string_view value);

}  // namespace jakiro::log
