#pragma once

// The command lines of the test programs here: every program is one side of a pair (--server
// or --connect IP, --port, --timeout) on a device (--device, --ib-port, --gid-index), plus
// options of its own. One parser, so they all read and refuse arguments the same way.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tests/rdma/rc_link.hh"
#include "tests/rdma/tcp_line.hh"

namespace jakiro::rdma_test {

// What every program's params hold (each derives its own from it): which side, where, how
// long, on which device.
struct side_params {
    // The overall limit (deadline.hh) unless --timeout says otherwise.
    static constexpr int default_timeout_s = 60;

    explicit side_params(uint16_t default_port) : port(default_port) {}

    bool server = false;
    std::string connect_ip;
    uint16_t port;
    int timeout_s = default_timeout_s;
    link_options link;
};

struct program_option {
    const char* name;  // the long option, without "--"
    bool takes_value;
    std::function<void(const std::string& value)> set;  // may throw test_error (a bad number)
};

// Parses argv with the side options and the program's `own` (and --help): `usage(0)` for
// --help; `usage(2)` for an unknown option, a bad value (its message first), a stray
// argument, not exactly one of --server and --connect, or a timeout that is not positive.
// The program checks its own options' ranges afterwards.
void parse_side_options(int argc, char** argv, const char* program, side_params& p,
                        std::vector<program_option> own, void (*usage)(int));

}  // namespace jakiro::rdma_test
