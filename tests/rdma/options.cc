#include "options.hh"

#include <getopt.h>

#include <cstdio>

#include "test_error.hh"

namespace jakiro::rdma_test {

void parse_options(int argc, char** argv, const char* program,
                   const std::vector<program_option>& options, void (*usage)(int)) {
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
    if (optind != argc) {
        usage(2);
    }
}

}  // namespace jakiro::rdma_test
