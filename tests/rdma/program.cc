#include "tests/rdma/program.hh"

#include <cstdio>

#include "tests/rdma/deadline.hh"
#include "tests/rdma/test_error.hh"

namespace jakiro::rdma_test {

int run_side(const char* program, int timeout_s, const std::function<int()>& side) {
    arm_deadline(program, timeout_s);
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    try {
        return side();
    } catch (const test_error& e) {
        report_error(e);
        return 1;
    }
}

}  // namespace jakiro::rdma_test
