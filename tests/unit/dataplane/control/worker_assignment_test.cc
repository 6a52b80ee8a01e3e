#include "dataplane/control/worker_assignment.hh"

#include <gtest/gtest.h>

#include <vector>

namespace jakiro {
namespace {

TEST(WorkerAssignment, OneWorkerOwnsEveryVnic) {
    EXPECT_EQ(least_loaded_worker({}, 1), 0);
    const std::vector<uint8_t> owners{0, 0, 0};
    EXPECT_EQ(least_loaded_worker(owners, 1), 0);
}

TEST(WorkerAssignment, VnicsInConfigOrderAlternateBetweenTwoWorkers) {
    std::vector<uint8_t> owners;
    for (int i = 0; i < 5; ++i) {
        owners.push_back(least_loaded_worker(owners, 2));
    }
    EXPECT_EQ(owners, (std::vector<uint8_t>{0, 1, 0, 1, 0}));
}

TEST(WorkerAssignment, AVnicAddedLiveGoesToTheWorkerARemovalLeftLighter) {
    // Worker 1 lost two of its vNICs to apply: the next one goes there, not round robin.
    const std::vector<uint8_t> owners{0, 0, 1, 2, 2};
    EXPECT_EQ(least_loaded_worker(owners, 3), 1);
}

TEST(WorkerAssignment, OwnersBeyondTheWorkerCountAreIgnored) {
    const std::vector<uint8_t> owners{0, 7, 7, 7};
    EXPECT_EQ(least_loaded_worker(owners, 2), 1);
}

}  // namespace
}  // namespace jakiro
