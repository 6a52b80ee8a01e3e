#pragma once
// `jakiroctl top`: live rates per shaped vNIC and class, from jakirod's cumulative counters
// (`qos --json`) sampled every interval, next to each class's configured share.

#include <string>

// `command` is "top [--interval S] [--count N]". Returns the process exit status.
int run_top(const std::string& socket_path, const std::string& command);
