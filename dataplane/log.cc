#include "dataplane/log.hh"

#include <rte_log.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <mutex>

namespace jakiro::log {

namespace {

struct event_budget {
    std::chrono::steady_clock::time_point window_start;
    unsigned used = 0;
    uint64_t held = 0;  // suppressed since the last line of this event
};

struct state {
    std::mutex mutex;
    std::string host;
    unsigned burst = 20;
    std::chrono::milliseconds window{10000};
    std::map<std::string, event_budget, std::less<>> budgets;
    uint64_t suppressed = 0;
    int journal = -1;          // -1: not decided yet
    std::string dpdk_pending;  // a DPDK message not yet ended by a newline
};

state& the() {
    static state s;
    return s;
}

// systemd sets JOURNAL_STREAM=DEV:INODE when stdout/stderr go to the journal.
bool stderr_is_journal() {
    const char* stream = std::getenv("JOURNAL_STREAM");
    struct stat st {};
    if (stream == nullptr || fstat(STDERR_FILENO, &st) != 0) {
        return false;
    }
    unsigned long long dev = 0, ino = 0;
    return std::sscanf(stream, "%llu:%llu", &dev, &ino) == 2 && dev == st.st_dev &&
           ino == st.st_ino;
}

const char* level_name(level lvl) {
    switch (lvl) {
        case level::error:
            return "error";
        case level::warning:
            return "warning";
        case level::notice:
            return "notice";
        case level::info:
            return "info";
        case level::debug:
            return "debug";
    }
    return "info";
}

void append_field(std::string& line, std::string_view key, std::string_view value) {
    line += ' ';
    line += key;
    line += '=';
    line += quote(value);
}

// Writes one finished line (the mutex is held).
void emit(state& s, level lvl, std::string_view event, std::string_view message,
          std::initializer_list<field> fields, uint64_t held) {
    if (s.journal < 0) {
        s.journal = stderr_is_journal() ? 1 : 0;
    }
    std::string line;
    if (s.journal == 1) {
        line = "<" + std::to_string(static_cast<int>(lvl)) + ">";
    } else {
        const auto now = std::chrono::system_clock::now();
        const std::time_t t = std::chrono::system_clock::to_time_t(now);
        const auto ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() %
            1000;
        std::tm tm{};
        gmtime_r(&t, &tm);
        char stamp[96];
        std::snprintf(stamp, sizeof(stamp), "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03dZ ",
                      tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                      tm.tm_sec, static_cast<int>(ms));
        line = stamp;
    }
    line += "level=";
    line += level_name(lvl);
    append_field(line, "event", event);
    if (!s.host.empty()) {
        append_field(line, "host", s.host);
    }
    append_field(line, "msg", message);
    for (const auto& f : fields) {
        append_field(line, f.key, f.value);
    }
    if (held > 0) {
        append_field(line, "suppressed", std::to_string(held));
    }
    line += '\n';
    (void)!::write(STDERR_FILENO, line.data(), line.size());
}

// DPDK's log stream: fopencookie's write; each complete line becomes one event=dpdk line.
ssize_t dpdk_write(void*, const char* data, size_t size) {
    auto& s = the();
    std::string lines;
    {
        std::lock_guard lock(s.mutex);
        s.dpdk_pending.append(data, size);
        const auto last = s.dpdk_pending.rfind('\n');
        if (last == std::string::npos) {
            return static_cast<ssize_t>(size);
        }
        lines = s.dpdk_pending.substr(0, last);
        s.dpdk_pending.erase(0, last + 1);
    }
    // rte_log's levels are syslog's plus one (RTE_LOG_EMERG = 1).
    const int dpdk_level = static_cast<int>(rte_log_cur_msg_loglevel());
    const int syslog_level = std::clamp(dpdk_level - 1, 3, 7);
    std::size_t start = 0;
    while (start <= lines.size()) {
        auto end = lines.find('\n', start);
        if (end == std::string::npos) {
            end = lines.size();
        }
        const std::string_view one(lines.data() + start, end - start);
        if (!one.empty()) {
            write(static_cast<level>(syslog_level), "dpdk", one);
        }
        start = end + 1;
    }
    return static_cast<ssize_t>(size);
}

}  // namespace

std::string quote(std::string_view value) {
    bool plain = !value.empty();
    for (const char c : value) {
        if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == 0x7f) {
            plain = false;
            break;
        }
    }
    if (plain) {
        return std::string(value);
    }
    std::string out = "\"";
    for (const char c : value) {
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\t':
                out += "\\t";
                break;
            default:
                if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
                    char hex[8];
                    std::snprintf(hex, sizeof(hex), "\\x%02x", static_cast<unsigned char>(c));
                    out += hex;
                } else {
                    out += c;
                }
        }
    }
    return out + "\"";
}

void write(level lvl, std::string_view event, std::string_view message,
           std::initializer_list<field> fields) {
    auto& s = the();
    std::lock_guard lock(s.mutex);
    const auto now = std::chrono::steady_clock::now();
    auto it = s.budgets.find(event);
    if (it == s.budgets.end()) {
        it = s.budgets.emplace(std::string(event), event_budget{now, 0, 0}).first;
    }
    auto& budget = it->second;
    if (now - budget.window_start >= s.window) {
        budget.window_start = now;
        budget.used = 0;
    }
    if (budget.used >= s.burst) {
        ++budget.held;
        ++s.suppressed;
        return;
    }
    ++budget.used;
    const uint64_t held = budget.held;
    budget.held = 0;
    emit(s, lvl, event, message, fields, held);
}

void set_host(std::string name) {
    auto& s = the();
    std::lock_guard lock(s.mutex);
    s.host = std::move(name);
}

void set_rate_limit(unsigned burst, unsigned window_ms) {
    auto& s = the();
    std::lock_guard lock(s.mutex);
    s.burst = burst;
    s.window = std::chrono::milliseconds(window_ms);
    s.budgets.clear();
}

uint64_t suppressed() {
    auto& s = the();
    std::lock_guard lock(s.mutex);
    return s.suppressed;
}

void redirect_dpdk() {
    cookie_io_functions_t io{};
    io.write = dpdk_write;
    FILE* stream = fopencookie(nullptr, "w", io);
    if (stream != nullptr) {
        setvbuf(stream, nullptr, _IOLBF, 0);
        rte_openlog_stream(stream);
    }
}

}  // namespace jakiro::log
