#pragma once
// The completion opcode of a send work request: what the engine reports for a finished WR and
// what a flushed one reports (the spec leaves an error's opcode undefined; programs print it,
// so both ends of Jakiro say the one the WR asked for). Shared by jakirod and the shim.

#include <infiniband/verbs.h>

#include <cstdint>

namespace jakiro::verbs_proto {

constexpr ibv_wc_opcode wc_opcode_of(uint32_t wr_opcode) {
    switch (wr_opcode) {
        case IBV_WR_RDMA_WRITE:
        case IBV_WR_RDMA_WRITE_WITH_IMM:
            return IBV_WC_RDMA_WRITE;
        case IBV_WR_RDMA_READ:
            return IBV_WC_RDMA_READ;
        case IBV_WR_ATOMIC_CMP_AND_SWP:
            return IBV_WC_COMP_SWAP;
        case IBV_WR_ATOMIC_FETCH_AND_ADD:
            return IBV_WC_FETCH_ADD;
        case IBV_WR_ATOMIC_WRITE:
            return IBV_WC_ATOMIC_WRITE;
        case IBV_WR_BIND_MW:
            return IBV_WC_BIND_MW;
        case IBV_WR_LOCAL_INV:
            return IBV_WC_LOCAL_INV;
        default:
            return IBV_WC_SEND;
    }
}

}  // namespace jakiro::verbs_proto
