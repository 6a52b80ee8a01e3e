#include "tests/rdma/test_error.hh"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>

#include "tests/rdma/deadline.hh"

namespace jakiro::rdma_test {

namespace {

// Single-threaded programs: plain globals.
std::string last_error;
bool last_reported = false;

void print(const std::string& what) {
    std::fprintf(stderr, "%s: error: %s\n", program_name(), what.c_str());
    std::fflush(stderr);
    last_reported = true;
}

}  // namespace

test_error::test_error(const std::string& what) : std::runtime_error(what) {
    last_error = what;
    last_reported = false;
}

std::string errno_text(const std::string& what) {
    return what + ": " + std::strerror(errno);
}

void report_unwinding_error() {
    if (std::uncaught_exceptions() > 0 && !last_reported && !last_error.empty()) {
        print(last_error);
    }
}

void report_error(const test_error& e) {
    if (!last_reported || last_error != e.what()) {
        print(e.what());
    }
}

}  // namespace jakiro::rdma_test
