#include "tests/rdma/deadline.hh"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace jakiro::rdma_test {

namespace {

// Read by the SIGALRM handler: atomics of pointers are lock-free, so async-signal-safe.
std::atomic<const char*> program_name_{"rdma_test"};
std::atomic<const char*> current_phase{"starting"};
std::atomic<int> limit_seconds{0};
std::chrono::steady_clock::time_point fires_at = std::chrono::steady_clock::time_point::max();

void write_str(const char* s) {
    const ssize_t r = write(STDERR_FILENO, s, std::strlen(s));
    (void)r;
}

void on_alarm(int) {
    char seconds[16];
    int n = limit_seconds.load();
    char* p = seconds + sizeof(seconds) - 1;
    *p = '\0';
    do {
        *--p = static_cast<char>('0' + n % 10);
        n /= 10;
    } while (n > 0 && p > seconds);
    write_str(program_name_.load());
    write_str(": error: timed out after ");
    write_str(p);
    write_str(" s while ");
    write_str(current_phase.load());
    write_str("\n");
    _exit(exit_timeout);
}

}  // namespace

void arm_deadline(const char* program, int seconds) {
    program_name_ = program;
    limit_seconds = seconds;
    fires_at = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    struct sigaction sa {};
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, nullptr);
    alarm(static_cast<unsigned>(seconds));
}

const char* program_name() {
    return program_name_.load();
}

void set_phase(const char* phase) {
    current_phase = phase;
}

int remaining_ms() {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        fires_at - std::chrono::steady_clock::now());
    return left.count() < 1 ? 1 : left.count() > 1 << 30 ? 1 << 30 : static_cast<int>(left.count());
}

std::chrono::steady_clock::time_point deadline() {
    return fires_at;
}

}  // namespace jakiro::rdma_test
