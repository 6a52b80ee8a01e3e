#pragma once
// Where jakirod's start goes: each phase's wall time from main() to READY=1, logged with the
// `started` line (startup_ms=, phases="eal=... pool=..."). After a crash the next daemon's start
// is the tenants' outage, so it is measured where it happens (perf/restart --crash reads it).

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace jakiro {

class startup_clock {
  public:
    startup_clock() : _begin(clock::now()), _last(_begin) {}

    // Ends the phase that began at the previous mark (or at construction).
    void mark(const char* phase) {
        const auto now = clock::now();
        _phases.push_back({phase, ms(now - _last)});
        _last = now;
    }

    double total_ms() const { return ms(clock::now() - _begin); }

    // "eal=12.3 pool=4.5 ...": each phase in milliseconds, in order.
    std::string phases() const {
        std::string out;
        char number[32];
        for (const auto& p : _phases) {
            std::snprintf(number, sizeof(number), "%.1f", p.ms);
            out += (out.empty() ? "" : " ") + std::string(p.name) + "=" + number;
        }
        return out;
    }

  private:
    using clock = std::chrono::steady_clock;
    struct phase {
        const char* name;
        double ms;
    };
    static double ms(clock::duration d) {
        return std::chrono::duration<double, std::milli>(d).count();
    }
    clock::time_point _begin;
    clock::time_point _last;
    std::vector<phase> _phases;
};

}  // namespace jakiro
