#include "tests/rdma/options.hh"

#include <getopt.h>

#include <cstdio>

#include "tests/rdma/test_error.hh"

namespace jakiro::rdma_test {

namespace {

std::vector<program_option> side_options(side_params& p) {
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

}  // namespace

void parse_side_options(int argc, char** argv, const char* program, side_params& p,
                        std::vector<program_option> own, void (*usage)(int)) {
    std::vector<program_option> options = side_options(p);
    options.insert(options.end(), std::make_move_iterator(own.begin()),
                   std::make_move_iterator(own.end()));
    // getopt_long reports option i as val 256 + i; --help is the last.
    std::vector<option> longs;
    for (std::size_t i = 0; i < options.size(); ++i) {
        longs.push_back({options[i].name, options[i].takes_value ? required_argument : no_argument,
                         nullptr, static_cast<int>(256 + i)});
    }
    const int help = static_cast<int>(256 + options.size());
    longs.push_back({"help", no_argument, nullptr, help});
    longs.push_back({nullptr, 0, nullptr, 0});
    try {
        for (int c; (c = getopt_long(argc, argv, "", longs.data(), nullptr)) != -1;) {
            if (c == help) {
                usage(0);
            }
            if (c < 256 || c >= help) {
                usage(2);
            }
            options[static_cast<std::size_t>(c - 256)].set(optarg != nullptr ? optarg : "");
        }
    } catch (const test_error& e) {
        std::fprintf(stderr, "%s: %s\n", program, e.what());
        usage(2);
    }
    if (optind != argc || p.server == !p.connect_ip.empty() || p.timeout_s <= 0) {
        usage(2);
    }
}

}  // namespace jakiro::rdma_test
