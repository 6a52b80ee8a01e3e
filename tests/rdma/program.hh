#pragma once

// The main() every test program here shares: its command line parsed, the overall time limit
// armed (deadline.hh), stdout line-buffered (the integration tests read it as it comes), one
// side run, and a test_error reported once with exit status 1.
//
//   int main(int argc, char** argv) {
//       return run_test_program(argc, argv, program, parse, run_server, run_client);
//   }

#include <functional>

namespace jakiro::rdma_test {

// Arms the time limit, then runs `side`: its result, or 1 after a test_error.
int run_side(const char* program, int timeout_s, const std::function<int()>& side);

// `parse` exits (usage) on a bad command line; a Params says server, timeout_s (side_params).
template <typename Params>
int run_test_program(int argc, char** argv, const char* program, Params (*parse)(int, char**),
                     int (*run_server)(Params&), int (*run_client)(Params&)) {
    Params p = parse(argc, argv);
    return run_side(program, p.timeout_s, [&] { return p.server ? run_server(p) : run_client(p); });
}

}  // namespace jakiro::rdma_test
