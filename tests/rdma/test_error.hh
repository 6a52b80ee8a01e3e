#pragma once

// The one exception of the test programs. Releasing verbs resources can block (a daemon that
// stopped answering), and destructors run while an exception unwinds, before main's catch
// prints it: so the first resource destructor that runs during unwinding reports the error
// first (report_unwinding_error), and main's report_error does not repeat it.

#include <stdexcept>
#include <string>

namespace jakiro::rdma_test {

struct test_error : std::runtime_error {
    explicit test_error(const std::string& what);
};

// "what: strerror(errno)".
std::string errno_text(const std::string& what);

// In a destructor: if an exception is unwinding, print the last test_error now (once).
void report_unwinding_error();
// In main's catch: print `e` unless report_unwinding_error did.
void report_error(const test_error& e);

}  // namespace jakiro::rdma_test
