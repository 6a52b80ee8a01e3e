#pragma once

// The command lines of the test programs here: every program is one side of a pair (--server
// or --connect IP, --port, --timeout) on a device (--device, --ib-port, --gid-index), plus
// options of its own. One parser, so they all read and refuse arguments the same way.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rc_link.hh"
#include "tcp_line.hh"

namespace jakiro::rdma_test {

struct program_option {
    const char* name;  // the long option, without "--"
    bool takes_value;
    std::function<void(const std::string& value)> set;  // may throw test_error (a bad number)
};

// The options every program takes, writing into its params (fields server, connect_ip, port,
// timeout_s and link).
template <typename Params>
std::vector<program_option> side_options(Params& p) {
    return {
        {"server", false, [&p](const std::string&) { p.server = true; }},
        {"connect", true, [&p](const std::string& v) { p.connect_ip = v; }},
        {"port", true,
         [&p](const std::string& v) { p.port = static_cast<uint16_t>(parse_u64(v)); }},
        {"timeout", true,
         [&p](const std::string& v) { p.timeout_s = static_cast<int>(parse_u64(v)); }},
        {"device", true, [&p](const std::string& v) { p.link.device = v; }},
        {"ib-port", true,
         [&p](const std::string& v) { p.link.ib_port = static_cast<uint8_t>(parse_u64(v)); }},
        {"gid-index", true,
         [&p](const std::string& v) { p.link.gid_index = static_cast<int>(parse_u64(v)); }},
    };
}

// Parses argv with `options` (and --help): `usage(0)` for --help, `usage(2)` for an unknown
// option, a bad value (its message first) or a stray argument.
void parse_options(int argc, char** argv, const char* program,
                   const std::vector<program_option>& options, void (*usage)(int));

// Exactly one of --server and --connect.
template <typename Params>
bool one_side(const Params& p) {
    return p.server == p.connect_ip.empty();
}

}  // namespace jakiro::rdma_test
