#pragma once

// The overall time limit of a test program: alarm() ends the process with exit status 3 and a
// line naming the phase it was in, so a lost packet or a silent peer never hangs a test run.

#include <chrono>
#include <string>

namespace jakiro::rdma_test {

constexpr int exit_timeout = 3;

// Arms the limit; `program` prefixes the message. Call once, early in main.
void arm_deadline(const char* program, int seconds);

// The name given to arm_deadline, for messages.
const char* program_name();

// What the program is doing now, for the timeout message. `phase` must outlive the call's
// effect (a string literal).
void set_phase(const char* phase);

// Milliseconds left before the limit fires (at least 1, so it can be used for poll()).
int remaining_ms();

// The point in time the limit fires.
std::chrono::steady_clock::time_point deadline();

}  // namespace jakiro::rdma_test
